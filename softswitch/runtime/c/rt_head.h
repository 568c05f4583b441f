/* The C engine's runtime, first half: what generated code calls (compiled before it, in one unit).
 *
 * Generated code (cemit.py) sees a packet as `struct st` (one member per slot) and everything else
 * through `struct rt_x`: registers and counters in one block each at offsets it knows, match tables,
 * multicast groups, and the failure flag. Lookups here only read; changes are made by rt_body.c under
 * the switch's lock, which packets hold per batch, so a packet never sees half an update.
 *
 * Arithmetic helpers follow the IR's semantics (see cemit.py): shift counts above 4096 give 0 (left),
 * negative counts leave the value, `>>` is arithmetic, division and modulo by zero give 0 and round
 * towards minus infinity.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

typedef int64_t i64;
typedef uint64_t u64;
__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

#define RT_LIKELY(x) __builtin_expect(!!(x), 1)
#define RT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RT_MASK(w) ((w) >= 64 ? ~UINT64_C(0) : ((UINT64_C(1) << (w)) - 1))

enum { RT_FAIL_NONE = 0, RT_FAIL_ASSERT = 1, RT_FAIL_INTERNAL = 2 };
enum { RT_KEYLESS = 0, RT_EXACT = 1, RT_LPM = 2, RT_SCAN = 3 };
#define RT_MAX_KEYS 64

static const u64 rt_noparams[1] = {0};

/* ---------------------------------------------------------------- arithmetic */
static inline u64 rt_shl_u(u64 a, u64 b) { return b >= 64 ? 0 : a << b; }
static inline u64 rt_shl_i(u64 a, i64 b) { return b < 0 ? a : b >= 64 ? 0 : a << b; }
static inline i64 rt_shr_iu(i64 a, u64 b) { return a >> (b >= 63 ? 63 : b); }
static inline i64 rt_shr_ii(i64 a, i64 b) { return b < 0 ? a : a >> (b >= 63 ? 63 : b); }
static inline u64 rt_shr_uu(u64 a, u64 b) { return b >= 64 ? 0 : a >> b; }
static inline u64 rt_shr_ui(u64 a, i64 b) { return b < 0 ? a : b >= 64 ? 0 : a >> b; }
static inline u64 rt_udiv(u64 a, u64 b) { return b ? a / b : 0; }
static inline u64 rt_umod(u64 a, u64 b) { return b ? a % b : 0; }
static inline i128 rt_fdiv(i128 a, i128 b)
{
    i128 q;
    if (!b) return 0;
    q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
static inline i128 rt_fmod(i128 a, i128 b)
{
    i128 r;
    if (!b) return 0;
    r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
static inline i64 rt_clamp_i(i64 a, i64 lo, i64 hi) { return a < lo ? lo : a > hi ? hi : a; }
static inline u64 rt_clamp_u(u64 a, u64 lo, u64 hi) { return a < lo ? lo : a > hi ? hi : a; }
static inline u64 rt_clampu64(u64 a) { return a > (u64)INT64_MAX ? (u64)INT64_MAX : a; }
static inline i64 rt_land(i64 a, i64 b) { return a ? b : a; }
static inline i64 rt_lor(i64 a, i64 b) { return a ? a : b; }
static inline i64 rt_sext(u64 v, int w) { return w >= 64 ? (i64)v : (i64)(v << (64 - w)) >> (64 - w); }

/* ---------------------------------------------------------------- bytes */
static inline u64 rt_get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return __builtin_bswap16(v); }
static inline u64 rt_get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v); }
static inline u64 rt_get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v); }
static inline void rt_put16(uint8_t *p, u64 v) { uint16_t x = __builtin_bswap16((uint16_t)v); memcpy(p, &x, 2); }
static inline void rt_put32(uint8_t *p, u64 v) { uint32_t x = __builtin_bswap32((uint32_t)v); memcpy(p, &x, 4); }
static inline void rt_put64(uint8_t *p, u64 v) { uint64_t x = __builtin_bswap64(v); memcpy(p, &x, 8); }

/* w bits (<= 64) at bit offset `bit` of p, big-endian; every byte read lies in the header */
static inline u64 rt_getbits(const uint8_t *p, int bit, int w)
{
    int first = bit >> 3, lead = bit & 7, nb = (lead + w + 7) >> 3, i;
    u128 acc = 0;
    for (i = 0; i < nb; i++) acc = (acc << 8) | p[first + i];
    acc >>= nb * 8 - lead - w;
    return (u64)acc & RT_MASK(w);
}

