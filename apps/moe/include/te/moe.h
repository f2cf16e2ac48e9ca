/*
 * te-moe: MoE dispatch/combine over TransferEngine (docs/moe.md).
 *
 * R ranks, each owning E/R consecutive experts, exchange tokens per batch:
 *  - dispatch: every rank routes its tokens (top-k experts each) and sends
 *    every peer ONE WriteImm carrying its per-expert counts followed by the
 *    first tokens for that peer (the speculative per-source private buffer);
 *    once the counts of all ranks are known, tokens that did not fit follow
 *    in at most ONE more write into the peer's shared overflow buffer;
 *  - the experts run (te_moe_compute());
 *  - combine: every rank sends each source ONE write with the expert
 *    outputs of its tokens, which the source sums (weighted, k ascending).
 * ImmCounters (te_imm_expect_timeout) tell each rank a phase is complete.
 * All buffers are registered once at te_moe_create() and reused.
 *
 * Uses only the public TransferEngine API (te/te.h).
 */
#ifndef TE_MOE_H
#define TE_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "te/te.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Element type of token activations. */
enum te_moe_dtype {
    TE_MOE_F32 = 0,  /**< IEEE float32 */
    TE_MOE_BF16 = 1, /**< bfloat16 (experts compute in float32) */
};

/** Exchange algorithm. */
enum te_moe_mode {
    TE_MOE_SPECULATIVE = 0, /**< the paper's: counts + private buffer, <= 2 writes */
    TE_MOE_NAIVE = 1,       /**< counts first, then one write per token-expert pair */
};

/** Shape and sizing of one rank; must agree on every rank (checked). */
typedef struct te_moe_params {
    uint32_t ranks;          /**< R, 1..256 */
    uint32_t rank;           /**< this rank, 0..R-1 */
    uint32_t experts;        /**< E, a multiple of R */
    uint32_t top_k;          /**< K, 1..E */
    uint32_t hidden;         /**< elements per token, a multiple of 8 */
    uint32_t dtype;          /**< enum te_moe_dtype */
    uint32_t max_tokens;     /**< most tokens per rank per batch */
    uint32_t private_tokens; /**< records per source in the private buffer (0 = ceil(max_tokens*K/R)) */
    uint32_t overflow_tokens;/**< records in the shared overflow buffer (0 = 2*max_tokens*K) */
    uint32_t mode;           /**< enum te_moe_mode */
    uint32_t imm_base;       /**< first raw immediate used (3*256 values); 0 = 0x4d000000 */
    int32_t timeout_ms;      /**< deadline of each wait (0 = 10000) */
    uint32_t reserved[4];    /**< zero */
} te_moe_params;

/**
 * Collective exchange used once at setup: copy `len` bytes of every rank
 * (rank i's at all + i*len, this rank's being `mine`) into `all`. Returns 0
 * or -errno. Threads of one process or processes over a socket: caller's choice.
 */
typedef int (*te_moe_allgather_fn)(const void *mine, size_t len, void *all, void *arg);

typedef struct te_moe te_moe; /**< one rank's state (opaque) */

/**
 * Create rank p->rank on engine e (group 0): allocate and register the
 * buffers, exchange a setup header with every rank (shape, dtype, address,
 * descriptors) and add the peers. A mismatch in any shape field between
 * ranks fails every rank with -EINVAL naming the field and ranks.
 */
int te_moe_create(te_engine *e, const te_moe_params *p, te_moe_allgather_fn ag,
                  void *ag_arg, te_moe **out);

/** Free a rank (deregisters its buffers). NULL is allowed. */
void te_moe_destroy(te_moe *m);

/**
 * Dispatch batch: `ntokens` tokens x[ntokens][hidden] (dtype), experts
 * ids[ntokens][top_k]. Validates ids (range, repeats allowed) before any
 * write; a rank with bad input tells every peer (its header carries the
 * error), so the whole batch fails on every rank. Returns when every token
 * routed to this rank's experts has arrived, or -errno (te_moe_last_error()).
 * x and ids must stay valid until te_moe_combine() returns.
 */
int te_moe_dispatch(te_moe *m, uint32_t ntokens, const void *x, const uint32_t *ids);

/** Run this rank's experts on the tokens received by te_moe_dispatch(). */
int te_moe_compute(te_moe *m);

/**
 * Combine: send every source its outputs (one write per peer), wait for
 * ours, then out[t] = sum over k ascending of weights[t][k] * y(t, k), in
 * float32 (converted to dtype at the end).
 */
int te_moe_combine(te_moe *m, const float *weights, void *out);

/** te_moe_dispatch + compute + combine. */
int te_moe_forward(te_moe *m, uint32_t ntokens, const void *x, const uint32_t *ids,
                   const float *weights, void *out);

/** Counters of the last batch, for tests and benchmarks. */
typedef struct te_moe_batch_stats {
    uint64_t batch;            /**< batch number (0-based) */
    uint32_t max_dispatch_writes; /**< most dispatch writes this rank submitted to one peer */
    uint32_t max_combine_writes;  /**< most combine writes to one peer */
    uint32_t min_combine_writes;  /**< fewest combine writes to one peer (R>1) */
    uint32_t overflow_peers;   /**< peers that needed the second dispatch write */
    uint64_t dispatch_bytes;   /**< bytes written in dispatch */
    uint64_t combine_bytes;    /**< bytes written in combine */
    uint64_t received_tokens;  /**< records received from all sources (self included) */
} te_moe_batch_stats;

/** Fill *out with the last batch's counters. */
void te_moe_stats(const te_moe *m, te_moe_batch_stats *out);

/** Message of the calling thread's last te_moe failure ("" if none). */
const char *te_moe_last_error(void);

/** The expert function: y = expert(e)(x), x and y of `hidden` float32. */
void te_moe_expert_apply(uint32_t expert, uint32_t hidden, const float *x, float *y);

/**
 * The dense single-process reference: the same routing, expert function
 * and summation order as the distributed path, so fp32 results are equal
 * bit for bit (and bf16 too: the same roundings happen in the same places).
 */
int te_moe_reference(uint32_t experts, uint32_t top_k, uint32_t hidden, uint32_t dtype,
                     uint32_t ntokens, const void *x, const uint32_t *ids,
                     const float *weights, void *out);

/** bfloat16 <-> float32 (round to nearest even). */
uint16_t te_moe_f32_to_bf16(float f);
float te_moe_bf16_to_f32(uint16_t b);

#ifdef __cplusplus
}
#endif
#endif /* TE_MOE_H */
