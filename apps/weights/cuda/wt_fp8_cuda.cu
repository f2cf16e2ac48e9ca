/*
 * fp8 E4M3 block quantisation on the GPU, bit-identical to the C reference
 * (src/wt_fp8.c): the same float32 operations in the same order. Division
 * and rounding use the IEEE round-to-nearest intrinsics explicitly, so a
 * build with --use_fast_math cannot change the bytes.
 */
#include <cerrno>
#include <cstdint>
#include <cuda_runtime.h>

#include "wt_fp8_cuda.h"

namespace {

constexpr int kBlock = 128;
constexpr int kThreads = 256;
constexpr float kE4M3Max = 448.0f;

__device__ float bf16_to_float(uint16_t v)
{
    return __uint_as_float(static_cast<uint32_t>(v) << 16);
}

/* As te_wt_fp8_e4m3_from_float: scale into the significand's integer
 * range by a power of two (exact), round once to nearest even. */
__device__ uint8_t e4m3_from_float(float x)
{
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (isnan(x))
        return sign | 0x7f;
    if (a >= kE4M3Max)
        return sign | 0x7e;
    if (a < 0x1p-6f)
        return sign | static_cast<uint8_t>(rintf(__fmul_rn(a, 512.0f)));
    int k;
    frexpf(a, &k);
    int e = k - 1;
    float r = rintf(ldexpf(a, 3 - e));
    if (r == 16.0f) {
        r = 8.0f;
        e++;
    }
    return sign | static_cast<uint8_t>((e + 7) << 3) | static_cast<uint8_t>(r - 8.0f);
}

__global__ void quantise_blocks(const uint16_t *in, uint64_t rows, uint64_t cols,
                                uint8_t *out, float *scales)
{
    __shared__ float part[kThreads];
    uint64_t r0 = static_cast<uint64_t>(blockIdx.y) * kBlock;
    uint64_t c0 = static_cast<uint64_t>(blockIdx.x) * kBlock;
    uint64_t r1 = r0 + kBlock < rows ? r0 + kBlock : rows;
    uint64_t c1 = c0 + kBlock < cols ? c0 + kBlock : cols;
    uint64_t w = c1 - c0, n = (r1 - r0) * w;
    float amax = 0.0f; /* max is exact and order-free: same as the C loop */
    for (uint64_t i = threadIdx.x; i < n; i += kThreads)
        amax = fmaxf(amax, fabsf(bf16_to_float(in[(r0 + i / w) * cols + c0 + i % w])));
    part[threadIdx.x] = amax;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            part[threadIdx.x] = fmaxf(part[threadIdx.x], part[threadIdx.x + s]);
        __syncthreads();
    }
    amax = part[0];
    float scale = amax > 0.0f && isfinite(amax) ? __fdiv_rn(amax, kE4M3Max) : 1.0f;
    if (threadIdx.x == 0)
        scales[static_cast<uint64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = scale;
    for (uint64_t i = threadIdx.x; i < n; i += kThreads) {
        uint64_t at = (r0 + i / w) * cols + c0 + i % w;
        out[at] = e4m3_from_float(__fdiv_rn(bf16_to_float(in[at]), scale));
    }
}

uint64_t blocks(uint64_t n) { return (n + kBlock - 1) / kBlock; }

} // namespace

extern "C" int te_wt_fp8_quantise_bf16_cuda(const uint16_t *in, uint64_t rows,
                                            uint64_t cols, uint8_t *out, float *scales,
                                            void *stream)
{
    if (!rows || !cols)
        return 0;
    if (blocks(rows) > 65535 || blocks(cols) > 0x7fffffffull)
        return -EINVAL; /* grid limits: 8 M rows */
    dim3 grid(static_cast<unsigned>(blocks(cols)), static_cast<unsigned>(blocks(rows)));
    quantise_blocks<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        in, rows, cols, out, scales);
    return cudaGetLastError() == cudaSuccess ? 0 : -EINVAL;
}

extern "C" int te_wt_fp8_quantise_bf16_cuda_host(const uint16_t *in, uint64_t rows,
                                                 uint64_t cols, uint8_t *out,
                                                 float *scales)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
        return -ENODEV;
    uint64_t n = rows * cols, ns = blocks(rows) * blocks(cols);
    uint16_t *din = nullptr;
    uint8_t *dout = nullptr;
    float *dsc = nullptr;
    int rc = -ENOMEM;
    if (cudaMalloc(&din, n * 2 + 2) == cudaSuccess && cudaMalloc(&dout, n + 1) == cudaSuccess &&
        cudaMalloc(&dsc, ns * 4 + 4) == cudaSuccess) {
        rc = cudaMemcpy(din, in, n * 2, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : -EIO;
        if (!rc)
            rc = te_wt_fp8_quantise_bf16_cuda(din, rows, cols, dout, dsc, nullptr);
        if (!rc && (cudaMemcpy(out, dout, n, cudaMemcpyDeviceToHost) != cudaSuccess ||
                    cudaMemcpy(scales, dsc, ns * 4, cudaMemcpyDeviceToHost) != cudaSuccess))
            rc = -EIO;
    }
    cudaFree(din);
    cudaFree(dout);
    cudaFree(dsc);
    return rc;
}
