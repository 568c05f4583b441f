/* The C engine's runtime, second half: the library's exported functions (compiled after the
 * generated code, which defines struct st, PROG_* and prog_process).
 *
 * Every function that touches tables, groups, registers, counters or statistics takes the switch's
 * lock, and packets take it once per batch: a control-plane update is therefore never seen half done,
 * and a read sees one consistent state. Results are built before the lock is taken and freed after
 * it is released, so the lock is held for pointer swaps only.
 */

#define RT_EXPORT __attribute__((visibility("default")))

/* ---------------------------------------------------------------- results */
static struct rt_res *rt_res_new(int32_t action, int32_t next, const u64 *p, uint32_t np)
{
    struct rt_res *r = (struct rt_res *)malloc(sizeof(*r) + sizeof(u64) * (np ? np : 1));
    if (!r) return NULL;
    r->action = action;
    r->next = next;
    r->np = np;
    r->pad = 0;
    if (np) memcpy(r->p, p, sizeof(u64) * np);
    else r->p[0] = 0;
    return r;
}

/* ---------------------------------------------------------------- hash tables */
static int rt_ht_grow(struct rt_ht *t, int nk)
{
    uint32_t cap = t->cap ? t->cap : 16, i;
    u64 *keys;
    struct rt_res **vals;
    while ((u64)(t->n + 1) * 2 > cap) cap *= 2;
    keys = (u64 *)calloc((size_t)cap * (size_t)(nk ? nk : 1), sizeof(u64));
    vals = (struct rt_res **)calloc(cap, sizeof(*vals));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return -1;
    }
    for (i = 0; i < t->cap; i++) {
        struct rt_res *v = t->vals[i];
        uint32_t j;
        if (!v || v == RT_TOMB) continue;
        j = (uint32_t)rt_hkey(&t->keys[(size_t)i * nk], nk) & (cap - 1);
        while (vals[j]) j = (j + 1) & (cap - 1);
        vals[j] = v;
        memcpy(&keys[(size_t)j * nk], &t->keys[(size_t)i * nk], sizeof(u64) * (size_t)nk);
    }
    free(t->keys);
    free(t->vals);
    t->keys = keys;
    t->vals = vals;
    t->cap = cap;
    t->used = t->n;
    return 0;
}

/* put (insert or replace); *old gets a replaced result, to be freed by the caller */
static int rt_ht_put(struct rt_ht *t, int nk, const u64 *k, struct rt_res *r, struct rt_res **old)
{
    uint32_t mask, i, tomb = UINT32_MAX;
    *old = NULL;
    if (!t->cap || (u64)(t->used + 1) * 2 > t->cap) {
        if (rt_ht_grow(t, nk)) return -1;
    }
    mask = t->cap - 1;
    i = (uint32_t)rt_hkey(k, nk) & mask;
    for (;;) {
        struct rt_res *v = t->vals[i];
        if (!v) break;
        if (v == RT_TOMB) {
            if (tomb == UINT32_MAX) tomb = i;
        } else if (rt_keq(&t->keys[(size_t)i * nk], k, nk)) {
            *old = v;
            t->vals[i] = r; /* one pointer store: a reader sees the old result or the new one */
            return 0;
        }
        i = (i + 1) & mask;
    }
    if (tomb != UINT32_MAX) i = tomb;
    else t->used++;
    memcpy(&t->keys[(size_t)i * nk], k, sizeof(u64) * (size_t)nk);
    t->vals[i] = r;
    t->n++;
    return 0;
}

static struct rt_res *rt_ht_del(struct rt_ht *t, int nk, const u64 *k)
{
    uint32_t mask, i;
    if (!t->n) return NULL;
    mask = t->cap - 1;
    i = (uint32_t)rt_hkey(k, nk) & mask;
    for (;;) {
        struct rt_res *v = t->vals[i];
        if (!v) return NULL;
        if (v != RT_TOMB && rt_keq(&t->keys[(size_t)i * nk], k, nk)) {
            t->vals[i] = RT_TOMB;
            t->n--;
            return v;
        }
        i = (i + 1) & mask;
    }
}

