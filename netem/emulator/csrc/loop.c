/* The packet thread: one epoll over the input TUN fds, one timerfd for both directions and a
 * wake-up eventfd. Per wake-up it reads a batch of packets per ready fd (a super-packet cut
 * into segments first), each timed by the kernel's stamp of its arrival (stamp.c) or else
 * by one clock read after the batch, and it writes every packet that is due; then it arms
 * its timerfd for the next wake-up either direction wants. No packet is spun for on dense
 * traffic (a departure less than dense_gap_s after the previous release): the timer is
 * armed for it and the wake-up batches what has come due meanwhile, at most one wake-up per
 * coalesce_s after the last one. On sparse traffic the timer fires early_s ahead and the
 * rest is spun, as netem/emulator/engine.py does; that spin is bounded by early_s, so
 * neither direction can hold the thread longer. A direction whose arrivals the kernel
 * stamps, and whose packets cannot be due before the next wake-up, is not watched: it is
 * read at the wake-ups (may_defer). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "loop.h"

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define READ_BATCH 64 /* netem/emulator/tun.py: packets read per wake-up and fd */
#define SCRATCH_BYTES (65535 + VNET_HDR_BYTES + 64)
#define MAX_SEGMENTS 1024 /* 64 KB cut at the smallest MSS a sender may use (64 bytes) */
#define PCAP_RECORD_HEADER_BYTES 16

/* epoll's data: the kind in the low two bits, the pump's index above them */
#define TAG_INPUT 0
#define TAG_TIMER 1
#define TAG_WAKE 2
#define INPUT_TAG(i) ((uint32_t)(i) << 2 | TAG_INPUT)

double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    /* time.monotonic(): nanoseconds as a double, divided by 1e9 */
    return (double)((int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec) / 1e9;
}

