/* A direction's traces in C: the capacity trace's server and the delay trace's curve,
 * with the same arithmetic in the same order as netem/emulator/tracelink.py and
 * netem/trace.py (the reference: read their docstrings for mm-link's byte accounting), so
 * that one trace and one input give the same departure times, bit for bit. */
#include <math.h>

#include "cpath.h"

/* Where the trace is at time t (ms from its start, before wrapping): TraceServer.position_ms */
static double position_ms(double origin_s, double offset_ms, double t)
{
    return (t - origin_s) * 1e3 + offset_ms;
}

/* CapacityTrace.time_ms: when opportunity k (counted over every repetition) may be used. */
static int64_t time_ms(const struct cap_trace *c, int64_t k)
{
    int64_t cycle = k / (int64_t)c->count, index = k % (int64_t)c->count;
    return cycle * c->period_ms + c->stamps_ms[index];
}

/* bisect.bisect_left(stamps, x): the first index whose stamp is >= x. */
static size_t bisect_left(const int64_t *a, size_t n, double x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((double)a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* CapacityTrace.first_at_or_after: the index of the first opportunity at position_ms or
 * later. Positions in (cycle * P, (cycle + 1) * P] belong to that cycle's stamps. */
int64_t cap_trace_first_at_or_after(const struct cap_trace *c, double pos)
{
    if (pos <= 0)
        return 0;
    int64_t cycle = (int64_t)ceil(pos / (double)c->period_ms) - 1;
    size_t index = bisect_left(c->stamps_ms, c->count, pos - (double)(cycle * c->period_ms));
    if (index > c->count - 1)
        index = c->count - 1;
    return cycle * (int64_t)c->count + (int64_t)index;
}

/* TraceServer.instant_s: the time of opportunity k. */
static double instant_s(const struct cap_trace *c, int64_t k)
{
    return c->origin_s + ((double)time_ms(c, k) - c->offset_ms) * 1e-3;
}

/* TraceServer.serve: queue a packet of `size` bytes offered at `now`; when its last byte
 * leaves (the instant of the opportunity that completes it). */
double cap_trace_serve(struct cap_trace *c, double now, uint64_t size)
{
    int64_t need = (int64_t)size;
    if (now <= c->tx_done_s) { /* busy: this packet follows the last one */
        int64_t take = c->left_bytes < need ? c->left_bytes : need;
        c->left_bytes -= take;
        need -= take;
        if (need == 0)
            return c->tx_done_s;
    } else { /* idle: the last opportunity's bytes are lost, start from now */
        int64_t k = cap_trace_first_at_or_after(c, position_ms(c->origin_s, c->offset_ms, now));
        if (k > c->next_k)
            c->next_k = k;
    }
    int64_t used = (need + OPPORTUNITY_BYTES - 1) / OPPORTUNITY_BYTES;
    int64_t last = c->next_k + used - 1;
    c->next_k = last + 1;
    c->left_bytes = used * OPPORTUNITY_BYTES - need;
    c->tx_done_s = instant_s(c, last);
    return c->tx_done_s;
}

/* bisect.bisect_right(times, x): the first index whose time is > x. */
static size_t bisect_right(const double *a, size_t n, double x)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (x < a[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* DelayCurve.delay_s: the delay (s) a packet leaving the bottleneck at `at` gets, from
 * DelayTrace.delay_ms at the trace's position (wrapping; step or linear). */
double delay_trace_delay_s(const struct delay_trace *t, double at)
{
    double pos = position_ms(t->origin_s, t->offset_ms, at);
    double x = pos > 0 ? fmod(pos, t->period_ms) : 0.0;
    size_t index = bisect_right(t->times_ms, t->count, x) - 1;
    double value = t->delays_ms[index];
    if (!t->linear)
        return value * 1e-3;
    int last = index + 1 == t->count;
    double end = last ? t->period_ms : t->times_ms[index + 1];
    double following = last ? t->delays_ms[0] : t->delays_ms[index + 1];
    double start = t->times_ms[index];
    return (value + (following - value) * (x - start) / (end - start)) * 1e-3;
}
