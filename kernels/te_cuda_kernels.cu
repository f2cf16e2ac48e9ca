// Kernels of te_cuda_kernels.h. Deliberately tiny: they exist to prove and
// measure the library's GPU-facing paths, not to be fast at filling memory.
#include <cuda_runtime.h>

#include "te_cuda_kernels.h"

static __device__ uint64_t global_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void te_k_spin_flag_kernel(const volatile uint32_t *flag,
                                      uint64_t timeout_ns,
                                      te_k_spin_result *result,
                                      uint32_t *ack)
{
    uint64_t start = global_ns(), spins = 0;
    uint32_t v = 0;
    bool timed_out = false;
    for (;;) {
        v = *flag;  // volatile: re-read the mapped word every time
        spins++;
        if (v)
            break;
        if (global_ns() - start > timeout_ns) {
            timed_out = true;
            break;
        }
    }
    __threadfence_system();
    result->value = v;
    result->timed_out = timed_out ? 1u : 0u;
    result->spins = spins;
    if (ack) {
        __threadfence_system();
        atomicExch_system(ack, v);
    }
}

__global__ void te_k_bump_kernel(unsigned long long *word)
{
    __threadfence_system();  // earlier writes of the graph are visible first
    atomicAdd_system(word, 1ull);
}

__global__ void te_k_fill_kernel(uint8_t *p, size_t len, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = te_k_pattern_byte(seed, i);
}

__global__ void te_k_verify_kernel(const uint8_t *p, size_t len,
                                   uint64_t seed, uint64_t off,
                                   unsigned long long *bad)
{
    unsigned long long mine = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < len;
         i += (size_t)gridDim.x * blockDim.x)
        mine += p[i] != te_k_pattern_byte(seed, i + off);
    if (mine)
        atomicAdd(bad, mine);
}

static unsigned grid_for(size_t len)
{
    size_t g = (len + 255) / 256;
    return g > 1024 ? 1024u : (g ? (unsigned)g : 1u);
}

extern "C" int te_k_spin_flag(const void *flag, uint64_t timeout_ns,
                              te_k_spin_result *result, uint32_t *ack,
                              void *stream)
{
    te_k_spin_flag_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(
        (const volatile uint32_t *)flag, timeout_ns, result, ack);
    return (int)cudaGetLastError();
}

extern "C" int te_k_bump_watcher(void *word, void *stream)
{
    te_k_bump_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(
        (unsigned long long *)word);
    return (int)cudaGetLastError();
}

extern "C" int te_k_fill(void *dev, size_t len, uint64_t seed, void *stream)
{
    te_k_fill_kernel<<<grid_for(len), 256, 0, (cudaStream_t)stream>>>(
        (uint8_t *)dev, len, seed);
    return (int)cudaGetLastError();
}

extern "C" int te_k_verify(const void *dev, size_t len, uint64_t seed,
                           uint64_t pattern_offset,
                           unsigned long long *mismatches, void *stream)
{
    te_k_verify_kernel<<<grid_for(len), 256, 0, (cudaStream_t)stream>>>(
        (const uint8_t *)dev, len, seed, pattern_offset, mismatches);
    return (int)cudaGetLastError();
}

extern "C" const char *te_k_error(int err)
{
    return cudaGetErrorString((cudaError_t)err);
}