/* w bits at bit offset `bitoff` of D[pos..], zeros past the end (a lookahead may read beyond it) */
static inline u64 rt_lookahead(const uint8_t *D, i64 L, i64 pos, int bitoff, int w)
{
    int nb = (bitoff + w + 7) >> 3, i;
    u128 acc = 0;
    for (i = 0; i < nb; i++) {
        i64 q = pos + i;
        acc = (acc << 8) | (q >= 0 && q < L ? D[q] : 0);
    }
    acc >>= nb * 8 - bitoff - w;
    return (u64)acc & RT_MASK(w);
}

static inline void rt_putbytes(uint8_t *p, int nbytes, u64 v)
{
    int i;
    for (i = nbytes - 1; i >= 0; i--) { p[i] = (uint8_t)v; v >>= 8; }
}

/* OR the w low bits of v in at bit offset `bit` (the bytes were zeroed first) */
static inline void rt_orbits(uint8_t *p, int bit, int w, u64 v)
{
    int lead = bit & 7, nb = (lead + w + 7) >> 3, first = bit >> 3, i;
    u128 acc = (u128)(v & RT_MASK(w)) << (nb * 8 - lead - w);
    for (i = nb - 1; i >= 0; i--) { p[first + i] |= (uint8_t)acc; acc >>= 8; }
}

/* a calculation's input: fields appended most significant bit first, zero-padded to a byte */
struct rt_bits {
    uint8_t *buf;
    u64 n;
};

static inline void rt_bits_put(struct rt_bits *b, u64 v, int w)
{
    v &= RT_MASK(w);
    while (w > 0) {
        int room = 8 - (int)(b->n & 7), take = w < room ? w : room;
        u64 bits = (v >> (w - take)) & ((UINT64_C(1) << take) - 1);
        b->buf[b->n >> 3] |= (uint8_t)(bits << (room - take));
        b->n += (u64)take;
        w -= take;
    }
}

/* ---------------------------------------------------------------- hashes (BMv2's calculations.cpp) */
static uint16_t rt_crc16_table[256], rt_ccitt_table[256];
static uint32_t rt_crc32_table[256];
static pthread_once_t rt_tables_once = PTHREAD_ONCE_INIT;

static void rt_init_tables(void)
{
    int b, k;
    for (b = 0; b < 256; b++) {
        uint32_t r = (uint32_t)b, c16 = (uint32_t)b, cc = (uint32_t)b << 8;
        for (k = 0; k < 8; k++) {
            r = (r & 1) ? (r >> 1) ^ 0xEDB88320u : r >> 1;
            c16 = (c16 & 1) ? (c16 >> 1) ^ 0xA001u : c16 >> 1;
            cc = (cc & 0x8000u) ? ((cc << 1) ^ 0x1021u) & 0xFFFFu : (cc << 1) & 0xFFFFu;
        }
        rt_crc32_table[b] = r;
        rt_crc16_table[b] = (uint16_t)c16;
        rt_ccitt_table[b] = (uint16_t)cc;
    }
}

static u64 rt_crc16(const uint8_t *p, u64 n)
{
    uint32_t c = 0;
    u64 i;
    for (i = 0; i < n; i++) c = (c >> 8) ^ rt_crc16_table[(c ^ p[i]) & 0xFF];
    return c & 0xFFFF;
}

static u64 rt_crc_ccitt(const uint8_t *p, u64 n)
{
    uint32_t c = 0xFFFF;
    u64 i;
    for (i = 0; i < n; i++) c = ((c << 8) & 0xFFFF) ^ rt_ccitt_table[((c >> 8) ^ p[i]) & 0xFF];
    return c;
}

static u64 rt_crc32(const uint8_t *p, u64 n)
{
    uint32_t c = 0xFFFFFFFFu;
    u64 i;
    for (i = 0; i < n; i++) c = (c >> 8) ^ rt_crc32_table[(c ^ p[i]) & 0xFF];
    return c ^ 0xFFFFFFFFu;
}

static u64 rt_csum16(const uint8_t *p, u64 n)
{
    u64 sum = 0, i;
    for (i = 0; i + 1 < n; i += 2) sum += ((u64)p[i] << 8) | p[i + 1];
    if (n & 1) sum += (u64)p[n - 1] << 8;
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return ~sum & 0xFFFF;
}

static u64 rt_xor16(const uint8_t *p, u64 n)
{
    u64 acc = 0, i;
    for (i = 0; i + 1 < n; i += 2) acc ^= ((u64)p[i] << 8) | p[i + 1];
    if (n & 1) acc ^= (u64)p[n - 1] << 8;
    return acc;
}

