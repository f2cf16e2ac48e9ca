/* See moe_ref.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "moe_ref.h"

/* The experts' weights: the same on every rank of every job. */
#define REF_SEED 99u

float moe_ref_bf16_to_f32(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t moe_ref_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

/* Small values (sums stay in range), from a splitmix of (e, i). */
static void matrix(uint32_t e, float m[64])
{
    for (uint64_t i = 0; i < 64; i++) {
        uint64_t x = (uint64_t)REF_SEED ^ ((uint64_t)e << 8 | i);
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        x ^= x >> 31;
        m[i] = (float)((int)(x % 2001) - 1000) / 4096.0f;
    }
}

void moe_ref_expert(const te_moe_config *c, uint32_t e, const void *x,
                    float *y)
{
    float m[64], v[8];
    matrix(e, m);
    for (uint32_t b = 0; b < c->hidden; b += 8) {
        for (uint32_t j = 0; j < 8; j++)
            v[j] = c->dtype == TE_MOE_BF16
                       ? moe_ref_bf16_to_f32(((const uint16_t *)x)[b + j])
                       : ((const float *)x)[b + j];
        for (int i = 0; i < 8; i++) {
            float s = 0.0f;
            for (int j = 0; j < 8; j++)
                s += m[i * 8 + j] * v[j];
            y[b + (uint32_t)i] = s;
        }
    }
}

int moe_ref_dense(const te_moe_config *c, uint32_t tokens, const void *x,
                  const uint16_t *experts, const float *weights, float *out)
{
    size_t elem = c->dtype == TE_MOE_BF16 ? 2 : 4;
    uint32_t per = c->experts / c->ranks;
    float *y = malloc(c->hidden * sizeof(float));
    float *part = malloc(c->hidden * sizeof(float));
    if (!y || !part) {
        free(y);
        free(part);
        return -ENOMEM;
    }
    for (uint32_t t = 0; t < tokens; t++) {
        const uint16_t *ex = experts + (size_t)t * c->topk;
        const float *w = weights + (size_t)t * c->topk;
        float *o = out + (size_t)t * c->hidden;
        memset(o, 0, c->hidden * sizeof(float));
        for (uint32_t d = 0; d < c->ranks; d++) {
            memset(part, 0, c->hidden * sizeof(float));
            for (uint32_t j = 0; j < c->topk; j++) {
                if (ex[j] / per != d)
                    continue;
                moe_ref_expert(c, ex[j], (const uint8_t *)x +
                               (size_t)t * c->hidden * elem, y);
                for (uint32_t i = 0; i < c->hidden; i++)
                    part[i] += w[j] * y[i];
            }
            for (uint32_t i = 0; i < c->hidden; i++)
                o[i] += part[i];
        }
    }
    free(y);
    free(part);
    return 0;
}

int moe_ref_bufs_grow(const te_moe_config *c, struct moe_ref_bufs *b,
                      uint32_t capacity)
{
    if (!capacity)
        capacity = c->ranks * c->max_tokens;
    uint32_t L = c->experts / c->ranks;
    size_t elem = c->dtype == TE_MOE_BF16 ? 2 : 4;
    b->recv.capacity = capacity;
    if (b->allocated >= capacity && b->recv.count &&
        !b->recv.rows == !b->index)
        return 0;
    int index = b->index;
    moe_ref_bufs_free(b);
    b->index = index;
    size_t rows = (size_t)L * (capacity ? capacity : 1);
    if (index)
        b->recv.rows = malloc(rows * sizeof(void *));
    else
        b->recv.x = malloc(rows * c->hidden * elem);
    b->recv.src = malloc(rows * sizeof(te_moe_src));
    b->recv.count = malloc(L * sizeof(uint32_t));
    b->y = malloc(rows * c->hidden * sizeof(float));
    b->recv.capacity = b->allocated = capacity;
    return (b->recv.x || b->recv.rows) && b->recv.src && b->recv.count && b->y
               ? 0 : -ENOMEM;
}

void moe_ref_bufs_free(struct moe_ref_bufs *b)
{
    free(b->recv.x);
    free(b->recv.rows);
    free(b->recv.src);
    free(b->recv.count);
    free(b->y);
    memset(b, 0, sizeof(*b));
}

void moe_ref_run_experts(te_moe_rank *r, struct moe_ref_bufs *b)
{
    const te_moe_config *c = te_moe_rank_config(r);
    uint32_t L = c->experts / c->ranks;
    size_t elem = c->dtype == TE_MOE_BF16 ? 2 : 4;
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t i = 0; i < b->recv.count[l]; i++) {
            size_t at = (size_t)l * b->recv.capacity + i;
            const void *x = b->index ? b->recv.rows[at]
                                     : (const uint8_t *)b->recv.x +
                                           at * c->hidden * elem;
            moe_ref_expert(c, te_moe_rank_index(r) * L + l, x,
                           b->y + at * c->hidden);
        }
}

int moe_ref_batch(te_moe_rank *r, struct moe_ref_bufs *b, uint64_t batch,
                  uint32_t tokens, const void *x, const uint16_t *experts,
                  const float *weights, uint32_t capacity, float *out)
{
    const te_moe_config *c = te_moe_rank_config(r);
    struct moe_ref_bufs tmp = {0};
    struct moe_ref_bufs *use = b ? b : &tmp;
    if (moe_ref_bufs_grow(c, use, capacity)) {
        moe_ref_bufs_free(&tmp);
        return -ENOMEM;
    }
    int rc = te_moe_dispatch(r, batch, tokens, x, experts, weights,
                             &use->recv);
    if (!rc) {
        moe_ref_run_experts(r, use);
        te_moe_expert_out y = {use->y, TE_MOE_FP32, c->experts / c->ranks,
                               use->recv.capacity, c->hidden};
        rc = te_moe_combine(r, batch, &y, out);
    }
    moe_ref_bufs_free(&tmp);
    return rc;
}
