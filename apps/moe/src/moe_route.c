/* Routing (te/moe.h): a seeded random top-k for tests and benchmarks, and
 * the check of an application's routing before anything is written. The
 * experts themselves are the application's (apps/moe/tool/moe_ref.c has
 * the reference ones of te-moe and the tests). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe_internal.h"

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

int te_moe_route_random(const te_moe_config *c, uint32_t tokens,
                        uint64_t seed, uint32_t skew, uint16_t *experts,
                        float *weights)
{
    /* skew: experts of rank 0 only (a hot rank), or all */
    uint32_t span = skew ? c->experts / c->ranks : c->experts;
    if (span < c->topk) /* no top-k of distinct experts: it never ended */
        return moe_fail(-EINVAL, "te_moe_route_random: top-%u of %u experts%s",
                        c->topk, span, skew ? " (skew: rank 0's alone)" : "");
    for (uint32_t t = 0; t < tokens; t++) {
        float sum = 0;
        for (uint32_t j = 0; j < c->topk; j++) {
            uint32_t e;
            for (uint64_t n = 0;; n++) {
                uint64_t r = mix(seed ^ ((uint64_t)t << 20) ^ (j << 8) ^ (n << 40));
                e = (uint32_t)(r % span);
                int dup = 0;
                for (uint32_t q = 0; q < j; q++)
                    dup |= experts[t * c->topk + q] == e;
                if (!dup)
                    break;
            }
            experts[t * c->topk + j] = (uint16_t)e;
            weights[t * c->topk + j] =
                (float)(mix(seed * 31 + t * 8 + j) % 1000 + 1) / 1000.0f;
            sum += weights[t * c->topk + j];
        }
        for (uint32_t j = 0; j < c->topk; j++)
            weights[t * c->topk + j] /= sum;
    }
    return 0;
}

int moe_check_routing(const te_moe_config *c, uint32_t tokens,
                      const uint16_t *experts, const float *weights)
{
    for (uint32_t t = 0; t < tokens; t++)
        for (uint32_t j = 0; j < c->topk; j++) {
            uint16_t e = experts[t * c->topk + j];
            if (e >= c->experts)
                /* Short: the peers get the first 47 characters. */
                return moe_fail(-EINVAL, "token %u: expert %u out of range "
                                "(%u)", t, e, c->experts);
            for (uint32_t q = 0; q < j; q++)
                if (experts[t * c->topk + q] == e)
                    return moe_fail(-EINVAL, "token %u: expert %u chosen "
                                    "twice", t, e);
            if (!isfinite(weights[t * c->topk + j]))
                return moe_fail(-EINVAL, "token %u slot %u: weight not "
                                "finite", t, j);
        }
    return 0;
}
