/*
 * Device copies for transports that move bytes with the CPU (loopback):
 * the te_plugin_host.device_copy service. One CUDA stream per caller-held
 * slot (the loopback keeps one per NIC, so NICs copy concurrently); the call
 * returns once the copy has completed, which is when a write may complete.
 */
#include <errno.h>
#include <stdio.h>

#include "cuda_copy.h"
#include "cuda_driver.h"
#include "engine_internal.h"
#include "te_error.h"

#ifdef TE_HAVE_CUDA
/* The ordinal of the first of dst/src that is device or managed memory. */
static int copy_device(const struct te_cuda_driver *d, void *dst,
                       const void *src)
{
    const void *p[2] = {dst, src};
    for (int i = 0; i < 2; i++) {
        int ordinal = -1;
        CUpointer_attribute a = CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL;
        void *v = &ordinal;
        if (d->PointerGetAttributes(1, &a, &v, (CUdeviceptr)(uintptr_t)p[i]) ==
                CUDA_SUCCESS &&
            ordinal >= 0)
            return ordinal;
    }
    return 0;
}

int te_cuda_host_copy(void *host_ctx, void **stream, void *dst,
                      const void *src, size_t len)
{
    struct te_engine *e = host_ctx;
    const struct te_cuda_driver *d = te_cuda_driver();
    if (!d)
        return te_cuda_ready();
    int rc = 0;
    CUresult r;
    if (!*stream) {
        if ((rc = te_cuda_use_device(copy_device(d, dst, src))))
            goto out;
        CUstream s = NULL;
        if ((r = d->StreamCreate(&s, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
            rc = te_cuda_fail(r, "device copy: cuStreamCreate");
            goto out;
        }
        *stream = s;
    } else {
        /* The worker thread may have no current context yet. */
        CUcontext cur = NULL;
        if (d->CtxGetCurrent(&cur) != CUDA_SUCCESS || !cur)
            if ((rc = te_cuda_use_device(copy_device(d, dst, src))))
                goto out;
    }
    r = d->MemcpyAsync((CUdeviceptr)(uintptr_t)dst,
                       (CUdeviceptr)(uintptr_t)src, len, (CUstream)*stream);
    if (r == CUDA_SUCCESS)
        r = d->StreamSynchronize((CUstream)*stream);
    if (r != CUDA_SUCCESS)
        rc = te_cuda_fail(r, "device copy: cuMemcpyAsync");
out:
    if (rc && e && e->host.log)
        e->host.log(e, 0, "device copy of %zu bytes %p -> %p failed: %s", len,
                    src, dst, te_last_error());
    return rc;
}

void te_cuda_host_stream_free(void *host_ctx, void *stream)
{
    const struct te_cuda_driver *d = stream ? te_cuda_driver() : NULL;
    if (d)
        d->StreamDestroy((CUstream)stream);
}

void te_cuda_host_install(struct te_plugin_host *h)
{
    h->device_copy = te_cuda_host_copy;
    h->device_stream_free = te_cuda_host_stream_free;
}
#else
void te_cuda_host_install(struct te_plugin_host *h)
{
    h->device_copy = NULL;
    h->device_stream_free = NULL;
}
#endif
