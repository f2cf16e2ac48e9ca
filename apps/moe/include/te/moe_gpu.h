/*
 * te-moe GPU path (built only when CMake finds the CUDA toolkit; library
 * te-moe-gpu, CUDA runtime linked statically so it loads on machines
 * without a driver). Kernels that produce and consume te-moe's buffer
 * layouts (docs/moe.md) and the device side of the proxy ring
 * (te/moe_proxy.h). Every launch is asynchronous on `stream`
 * (a cudaStream_t, NULL = default); returns 0 or -EIO with the CUDA error
 * in te_moe_gpu_last_error().
 */
#ifndef TE_MOE_GPU_H
#define TE_MOE_GPU_H

#include <stdint.h>

#include "te/moe.h"
#include "te/moe_proxy.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Devices visible to the CUDA runtime (0 when none or no driver; reason
 *  in te_moe_gpu_last_error()). */
TE_API int te_moe_gpu_device_count(void);

/** Message of the last failure of this header's functions. */
TE_API const char *te_moe_gpu_last_error(void);

/**
 * Route: for every destination rank d (one GPU thread each, tokens in
 * order, as the CPU path stages them), pos[t*ranks + d] = the row of token
 * t in d's dispatch slot, or UINT32_MAX when none of t's top-k experts
 * lives on d; rows[d] = rows for d. experts: [tokens][topk] ids.
 */
TE_API int te_moe_gpu_route(const uint16_t *experts, uint32_t tokens, uint32_t topk,
                            uint32_t ranks, uint32_t experts_per_rank, uint32_t *pos,
                            uint32_t *rows, void *stream);

/**
 * Pack the dispatch rows in libte-moe's layout: row pos[t*ranks+d] of
 * slot d lies at send + d*slot + 64 + row*row_bytes: the 64-byte meta
 * {token, nexp, experts[8] (u16), weights[8], slots[8] (u8: their top-k
 * positions)} (the experts of t that live on d, in top-k order) then the token's x_row_bytes.
 */
TE_API int te_moe_gpu_pack(const void *x, uint32_t x_row_bytes, const uint16_t *experts,
                           const float *weights, const uint32_t *pos, uint32_t tokens,
                           uint32_t topk, uint32_t ranks, uint32_t experts_per_rank,
                           uint64_t slot, uint64_t row_bytes, void *send, void *stream);

/**
 * Combine: out[t] = 0 + partial of rank 0 + partial of rank 1 + ... (ranks
 * ascending, float32, the CPU path's order), the partial of rank d for
 * token t at comb + d*cslot + pos[t*ranks+d]*crow_bytes + 16. In
 * libte-moe's receive area every slot starts with a 64-byte head: comb is
 * the area's start + 64 (the first row of rank 0's slot).
 */
TE_API int te_moe_gpu_combine(const void *comb, const uint32_t *pos, uint32_t tokens,
                              uint32_t ranks, uint32_t hidden, uint64_t cslot,
                              uint64_t crow_bytes, float *out, void *stream);

/**
 * Load every kernel of this library now (each launch call below also does
 * it once, on first use). Kernels that wait on each other (te_moe_gpu_post
 * and te_moe_gpu_wait_flag) must both be loaded before either spins: with
 * CUDA's lazy module loading, loading a kernel can wait for the running
 * ones, so a spinning waiter could keep its producer from starting. Call
 * it before capturing these launches in a CUDA graph. 0, or -EIO with
 * te_moe_gpu_last_error().
 */
TE_API int te_moe_gpu_preload(void);

/**
 * Post `count` entries to a proxy ring from the GPU (one thread, in
 * order): `ring` is the device pointer of the mapped ring, `posted` a
 * device counter of entries posted so far. Waits (bounded by
 * timeout_cycles of clock64) for room; *status (device) gets -1 if it
 * gave up or the ring reported an error.
 */
TE_API int te_moe_gpu_post(te_moe_ring *ring, unsigned long long *posted,
                           const te_moe_ring_entry *entries, uint32_t count,
                           long long timeout_cycles, int *status, void *stream);

/** Spin on the GPU until flag == value (bounded); *status = 0, -1 on
 *  timeout, -2 if the flag reads TE_MOE_FLAG_FAILED. */
TE_API int te_moe_gpu_wait_flag(const volatile uint32_t *flag, uint32_t value,
                                long long timeout_cycles, int *status, void *stream);

/**
 * A memory backend (te/moe.h te_moe_rank_mem_ops) for tensors in CUDA
 * device memory of the current device: x (staged or registered with
 * te_moe_rank_input, as TE_MEM_CUDA), te_moe_recv.x, the expert outputs
 * and combine's out are device pointers; the row copies and weighted sums
 * run as kernels on `stream` (a cudaStream_t, NULL = the default stream),
 * and the library's syncs are cudaStreamSynchronize on it: when
 * te_moe_dispatch_wait returns, recv.x is written; when
 * te_moe_combine_wait returns, out is. Routing, recv.count, .src and
 * .rows stay host memory. The rank's own buffers (host memory) are
 * registered with cudaHostRegister when the backend is attached, and the
 * kernels use them at their host addresses: the device must support that
 * (cudaDevAttrCanUseHostPointerForRegisteredMem, as x86-64 and Grace hosts
 * with current drivers do; te_moe_rank_mem_ops fails with -ENOTSUP
 * otherwise); index mode's rows point there too, readable by kernels. One
 * backend per rank. Fills *ops: 0, -ENODEV without a usable device, or
 * -ENOMEM; te_moe_gpu_last_error() says why.
 */
TE_API int te_moe_gpu_mem_ops_new(void *stream, te_moe_mem_ops *ops);

/** Free a backend of te_moe_gpu_mem_ops_new() once no rank uses it
 *  (te_moe_rank_free, or another backend set): waits for its stream,
 *  unregisters the rank's buffers if still attached. NULL is allowed. */
TE_API void te_moe_gpu_mem_ops_free(te_moe_mem_ops *ops);

#ifdef __cplusplus
}
#endif
#endif