static void arm(struct loop *L, double when)
{
    if (when == L->armed_at)
        return;
    struct itimerspec its;
    memset(&its, 0, sizeof(its));
    double whole = floor(when);
    its.it_value.tv_sec = (time_t)whole;
    long nsec = (long)((when - whole) * 1e9);
    its.it_value.tv_nsec = nsec < 1 ? 1 : (nsec > 999999999 ? 999999999 : nsec);
    timerfd_settime(L->timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
    L->armed_at = when;
}

static void want(struct pump *u, double at, double latest)
{
    u->want_at = at;
    u->latest_at = latest;
}

/* The next wake-up, for both directions on the one timer: the earliest time a direction
 * must be woken for; a flexible direction (a dense packet alone in its grid period, which
 * gains nothing from a wake-up of its own) is served by that wake-up when it falls between
 * its packet's departure and the grid point, and woken for on time otherwise. */
static int next_wake(const struct loop *L, double *at)
{
    double fixed = INFINITY, when;
    for (int i = 0; i < L->n_pumps; i++) {
        const struct pump *u = &L->pumps[i];
        if (!isnan(u->want_at) && u->latest_at == u->want_at && u->want_at < fixed)
            fixed = u->want_at;
    }
    when = fixed;
    for (int i = 0; i < L->n_pumps; i++) {
        const struct pump *u = &L->pumps[i];
        if (isnan(u->want_at) || u->latest_at == u->want_at)
            continue;
        if (!(fixed >= u->want_at && fixed <= u->latest_at) && u->want_at < when)
            when = u->want_at;
    }
    *at = when;
    return isfinite(when);
}

/* PcapBuffer.add */
void capture_add(struct buf *b, uint32_t snaplen, int64_t offset_ns, double when,
                 const uint8_t *pkt, uint32_t len)
{
    uint32_t caplen = len < snaplen ? len : snaplen;
    if (!buf_reserve(b, PCAP_RECORD_HEADER_BYTES + caplen)) {
        b->dropped++;
        return;
    }
    int64_t ts = (int64_t)(when * 1e9) + offset_ns;
    uint32_t hdr[4] = {(uint32_t)(ts / 1000000000LL), (uint32_t)(ts % 1000000000LL), caplen,
                       len};
    memcpy(b->data + b->len, hdr, sizeof(hdr));
    memcpy(b->data + b->len + sizeof(hdr), pkt, caplen);
    b->len += sizeof(hdr) + caplen;
    b->records++;
}

/* Hand the packets released so far to the receiving side: each alone, or (GRO on) a run of
 * one TCP flow's segments as one super-packet (gso.c). Every segment is captured as itself,
 * at the start of the write that carried it. */
static void flush_out(struct pump *u)
{
    struct loop *L = u->loop;
    struct direction *d = &L->path->d[u->dir];
    uint8_t hdr[GRO_MAX_HEADER_BYTES];
    struct iovec iov[GRO_MAX_SEGMENTS + 2];
    struct vnet_hdr vh;
    size_t i = 0;
    while (i < u->n_out) {
        struct slot **run = u->out + i;
        size_t k = L->gro ? gro_run(run, u->n_out - i, hdr, &vh, L->gro) : 1;
        /* the capture's time of delivery is the write's start: the receiving stack runs
         * inside the write, and what it sends in answer is stamped by the kernel there */
        double now = u->capturing ? mono_now() : 0;
        ssize_t r = -1;
        if (k > 1) {
            size_t hl = gro_header_bytes(run);
            iov[0] = (struct iovec){&vh, VNET_HDR_BYTES};
            iov[1] = (struct iovec){hdr, hl};
            for (size_t j = 0; j < k; j++)
                iov[j + 2] = (struct iovec){run[j]->data + hl, run[j]->len - hl};
            r = writev(u->out_fd, iov, (int)k + 2);
            if (r < 0 && errno == EINVAL) {
                /* a kernel whose TUN does not take this kind (UDP before Linux 6.2): never
                 * again, and this run one by one */
                L->gro &= ~(gro_is_udp(&vh) ? GRO_UDP : GRO_TCP);
                L->counters.gro_refused++;
                k = 1;
            } else {
                L->counters.gro_packets++;
                L->counters.gro_segments += k;
            }
        }
        if (k == 1) {
            const void *from = L->vnet ? (const void *)&run[0]->vh : (const void *)run[0]->data;
            size_t n = L->vnet ? VNET_HDR_BYTES + run[0]->len : run[0]->len;
            r = write(u->out_fd, from, n);
        }
        L->counters.writes++;
        for (size_t j = 0; j < k; j++) {
            if (r < 0)
                d->st.write_errors++;
            else if (u->capturing)
                capture_add(&u->cap_recv, u->snaplen, u->offset_ns, now, run[j]->data,
                            run[j]->len);
            pool_put(&L->path->pool, run[j]);
        }
        i += k;
    }
    u->n_out = 0;
}

static void write_out(void *ctx, int dir, struct slot *s, double due, double now)
{
    (void)dir;
    (void)due;
    (void)now;
    struct pump *u = ctx;
    if (u->n_out == OUT_BATCH)
        flush_out(u);
    u->out[u->n_out++] = s;
}

/* DirectionPump.release, without a spin on dense traffic; what it leaves, it leaves as the
 * direction's wish for the next wake-up (next_wake). */
static void release(struct pump *u)
{
    struct loop *L = u->loop;
    for (;;) {
        double now = mono_now(), deadline;
        if (path_pop_due(L->path, u->dir, now, write_out, u)) {
            flush_out(u);
            u->last_release = now;
        }
        if (!path_next_deadline(L->path, u->dir, &deadline)) {
            want(u, NAN, NAN);
            return;
        }
        if (deadline - u->last_release < L->dense_gap_s) {
            /* dense: back to epoll first, even when it is due already, so that reads and
             * the other direction are served between two batches; and, when the wake-up
             * would carry more than one packet, the timer at coalesce_s after the last
             * wake-up, for both directions (a NIC's interrupt moderation): at most one
             * timer wake-up per coalesce_s, each packet at most that late. A packet alone
             * before that point gains nothing from a wake-up of its own: it is woken for
             * on time, unless the thread wakes anyway before the point (next_wake). */
            if (L->coalesce_s > 0) {
                double grid = L->last_wake + L->coalesce_s, second;
                if (deadline >= grid)
                    want(u, deadline, deadline);
                else if (path_second_due(L->path, u->dir, &second) && second <= grid)
                    want(u, grid, grid);
                else
                    want(u, deadline, grid);
            } else {
                want(u, deadline, deadline);
            }
            return;
        }
        if (deadline - mono_now() > L->early_s) {
            want(u, deadline - L->early_s, deadline - L->early_s);
            return;
        }
        while (mono_now() < deadline)
            cpu_relax();
    }
}

static void refuse(struct loop *L, int dir, double now, const uint8_t *pkt, size_t len)
{
    /* a packet no slot can hold (larger than the MTU and not a super-packet this path
     * cuts): refused like a full queue, and logged */
    struct direction *d = &L->path->d[dir];
    d->st.packets_in++;
    d->st.bytes_in += len;
    d->st.dropped_queue++;
    d->st.bytes_dropped_queue += len;
    if (d->logging)
        log_dropped(d, now, DROP_QUEUE, pkt, len);
}

/* Read what the direction's device holds (at most READ_BATCH packets), time each packet by
 * the kernel's stamp or else by this read, and hand them to the core; returns how many
 * packets were read. */
static size_t on_readable(struct pump *u)
{
    struct loop *L = u->loop;
    struct pool *pool = &L->path->pool;
    size_t n = 0, hdr = L->vnet ? VNET_HDR_BYTES : 0, reads = 0;
    for (int k = 0; k < READ_BATCH && n < MAX_SEGMENTS * 2; k++) {
        ssize_t r = read(u->in_fd, u->scratch, SCRATCH_BYTES);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN) {
                snprintf(L->err, sizeof(L->err), "read from the %s side: %s",
                         u->dir == DIR_UP ? "client" : "server", strerror(errno));
                epoll_ctl(L->epfd, EPOLL_CTL_DEL, u->in_fd, NULL);
            }
            break;
        }
        L->counters.reads++;
        reads++;
        if ((size_t)r <= hdr)
            continue;
        struct vnet_hdr vh;
        memset(&vh, 0, sizeof(vh));
        if (hdr)
            memcpy(&vh, u->scratch, VNET_HDR_BYTES);
        const uint8_t *pkt = u->scratch + hdr;
        size_t len = (size_t)r - hdr;
        double stamp = NAN; /* stays NAN where the kernel has no record of it */
        stamp_take(&u->stamp, pkt, len, &stamp);
        size_t first = n;
        if (vh.gso_type != VNET_GSO_NONE) {
            size_t got = gso_segment(pool, &vh, pkt, len, u->batch + n, MAX_SEGMENTS);
            if (got) {
                L->counters.super_packets++;
                n += got;
            }
        } else if (len <= pool->slot_bytes) {
            struct slot *s = pool_get(pool);
            if (s) {
                s->vh = vh;
                s->len = (uint32_t)len;
                memcpy(s->data, pkt, len);
                u->batch[n++] = s;
            }
        }
        if (n == first) {
            refuse(L, u->dir, isnan(stamp) ? mono_now() : stamp, pkt, len);
            continue;
        }
        for (size_t i = first; i < n; i++) /* a super-packet's segments arrived with it */
            u->when[i] = stamp;
    }
    if (!n)
        return reads;
    double now = mono_now();
    for (size_t i = 0; i < n; i++) {
        struct slot *s = u->batch[i];
        double when = now;
        if (isnan(u->when[i])) {
            L->counters.read_stamps++;
        } else {
            L->counters.kernel_stamps++;
            when = u->when[i] < now ? u->when[i] : now;
        }
        /* in order: two senders on two CPUs may claim records out of their queue order */
        if (when < u->last_in)
            when = u->last_in;
        u->last_in = when;
        if (u->capturing)
            capture_add(&u->cap_sent, u->snaplen, u->offset_ns, when, s->data, s->len);
        path_receive(L->path, u->dir, when, s);
    }
    release(u); /* the timer is re-armed after the wake-up, only if its time changed */
    return reads;
}

