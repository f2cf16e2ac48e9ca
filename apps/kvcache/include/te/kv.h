/*
 * te-kv: KV-cache transfer for disaggregated inference over TransferEngine
 * (docs/kvcache.md). Built on the public API te/te.h only.
 *
 * The protocol (the paper's): a decoder owns a pool of KV pages; for each
 * prompt it allocates pages and sends a request (id, page indices, its
 * pool's descriptor, an immediate, token count) to a prefiller with a
 * two-sided send. The prefiller answers with the number of immediates its
 * writes will produce (te_expected_imms of exactly those writes), then
 * "computes" layer by layer and pushes each layer's pages with one paged
 * write as soon as the layer is done, and the last hidden state with a
 * single write. No "done" message: the decoder's ImmCounter reaching the
 * count is the signal. Cancellation is confirmed by the prefiller (pages go
 * back only when no write to them can still land) or, when the prefiller is
 * dead or silent, by fencing: te_mr_revoke() of the registration that
 * prefiller was given.
 *
 * Conventions as in te.h: 0 or a negative errno, te_last_error() names the
 * cause (this library sets it through the messages it returns in its
 * `why` strings, see te_kv_strerror_last()).
 */
#ifndef TE_KV_H
#define TE_KV_H

#include <stddef.h>
#include <stdint.h>

#include <te/te.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- layout */

/** Shape of a model's KV cache (one entry per token per layer). */
typedef struct te_kv_shape {
    char name[48];            /**< preset name or "custom" */
    uint32_t layers;          /**< transformer layers */
    uint32_t kv_heads;        /**< KV heads (1 for MLA's latent) */
    uint32_t head_dim;        /**< elements per head (576 for DeepSeek MLA) */
    uint32_t elem_bytes;      /**< 2 for bf16 */
    uint32_t kv_factor;       /**< 2 = separate K and V, 1 = one latent (MLA) */
    uint32_t tokens_per_page; /**< tokens in one page */
    uint32_t hidden;          /**< hidden size (the last hidden state) */
    uint32_t reserved;
} te_kv_shape;

/**
 * Fill *out from a preset: "qwen3-235b-a22b" (94 layers, 4 KV heads, head
 * dim 128, bf16), "llama-3.1-70b" (80, 8, 128), "deepseek-v3" (61 layers,
 * one 576-element latent). page_bytes: page size of one layer (0 = 32 KiB,
 * the paper's); tokens_per_page is the most tokens that fit (at least 1).
 * -ENOENT (message lists the presets) for an unknown name.
 */
TE_API int te_kv_shape_preset(const char *name, uint32_t page_bytes, te_kv_shape *out);

/** Validate a custom shape and derive tokens_per_page from page_bytes. */
TE_API int te_kv_shape_custom(uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
                              uint32_t elem_bytes, uint32_t kv_factor,
                              uint32_t hidden, uint32_t page_bytes, te_kv_shape *out);

/** Bytes of one token in one layer (K and V of every head). */
TE_API uint64_t te_kv_token_bytes(const te_kv_shape *s);
/**
 * Bytes of one page of one layer. Heads before pages: a page holds
 * tokens_per_page tokens of every head ([kv][head][token][dim]), so a page
 * of one layer is one contiguous write.
 */
TE_API uint64_t te_kv_page_bytes(const te_kv_shape *s);
/** Pages a prompt of `tokens` tokens needs. */
TE_API uint32_t te_kv_pages_for(const te_kv_shape *s, uint32_t tokens);

/* ------------------------------------------------------------ page pool */

/**
 * The decoder's pages: `pages` pages per layer, laid out layer-major
 * (layer l page p at (l * pages + p) * page_bytes). A page is FREE, USED
 * (owned by a request) or FENCING (its request was cancelled or its
 * prefiller died: it returns to FREE only when no remote write can still
 * land). Thread-safe.
 */
typedef struct te_kv_pool te_kv_pool;

TE_API int te_kv_pool_new(uint32_t pages, te_kv_pool **out);
TE_API void te_kv_pool_free(te_kv_pool *p);
/** Take n free pages into idx[]: -ENOSPC (nothing taken) if fewer are free. */
TE_API int te_kv_pool_alloc(te_kv_pool *p, uint32_t n, uint32_t *idx);
/** USED -> FENCING (a cancel or a failure is in progress; for good when a
 *  fence's revocation failed: quarantined pages). */
