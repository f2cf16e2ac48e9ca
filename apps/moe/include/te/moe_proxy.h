/*
 * te-moe proxy: a CPU thread that turns requests posted by a GPU kernel
 * (or any producer) into te_submit() calls, and raises flags in the same
 * memory when ImmCounter expectations are met, so a kernel can wait for a
 * phase without the CPU in its loop. docs/moe.md, "GPU path".
 *
 * The ring lives in memory both sides see: on a GPU machine host-pinned
 * memory mapped into the device (cudaHostAlloc(..., cudaHostAllocMapped));
 * in CPU tests ordinary memory. The proxy itself needs no CUDA.
 */
#ifndef TE_MOE_PROXY_H
#define TE_MOE_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "te/te.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One request of the ring (64 bytes). The producer fills every field,
 *  makes them visible (__threadfence_system() on a GPU), then stores
 *  seq = its ring position + 1; the proxy clears seq when it has taken it. */
typedef struct te_moe_ring_entry {
    volatile uint32_t seq; /**< position + 1 when valid, 0 when free */
    uint32_t target;       /**< index set by te_moe_proxy_target() */
    uint32_t imm;          /**< immediate carried by the write */
    uint32_t reserved0;    /**< zero */
    uint64_t src_off;      /**< offset in the target's local registration */
    uint64_t dst_off;      /**< offset in the target's remote region */
    uint64_t len;          /**< bytes (> 0) */
    uint64_t reserved[3];  /**< zero */
} te_moe_ring_entry;

/** Head of the shared memory: then `entries` entries, then `flags` flags. */
typedef struct te_moe_ring {
    volatile uint64_t consumed; /**< entries taken by the proxy (producer: room = entries - (posted - consumed)) */
    volatile int32_t error;     /**< first failure (-errno), 0 while healthy */
    uint32_t entries;           /**< a power of two */
    uint32_t flags;             /**< number of flags */
    uint32_t reserved[11];
} te_moe_ring;

/** Bytes of shared memory for a ring of `entries` entries and `flags` flags. */
TE_API size_t te_moe_ring_bytes(uint32_t entries, uint32_t flags);

/** The entry array and the flag array of a ring. */
TE_API te_moe_ring_entry *te_moe_ring_entries(te_moe_ring *r);
TE_API volatile uint32_t *te_moe_ring_flags(te_moe_ring *r);

/** Flag value written when a watched expectation fails (timeout, cancel). */
#define TE_MOE_FLAG_FAILED 0xffffffffu

typedef struct te_moe_proxy te_moe_proxy; /**< the proxy (opaque) */

/**
 * Initialise the ring in `mem` (te_moe_ring_bytes() bytes, zeroed here) and
 * start the proxy thread on engine e (group 0). entries: a power of two.
 */
TE_API int te_moe_proxy_create(te_engine *e, void *mem, uint32_t entries, uint32_t flags,
                               te_moe_proxy **out);

/** Declare target `index` (< 64): writes go from `local` to `remote` of `peer`. */
TE_API int te_moe_proxy_target(te_moe_proxy *p, uint32_t index, te_peer peer, te_mr *local,
                               const te_mr_desc *remote);

/**
 * Raise flag `flag` to `value` once `count` arrivals of imm are counted (or
 * to TE_MOE_FLAG_FAILED after timeout_ms). One watch per flag at a time
 * (-EBUSY). te_moe_proxy_destroy() disarms the watches still armed
 * (te_imm_disarm: later arrivals of their imm stay banked for the next
 * user); one met just before destroy never writes its flag after it.
 */
TE_API int te_moe_proxy_watch(te_moe_proxy *p, uint32_t imm, uint64_t count, uint32_t flag,
                              uint32_t value, int timeout_ms);

/** Counters: entries submitted, writes completed successfully. A write is
 *  counted submitted before it can complete or fail, so completed (and
 *  te_moe_proxy_failed() read before this call) never exceed submitted. */
TE_API void te_moe_proxy_counts(const te_moe_proxy *p, uint64_t *submitted, uint64_t *completed);

/** Writes that failed (each also sets ring->error, first one's reason in
 *  te_moe_proxy_error()). Writes time out after 5 s in the engine. */
TE_API uint64_t te_moe_proxy_failed(const te_moe_proxy *p);

/** The reason of the ring's error ("" while healthy). */
TE_API const char *te_moe_proxy_error(const te_moe_proxy *p);

/** Stop the thread, wait (at most 10 s) for the callbacks of writes in
 *  flight, and free; memory that late callbacks use is freed by the last
 *  of them. The ring memory may be freed once this returns. */
TE_API void te_moe_proxy_destroy(te_moe_proxy *p);

#ifdef __cplusplus
}
#endif
#endif
