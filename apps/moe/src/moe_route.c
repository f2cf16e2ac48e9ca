/* Experts, routing and the dense reference (te/moe.h). The expert function
 * is a real matmul, block-diagonal so that it stays small: every 8 elements
 * of a token are multiplied by the expert's own 8x8 matrix, in a fixed
 * order, so that the networked result is bit-identical to the reference. */
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

void moe_expert_matrix(uint64_t seed, uint32_t e, float m[64])
{
    for (int i = 0; i < 64; i++) /* small values: sums stay in range */
        m[i] = (float)((int)(mix(seed ^ ((uint64_t)e << 8 | (uint64_t)i)) %
                             2001) - 1000) / 4096.0f;
}

float moe_bf16_to_f32(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t moe_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

void moe_token_f32(const te_moe_config *c, const void *x, uint32_t t,
                   float *out)
{
    if (c->dtype == TE_MOE_BF16) {
        const uint16_t *b = (const uint16_t *)x + (size_t)t * c->hidden;
        for (uint32_t i = 0; i < c->hidden; i++)
            out[i] = moe_bf16_to_f32(b[i]);
    } else {
        memcpy(out, (const float *)x + (size_t)t * c->hidden,
               c->hidden * sizeof(float));
    }
}

/* acc += w * expert_e(x), element by element, j ascending in the block. */
void moe_expert_accumulate(const moe_weights *W, uint32_t e, float w,
                           const float *x, uint32_t hidden, float *acc)
{
    const float *m = W->m + (size_t)e * 64;
    for (uint32_t b = 0; b < hidden; b += 8)
        for (int i = 0; i < 8; i++) {
            float y = 0.0f;
            for (int j = 0; j < 8; j++)
                y += m[i * 8 + j] * x[b + (uint32_t)j];
            acc[b + (uint32_t)i] += w * y;
        }
}

int moe_weights_init(const te_moe_config *c, moe_weights *W)
{
    W->m = malloc((size_t)c->experts * 64 * sizeof(float));
    if (!W->m)
        return -ENOMEM;
    for (uint32_t e = 0; e < c->experts; e++)
        moe_expert_matrix(c->weights_seed, e, W->m + (size_t)e * 64);
    return 0;
}

void moe_weights_free(moe_weights *W) { free(W->m); }

int te_moe_route_random(const te_moe_config *c, uint32_t tokens,
                        uint64_t seed, uint32_t skew, uint16_t *experts,
                        float *weights)
{
    for (uint32_t t = 0; t < tokens; t++) {
        float sum = 0;
        for (uint32_t j = 0; j < c->topk; j++) {
            uint32_t e;
            for (uint64_t n = 0;; n++) {
                uint64_t r = mix(seed ^ ((uint64_t)t << 20) ^ (j << 8) ^ (n << 40));
                /* skew: experts of rank 0 only (a hot rank), or all */
                uint32_t span = skew ? c->experts / c->ranks : c->experts;
                e = (uint32_t)(r % (span ? span : 1));
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
                return moe_fail(-EINVAL, "token %u slot %u: expert %u out of "
                                "range (%u experts)", t, j, e, c->experts);
            for (uint32_t q = 0; q < j; q++)
                if (experts[t * c->topk + q] == e)
                    return moe_fail(-EINVAL, "token %u: expert %u chosen "
                                    "twice", t, e);
            if (!isfinite(weights[t * c->topk + j]))
                return moe_fail(-EINVAL, "token %u slot %u: weight is not "
                                "finite", t, j);
        }
    return 0;
}

/* The partial result of rank d for token t: sum over the slots j whose
 * expert lives on d, in slot order. */
void moe_partial(const te_moe_config *c, const moe_weights *W, uint32_t d,
                 uint32_t nexp, const uint16_t *ex, const float *wt,
                 const float *x, float *acc)
{
    uint32_t per = c->experts / c->ranks;
    memset(acc, 0, c->hidden * sizeof(float));
    for (uint32_t j = 0; j < nexp; j++)
        if (ex[j] / per == d)
            moe_expert_accumulate(W, ex[j], wt[j], x, c->hidden, acc);
}

int te_moe_reference(const te_moe_config *c, uint32_t rank, uint32_t tokens,
                     const void *x, const uint16_t *experts,
                     const float *weights, float *out)
{
    (void)rank;
    moe_weights W;
    if (moe_weights_init(c, &W))
        return -ENOMEM;
    float *xt = malloc(c->hidden * sizeof(float));
    float *part = malloc(c->hidden * sizeof(float));
    for (uint32_t t = 0; t < tokens; t++) {
        moe_token_f32(c, x, t, xt);
        float *o = out + (size_t)t * c->hidden;
        memset(o, 0, c->hidden * sizeof(float));
        for (uint32_t d = 0; d < c->ranks; d++) {
            moe_partial(c, &W, d, c->topk, experts + (size_t)t * c->topk,
                        weights + (size_t)t * c->topk, xt, part);
            for (uint32_t i = 0; i < c->hidden; i++)
                o[i] += part[i];
        }
    }
    free(xt);
    free(part);
    moe_weights_free(&W);
    return 0;
}
