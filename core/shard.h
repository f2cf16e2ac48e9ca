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
 * group has local_nics NICs; -EINVAL if target is out of range.
 */
int64_t te_shard_expected_imms(const te_request *req, uint32_t local_nics,
                               uint32_t target);

#endif
