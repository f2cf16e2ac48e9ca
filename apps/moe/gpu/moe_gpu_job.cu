// See moe_gpu_job.h.
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_gpu_job.h"

static int cuda_fail(struct moe_gpu_job *g, cudaError_t e, const char *what)
{
    snprintf(g->why, sizeof(g->why), "%s: %s", what, cudaGetErrorString(e));
    return -EIO;
}

int moe_gpu_job_open(struct moe_gpu_job *g, const te_moe_config *c,
                     const char *const *settings, int device, int inplace,
                     int index, uint32_t capacity)
{
    memset(g, 0, sizeof(*g));
    g->device = device;
    g->inplace = inplace;
    g->capacity = capacity ? capacity : c->ranks * c->max_tokens;
    int rc = moe_job_open(&g->j, c, settings);
    if (rc) {
        snprintf(g->why, sizeof(g->why), "opening the job: %d", rc);
        return rc;
    }
    g->j.index = index;
    size_t elem = c->dtype == TE_MOE_BF16 ? 2 : 4;
    size_t L = c->experts / c->ranks, rows = L * g->capacity;
    size_t xb = (size_t)c->max_tokens * c->hidden * elem;
    for (uint32_t i = 0; i < c->ranks; i++) {
        te_moe_rank *r = g->j.r[i];
        g->j.bufs[i].index = index;
        if (moe_ref_bufs_grow(c, &g->j.bufs[i], g->capacity)) {
            snprintf(g->why, sizeof(g->why), "out of memory");
            return -ENOMEM;
        }
        cudaError_t e = cudaSuccess;
        if (device) {
            e = cudaStreamCreateWithFlags((cudaStream_t *)&g->stream[i],
                                          cudaStreamNonBlocking);
            if (e == cudaSuccess)
                e = cudaMalloc(&g->dx[i], xb);
            if (e == cudaSuccess && !index)
                e = cudaMalloc(&g->drecv[i], rows * c->hidden * elem);
            if (e == cudaSuccess)
                e = cudaMalloc((void **)&g->dy[i], rows * c->hidden * 4);
            if (e == cudaSuccess)
                e = cudaMalloc((void **)&g->dout[i], (size_t)c->max_tokens * c->hidden * 4);
            if (e != cudaSuccess)
                return cuda_fail(g, e, "device buffers");
            if ((rc = te_moe_gpu_mem_ops_new(g->stream[i], &g->ops[i]))) {
                snprintf(g->why, sizeof(g->why), "te_moe_gpu_mem_ops_new: %s",
                         te_moe_gpu_last_error());
                return rc;
            }
            if ((rc = te_moe_rank_mem_ops(r, &g->ops[i]))) {
                snprintf(g->why, sizeof(g->why), "%s", te_moe_last_error());
                return rc;
            }
        } else {
            g->dx[i] = malloc(xb);
            if (!g->dx[i])
                return -ENOMEM;
        }
        if (inplace && (rc = te_moe_rank_input(r, g->dx[i], xb))) {
            snprintf(g->why, sizeof(g->why), "%s", te_moe_last_error());
            return rc;
        }
    }
    return 0;
}

/* A copy on the rank's stream, complete on return: a plain cudaMemcpy runs
 * on the legacy default stream, which the ranks' non-blocking streams do
 * not wait for (and from pageable memory it may return before the DMA has
 * landed). */
