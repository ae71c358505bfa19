/* netem.emulator._cpath: the C packet path as a Python type.
 *
 * Path(mtu_bytes) holds both directions of a link (and the medium of an air= link). The
 * Python side (netem/emulator/cpath.py) configures it from the LinkSpec and events, and
 * either drives it sans-I/O (receive/pop_due/next_deadline, with `now`: the reference
 * comparison) or starts its packet thread on TUN fds (start/stop). Every method takes the
 * path's mutex, which the packet thread holds only while it handles a wake-up. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#include "cpath.h"
#include "loop.h"

typedef struct {
    PyObject_HEAD
    struct path path;
    pthread_mutex_t lock;
    struct loop loop;
    int ready;
} PathObject;

#define LOCK(self)                                                                          \
    do {                                                                                    \
        Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&(self)->lock);                          \
        Py_END_ALLOW_THREADS                                                                \
    } while (0)
#define UNLOCK(self) pthread_mutex_unlock(&(self)->lock)

static int check_dir(int dir)
{
    if (dir != DIR_UP && dir != DIR_DOWN) {
        PyErr_SetString(PyExc_ValueError, "direction: must be 0 (up) or 1 (down)");
        return 0;
    }
    return 1;
}

/* A Random.getstate()[1] tuple (624 words and the index) into an MT state. */
static int mt_from_state(PyObject *state, struct mt *m)
{
    if (!PyTuple_Check(state) || PyTuple_GET_SIZE(state) != 625) {
        PyErr_SetString(PyExc_ValueError, "rng state: expected Random.getstate()[1]");
        return 0;
    }
    for (int i = 0; i < 624; i++) {
        unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(state, i));
        if (PyErr_Occurred())
            return 0;
        m->state[i] = (uint32_t)v;
    }
    long index = PyLong_AsLong(PyTuple_GET_ITEM(state, 624));
    if (PyErr_Occurred())
        return 0;
    if (index < 0 || index > 624) {
        PyErr_SetString(PyExc_ValueError, "rng state: index outside [0, 624]");
        return 0;
    }
    m->index = (int)index;
    return 1;
}

static int Path_init(PathObject *self, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"capacity_bytes", NULL};
    Py_ssize_t capacity;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", kw, &capacity))
        return -1;
    if (capacity < 68 || capacity > 65535 + 64) {
        PyErr_SetString(PyExc_ValueError, "capacity_bytes: must lie in [68, 65599]");
        return -1;
    }
    if (self->ready)
        return 0;
    path_init(&self->path, (size_t)capacity);
    pthread_mutex_init(&self->lock, NULL);
    memset(&self->loop, 0, sizeof(self->loop));
    self->loop.epfd = self->loop.wake_fd = self->loop.timer_fd = -1;
    for (int i = 0; i < N_DIRS; i++)
        self->loop.pumps[i].stamp.map_fd = self->loop.pumps[i].stamp.tun_fd = -1;
    self->ready = 1;
    return 0;
}

