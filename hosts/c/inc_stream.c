/* The in-network worker's stream loop in C (hosts.native_stream loads it; hosts.inc_worker documents it).
 *
 * The same state machine as IncWorker._stream, statement for statement: per slot one round in flight
 * (an exponent round, then the slot's chunks), the shadow copy alternating per round, retransmission on
 * timeout (RFC 6298 timer with Karn's rule and backoff) and early (RACK for rounds), speculated exponents,
 * and every check of a result (job, epoch, slot, shadow, offset, exponent, checksum, result type). It
 * exists because the agents' Python cost per frame is what bounded the emulation's fastest points; here
 * a frame never enters the interpreter.
 *
 * Everything the wire format decides (field positions, frame layout, lane widths, codes) comes in as
 * numbers from Python (wireformat, hosts.packets), so this file holds no second definition of the header.
 * Decisions that need Python (a stall: ask the tree whether it is alive; an error: raise it with its
 * message) end ps_run with a code; the state stays, and ps_run continues where it stopped.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <linux/if_packet.h>

#define API __attribute__((visibility("default")))

enum { F_OP, F_FLAGS, F_ELEM, F_SHIFT, F_JOB, F_SHADOW, F_SLOT, F_EPOCH, F_OFFSET, F_EXP, F_NEXT, F_CSUM, N_FIELDS };

/* integer parameters, by index (hosts.native_stream.IP) */
enum {
    P_TX_FD, P_RX_FD, P_PACKET_MODE, P_CHUNKS, P_WINDOW, P_SLOTS, P_LANES, P_WIDTH, P_FRAME_LEN, P_EXP_FRAME_LEN,
    P_EXPONENT_AT, P_CHECKSUM_AT, P_FLAG_AT, P_SHADOW_AT, P_SHADOW_BIT, P_LANES_AT, P_HEADER_LEN,
    P_FLAG_RETRANSMIT, P_FLAG_OVERFLOW, P_OP_RESULT, P_ELEM_NONE, P_JOB, P_EPOCH, P_RESULT_TYPE, P_SHIFT,
    P_Q_MAX, P_LANE_MAX, P_EXP_MIN, P_EXP_MAX, P_SPECULATE, P_WINDOW_STEPS, P_MAX_RETRIES, P_FAILURE,
    P_FAILURE_TIMEOUTS, P_EARLY, P_EXP_SIGN, P_HAS_SRTT, P_PAYLOAD_AT, P_WAKE_FD, P_WIDTHS /* 4 entries, by elem type */,
    P_LAYOUT = P_WIDTHS + 4 /* N_FIELDS x (word, shift, mask) */, P_COUNT = P_LAYOUT + 3 * N_FIELDS
};
/* float parameters */
enum { D_FAILURE_S, D_EARLY_WINDOW, D_RTO, D_SRTT, D_RTTVAR, D_CALM_UNTIL, D_RTO_MIN, D_RTO_MAX, D_COUNT };
/* arrays */
enum { A_FRAMES, A_EXP_FRAMES, A_BLOCKS, A_MAXABS, A_PROPOSALS, A_GUESS, A_SCALES, A_SALTS, A_SUMS, A_EXPS,
       A_AGREED, A_GOT, A_ROUNDS, A_COUNT };
/* what ps_run returns */
enum { R_DONE = 0, R_STALL = 1, R_RETRIES = 2, R_ABOVE_PROPOSAL = 3, R_LANE_OVERFLOW = 4, R_MISMATCH = 5, R_NOTICE = 6 };
/* counters (ps_stats) */
enum { S_SENT, S_RETRANS, S_FAST, S_RECEIVED, S_DUPLICATES, S_OVERFLOWS, S_BYTES, S_CORRUPT, S_MISSED, S_DONE,
       S_EXPIRED_SINCE, S_ALARMS, S_HAS_SRTT, S_COUNT };
enum { T_QUANTIZE, T_AGREED_AT, T_LAST_PROGRESS, T_RTO, T_SRTT, T_RTTVAR, T_CALM_UNTIL, T_COUNT };

typedef struct { double t; int64_t rid; int64_t nth; } sendrec_t;

