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
 * Two calls around the application's own experts: te_moe_dispatch() hands
 * the receiver, per local expert, the rows that chose it (in the caller's
 * te_moe_recv); the application runs its experts; te_moe_combine() takes
 * their outputs, writes ONE contiguous block back to each source (a head,
 * then per row the gate-weighted sum of the local experts' outputs) and
 * the source sums the partial results of the ranks in rank order. Both
 * have start/wait halves. ImmCounters end every phase; every wait has a
 * deadline. A rank that fails or refuses a batch says so in the heads it
 * writes anyway, so the other ranks fail it at once with its reason.
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
} te_moe_config;

/** One rank (te_moe_rank_new). */
typedef struct te_moe_rank te_moe_rank;

/**
 * Create rank `rank` on engine e (group 0): allocate and register its
 * buffers, create its immediate space. The engine's address, the rank's
 * descriptor (te_moe_rank_blob) and its config are exchanged by the
 * application (te_moe_rank_connect). Either progress mode of the engine
 * (te.h): with engine.progress = caller the rank's calls progress the
 * engine themselves while they wait (the calling thread runs its
 * callbacks), or wait for another thread that is progressing it.
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
 * te_moe_route_random) decides. te_moe_route_random: seeded, uniform over
 * all experts, or with skew != 0 over rank 0's alone (a hot rank); 0, or
 * -EINVAL when that set holds fewer than k experts (nothing written).
 */
TE_API int te_moe_route_random(const te_moe_config *c, uint32_t tokens,
                               uint64_t seed, uint32_t skew, uint16_t *experts,
                               float *weights);

/** Where a received row came from (one per row of te_moe_recv). */
typedef struct te_moe_src {
    uint32_t rank;  /**< source rank */
    uint32_t token; /**< the token's index in the source's batch */
    uint32_t slot;  /**< position of this expert in the token's top-k */
    float weight;   /**< its gate weight (combine applies it) */
} te_moe_src;

/**
 * The caller's receive buffers (x in host memory, or where the memory
 * backend reaches: te_moe_rank_mem_ops; the rest host memory; docs/moe.md
 * "Calls and buffers"), for
 * the L = experts / ranks local experts of this rank, local expert l being
 * global expert rank * L + l. Row i of local expert l:
 *   x     + (l * capacity + i) * hidden elements (the config's dtype)
 *   src   [l * capacity + i] (may be NULL)
 * count[l] = the rows of l (x NULL: index mode, `rows` below). Rows are
 * in source-rank order, then token
 * order: the same for the same routing. capacity: rows per local expert
 * (ranks * max_tokens can never overflow; smaller is refused at
 * dispatch when more rows arrive, before anything is written to x).
 */
typedef struct te_moe_recv {
    void *x;
    te_moe_src *src;
    uint32_t *count;
    uint32_t capacity;
    /** Index mode, for experts that gather their rows themselves: with x
     *  NULL, rows[l * capacity + i] points at the token of row i of local
     *  expert l where it arrived (the rank's private receive slot, the
     *  config's dtype), no copy; valid until te_moe_combine_start. */
    const void **rows;
} te_moe_recv;

/**
 * The local experts' outputs handed to combine: fp32 or bf16 (whatever
 * the tokens' dtype), shape [experts][rows][hidden] row-major, experts =
 * L, rows = the capacity given to dispatch, hidden = the config's. The
 * shape and dtype are the caller's statement of what y holds: any other
 * is refused. bf16 values are widened to fp32 exactly and weighed in
 * fp32: the result has the bits of combining the same outputs as fp32
 * (y.float()), without that copy.
 */
typedef struct te_moe_expert_out {
    const void *y;
    uint32_t dtype;   /**< TE_MOE_FP32 or TE_MOE_BF16 */
    uint32_t experts; /**< L */
    uint32_t rows;    /**< the dispatch capacity */
    uint32_t hidden;  /**< the config's */
} te_moe_expert_out;

/**
 * Register the caller's token buffer (`bytes` long, host memory or that of
 * the memory backend: te_moe_rank_mem_ops) with the
 * rank's engine, once, for in-place dispatch (docs/moe.md "In-place
 * input"): a later dispatch whose x is this buffer's start sends its
 * tokens to every rank that gets at least 3/4 of them straight from x, in
 * one write (the row metas go in the other), instead of copying each row
 * into the rank's staging first. x must then stay unchanged until the
 * batch ends (te_moe_combine_wait returns, or a call of the batch fails);
 * other x are staged as before (the naive protocol: the metas in the head
 * write, then one write per row of its token straight from x). x NULL
 * (bytes 0)
 * drops the registration. -EBUSY while a batch is in progress or writes
 * of an earlier one may still read the old buffer; -EINVAL a NULL x with
 * bytes, or bytes 0 with an x; an engine error (te_mr_reg) as its -errno.
 */
