/* The emulator's per-packet path in C: the same pipeline as netem/emulator/core.py and
 * medium.py (the reference), driven either by the Python tests (sans-I/O: every call takes
 * `now`) or by the packet thread of loop.c (TUN fds, one timerfd for both directions).
 *
 * Times are CLOCK_MONOTONIC seconds as doubles, computed with the same operations in the
 * same order as the Python core, so that one seed and one input give the same drops and
 * the same departure times, bit for bit. */
#ifndef CPATH_H
#define CPATH_H

#include <stddef.h>
#include <stdint.h>

#define N_DIRS 2
#define DIR_UP 0
#define DIR_DOWN 1

/* netem/stats.py: 10 µs bins below 10 ms, 1 ms bins up to 1 s, one bin above. */
#define LATENESS_FINE_BINS 1000
#define LATENESS_BINS (1000 + 990 + 1)

/* linux/virtio_net.h: the header before each packet on a TUN with IFF_VNET_HDR. */
struct vnet_hdr {
    uint8_t flags;
    uint8_t gso_type;
    uint16_t hdr_len;
    uint16_t gso_size;
    uint16_t csum_start;
    uint16_t csum_offset;
} __attribute__((packed));
#define VNET_HDR_BYTES 10
#define VNET_F_NEEDS_CSUM 1
#define VNET_GSO_NONE 0
#define VNET_GSO_TCPV4 1
#define VNET_GSO_UDP 3
#define VNET_GSO_TCPV6 4
#define VNET_GSO_ECN 0x80

/* One packet: its vnet header (zero unless the TUN uses one) and its IP bytes. */
struct slot {
    struct slot *next_free;
    uint32_t len;
    struct vnet_hdr vh;
    uint8_t data[];
};

struct pool {
    struct slot *free;
    size_t slot_bytes;  /* capacity of data[] */
    size_t allocated;
    void **chunks;
    size_t n_chunks, cap_chunks;
};

int pool_init(struct pool *p, size_t capacity_bytes);
struct slot *pool_get(struct pool *p); /* NULL only when memory is exhausted */
void pool_put(struct pool *p, struct slot *s);
void pool_free(struct pool *p);

/* A FIFO of entries, grown by doubling (never per packet once warm). */
struct ent {
    double t1, t2;
    struct slot *pkt;
    uint64_t size;
};
struct ring {
    struct ent *buf;
    size_t cap, head, len;
};
int ring_push(struct ring *r, struct ent e);
static inline struct ent *ring_front(struct ring *r) { return &r->buf[r->head]; }
static inline struct ent ring_pop(struct ring *r)
{
    struct ent e = r->buf[r->head];
    r->head = (r->head + 1) & (r->cap - 1);
    r->len--;
    return e;
}
void ring_free(struct ring *r);

/* MT19937 exactly as CPython's random.Random; state taken from Random.getstate(). */
struct mt {
    uint32_t state[624];
    int index;
};
double mt_random(struct mt *m);
uint32_t mt_randbelow(struct mt *m, uint32_t n);

/* A growable byte buffer with a cap: the packet log and the pcap records. */
struct buf {
    uint8_t *data;
    size_t len, cap, limit;
    uint64_t records, dropped;
};
int buf_reserve(struct buf *b, size_t more); /* 0: no room (counted by the caller) */
void buf_free(struct buf *b);

#define LOSS_NONE 0
#define LOSS_BERNOULLI 1
#define LOSS_GE 2

#define DROP_QUEUE 1
#define DROP_LOSS 2
#define DROP_OUTAGE 3

struct dstats {
    uint64_t packets_in, bytes_in, packets_out, bytes_out, dropped_loss, dropped_queue,
        bytes_dropped_queue, dropped_outage, write_errors, max_backlog_bytes,
        max_backlog_packets;
    double lateness_sum_s, lateness_max_s;
    uint64_t hist[LATENESS_BINS];
};

struct event {
    int index;    /* position in the engine's list of events */
    int outage;   /* 1: outage, 0: rate change */
    double start_s, end_s;
    double rate_bps;
    uint64_t drops;
};

/* Where the serialisation time of a packet comes from: a constant rate (with rate events)
 * or a capacity trace's delivery opportunities; both answer tx_done of a packet of `size`
 * bytes offered at `now`. */
#define RATE_UNLIMITED 0
#define RATE_CONSTANT 1
#define RATE_TRACE 2

/* netem/trace.py OPPORTUNITY_BYTES: IP bytes one delivery opportunity carries. */
#define OPPORTUNITY_BYTES 1500

/* A capacity trace on the direction's trace clock (netem/emulator/tracelink.py
 * TraceServer): its stamps (ms, one opportunity each, repeating with period = the last),
 * where the clock started, and the server's cursor. */
struct cap_trace {
    int64_t *stamps_ms;
    size_t count;
    int64_t period_ms;
    double origin_s, offset_ms;
    int64_t next_k;     /* the first opportunity no packet has used */
    double tx_done_s;   /* when the last packet left */
    int64_t left_bytes; /* bytes of that opportunity no packet has taken */
};

/* A one-way delay trace on the trace clock (tracelink.py DelayCurve, trace.py DelayTrace). */
struct delay_trace {
    double *times_ms, *delays_ms;
    size_t count;
    double period_ms;
    double origin_s, offset_ms;
    int linear;
};

