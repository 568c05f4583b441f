/* The C engine's port loop: AF_PACKET sockets, epoll, recvmmsg/sendmmsg, one thread per switch.
 *
 * Compiled once (cbuild.py caches it like a program) and independent of any program: Python opens
 * the sockets (in the right network namespace) and hands over their descriptors; a program is
 * attached as a batch function and its switch, and replaced by another without stopping the loop
 * (cio_attach waits for the batch in flight, so the old switch can be freed when it returns).
 *
 * Per wake-up the loop reads up to CIO_BATCH frames per recvmmsg call from a ready socket, with
 * MSG_TRUNC so a frame longer than the buffer is seen at its real length and dropped and counted
 * (never handed on cut short); frames the kernel loops back from our own sends (PACKET_OUTGOING)
 * are skipped. The batch goes to the program under its lock once; the outputs are sent in order,
 * consecutive frames for one port by one sendmmsg call. Sends block (back-pressure, no drops).
 * Frames for the CPU port go to a queue that Python drains (packet-in over P4Runtime).
 *
 * A link's propagation delay (delayline.py says where it is held) is held here too, so that a delayed
 * switch never moves frames through Python: each port has a FIFO per direction (one delay per port and
 * direction keeps a FIFO in due order), a frame is copied into it with its due time (CLOCK_MONOTONIC),
 * and a timerfd armed at the earliest head wakes the loop to process (ingress) or send (egress) what is
 * due. A FIFO holds at most CIO_HOLD_CAP frames (cio_set_hold_cap); beyond that a frame is dropped and
 * counted, as a full queue would. Frames a controller sends (cio_send, packet-out) are not delayed.
 */
#include <errno.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define CIO_EXPORT __attribute__((visibility("default")))
#define CIO_MAX_PORTS 512
#define CIO_BATCH 32
#define CIO_ROUNDS 2 /* batches read from one socket before looking at the others */
#define CIO_PUNT_CAP 1024
#define CIO_WAKE UINT32_MAX
#define CIO_TIMER (UINT32_MAX - 1)
#define CIO_HOLD_CAP (1u << 16)

struct cio_held {
    uint64_t due; /* CLOCK_MONOTONIC, ns */
    uint32_t len;
    uint8_t *data;
};

struct cio_fifo { /* frames held for one port and direction, in due order */
    uint64_t delay_ns;
    struct cio_held *q;
    uint32_t head, n, cap;
};

struct cio_port {
    int port, fd, ifindex, active;
    char name[IF_NAMESIZE];
    uint64_t rx, tx, tx_errors, oversized; /* atomics (__atomic builtins) */
    struct cio_fifo in, out; /* ingress and egress delay (loop thread only) */
};

struct cio_punt {
    uint8_t *data;
    uint32_t len;
};

struct cio {
    struct cio_port ports[CIO_MAX_PORTS];
    int nports;
    int by_port[CIO_MAX_PORTS];
    int epfd, wakefd, puntfd, timerfd;
    uint64_t armed; /* the timerfd's due time, 0 when disarmed */
    uint32_t hold_cap; /* frames a FIFO may hold (CIO_HOLD_CAP unless set before the start) */
    pthread_t thread;
    int started, stop;
    pthread_mutex_t attach_lock; /* held while a batch is processed */
    rt_batch_fn fn;
    void *sw;
    uint32_t max_frame;
    int cpu_port;
    uint8_t *rxbuf;
    struct mmsghdr rmsg[CIO_BATCH];
    struct iovec riov[CIO_BATCH];
    struct sockaddr_ll raddr[CIO_BATCH];
    struct rt_frame frames[CIO_BATCH];
    struct rt_outs outs;
    struct mmsghdr smsg[CIO_BATCH];
    struct iovec siov[CIO_BATCH];
    uint64_t tx_no_port, punt_dropped, batches, frames_in, held, held_dropped;
    pthread_mutex_t punt_lock;
    struct cio_punt punt[CIO_PUNT_CAP];
    uint32_t punt_head, punt_n;
};

