/* One direction of the link (netem/emulator/core.py, the reference: read its docstring for
 * the pipeline) and the packet log's records (netem/emulator/packetlog.py). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpath.h"

/* --- scheduled events (netem/events.py, DirectionTimeline) ---------------------------- */

static struct event *outage_at(struct direction *d, double t)
{
    for (size_t i = 0; i < d->n_events; i++) {
        struct event *e = &d->events[i];
        if (e->outage && e->start_s <= t && t < e->end_s)
            return e;
    }
    return NULL;
}

static int has_rates(struct direction *d)
{
    for (size_t i = 0; i < d->n_events; i++)
        if (!d->events[i].outage)
            return 1;
    return 0;
}

/* The latest-starting rate event covering t (events are kept sorted by start, stably). */
static double rate_at(struct direction *d, double t, double base, int *limited)
{
    double rate = base;
    for (size_t i = 0; i < d->n_events; i++) {
        struct event *e = &d->events[i];
        if (e->outage)
            continue;
        if (e->start_s > t)
            break;
        if (t < e->end_s) {
            rate = e->rate_bps;
            *limited = 1;
        }
    }
    return rate;
}

/* --- loss (netem/emulator/loss.py) --------------------------------------------------- */

static int loss_draw(struct direction *d)
{
    switch (d->loss_kind) {
    case LOSS_BERNOULLI:
        return mt_random(&d->loss_rng) < d->loss_p;
    case LOSS_GE: {
        int lost;
        if (d->ge_in_bad) {
            lost = mt_random(&d->loss_rng) < d->ge_bad;
            if (mt_random(&d->loss_rng) < d->ge_r)
                d->ge_in_bad = 0;
        } else {
            lost = mt_random(&d->loss_rng) < d->ge_good;
            if (mt_random(&d->loss_rng) < d->ge_p)
                d->ge_in_bad = 1;
        }
        return lost;
    }
    default:
        return 0;
    }
}

/* --- the pipeline ------------------------------------------------------------------- */

static void drop(struct path *p, struct direction *d, double now, int reason, struct slot *s)
{
    if (d->logging)
        log_dropped(d, now, reason, s->data, s->len);
    pool_put(&p->pool, s);
}

/* The serialisation stage: admission to the drop-tail byte queue and the time the packet's
 * last bit leaves the bottleneck (tx_done). A constant rate (RATE_CONSTANT, changed by rate
 * events, seconds per byte `spb`) gives max(now, previous tx_done) + size * spb; a capacity
 * trace (RATE_TRACE, trace.c) answers from its own cursor, with the same queue in front of
 * it. NAN: refused. */
static double serialise(struct direction *d, double now, uint64_t size, double spb)
{
    struct dstats *st = &d->st;
    while (d->queue.len && ring_front(&d->queue)->t1 <= now)
        d->backlog_bytes -= (int64_t)ring_pop(&d->queue).size;
    int64_t backlog = d->backlog_bytes + (int64_t)size;
    if (backlog > d->queue_limit_bytes)
        return NAN;
    double tx_done = d->cap ? cap_trace_serve(d->cap, now, size)
                            : (now > d->tx_done ? now : d->tx_done) + (double)size * spb;
    if (!ring_push(&d->queue, (struct ent){.t1 = tx_done, .size = size}))
        return NAN; /* out of memory: refused like a full queue */
    d->tx_done = tx_done;
    d->backlog_bytes = backlog;
    if ((uint64_t)backlog > st->max_backlog_bytes)
        st->max_backlog_bytes = (uint64_t)backlog;
    if (d->queue.len > st->max_backlog_packets)
        st->max_backlog_packets = d->queue.len;
    return tx_done;
}

/* The propagation stage: when a packet that left the bottleneck at tx_done reaches the far
 * end: the fixed delay with its jitter, or a delay trace's delay at tx_done; the
 * no-reordering rule after it holds for either. */
static double arrival_due(struct direction *d, double tx_done)
{
    double due = tx_done + d->delay_s;
    if (d->dtr) {
        due += delay_trace_delay_s(d->dtr, tx_done);
    } else if (d->jitter_s != 0.0) {
        double a = -d->jitter_s, b = d->jitter_s;
        due += a + (b - a) * mt_random(&d->jitter_rng);
    }
    if (due < d->last_due)
        due = d->last_due;
    d->last_due = due;
    return due;
}

