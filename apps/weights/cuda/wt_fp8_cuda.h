/*
 * The fp8 block quantisation of libte-weights on the GPU (not installed;
 * static library te_weights_cuda, built where nvcc is). It must produce
 * exactly the bytes of te_wt_fp8_quantise_bf16() (the C reference the
 * receivers' checks and the torch reference agree with):
 * tests/test_wt_fp8_cuda.c compares the two where a GPU is present.
 */
#ifndef TE_WT_FP8_CUDA_H
#define TE_WT_FP8_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Quantise a rows x cols row-major bf16 matrix in device memory into E4M3
 * codes (out, rows*cols bytes) and float32 scales (one per 128x128 block,
 * row-major by block), on `stream` (a cudaStream_t; NULL = the default
 * stream). One thread block per 128x128 block: amax, scale = amax / 448
 * (1 for an all-zero block), code = e4m3(x / scale) rounded to nearest
 * even once. Returns 0 or a negative errno (-EINVAL for a bad launch).
 */
int te_wt_fp8_quantise_bf16_cuda(const uint16_t *in, uint64_t rows, uint64_t cols,
                                 uint8_t *out, float *scales, void *stream);

/**
 * The same from host memory: copies in, quantises, copies out, waits.
 * -ENODEV when no CUDA device is usable (tests skip then).
 */
int te_wt_fp8_quantise_bf16_cuda_host(const uint16_t *in, uint64_t rows, uint64_t cols,
                                      uint8_t *out, float *scales);

#ifdef __cplusplus
}
#endif
#endif