static void cio_add(uint64_t *p, uint64_t v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static uint64_t cio_get(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

static uint64_t cio_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* hold a copy of a frame until now + the FIFO's delay; 0, or -1 when it was dropped (full, no memory) */
static int cio_hold(struct cio *io, struct cio_fifo *f, const uint8_t *data, uint32_t len, uint64_t now)
{
    struct cio_held *e;
    uint8_t *copy;
    if (f->n == f->cap) {
        uint32_t cap = f->cap ? f->cap * 2 : 64, i;
        struct cio_held *q;
        if (cap > io->hold_cap) cap = io->hold_cap;
        if (f->cap >= io->hold_cap || !(q = (struct cio_held *)malloc(sizeof(*q) * cap))) {
            cio_add(&io->held_dropped, 1);
            return -1;
        }
        for (i = 0; i < f->n; i++) q[i] = f->q[(f->head + i) % f->cap];
        free(f->q);
        f->q = q;
        f->head = 0;
        f->cap = cap;
    }
    if (!(copy = (uint8_t *)malloc(len ? len : 1))) {
        cio_add(&io->held_dropped, 1);
        return -1;
    }
    memcpy(copy, data, len);
    e = &f->q[(f->head + f->n) % f->cap];
    e->due = now + f->delay_ns;
    e->len = len;
    e->data = copy;
    f->n++;
    cio_add(&io->held, 1);
    return 0;
}

static int cio_due(const struct cio_fifo *f, uint64_t now) { return f->n && f->q[f->head].due <= now; }

/* take the head out of the FIFO (its data is the caller's to free) */
static struct cio_held cio_pop(struct cio_fifo *f)
{
    struct cio_held e = f->q[f->head];
    f->head = (f->head + 1) % f->cap;
    f->n--;
    return e;
}

static void cio_fifo_free(struct cio_fifo *f)
{
    uint32_t i;
    for (i = 0; i < f->n; i++) free(f->q[(f->head + i) % f->cap].data);
    free(f->q);
    memset(f, 0, sizeof(*f));
}

CIO_EXPORT int cio_abi(void) { return RT_ABI; }

CIO_EXPORT struct cio *cio_new(uint32_t max_frame, int cpu_port)
{
    struct cio *io = (struct cio *)calloc(1, sizeof(*io));
    int i;
    if (!io) return NULL;
    io->max_frame = max_frame ? max_frame : 65536;
    io->hold_cap = CIO_HOLD_CAP;
    io->cpu_port = cpu_port;
    io->epfd = io->wakefd = io->puntfd = io->timerfd = -1;
    for (i = 0; i < CIO_MAX_PORTS; i++) io->by_port[i] = -1;
    io->rxbuf = (uint8_t *)malloc((size_t)io->max_frame * CIO_BATCH);
    io->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    io->puntfd = eventfd(0, EFD_CLOEXEC);
    io->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (!io->rxbuf || io->wakefd < 0 || io->puntfd < 0 || io->timerfd < 0 || pthread_mutex_init(&io->attach_lock, NULL) ||
        pthread_mutex_init(&io->punt_lock, NULL)) {
        if (io->wakefd >= 0) close(io->wakefd);
        if (io->puntfd >= 0) close(io->puntfd);
        if (io->timerfd >= 0) close(io->timerfd);
        free(io->rxbuf);
        free(io);
        return NULL;
    }
    return io;
}

CIO_EXPORT int cio_add_port(struct cio *io, int port, int fd, int ifindex, const char *name)
{
    struct cio_port *p;
    if (io->started || io->nports >= CIO_MAX_PORTS || port < 0 || port >= CIO_MAX_PORTS || io->by_port[port] >= 0) return -1;
    p = &io->ports[io->nports];
    memset(p, 0, sizeof(*p));
    p->port = port;
    p->fd = fd;
    p->ifindex = ifindex;
    p->active = 1;
    strncpy(p->name, name, IF_NAMESIZE - 1);
    io->by_port[port] = io->nports++;
    return 0;
}

/* hold every frame port receives for ingress_ns before processing it, and every frame sent from it for
   egress_ns before sending it (before the loop starts); 0, or -1 for a port it does not have */
CIO_EXPORT int cio_set_delay(struct cio *io, int port, uint64_t ingress_ns, uint64_t egress_ns)
{
    struct cio_port *p;
    if (io->started || port < 0 || port >= CIO_MAX_PORTS || io->by_port[port] < 0) return -1;
    p = &io->ports[io->by_port[port]];
    p->in.delay_ns = ingress_ns;
    p->out.delay_ns = egress_ns;
    return 0;
}

/* frames one FIFO may hold, at least 1 (before the loop starts); 0, or -1 */
CIO_EXPORT int cio_set_hold_cap(struct cio *io, uint32_t cap)
{
    if (io->started || !cap) return -1;
    io->hold_cap = cap;
    return 0;
}

/* switch programs (fn NULL: none; frames are then dropped): returns when no batch uses the old one */
CIO_EXPORT void cio_attach(struct cio *io, rt_batch_fn fn, void *sw)
{
    pthread_mutex_lock(&io->attach_lock);
    io->fn = fn;
    io->sw = sw;
    pthread_mutex_unlock(&io->attach_lock);
}

/* an interface that went down stays (it may come back up); one that vanished is closed for good */
static void cio_check_gone(struct cio *io, struct cio_port *p)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    strncpy(ifr.ifr_name, p->name, IF_NAMESIZE - 1);
    if (ioctl(p->fd, SIOCGIFINDEX, &ifr) == 0 && ifr.ifr_ifindex == p->ifindex) return;
    if (__atomic_exchange_n(&p->active, 0, __ATOMIC_RELAXED)) epoll_ctl(io->epfd, EPOLL_CTL_DEL, p->fd, NULL);
}

static int cio_gone_errno(int e) { return e == ENETDOWN || e == ENODEV || e == ENXIO; }

static void cio_punt_push(struct cio *io, const uint8_t *data, uint32_t len)
{
    uint8_t *copy;
    uint64_t one = 1;
    pthread_mutex_lock(&io->punt_lock);
    if (io->punt_n == CIO_PUNT_CAP || !(copy = (uint8_t *)malloc(len ? len : 1))) {
        pthread_mutex_unlock(&io->punt_lock);
        cio_add(&io->punt_dropped, 1);
        return;
    }
    memcpy(copy, data, len);
    io->punt[(io->punt_head + io->punt_n) % CIO_PUNT_CAP] = (struct cio_punt){copy, len};
    io->punt_n++;
    pthread_mutex_unlock(&io->punt_lock);
    if (write(io->puntfd, &one, sizeof(one)) < 0) { /* the reader is woken by the queued count anyway */ }
}

/* send outputs [from, to), all for port p, with as few sendmmsg calls as they allow */
static void cio_send_run(struct cio *io, struct cio_port *p, uint32_t from, uint32_t to)
{
    while (from < to) {
        uint32_t n = to - from < CIO_BATCH ? to - from : CIO_BATCH, j;
        int sent;
        for (j = 0; j < n; j++) {
            const struct rt_outdesc *d = &io->outs.d[from + j];
            io->siov[j].iov_base = io->outs.buf + d->off;
            io->siov[j].iov_len = d->len;
            memset(&io->smsg[j], 0, sizeof(io->smsg[j]));
            io->smsg[j].msg_hdr.msg_iov = &io->siov[j];
            io->smsg[j].msg_hdr.msg_iovlen = 1;
        }
        /* counted first (as the Python loop does), so that a reader who saw a frame also sees its count;
           what was not sent is taken back */
        cio_add(&p->tx, (uint64_t)n);
        sent = sendmmsg(p->fd, io->smsg, n, 0);
        if (sent < 0) {
            cio_add(&p->tx, -(uint64_t)n);
            if (errno == EINTR) continue;
            cio_add(&p->tx_errors, 1);
            if (cio_gone_errno(errno)) cio_check_gone(io, p);
            from += 1; /* that frame is lost; the rest are tried again */
            continue;
        }
        if ((uint32_t)sent < n) cio_add(&p->tx, -(uint64_t)(n - (uint32_t)sent));
        from += (uint32_t)sent;
        if ((uint32_t)sent < n && sent == 0) from += 1;
    }
}

static void cio_process(struct cio *io, uint32_t nf)
{
    uint32_t i, run;
    io->outs.n = 0;
    io->outs.used = 0;
    pthread_mutex_lock(&io->attach_lock);
    if (io->fn) io->fn(io->sw, io->frames, nf, &io->outs);
    pthread_mutex_unlock(&io->attach_lock);
    io->batches++;
    io->frames_in += nf;
    for (i = 0; i < io->outs.n; i = run) {
        int port = io->outs.d[i].port, idx;
        run = i + 1;
        if (io->cpu_port >= 0 && port == io->cpu_port) {
            cio_punt_push(io, io->outs.buf + io->outs.d[i].off, io->outs.d[i].len);
            continue;
        }
        while (run < io->outs.n && io->outs.d[run].port == port) run++;
        idx = port >= 0 && port < CIO_MAX_PORTS ? io->by_port[port] : -1;
        if (idx < 0 || !__atomic_load_n(&io->ports[idx].active, __ATOMIC_RELAXED)) {
            cio_add(&io->tx_no_port, run - i);
            continue;
        }
        if (io->ports[idx].out.delay_ns) {
            uint64_t now = cio_now();
            uint32_t j;
            for (j = i; j < run; j++)
                cio_hold(io, &io->ports[idx].out, io->outs.buf + io->outs.d[j].off, io->outs.d[j].len, now);
            continue;
        }
        cio_send_run(io, &io->ports[idx], i, run);
    }
}

static void cio_drain(struct cio *io, struct cio_port *p)
{
    int round;
    for (round = 0; round < CIO_ROUNDS; round++) {
        int k, j;
        uint32_t nf = 0;
        for (j = 0; j < CIO_BATCH; j++) {
            io->riov[j].iov_base = io->rxbuf + (size_t)j * io->max_frame;
            io->riov[j].iov_len = io->max_frame;
            memset(&io->rmsg[j], 0, sizeof(io->rmsg[j]));
            io->rmsg[j].msg_hdr.msg_iov = &io->riov[j];
            io->rmsg[j].msg_hdr.msg_iovlen = 1;
            io->rmsg[j].msg_hdr.msg_name = &io->raddr[j];
            io->rmsg[j].msg_hdr.msg_namelen = sizeof(io->raddr[j]);
        }
        k = recvmmsg(p->fd, io->rmsg, CIO_BATCH, MSG_DONTWAIT | MSG_TRUNC, NULL);
        if (k < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && cio_gone_errno(errno)) cio_check_gone(io, p);
            return;
        }
        for (j = 0; j < k; j++) {
            uint32_t len = io->rmsg[j].msg_len; /* MSG_TRUNC: the frame's real length */
            if (io->raddr[j].sll_pkttype == PACKET_OUTGOING) continue;
            if (len > io->max_frame) {
                cio_add(&p->oversized, 1);
                continue;
            }
            if (p->in.delay_ns) {
                cio_add(&p->rx, 1);
                cio_hold(io, &p->in, io->rxbuf + (size_t)j * io->max_frame, len, cio_now());
                continue;
            }
            io->frames[nf].data = io->rxbuf + (size_t)j * io->max_frame;
            io->frames[nf].len = len;
            io->frames[nf].port = p->port;
            nf++;
        }
        cio_add(&p->rx, nf);
        if (nf) cio_process(io, nf);
        if (k < CIO_BATCH) return;
    }
}