static void rt_ht_free(struct rt_ht *t)
{
    uint32_t i;
    for (i = 0; i < t->cap; i++)
        if (t->vals[i] && t->vals[i] != RT_TOMB) free(t->vals[i]);
    free(t->keys);
    free(t->vals);
    memset(t, 0, sizeof(*t));
}

/* ---------------------------------------------------------------- the switch */
struct p4sw {
    struct rt_x x;
};

static void rt_table_free(struct rt_table *t)
{
    int p;
    uint32_t i;
    rt_ht_free(&t->ht);
    if (t->by_len) {
        for (p = 0; p <= 64; p++) rt_ht_free(&t->by_len[p]);
        free(t->by_len);
        t->by_len = NULL;
    }
    for (i = 0; i < t->sn; i++) free(t->sres[i]);
    free(t->sa);
    free(t->sb);
    free(t->sres);
    t->sa = t->sb = NULL;
    t->sres = NULL;
    t->sn = t->scap = 0;
    t->norder = 0;
}

RT_EXPORT int p4sw_abi(void) { return RT_ABI; }
RT_EXPORT u64 p4sw_state_size(void) { return sizeof(struct st); }

RT_EXPORT void p4sw_free(struct p4sw *sw)
{
    struct rt_x *X;
    int i;
    if (!sw) return;
    X = &sw->x;
    if (X->tab) {
        for (i = 0; i < PROG_NTABLES; i++) {
            rt_table_free(&X->tab[i]);
            free(X->tab[i].def);
        }
    }
    if (X->mc) {
        for (i = 0; i <= RT_MAX_GROUP; i++) free(X->mc[i]);
    }
    free(X->tab);
    free(X->mc);
    free(X->regs);
    free(X->cnt);
    free(X->s0);
    free(X->s1);
    free(X->outs.buf);
    free(X->outs.d);
    pthread_mutex_destroy(&X->lock);
    free(sw);
}

RT_EXPORT struct p4sw *p4sw_new(void)
{
    struct p4sw *sw = (struct p4sw *)calloc(1, sizeof(*sw));
    struct rt_x *X;
    int i;
    pthread_once(&rt_tables_once, rt_init_tables);
    if (!sw) return NULL;
    X = &sw->x;
    if (pthread_mutex_init(&X->lock, NULL)) {
        free(sw);
        return NULL;
    }
    X->tab = (struct rt_table *)calloc(PROG_NTABLES ? PROG_NTABLES : 1, sizeof(struct rt_table));
    X->mc = (struct rt_group **)calloc(RT_MAX_GROUP + 1, sizeof(struct rt_group *));
    X->regs = (uint8_t *)calloc(PROG_REG_BYTES ? PROG_REG_BYTES : 8, 1);
    X->cnt = (u64 *)calloc(PROG_COUNTER_CELLS ? PROG_COUNTER_CELLS : 1, sizeof(u64));
    if (posix_memalign(&X->s0, 64, sizeof(struct st)) || posix_memalign(&X->s1, 64, sizeof(struct st))) {
        X->s0 = X->s1 = NULL;
    }
    if (!X->tab || !X->mc || !X->regs || !X->cnt || !X->s0 || !X->s1) {
        p4sw_free(sw);
        return NULL;
    }
    for (i = 0; i < PROG_NTABLES; i++) {
        X->tab[i].kind = PROG_TABLES[i].kind;
        X->tab[i].nk = PROG_TABLES[i].nk;
        X->tab[i].lpm = PROG_TABLES[i].lpm;
    }
    X->queues = 1;
    X->cpu_port = -1;
    X->rng = UINT64_C(0x853c49e6748fea9b);
    return sw;
}

