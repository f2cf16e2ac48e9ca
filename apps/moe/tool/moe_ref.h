/* The reference experts of te-moe and the tests (the library runs no
 * experts: an application brings its own between te_moe_dispatch and
 * te_moe_combine). Expert e is a real matmul, block-diagonal so that it
 * stays small: every 8 elements of a token times e's own seeded 8x8
 * matrix, in a fixed order, so that the networked result is bit-identical
 * to the dense single-process reference (moe_ref_dense). */
#ifndef TE_MOE_REF_H
#define TE_MOE_REF_H

#include <te/moe.h>

/* y (hidden floats) = expert e applied to one token x (the config's
 * dtype; bf16 is converted to fp32 first). */
void moe_ref_expert(const te_moe_config *c, uint32_t e, const void *x,
                    float *y);

/* The dense reference for one rank's tokens, no network: per token, in
 * rank order, the sum over that rank's experts of the token's top-k (slot
 * order) of weight * expert(x), summed per rank first (the library's
 * order). out: tokens * hidden floats. 0 or -ENOMEM. */
int moe_ref_dense(const te_moe_config *c, uint32_t tokens, const void *x,
                  const uint16_t *experts, const float *weights, float *out);

/* Receive buffers and expert outputs of one rank, kept between batches
 * (grown when a batch needs more rows per expert). */
struct moe_ref_bufs {
    te_moe_recv recv;
    float *y;
    uint32_t allocated; /* rows per expert the buffers hold */
    int index; /* set before the first batch: index mode (recv.rows, the
                  experts read the rows where they arrived, no copy) */
};

/* One batch through the split API with the reference experts: dispatch
 * into b's buffers (NULL: temporary ones) with `capacity` rows per local
 * expert (0: ranks * max_tokens, which cannot overflow), the experts,
 * combine into out. 0 or the first failure (te_moe_last_error()). */
int moe_ref_batch(te_moe_rank *r, struct moe_ref_bufs *b, uint64_t batch,
                  uint32_t tokens, const void *x, const uint16_t *experts,
                  const float *weights, uint32_t capacity, float *out);

/* Give b room for `capacity` rows per local expert (0: ranks *
 * max_tokens); 0 or -ENOMEM. */
int moe_ref_bufs_grow(const te_moe_config *c, struct moe_ref_bufs *b,
                      uint32_t capacity);
/* The reference experts on what b received: y[l][i] = expert(x[l][i]). */
void moe_ref_run_experts(te_moe_rank *r, struct moe_ref_bufs *b);
void moe_ref_bufs_free(struct moe_ref_bufs *b);

/* bf16 <-> fp32 (round to nearest even), as the tests build tokens. */
float moe_ref_bf16_to_f32(uint16_t v);
uint16_t moe_ref_f32_to_bf16(float f);

#endif