static void Path_dealloc(PathObject *self)
{
    if (self->ready) {
        Py_BEGIN_ALLOW_THREADS loop_stop(&self->loop);
        Py_END_ALLOW_THREADS
        for (int i = 0; i < N_DIRS; i++) {
            buf_free(&self->loop.pumps[i].cap_sent);
            buf_free(&self->loop.pumps[i].cap_recv);
        }
        path_free(&self->path);
        pthread_mutex_destroy(&self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* set_direction(dir, loss_kind, loss_p, ge, loss_state, jitter_state, delay_s, jitter_s,
 *               rate_bps, queue_limit_bytes): LinkDirection.set_spec. */
static PyObject *Path_set_direction(PathObject *self, PyObject *args)
{
    int dir, loss_kind;
    double loss_p, ge_p, ge_r, ge_bad, ge_good, delay_s, jitter_s;
    PyObject *loss_state, *jitter_state, *rate, *qlimit;
    if (!PyArg_ParseTuple(args, "iid(dddd)OOddOO", &dir, &loss_kind, &loss_p, &ge_p, &ge_r,
                          &ge_bad, &ge_good, &loss_state, &jitter_state, &delay_s, &jitter_s,
                          &rate, &qlimit))
        return NULL;
    if (!check_dir(dir))
        return NULL;
    struct mt loss_rng, jitter_rng;
    if (!mt_from_state(loss_state, &loss_rng) || !mt_from_state(jitter_state, &jitter_rng))
        return NULL;
    double rate_bps = rate == Py_None ? 0.0 : PyFloat_AsDouble(rate);
    long long limit = qlimit == Py_None ? -1 : PyLong_AsLongLong(qlimit);
    if (PyErr_Occurred())
        return NULL;
    LOCK(self);
    struct direction *d = &self->path.d[dir];
    d->loss_kind = loss_kind;
    d->loss_p = loss_p;
    d->ge_p = ge_p;
    d->ge_r = ge_r;
    d->ge_bad = ge_bad;
    d->ge_good = ge_good;
    d->ge_in_bad = 0;
    d->loss_rng = loss_rng;
    d->jitter_rng = jitter_rng;
    d->delay_s = delay_s;
    d->jitter_s = jitter_s;
    d->rate_kind = rate == Py_None ? RATE_UNLIMITED : RATE_CONSTANT;
    d->rate_bps = rate_bps;
    d->seconds_per_byte = rate == Py_None ? 0.0 : 8.0 / rate_bps;
    if (rate != Py_None && limit < 0)
        limit = (long long)1 << 62;
    d->queue_limit_bytes = limit;
    d->min_delay_s = delay_s - fabs(jitter_s);
    direction_drop_traces(d);
    UNLOCK(self);
    Py_RETURN_NONE;
}

/* set_traces(dir, origin_s, offset_s, stamps, delay_times, delay_values, period_ms, linear):
 * the traces of LinkDirection.set_spec, after set_direction. `stamps`: an int64 buffer
 * (array('q')) of a capacity trace or None; `delay_times`/`delay_values`: float64 buffers
 * (array('d')) of a delay trace or None, its period in ms. A new capacity trace's
 * opportunities start once the packets queued before have left (busy_until: tx_done). */
static PyObject *Path_set_traces(PathObject *self, PyObject *args)
{
    int dir, linear;
    double origin_s, offset_s, period_ms;
    PyObject *stamps_obj, *times_obj, *values_obj;
    if (!PyArg_ParseTuple(args, "iddOOOdp", &dir, &origin_s, &offset_s, &stamps_obj,
                          &times_obj, &values_obj, &period_ms, &linear))
        return NULL;
    if (!check_dir(dir))
        return NULL;
    struct cap_trace *cap = NULL;
    struct delay_trace *dtr = NULL;
    Py_buffer b = {0}, bt = {0}, bv = {0};
    if (stamps_obj != Py_None) {
        if (PyObject_GetBuffer(stamps_obj, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            return NULL;
        size_t n = (size_t)b.len / sizeof(int64_t);
        if (b.itemsize != sizeof(int64_t) || n == 0 || ((int64_t *)b.buf)[n - 1] <= 0) {
            PyBuffer_Release(&b);
            PyErr_SetString(PyExc_ValueError, "stamps: int64 items, the last after 0");
            return NULL;
        }
        cap = calloc(1, sizeof(*cap));
        int64_t *copy = malloc((size_t)b.len);
        if (!cap || !copy) {
            free(cap);
            free(copy);
            PyBuffer_Release(&b);
            return PyErr_NoMemory();
        }
        memcpy(copy, b.buf, (size_t)b.len);
        PyBuffer_Release(&b);
        cap->stamps_ms = copy;
        cap->count = n;
        cap->period_ms = copy[n - 1];
        cap->origin_s = origin_s;
        cap->offset_ms = offset_s * 1e3;
    }
    if (times_obj != Py_None) {
        if (PyObject_GetBuffer(times_obj, &bt, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            goto fail;
        if (PyObject_GetBuffer(values_obj, &bv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            goto fail;
        size_t n = (size_t)bt.len / sizeof(double);
        if (bt.itemsize != sizeof(double) || bv.len != bt.len || n < 2 || !(period_ms > 0)) {
            PyErr_SetString(PyExc_ValueError, "delay trace: two float64 buffers of >= 2 points");
            goto fail;
        }
        dtr = calloc(1, sizeof(*dtr));
        if (!dtr || !(dtr->times_ms = malloc((size_t)bt.len)) ||
            !(dtr->delays_ms = malloc((size_t)bv.len))) {
            PyErr_NoMemory();
            goto fail;
        }
        memcpy(dtr->times_ms, bt.buf, (size_t)bt.len);
        memcpy(dtr->delays_ms, bv.buf, (size_t)bv.len);
        dtr->count = n;
        dtr->period_ms = period_ms;
        dtr->origin_s = origin_s;
        dtr->offset_ms = offset_s * 1e3;
        dtr->linear = linear;
        PyBuffer_Release(&bt);
        PyBuffer_Release(&bv);
    }
    LOCK(self);
    struct direction *d = &self->path.d[dir];
    direction_drop_traces(d);
    if (cap) {
        double busy_until = d->tx_done;
        double start = origin_s > busy_until ? origin_s : busy_until;
        cap->next_k =
            cap_trace_first_at_or_after(cap, (start - cap->origin_s) * 1e3 + cap->offset_ms);
        cap->tx_done_s = busy_until;
        cap->left_bytes = 0;
        d->cap = cap;
        d->rate_kind = RATE_TRACE;
        if (d->queue_limit_bytes < 0)
            d->queue_limit_bytes = (int64_t)1 << 62;
    }
    if (dtr) {
        double least = dtr->delays_ms[0];
        for (size_t i = 1; i < dtr->count; i++)
            if (dtr->delays_ms[i] < least)
                least = dtr->delays_ms[i];
        d->dtr = dtr;
        d->min_delay_s = d->delay_s + least * 1e-3;
    }
    UNLOCK(self);
    Py_RETURN_NONE;
fail:
    if (bt.obj)
        PyBuffer_Release(&bt);
    if (bv.obj)
        PyBuffer_Release(&bv);
    if (cap) {
        free(cap->stamps_ms);
        free(cap);
    }
    if (dtr) {
        free(dtr->times_ms);
        free(dtr->delays_ms);
        free(dtr);
    }
    return NULL;
}

/* set_medium(ints..., backoff, alternate, rng_state): Medium.set_spec (queues kept). */
static PyObject *Path_set_medium(PathObject *self, PyObject *args)
{
    struct air_params a;
    PyObject *state;
    unsigned int cw_min, ampdu, queue;
    if (!PyArg_ParseTuple(args, "LLLLLLLLLIIIppO", &a.access_ns, &a.sifs_ns, &a.slot_ns,
                          &a.ack_ppdu_ns, &a.block_ack_ppdu_ns, &a.pre_sig_ns, &a.symbol_ns,
                          &a.n_dbps, &a.mac_overhead_bytes, &cw_min, &ampdu, &queue,
                          &a.backoff, &a.alternate, &state))
        return NULL;
    if (a.n_dbps < 1 || ampdu < 1 || ampdu > 256 || queue < 1) {
        PyErr_SetString(PyExc_ValueError, "air: n_dbps >= 1, ampdu in [1, 256], queue >= 1");
        return NULL;
    }
    a.cw_min = cw_min;
    a.ampdu_frames = ampdu;
    a.queue_packets = queue;
    if (!mt_from_state(state, &a.rng))
        return NULL;
    LOCK(self);
    struct medium *m = self->path.medium;
    if (!m) {
        m = calloc(1, sizeof(*m));
        if (!m) {
            UNLOCK(self);
            return PyErr_NoMemory();
        }
        m->free_s = -INFINITY;
        m->last = DIR_DOWN;
        self->path.medium = m;
    }
    m->air = a;
    UNLOCK(self);
    Py_RETURN_NONE;
}

/* add_event(dir, index, outage, start_s, end_s, rate_bps): DirectionTimeline.add. */
static PyObject *Path_add_event(PathObject *self, PyObject *args)
{
    int dir, index, outage;
    double start, end, rate;
    if (!PyArg_ParseTuple(args, "iipddd", &dir, &index, &outage, &start, &end, &rate))
        return NULL;
    if (!check_dir(dir))
        return NULL;
    LOCK(self);
    struct direction *d = &self->path.d[dir];
    d->has_timeline = 1;
    if (d->n_events == d->cap_events) {
        size_t cap = d->cap_events ? 2 * d->cap_events : 8;
        struct event *events = realloc(d->events, cap * sizeof(*events));
        if (!events) {
            UNLOCK(self);
            return PyErr_NoMemory();
        }
        d->events = events;
        d->cap_events = cap;
    }
    size_t i = d->n_events++;
    d->events[i] = (struct event){index, outage, start, end, rate, 0};
    /* rate events stay sorted by start (stably), as DirectionTimeline.rates */
    while (!outage && i > 0 && (d->events[i - 1].outage || d->events[i - 1].start_s > start)) {
        struct event t = d->events[i - 1];
        d->events[i - 1] = d->events[i];
        d->events[i] = t;
        i--;
    }
    UNLOCK(self);
    Py_RETURN_NONE;
}

/* timeline(dir): True once any event was given (the Python core's `timeline is not None`) */
static PyObject *Path_timeline(PathObject *self, PyObject *args)
{
    int dir, on = -1;
    if (!PyArg_ParseTuple(args, "i|p", &dir, &on) || !check_dir(dir))
        return NULL;
    LOCK(self);
    if (on >= 0)
        self->path.d[dir].has_timeline = on;
    int has = self->path.d[dir].has_timeline;
    UNLOCK(self);
    return PyBool_FromLong(has);
}

/* set_event_end(index, end_s): end_events. */
static PyObject *Path_set_event_end(PathObject *self, PyObject *args)
{
    int index;
    double end;
    if (!PyArg_ParseTuple(args, "id", &index, &end))
        return NULL;
    LOCK(self);
    for (int k = 0; k < N_DIRS; k++) {
        struct direction *d = &self->path.d[k];
        for (size_t i = 0; i < d->n_events; i++)
            if (d->events[i].index == index)
                d->events[i].end_s = end;
    }
    UNLOCK(self);
    Py_RETURN_NONE;
}

/* event_drops(index) -> (up, down): packets that outage dropped per direction. */
static PyObject *Path_event_drops(PathObject *self, PyObject *args)
{
    int index;
    if (!PyArg_ParseTuple(args, "i", &index))
        return NULL;
    unsigned long long drops[N_DIRS] = {0, 0};
    int seen[N_DIRS] = {0, 0};
    LOCK(self);
    for (int k = 0; k < N_DIRS; k++) {
        struct direction *d = &self->path.d[k];
        for (size_t i = 0; i < d->n_events; i++)
            if (d->events[i].index == index) {
                drops[k] += d->events[i].drops;
                seen[k] = 1;
            }
    }
    UNLOCK(self);
    PyObject *up = seen[0] ? PyLong_FromUnsignedLongLong(drops[0]) : Py_NewRef(Py_None);
    PyObject *down = seen[1] ? PyLong_FromUnsignedLongLong(drops[1]) : Py_NewRef(Py_None);
    return Py_BuildValue("(NN)", up, down);
}

static PyObject *Path_receive(PathObject *self, PyObject *args)
{
    int dir;
    double now;
    Py_buffer packet;
    if (!PyArg_ParseTuple(args, "idy*", &dir, &now, &packet))
        return NULL;
    if (!check_dir(dir) || (size_t)packet.len > self->path.pool.slot_bytes) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "packet: larger than the path's capacity");
        PyBuffer_Release(&packet);
        return NULL;
    }
    LOCK(self);
    struct slot *s = pool_get(&self->path.pool);
    if (s) {
        s->len = (uint32_t)packet.len;
        memcpy(s->data, packet.buf, (size_t)packet.len);
        path_receive(&self->path, dir, now, s);
    }
    UNLOCK(self);
    PyBuffer_Release(&packet);
    if (!s)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

struct collect {
    PyObject *list;
    struct pool *pool;
    int failed;
};

static void collect_out(void *ctx, int dir, struct slot *s, double due, double now)
{
    (void)dir;
    (void)due;
    (void)now;
    struct collect *c = ctx;
    PyObject *b = PyBytes_FromStringAndSize((const char *)s->data, s->len);
    if (!b || PyList_Append(c->list, b) < 0)
        c->failed = 1;
    Py_XDECREF(b);
    pool_put(c->pool, s);
}

static PyObject *Path_pop_due(PathObject *self, PyObject *args)
{
    int dir;
    double now;
    if (!PyArg_ParseTuple(args, "id", &dir, &now) || !check_dir(dir))
        return NULL;
    struct collect c = {PyList_New(0), &self->path.pool, 0};
    if (!c.list)
        return NULL;
    LOCK(self);
    path_pop_due(&self->path, dir, now, collect_out, &c);
    UNLOCK(self);
    if (c.failed) {
        Py_DECREF(c.list);
        return NULL;
    }
    return c.list;
}

static PyObject *Path_next_deadline(PathObject *self, PyObject *args)
{
    int dir;
    double deadline;
    if (!PyArg_ParseTuple(args, "i", &dir) || !check_dir(dir))
        return NULL;
    LOCK(self);
    int have = path_next_deadline(&self->path, dir, &deadline);
    UNLOCK(self);
    if (!have)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(deadline);
}

static PyObject *Path_in_flight(PathObject *self, PyObject *args)
{
    int dir;
    if (!PyArg_ParseTuple(args, "i", &dir) || !check_dir(dir))
        return NULL;
    LOCK(self);
    size_t n = self->path.d[dir].line.len;
    if (self->path.medium)
        n += self->path.medium->q[dir].len;
    UNLOCK(self);
    return PyLong_FromSize_t(n);
}

/* stats(dir) -> dict of DirectionStats fields (dense histogram). */
static PyObject *Path_stats(PathObject *self, PyObject *args)
{
    int dir;
    if (!PyArg_ParseTuple(args, "i", &dir) || !check_dir(dir))
        return NULL;
    struct dstats *st = PyMem_Malloc(sizeof(*st));
    if (!st)
        return PyErr_NoMemory();
    LOCK(self);
    *st = self->path.d[dir].st;
    UNLOCK(self);
    PyObject *hist = PyList_New(LATENESS_BINS);
    for (int i = 0; hist && i < LATENESS_BINS; i++)
        PyList_SET_ITEM(hist, i, PyLong_FromUnsignedLongLong(st->hist[i]));
    PyObject *out = hist ? Py_BuildValue(
        "{sKsKsKsKsKsKsKsKsKsKsKsNsdsd}", "packets_in", st->packets_in, "bytes_in",
        st->bytes_in, "packets_out", st->packets_out, "bytes_out", st->bytes_out,
        "dropped_loss", st->dropped_loss, "dropped_queue", st->dropped_queue,
        "bytes_dropped_queue", st->bytes_dropped_queue, "dropped_outage", st->dropped_outage,
        "write_errors", st->write_errors, "max_backlog_bytes", st->max_backlog_bytes,
        "max_backlog_packets", st->max_backlog_packets, "lateness_hist", hist,
        "lateness_sum_s", st->lateness_sum_s, "lateness_max_s", st->lateness_max_s) : NULL;
    PyMem_Free(st);
    return out;
}

/* air_stats(now) -> AirStats.to_dict()-shaped counters, exchanges due by now started. */
static PyObject *Path_air_stats(PathObject *self, PyObject *args)
{
    double now;
    if (!PyArg_ParseTuple(args, "d", &now))
        return NULL;
    LOCK(self);
    struct medium *m = self->path.medium;
    if (!m) {
        UNLOCK(self);
        Py_RETURN_NONE;
    }
    medium_advance(&self->path, now);
    struct air_stats st = m->st;
    int64_t ahead[2] = {0, 0};
    if (m->free_s > now)
        ahead[m->last] = (int64_t)llrint((m->free_s - now) * 1e9);
    UNLOCK(self);
    return Py_BuildValue(
        "{s{sKsKsKsK}s{sKsKsKsK}s{sLsLsLsL}s{sKsK}s{sKsK}s{sLsL}s{sLsL}}", "frames", "up.data",
        st.frames[0][0], "up.ack", st.frames[0][1], "down.data", st.frames[1][0], "down.ack",
        st.frames[1][1], "ip_bytes", "up.data", st.ip_bytes[0][0], "up.ack", st.ip_bytes[0][1],
        "down.data", st.ip_bytes[1][0], "down.ack", st.ip_bytes[1][1], "busy_ns", "up.data",
        st.busy_ns[0][0], "up.ack", st.busy_ns[0][1], "down.data", st.busy_ns[1][0],
        "down.ack", st.busy_ns[1][1], "exchanges", "up", st.exchanges[0], "down",
        st.exchanges[1], "dropped", "up", st.dropped[0], "down", st.dropped[1], "wait_ns",
        "up", st.wait_ns[0], "down", st.wait_ns[1], "ahead_ns", "up", ahead[0], "down",
        ahead[1]);
}

static PyObject *take_buf(struct buf *b)
{
    PyObject *out = Py_BuildValue("(y#KK)", b->data ? (const char *)b->data : "",
                                  (Py_ssize_t)b->len, b->records, b->dropped);
    buf_free(b);
    b->records = b->dropped = 0;
    return out;
}

/* log_start(dir, memory_limit_bytes) / log_take(dir) -> (records bytes, count, dropped) */
static PyObject *Path_log_start(PathObject *self, PyObject *args)
{
    int dir;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "in", &dir, &limit) || !check_dir(dir))
        return NULL;
    LOCK(self);
    struct direction *d = &self->path.d[dir];
    buf_free(&d->log);
    d->log.records = d->log.dropped = 0;
    d->log.limit = (size_t)limit;
    d->logging = 1;
    UNLOCK(self);
    Py_RETURN_NONE;
}

static PyObject *Path_log_take(PathObject *self, PyObject *args)
{
    int dir;
    if (!PyArg_ParseTuple(args, "i", &dir) || !check_dir(dir))
        return NULL;
    LOCK(self);
    struct direction *d = &self->path.d[dir];
    d->logging = 0;
    struct buf b = d->log;
    memset(&d->log, 0, sizeof(d->log));
    d->log.limit = b.limit;
    UNLOCK(self);
    return take_buf(&b);
}

static struct pump *pump_of(PathObject *self, int dir)
{
    for (int i = 0; i < self->loop.n_pumps; i++)
        if (self->loop.pumps[i].dir == dir)
            return &self->loop.pumps[i];
    PyErr_SetString(PyExc_ValueError, "direction: not moved by this path's thread");
    return NULL;
}

/* capture_start(dir, snaplen, offset_ns, memory_limit_bytes) / capture_take(dir) ->
 * ((sent bytes, records, dropped), (received bytes, records, dropped)) */
static PyObject *Path_capture_start(PathObject *self, PyObject *args)
{
    int dir;
    unsigned int snaplen;
    long long offset;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "iILn", &dir, &snaplen, &offset, &limit))
        return NULL;
    struct pump *u = pump_of(self, dir);
    if (!u)
        return NULL;
    LOCK(self);
    buf_free(&u->cap_sent);
    buf_free(&u->cap_recv);
    u->cap_sent = (struct buf){.limit = (size_t)limit};
    u->cap_recv = (struct buf){.limit = (size_t)limit};
    u->snaplen = snaplen;
    u->offset_ns = offset;
    u->capturing = 1;
    UNLOCK(self);
    Py_RETURN_NONE;
}

static PyObject *Path_capture_take(PathObject *self, PyObject *args)
{
    int dir;
    if (!PyArg_ParseTuple(args, "i", &dir))
        return NULL;
    struct pump *u = pump_of(self, dir);
    if (!u)
        return NULL;
    LOCK(self);
    u->capturing = 0;
    struct buf sent = u->cap_sent, recv = u->cap_recv;
    memset(&u->cap_sent, 0, sizeof(u->cap_sent));
    memset(&u->cap_recv, 0, sizeof(u->cap_recv));
    UNLOCK(self);
    return Py_BuildValue("(NN)", take_buf(&sent), take_buf(&recv));
}

/* start([(dir, in_fd, out_fd), ...], early_s, dense_gap_s, coalesce_s, vnet, gro, stamps) */
static PyObject *Path_start(PathObject *self, PyObject *args)
{
    PyObject *pumps;
    double early_s, dense_gap_s, coalesce_s;
    int vnet, gro, stamps;
    if (!PyArg_ParseTuple(args, "O!dddppp", &PyList_Type, &pumps, &early_s, &dense_gap_s,
                          &coalesce_s, &vnet, &gro, &stamps))
        return NULL;
    if (gro && !vnet) {
        PyErr_SetString(PyExc_ValueError, "gro: super-packets need the vnet header (offload)");
        return NULL;
    }
    if (self->loop.running) {
        PyErr_SetString(PyExc_RuntimeError, "the packet thread runs already");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(pumps);
    if (n < 1 || n > N_DIRS) {
        PyErr_SetString(PyExc_ValueError, "pumps: one or two (dir, in_fd, out_fd)");
        return NULL;
    }
    struct loop *L = &self->loop;
    for (Py_ssize_t i = 0; i < n; i++) {
        int dir, in_fd, out_fd;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(pumps, i), "iii", &dir, &in_fd, &out_fd) ||
            !check_dir(dir))
            return NULL;
        L->pumps[i].dir = dir;
        L->pumps[i].in_fd = in_fd;
        L->pumps[i].out_fd = out_fd;
    }
    L->n_pumps = (int)n;
    L->path = &self->path;
    L->lock = &self->lock;
    L->early_s = early_s;
    L->dense_gap_s = dense_gap_s;
    L->coalesce_s = coalesce_s;
    L->vnet = vnet;
    L->gro = gro ? GRO_TCP | GRO_UDP : 0;
    L->stamps = stamps;
    L->stamp_why[0] = 0;
    L->err[0] = 0;
    if (loop_start(L) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        loop_stop(L);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Path_stop(PathObject *self, PyObject *Py_UNUSED(ignored))
{
    Py_BEGIN_ALLOW_THREADS loop_stop(&self->loop);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *Path_error(PathObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->loop.err[0])
        Py_RETURN_NONE;
    return PyUnicode_FromString(self->loop.err);
}

static PyObject *Path_loop_counters(PathObject *self, PyObject *Py_UNUSED(ignored))
{
    LOCK(self);
    struct loop_counters c = self->loop.counters;
    UNLOCK(self);
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsIsKsKsK}", "wakeups", c.wakeups,
                         "timer_wakeups", c.timer_wakeups, "reads", c.reads, "super_packets",
                         c.super_packets, "writes", c.writes, "gro_packets", c.gro_packets,
                         "gro_segments", c.gro_segments, "gro_refused", c.gro_refused,
                         "gro_kinds", self->loop.gro, "input_wakeups", c.input_wakeups,
                         "kernel_stamps", c.kernel_stamps, "read_stamps", c.read_stamps);
}

/* stamps() -> (taken from the kernel: bool, why not: str) */
static PyObject *Path_stamps(PathObject *self, PyObject *Py_UNUSED(ignored))
{
    LOCK(self);
    int on = self->loop.stamps;
    PyObject *why = PyUnicode_FromString(self->loop.stamp_why);
    UNLOCK(self);
    return Py_BuildValue("(ON)", on ? Py_True : Py_False, why);
}

static PyObject *Path_pool_slots(PathObject *self, PyObject *Py_UNUSED(ignored))
{
    LOCK(self);
    size_t n = self->path.pool.allocated;
    UNLOCK(self);
    return PyLong_FromSize_t(n);
}

/* segment(vnet_header bytes, packet) -> [(vnet header bytes, segment bytes)]: gso.c, for
 * the tests. */
static PyObject *Path_segment(PathObject *self, PyObject *args)
{
    Py_buffer hdr, pkt;
    if (!PyArg_ParseTuple(args, "y*y*", &hdr, &pkt))
        return NULL;
    PyObject *out = NULL;
    struct slot **segs = NULL;
    if (hdr.len != VNET_HDR_BYTES) {
        PyErr_SetString(PyExc_ValueError, "vnet header: 10 bytes");
        goto done;
    }
    segs = PyMem_Malloc(sizeof(*segs) * 1024);
    if (!segs) {
        PyErr_NoMemory();
        goto done;
    }
    struct vnet_hdr vh;
    memcpy(&vh, hdr.buf, VNET_HDR_BYTES);
    LOCK(self);
    size_t n = gso_segment(&self->path.pool, &vh, pkt.buf, (size_t)pkt.len, segs, 1024);
    out = PyList_New(0);
    for (size_t i = 0; i < n; i++) {
        if (out) {
            PyObject *item = Py_BuildValue("(y#y#)", (const char *)&segs[i]->vh,
                                           (Py_ssize_t)VNET_HDR_BYTES,
                                           (const char *)segs[i]->data,
                                           (Py_ssize_t)segs[i]->len);
            if (!item || PyList_Append(out, item) < 0)
                Py_CLEAR(out);
            Py_XDECREF(item);
        }
        pool_put(&self->path.pool, segs[i]);
    }
    UNLOCK(self);
done:
    PyMem_Free(segs);
    PyBuffer_Release(&hdr);
    PyBuffer_Release(&pkt);
    return out;
}

/* coalesce([(vnet header bytes, segment bytes), ...]) -> [(vnet header bytes, packet
 * bytes)]: what the packet thread writes for these released segments with GRO on (gso.c),
 * for the tests. */
static PyObject *Path_coalesce(PathObject *self, PyObject *args)
{
    PyObject *items;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &items))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (n > OUT_BATCH) {
        PyErr_SetString(PyExc_ValueError, "coalesce: at most 256 segments");
        return NULL;
    }
    struct slot *segs[OUT_BATCH];
    Py_ssize_t got = 0;
    PyObject *out = NULL;
    LOCK(self);
    for (; got < n; got++) {
        const char *hdr, *pkt;
        Py_ssize_t hdr_len, pkt_len;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(items, got), "y#y#", &hdr, &hdr_len, &pkt,
                              &pkt_len))
            goto done;
        if (hdr_len != VNET_HDR_BYTES || pkt_len < 0 ||
            (size_t)pkt_len > self->path.pool.slot_bytes) {
            PyErr_SetString(PyExc_ValueError, "coalesce: a 10-byte header and a packet that fits");
            goto done;
        }
        struct slot *s = pool_get(&self->path.pool);
        if (!s) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(&s->vh, hdr, VNET_HDR_BYTES);
        memcpy(s->data, pkt, (size_t)pkt_len);
        s->len = (uint32_t)pkt_len;
        segs[got] = s;
    }
    out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < n;) {
        uint8_t hdr[GRO_MAX_HEADER_BYTES];
        struct vnet_hdr vh;
        size_t k = gro_run(segs + i, (size_t)(n - i), hdr, &vh, GRO_TCP | GRO_UDP);
        PyObject *item;
        if (k == 1) {
            item = Py_BuildValue("(y#y#)", (const char *)&segs[i]->vh,
                                 (Py_ssize_t)VNET_HDR_BYTES, (const char *)segs[i]->data,
                                 (Py_ssize_t)segs[i]->len);
        } else {
            size_t hl = gro_header_bytes(segs + i), total = hl;
            for (size_t j = 0; j < k; j++)
                total += segs[i + j]->len - hl;
            PyObject *packet = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
            if (packet) {
                char *b = PyBytes_AS_STRING(packet);
                memcpy(b, hdr, hl);
                b += hl;
                for (size_t j = 0; j < k; j++) {
                    memcpy(b, segs[i + j]->data + hl, segs[i + j]->len - hl);
                    b += segs[i + j]->len - hl;
                }
            }
            item = packet ? Py_BuildValue("(y#N)", (const char *)&vh,
                                          (Py_ssize_t)VNET_HDR_BYTES, packet)
                          : NULL;
        }
        if (!item || PyList_Append(out, item) < 0)
            Py_CLEAR(out);
        Py_XDECREF(item);
        i += (Py_ssize_t)k;
    }