/* priority queues per port, the CPU port (-1: none), the clock's zero (CLOCK_MONOTONIC ns), the RNG seed */
RT_EXPORT void p4sw_config(struct p4sw *sw, int queues, int cpu_port, i64 t0_ns, u64 seed)
{
    pthread_mutex_lock(&sw->x.lock);
    sw->x.queues = queues;
    sw->x.cpu_port = cpu_port;
    sw->x.t0_ns = t0_ns;
    sw->x.rng = seed ? seed : UINT64_C(0x853c49e6748fea9b);
    pthread_mutex_unlock(&sw->x.lock);
}

/* the lpm key's width and which keys of a scan table are ranges (before any entry) */
RT_EXPORT int p4sw_table_init(struct p4sw *sw, int t, int lpm_width, const uint8_t *range, int nk)
{
    struct rt_table *T;
    int j;
    if (t < 0 || t >= PROG_NTABLES) return -1;
    T = &sw->x.tab[t];
    if (nk != T->nk || nk > RT_MAX_KEYS || lpm_width < 0 || lpm_width > 64) return -1;
    pthread_mutex_lock(&sw->x.lock);
    T->lpm_width = lpm_width;
    for (j = 0; j < nk; j++) T->range[j] = range[j] ? 1 : 0;
    if (T->kind == RT_LPM && !T->by_len) T->by_len = (struct rt_ht *)calloc(65, sizeof(struct rt_ht));
    pthread_mutex_unlock(&sw->x.lock);
    return (T->kind == RT_LPM && !T->by_len) ? -1 : 0;
}

static struct rt_table *rt_table(struct p4sw *sw, int t, int kind)
{
    if (t < 0 || t >= PROG_NTABLES) return NULL;
    if (kind >= 0 && sw->x.tab[t].kind != kind) return NULL;
    return &sw->x.tab[t];
}

RT_EXPORT int p4sw_set_default(struct p4sw *sw, int t, int32_t action, int32_t next, const u64 *p, uint32_t np)
{
    struct rt_table *T = rt_table(sw, t, -1);
    struct rt_res *r, *old;
    if (!T) return -1;
    r = rt_res_new(action, next, p, np);
    if (!r) return -2;
    pthread_mutex_lock(&sw->x.lock);
    old = T->def;
    T->def = r;
    pthread_mutex_unlock(&sw->x.lock);
    free(old);
    return 0;
}

RT_EXPORT int p4sw_exact_put(struct p4sw *sw, int t, const u64 *k, int32_t action, int32_t next, const u64 *p, uint32_t np)
{
    struct rt_table *T = rt_table(sw, t, RT_EXACT);
    struct rt_res *r, *old = NULL;
    int rc;
    if (!T) return -1;
    r = rt_res_new(action, next, p, np);
    if (!r) return -2;
    pthread_mutex_lock(&sw->x.lock);
    rc = rt_ht_put(&T->ht, T->nk, k, r, &old);
    pthread_mutex_unlock(&sw->x.lock);
    if (rc) free(r);
    free(old);
    return rc ? -2 : 0;
}

RT_EXPORT int p4sw_exact_del(struct p4sw *sw, int t, const u64 *k)
{
    struct rt_table *T = rt_table(sw, t, RT_EXACT);
    struct rt_res *old;
    if (!T) return -1;
    pthread_mutex_lock(&sw->x.lock);
    old = rt_ht_del(&T->ht, T->nk, k);
    pthread_mutex_unlock(&sw->x.lock);
    free(old);
    return old ? 0 : -3;
}

static void rt_lpm_order(struct rt_table *T)
{
    int p;
    T->norder = 0;
    for (p = 64; p >= 0; p--)
        if (T->by_len[p].n) T->order[T->norder++] = p;
}