/* frames whose delay is over: held ingress frames go through the program (in batches), egress ones leave */
static void cio_release(struct cio *io)
{
    uint64_t now = cio_now();
    int i;
    for (i = 0; i < io->nports; i++) {
        struct cio_port *p = &io->ports[i];
        while (cio_due(&p->in, now)) {
            uint32_t nf = 0, j;
            while (nf < CIO_BATCH && cio_due(&p->in, now)) {
                /* the batch points into the FIFO's copies, freed once the program has run */
                struct cio_held e = cio_pop(&p->in);
                io->frames[nf].data = e.data;
                io->frames[nf].len = e.len;
                io->frames[nf].port = p->port;
                nf++;
            }
            /* no longer held before anything they cause is sent (as tx is counted before the send) */
            cio_add(&io->held, -(uint64_t)nf);
            cio_process(io, nf);
            for (j = 0; j < nf; j++) free((void *)io->frames[j].data);
        }
        while (cio_due(&p->out, now)) {
            struct cio_held e = cio_pop(&p->out);
            cio_add(&io->held, -(uint64_t)1);
            if (__atomic_load_n(&p->active, __ATOMIC_RELAXED)) {
                cio_add(&p->tx, 1); /* counted first, as above */
                if (send(p->fd, e.data, e.len, 0) < 0) {
                    cio_add(&p->tx, -(uint64_t)1);
                    cio_add(&p->tx_errors, 1);
                    if (cio_gone_errno(errno)) cio_check_gone(io, p);
                }
            } else {
                cio_add(&io->tx_no_port, 1);
            }
            free(e.data);
        }
    }
}