/* The seconds per byte in force at `now` (0 with *limited 0: no rate), rate events first. */
static double rate_in_force(struct direction *d, double now, int *limited)
{
    *limited = d->rate_kind != RATE_UNLIMITED;
    double spb = d->seconds_per_byte;
    if (d->has_timeline && has_rates(d)) {
        int rated = 0;
        double rate = rate_at(d, now, d->rate_bps, &rated);
        *limited = *limited || rated;
        if (*limited) {
            spb = 8.0 / rate;
            if (d->queue_limit_bytes < 0)
                d->queue_limit_bytes = (int64_t)1 << 62;
        }
    }
    return spb;
}

/* LinkDirection.receive: loss draw, outage, drop-tail queue and serialisation, loss
 * applied, delay and jitter. */
void direction_receive(struct path *p, struct direction *d, double now, struct slot *s)
{
    uint64_t size = s->len;
    struct dstats *st = &d->st;
    st->packets_in++;
    st->bytes_in += size;
    int lost = loss_draw(d);
    if (d->has_timeline) {
        struct event *outage = outage_at(d, now);
        if (outage) {
            outage->drops++;
            st->dropped_outage++;
            drop(p, d, now, DROP_OUTAGE, s);
            return;
        }
    }
    int limited;
    double spb = rate_in_force(d, now, &limited);
    double tx_done = limited ? serialise(d, now, size, spb) : now;
    if (isnan(tx_done)) {
        st->dropped_queue++;
        st->bytes_dropped_queue += size;
        drop(p, d, now, DROP_QUEUE, s);
        return;
    }
    if (lost) {
        st->dropped_loss++;
        drop(p, d, now, DROP_LOSS, s);
        return;
    }
    struct ent e = {.t1 = arrival_due(d, tx_done), .t2 = now, .pkt = s};
    if (!ring_push(&d->line, e)) {
        st->dropped_queue++;
        st->bytes_dropped_queue += size;
        drop(p, d, now, DROP_QUEUE, s);
    }
}

size_t path_pop_due(struct path *p, int dir, double now, departure_fn out, void *ctx)
{
    struct direction *d = &p->d[dir];
    if (p->medium)
        medium_advance(p, now);
    struct ring *line = &d->line;
    struct dstats *st = &d->st;
    size_t n = 0;
    while (line->len && ring_front(line)->t1 <= now) {
        struct ent e = ring_pop(line);
        struct slot *s = e.pkt;
        if (d->has_timeline) {
            struct event *outage = outage_at(d, e.t1);
            if (outage) {
                outage->drops++;
                st->dropped_outage++;
                drop(p, d, e.t2, DROP_OUTAGE, s);
                continue;
            }
        }
        double late = now - e.t1;
        st->hist[lateness_bin(late)]++;
        st->lateness_sum_s += late;
        if (late > st->lateness_max_s)
            st->lateness_max_s = late;
        st->packets_out++;
        st->bytes_out += s->len;
        if (d->logging)
            log_departed(d, e.t2, e.t1, now, s->data, s->len);
        out(ctx, dir, s, e.t1, now);
        n++;
    }
    return n;
}

int path_next_deadline(struct path *p, int dir, double *deadline)
{
    struct direction *d = &p->d[dir];
    int have = 0;
    if (d->line.len) {
        *deadline = ring_front(&d->line)->t1;
        have = 1;
    }
    struct medium *m = p->medium;
    if (m && m->q[dir].len) {
        /* Medium.next_start_s */
        struct ring *other = &m->q[1 - dir];
        double earliest = ring_front(&m->q[dir])->t1;
        if (other->len && ring_front(other)->t1 < earliest)
            earliest = ring_front(other)->t1;
        double start = m->free_s > earliest ? m->free_s : earliest;
        if (!have || start < *deadline)
            *deadline = start;
        have = 1;
    }
    return have;
}

int path_second_due(struct path *p, int dir, double *due)
{
    struct ring *line = &p->d[dir].line;
    if (line->len < 2)
        return 0;
    *due = line->buf[(line->head + 1) & (line->cap - 1)].t1;
    return 1;
}

void path_receive(struct path *p, int dir, double now, struct slot *s)
{
    struct medium *m = p->medium;
    if (!m) {
        direction_receive(p, &p->d[dir], now, s);
        return;
    }
    /* Medium.offer, then AirDirection.receive's refusal */
    struct ring *q = &m->q[dir];
    if (q->len >= m->air.queue_packets || !ring_push(q, (struct ent){.t1 = now, .pkt = s})) {
        m->st.dropped[dir]++;
        struct direction *d = &p->d[dir];
        d->st.packets_in++;
        d->st.bytes_in += s->len;
        d->st.dropped_queue++;
        d->st.bytes_dropped_queue += s->len;
        drop(p, d, now, DROP_QUEUE, s);
        return;
    }
    medium_advance(p, now);
}