RT_EXPORT int p4sw_lpm_put(struct p4sw *sw, int t, int plen, const u64 *k, int32_t action, int32_t next, const u64 *p, uint32_t np)
{
    struct rt_table *T = rt_table(sw, t, RT_LPM);
    struct rt_res *r, *old = NULL;
    int rc;
    if (!T || !T->by_len || plen < 0 || plen > T->lpm_width) return -1;
    r = rt_res_new(action, next, p, np);
    if (!r) return -2;
    pthread_mutex_lock(&sw->x.lock);
    rc = rt_ht_put(&T->by_len[plen], T->nk, k, r, &old);
    if (!rc) rt_lpm_order(T);
    pthread_mutex_unlock(&sw->x.lock);
    if (rc) free(r);
    free(old);
    return rc ? -2 : 0;
}

RT_EXPORT int p4sw_lpm_del(struct p4sw *sw, int t, int plen, const u64 *k)
{
    struct rt_table *T = rt_table(sw, t, RT_LPM);
    struct rt_res *old;
    if (!T || !T->by_len || plen < 0 || plen > 64) return -1;
    pthread_mutex_lock(&sw->x.lock);
    old = rt_ht_del(&T->by_len[plen], T->nk, k);
    rt_lpm_order(T);
    pthread_mutex_unlock(&sw->x.lock);
    free(old);
    return old ? 0 : -3;
}

/* a scan row at position `at` (the Python side keeps the priority order and says where) */
RT_EXPORT int p4sw_scan_insert(struct p4sw *sw, int t, uint32_t at, const u64 *a, const u64 *b, int32_t action, int32_t next,
                               const u64 *p, uint32_t np)
{
    struct rt_table *T = rt_table(sw, t, RT_SCAN);
    struct rt_res *r;
    size_t nk;
    int rc = 0;
    if (!T) return -1;
    nk = (size_t)T->nk;
    r = rt_res_new(action, next, p, np);
    if (!r) return -2;
    pthread_mutex_lock(&sw->x.lock);
    if (at > T->sn) {
        rc = -1;
    } else {
        if (T->sn == T->scap) {
            uint32_t cap = T->scap ? T->scap * 2 : 16;
            u64 *sa = (u64 *)realloc(T->sa, sizeof(u64) * cap * (nk ? nk : 1));
            u64 *sb = sa ? (u64 *)realloc(T->sb, sizeof(u64) * cap * (nk ? nk : 1)) : NULL;
            struct rt_res **sres = sb ? (struct rt_res **)realloc(T->sres, sizeof(*sres) * cap) : NULL;
            if (sa) T->sa = sa;
            if (sb) T->sb = sb;
            if (sres) {
                T->sres = sres;
                T->scap = cap;
            } else {
                rc = -2;
            }
        }
        if (!rc) {
            memmove(&T->sa[(at + 1) * nk], &T->sa[at * nk], sizeof(u64) * nk * (T->sn - at));
            memmove(&T->sb[(at + 1) * nk], &T->sb[at * nk], sizeof(u64) * nk * (T->sn - at));
            memmove(&T->sres[at + 1], &T->sres[at], sizeof(*T->sres) * (T->sn - at));
            memcpy(&T->sa[at * nk], a, sizeof(u64) * nk);
            memcpy(&T->sb[at * nk], b, sizeof(u64) * nk);
            T->sres[at] = r;
            T->sn++;
        }
    }
    pthread_mutex_unlock(&sw->x.lock);
    if (rc) free(r);
    return rc;
}

RT_EXPORT int p4sw_scan_delete(struct p4sw *sw, int t, uint32_t at)
{
    struct rt_table *T = rt_table(sw, t, RT_SCAN);
    struct rt_res *old = NULL;
    size_t nk;
    if (!T) return -1;
    nk = (size_t)T->nk;
    pthread_mutex_lock(&sw->x.lock);
    if (at < T->sn) {
        old = T->sres[at];
        memmove(&T->sa[at * nk], &T->sa[(at + 1) * nk], sizeof(u64) * nk * (T->sn - at - 1));
        memmove(&T->sb[at * nk], &T->sb[(at + 1) * nk], sizeof(u64) * nk * (T->sn - at - 1));
        memmove(&T->sres[at], &T->sres[at + 1], sizeof(*T->sres) * (T->sn - at - 1));
        T->sn--;
    }
    pthread_mutex_unlock(&sw->x.lock);
    free(old);
    return old ? 0 : -3;
}

