/*
 * A small CUDA kernel library for GPU-side use of TransferEngine: spin on a
 * completion flag (te_gpu_flag), bump a watcher word (te_gpu_watcher), and
 * fill/verify byte patterns in device memory. Used by the tests, te-bench
 * and te-conformance; built with nvcc (TE_WITH_CUDA) into the static library
 * te_cuda_kernels. Every call is asynchronous on `stream` (a cudaStream_t,
 * NULL = the legacy default stream) and returns a cudaError_t as int
 * (0 = launched); te_k_error() describes one.
 */
#ifndef TE_CUDA_KERNELS_H
#define TE_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define TE_K_HOST_DEVICE __host__ __device__
#else
#define TE_K_HOST_DEVICE
#endif

/** Byte i of the pattern of `seed`: the host and device agree on it. */
static inline TE_K_HOST_DEVICE uint8_t te_k_pattern_byte(uint64_t seed, uint64_t i)
{
    uint64_t x = (seed ^ 0x9e3779b97f4a7c15ull) + i * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return (uint8_t)(x ^ (x >> 8));
}

/** Result of te_k_spin_flag, written by the kernel (host-mapped or device). */
struct te_k_spin_result {
    uint32_t value;       /**< flag value seen; 0 = deadline passed */
    uint32_t timed_out;   /**< 1 if the kernel gave up */
    uint64_t spins;       /**< polls made */
};

/**
 * One thread spins on the uint32_t at flag (device pointer, e.g.
 * te_gpu_flag_device_ptr) until it is not 0, for at most timeout_ns of GPU
 * time (%globaltimer), then stores the outcome in *result and, if ack is
 * not NULL, stores the seen value into *ack (system scope), so a CPU can
 * time the round trip.
 */
int te_k_spin_flag(const void *flag, uint64_t timeout_ns,
                   struct te_k_spin_result *result, uint32_t *ack,
                   void *stream);

/** One thread adds 1 to the watcher word (system-scope atomic). */
int te_k_bump_watcher(void *word, void *stream);

/** Fill len bytes at dev with the pattern of seed. */
int te_k_fill(void *dev, size_t len, uint64_t seed, void *stream);

/**
 * Count bytes at dev that differ from the pattern of seed (byte i compared
 * with te_k_pattern_byte(seed, i + pattern_offset)) into
 * *mismatches (device-visible; the caller zeroes it first).
 */
int te_k_verify(const void *dev, size_t len, uint64_t seed,
                uint64_t pattern_offset, unsigned long long *mismatches,
                void *stream);

/** Human-readable text of a return value of the calls above. */
const char *te_k_error(int err);

#ifdef __cplusplus
}
#endif
#endif