/* A deferred direction's device is read at every wake-up, to the end of what it holds (up
 * to DRAIN_ROUNDS batches; the rest at the next wake-up, with their own stamps). */
#define DRAIN_ROUNDS 16

static void drain(struct pump *u)
{
    for (int round = 0; round < DRAIN_ROUNDS; round++)
        if (on_readable(u) < READ_BATCH)
            return;
}

/* Whether a direction's input may go unwatched until the next wake-up, at `at`: its
 * arrivals are timed by the kernel; the wake-up is at most DEFER_WINDOW_S away; no packet
 * that arrives meanwhile can be due before DEFER_MIN_DELAY_S after it arrived (the
 * direction's delay less its jitter, or its delay trace's least), so reading it at the
 * wake-up changes nothing of its path: its queue is computed at its arrival time, its departure is later than the read.
 * Not with the air medium (its two directions contend at the times the core is given). */
#define DEFER_WINDOW_S 1e-3
#define DEFER_MIN_DELAY_S 2e-3

static int may_defer(const struct loop *L, const struct pump *u, int have_at, double at,
                     double now)
{
    const struct direction *d = &L->path->d[u->dir];
    return u->stamp.mem && !L->path->medium && have_at && at - now <= DEFER_WINDOW_S &&
           d->min_delay_s >= DEFER_MIN_DELAY_S;
}

static void choose_reads(struct loop *L, int have_at, double at)
{
    double now = mono_now();
    for (int i = 0; i < L->n_pumps; i++) {
        struct pump *u = &L->pumps[i];
        int defer = may_defer(L, u, have_at, at, now);
        if (defer == u->deferred)
            continue;
        struct epoll_event e = {.events = defer ? 0 : EPOLLIN, .data.u32 = INPUT_TAG(i)};
        if (epoll_ctl(L->epfd, EPOLL_CTL_MOD, u->in_fd, &e) == 0)
            u->deferred = defer;
    }
}

static void handle_events(struct loop *L, struct epoll_event *ev, int n);