int path_init(struct path *p, size_t mtu_bytes)
{
    memset(p, 0, sizeof(*p));
    pool_init(&p->pool, mtu_bytes);
    for (int i = 0; i < N_DIRS; i++) {
        struct direction *d = &p->d[i];
        d->dir = i;
        d->queue_limit_bytes = -1;
        d->tx_done = -INFINITY;
        d->last_due = -INFINITY;
        d->log.limit = 512u << 20;
    }
    return 0;
}

void direction_drop_traces(struct direction *d)
{
    if (d->cap) {
        free(d->cap->stamps_ms);
        free(d->cap);
        d->cap = NULL;
    }
    if (d->dtr) {
        free(d->dtr->times_ms);
        free(d->dtr->delays_ms);
        free(d->dtr);
        d->dtr = NULL;
    }
}

void path_free(struct path *p)
{
    for (int i = 0; i < N_DIRS; i++) {
        struct direction *d = &p->d[i];
        ring_free(&d->queue);
        ring_free(&d->line);
        buf_free(&d->log);
        free(d->events);
        direction_drop_traces(d);
    }
    if (p->medium) {
        ring_free(&p->medium->q[0]);
        ring_free(&p->medium->q[1]);
        free(p->medium);
    }
    pool_free(&p->pool);
}

/* --- the packet log (netem/emulator/packetlog.py: _RECORD "<BdddIBHHIIBHH") ---------- */

static uint16_t be16(const uint8_t *b) { return (uint16_t)(b[0] << 8 | b[1]); }
static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

struct headers {
    uint8_t proto, flags;
    uint16_t sport, dport, window, ip_id;
    uint32_t seq, ack;
};

static void parse_headers(const uint8_t *p, size_t len, struct headers *h)
{
    memset(h, 0, sizeof(*h));
    size_t ihl;
    if (!len)
        return;
    int version = p[0] >> 4;
    if (version == 4 && len >= 20) {
        ihl = (size_t)(p[0] & 0x0F) * 4;
        h->proto = p[9];
        h->ip_id = be16(p + 4);
        if (((p[6] & 0x1F) << 8 | p[7]) != 0)
            return;
    } else if (version == 6 && len >= 40) {
        ihl = 40;
        h->proto = p[6];
    } else {
        return;
    }
    if (h->proto == 6 && len >= ihl + 20) {
        h->sport = be16(p + ihl);
        h->dport = be16(p + ihl + 2);
        h->seq = be32(p + ihl + 4);
        h->ack = be32(p + ihl + 8);
        h->flags = p[ihl + 13];
        h->window = be16(p + ihl + 14);
    } else if (h->proto == 17 && len >= ihl + 4) {
        h->sport = be16(p + ihl);
        h->dport = be16(p + ihl + 2);
    }
}

#define PUT(ptr, value)                            \
    do {                                           \
        __typeof__(value) v_ = (value);            \
        memcpy((ptr), &v_, sizeof(v_));            \
        (ptr) += sizeof(v_);                       \
    } while (0)

static void log_record(struct direction *d, uint8_t event, double arrival, double due,
                       double departure, const uint8_t *pkt, size_t len)
{
    struct buf *b = &d->log;
    if (!buf_reserve(b, LOG_RECORD_BYTES)) {
        b->dropped++;
        return;
    }
    struct headers h;
    parse_headers(pkt, len, &h);
    uint8_t *w = b->data + b->len;
    PUT(w, event);
    PUT(w, arrival);
    PUT(w, due);
    PUT(w, departure);
    PUT(w, (uint32_t)len);
    PUT(w, h.proto);
    PUT(w, h.sport);
    PUT(w, h.dport);
    PUT(w, h.seq);
    PUT(w, h.ack);
    PUT(w, h.flags);
    PUT(w, h.window);
    PUT(w, h.ip_id);
    b->len += LOG_RECORD_BYTES;
    b->records++;
}

void log_departed(struct direction *d, double arrival, double due, double now,
                  const uint8_t *pkt, size_t len)
{
    log_record(d, 0, arrival, due, now, pkt, len);
}

void log_dropped(struct direction *d, double arrival, int reason, const uint8_t *pkt,
                 size_t len)
{
    log_record(d, (uint8_t)reason, arrival, NAN, NAN, pkt, len);
}
