/*
 * Sharding rules (documented in docs/sharding.md). Pure functions: the
 * worker, te_expected_imms() and the tests all use these, so the count a
 * receiver expects can never drift from what is posted.
 */
#ifndef TE_CORE_SHARD_H
#define TE_CORE_SHARD_H

#include <stdint.h>
#include "te/te.h"

/** Alignment of shard boundaries (a cache line). */
#define TE_SHARD_ALIGN 64u

/**
 * NICs a request uses: *first and *k (k >= 1). -EINVAL if the route names a
 * NIC outside [0, local_nics) or an unknown kind.
 */
int te_shard_nics(const te_route *route, uint32_t local_nics, uint32_t *first,
                  uint32_t *k);

/**
 * Byte range of shard i (0 <= i < k) of a len-byte transfer: shards are
 * ceil(len/k) rounded up to TE_SHARD_ALIGN, in order; trailing shards may
 * be empty (still sent, so counts never depend on the data size).
 */
void te_shard_range(uint64_t len, uint32_t k, uint32_t i, uint64_t *off,
                    uint64_t *slen);

/**
 * Byte range of shard i of a len-byte transfer split in proportion to
 * weights w[0..k-1] (all > 0): shard i starts at len * (w[0]+..+w[i-1]) /
 * (w[0]+..+w[k-1]) rounded up to TE_SHARD_ALIGN (capped at len) and ends
 * where shard i+1 starts (the last at len). w == NULL: te_shard_range().
 */
void te_shard_range_weighted(uint64_t len, const uint64_t *w, uint32_t k,
                             uint32_t i, uint64_t *off, uint64_t *slen);

/**
 * Pages of a paged write over k NICs of weights w (all > 0): NIC i sends
 * the n pages starting at page *first, a contiguous block in proportion to
 * its weight (equal NICs use te_shard_page_nic's interleaving instead).
 */
void te_shard_pages_weighted(uint32_t count, const uint64_t *w, uint32_t k,
                             uint32_t i, uint32_t *first, uint32_t *n);

/**
 * 1 if req stays whole on one NIC although its route spans k > 1 NICs: a
 * WRITE or READ shorter than min_bytes (engine.shard_min_bytes; 0 = never).
 */
int te_shard_keep_whole(const te_request *req, uint64_t min_bytes, uint32_t k);

/** Remote NIC that local NIC `local` talks to on a peer with remote_nics. */
static inline uint32_t te_shard_remote_nic(uint32_t local, uint32_t remote_nics)
{
    return remote_nics ? local % remote_nics : 0;
}

/** Local NIC (offset from `first`) of page j of a paged request over k NICs. */
static inline uint32_t te_shard_page_nic(uint32_t j, uint32_t k)
{
    return j % k;
}

/**
 * Immediates destination `target` receives for req when the submitting
 * group has local_nics NICs and engine.shard_min_bytes is min_bytes;
 * -EINVAL if target is out of range.
 */
int64_t te_shard_expected_imms(const te_request *req, uint32_t local_nics,
                               uint64_t min_bytes, uint32_t target);

#endif