typedef struct {
    int64_t p[P_COUNT];
    double failure_s, early_window;
    /* RTO estimator (hosts.rto.RtoEstimator's fields) */
    double rto, srtt, rttvar, calm_until, rto_min, rto_max;
    int has_srtt;
    uint8_t *frames, *exp_frames;
    const double *blocks, *maxabs, *scales;
    const int64_t *proposals, *guess, *salts;
    int64_t *sums, *exps, *agreed, *rounds;
    uint8_t *got;
    /* per round id (chunk k is k, the exponent round of slot s is n_chunks + s) */
    int64_t *sends, *round_from, *expiries;
    double *first_sent;
    /* per slot: the round in flight, its timeout and its early deadline (of its latest send) */
    int64_t *outstanding;
    double *due, *early_due;
    sendrec_t *order; size_t order_head, order_len, order_cap;
    int64_t c[S_COUNT];
    double quantize_s, agreed_at, last_progress;
    uint8_t *scratch; uint8_t rxbuf[4096];
    int started;
    int woken;  /* the wake fd (a failure notice from the controller, through the agent) became readable */
} stream_t;

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* -- RTO (RFC 6298), as hosts.rto.RtoEstimator ------------------------------------------------------ */
static double clampd(double x, double lo, double hi) { return x < lo ? lo : (x > hi ? hi : x); }

static void rto_sample(stream_t *s, double rtt) {
    if (!s->has_srtt) { s->srtt = rtt; s->rttvar = rtt / 2; s->has_srtt = 1; }
    else {
        s->rttvar = 0.75 * s->rttvar + 0.25 * fabs(s->srtt - rtt);
        s->srtt = 0.875 * s->srtt + 0.125 * rtt;
    }
    s->rto = clampd(s->srtt + 4 * s->rttvar, s->rto_min, s->rto_max);
}

static void rto_expired(stream_t *s, double now) {
    if (now >= s->calm_until) {
        s->rto = s->rto * 2 < s->rto_max ? s->rto * 2 : s->rto_max;
        s->calm_until = now + s->rto;
    }
}

static double rto_timeout(const stream_t *s, int64_t sends) {
    int64_t k = sends - 1 < 16 ? sends - 1 : 16;
    double t = s->rto * (double)((int64_t)1 << k);
    return t < s->rto_max ? t : s->rto_max;
}

/* -- I/O ------------------------------------------------------------------------------------------ */
static int send_frame(stream_t *s, const uint8_t *buf, size_t len) {
    for (;;) {
        if (send((int)s->p[P_TX_FD], buf, len, 0) >= 0) return 0;
        int e = errno;
        if (e == EINTR) continue;
        if (e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS) {  /* full device queue: wait for room, never drop */
            struct pollfd pf = { (int)s->p[P_TX_FD], POLLOUT, 0 };
            poll(&pf, 1, e == ENOBUFS ? 1 : 10);
            continue;
        }
        return -e;
    }
}

/* One result payload: 1 with *out and *len set, 0 when nothing is queued, -errno on error. */
static int take(stream_t *s, const uint8_t **out, int64_t *len) {
    for (;;) {
        struct sockaddr_ll sll;
        socklen_t sl = sizeof sll;
        ssize_t n = recvfrom((int)s->p[P_RX_FD], s->rxbuf, sizeof s->rxbuf, MSG_DONTWAIT, (struct sockaddr *)&sll, &sl);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            return -errno;
        }
        if (!s->p[P_PACKET_MODE]) { *out = s->rxbuf; *len = n; return 1; }
        int64_t at = s->p[P_PAYLOAD_AT];
        /* AF_PACKET: skip our own transmissions and anything with IPv4 options (hosts.transport) */
        if (sll.sll_pkttype == PACKET_OUTGOING || n < at || s->rxbuf[14] != 0x45) continue;
        *out = s->rxbuf + at;
        *len = n - at;
        return 1;
    }
}