struct direction;
double cap_trace_serve(struct cap_trace *c, double now, uint64_t size);
int64_t cap_trace_first_at_or_after(const struct cap_trace *c, double position_ms);
double delay_trace_delay_s(const struct delay_trace *t, double at);
void direction_drop_traces(struct direction *d); /* frees and clears both (core.c) */

struct direction {
    int dir;
    /* spec */
    int loss_kind;
    double loss_p;
    double ge_p, ge_r, ge_bad, ge_good;
    int ge_in_bad;
    struct mt loss_rng, jitter_rng;
    double delay_s, jitter_s;
    int rate_kind;
    double rate_bps;
    double seconds_per_byte;
    struct cap_trace *cap;    /* RATE_TRACE's trace, else NULL */
    struct delay_trace *dtr; /* a delay trace instead of delay and jitter, or NULL */
    double min_delay_s;      /* the least delay a packet can get (loop.c's deferral) */
    int64_t queue_limit_bytes; /* -1: none */
    /* state */
    struct ring queue;  /* t1 = tx_done, size */
    int64_t backlog_bytes;
    double tx_done, last_due;
    struct ring line;   /* t1 = due, t2 = arrival, pkt */
    int has_timeline;
    struct event *events;
    size_t n_events, cap_events;
    struct dstats st;
    struct buf log;
    int logging;
};

struct air_params {
    int64_t access_ns, sifs_ns, slot_ns, ack_ppdu_ns, block_ack_ppdu_ns, pre_sig_ns,
        symbol_ns;
    int64_t n_dbps, mac_overhead_bytes;
    uint32_t cw_min, ampdu_frames, queue_packets;
    int backoff, alternate;
    struct mt rng;
};

/* AirStats, by direction (0 up, 1 down) and kind (0 data, 1 ack). */
struct air_stats {
    uint64_t frames[2][2], ip_bytes[2][2];
    int64_t busy_ns[2][2];
    uint64_t exchanges[2], dropped[2];
    int64_t wait_ns[2];
};

struct medium {
    struct air_params air;
    struct ring q[2];  /* t1 = arrival, pkt */
    double free_s;
    int last;          /* direction of the last exchange */
    struct air_stats st;
};

struct path {
    struct pool pool;
    struct direction d[N_DIRS];
    struct medium *medium; /* NULL without air= */
};

int path_init(struct path *p, size_t mtu_bytes);
void path_free(struct path *p);
/* Offer a packet read at `now`; the path owns the slot from then on. */
void path_receive(struct path *p, int dir, double now, struct slot *s);
/* The earliest time direction `dir` needs the thread (a departure or a medium start). */
int path_next_deadline(struct path *p, int dir, double *deadline);
/* Hand out the packets due by `now`, in order, through `out` (which must give the slot
 * back to the pool); returns how many. */
typedef void (*departure_fn)(void *ctx, int dir, struct slot *s, double due, double now);
size_t path_pop_due(struct path *p, int dir, double now, departure_fn out, void *ctx);
/* The departure time of the second packet in line (the batching decision of loop.c). */
int path_second_due(struct path *p, int dir, double *due);
void medium_advance(struct path *p, double now);
void direction_receive(struct path *p, struct direction *d, double now, struct slot *s);
int frame_is_ack(const uint8_t *pkt, size_t len);

void log_departed(struct direction *d, double arrival, double due, double now,
                  const uint8_t *pkt, size_t len);
void log_dropped(struct direction *d, double arrival, int reason, const uint8_t *pkt,
                 size_t len);
#define LOG_RECORD_BYTES 47

static inline int lateness_bin(double late)
{
    if (late < 10e-3)
        return late > 0 ? (int)(late * 1e5) : 0;
    if (late < 1.0)
        return LATENESS_FINE_BINS + (int)((late - 10e-3) * 1e3);
    return LATENESS_BINS - 1;
}

/* gso.c: split a TCP super-packet into segments of gso_size, each a slot with a partial
 * checksum (NEEDS_CSUM); returns how many (0: not one this code can split). */
size_t gso_segment(struct pool *pool, const struct vnet_hdr *vh, const uint8_t *pkt,
                   size_t len, struct slot **out, size_t max_out);

/* gso.c: GRO on delivery. How many of segs[0..n) (at least 1) go to the receiving stack as
 * one TCP or UDP super-packet (of the `kinds` asked for); when more than one, `hdr` (GRO_MAX_HEADER_BYTES) gets the run's IP
 * and TCP headers (lengths, IPv4 checksum, PSH, the TCP pseudo-header sum) and `vh` its
 * vnet header; the payloads follow from each segment at gro_header_bytes(segs). */
#define GRO_MAX_SEGMENTS 64 /* bounds the writev; 64 KB (the IP length) binds first */
#define GRO_MAX_HEADER_BYTES (40 + 60)
#define GRO_TCP 1u
#define GRO_UDP 2u /* VIRTIO_NET_HDR_GSO_UDP_L4: a TUN takes it from Linux 6.2 on */
size_t gro_run(struct slot *const *segs, size_t n, uint8_t *hdr, struct vnet_hdr *vh,
               unsigned kinds);
int gro_is_udp(const struct vnet_hdr *vh);
size_t gro_header_bytes(struct slot *const *segs);

#endif