RT_EXPORT int p4sw_scan_set(struct p4sw *sw, int t, uint32_t at, int32_t action, int32_t next, const u64 *p, uint32_t np)
{
    struct rt_table *T = rt_table(sw, t, RT_SCAN);
    struct rt_res *r, *old = NULL;
    if (!T) return -1;
    r = rt_res_new(action, next, p, np);
    if (!r) return -2;
    pthread_mutex_lock(&sw->x.lock);
    if (at < T->sn) {
        old = T->sres[at];
        T->sres[at] = r;
    }
    pthread_mutex_unlock(&sw->x.lock);
    if (!old) {
        free(r);
        return -3;
    }
    free(old);
    return 0;
}

RT_EXPORT int p4sw_table_clear(struct p4sw *sw, int t)
{
    struct rt_table *T = rt_table(sw, t, -1), old;
    if (!T) return -1;
    pthread_mutex_lock(&sw->x.lock);
    old = *T;
    T->ht.keys = NULL;
    T->ht.vals = NULL;
    T->ht.cap = T->ht.n = T->ht.used = 0;
    T->sa = T->sb = NULL;
    T->sres = NULL;
    T->sn = T->scap = 0;
    T->norder = 0;
    if (T->by_len) T->by_len = (struct rt_ht *)calloc(65, sizeof(struct rt_ht));
    pthread_mutex_unlock(&sw->x.lock);
    old.def = NULL;
    rt_table_free(&old);
    return (old.by_len && !T->by_len) ? -2 : 0;
}

/* ---------------------------------------------------------------- multicast */
RT_EXPORT int p4sw_mc_set(struct p4sw *sw, int gid, const int32_t *ports, const uint32_t *rids, uint32_t n)
{
    struct rt_group *g, *old;
    uint32_t i;
    if (gid <= 0 || gid > RT_MAX_GROUP) return -1;
    g = (struct rt_group *)malloc(sizeof(*g) + sizeof(struct rt_replica) * (n ? n : 1));
    if (!g) return -2;
    g->n = n;
    g->pad = 0;
    for (i = 0; i < n; i++) {
        g->r[i].port = ports[i];
        g->r[i].rid = rids[i];
    }
    pthread_mutex_lock(&sw->x.lock);
    old = sw->x.mc[gid];
    sw->x.mc[gid] = g;
    pthread_mutex_unlock(&sw->x.lock);
    free(old);
    return 0;
}

RT_EXPORT int p4sw_mc_del(struct p4sw *sw, int gid)
{
    struct rt_group *old;
    if (gid <= 0 || gid > RT_MAX_GROUP) return -1;
    pthread_mutex_lock(&sw->x.lock);
    old = sw->x.mc[gid];
    sw->x.mc[gid] = NULL;
    pthread_mutex_unlock(&sw->x.lock);
    free(old);
    return old ? 0 : -3;
}

/* ---------------------------------------------------------------- registers and counters */
static int rt_reg_ok(int r, u64 i) { return r >= 0 && r < PROG_NREGS && i < PROG_REGS[r].size; }

static u64 rt_reg_load(const struct rt_x *X, int r, u64 i)
{
    const uint8_t *cell = X->regs + PROG_REGS[r].off + i * PROG_REGS[r].stride;
    u64 w = PROG_REGS[r].width;
    if (w <= 8) return *(const uint8_t *)cell;
    if (w <= 16) return *(const uint16_t *)(const void *)cell;
    if (w <= 32) return *(const uint32_t *)(const void *)cell;
    return *(const uint64_t *)(const void *)cell;
}

