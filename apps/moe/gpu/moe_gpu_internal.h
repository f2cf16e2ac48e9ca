/* Internals of libte-moe-gpu shared by its .cu files. */
#ifndef TE_MOE_GPU_INTERNAL_H
#define TE_MOE_GPU_INTERNAL_H

#include <cuda_runtime.h>

#include "te/moe_gpu.h"

/* 0, or -EIO with "what: the CUDA error" in te_moe_gpu_last_error(). */
int moe_gpu_check(cudaError_t e, const char *what);
/* rc, with msg in te_moe_gpu_last_error(). */
int moe_gpu_fail(int rc, const char *msg);
/* Load the memory backend's kernels (te_moe_gpu_preload loads them all). */
int moe_gpu_mem_preload(void);

#endif
