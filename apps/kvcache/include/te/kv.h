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
 * Two ways to use it. The engine-owned way (te_kv_cache, te_kv_source,
 * te_kv_decoder_new_cache, te_kv_decoder_submit_pages): the inference
 * engine registers its own paged KV cache on both sides, names its own page
 * ids per request and says when each layer is computed; the writes read the
 * prefiller's pages and land in the decoder's pages (no copy). The
 * self-contained way (te_kv_prefiller, te_kv_decoder_new): the library owns
 * a page pool and writes a verification pattern, for benchmarks and the
 * te-kv tool.
 *
 * Conventions as in te.h: 0 or a negative errno; te_kv_last_error() names
 * the cause of this library's failures (te_last_error() the core's).
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
    /** decoder -> te_kv_source: a REQUEST into the engine's own cache (the
     *  REQUEST's fields plus the shape and one (offset, stride) per region
     *  of the decoder's cache) */
    TE_KV_MSG_CACHE_REQUEST = 7,
    /** te_kv_source -> decoder: layer `status` of the request is at the
     *  decoder (every write of it completed at the source); sent only when
     *  the CACHE_REQUEST's flags hold TE_KV_REQ_LAYER_NOTES */
    TE_KV_MSG_LAYER = 8,
    /** decoder -> te_kv_source, once per registration (after its HELLO):
     *  the memory descriptors of the decoder cache's allocations, up to
     *  TE_KV_DESCS_PER_MSG per message; CACHE_REQUESTs name the set by
     *  `layout` and carry no descriptor (wire version 2) */
    TE_KV_MSG_CACHE_DESCS = 9,
};

/** CACHE_REQUEST flag: send a LAYER message as each layer lands. */
#define TE_KV_REQ_LAYER_NOTES 1u

/** Most regions of an engine-owned cache (layers x kv_factor). */
#define TE_KV_MAX_REGIONS 256

/** Most allocations of an engine-owned cache: one per region plus one
 *  for the hidden state (te_kv_cache_desc.allocs). */
#define TE_KV_MAX_ALLOCS (TE_KV_MAX_REGIONS + 1)

/** Most descriptors one CACHE_DESCS message carries (a cache of more
 *  allocations sends several). */
#define TE_KV_DESCS_PER_MSG 32

/** Where one region's page 0 lies and how far apart its pages are. */
typedef struct te_kv_region {
    uint64_t offset;      /**< bytes from its allocation's base to page 0 */
    uint64_t page_stride; /**< bytes from page p to page p + 1 */
    uint32_t alloc;       /**< its allocation: index into
                               te_kv_cache_desc.allocs (0 with base/len) */
    uint32_t reserved;    /**< 0 (kept for a later version) */
} te_kv_region;

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
    /* CACHE_REQUEST (the REQUEST fields above, then these); page_bytes is
     * one region's page, layer_stride 0, pages the decoder's page ids */
    uint32_t kv_factor;       /**< regions per layer (2 K/V, 1 latent) */
    uint32_t elem_bytes;      /**< bytes per element (the dtype's size) */
    uint32_t tokens_per_page;
    uint32_t flags;           /**< TE_KV_REQ_* */
    uint32_t nregions;        /**< layers * kv_factor */
    te_kv_region regions[TE_KV_MAX_REGIONS]; /**< the decoder's, [layer][kv];
                                  alloc is sent in version 2 only */
    /* CACHE_REQUEST version 2 (nallocs > 0; desc_len is then 0) and
     * CACHE_DESCS */
    uint32_t layout;          /**< the decoder's registration set (its
                                   prefiller index): names the descriptors */
    uint32_t nallocs;         /**< allocations of the decoder's cache (1..
                                   TE_KV_MAX_ALLOCS); 0: a version-1
                                   CACHE_REQUEST with its one desc inline */
    uint32_t hidden_alloc;    /**< CACHE_REQUEST: allocation of hidden_off */
    /* CACHE_DESCS: descriptors first .. first + ndescs - 1 of `layout` */
    uint32_t first;
    uint32_t ndescs;          /**< 1..TE_KV_DESCS_PER_MSG */
    uint32_t desc_lens[TE_KV_DESCS_PER_MSG];
    uint8_t descs[TE_KV_DESCS_PER_MSG][TE_DESC_MAX];
} te_kv_msg;