TE_API int te_kv_pool_fence(te_kv_pool *p, uint32_t n, const uint32_t *idx);
/**
 * Return pages to FREE: from USED (the request finished normally: every
 * write landed and was counted) or FENCING (confirmed: nothing can land).
 * -EINVAL naming the page if one is FREE already (a double free).
 */
TE_API int te_kv_pool_release(te_kv_pool *p, uint32_t n, const uint32_t *idx);
/** Counts of pages in each state. */
TE_API void te_kv_pool_counts(const te_kv_pool *p, uint32_t *free_pages,
                              uint32_t *used, uint32_t *fencing);

/* ------------------------------------------------------------- messages */

/** Message types of the request protocol (docs/kvcache.md, wire format). */
enum te_kv_msg_type {
    TE_KV_MSG_REQUEST = 1, /**< decoder -> prefiller */
    TE_KV_MSG_ACCEPT = 2,  /**< prefiller -> decoder: expected immediates */
    TE_KV_MSG_REJECT = 3,  /**< prefiller -> decoder: cannot serve it */
    TE_KV_MSG_CANCEL = 4,  /**< decoder -> prefiller */
    TE_KV_MSG_CANCELLED = 5, /**< prefiller -> decoder: nothing can land now */
    TE_KV_MSG_HELLO = 6,   /**< decoder -> prefiller: the decoder's address */
};

/** Most pages one request carries (bounded by engine.max_msg_size). */
#define TE_KV_MAX_PAGES 4096

/** A parsed message (te_kv_msg_parse / te_kv_msg_encode). */
typedef struct te_kv_msg {
    uint32_t type;          /**< enum te_kv_msg_type */
    uint32_t status;        /**< REJECT / CANCELLED: 0 or a positive errno */
    uint64_t sender;        /**< the decoder's token (HELLO names it) */
    uint64_t request_id;
    /* REQUEST */
    uint32_t tokens;        /**< prompt length */
    uint32_t layers;        /**< must equal the prefiller's model */
    uint64_t page_bytes;    /**< must equal the prefiller's model */
    uint64_t layer_stride;  /**< bytes between layers in the decoder's pool */
    uint32_t imm;           /**< immediate every write of the request carries */
    uint32_t npages;
    uint64_t hidden_off;    /**< where the last hidden state goes */
    uint32_t hidden_bytes;
    uint32_t desc_len;
    uint8_t desc[TE_DESC_MAX];        /**< the decoder pool's descriptor */
    uint32_t pages[TE_KV_MAX_PAGES];  /**< page index per prompt page */
    /* ACCEPT */
    uint64_t expected_imms;
    /* HELLO */
    uint32_t addr_len;
    uint8_t addr[TE_ADDR_MAX];
} te_kv_msg;

/** Largest encoded message (a REQUEST with TE_KV_MAX_PAGES pages): engines
 * carrying te-kv traffic need engine.max_msg_size at least this. */
#define TE_KV_MSG_MAX (28 + 56 + TE_DESC_MAX + 4 * TE_KV_MAX_PAGES)

/**
 * Encode m into buf (at most cap bytes); returns the length or -ENOSPC.
 * Versioned, little-endian, length-checked: see docs/kvcache.md.
 */
TE_API int te_kv_msg_encode(const te_kv_msg *m, void *buf, size_t cap);

/**
 * Parse untrusted bytes. Never reads outside buf[0..len); -EBADMSG /
 * -EPROTO with a message naming the field (te_kv_last_error()).
 */
TE_API int te_kv_msg_parse(const void *buf, size_t len, te_kv_msg *out);

/** The message of the last te_kv_* failure of this thread ("" if none). */
TE_API const char *te_kv_last_error(void);

/* ------------------------------------------------------------ prefiller */

/** A prefiller: serves REQUESTs arriving on its engine (te_kv_prefiller_new). */
typedef struct te_kv_prefiller te_kv_prefiller;

/** Options of a prefiller. */
typedef struct te_kv_prefiller_opts {
    te_kv_shape shape;      /**< the model it serves */
    uint32_t max_pages;     /**< most pages of one prompt (its source region) */
    uint32_t layer_us;      /**< simulated compute per layer for ref_tokens */
    uint32_t ref_tokens;    /**< compute scales linearly with tokens / this */
    int32_t group;          /**< engine group */
    int32_t timeout_ms;     /**< deadline of its writes and messages: 0
                                 (30 s) or 1..120000 ms, else -EINVAL */
    int32_t no_fill;        /**< benchmarks: skip writing the pattern (the
                                 bytes then fail te_kv_decoder_verify) */
} te_kv_prefiller_opts;