static int copy_now(void *dst, const void *src, size_t len, cudaMemcpyKind kind,
                    cudaStream_t s)
{
    if (!len)
        return 0;
    cudaError_t e = cudaMemcpyAsync(dst, src, len, kind, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? 0 : -EIO;
}

struct arg {
    struct moe_gpu_job *g;
    uint32_t i;
    uint64_t b;
    int rc;
    char why[256];
};

static int rank_batch(struct arg *a)
{
    struct moe_gpu_job *g = a->g;
    struct moe_job *j = &g->j;
    const te_moe_config *c = &j->c;
    uint32_t i = a->i, tokens = j->tokens[i], L = c->experts / c->ranks;
    te_moe_rank *r = j->r[i];
    struct moe_ref_bufs *bufs = &j->bufs[i];
    size_t elem = c->dtype == TE_MOE_BF16 ? 2 : 4, tok = c->hidden * elem;
    cudaStream_t s = (cudaStream_t)g->stream[i];
    if (!g->device)
        memcpy(g->dx[i], j->x[i], tokens * tok);
    else if (copy_now(g->dx[i], j->x[i], tokens * tok, cudaMemcpyHostToDevice, s))
        return -EIO;
    te_moe_recv recv = bufs->recv;
    if (g->device && !j->index)
        recv.x = g->drecv[i];
    int rc = te_moe_dispatch(r, a->b, tokens, g->dx[i], j->experts[i],
                             j->weights[i], &recv);
    if (rc)
        return rc;
    /* The caller's experts, on the host here (outside the timing). */
    if (g->device && !j->index) {
        for (uint32_t l = 0; l < L; l++)
            if (copy_now((uint8_t *)bufs->recv.x + (size_t)l * g->capacity * tok,
                         (uint8_t *)g->drecv[i] + (size_t)l * g->capacity * tok,
                         recv.count[l] * tok, cudaMemcpyDeviceToHost, s))
                return -EIO;
    }
    moe_ref_run_experts(r, bufs);
    const void *y = bufs->y;
    size_t ysz = g->bf16_out ? 2 : 4;
    uint16_t *yb = NULL; /* bf16_out: the outputs rounded, host side */
    if (g->bf16_out) {
        size_t n = (size_t)L * g->capacity * c->hidden;
        if (!(yb = (uint16_t *)calloc(n, 2)))
            return -ENOMEM;
        for (size_t e = 0; e < n; e++)
            yb[e] = moe_ref_f32_to_bf16(bufs->y[e]);
        y = yb;
    }
    if (g->device) {
        /* Only the rows the experts wrote (combine reads no others). */
        for (uint32_t l = 0; l < L; l++) {
            size_t at = (size_t)l * g->capacity * c->hidden * ysz;
            if (copy_now((uint8_t *)g->dy[i] + at, (const uint8_t *)y + at,
                         (size_t)recv.count[l] * c->hidden * ysz,
                         cudaMemcpyHostToDevice, s)) {
                free(yb);
                return -EIO;
            }
        }
        y = g->dy[i];
    }
    te_moe_expert_out out = {y, g->bf16_out ? (uint32_t)TE_MOE_BF16
                                            : (uint32_t)TE_MOE_FP32,
                             L, g->capacity, c->hidden};
    float *o = g->device ? g->dout[i] : j->out[i];
    rc = te_moe_combine(r, a->b, &out, o);
    free(yb); /* read by the time combine_start returned */
    if (rc)
        return rc;
    te_moe_rank_stats(r, &g->st[i]); /* the batch's, dispatch included */
    return g->device ? copy_now(j->out[i], g->dout[i],
                                (size_t)tokens * c->hidden * 4,
                                cudaMemcpyDeviceToHost, s)
                     : 0;
}

static void *run_rank(void *p)
{
    struct arg *a = (struct arg *)p;
    a->rc = rank_batch(a);
    snprintf(a->why, sizeof(a->why), "rank %u: %s", a->i,
             a->rc ? te_moe_last_error() : "");
    return NULL;
}

int moe_gpu_job_batch(struct moe_gpu_job *g, uint64_t b)
{
    pthread_t th[TE_MOE_MAX_RANKS];
    struct arg args[TE_MOE_MAX_RANKS];
    uint32_t R = g->j.c.ranks;
    for (uint32_t i = 0; i < R; i++) {
        args[i] = (struct arg){g, i, b, 0, ""};
        pthread_create(&th[i], NULL, run_rank, &args[i]);
    }
    int rc = 0;
    for (uint32_t i = 0; i < R; i++) {
        pthread_join(th[i], NULL);
        if (args[i].rc && !rc) {
            rc = args[i].rc;
            snprintf(g->why, sizeof(g->why), "%s", args[i].why);
        }
    }
    return rc;
}

void moe_gpu_job_close(struct moe_gpu_job *g)
{
    for (uint32_t i = 0; i < g->j.c.ranks; i++) {
        if (g->j.r[i])
            te_moe_rank_disconnect(g->j.r[i]);
    }
    for (uint32_t i = 0; i < g->j.c.ranks; i++) {
        te_moe_rank_free(g->j.r[i]); /* detaches the backend */
        g->j.r[i] = NULL;
        if (g->device) {
            te_moe_gpu_mem_ops_free(&g->ops[i]);
            cudaFree(g->dx[i]);
            cudaFree(g->drecv[i]);
            cudaFree(g->dy[i]);
            cudaFree(g->dout[i]);
            if (g->stream[i])
                cudaStreamDestroy((cudaStream_t)g->stream[i]);
        } else {
            free(g->dx[i]);
        }
    }
    moe_job_close(&g->j);
}