/* arm the timer at the earliest held frame (or disarm it) */
static void cio_arm(struct cio *io)
{
    uint64_t next = 0;
    int i;
    struct itimerspec its;
    for (i = 0; i < 2 * io->nports; i++) {
        const struct cio_fifo *f = i % 2 ? &io->ports[i / 2].out : &io->ports[i / 2].in;
        if (f->n && (!next || f->q[f->head].due < next)) next = f->q[f->head].due;
    }
    if (next == io->armed) return;
    memset(&its, 0, sizeof(its));
    its.it_value.tv_sec = (time_t)(next / 1000000000u);
    its.it_value.tv_nsec = (long)(next % 1000000000u);
    if (timerfd_settime(io->timerfd, TFD_TIMER_ABSTIME, &its, NULL) == 0) io->armed = next;
}

static void *cio_loop(void *arg)
{
    struct cio *io = (struct cio *)arg;
    struct epoll_event ev[64];
    while (!__atomic_load_n(&io->stop, __ATOMIC_ACQUIRE)) {
        int n, i;
        cio_release(io);
        cio_arm(io);
        n = epoll_wait(io->epfd, ev, 64, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (i = 0; i < n; i++) {
            uint32_t idx = ev[i].data.u32;
            if (idx == CIO_WAKE || idx == CIO_TIMER) {
                uint64_t v;
                if (read(idx == CIO_WAKE ? io->wakefd : io->timerfd, &v, sizeof(v)) < 0) { /* nonblocking: drained */ }
                if (idx == CIO_TIMER) io->armed = 0; /* a one-shot timer that fired is disarmed */
                continue;
            }
            if (idx < (uint32_t)io->nports && __atomic_load_n(&io->ports[idx].active, __ATOMIC_RELAXED))
                cio_drain(io, &io->ports[idx]);
        }
    }
    return NULL;
}

CIO_EXPORT int cio_start(struct cio *io)
{
    struct epoll_event ev;
    int i;
    if (io->started) return -1;
    io->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (io->epfd < 0) return -errno;
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.u32 = CIO_WAKE;
    if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->wakefd, &ev)) return -errno;
    ev.data.u32 = CIO_TIMER;
    if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->timerfd, &ev)) return -errno;
    for (i = 0; i < io->nports; i++) {
        ev.data.u32 = (uint32_t)i;
        if (epoll_ctl(io->epfd, EPOLL_CTL_ADD, io->ports[i].fd, &ev)) return -errno;
    }
    if (pthread_create(&io->thread, NULL, cio_loop, io)) return -EAGAIN;
    io->started = 1;
    return 0;
}