done:
    for (Py_ssize_t i = 0; i < got; i++)
        pool_put(&self->path.pool, segs[i]);
    UNLOCK(self);
    return out;
}

static PyMethodDef Path_methods[] = {
    {"set_direction", (PyCFunction)Path_set_direction, METH_VARARGS, NULL},
    {"set_traces", (PyCFunction)Path_set_traces, METH_VARARGS, NULL},
    {"set_medium", (PyCFunction)Path_set_medium, METH_VARARGS, NULL},
    {"add_event", (PyCFunction)Path_add_event, METH_VARARGS, NULL},
    {"timeline", (PyCFunction)Path_timeline, METH_VARARGS, NULL},
    {"set_event_end", (PyCFunction)Path_set_event_end, METH_VARARGS, NULL},
    {"event_drops", (PyCFunction)Path_event_drops, METH_VARARGS, NULL},
    {"receive", (PyCFunction)Path_receive, METH_VARARGS, NULL},
    {"pop_due", (PyCFunction)Path_pop_due, METH_VARARGS, NULL},
    {"next_deadline", (PyCFunction)Path_next_deadline, METH_VARARGS, NULL},
    {"in_flight", (PyCFunction)Path_in_flight, METH_VARARGS, NULL},
    {"stats", (PyCFunction)Path_stats, METH_VARARGS, NULL},
    {"air_stats", (PyCFunction)Path_air_stats, METH_VARARGS, NULL},
    {"log_start", (PyCFunction)Path_log_start, METH_VARARGS, NULL},
    {"log_take", (PyCFunction)Path_log_take, METH_VARARGS, NULL},
    {"capture_start", (PyCFunction)Path_capture_start, METH_VARARGS, NULL},
    {"capture_take", (PyCFunction)Path_capture_take, METH_VARARGS, NULL},
    {"start", (PyCFunction)Path_start, METH_VARARGS, NULL},
    {"coalesce", (PyCFunction)Path_coalesce, METH_VARARGS, NULL},
    {"stop", (PyCFunction)Path_stop, METH_NOARGS, NULL},
    {"error", (PyCFunction)Path_error, METH_NOARGS, NULL},
    {"loop_counters", (PyCFunction)Path_loop_counters, METH_NOARGS, NULL},
    {"stamps", (PyCFunction)Path_stamps, METH_NOARGS, NULL},
    {"pool_slots", (PyCFunction)Path_pool_slots, METH_NOARGS, NULL},
    {"segment", (PyCFunction)Path_segment, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PathType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "netem.emulator._cpath.Path",
    .tp_basicsize = sizeof(PathObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Path_init,
    .tp_dealloc = (destructor)Path_dealloc,
    .tp_methods = Path_methods,
    .tp_doc = "Both directions of a link in C (see netem/emulator/cpath.py).",
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cpath", "The emulator's per-packet path in C.", -1, NULL, NULL,
    NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cpath(void)
{
    if (PyType_Ready(&PathType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&PathType);
    if (PyModule_AddObject(m, "Path", (PyObject *)&PathType) < 0 ||
        PyModule_AddIntConstant(m, "LATENESS_BINS", LATENESS_BINS) < 0 ||
        PyModule_AddIntConstant(m, "LOG_RECORD_BYTES", LOG_RECORD_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "VNET_HDR_BYTES", VNET_HDR_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
