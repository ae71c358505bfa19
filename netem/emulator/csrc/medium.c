/* The shared medium of an air= link (netem/emulator/medium.py, the reference; the PHY
 * arithmetic is netem/air.py's, its constants computed there and handed over). */
#include <math.h>

#include "cpath.h"



#define IPPROTO_TCP_ 6
#define ACK_ONLY_MAX_IP_BYTES 128 /* netem/air.py */

/* medium.frame_kind: 1 for an ACK-only frame. */
int frame_is_ack(const uint8_t *pkt, size_t size)
{
    if (size >= 20) {
        int version = pkt[0] >> 4;
        if (version == 4 && pkt[9] == IPPROTO_TCP_) {
            size_t ihl = (size_t)(pkt[0] & 0x0F) * 4;
            if (size >= ihl + 13) {
                long total = (long)(pkt[2] << 8 | pkt[3]);
                return total - (long)ihl - (long)(pkt[ihl + 12] >> 4) * 4 <= 0;
            }
        } else if (version == 6 && size >= 53 && pkt[6] == IPPROTO_TCP_) {
            long payload = (long)(pkt[4] << 8 | pkt[5]);
            return payload - (long)(pkt[52] >> 4) * 4 <= 0;
        }
    }
    return size <= ACK_ONLY_MAX_IP_BYTES;
}

/* AirSpec.ppdu_ns at the data rate (17.4.3): preamble + signal + symbols. */
static int64_t data_ppdu_ns(const struct air_params *a, int64_t psdu_bytes)
{
    int64_t bits = 16 + 8 * psdu_bytes + 6;
    int64_t symbols = (bits + a->n_dbps - 1) / a->n_dbps;
    return a->pre_sig_ns + symbols * a->symbol_ns;
}

#define MAX_AMPDU 256

static void exchange(struct path *p, int dir, double start)
{
    struct medium *m = p->medium;
    struct air_params *a = &m->air;
    struct ring *q = &m->q[dir];
    struct ent frames[MAX_AMPDU];
    size_t n = 0;
    frames[n++] = ring_pop(q);
    while (n < a->ampdu_frames && n < MAX_AMPDU && q->len && ring_front(q)->t1 <= start)
        frames[n++] = ring_pop(q);
    int64_t backoff_ns = a->backoff ? a->slot_ns * (int64_t)mt_randbelow(&a->rng, a->cw_min + 1)
                                    : 0;
    int64_t to_end, total, all_bytes = 0;
    for (size_t i = 0; i < n; i++)
        all_bytes += frames[i].pkt->len;
    if (n == 1) {
        to_end = a->access_ns + data_ppdu_ns(a, frames[0].pkt->len + a->mac_overhead_bytes);
        total = to_end + a->sifs_ns + a->ack_ppdu_ns;
    } else {
        int64_t psdu = 0;
        for (size_t i = 0; i < n; i++)
            psdu += 4 + ((frames[i].pkt->len + a->mac_overhead_bytes + 3) / 4 * 4);
        to_end = a->access_ns + data_ppdu_ns(a, psdu);
        total = to_end + a->sifs_ns + a->block_ack_ppdu_ns;
    }
    to_end += backoff_ns;
    total += backoff_ns;
    m->free_s = start + (double)total * 1e-9;
    m->last = dir;
    double delivered = start + (double)to_end * 1e-9;
    struct air_stats *st = &m->st;
    st->exchanges[dir]++;
    int64_t left = total;
    for (size_t i = 0; i < n; i++) {
        struct slot *s = frames[i].pkt;
        int kind = frame_is_ack(s->data, s->len);
        int64_t share = i == n - 1 ? left : total * (int64_t)s->len / all_bytes;
        left -= share;
        st->frames[dir][kind]++;
        st->ip_bytes[dir][kind] += s->len;
        st->busy_ns[dir][kind] += share;
        st->wait_ns[dir] += (int64_t)llrint((start - frames[i].t1) * 1e9);
        direction_receive(p, &p->d[dir], delivered, s);
    }
}

/* Medium.advance: start every exchange whose start time has come by `now`. */
void medium_advance(struct path *p, double now)
{
    struct medium *m = p->medium;
    struct ring *up = &m->q[DIR_UP], *down = &m->q[DIR_DOWN];
    while (up->len || down->len) {
        double earliest;
        if (up->len && down->len)
            earliest = fmin(ring_front(up)->t1, ring_front(down)->t1);
        else
            earliest = ring_front(up->len ? up : down)->t1;
        double start = m->free_s > earliest ? m->free_s : earliest;
        if (start > now)
            return;
        int up_ready = up->len && ring_front(up)->t1 <= start;
        int down_ready = down->len && ring_front(down)->t1 <= start;
        int dir;
        if (up_ready && down_ready) {
            if (m->air.alternate)
                dir = m->last == DIR_UP ? DIR_DOWN : DIR_UP;
            else
                dir = ring_front(up)->t1 <= ring_front(down)->t1 ? DIR_UP : DIR_DOWN;
        } else {
            dir = up_ready ? DIR_UP : DIR_DOWN;
        }
        exchange(p, dir, start);
    }
}
