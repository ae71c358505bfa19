#ifndef LOOP_H
#define LOOP_H
#include <pthread.h>

#include "cpath.h"
#include "stamp.h"

struct loop;

#define OUT_BATCH 256 /* released packets written together (GRO runs among them) */

struct pump {
    struct loop *loop;
    int dir, in_fd, out_fd;
    /* When this direction wants the thread awake: at want_at, or (flexible: a dense packet
     * alone in its grid period) at any time from want_at to latest_at. NAN: never. */
    double want_at, latest_at;
    double last_release;
    struct stamp stamp; /* the kernel's arrival times, when stamp.mem is set */
    int deferred;       /* its input is not watched: read at each wake-up instead */
    double last_in;     /* the latest arrival time handed to the core */
    uint8_t *scratch;
    struct slot **batch;
    double *when; /* per packet of the batch: the kernel's arrival time, or NAN */
    int capturing;
    uint32_t snaplen;
    int64_t offset_ns;
    struct buf cap_sent, cap_recv;
    struct slot *out[OUT_BATCH]; /* released in this wake-up, not yet written */
    size_t n_out;
};

/* What the thread did, for the benchmark's CPU per packet and per wake-up. */
struct loop_counters {
    uint64_t wakeups, timer_wakeups, reads, super_packets, writes, gro_packets, gro_segments;
    uint64_t gro_refused; /* super-packets the kernel refused (then written one by one) */
    uint64_t kernel_stamps, read_stamps; /* packets timed by the kernel, by their read */
    uint64_t input_wakeups; /* epoll's input events: a watched device with packets to read */
};

struct loop {
    struct loop_counters counters;
    struct path *path;
    pthread_mutex_t *lock;
    struct pump pumps[N_DIRS];
    int n_pumps;
    int epfd, wake_fd, timer_fd; /* one timerfd, armed for the earliest wake either wants */
    double armed_at;             /* NAN: disarmed (or fired) */
    double last_wake;            /* when epoll_wait last returned: coalescing counts from it */
    double early_s, dense_gap_s, coalesce_s;
    int vnet;
    unsigned gro; /* GRO_TCP | GRO_UDP: the kinds merged; a kind the TUN refuses is dropped */
    int stamps;   /* take arrival times from the kernel (stamp.h) where it allows */
    char stamp_why[160]; /* why it does not, if it does not */
    pthread_t thread;
    volatile int stop;
    int running;
    char err[256];
};

double mono_now(void);
int loop_start(struct loop *L);
void loop_stop(struct loop *L);
void capture_add(struct buf *b, uint32_t snaplen, int64_t offset_ns, double when,
                 const uint8_t *pkt, uint32_t len);
#endif