static void *loop_main(void *arg)
{
    struct loop *L = arg;
    sigset_t all; /* signals are the Python main thread's (SIGTERM, SIGINT: its handlers) */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    struct epoll_event ev[8];
    while (!L->stop) {
        int n = epoll_wait(L->epfd, ev, 8, -1);
        L->counters.wakeups++;
        L->last_wake = mono_now();
        if (n < 0) {
            if (errno == EINTR)
                continue;
            snprintf(L->err, sizeof(L->err), "epoll_wait: %s", strerror(errno));
            break;
        }
        pthread_mutex_lock(L->lock);
        for (int i = 0; i < L->n_pumps; i++)
            if (L->pumps[i].deferred)
                drain(&L->pumps[i]);
        handle_events(L, ev, n);
        /* whatever else is due by now leaves in this wake-up too, without one of its own */
        for (int i = 0; i < L->n_pumps; i++) {
            double deadline;
            struct pump *u = &L->pumps[i];
            if (path_next_deadline(L->path, u->dir, &deadline) && deadline <= mono_now())
                release(u);
        }
        double at;
        int have_at = next_wake(L, &at);
        if (have_at) {
            arm(L, at);
        } else if (isnan(L->armed_at)) {
            /* fired, and nothing to wait for: clear the expiry (timerfd_settime would) */
            uint64_t expiries;
            if (read(L->timer_fd, &expiries, sizeof(expiries)) < 0)
                (void)expiries;
        }
        choose_reads(L, have_at, at);
        pthread_mutex_unlock(L->lock);
    }
    return NULL;
}

static void handle_events(struct loop *L, struct epoll_event *ev, int n)
{
    for (int i = 0; i < n; i++) {
        uint32_t tag = ev[i].data.u32;
        if ((tag & 3) == TAG_WAKE)
            continue;
        if ((tag & 3) == TAG_INPUT) {
            L->counters.input_wakeups++;
            on_readable(&L->pumps[tag >> 2]);
        } else {
            L->armed_at = NAN;
            L->counters.timer_wakeups++;
            for (int k = 0; k < L->n_pumps; k++)
                release(&L->pumps[k]);
        }
    }
}

static int watch(struct loop *L, int fd, uint32_t tag)
{
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = tag};
    return epoll_ctl(L->epfd, EPOLL_CTL_ADD, fd, &e);
}

int loop_start(struct loop *L)
{
    L->epfd = epoll_create1(EPOLL_CLOEXEC);
    L->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    L->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    L->armed_at = NAN;
    if (L->epfd < 0 || L->wake_fd < 0 || L->timer_fd < 0 ||
        watch(L, L->wake_fd, TAG_WAKE) < 0 || watch(L, L->timer_fd, TAG_TIMER) < 0)
        return -1;
    for (int i = 0; i < L->n_pumps; i++) {
        struct pump *u = &L->pumps[i];
        u->loop = L;
        u->want_at = u->latest_at = NAN;
        u->last_release = -INFINITY;
        u->last_in = -INFINITY;
        u->deferred = 0;
        u->scratch = malloc(SCRATCH_BYTES);
        u->batch = malloc(sizeof(struct slot *) * MAX_SEGMENTS * 3);
        u->when = malloc(sizeof(double) * MAX_SEGMENTS * 3);
        if (!u->scratch || !u->batch || !u->when)
            return -1;
        u->stamp.mem = NULL;
        u->stamp.map_fd = u->stamp.tun_fd = -1;
        if (watch(L, u->in_fd, INPUT_TAG(i)) < 0)
            return -1;
    }
    /* both directions stamped, or neither: the path reports one state and one reason */
    for (int i = 0; L->stamps && i < L->n_pumps; i++) {
        if (stamp_attach(&L->pumps[i].stamp, L->pumps[i].in_fd, L->stamp_why,
                         sizeof(L->stamp_why)) == 0)
            continue;
        for (int j = 0; j < i; j++)
            stamp_detach(&L->pumps[j].stamp);
        L->stamps = 0;
    }
    L->stop = 0;
    if (pthread_create(&L->thread, NULL, loop_main, L) != 0)
        return -1;
    L->running = 1;
    return 0;
}

void loop_stop(struct loop *L)
{
    if (L->running) {
        L->stop = 1;
        uint64_t one = 1;
        if (write(L->wake_fd, &one, sizeof(one)) < 0)
            perror("emulator: eventfd");
        pthread_join(L->thread, NULL);
        L->running = 0;
    }
    for (int i = 0; i < L->n_pumps; i++) {
        struct pump *u = &L->pumps[i];
        stamp_detach(&u->stamp);
        free(u->scratch);
        free(u->batch);
        free(u->when);
        u->scratch = NULL;
        u->batch = NULL;
        u->when = NULL;
    }
    if (L->epfd > 0)
        close(L->epfd);
    if (L->wake_fd > 0)
        close(L->wake_fd);
    if (L->timer_fd > 0)
        close(L->timer_fd);
    L->epfd = L->wake_fd = L->timer_fd = -1;
}