CIO_EXPORT void cio_stop(struct cio *io)
{
    uint64_t one = 1;
    if (!io->started) return;
    __atomic_store_n(&io->stop, 1, __ATOMIC_RELEASE);
    if (write(io->wakefd, &one, sizeof(one)) < 0) { /* a full counter wakes the loop too */ }
    pthread_join(io->thread, NULL);
    io->started = 0;
    if (write(io->puntfd, &one, sizeof(one)) < 0) { /* wakes a punt reader, which then sees the stop */ }
}

CIO_EXPORT void cio_free(struct cio *io)
{
    uint32_t i;
    if (!io) return;
    cio_stop(io);
    if (io->epfd >= 0) close(io->epfd);
    close(io->wakefd);
    close(io->puntfd);
    close(io->timerfd);
    for (i = 0; i < (uint32_t)io->nports; i++) {
        cio_fifo_free(&io->ports[i].in);
        cio_fifo_free(&io->ports[i].out);
    }
    for (i = 0; i < io->punt_n; i++) free(io->punt[(io->punt_head + i) % CIO_PUNT_CAP].data);
    free(io->rxbuf);
    free(io->outs.buf);
    free(io->outs.d);
    pthread_mutex_destroy(&io->attach_lock);
    pthread_mutex_destroy(&io->punt_lock);
    free(io);
}