/**
 * Start serving on group o->group of e (installs the group's receive
 * handler; one worker thread). e must allow messages of TE_KV_MSG_MAX
 * bytes (engine.max_msg_size).
 */
TE_API int te_kv_prefiller_new(te_engine *e, const te_kv_prefiller_opts *o,
                               te_kv_prefiller **out);

/** Counters of a prefiller. */
typedef struct te_kv_prefiller_stats {
    uint64_t accepted, rejected, completed, cancelled, failed;
    uint64_t layer_writes;     /**< paged writes submitted */
    uint64_t bytes;            /**< payload submitted */
} te_kv_prefiller_stats;

TE_API void te_kv_prefiller_stats_get(te_kv_prefiller *p, te_kv_prefiller_stats *out);

/**
 * CLOCK_MONOTONIC time (ns) at which the last layer of request `id` was
 * computed and its write submitted (of the last 256 requests), or 0: what
 * te-kv bench measures the decoder's notification against.
 */
TE_API uint64_t te_kv_prefiller_last_layer_ns(te_kv_prefiller *p, uint64_t id);

/** Stop serving (in-flight requests finish or fail first) and free. If
 *  writes are still outstanding past their deadline (+10 s) or the source
 *  cannot be deregistered, its memory is kept (leaked, logged). */
TE_API void te_kv_prefiller_free(te_kv_prefiller *p);

/* -------------------------------------------------------------- decoder */

/** A decoder: owns the page pool and sends requests (te_kv_decoder_new). */
typedef struct te_kv_decoder te_kv_decoder;

/**
 * Called exactly once per request: status 0 when every write landed (the
 * pages hold the KV; release them with te_kv_decoder_release()), called on
 * the engine's callback thread the moment the count is met (so keep it
 * short: hand the request to the model's scheduler); -ECANCELED after a
 * confirmed cancel, or an error (-ETIMEDOUT, -ECONNRESET, a REJECT's
 * errno) with te_kv_last_error() style text in why, called on the
 * decoder's service thread. Pages of a failed or cancelled request are
 * already back in the pool. Callbacks of different requests may run
 * concurrently; te_kv_decoder_* calls are allowed in them.
 */
typedef void (*te_kv_done_fn)(uint64_t request_id, int status,
                              const char *why, void *arg);

/** Options of a decoder. */
typedef struct te_kv_decoder_opts {
    te_kv_shape shape;
    uint32_t pool_pages;    /**< pages per layer in the pool */
    uint32_t max_requests;  /**< requests in flight at once */
    int32_t group;
    /** REQUEST -> ACCEPT deadline (0: 5 s); its clock is held while the
     *  prefiller serves or cancels another request of this decoder (it
     *  ACCEPTs one request at a time). */
    int32_t accept_timeout_ms;
    int32_t cancel_timeout_ms;  /**< CANCEL -> CANCELLED deadline (0: 5 s) */
    /**
     * Late-write detector (tests, soak runs): non-zero fills every page
     * and hidden slot with TE_KV_POISON when it returns to the pool, and
     * checks that it still holds only that byte when it is handed out
     * again; a page or slot that does not counts one late write
     * (te_kv_decoder_late_writes()). Costs a fill and a scan per page.
     */
    int32_t poison_freed;
} te_kv_decoder_opts;

/** The byte freed pages hold under te_kv_decoder_opts.poison_freed. */
#define TE_KV_POISON 0xA5u

TE_API int te_kv_decoder_new(te_engine *e, const te_kv_decoder_opts *o,
                             te_kv_decoder **out);

/**
 * Add a prefiller by its engine address: the pool is registered once more
 * for it (so that it can be fenced alone) and a HELLO carries our address.
 * *id: the prefiller's index for te_kv_decoder_submit().
 */
TE_API int te_kv_decoder_add_prefiller(te_kv_decoder *d, const void *addr,
                                       size_t len, uint32_t *id);

/**
 * Ask prefiller `pf` for the KV of a `tokens`-token prompt as request `id`
 * (unique for this decoder's lifetime: a prefiller remembers cancels
 * that overtook their request by decoder and id). Allocates the pages
 * (-ENOSPC if the pool lacks them), sends the REQUEST; cb runs when it ends. timeout_ms bounds the
 * whole transfer (0: 60 s): past it the request fails and its prefiller is
 * fenced.
 */