static int recv_one(stream_t *s, double timeout, const uint8_t **out, int64_t *len) {
    int r = take(s, out, len);
    if (r != 0) return r;
    double ms = timeout * 1000 + 0.999;
    /* the wake fd (an eventfd, -1: none) ends the wait at once: the tree is known to be broken */
    struct pollfd pf[2] = { { (int)s->p[P_RX_FD], POLLIN, 0 }, { (int)s->p[P_WAKE_FD], POLLIN, 0 } };
    r = poll(pf, s->p[P_WAKE_FD] >= 0 ? 2 : 1, ms > 0 ? (int)ms : 0);
    if (r < 0) return errno == EINTR ? 0 : -errno;
    if (r == 0) return 0;
    if (s->p[P_WAKE_FD] >= 0 && (pf[1].revents & POLLIN)) s->woken = 1;
    if (!(pf[0].revents & POLLIN)) return 0;
    return take(s, out, len);
}

/* -- the header ----------------------------------------------------------------------------------- */
static void decode(const stream_t *s, const uint8_t *pl, int64_t *h) {
    uint8_t buf[64] = {0};
    int64_t hl = s->p[P_HEADER_LEN];
    memcpy(buf, pl, (size_t)hl);
    for (int f = 0; f < N_FIELDS; f++) {
        const int64_t *l = &s->p[P_LAYOUT + 3 * f];
        uint64_t w = 0;
        for (int i = 0; i < 8; i++) w = (w << 8) | buf[l[0] * 8 + i];
        h[f] = (int64_t)((w >> l[1]) & (uint64_t)l[2]);
    }
    int64_t sign = s->p[P_EXP_SIGN];
    if (h[F_EXP] & sign) h[F_EXP] -= sign << 1;
    if (h[F_NEXT] & sign) h[F_NEXT] -= sign << 1;
}

static int64_t lane_at(const uint8_t *p, int width) {
    switch (width) {
    case 4: return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
    case 2: return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
    default: return (int8_t)p[0];
    }
}

static void put_lane(uint8_t *p, int width, int64_t v) {
    for (int i = width - 1; i >= 0; i--) { p[i] = (uint8_t)(v & 0xFF); v >>= 8; }
}

/* -- rounds --------------------------------------------------------------------------------------- */
static int64_t slot_of(const stream_t *s, int64_t rid) {
    return rid >= s->p[P_CHUNKS] ? rid - s->p[P_CHUNKS] : rid % s->p[P_WINDOW];
}

static int order_push(stream_t *s, double t, int64_t rid, int64_t nth) {
    if (s->order_len == s->order_cap) {
        size_t cap = s->order_cap ? 2 * s->order_cap : 1024;
        sendrec_t *grown = malloc(cap * sizeof *grown);
        if (!grown) return -ENOMEM;
        for (size_t i = 0; i < s->order_len; i++) grown[i] = s->order[(s->order_head + i) % s->order_cap];
        free(s->order);
        s->order = grown; s->order_cap = cap; s->order_head = 0;
    }
    s->order[(s->order_head + s->order_len) % s->order_cap] = (sendrec_t){ t, rid, nth };
    s->order_len++;
    return 0;
}

static int transmit(stream_t *s, int64_t rid) {
    double now = mono();
    int64_t n = s->p[P_CHUNKS];
    int is_exp = rid >= n;
    size_t len = (size_t)(is_exp ? s->p[P_EXP_FRAME_LEN] : s->p[P_FRAME_LEN]);
    uint8_t *row = is_exp ? s->exp_frames + (size_t)(rid - n) * len : s->frames + (size_t)rid * len;
    int rc;
    if (s->sends[rid] > s->round_from[rid]) {  /* the same contribution again, flagged */
        memcpy(s->scratch, row, len);
        s->scratch[s->p[P_FLAG_AT]] |= (uint8_t)s->p[P_FLAG_RETRANSMIT];
        rc = send_frame(s, s->scratch, len);
        s->c[S_RETRANS]++;
    } else {
        rc = send_frame(s, row, len);
        s->first_sent[rid] = now;
        s->expiries[rid] = 0;
    }
    if (rc < 0) return rc;
    s->sends[rid]++;
    s->c[S_SENT]++;
    s->c[S_BYTES] += (int64_t)len;
    int64_t slot = slot_of(s, rid);
    s->due[slot] = now + rto_timeout(s, 1 + s->expiries[rid]);
    s->early_due[slot] = INFINITY;
    if (s->p[P_EARLY]) return order_push(s, now, rid, s->sends[rid]);
    return 0;
}

