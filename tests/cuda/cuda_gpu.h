/* Shared helpers of the cuda_gpu test program (needs a CUDA device). */
#ifndef CUDA_GPU_TEST_H
#define CUDA_GPU_TEST_H

#include <check.h>
#include <cuda_runtime_api.h>

#include "te/te.h"
#include "te_cuda_kernels.h"

#define CUDA_OK(call)                                                        \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call,                    \
                      cudaGetErrorString(e_));                               \
    } while (0)

/* The cases of cuda_gpu_flag.c (flag, watcher). */
TCase *cuda_gpu_flag_cases(void);
TCase *cuda_gpu_watcher_cases(void);

/* An in-process loopback engine (2 NICs per group when nics == 2). */
te_engine *gpu_engine(int nics);

#endif
