/* A MoE job (tool/moe_job.h: R ranks as engines in this process) whose
 * tensors live in CUDA device memory, moved by te_moe_gpu_mem_ops: x,
 * recv.x, the expert outputs and out on the device; the reference experts
 * run on the host between dispatch and combine (copied down and up: the
 * caller's compute, outside the library's timing). Used by the moe_gpu_mem
 * test and te-moe-gpu-bench. */
#ifndef TE_MOE_GPU_JOB_H
#define TE_MOE_GPU_JOB_H

#include "te/moe_gpu.h"
extern "C" { /* the tool's C helpers */
#include "moe_job.h"
}

struct moe_gpu_job {
    struct moe_job j;
    int device;  /* tensors on the device (else the host backend, host) */
    int inplace; /* x registered (te_moe_rank_input) */
    int bf16_out; /* hand combine the expert outputs rounded to bf16 */
    uint32_t capacity; /* rows per local expert of recv.x / y */
    te_moe_mem_ops ops[TE_MOE_MAX_RANKS];
    void *stream[TE_MOE_MAX_RANKS];
    void *dx[TE_MOE_MAX_RANKS], *drecv[TE_MOE_MAX_RANKS];
    float *dy[TE_MOE_MAX_RANKS], *dout[TE_MOE_MAX_RANKS];
    te_moe_stats st[TE_MOE_MAX_RANKS]; /* of the last batch */
    char why[256];
};

/* Open the job (settings as moe_job_open), with device tensors when
 * `device`; capacity: rows per local expert (0: ranks * max_tokens). 0 or
 * -errno with g->why. */
int moe_gpu_job_open(struct moe_gpu_job *g, const te_moe_config *c,
                     const char *const *settings, int device, int inplace,
                     int index, uint32_t capacity);
/* Batch b on every rank at once (inputs from moe_job_inputs on g->j);
 * out copied back to g->j.out. 0 or the first rank's failure (g->why). */
int moe_gpu_job_batch(struct moe_gpu_job *g, uint64_t b);
void moe_gpu_job_close(struct moe_gpu_job *g);

#endif