/* rid's round came back, sent once: sends before it still unanswered get an early deadline */
static void answered(stream_t *s, int64_t rid, double now) {
    double rtt = now - s->first_sent[rid];
    rto_sample(s, rtt);
    if (!s->p[P_EARLY]) return;
    double due_after = rtt + s->early_window * (s->has_srtt && s->srtt != 0.0 ? s->srtt : rtt);
    while (s->order_len && s->order[s->order_head].t < s->first_sent[rid]) {
        sendrec_t r = s->order[s->order_head];
        s->order_head = (s->order_head + 1) % s->order_cap;
        s->order_len--;
        int64_t slot = slot_of(s, r.rid);
        if (s->sends[r.rid] == r.nth && s->outstanding[slot] == r.rid) s->early_due[slot] = r.t + due_after;
    }
}

/* Quantize and send a chunk's next round, at an agreed exponent or a speculated one (clipped). */
static int start_chunk(stream_t *s, int64_t chunk, int64_t exponent, int speculated, int64_t *info) {
    if (exponent > s->proposals[chunk] && !speculated) {
        info[0] = chunk; info[1] = exponent; info[2] = s->proposals[chunk];
        return R_ABOVE_PROPOSAL;
    }
    double t0 = mono();
    int64_t lanes = s->p[P_LANES], width = s->p[P_WIDTH];
    if (exponent < s->p[P_EXP_MIN] || exponent > s->p[P_EXP_MAX]) { info[0] = chunk; info[1] = exponent; return R_LANE_OVERFLOW; }
    double sc = s->scales[exponent - s->p[P_EXP_MIN]];
    double q_max = (double)s->p[P_Q_MAX];
    int clip = speculated && exponent > s->proposals[chunk];
    double top = rint(s->maxabs[chunk] * sc);  /* rint and a positive scale keep the order of |x| */
    if (clip && top > q_max) top = q_max;
    if (!(top <= (double)s->p[P_LANE_MAX])) { info[0] = chunk; info[1] = exponent; return R_LANE_OVERFLOW; }
    size_t flen = (size_t)s->p[P_FRAME_LEN];
    uint8_t *row = s->frames + (size_t)chunk * flen;
    uint8_t *out = row + s->p[P_LANES_AT];
    const double *b = s->blocks + (size_t)chunk * (size_t)lanes;
    int64_t lane_sum = 0;
    for (int64_t i = 0; i < lanes; i++) {
        double q = rint(b[i] * sc);
        if (clip) q = q < -q_max ? -q_max : (q > q_max ? q_max : q);
        int64_t v = (int64_t)q;
        put_lane(out + i * width, (int)width, v);
        lane_sum += v;
    }
    row[s->p[P_EXPONENT_AT]] = (uint8_t)(exponent & 0xFF);
    uint32_t total = (uint32_t)((uint64_t)(lane_sum + s->salts[chunk]) & 0xFFFFFFFFu);
    put_lane(row + s->p[P_CHECKSUM_AT], 4, (int64_t)total);
    int64_t slot = chunk % s->p[P_WINDOW];
    uint8_t bit = (uint8_t)s->p[P_SHADOW_BIT];
    if (s->rounds[slot] % 2) row[s->p[P_SHADOW_AT]] |= bit; else row[s->p[P_SHADOW_AT]] &= (uint8_t)~bit;
    s->exps[chunk] = exponent;
    s->quantize_s += mono() - t0;
    s->outstanding[slot] = chunk;
    s->round_from[chunk] = s->sends[chunk];
    return transmit(s, chunk);
}

static void progress(stream_t *s) {
    s->last_progress = mono();
    s->c[S_EXPIRED_SINCE] = 0;
    s->c[S_ALARMS] = 0;
}