/* rx, tx, tx_errors, oversized, active */
CIO_EXPORT int cio_port_stats(struct cio *io, int port, uint64_t *out)
{
    struct cio_port *p;
    if (port < 0 || port >= CIO_MAX_PORTS || io->by_port[port] < 0) return -1;
    p = &io->ports[io->by_port[port]];
    out[0] = cio_get(&p->rx);
    out[1] = cio_get(&p->tx);
    out[2] = cio_get(&p->tx_errors);
    out[3] = cio_get(&p->oversized);
    out[4] = (uint64_t)__atomic_load_n(&p->active, __ATOMIC_RELAXED);
    return 0;
}

/* tx_no_port, punt_dropped, batches, frames, held (frames waiting out a delay), held_dropped */
CIO_EXPORT void cio_stats(struct cio *io, uint64_t *out)
{
    out[0] = cio_get(&io->tx_no_port);
    out[1] = cio_get(&io->punt_dropped);
    out[2] = __atomic_load_n(&io->batches, __ATOMIC_RELAXED);
    out[3] = __atomic_load_n(&io->frames_in, __ATOMIC_RELAXED);
    out[4] = cio_get(&io->held);
    out[5] = cio_get(&io->held_dropped);
}

/* a frame from another thread (a controller's packet-out); 0, or -1 when the port has no interface */
CIO_EXPORT int cio_send(struct cio *io, int port, const uint8_t *data, uint32_t len)
{
    struct cio_port *p;
    if (port < 0 || port >= CIO_MAX_PORTS || io->by_port[port] < 0) {
        cio_add(&io->tx_no_port, 1);
        return -1;
    }
    p = &io->ports[io->by_port[port]];
    if (!__atomic_load_n(&p->active, __ATOMIC_RELAXED)) {
        cio_add(&io->tx_no_port, 1);
        return -1;
    }
    cio_add(&p->tx, 1); /* counted first, as above */
    if (send(p->fd, data, len, 0) < 0) {
        cio_add(&p->tx, -(uint64_t)1);
        cio_add(&p->tx_errors, 1);
        if (cio_gone_errno(errno)) cio_check_gone(io, p);
        return -2;
    }
    return 0;
}

CIO_EXPORT int cio_punt_fd(struct cio *io) { return io->puntfd; }

/* the oldest frame for the CPU port copied into buf: its length, -1 when none (-2: buf too small) */
CIO_EXPORT int64_t cio_punt_pop(struct cio *io, uint8_t *buf, uint32_t cap)
{
    struct cio_punt e;
    pthread_mutex_lock(&io->punt_lock);
    if (!io->punt_n) {
        pthread_mutex_unlock(&io->punt_lock);
        return -1;
    }
    e = io->punt[io->punt_head];
    if (e.len > cap) {
        pthread_mutex_unlock(&io->punt_lock);
        return -2;
    }
    io->punt_head = (io->punt_head + 1) % CIO_PUNT_CAP;
    io->punt_n--;
    pthread_mutex_unlock(&io->punt_lock);
    memcpy(buf, e.data, e.len);
    free(e.data);
    return (int64_t)e.len;
}

/* CPU time of the loop's thread so far (ns), -1 before it started */
CIO_EXPORT int64_t cio_thread_cpu_ns(struct cio *io)
{
    clockid_t cid;
    struct timespec ts;
    if (!io->started || pthread_getcpuclockid(io->thread, &cid) || clock_gettime(cid, &ts)) return -1;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
