/* Internal helpers of libte-kv. */
#ifndef TE_KV_INTERNAL_H
#define TE_KV_INTERNAL_H

#include <stdint.h>
#include <time.h>

#include "te/kv.h"

/* A checked engine cache (te_kv_cache_new): its description and how many
 * decoders/sources use it (te_kv_cache_free refuses while any does). */
struct te_kv_cache {
    te_kv_cache_desc d;
    te_kv_region regions[TE_KV_MAX_REGIONS];
    /* The allocations, normalised: base/len is allocs[0] (nallocs 1). */
    te_kv_alloc allocs[TE_KV_MAX_ALLOCS];
    uint32_t nallocs;
    uint64_t page_bytes;   /* one region's page */
    uint64_t hidden_bytes; /* one hidden slot's payload */
    int users;             /* under kv_cache_lock */
};

/** Take / drop a user of c (a decoder or source made on it). */
void kv_cache_hold(te_kv_cache *c);
void kv_cache_put(te_kv_cache *c);

/** Claim exactly the pages idx[0..n) of a pool (the engine's own page ids):
 *  -EBUSY naming the first that is not free (used, fencing, or listed
 *  twice), nothing claimed then. A claimed pool is never allocated from. */
int kv_pool_claim(te_kv_pool *p, uint32_t n, const uint32_t *idx);

/** Record a message for te_kv_last_error() and return err. */
int kv_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kv_clear(void);

static inline uint64_t kv_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/**
 * The byte a prefiller writes at offset `off` of page `page` (prompt page
 * index) of layer `layer` of request `id`: deterministic, so a decoder can
 * check every byte that landed. layer = UINT32_MAX: the hidden state.
 */
static inline uint64_t kv_pattern_word(uint64_t id, uint32_t layer,
                                       uint32_t page, uint64_t word)
{
    uint64_t x = id * 0x9e3779b97f4a7c15ull ^ ((uint64_t)layer << 40) ^
                 ((uint64_t)page << 20) ^ word;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return x;
}

static inline uint8_t kv_pattern(uint64_t id, uint32_t layer, uint32_t page,
                                 uint64_t off)
{
    return (uint8_t)(kv_pattern_word(id, layer, page, off >> 3) >>
                     (8 * (off & 7)));
}

/* Fill len bytes at b with the pattern of (id, layer, page), a word at a
 * time (little-endian: byte k of word w is byte 8w+k). */
static inline void kv_pattern_fill(uint8_t *b, uint64_t len, uint64_t id,
                                   uint32_t layer, uint32_t page)
{
    uint64_t w = 0;
    for (; (w + 1) * 8 <= len; w++) {
        uint64_t x = kv_pattern_word(id, layer, page, w);
        __builtin_memcpy(b + w * 8, &x, 8);
    }
    for (uint64_t off = w * 8; off < len; off++)
        b[off] = kv_pattern(id, layer, page, off);
}

/* First offset where b differs from the pattern, or len. */
static inline uint64_t kv_pattern_check(const uint8_t *b, uint64_t len,
                                        uint64_t id, uint32_t layer,
                                        uint32_t page)
{
    uint64_t w = 0;
    for (; (w + 1) * 8 <= len; w++) {
        uint64_t x = kv_pattern_word(id, layer, page, w), y;
        __builtin_memcpy(&y, b + w * 8, 8);
        if (x != y)
            break;
    }
    for (uint64_t off = w * 8; off < len; off++)
        if (b[off] != kv_pattern(id, layer, page, off))
            return off;
    return len;
}

#endif
