// te-moe's memory backend for CUDA device memory (te/moe_gpu.h
// te_moe_gpu_mem_ops_new): the row copies and weighted sums of te/moe.h's
// te_moe_mem_ops as kernels on the caller's stream.
//
// The lists arrive in the library's host arrays: each call copies its list
// into a pinned staging arena and from there (one DMA) into a device
// mirror that the kernel reads; both only grow at a sync, when nothing
// handed over is still in flight. The rank's own buffers are host memory
// registered here (cudaHostRegister, mapped), so a kernel reads and writes
// them at their host addresses: the device must use host pointers of
// registered memory (cudaDevAttrCanUseHostPointerForRegisteredMem).
// Built with -fmad=false: the sums round like the CPU's (bit-exact fp32).
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_gpu_internal.h"

struct gpu_mem {
    cudaStream_t stream;
    int device;     // the stream's: the calls may come from any thread
    uint8_t *host;  // pinned staging of the lists
    uint8_t *dev;   // its device mirror
    size_t cap, used;
    void *area;     // the attached rank's buffers
    size_t area_len;
    int registered; // we registered area (and unregister it)
    char why[256];
};

static int fail(struct gpu_mem *g, cudaError_t e, const char *what)
{
    snprintf(g->why, sizeof(g->why), "%s: %s", what, cudaGetErrorString(e));
    cudaGetLastError(); // clear a non-sticky error for the next call
    return -EIO;
}

__global__ void copy_rows_kernel(void *const *dst, const void *const *src, uint32_t n,
                                 uint64_t bytes)
{
    for (uint32_t i = blockIdx.x; i < n; i += gridDim.x) {
        uint8_t *d = (uint8_t *)dst[i];
        const uint8_t *s = (const uint8_t *)src[i];
        if ((((uintptr_t)d | (uintptr_t)s | bytes) & 15) == 0) {
            for (uint64_t k = threadIdx.x; k < bytes / 16; k += blockDim.x)
                ((uint4 *)d)[k] = ((const uint4 *)s)[k];
        } else {
            for (uint64_t k = threadIdx.x; k < bytes; k += blockDim.x)
                d[k] = s[k];
        }
    }
}

/* A source element as fp32: bf16 widened exactly (its bits are the
 * fp32's top half), as the CPU backend does. */
__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(uint16_t v)
{
    return __uint_as_float((uint32_t)v << 16);
}

// Row i: 0 + w*src, term by term in list order, rounded like the CPU.
template <typename T>
__global__ void wsum_rows_kernel(float *const *dst, const uint32_t *first,
                                 const void *const *src, const float *w, uint32_t n,
                                 uint32_t hidden, uint32_t base)
{
    for (uint32_t i = blockIdx.x; i < n; i += gridDim.x) {
        uint32_t f0 = first[i] - base, f1 = first[i + 1] - base;
        float *d = dst[i];
        for (uint32_t h = threadIdx.x; h < hidden; h += blockDim.x) {
            float acc = 0.0f;
            for (uint32_t f = f0; f < f1; f++)
                acc = __fadd_rn(acc, __fmul_rn(w[f], widen(((const T *)src[f])[h])));
            d[h] = acc;
        }
    }
}

// Run on the backend's device, and give the calling thread its own back
// (a library call must not change the caller's current device).
struct on_device {
    int prev, ok;
    explicit on_device(const struct gpu_mem *g) : prev(-1), ok(1)
    {
        if (cudaGetDevice(&prev) == cudaSuccess && prev != g->device)
            ok = cudaSetDevice(g->device) == cudaSuccess;
        else
            prev = -1;
    }
    ~on_device()
    {
        if (prev >= 0)
            cudaSetDevice(prev);
    }
};

int moe_gpu_mem_preload(void)
{
    const void *kernels[] = {(const void *)copy_rows_kernel,
                             (const void *)wsum_rows_kernel<float>,
                             (const void *)wsum_rows_kernel<uint16_t>};
    cudaFuncAttributes a;
    int rc = 0;
    for (size_t k = 0; !rc && k < sizeof(kernels) / sizeof(kernels[0]); k++)
        rc = moe_gpu_check(cudaFuncGetAttributes(&a, kernels[k]), "loading the kernels");
    return rc;
}

static int mem_sync(void *ctx)
{
    struct gpu_mem *g = (struct gpu_mem *)ctx;
    on_device here(g);
    if (!here.ok)
        return fail(g, cudaErrorInvalidDevice, "cudaSetDevice (the stream's device)");
    cudaError_t e = cudaStreamSynchronize(g->stream);
    g->used = 0;
    return e == cudaSuccess ? 0 : fail(g, e, "cudaStreamSynchronize");
}