/** Largest encoded message (a CACHE_REQUEST with TE_KV_MAX_PAGES pages and
 * TE_KV_MAX_REGIONS regions; a CACHE_DESCS is smaller): engines carrying
 * te-kv traffic need engine.max_msg_size at least this. It does not grow
 * with the number of allocations: their descriptors travel once per
 * registration, in CACHE_DESCS messages of TE_KV_DESCS_PER_MSG each. */
#define TE_KV_MSG_MAX (28 + 56 + TE_DESC_MAX + 4 * TE_KV_MAX_PAGES + 20 + \
                       20 * TE_KV_MAX_REGIONS + 12)

/**
 * Encode m into buf (at most cap bytes); returns the length or -ENOSPC.
 * Versioned, little-endian, length-checked: see docs/kvcache.md. A
 * CACHE_REQUEST with nallocs > 0 and CACHE_DESCS are wire version 2, every
 * other message version 1 (their layout is unchanged).
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

/** Page ids of a completed request: *n in: room in idx; out: how many.
 *  -ENOENT unless completed, -ENOSPC when idx is too small. */
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

/* ------------------------------------------- the engine's own KV cache */

/** One allocation of an engine cache (te_kv_cache_desc.allocs): memory
 *  registered as a whole, once per engine (per prefiller at a decoder). */
typedef struct te_kv_alloc {
    void *base;             /**< its first byte */
    uint64_t len;           /**< its bytes */
} te_kv_alloc;

/**
 * The inference engine's paged KV cache as it lies in its memory: one or
 * more allocations (host, or CUDA with TE_MEM_CUDA when the core is built
 * with CUDA; all of one kind) holding, per layer, kv_factor regions (K
 * then V, or one MLA latent), each with `pages` pages of
 * te_kv_region_page_bytes(shape) bytes at offset + id * page_stride from
 * the base of the region's allocation, and optionally hidden_slots slots
 * of hidden * elem_bytes bytes for the last hidden state. The byte order
 * inside a page is the engine's own; both sides must use the same one (the
 * same shape is checked, the order is not).
 *
 * The allocations are given one of two ways: base/len, one allocation
 * holding everything (every region's alloc 0; allocs NULL, nallocs 0), or
 * allocs[0 .. nallocs) (base NULL, len 0), e.g. one tensor per layer (or
 * per layer's K and V) as vLLM and SGLang allocate them, with each region
 * naming its allocation (te_kv_region.alloc) and hidden_alloc the hidden
 * slots'. Fields after hidden_slots were added in that order; a desc
 * zero-initialised before its fields are set is the one-allocation form.
 */
typedef struct te_kv_cache_desc {
    te_kv_shape shape;      /**< layers, kv_factor, heads, dim, dtype size,
                                 tokens_per_page, hidden */
    void *base;             /**< the one allocation (NULL with allocs) */
    uint64_t len;           /**< its bytes (0 with allocs) */
    int32_t mem;            /**< TE_MEM_HOST or TE_MEM_CUDA */
    uint32_t pages;         /**< page ids 0 .. pages-1 in every region */
    const te_kv_region *regions; /**< layers * kv_factor, [layer][kv] */
    uint64_t hidden_offset; /**< hidden slot 0 from its allocation's base
                                 (hidden_slots > 0) */
    uint64_t hidden_stride; /**< bytes from slot s to s + 1 */
    uint32_t hidden_slots;  /**< 0: no hidden-state region */
    uint32_t nallocs;       /**< entries of allocs (1..TE_KV_MAX_ALLOCS),
                                 or 0: base/len */
    const te_kv_alloc *allocs; /**< the allocations, pairwise disjoint,
                                 each holding a region or the hidden slots */
    uint32_t hidden_alloc;  /**< allocation of the hidden slots (0 with
                                 base/len) */
    uint32_t reserved;      /**< 0 */
} te_kv_cache_desc;