static u64 rt_identity(const uint8_t *p, u64 n)
{
    u64 acc = 0, i;
    for (i = 0; i < n && i < 8; i++) acc = (acc << 8) | p[i];
    return acc;
}

/* ---------------------------------------------------------------- tables */
/* a lookup result, made once when the entry is installed: the action, its data and the next node */
struct rt_res {
    int32_t action; /* IR action number, -1: none */
    int32_t next;   /* IR node after the table, -1: end of the pipeline */
    uint32_t np;
    uint32_t pad;
    u64 p[];
};

#define RT_TOMB ((struct rt_res *)(uintptr_t)1)

/* open addressing, linear probing, keys of nk words */
struct rt_ht {
    u64 *keys;
    struct rt_res **vals;
    uint32_t cap, n, used; /* used: entries plus tombstones */
};

struct rt_table {
    int kind, nk, lpm, lpm_width;
    struct rt_res *def;
    struct rt_ht ht;       /* RT_EXACT */
    struct rt_ht *by_len;  /* RT_LPM: 65 tables, by prefix length */
    int order[65], norder; /* RT_LPM: the prefix lengths in use, longest first */
    u64 *sa, *sb;          /* RT_SCAN: rows of (value, mask) or (low, high) per key, in priority order */
    struct rt_res **sres;
    uint32_t sn, scap;
    uint8_t range[RT_MAX_KEYS];
};

struct rt_table_desc {
    int kind, nk, lpm;
};

struct rt_reg_desc {
    u64 off, size, width, stride; /* cell i at regs + off + i * stride */
};

struct rt_counter_desc {
    u64 off, size;
};

static inline u64 rt_mix(u64 h)
{
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    return h;
}

static inline u64 rt_hkey(const u64 *k, int nk)
{
    u64 h = UINT64_C(0x9e3779b97f4a7c15);
    int i;
    for (i = 0; i < nk; i++) h = rt_mix(h ^ k[i]);
    return h;
}