/* -- the loop ------------------------------------------------------------------------------------- */
API int ps_run(stream_t *s, int64_t *info) {
    const int64_t n = s->p[P_CHUNKS], window = s->p[P_WINDOW], n_slots = s->p[P_SLOTS], L = s->p[P_LANES];
    int rc;
    if (!s->started) {
        s->started = 1;
        s->last_progress = mono();
        for (int64_t slot = 0; slot < n_slots; slot++) {
            if (!s->guess) {
                size_t elen = (size_t)s->p[P_EXP_FRAME_LEN];
                uint8_t *row = s->exp_frames + (size_t)slot * elen, bit = (uint8_t)s->p[P_SHADOW_BIT];
                if (s->rounds[slot] % 2) row[s->p[P_SHADOW_AT]] |= bit; else row[s->p[P_SHADOW_AT]] &= (uint8_t)~bit;
                s->outstanding[slot] = n + slot;
                if ((rc = transmit(s, n + slot)) != 0) { info[0] = -rc; return rc; }
            } else if ((rc = start_chunk(s, slot, s->guess[slot], 1, info)) != 0) {
                if (rc < 0) info[0] = -rc;
                return rc;
            }
        }
    }
    int64_t h[N_FIELDS];
    while (s->c[S_DONE] < n) {
        double now = mono();
        if (s->woken) return R_NOTICE;
        if (s->p[P_FAILURE] && now - s->last_progress >= s->failure_s && s->c[S_EXPIRED_SINCE] >= s->p[P_FAILURE_TIMEOUTS])
            return R_STALL;
        /* every deadline that is due, earliest first */
        double next_due;
        for (;;) {
            int64_t best = -1; int early = 0; next_due = INFINITY;
            for (int64_t slot = 0; slot < n_slots; slot++) {
                if (s->outstanding[slot] < 0) continue;
                if (s->due[slot] < next_due) { next_due = s->due[slot]; best = slot; early = 0; }
                if (s->early_due[slot] < next_due) { next_due = s->early_due[slot]; best = slot; early = 1; }
            }
            if (best < 0 || next_due > now) break;
            int64_t rid = s->outstanding[best];
            if (early) {  /* a later round was answered first: this one's frame (or its result) was lost */
                s->c[S_FAST]++;
            } else {
                if (s->expiries[rid] >= s->p[P_MAX_RETRIES]) { info[0] = best; info[1] = rid; return R_RETRIES; }
                rto_expired(s, now);
                s->c[S_EXPIRED_SINCE]++;
                s->expiries[rid]++;
            }
            if ((rc = transmit(s, rid)) != 0) { info[0] = -rc; return rc; }
        }
        double wait = isinf(next_due) ? s->rto : next_due - mono();
        if (s->p[P_FAILURE]) {
            double left = s->last_progress + s->failure_s - mono();
            if (left < wait) wait = left;
        }
        const uint8_t *pl = NULL;
        int64_t len = 0;
        rc = recv_one(s, wait > 0 ? wait : 0.0, &pl, &len);
        if (rc < 0) { info[0] = -rc; return rc; }
        if (rc == 0) continue;
        s->c[S_RECEIVED]++;
        if (len < s->p[P_HEADER_LEN]) { s->c[S_DUPLICATES]++; continue; }
        decode(s, pl, h);
        int64_t slot = h[F_SLOT];
        if (h[F_OP] != s->p[P_OP_RESULT] || h[F_JOB] != s->p[P_JOB] || h[F_EPOCH] != s->p[P_EPOCH] || slot >= window) {
            s->c[S_DUPLICATES]++; continue;
        }
        int64_t rid = s->outstanding[slot];
        if (rid < 0) { s->c[S_DUPLICATES]++; continue; }
        if (rid >= n) {  /* the slot's exponent round */
            if (h[F_ELEM] != s->p[P_ELEM_NONE] || h[F_SHADOW] != s->rounds[slot] % 2 || h[F_OFFSET] != slot * L) {
                s->c[S_DUPLICATES]++; continue;
            }
            if (h[F_CSUM] != s->salts[slot]) { s->c[S_CORRUPT]++; continue; }  /* dropped: the timeout asks again */
            if (s->agreed_at < 0) s->agreed_at = mono();
        } else {
            if (h[F_ELEM] == s->p[P_ELEM_NONE] || h[F_OFFSET] != rid * L || h[F_SHADOW] != s->rounds[slot] % 2
                || h[F_EXP] != s->exps[rid]) {
                s->c[S_DUPLICATES]++; continue;
            }
            int64_t width = h[F_ELEM] >= 0 && h[F_ELEM] < 4 ? s->p[P_WIDTHS + h[F_ELEM]] : 0;
            if (width <= 0 || len < s->p[P_HEADER_LEN] + L * width) { s->c[S_DUPLICATES]++; continue; }
            const uint8_t *lp = pl + s->p[P_HEADER_LEN];
            int64_t lane_sum = 0;
            for (int64_t i = 0; i < L; i++) lane_sum += lane_at(lp + i * width, (int)width);
            /* a flipped bit on the way down: dropped, the timeout fetches the stored result */
            if ((int64_t)((uint64_t)(lane_sum + s->salts[rid]) & 0xFFFFFFFFu) != h[F_CSUM]) { s->c[S_CORRUPT]++; continue; }
            if (h[F_SHIFT] != s->p[P_SHIFT] || h[F_ELEM] != s->p[P_RESULT_TYPE]) {
                info[0] = h[F_ELEM]; info[1] = h[F_SHIFT];
                return R_MISMATCH;
            }
            int64_t agreed = h[F_NEXT];
            if (s->guess && agreed > s->proposals[rid]) { s->c[S_CORRUPT]++; continue; }  /* above the minimum: damaged */
            if (s->guess && !(agreed - s->exps[rid] >= 0 && agreed - s->exps[rid] <= s->p[P_WINDOW_STEPS])) {
                progress(s);  /* missed: the chunk again, at the agreed scale */
                if (s->sends[rid] - s->round_from[rid] == 1) answered(s, rid, mono());
                s->c[S_MISSED]++;
                s->rounds[slot]++;
                if ((rc = start_chunk(s, rid, agreed, 0, info)) != 0) { if (rc < 0) info[0] = -rc; return rc; }
                continue;
            }
            if (h[F_FLAGS] & s->p[P_FLAG_OVERFLOW]) s->c[S_OVERFLOWS]++;
            if (s->guess) s->agreed[rid] = agreed;
            int64_t *row = s->sums + (size_t)rid * (size_t)L;
            for (int64_t i = 0; i < L; i++) row[i] = lane_at(lp + i * width, (int)width);
            s->got[rid] = 1;
            s->c[S_DONE]++;
        }
        progress(s);
        if (s->sends[rid] - s->round_from[rid] == 1) answered(s, rid, mono());  /* Karn: unambiguous round trips */
        int64_t nxt = rid < n ? rid + window : slot;
        if (nxt < n) {
            s->rounds[slot]++;
            rc = s->guess ? start_chunk(s, nxt, s->guess[nxt], 1, info) : start_chunk(s, nxt, h[F_NEXT], 0, info);
            if (rc != 0) { if (rc < 0) info[0] = -rc; return rc; }
        } else {
            s->outstanding[slot] = -1;
        }
    }
    return R_DONE;
}