RT_EXPORT int p4sw_reg_read(struct p4sw *sw, int r, u64 i, u64 *out)
{
    if (!rt_reg_ok(r, i)) return -1;
    pthread_mutex_lock(&sw->x.lock);
    *out = rt_reg_load(&sw->x, r, i);
    pthread_mutex_unlock(&sw->x.lock);
    return 0;
}

/* all cells of a register at one instant */
RT_EXPORT int p4sw_reg_read_all(struct p4sw *sw, int r, u64 *out)
{
    u64 i;
    if (r < 0 || r >= PROG_NREGS) return -1;
    pthread_mutex_lock(&sw->x.lock);
    for (i = 0; i < PROG_REGS[r].size; i++) out[i] = rt_reg_load(&sw->x, r, i);
    pthread_mutex_unlock(&sw->x.lock);
    return 0;
}

RT_EXPORT int p4sw_reg_write(struct p4sw *sw, int r, u64 i, u64 v)
{
    uint8_t *base;
    u64 w;
    if (!rt_reg_ok(r, i)) return -1;
    w = PROG_REGS[r].width;
    if (w < 64 && (v >> w)) return -1;
    base = sw->x.regs + PROG_REGS[r].off + i * PROG_REGS[r].stride;
    pthread_mutex_lock(&sw->x.lock);
    if (w <= 8) *(uint8_t *)base = (uint8_t)v;
    else if (w <= 16) *(uint16_t *)(void *)base = (uint16_t)v;
    else if (w <= 32) *(uint32_t *)(void *)base = (uint32_t)v;
    else *(uint64_t *)(void *)base = v;
    pthread_mutex_unlock(&sw->x.lock);
    return 0;
}

RT_EXPORT int p4sw_counter_read(struct p4sw *sw, int c, u64 i, u64 *out)
{
    const u64 *cell;
    if (c < 0 || c >= PROG_NCOUNTERS || i >= PROG_COUNTERS[c].size) return -1;
    cell = &sw->x.cnt[PROG_COUNTERS[c].off + 2 * i];
    pthread_mutex_lock(&sw->x.lock);
    out[0] = cell[0];
    out[1] = cell[1];
    pthread_mutex_unlock(&sw->x.lock);
    return 0;
}

/* every cell of a counter (packets, bytes pairs) at one instant */
RT_EXPORT int p4sw_counter_read_all(struct p4sw *sw, int c, u64 *out)
{
    if (c < 0 || c >= PROG_NCOUNTERS) return -1;
    pthread_mutex_lock(&sw->x.lock);
    memcpy(out, &sw->x.cnt[PROG_COUNTERS[c].off], sizeof(u64) * 2 * PROG_COUNTERS[c].size);
    pthread_mutex_unlock(&sw->x.lock);
    return 0;
}

RT_EXPORT int p4sw_counter_write(struct p4sw *sw, int c, u64 i, u64 packets, u64 bytes)
{
    u64 *cell;
    if (c < 0 || c >= PROG_NCOUNTERS || i >= PROG_COUNTERS[c].size) return -1;
    cell = &sw->x.cnt[PROG_COUNTERS[c].off + 2 * i];
    pthread_mutex_lock(&sw->x.lock);
    cell[0] = packets;
    cell[1] = bytes;
    pthread_mutex_unlock(&sw->x.lock);
    return 0;
}

RT_EXPORT void p4sw_stats(struct p4sw *sw, u64 *out)
{
    pthread_mutex_lock(&sw->x.lock);
    memcpy(out, sw->x.stats, sizeof(sw->x.stats));
    pthread_mutex_unlock(&sw->x.lock);
}

