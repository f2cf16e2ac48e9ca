// te-moe GPU kernels: pack, combine, and the device side of the proxy
// ring. Built with -fmad=false so that the combine rounds like the CPU
// path (no fused multiply-add), which makes fp32 results bit-exact.
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "te/moe_gpu.h"

static __thread char gpu_err[256];

extern "C" const char *te_moe_gpu_last_error(void) { return gpu_err; }

static int check(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    snprintf(gpu_err, sizeof(gpu_err), "%s: %s", what, cudaGetErrorString(e));
    return -EIO;
}

extern "C" int te_moe_gpu_device_count(void)
{
    int n = 0;
    if (check(cudaGetDeviceCount(&n), "cudaGetDeviceCount"))
        return 0;
    return n;
}

// One block per pair: thread 0 writes the record header, all threads copy
// the row in 4-byte words (rows are a multiple of 16 bytes: hidden % 8 == 0).
__global__ void pack_kernel(const uint8_t *x, uint32_t row_bytes, const uint32_t *ids,
                            const uint32_t *dest, const uint32_t *pos, const uint64_t *blk_off,
                            uint32_t top_k, uint64_t hdr, uint64_t rec, uint32_t batch,
                            uint8_t *send)
{
    uint32_t p = blockIdx.x, t = p / top_k, k = p % top_k;
    uint8_t *r = send + blk_off[dest[p]] + hdr + (uint64_t)pos[p] * rec;
    if (threadIdx.x == 0) {
        uint32_t *h = (uint32_t *)r;
        h[0] = t, h[1] = ids[p], h[2] = k, h[3] = batch;
    }
    const uint32_t *src = (const uint32_t *)(x + (uint64_t)t * row_bytes);
    uint32_t *dst = (uint32_t *)(r + 16);
    for (uint32_t i = threadIdx.x; i < row_bytes / 4; i += blockDim.x)
        dst[i] = src[i];
}

__device__ static float bf16_to_f32(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

__device__ static uint16_t f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// One block per token, threads over elements; k ascending as on the CPU.
__global__ void combine_kernel(const uint8_t *comb, const uint64_t *base, const uint32_t *dest,
                               const uint32_t *pos, const float *w, uint32_t top_k,
                               uint32_t hidden, uint32_t dtype, uint64_t orec, uint8_t *out)
{
    uint32_t t = blockIdx.x;
    for (uint32_t i = threadIdx.x; i < hidden; i += blockDim.x) {
        float acc = 0.0f;
        for (uint32_t k = 0; k < top_k; k++) {
            uint32_t p = t * top_k + k;
            const uint8_t *y = comb + base[dest[p]] + (uint64_t)pos[p] * orec;
            float v = dtype == 0 ? ((const float *)y)[i] : bf16_to_f32(((const uint16_t *)y)[i]);
            acc = __fadd_rn(acc, __fmul_rn(w[p], v));
        }
        if (dtype == 0)
            ((float *)out)[(uint64_t)t * hidden + i] = acc;
        else
            ((uint16_t *)out)[(uint64_t)t * hidden + i] = f32_to_bf16(acc);
    }
}

__global__ void post_kernel(te_moe_ring *ring, unsigned long long *posted,
                            const te_moe_ring_entry *entries, uint32_t count,
                            long long timeout_cycles, int *status)
{
    te_moe_ring_entry *ents = (te_moe_ring_entry *)(ring + 1);
    uint32_t n = ring->entries;
    long long start = clock64();
    *status = 0;
    for (uint32_t i = 0; i < count; i++) {
        unsigned long long at = *posted;
        // room: the proxy publishes `consumed` in mapped host memory
        while (at - *(volatile uint64_t *)&ring->consumed >= n) {
            if (*(volatile int32_t *)&ring->error || clock64() - start > timeout_cycles) {
                *status = -1;
                return;
            }
        }
        te_moe_ring_entry *slot = &ents[at & (n - 1)];
        const uint64_t *src = (const uint64_t *)&entries[i];
        uint64_t *dst = (uint64_t *)slot;
        for (int j = 1; j < 8; j++) // every field but the first word (seq, target)
            dst[j] = src[j];
        ((volatile uint32_t *)slot)[1] = entries[i].target;
        __threadfence_system(); // the fields reach host memory before seq
        ((volatile uint32_t *)slot)[0] = (uint32_t)(at + 1);
        *posted = at + 1;
    }
}

__global__ void wait_flag_kernel(const volatile uint32_t *flag, uint32_t value,
                                 long long timeout_cycles, int *status)
{
    long long start = clock64();
    for (;;) {
        uint32_t v = *flag;
        if (v == value) {
            __threadfence_system(); // reads after the flag see the data
            *status = 0;
            return;
        }
        if (v == TE_MOE_FLAG_FAILED) {
            *status = -2;
            return;
        }
        if (clock64() - start > timeout_cycles) {
            *status = -1;
            return;
        }
    }
}

extern "C" int te_moe_gpu_pack(const void *x, uint32_t row_bytes, const uint32_t *ids,
                               const uint32_t *dest, const uint32_t *pos, const uint64_t *blk_off,
                               uint32_t ntokens, uint32_t top_k, uint64_t hdr, uint64_t rec,
                               uint32_t batch, void *send, void *stream)
{
    if (ntokens == 0)
        return 0;
    pack_kernel<<<ntokens * top_k, 128, 0, (cudaStream_t)stream>>>(
        (const uint8_t *)x, row_bytes, ids, dest, pos, blk_off, top_k, hdr, rec, batch,
        (uint8_t *)send);
    return check(cudaGetLastError(), "pack kernel launch");
}

extern "C" int te_moe_gpu_combine(const void *comb, const uint64_t *base, const uint32_t *dest,
                                  const uint32_t *pos, const float *w, uint32_t ntokens,
                                  uint32_t top_k, uint32_t hidden, uint32_t dtype, uint64_t orec,
                                  void *out, void *stream)
{
    if (ntokens == 0)
        return 0;
    combine_kernel<<<ntokens, 256, 0, (cudaStream_t)stream>>>(
        (const uint8_t *)comb, base, dest, pos, w, top_k, hidden, dtype, orec, (uint8_t *)out);
    return check(cudaGetLastError(), "combine kernel launch");
}

extern "C" int te_moe_gpu_post(te_moe_ring *ring, unsigned long long *posted,
                               const te_moe_ring_entry *entries, uint32_t count,
                               long long timeout_cycles, int *status, void *stream)
{
    post_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(ring, posted, entries, count,
                                                   timeout_cycles, status);
    return check(cudaGetLastError(), "post kernel launch");
}

extern "C" int te_moe_gpu_wait_flag(const volatile uint32_t *flag, uint32_t value,
                                    long long timeout_cycles, int *status, void *stream)
{
    wait_flag_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(flag, value, timeout_cycles, status);
    return check(cudaGetLastError(), "wait-flag kernel launch");
}