/* A stall the tree's liveness explained away: count it; restart=1 also restarts the failure timer. */
/* The sizes of the parameter and result arrays, for the loader to check against its own. */
API void ps_counts(int64_t *out) {
    out[0] = P_COUNT; out[1] = D_COUNT; out[2] = A_COUNT; out[3] = S_COUNT; out[4] = T_COUNT;
}

API int64_t ps_false_alarm(stream_t *s, int restart) {
    if (restart) {
        s->last_progress = mono();
        s->c[S_EXPIRED_SINCE] = 0;
        return s->c[S_ALARMS];
    }
    return ++s->c[S_ALARMS];
}

API void ps_stats(const stream_t *s, int64_t *c, double *t) {
    memcpy(c, s->c, sizeof s->c);
    c[S_HAS_SRTT] = s->has_srtt;
    t[T_QUANTIZE] = s->quantize_s; t[T_AGREED_AT] = s->agreed_at; t[T_LAST_PROGRESS] = s->last_progress;
    t[T_RTO] = s->rto; t[T_SRTT] = s->srtt; t[T_RTTVAR] = s->rttvar; t[T_CALM_UNTIL] = s->calm_until;
}

API void ps_free(stream_t *s) {
    if (!s) return;
    free(s->sends); free(s->round_from); free(s->expiries); free(s->first_sent);
    free(s->outstanding); free(s->due); free(s->early_due); free(s->order); free(s->scratch);
    free(s);
}

