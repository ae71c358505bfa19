/* The path's memory (a slot pool and rings that grow but never shrink, so a warm path
 * allocates nothing per packet), CPython's Mersenne Twister, capped byte buffers. */
#include <stdlib.h>
#include <string.h>

#include "cpath.h"

#define POOL_CHUNK_SLOTS 512

int pool_init(struct pool *p, size_t capacity_bytes)
{
    memset(p, 0, sizeof(*p));
    /* 16-byte aligned slots */
    p->slot_bytes = (capacity_bytes + 15) & ~(size_t)15;
    return 0;
}

static int pool_grow(struct pool *p)
{
    size_t stride = sizeof(struct slot) + p->slot_bytes;
    stride = (stride + 15) & ~(size_t)15;
    if (p->n_chunks == p->cap_chunks) {
        size_t cap = p->cap_chunks ? 2 * p->cap_chunks : 16;
        void **chunks = realloc(p->chunks, cap * sizeof(void *));
        if (!chunks)
            return 0;
        p->chunks = chunks;
        p->cap_chunks = cap;
    }
    uint8_t *chunk = malloc(stride * POOL_CHUNK_SLOTS);
    if (!chunk)
        return 0;
    p->chunks[p->n_chunks++] = chunk;
    for (size_t i = 0; i < POOL_CHUNK_SLOTS; i++) {
        struct slot *s = (struct slot *)(chunk + i * stride);
        s->next_free = p->free;
        p->free = s;
    }
    p->allocated += POOL_CHUNK_SLOTS;
    return 1;
}

struct slot *pool_get(struct pool *p)
{
    if (!p->free && !pool_grow(p))
        return NULL;
    struct slot *s = p->free;
    p->free = s->next_free;
    memset(&s->vh, 0, sizeof(s->vh));
    return s;
}

void pool_put(struct pool *p, struct slot *s)
{
    s->next_free = p->free;
    p->free = s;
}

void pool_free(struct pool *p)
{
    for (size_t i = 0; i < p->n_chunks; i++)
        free(p->chunks[i]);
    free(p->chunks);
    memset(p, 0, sizeof(*p));
}

int ring_push(struct ring *r, struct ent e)
{
    if (r->len == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 256;
        struct ent *buf = malloc(cap * sizeof(struct ent));
        if (!buf)
            return 0;
        for (size_t i = 0; i < r->len; i++)
            buf[i] = r->buf[(r->head + i) & (r->cap - 1)];
        free(r->buf);
        r->buf = buf;
        r->cap = cap;
        r->head = 0;
    }
    r->buf[(r->head + r->len) & (r->cap - 1)] = e;
    r->len++;
    return 1;
}

void ring_free(struct ring *r)
{
    free(r->buf);
    memset(r, 0, sizeof(*r));
}

/* --- CPython's _randommodule.c (MT19937, Matsumoto and Nishimura) ------------------- */

#define MT_N 624
#define MT_M 397
#define MATRIX_A 0x9908b0dfU
#define UPPER_MASK 0x80000000U
#define LOWER_MASK 0x7fffffffU

static uint32_t genrand_uint32(struct mt *m)
{
    static const uint32_t mag01[2] = {0x0U, MATRIX_A};
    uint32_t y, *mt = m->state;
    if (m->index >= MT_N) {
        int kk;
        for (kk = 0; kk < MT_N - MT_M; kk++) {
            y = (mt[kk] & UPPER_MASK) | (mt[kk + 1] & LOWER_MASK);
            mt[kk] = mt[kk + MT_M] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        for (; kk < MT_N - 1; kk++) {
            y = (mt[kk] & UPPER_MASK) | (mt[kk + 1] & LOWER_MASK);
            mt[kk] = mt[kk + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        y = (mt[MT_N - 1] & UPPER_MASK) | (mt[0] & LOWER_MASK);
        mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 0x1U];
        m->index = 0;
    }
    y = mt[m->index++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
}

/* random.random(): 53 random bits. */
double mt_random(struct mt *m)
{
    uint32_t a = genrand_uint32(m) >> 5, b = genrand_uint32(m) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* random.Random._randbelow_with_getrandbits(n), n in [1, 2**32). */
uint32_t mt_randbelow(struct mt *m, uint32_t n)
{
    int k = 0;
    for (uint32_t v = n; v; v >>= 1)
        k++;
    uint32_t r = genrand_uint32(m) >> (32 - k);
    while (r >= n)
        r = genrand_uint32(m) >> (32 - k);
    return r;
}

int buf_reserve(struct buf *b, size_t more)
{
    if (b->len >= b->limit)
        return 0;
    if (b->len + more > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->len + more)
            cap *= 2;
        uint8_t *data = realloc(b->data, cap);
        if (!data)
            return 0;
        b->data = data;
        b->cap = cap;
    }
    return 1;
}

void buf_free(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
