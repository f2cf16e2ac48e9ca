/* Sharding rules: how a request maps onto NICs and how many immediates it
 * produces. See shard.h and docs/sharding.md. */
#include "shard.h"

#include <errno.h>
#include "te_hot.h"

TE_HOT
int te_shard_nics(const te_route *route, uint32_t local_nics, uint32_t *first,
                  uint32_t *k)
{
    if (local_nics == 0)
        return -EINVAL;
    if (route->kind == TE_ROUTE_PIN) {
        if (route->nic >= local_nics)
            return -EINVAL;
        *first = route->nic;
        *k = 1;
        return 0;
    }
    if (route->kind != TE_ROUTE_SHARD)
        return -EINVAL;
    *first = 0;
    *k = (route->nics == 0 || route->nics > local_nics) ? local_nics
                                                        : route->nics;
    return 0;
}

void te_shard_range(uint64_t len, uint32_t k, uint32_t i, uint64_t *off,
                    uint64_t *slen)
{
    uint64_t chunk = len / k + (len % k != 0);
    chunk = (chunk + TE_SHARD_ALIGN - 1) / TE_SHARD_ALIGN * TE_SHARD_ALIGN;
    uint64_t start = (uint64_t)i * chunk;
    if (start > len)
        start = len;
    uint64_t end = start + chunk;
    if (end > len || end < start)
        end = len;
    *off = start;
    *slen = end - start;
}

/* Start of part i of len units split by weights (i == k: len), rounded up
 * to a multiple of align. */
static uint64_t weighted_start(uint64_t len, const uint64_t *w, uint32_t k,
                               uint32_t i, uint64_t align)
{
    if (i == 0)
        return 0;
    if (i >= k)
        return len;
    unsigned __int128 before = 0, total = 0;
    for (uint32_t j = 0; j < k; j++) {
        total += w[j];
        if (j < i)
            before += w[j];
    }
    uint64_t start = (uint64_t)((unsigned __int128)len * before / total);
    start = (start + align - 1) / align * align;
    return start > len ? len : start;
}

void te_shard_range_weighted(uint64_t len, const uint64_t *w, uint32_t k,
                             uint32_t i, uint64_t *off, uint64_t *slen)
{
    if (!w) {
        te_shard_range(len, k, i, off, slen);
        return;
    }
    uint64_t a = weighted_start(len, w, k, i, TE_SHARD_ALIGN);
    uint64_t b = weighted_start(len, w, k, i + 1, TE_SHARD_ALIGN);
    *off = a;
    *slen = b > a ? b - a : 0;
}

void te_shard_pages_weighted(uint32_t count, const uint64_t *w, uint32_t k,
                             uint32_t i, uint32_t *first, uint32_t *n)
{
    uint64_t a = weighted_start(count, w, k, i, 1);
    uint64_t b = weighted_start(count, w, k, i + 1, 1);
    *first = (uint32_t)a;
    *n = (uint32_t)(b - a);
}

TE_HOT
int te_shard_keep_whole(const te_request *req, uint64_t min_bytes, uint32_t k)
{
    return k > 1 && min_bytes && req->route.kind == TE_ROUTE_SHARD &&
           (req->op == TE_OP_WRITE || req->op == TE_OP_READ) &&
           req->u.xfer.len < min_bytes;
}

int64_t te_shard_expected_imms(const te_request *req, uint32_t local_nics,
                               uint64_t min_bytes, uint32_t target)
{
    uint32_t first, k;
    if (te_shard_nics(&req->route, local_nics, &first, &k))
        return -EINVAL;
    if (te_shard_keep_whole(req, min_bytes, k))
        k = 1;
    int imm = (req->flags & TE_F_IMM) != 0;
    switch (req->op) {
    case TE_OP_WRITE:
        if (target != 0)
            return -EINVAL;
        return imm ? k : 0;
    case TE_OP_PAGED:
        if (target != 0)
            return -EINVAL;
        return imm ? req->u.paged.count : 0;
    case TE_OP_SCATTER:
        if (target >= req->u.scatter.count)
            return -EINVAL;
        if (!imm)
            return 0;
        return req->u.scatter.split == TE_SCATTER_BY_BYTES ? k : 1;
    case TE_OP_BARRIER:
        if (target >= req->u.barrier.count)
            return -EINVAL;
        return 1;
    case TE_OP_READ:
    case TE_OP_SEND:
        if (target != 0)
            return -EINVAL;
        return 0;
    default:
        return -EINVAL;
    }
}