static size_t up16(size_t n) { return (n + 15) & ~(size_t)15; }

// Room for `bytes` more in the arena: after a sync when it must grow.
static int room(struct gpu_mem *g, size_t bytes)
{
    if (g->used + bytes <= g->cap)
        return 0;
    int rc = mem_sync(g);
    if (rc || bytes <= g->cap)
        return rc;
    size_t cap = g->cap ? g->cap : 1 << 16;
    while (cap < bytes)
        cap *= 2;
    cudaFreeHost(g->host);
    cudaFree(g->dev);
    g->host = g->dev = NULL;
    g->cap = 0;
    cudaError_t e = cudaHostAlloc((void **)&g->host, cap, cudaHostAllocPortable);
    if (e != cudaSuccess)
        return fail(g, e, "cudaHostAlloc (list staging)");
    if ((e = cudaMalloc((void **)&g->dev, cap)) != cudaSuccess) {
        cudaFreeHost(g->host);
        g->host = NULL;
        return fail(g, e, "cudaMalloc (lists)");
    }
    g->cap = cap;
    return 0;
}

// Copy `len` bytes of a list into the arena; its device address.
static uint8_t *put(struct gpu_mem *g, const void *src, size_t len)
{
    uint8_t *at = g->dev + g->used;
    if (len)
        memcpy(g->host + g->used, src, len);
    g->used += up16(len);
    return at;
}

static int ship(struct gpu_mem *g, size_t from)
{
    cudaError_t e = cudaMemcpyAsync(g->dev + from, g->host + from, g->used - from,
                                    cudaMemcpyHostToDevice, g->stream);
    return e == cudaSuccess ? 0 : fail(g, e, "cudaMemcpyAsync (list)");
}

static unsigned grid_of(uint32_t n) { return n < 4096 ? n : 4096; }

// The kernels loaded and `bytes` of room in the arena for a list.
static int prepare(struct gpu_mem *g, size_t bytes)
{
    int rc = te_moe_gpu_preload();
    if (rc)
        snprintf(g->why, sizeof(g->why), "%s", te_moe_gpu_last_error());
    return rc ? rc : room(g, bytes);
}

static int mem_copy(void *ctx, const te_moe_copy_list *l)
{
    struct gpu_mem *g = (struct gpu_mem *)ctx;
    on_device here(g);
    if (!here.ok)
        return fail(g, cudaErrorInvalidDevice, "cudaSetDevice (the stream's device)");
    g->why[0] = 0;
    if (!l->n)
        return 0;
    size_t ptrs = (size_t)l->n * sizeof(void *);
    int rc = prepare(g, 2 * up16(ptrs));
    if (rc)
        return rc;
    size_t from = g->used;
    void *const *dst = (void *const *)put(g, l->dst, ptrs);
    const void *const *src = (const void *const *)put(g, l->src, ptrs);
    if ((rc = ship(g, from)))
        return rc;
    copy_rows_kernel<<<grid_of(l->n), 256, 0, g->stream>>>(dst, src, l->n, l->bytes);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : fail(g, e, "copy kernel launch");
}

static int mem_wsum(void *ctx, const te_moe_wsum_list *l)
{
    struct gpu_mem *g = (struct gpu_mem *)ctx;
    on_device here(g);
    if (!here.ok)
        return fail(g, cudaErrorInvalidDevice, "cudaSetDevice (the stream's device)");
    g->why[0] = 0;
    if (l->src_dtype != TE_MOE_FP32 && l->src_dtype != TE_MOE_BF16) {
        snprintf(g->why, sizeof(g->why), "weighted sums of dtype %u (fp32 %u or "
                 "bf16 %u)", l->src_dtype, TE_MOE_FP32, TE_MOE_BF16);
        return -EINVAL;
    }
    if (!l->n)
        return 0;
    uint32_t base = l->first[0], terms = l->first[l->n] - base;
    size_t dsz = (size_t)l->n * sizeof(float *), fsz = ((size_t)l->n + 1) * 4,
           ssz = (size_t)terms * sizeof(float *), wsz = (size_t)terms * 4;
    int rc = prepare(g, up16(dsz) + up16(fsz) + up16(ssz) + up16(wsz));
    if (rc)
        return rc;
    size_t from = g->used;
    float *const *dst = (float *const *)put(g, l->dst, dsz);
    const uint32_t *first = (const uint32_t *)put(g, l->first, fsz);
    const void *const *src = (const void *const *)put(g, l->src + base, ssz);
    const float *w = (const float *)put(g, l->w + base, wsz);
    if ((rc = ship(g, from)))
        return rc;
    if (l->src_dtype == TE_MOE_BF16)
        wsum_rows_kernel<uint16_t><<<grid_of(l->n), 256, 0, g->stream>>>(
            dst, first, src, w, l->n, l->hidden, base);
    else
        wsum_rows_kernel<float><<<grid_of(l->n), 256, 0, g->stream>>>(
            dst, first, src, w, l->n, l->hidden, base);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : fail(g, e, "wsum kernel launch");
}

