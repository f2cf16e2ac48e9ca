/* Internals of libte-moe. */
#ifndef TE_MOE_INTERNAL_H
#define TE_MOE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "te/moe.h"

typedef struct moe_weights {
    float *m; /* experts x 8 x 8 */
} moe_weights;

int moe_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int moe_weights_init(const te_moe_config *c, moe_weights *W);
void moe_weights_free(moe_weights *W);
void moe_expert_matrix(uint64_t seed, uint32_t e, float m[64]);
void moe_expert_accumulate(const moe_weights *W, uint32_t e, float w,
                           const float *x, uint32_t hidden, float *acc);
void moe_partial(const te_moe_config *c, const moe_weights *W, uint32_t d,
                 uint32_t nexp, const uint16_t *ex, const float *wt,
                 const float *x, float *acc);
void moe_token_f32(const te_moe_config *c, const void *x, uint32_t t,
                   float *out);
float moe_bf16_to_f32(uint16_t v);
uint16_t moe_f32_to_bf16(float f);
int moe_check_routing(const te_moe_config *c, uint32_t tokens,
                      const uint16_t *experts, const float *weights);

/* A dispatch row: this meta, then hidden elements of the token. */
struct moe_row_meta {
    uint32_t token;
    uint32_t nexp;
    uint16_t experts[TE_MOE_MAX_TOPK];
    float weights[TE_MOE_MAX_TOPK];
    uint32_t pad[2];
};
_Static_assert(sizeof(struct moe_row_meta) == 64, "row meta is 64 bytes");

/* The head of a source's region at a receiver. */
struct moe_head {
    uint32_t rows;
    uint32_t pad0;
    uint64_t batch;
    uint32_t pad[12];
};
_Static_assert(sizeof(struct moe_head) == 64, "head is 64 bytes");

/* A peer rank: its engine peer and the descriptor of its registration. */
struct moe_peer {
    int connected;
    te_peer peer;
    te_mr_desc desc;
};

/* A rank (moe_rank.c: setup; moe_batch.c: the batch). Its registration
 * holds four areas of one slot per peer:
 *   off_sd  send_dispatch[d]  head + max_tokens rows      staged by us
 *   off_rd  recv_dispatch[s]  head + max_tokens rows      written by s
 *   off_sc  send_combine[s]   max_tokens combine rows     staged by us
 *   off_rc  recv_combine[d]   max_tokens combine rows     written by d
 * Our own slots of recv_dispatch / recv_combine are filled in place. */
struct te_moe_rank {
    te_engine *e;
    te_moe_config c;
    uint32_t rank, nics;
    moe_weights W;
    size_t row_bytes, crow_bytes, dslot, cslot;
    uint8_t *mem;
    size_t mem_len;
    size_t off_sd, off_rd, off_sc, off_rc;
    te_mr *mr;
    te_imm_space *space;
    struct moe_peer peers[TE_MOE_MAX_RANKS];
    te_moe_stats st;
    float *xt, *acc;
    /* Local completions arrive through each write's own callback (never
     * the engine-wide queue, which other users of the engine own). The
     * callback thread counts them under mu; the batch waits on cv. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t serial;   /* the current te_moe_batch call */
    uint32_t completed, failed; /* of this serial's writes */
    uint64_t inflight; /* writes of any serial whose callback has not run */
    char failed_why[96];
    /* Set when a batch's writes could not be confirmed: their bytes may
     * still land, so no batch restages the buffers until inflight is 0. */
    int unconfirmed;
};

uint64_t moe_now_ns(void);
/* The raw immediate of (batch, source, phase) at any rank of this job. */
uint32_t moe_imm_of(const te_moe_rank *r, uint64_t batch, uint32_t src,
                    uint32_t phase);
/* Forget what is banked for batch `batch` (clear it before anyone can
 * write it: two batches ahead). */
void moe_clear_batch_imms(te_moe_rank *r, uint64_t batch);
/* Wait until every write submitted by this rank has called back, at most
 * until deadline; 0 or -ETIMEDOUT, and what is left in *left (or NULL). */
int moe_wait_inflight(te_moe_rank *r, uint64_t deadline, uint64_t *left);

#endif
