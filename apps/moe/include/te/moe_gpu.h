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

#include "te/moe_proxy.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Devices visible to the CUDA runtime (0 when none or no driver; reason
 *  in te_moe_gpu_last_error()). */
int te_moe_gpu_device_count(void);

/** Message of the last failure of this header's functions. */
const char *te_moe_gpu_last_error(void);

/**
 * Pack: pair p = t*top_k + k of token t goes to send + blk_off[dest[p]] +
 * hdr + pos[p]*rec as {t, ids[p], k, batch} then the token's row_bytes.
 * All pointers are device-visible.
 */
int te_moe_gpu_pack(const void *x, uint32_t row_bytes, const uint32_t *ids,
                    const uint32_t *dest, const uint32_t *pos, const uint64_t *blk_off,
                    uint32_t ntokens, uint32_t top_k, uint64_t hdr, uint64_t rec,
                    uint32_t batch, void *send, void *stream);

/**
 * Combine: out[t] = sum over k ascending of w[p] * y(p) in float32, y(p) at
 * comb + base[dest[p]] + pos[p]*orec; dtype 0 fp32, 1 bf16 (rounded as
 * te_moe_f32_to_bf16). Same order and roundings as the CPU path.
 */
int te_moe_gpu_combine(const void *comb, const uint64_t *base, const uint32_t *dest,
                       const uint32_t *pos, const float *w, uint32_t ntokens,
                       uint32_t top_k, uint32_t hidden, uint32_t dtype, uint64_t orec,
                       void *out, void *stream);

/**
 * Post `count` entries to a proxy ring from the GPU (one thread, in
 * order): `ring` is the device pointer of the mapped ring, `posted` a
 * device counter of entries posted so far. Waits (bounded by
 * timeout_cycles of clock64) for room; *status (device) gets -1 if it
 * gave up or the ring reported an error.
 */
int te_moe_gpu_post(te_moe_ring *ring, unsigned long long *posted,
                    const te_moe_ring_entry *entries, uint32_t count,
                    long long timeout_cycles, int *status, void *stream);

/** Spin on the GPU until flag == value (bounded); *status = 0, -1 on
 *  timeout, -2 if the flag reads TE_MOE_FLAG_FAILED. */
int te_moe_gpu_wait_flag(const volatile uint32_t *flag, uint32_t value,
                         long long timeout_cycles, int *status, void *stream);

#ifdef __cplusplus
}
#endif
#endif
