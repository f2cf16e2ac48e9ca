/*
 * te-moe: MoE dispatch/combine over TransferEngine (docs/moe.md), on the
 * public API te/te.h only. CPU path: host memory, any plugin.
 *
 * Per batch, every rank routes its tokens to the top-k of E experts (E / R
 * experts per rank). Dispatch: to each remote rank d, ONE write carries a
 * header with the number of rows it sends followed by the first rows, into
 * d's private buffer for this source (P rows, speculative: no round trip
 * for the counts); only when there are more than P rows does a SECOND write
 * carry the rest. A row is one token for one destination rank with the
 * expert ids and gate weights of the experts of its top-k that live there.
 * The receiver runs its experts on every row and, in combine, writes ONE
 * contiguous block back to each source: per row, the weighted sum of its
 * local experts' outputs (zero-length when it got no rows). The source sums
 * the partial results of the ranks in rank order. ImmCounters end every
 * phase; every wait has a deadline.
 *
 * Immediates: one immediate space per rank ("te-moe"), index
 * ((batch mod 16) * R + source) * 3 + phase (0 dispatch head, 1 dispatch
 * rest, 2 combine), a function of the batch number alone, so ranks agree
 * whatever failed where; batch b + 2's values are cleared when batch b
 * starts, so a late write of a failed batch is never counted in a later
 * one (unless over 14 batches late). Batch numbers are consecutive.
 */
#ifndef TE_MOE_H
#define TE_MOE_H

#include <stddef.h>
#include <stdint.h>

#include <te/te.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Most ranks, top-k and experts. */
#define TE_MOE_MAX_RANKS 64
#define TE_MOE_MAX_TOPK 8
#define TE_MOE_MAX_EXPERTS 1024

/** Element types of tokens. */
enum te_moe_dtype { TE_MOE_FP32 = 1, TE_MOE_BF16 = 2 };

/** Shape of the layer (the same on every rank: checked at setup). */
typedef struct te_moe_config {
    uint32_t ranks;         /**< R */
    uint32_t experts;       /**< E, a multiple of R */
    uint32_t topk;          /**< k, 1..TE_MOE_MAX_TOPK */
    uint32_t hidden;        /**< elements per token, a multiple of 8 */
    uint32_t dtype;         /**< enum te_moe_dtype */
    uint32_t max_tokens;    /**< tokens per rank per batch, at most */
    uint32_t private_rows;  /**< P: rows per source taken at once (0 = the
                                 naive protocol: counts first, rows after) */
    int32_t timeout_ms;     /**< deadline of every phase (0: 5 s) */
    uint32_t naive;         /**< baseline for benchmarks: a header, then
                                 one write per row (no private buffer) */
    uint64_t weights_seed;  /**< the experts' weights (same on every rank) */
} te_moe_config;

/** One rank (te_moe_rank_new). */
typedef struct te_moe_rank te_moe_rank;

/**
 * Create rank `rank` on engine e (group 0): allocate and register its
 * buffers, create its immediate space. The engine's address, the rank's
 * descriptor (te_moe_rank_blob) and its config are exchanged by the
 * application (te_moe_rank_connect).
 */
TE_API int te_moe_rank_new(te_engine *e, const te_moe_config *c, uint32_t rank,
                           te_moe_rank **out);

/**
 * What peers need to reach this rank: bytes (engine address, descriptor,
 * config and NIC count) to hand to every other rank's te_moe_rank_connect.
 * *len: buffer size in, bytes out.
 */
TE_API int te_moe_rank_blob(te_moe_rank *r, void *buf, size_t *len);

/**
 * Connect to rank `peer` from its blob: refuses (-EINVAL naming the field)
 * a peer whose config (ranks, experts, topk, hidden, dtype, max_tokens,
 * private_rows) or NIC count differs.
 */
TE_API int te_moe_rank_connect(te_moe_rank *r, uint32_t peer, const void *blob,
                               size_t len);

/**
 * Routing of a batch on this rank: for token t, experts[t*k + j] and
 * weights[t*k + j] (j < k, distinct experts). The application (or
 * te_moe_route_random) decides.
 */
TE_API int te_moe_route_random(const te_moe_config *c, uint32_t tokens,
                               uint64_t seed, uint32_t skew, uint16_t *experts,
                               float *weights);

/**
 * Run one batch: dispatch `tokens` tokens (fp32: tokens * hidden floats;
 * bf16: uint16) with their routing, run the local experts on what arrives,
 * combine. out receives, per token, the sum over ranks (in rank order) of
 * that rank's gate-weighted expert outputs (fp32 always). Every rank of
 * the job calls it with the same batch number. Returns 0, or an error
 * naming the rank and phase that did not complete (-ETIMEDOUT,
 * -ECONNRESET, -EINVAL for bad routing, -E2BIG for rows that would not fit,
 * checked before anything is written). Returns only once this batch's
 * writes have ended (waiting up to timeout_ms more after a failure); if
 * they have not, later batches are refused with -EBUSY until they have.
 */
TE_API int te_moe_batch(te_moe_rank *r, uint64_t batch, uint32_t tokens,
                        const void *x, const uint16_t *experts, const float *weights,
                        float *out);

/**
 * What this rank did in the last batch: writes submitted to each peer per
 * phase, and where the time went. dispatch_us runs from the start of the
 * batch to the arrival of every source's rows; it is made of pack_us
 * (staging our rows), post_us (te_submit of the dispatch writes) and the
 * wait for the peers' rows. combine_us runs from there to the summed
 * output and includes experts_us (the local experts' compute).
 */
typedef struct te_moe_stats {
    uint32_t dispatch_writes[TE_MOE_MAX_RANKS];
    uint32_t combine_writes[TE_MOE_MAX_RANKS];
    uint32_t rows_sent, rows_received;
    double dispatch_us, combine_us; /**< last batch */
    uint64_t dispatch_bytes[TE_MOE_MAX_RANKS]; /**< written to each peer */
    uint64_t combine_bytes[TE_MOE_MAX_RANKS];
    double pack_us, post_us, experts_us;      /**< parts of the above */
} te_moe_stats;

TE_API void te_moe_rank_stats(te_moe_rank *r, te_moe_stats *out);

/** The message of the last te_moe_* failure of this thread. */
TE_API const char *te_moe_last_error(void);

/**
 * Remove from the engine the peers te_moe_rank_connect() added (the
 * engine's peers are shared: only when nothing else on this engine uses
 * them). Call it on every rank before destroying any rank's engine when
 * ranks share a process over a transport that keeps pointers into a
 * closed in-process peer (the efa plugin on libfabric's shm: a write to
 * it, a heartbeat included, crashes the process; docs/moe.md). After it,
 * batches fail with -ENOTCONN until the peers are connected again.
 * Returns 0 or the first te_peer_remove error.
 */
TE_API int te_moe_rank_disconnect(te_moe_rank *r);

/** Free the rank's buffers, registration and immediate space (the
 * engine's peers stay: te_moe_rank_disconnect). NULL is allowed. Writes
 * still in flight after timeout_ms, or a failed deregistration, leave the
 * memory they use allocated (an error logged through te_set_log_fn's sink,
 * origin "te-moe", says so). */
TE_API void te_moe_rank_free(te_moe_rank *r);

/**
 * The dense single-process reference: the same result for all ranks'
 * tokens with no network (for tests and te-moe run).
 */
TE_API int te_moe_reference(const te_moe_config *c, uint32_t rank, uint32_t tokens,
                            const void *x, const uint16_t *experts,
                            const float *weights, float *out);

#ifdef __cplusplus
}
#endif
#endif