static int layout_ok(const int64_t *ip) {  /* every field inside the 24 bytes decode() reads */
    for (int f = 0; f < N_FIELDS; f++) {
        const int64_t *l = &ip[P_LAYOUT + 3 * f];
        if (l[0] < 0 || l[0] > 2 || l[1] < 0 || l[1] > 63) return 0;
    }
    for (int e = 0; e < 4; e++) if (ip[P_WIDTHS + e] < 0 || ip[P_WIDTHS + e] > 4) return 0;
    return ip[P_WIDTH] >= 1 && ip[P_WIDTH] <= 4 && ip[P_WINDOW] >= 1 && ip[P_SLOTS] >= 1 && ip[P_CHUNKS] >= 1;
}

API stream_t *ps_new(const int64_t *ip, int64_t n_ip, const double *dp, int64_t n_dp, void *const *a, int64_t n_a) {
    if (n_ip != P_COUNT || n_dp != D_COUNT || n_a != A_COUNT) return NULL;  /* a loader of another version */
    stream_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    memcpy(s->p, ip, sizeof s->p);
    s->failure_s = dp[D_FAILURE_S]; s->early_window = dp[D_EARLY_WINDOW];
    s->rto = dp[D_RTO]; s->srtt = dp[D_SRTT]; s->rttvar = dp[D_RTTVAR]; s->calm_until = dp[D_CALM_UNTIL];
    s->rto_min = dp[D_RTO_MIN]; s->rto_max = dp[D_RTO_MAX]; s->has_srtt = (int)ip[P_HAS_SRTT];
    s->frames = a[A_FRAMES]; s->exp_frames = a[A_EXP_FRAMES]; s->blocks = a[A_BLOCKS]; s->maxabs = a[A_MAXABS];
    s->proposals = a[A_PROPOSALS]; s->guess = a[A_GUESS]; s->scales = a[A_SCALES]; s->salts = a[A_SALTS];
    s->sums = a[A_SUMS]; s->exps = a[A_EXPS]; s->agreed = a[A_AGREED]; s->got = a[A_GOT]; s->rounds = a[A_ROUNDS];
    s->agreed_at = -1.0;
    int64_t n_ids = ip[P_CHUNKS] + ip[P_SLOTS], w = ip[P_WINDOW];
    size_t big = (size_t)(ip[P_FRAME_LEN] > ip[P_EXP_FRAME_LEN] ? ip[P_FRAME_LEN] : ip[P_EXP_FRAME_LEN]);
    s->sends = calloc((size_t)n_ids, sizeof(int64_t)); s->round_from = calloc((size_t)n_ids, sizeof(int64_t));
    s->expiries = calloc((size_t)n_ids, sizeof(int64_t)); s->first_sent = calloc((size_t)n_ids, sizeof(double));
    s->outstanding = malloc((size_t)w * sizeof(int64_t)); s->due = malloc((size_t)w * sizeof(double));
    s->early_due = malloc((size_t)w * sizeof(double)); s->scratch = malloc(big);
    if (!s->sends || !s->round_from || !s->expiries || !s->first_sent || !s->outstanding || !s->due || !s->early_due
        || !s->scratch || ip[P_HEADER_LEN] > 24 || ip[P_HEADER_LEN] < 1 || !layout_ok(ip)) {
        ps_free(s);
        return NULL;
    }
    for (int64_t i = 0; i < w; i++) { s->outstanding[i] = -1; s->due[i] = INFINITY; s->early_due[i] = INFINITY; }
    return s;
}