TE_API int te_moe_rank_input(te_moe_rank *r, const void *x, size_t bytes);

/**
 * Memory backends (docs/moe.md "Memory backends"): who touches the bytes
 * of the caller's tensors. By default the library copies them itself
 * (host memory). A backend (te_moe_gpu_mem_ops_new() in te/moe_gpu.h for
 * CUDA device memory, or the application's own) takes every access to
 * x (staged dispatch, our own rows in place), te_moe_recv.x, the expert
 * outputs' y and combine's out, as lists of row copies and of weighted
 * row sums that it may run asynchronously, in order; the library calls
 * sync() before the engine reads what they wrote, before
 * te_moe_dispatch_start returns (a staged x may be reused then) and before
 * te_moe_dispatch_wait / te_moe_combine_wait return. Routing (experts,
 * weights), te_moe_recv.count, .src and .rows stay host memory, read and
 * written by the library. The lists' arrays belong to the library and
 * stay valid until the next sync() returns.
 */
/** Row copies: dst[i] <- src[i], `bytes` bytes each, i < n. */
typedef struct te_moe_copy_list {
    uint32_t n;
    size_t bytes;
    void *const *dst;
    const void *const *src;
} te_moe_copy_list;

/**
 * Weighted row sums in fp32: for i < n and every h < hidden,
 * dst[i][h] = ((0 + w[f0] * src[f0][h]) + w[f0+1] * src[f0+1][h]) + ...
 * over f = first[i] .. first[i + 1] - 1, every product and sum rounded to
 * fp32 in that order, no fused multiply-add (so any backend gets the CPU's
 * bits); a row with no terms is zeros. first has n + 1 entries. The src
 * rows hold src_dtype values: fp32, or bf16 (expert outputs given as
 * bf16), each widened to fp32 exactly (its 16 bits become the top half of
 * the fp32's) before it is multiplied.
 */
typedef struct te_moe_wsum_list {
    uint32_t n;
    uint32_t hidden;
    float *const *dst;
    const uint32_t *first;
    const void *const *src;
    const float *w;
    uint32_t src_dtype; /**< TE_MOE_FP32 or TE_MOE_BF16 (version 2) */
} te_moe_wsum_list;

/**
 * 2: te_moe_wsum_list.src_dtype (bf16 expert outputs). A backend of
 * version 1 is still taken; it is handed fp32 rows only, and combine
 * refuses bf16 expert outputs on its rank (-ENOTSUP).
 */
#define TE_MOE_MEM_OPS_VERSION 2u

/**
 * A memory backend. Every function returns 0 or a negative errno (the
 * batch then fails with it; te_moe_last_error() names the step). attach
 * and detach may be NULL; copy, wsum and sync may not.
 */
typedef struct te_moe_mem_ops {
    uint32_t version; /**< TE_MOE_MEM_OPS_VERSION (1 is still taken) */
    uint32_t mem;     /**< TE_MEM_HOST or TE_MEM_CUDA: the kind of the
                           caller's buffers (te_moe_rank_input registers x
                           with it) */
    void *ctx;        /**< passed to every function */
    /** The rank's own buffers (host memory, len bytes): make them
     *  reachable by copy and wsum (e.g. cudaHostRegister). Called by
     *  te_moe_rank_mem_ops(). */
    int (*attach)(void *ctx, void *area, size_t len);
    /** Undo attach (te_moe_rank_mem_ops() replacing it, te_moe_rank_free). */
    void (*detach)(void *ctx, void *area, size_t len);
    /** Start (or do) the row copies of l. */
    int (*copy)(void *ctx, const te_moe_copy_list *l);
    /** Start (or do) the weighted row sums of l. */
    int (*wsum)(void *ctx, const te_moe_wsum_list *l);
    /** Wait until every copy and wsum handed over so far is done. */
    int (*sync)(void *ctx);
    /** Why the last call of this thread failed (may be NULL): quoted in
     *  te_moe_last_error(). */
    const char *(*why)(void *ctx);
} te_moe_mem_ops;

/**
 * Use `ops` (copied; ctx must outlive the rank or the next call) for the
 * caller's tensors from the next batch on; NULL: the built-in host copies.
 * Refused: -EINVAL an unknown version or a missing function, -EBUSY during a
 * batch or while an input is registered (te_moe_rank_input: register it
 * after choosing the backend, as its memory kind depends on it), or
 * attach's error (the previous backend then stays).
 */
