#ifndef LOOP_H
#define LOOP_H
#include <pthread.h>

#include "cpath.h"

struct loop;

#define OUT_BATCH 256 /* released packets written together (GRO runs among them) */

struct pump {
    struct loop *loop;
    int dir, in_fd, out_fd, timer_fd;
    double armed_at; /* NAN: disarmed */
    double last_release;
    uint8_t *scratch;
    struct slot **batch;
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
};

struct loop {
    struct loop_counters counters;
    struct path *path;
    pthread_mutex_t *lock;
    struct pump pumps[N_DIRS];
    int n_pumps;
    int epfd, wake_fd;
    double early_s, dense_gap_s, coalesce_s;
    int vnet;
    unsigned gro; /* GRO_TCP | GRO_UDP: the kinds merged; a kind the TUN refuses is dropped */
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