TE_API int te_kv_decoder_submit(te_kv_decoder *d, uint32_t pf, uint64_t id,
                                uint32_t tokens, int timeout_ms, te_kv_done_fn cb,
                                void *arg);

/** Cancel a request: cb gets -ECANCELED once its prefiller confirmed that no
 * write can land (or, silent, was fenced). -ENOENT for an unknown id. */
TE_API int te_kv_decoder_cancel(te_kv_decoder *d, uint64_t id);

/** Give back the pages of a completed request. -ENOENT if unknown, -EBUSY
 * while it is still in flight. */
TE_API int te_kv_decoder_release(te_kv_decoder *d, uint64_t id);

/** Pages of a completed request (n in/out) and the pool's memory. */
TE_API int te_kv_decoder_pages(te_kv_decoder *d, uint64_t id, uint32_t *idx,
                               uint32_t *n);

/**
 * Check every byte a completed request's prefiller wrote (the pattern the
 * prefillers of this library write): 0, or -EIO naming the first wrong
 * layer/page/byte.
 */
TE_API int te_kv_decoder_verify(te_kv_decoder *d, uint64_t id);

/** The pool (for counts). */
TE_API te_kv_pool *te_kv_decoder_pool(te_kv_decoder *d);

/** Requests still in flight. */
TE_API uint32_t te_kv_decoder_inflight(te_kv_decoder *d);

/**
 * Pages and hidden slots found overwritten while free (poison_freed): a
 * write that landed after its request's pages were returned. Must be 0.
 */
TE_API uint64_t te_kv_decoder_late_writes(te_kv_decoder *d);

/** Stop: every request in flight is cancelled or fenced first. After a
 *  failed revocation (pages quarantined) the pool memory is kept (leaked,
 *  logged): an old key may still write into it. It returns once no
 *  engine callback can reach the decoder any more; so it must not be
 *  called from a te_kv_done_fn (it would wait for itself). */
TE_API void te_kv_decoder_free(te_kv_decoder *d);

/* ----------------------------------------------------------- membership */

/**
 * Where decoders and prefillers find each other: a store of member records
 * (name, role, address, capacity) that expire unless kept alive, so dead
 * members disappear. Two kinds (te_kv_store_open url):
 *   "etcd://HOST:PORT"  etcd's v3 API (JSON gateway) with leases;
 *   "dir:PATH" or NULL  an embedded directory of record files (default
 *                       $TE_KV_STORE, else /tmp/te-kv-<uid>): one host,
 *                       no set-up.
 */
typedef struct te_kv_store te_kv_store;

/** A member as listed. */
typedef struct te_kv_member {
    char name[64];
    char role[16];           /**< "decode" or "prefill" */
    uint32_t capacity;       /**< pages (prefill: max prompt pages) */
    uint32_t addr_len;
    uint8_t addr[TE_ADDR_MAX];
} te_kv_member;

TE_API int te_kv_store_open(const char *url, const char *cluster, te_kv_store **out);
/** Publish (or refresh) a record valid for ttl_s seconds. */
TE_API int te_kv_store_register(te_kv_store *s, const char *name, const char *role,
                                const void *addr, size_t len, uint32_t capacity,
                                int ttl_s);
/** Keep this member's record alive another ttl. A record that expired
 *  meanwhile (a process stopped or starved past its ttl: its etcd lease
 *  is gone, or its file record is past its expiry) is published again,
 *  so a member that was dropped from the list comes back while it lives.
 *  0: refreshed; 1: it had expired and was published again; <0: error
 *  (te_kv_last_error()). */
TE_API int te_kv_store_keepalive(te_kv_store *s);
/** Remove this member's record. <0 (te_kv_last_error()) when it could not
 *  be removed (etcd unreachable, the file not unlinked): it then stays
 *  listed until its ttl runs out; the call may be repeated. */
TE_API int te_kv_store_unregister(te_kv_store *s);
/**
 * Live members of `role` (NULL: all) into out[0..max): returns how many
 * (possibly more than max). Records that do not parse are skipped with a
 * warning naming them (the log sink, te_set_log_fn; origin "te-kv"); the
 * others are returned.
 */
TE_API int te_kv_store_list(te_kv_store *s, const char *role, te_kv_member *out,
                            int max);
TE_API void te_kv_store_close(te_kv_store *s);

#ifdef __cplusplus
}
#endif
#endif