TE_API int te_moe_rank_mem_ops(te_moe_rank *r, const te_moe_mem_ops *ops);

/**
 * Start dispatching batch `batch`: `tokens` tokens (fp32: tokens * hidden
 * floats; bf16: uint16) with their routing are staged and their writes
 * submitted; returns without waiting for the peers' rows. x, experts and
 * weights may be reused once it returns (they are staged), except an x
 * registered with te_moe_rank_input(), read in place until the batch
 * ends. Every rank of the job calls it with the same batch number,
 * consecutive from batch to batch. Bad input (-E2BIG more tokens than max_tokens, -EINVAL an expert
 * out of range or chosen twice, a non-finite weight, -EALREADY a batch in
 * progress) is refused before any row is written; the peers are then
 * sent a head saying so (not for -EALREADY), and fail the batch naming
 * this rank and the reason instead of waiting for its rows.
 */
TE_API int te_moe_dispatch_start(te_moe_rank *r, uint64_t batch, uint32_t tokens,
                                 const void *x, const uint16_t *experts,
                                 const float *weights);

/**
 * Wait for every source's rows of the started batch and lay them out per
 * local expert in `recv`. Fails (-ETIMEDOUT, -ECONNRESET, -EPROTO a peer
 * that failed the batch, -ENOSPC more rows for a local expert than
 * recv->capacity: checked before anything is written to recv) with an
 * error naming the rank; then every source is told (the combine head) and
 * the batch is over (it returns once its writes have ended).
 */
TE_API int te_moe_dispatch_wait(te_moe_rank *r, const te_moe_recv *recv);

/** te_moe_dispatch_start() then te_moe_dispatch_wait(). */
TE_API int te_moe_dispatch(te_moe_rank *r, uint64_t batch, uint32_t tokens,
                           const void *x, const uint16_t *experts,
                           const float *weights, const te_moe_recv *recv);

/**
 * Start combining the dispatched batch `batch`: per source, per row, the
 * sum over the row's local experts (top-k order) of weight * y's row,
 * written back in one write per source. Refused before anything is
 * written: -EINVAL outputs of another shape or dtype than te_moe_expert_out
 * states, -ENOTSUP bf16 outputs with a memory backend of version 1 (the
 * batch then fails: its sources are told), -EALREADY a batch
 * that is not the one dispatched, or combined already.
 */
TE_API int te_moe_combine_start(te_moe_rank *r, uint64_t batch,
                                const te_moe_expert_out *y);

/**
 * Wait for every rank's partial results and sum them, per token, in rank
 * order into out (tokens * hidden floats, the tokens of the dispatch).
 * Returns only once this batch's writes have ended (up to timeout_ms more
 * after a failure); if they have not, later batches are refused with
 * -EBUSY until they have.
 */
TE_API int te_moe_combine_wait(te_moe_rank *r, float *out);

/** te_moe_combine_start() then te_moe_combine_wait(). */
TE_API int te_moe_combine(te_moe_rank *r, uint64_t batch,
                          const te_moe_expert_out *y, float *out);

/** The rank's configuration (timeout_ms with its default filled in). */
TE_API const te_moe_config *te_moe_rank_config(const te_moe_rank *r);

/** The rank's index (its local experts are index * L .. index * L + L - 1). */
TE_API uint32_t te_moe_rank_index(const te_moe_rank *r);

/**
 * What this rank did in the last batch: writes submitted to each peer per
 * phase, and where the time went. dispatch_us runs from the start of the
 * batch to the arrival of every source's rows; it is made of pack_us
 * (staging our rows), post_us (te_submit of the dispatch writes) and the
 * wait for the peers' rows (to the return of te_moe_dispatch_wait).
 * combine_us runs from there to the summed output and includes
 * experts_us (the caller's experts: from dispatch_wait's return to
 * combine_start).
 */
typedef struct te_moe_stats {
    uint32_t dispatch_writes[TE_MOE_MAX_RANKS];
    uint32_t combine_writes[TE_MOE_MAX_RANKS];
    uint32_t rows_sent, rows_received;
    double dispatch_us, combine_us; /**< last batch */
    uint64_t dispatch_bytes[TE_MOE_MAX_RANKS]; /**< written to each peer */
    uint64_t combine_bytes[TE_MOE_MAX_RANKS];
    double pack_us, post_us, experts_us;      /**< parts of the above */
    double layout_us; /**< part of dispatch_us: copying the rows that
                           arrived into te_moe_recv, per local expert (the
                           rest is the exchange itself) */
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

#ifdef __cplusplus
}
#endif
#endif