/** A checked te_kv_cache_desc (a copy: the desc may go after _new). */
typedef struct te_kv_cache te_kv_cache;

/** Bytes of one page of one region: tokens_per_page * kv_heads * head_dim *
 *  elem_bytes (te_kv_page_bytes / kv_factor). */
TE_API uint64_t te_kv_region_page_bytes(const te_kv_shape *s);

/**
 * Check and copy d: every region and hidden slot inside its allocation,
 * strides at least a page (a slot), no two pages (of any regions) or hidden
 * slots overlapping (by address, across allocations too), allocations
 * disjoint and each one used, regions == layers * kv_factor <=
 * TE_KV_MAX_REGIONS. -EINVAL naming the field (te_kv_last_error()).
 * Nothing is registered yet: the decoder and the source register each
 * allocation on their engine.
 */
TE_API int te_kv_cache_new(const te_kv_cache_desc *d, te_kv_cache **out);

/** Forget the cache: -EBUSY (nothing freed) while a decoder or source made
 *  on it is not freed yet. The memory stays the caller's. */
TE_API int te_kv_cache_free(te_kv_cache *c);

/* ---------------------------------------- prefill side over the engine's cache */

/** The prefill side of the engine-owned way: the engine computes, the
 *  source writes each finished layer (te_kv_source_new). */
typedef struct te_kv_source te_kv_source;

/**
 * Serve decoders' CACHE_REQUESTs from cache c on group `group` of e
 * (installs the group's receive handler; e must allow TE_KV_MSG_MAX-byte
 * messages). Each allocation of c is registered once (read only).
 * timeout_ms bounds each write and message (0: 30 s; 1..120000).
 */
TE_API int te_kv_source_new(te_engine *e, int group, te_kv_cache *c,
                            int timeout_ms, te_kv_source **out);

/**
 * The engine starts prefilling request `id` (the id its decoder submits
 * with) of `tokens` tokens from its own source pages src_pages[0..n)
 * (n = te_kv_pages_for(tokens)) and, if the decoder wants a hidden state,
 * hidden slot `hidden_slot` of the cache. The decoder's request may arrive
 * before or after this call; once both are here the source ACCEPTs with
 * the exact count of immediates and writes every layer already done.
 * -EINVAL naming the field (a page id out of range, twice, n wrong),
 * -EEXIST if id is in progress.
 */
TE_API int te_kv_source_begin(te_kv_source *s, uint64_t id, uint32_t tokens,
                              const uint32_t *src_pages, uint32_t n,
                              uint32_t hidden_slot);

/**
 * Layer `layer` of request id is in the cache: its pages (every region of
 * the layer) are written now, on the caller's thread, if the decoder's
 * request is here (else as soon as it is). -ERANGE for a layer out of
 * range, -EALREADY for a layer reported twice, -ENOENT for an unknown id.
 * The engine must not write those source pages again until
 * te_kv_source_wait() returned.
 */
TE_API int te_kv_source_layer_done(te_kv_source *s, uint64_t id,
                                   uint32_t layer);

/** The hidden state is in its slot: written now (or when the request
 *  arrives), if the decoder asked for one; nothing otherwise. */
TE_API int te_kv_source_hidden_done(te_kv_source *s, uint64_t id);

/**
 * Until request id ended: 0 when every write completed (delivered),
 * -ECANCELED (the decoder cancelled; the confirmation is sent), a write's
 * error, or -ETIMEDOUT when timeout_ms passed first (the request stays;
 * call again). After any answer but -ETIMEDOUT no write of it reads the
 * source pages any more: the engine may reuse them, and the id is forgotten.
 * A request whose layers are not all reported never ends by itself:
 * report them, or the decoder's cancel or fence ends it.
 */