static int mem_attach(void *ctx, void *area, size_t len)
{
    struct gpu_mem *g = (struct gpu_mem *)ctx;
    on_device here(g);
    g->why[0] = 0;
    if (g->area) {
        snprintf(g->why, sizeof(g->why), "this backend serves one rank (attached "
                 "already)");
        return -EBUSY;
    }
    int dev = g->device, direct = 0;
    cudaError_t e = here.ok ? cudaDeviceGetAttribute(
                                  &direct, cudaDevAttrCanUseHostPointerForRegisteredMem, dev)
                            : cudaErrorInvalidDevice;
    if (e != cudaSuccess)
        return fail(g, e, "cudaDeviceGetAttribute");
    if (!direct) {
        snprintf(g->why, sizeof(g->why), "device %d cannot use host pointers of "
                 "registered memory (cudaDevAttrCanUseHostPointerForRegisteredMem "
                 "is 0)", dev);
        return -ENOTSUP;
    }
    e = cudaHostRegister(area, len, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
        cudaGetLastError();
        g->registered = 0; // someone else's registration: theirs to undo
    } else if (e != cudaSuccess) {
        return fail(g, e, "cudaHostRegister (the rank's buffers)");
    } else {
        g->registered = 1;
    }
    g->area = area;
    g->area_len = len;
    return 0;
}

static void mem_detach(void *ctx, void *area, size_t len)
{
    struct gpu_mem *g = (struct gpu_mem *)ctx;
    on_device here(g);
    (void)len;
    if (area != g->area)
        return;
    cudaStreamSynchronize(g->stream); // no kernel still reading it
    if (g->registered)
        cudaHostUnregister(area);
    g->area = NULL;
    g->registered = 0;
}

static const char *mem_why(void *ctx) { return ((struct gpu_mem *)ctx)->why; }

extern "C" int te_moe_gpu_mem_ops_new(void *stream, te_moe_mem_ops *ops)
{
    if (!ops)
        return moe_gpu_fail(-EINVAL, "te_moe_gpu_mem_ops_new: ops is NULL");
    memset(ops, 0, sizeof(*ops));
    if (te_moe_gpu_device_count() <= 0)
        return -ENODEV; // te_moe_gpu_last_error() says why
    struct gpu_mem *g = (struct gpu_mem *)calloc(1, sizeof(*g));
    if (!g)
        return moe_gpu_fail(-ENOMEM, "te_moe_gpu_mem_ops_new: out of memory");
    g->stream = (cudaStream_t)stream;
    // The stream's device is the current one when the stream is NULL (the
    // default stream of the current device) and otherwise its own.
    cudaError_t e = cudaGetDevice(&g->device);
    if (e == cudaSuccess && stream) {
        int dev = -1;
        e = cudaStreamGetDevice((cudaStream_t)stream, &dev);
        if (e == cudaSuccess)
            g->device = dev;
    }
    if (e != cudaSuccess) {
        free(g);
        return moe_gpu_check(e, "te_moe_gpu_mem_ops_new: the stream's device");
    }
    ops->version = TE_MOE_MEM_OPS_VERSION;
    ops->mem = TE_MEM_CUDA;
    ops->ctx = g;
    ops->attach = mem_attach;
    ops->detach = mem_detach;
    ops->copy = mem_copy;
    ops->wsum = mem_wsum;
    ops->sync = mem_sync;
    ops->why = mem_why;
    return 0;
}

extern "C" void te_moe_gpu_mem_ops_free(te_moe_mem_ops *ops)
{
    if (!ops || !ops->ctx)
        return;
    struct gpu_mem *g = (struct gpu_mem *)ops->ctx;
    if (g->area)
        mem_detach(g, g->area, g->area_len);
    on_device here(g);
    cudaStreamSynchronize(g->stream);
    cudaFreeHost(g->host);
    cudaFree(g->dev);
    free(g);
    ops->ctx = NULL;
}