static inline int rt_keq(const u64 *a, const u64 *b, int nk)
{
    int i;
    for (i = 0; i < nk; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static inline const struct rt_res *rt_ht_find(const struct rt_ht *t, const u64 *k, int nk)
{
    uint32_t mask, i;
    if (!t->n) return NULL;
    mask = t->cap - 1;
    i = (uint32_t)rt_hkey(k, nk) & mask;
    for (;;) {
        const struct rt_res *v = t->vals[i];
        if (!v) return NULL;
        if (v != RT_TOMB && rt_keq(&t->keys[(size_t)i * (size_t)nk], k, nk)) return v;
        i = (i + 1) & mask;
    }
}

static inline u64 rt_prefix_mask(int plen, int width)
{
    if (plen <= 0) return 0;
    return RT_MASK(plen) << (width - plen);
}

static inline const struct rt_res *rt_exact_find(const struct rt_table *t, const u64 *k)
{
    return rt_ht_find(&t->ht, k, t->nk);
}

static inline const struct rt_res *rt_lpm_find(const struct rt_table *t, const u64 *k)
{
    u64 kk[RT_MAX_KEYS];
    int j, li = t->lpm;
    if (!t->norder) return NULL;
    memcpy(kk, k, sizeof(u64) * (size_t)t->nk);
    for (j = 0; j < t->norder; j++) {
        int plen = t->order[j];
        const struct rt_res *r;
        kk[li] = k[li] & rt_prefix_mask(plen, t->lpm_width);
        r = rt_ht_find(&t->by_len[plen], kk, t->nk);
        if (r) return r;
    }
    return NULL;
}

static inline const struct rt_res *rt_scan_find(const struct rt_table *t, const u64 *k)
{
    uint32_t i;
    int j, nk = t->nk;
    for (i = 0; i < t->sn; i++) {
        const u64 *a = &t->sa[(size_t)i * (size_t)nk], *b = &t->sb[(size_t)i * (size_t)nk];
        for (j = 0; j < nk; j++) {
            if (t->range[j] ? (k[j] < a[j] || k[j] > b[j]) : ((k[j] & b[j]) != a[j])) break;
        }
        if (j == nk) return t->sres[i];
    }
    return NULL;
}

/* ---------------------------------------------------------------- multicast */
struct rt_replica {
    int32_t port;
    uint32_t rid;
};

struct rt_group {
    uint32_t n;
    uint32_t pad;
    struct rt_replica r[];
};

#define RT_MAX_GROUP 65535

/* ---------------------------------------------------------------- the switch */
enum { RT_RX, RT_TX, RT_DROPPED, RT_ERRORS, RT_ASSERTIONS, RT_PACKET_IN, RT_LAST_MSG, RT_NSTATS };

struct rt_x {
    /* read by generated code */
    uint8_t *regs;
    u64 *cnt;
    struct rt_table *tab;
    struct rt_group **mc;
    void *s0, *s1; /* the packet's state and a replica's */
    int fail, fail_msg;
    i64 queues;
    i64 t0_ns;
    u64 rng;
    /* the runtime's own */
    pthread_mutex_t lock;
    int cpu_port; /* -1: none */
    struct rt_outs outs; /* outputs of the last p4sw_process call */
    u64 stats[RT_NSTATS];
};

/* Registers of one size and cell type are interleaved: cell i of the group's j-th register is at
 * off_j + i * stride. A packet that reads and writes cell i of many registers (p4ina's 256 lanes)
 * then touches consecutive bytes, not one cache line 4 KB apart per register (which all fall into one
 * L1 set and stall on 4K aliasing between each lane's store and the next lane's load). */
#define RT_REG_ACCESSORS(bits, type)                                                              \
    static inline u64 rt_regget##bits(struct rt_x *X, size_t off, size_t stride, u64 size, u64 i) \
    {                                                                                             \
        if (RT_LIKELY(i < size)) return *(const type *)(const void *)(X->regs + off + i * stride); \
        X->fail = RT_FAIL_INTERNAL;                                                               \
        return 0;                                                                                 \
    }                                                                                             \
    static inline void rt_regset##bits(struct rt_x *X, size_t off, size_t stride, u64 size, u64 i, u64 v) \
    {                                                                                             \
        if (RT_LIKELY(i < size)) *(type *)(void *)(X->regs + off + i * stride) = (type)v;         \
        else X->fail = RT_FAIL_INTERNAL;                                                          \
    }
RT_REG_ACCESSORS(8, uint8_t)
RT_REG_ACCESSORS(16, uint16_t)
RT_REG_ACCESSORS(32, uint32_t)
RT_REG_ACCESSORS(64, uint64_t)

static inline void rt_count(struct rt_x *X, size_t off, u64 size, u64 i, u64 bytes)
{
    if (RT_LIKELY(i < size)) {
        X->cnt[off + 2 * i] += 1;
        X->cnt[off + 2 * i + 1] += bytes;
    } else {
        X->fail = RT_FAIL_INTERNAL;
    }
}

static inline const struct rt_group *rt_mc_get(const struct rt_x *X, i64 gid)
{
    if (gid <= 0 || gid > RT_MAX_GROUP) return NULL;
    return X->mc[gid];
}

static inline i64 rt_now_us(const struct rt_x *X)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((i64)ts.tv_sec * 1000000000 + (i64)ts.tv_nsec - X->t0_ns) / 1000;
}

/* modify_field_rng_uniform: a uniform draw in [lo, hi] (lo when lo > hi), xorshift64* */
static inline i128 rt_rand(struct rt_x *X, i128 lo, i128 hi)
{
    u64 x;
    u128 span;
    if (lo >= hi) return lo;
    x = X->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    X->rng = x;
    x *= UINT64_C(2685821657736338717);
    span = (u128)(hi - lo) + 1;
    return lo + (i128)((u128)x % span);
}

/* room for a frame of up to `need` bytes at the end of the outputs (NULL: out of memory) */
static inline uint8_t *rt_out_reserve(struct rt_outs *O, u64 need)
{
    if (O->cap - O->used < need) {
        u64 cap = O->cap ? O->cap : 65536;
        uint8_t *nb;
        while (cap - O->used < need) cap *= 2;
        nb = (uint8_t *)realloc(O->buf, cap);
        if (!nb) return NULL;
        O->buf = nb;
        O->cap = cap;
    }
    if (O->n == O->dcap) {
        uint32_t dcap = O->dcap ? O->dcap * 2 : 64;
        struct rt_outdesc *nd = (struct rt_outdesc *)realloc(O->d, sizeof(*nd) * dcap);
        if (!nd) return NULL;
        O->d = nd;
        O->dcap = dcap;
    }
    return O->buf + O->used;
}

static inline void rt_out_commit(struct rt_outs *O, int port, uint32_t len)
{
    struct rt_outdesc *d = &O->d[O->n++];
    d->off = O->used;
    d->len = len;
    d->port = port;
    O->used += ((u64)len + 7) & ~(u64)7;
}