/* ---------------------------------------------------------------- packets */
/* one packet (the lock held): outputs appended to O, statistics as the Python engine keeps them */
static int rt_process_one(struct rt_x *X, int port, const uint8_t *data, uint32_t len, struct rt_outs *O)
{
    uint32_t n0 = O->n, i;
    u64 used0 = O->used, drops = 0;
    int rc;
    X->stats[RT_RX]++;
    X->fail = RT_FAIL_NONE;
    rc = prog_process(X, port, data, (i64)len, O, &drops);
    if (rc < 0 || X->fail) {
        /* as the Python engine: a failed packet sends nothing, even replicas made before the failure */
        O->n = n0;
        O->used = used0;
        X->stats[RT_DROPPED]++;
        if (X->fail == RT_FAIL_ASSERT) {
            X->stats[RT_ASSERTIONS]++;
            X->stats[RT_LAST_MSG] = (u64)X->fail_msg;
            rc = 1;
        } else {
            X->stats[RT_ERRORS]++;
            rc = 2;
        }
        X->fail = RT_FAIL_NONE;
        return rc;
    }
    X->stats[RT_DROPPED] += drops;
    for (i = n0; i < O->n; i++) {
        if (X->cpu_port >= 0 && O->d[i].port == X->cpu_port) X->stats[RT_PACKET_IN]++;
        else X->stats[RT_TX]++;
    }
    return 0;
}

/* the Python API's path: one packet, its outputs in the switch's own buffer until the next call;
 * returns 0, 1 (the program's assert failed: *msg says which) or 2 (an internal error) */
RT_EXPORT int p4sw_process(struct p4sw *sw, int port, const uint8_t *data, uint32_t len, int *msg,
                           const struct rt_outs **outs)
{
    struct rt_x *X = &sw->x;
    int rc;
    pthread_mutex_lock(&X->lock);
    X->outs.n = 0;
    X->outs.used = 0;
    rc = rt_process_one(X, port, data, len, &X->outs);
    *msg = (int)X->stats[RT_LAST_MSG];
    pthread_mutex_unlock(&X->lock);
    *outs = &X->outs;
    return rc;
}

/* the port loop's path (rt_batch_fn): the lock taken once for the whole batch */
RT_EXPORT int p4sw_batch(void *opaque, const struct rt_frame *f, uint32_t n, struct rt_outs *O)
{
    struct p4sw *sw = (struct p4sw *)opaque;
    uint32_t i;
    pthread_mutex_lock(&sw->x.lock);
    for (i = 0; i < n; i++) rt_process_one(&sw->x, f[i].port, f[i].data, f[i].len, O);
    pthread_mutex_unlock(&sw->x.lock);
    return 0;
}

/* the benchmark's path: n frames from one buffer, `batch` at a time, outputs counted and dropped */
RT_EXPORT u64 p4sw_run(struct p4sw *sw, const uint8_t *buf, const u64 *off, const uint32_t *len, const int32_t *port,
                       uint32_t n, uint32_t batch, u64 *out_bytes)
{
    struct rt_outs O;
    struct rt_frame fr[256];
    u64 outs = 0, bytes = 0;
    uint32_t i = 0, j, k;
    memset(&O, 0, sizeof(O));
    if (batch == 0 || batch > 256) batch = 256;
    while (i < n) {
        k = n - i < batch ? n - i : batch;
        for (j = 0; j < k; j++) {
            fr[j].data = buf + off[i + j];
            fr[j].len = len[i + j];
            fr[j].port = port[i + j];
        }
        O.n = 0;
        O.used = 0;
        p4sw_batch(sw, fr, k, &O);
        outs += O.n;
        for (j = 0; j < O.n; j++) bytes += O.d[j].len;
        i += k;
    }
    free(O.buf);
    free(O.d);
    if (out_bytes) *out_bytes = bytes;
    return outs;
}

RT_EXPORT rt_batch_fn p4sw_batch_fn(void) { return p4sw_batch; }