TE_API int te_kv_source_wait(te_kv_source *s, uint64_t id, int timeout_ms);

/**
 * The GPU-driven variant of layer_done: a watcher word (te_gpu_watcher, in
 * mapped host memory) that the engine's forward pass bumps by 1 on its
 * stream after each layer (te_k_bump_watcher in kernels/, also inside a
 * CUDA graph): step k reports layer k-1 of request id, step layers+1 the
 * hidden state, from the watcher's thread. One per request in progress
 * (each has its own watcher thread). Needs the core built with CUDA and a
 * device: the watcher's error otherwise. Unrun on a GPU so far.
 */
typedef struct te_kv_gpu_layers te_kv_gpu_layers;
TE_API int te_kv_gpu_layers_new(te_kv_source *s, uint64_t id, uint32_t layers,
                                int device, te_kv_gpu_layers **out);
/** The device pointer (unsigned long long *) for the bump kernel. */
TE_API void *te_kv_gpu_layers_word(const te_kv_gpu_layers *g);
/** Stop the watcher (after delivering the steps already visible). */
TE_API int te_kv_gpu_layers_free(te_kv_gpu_layers *g);

/** Stop serving: requests in progress fail (their decoders fence or time
 *  out), writes are waited for, the cache's registration goes. */
TE_API void te_kv_source_free(te_kv_source *s);

/* ---------------------------------------- decode side over the engine's cache */

/**
 * A decoder whose pages are the engine's cache c instead of a pool of the
 * library's: o->shape must equal c's shape, o->pool_pages is ignored (c's
 * pages are the page ids), o->poison_freed must be 0 (it would write into
 * the engine's memory). Every allocation of c is registered once per
 * prefiller (so that one prefiller can be fenced alone), and a
 * fence revokes all of that prefiller's registrations before any of its
 * requests' pages are handed back. Requests are submitted with
 * te_kv_decoder_submit_pages();
 * te_kv_decoder_cancel/release/pages/inflight/free work as for the pool.
 */
TE_API int te_kv_decoder_new_cache(te_engine *e, const te_kv_decoder_opts *o,
                                   te_kv_cache *c, te_kv_decoder **out);

/**
 * Ask prefiller pf (a te_kv_source) for request id's KV into the engine's
 * own pages pages[0..n) (n = te_kv_pages_for(tokens); the last page may be
 * partly used: the whole page is written, its slots past `tokens` hold the
 * prefiller's bytes) and, unless hidden_slot is UINT32_MAX, the hidden
 * state into that slot. The pages must not be in another request in flight
 * or being fenced (-EBUSY naming the page); until cb ran, and after a
 * success until te_kv_decoder_release(), they belong to the request: the
 * engine must not write them, nor reuse them for another request. -EINVAL
 * naming the field for ids out of range or listed twice.
 */
TE_API int te_kv_decoder_submit_pages(te_kv_decoder *d, uint32_t pf, uint64_t id,
                                      uint32_t tokens, const uint32_t *pages,
                                      uint32_t n, uint32_t hidden_slot,
                                      int timeout_ms, te_kv_done_fn cb,
                                      void *arg);

/**
 * Per-layer arrival (engine-cache decoders): fn(request_id, layer, arg) runs
 * once per layer of every later request, on the decoder's service thread,
 * after the source saw every write of that layer complete (so its bytes
 * are in the engine's pages: the same guarantee a CANCELLED rests on). A
 * note may come after the request's completion callback (then ignore it:
 * completion means every layer landed) and never comes for a request that
 * failed or was cancelled. Set it before submitting; NULL turns it off.
 * -EINVAL for a pool decoder.
 */
typedef void (*te_kv_layer_fn)(uint64_t request_id, uint32_t layer, void *arg);
TE_API int te_kv_decoder_on_layer(te_kv_decoder *d, te_kv_layer_fn fn,
                                  void *arg);

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
