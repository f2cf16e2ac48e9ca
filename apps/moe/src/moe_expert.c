/*
 * The expert function, bf16 conversions and the dense reference. The
 * distributed path and the reference call exactly these functions on the
 * same bytes in the same order, so results compare bit for bit. The
 * library is built with -ffp-contract=off so that no FMA is fused in one
 * place and not in another.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "moe_internal.h"

uint16_t te_moe_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float te_moe_bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A deterministic value in [-0.5, 0.5) for (expert, i, j): the weights
 * are a function of the expert id, so every rank and the reference agree
 * without shipping weights. */
static float weight_of(uint32_t expert, uint32_t i, uint32_t j)
{
    uint64_t x = (uint64_t)expert * 0x9E3779B97F4A7C15ull ^ (i * 8u + j + 1u) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (float)(x >> 40) / (float)(1u << 24) - 0.5f;
}

/* A block-diagonal matmul: every block of 8 elements is multiplied by the
 * expert's own 8x8 matrix, plus a bias. Small enough to run for hidden
 * 7168 x 1024 tokens in a benchmark, real enough that a token sent to the
 * wrong expert or a swapped element gives a different answer. */
void te_moe_expert_apply(uint32_t expert, uint32_t hidden, const float *x, float *y)
{
    float w[MOE_BLOCK][MOE_BLOCK], b[MOE_BLOCK];
    for (uint32_t i = 0; i < MOE_BLOCK; i++) {
        for (uint32_t j = 0; j < MOE_BLOCK; j++)
            w[i][j] = weight_of(expert, i, j);
        b[i] = weight_of(expert, i, MOE_BLOCK);
    }
    for (uint32_t base = 0; base < hidden; base += MOE_BLOCK)
        for (uint32_t i = 0; i < MOE_BLOCK; i++) {
            float acc = b[i];
            for (uint32_t j = 0; j < MOE_BLOCK; j++)
                acc += w[i][j] * x[base + j];
            y[base + i] = acc;
        }
}

void moe_load_f32(uint32_t dtype, uint32_t hidden, const void *src, float *dst)
{
    if (dtype == TE_MOE_F32) {
        memcpy(dst, src, (size_t)hidden * 4);
        return;
    }
    const uint16_t *s = src;
    for (uint32_t i = 0; i < hidden; i++)
        dst[i] = te_moe_bf16_to_f32(s[i]);
}

void moe_store(uint32_t dtype, uint32_t hidden, const float *src, void *dst)
{
    if (dtype == TE_MOE_F32) {
        memcpy(dst, src, (size_t)hidden * 4);
        return;
    }
    uint16_t *d = dst;
    for (uint32_t i = 0; i < hidden; i++)
        d[i] = te_moe_f32_to_bf16(src[i]);
}

void moe_expert_record(uint32_t dtype, uint32_t expert, uint32_t hidden,
                       const void *x, void *y, float *tmp_in, float *tmp_out)
{
    moe_load_f32(dtype, hidden, x, tmp_in);
    te_moe_expert_apply(expert, hidden, tmp_in, tmp_out);
    moe_store(dtype, hidden, tmp_out, y); /* what goes on the wire back */
}

void moe_accumulate(uint32_t dtype, uint32_t hidden, float weight, const void *y,
                    float *acc, float *tmp)
{
    moe_load_f32(dtype, hidden, y, tmp);
    for (uint32_t i = 0; i < hidden; i++)
        acc[i] += weight * tmp[i];
}

int te_moe_reference(uint32_t experts, uint32_t top_k, uint32_t hidden, uint32_t dtype,
                     uint32_t ntokens, const void *x, const uint32_t *ids,
                     const float *weights, void *out)
{
    if (hidden == 0 || hidden % MOE_BLOCK || dtype > TE_MOE_BF16 || top_k == 0)
        return -EINVAL;
    size_t elt = dtype == TE_MOE_F32 ? 4 : 2, row = (size_t)hidden * elt;
    float *in = malloc((size_t)hidden * 4), *yo = malloc((size_t)hidden * 4),
          *acc = malloc((size_t)hidden * 4), *tmp = malloc((size_t)hidden * 4);
    void *y = malloc(row);
    int rc = in && yo && acc && tmp && y ? 0 : -ENOMEM;
    for (uint32_t t = 0; t < ntokens && !rc; t++) {
        memset(acc, 0, (size_t)hidden * 4);
        for (uint32_t k = 0; k < top_k; k++) {
            uint32_t e = ids[(size_t)t * top_k + k];
            if (e >= experts) {
                rc = -EINVAL;
                break;
            }
            moe_expert_record(dtype, e, hidden, (const char *)x + t * row, y, in, yo);
            moe_accumulate(dtype, hidden, weights[(size_t)t * top_k + k], y, acc, tmp);
        }
        moe_store(dtype, hidden, acc, (char *)out + t * row);
    }
    free(in);
    free(yo);
    free(acc);
    free(tmp);
    free(y);
    return rc;
}
