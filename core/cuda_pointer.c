/*
 * Pointer classification: "is this a device pointer, of which device, can
 * it be exported as a dma-buf?" asked of the CUDA driver in one place
 * (cuPointerGetAttributes, which unlike cuPointerGetAttribute answers
 * CUDA_SUCCESS with empty attributes for memory CUDA does not know).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cuda_driver.h"
#include "cuda_pointer.h"
#include "engine_internal.h"
#include "te_error.h"

#ifdef TE_HAVE_CUDA
/* may_retain: for TE_MEM_CUDA and explicit queries, a thread without a
 * current context gets device 0's primary context and asks again (what the
 * CUDA runtime does on first use); a TE_MEM_HOST check never creates one. */
static int classify(const void *ptr, size_t len, te_cuda_ptr_info *out,
                    int may_retain)
{
    const struct te_cuda_driver *d = te_cuda_driver();
    if (!d)
        return te_cuda_ready();
    unsigned mem_type = 0;
    int ordinal = -1;
    CUdeviceptr start = 0;
    size_t range = 0;
    unsigned managed = 0;
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        CU_POINTER_ATTRIBUTE_IS_MANAGED,
    };
    void *vals[] = {&mem_type, &ordinal, &start, &range, &managed};
    CUresult r = d->PointerGetAttributes(5, attrs, vals,
                                         (CUdeviceptr)(uintptr_t)ptr);
    if (may_retain &&
        (r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_INVALID_VALUE)) {
        /* No context on this thread: memory of any device is still known
         * to the driver once a context exists; make device 0's current. */
        CUcontext saved;
        int rc = te_cuda_enter_device(0, &saved);
        if (!rc)
            r = d->PointerGetAttributes(5, attrs, vals,
                                        (CUdeviceptr)(uintptr_t)ptr);
        te_cuda_restore(saved);
        if (rc)
            return rc;
    }
    if (r != CUDA_SUCCESS)
        return te_cuda_fail(r, "cuPointerGetAttributes");
    CUcontext cur = NULL;
    if (may_retain && mem_type == 0 && !managed &&
        d->CtxGetCurrent(&cur) == CUDA_SUCCESS && !cur) {
        CUcontext saved;
        int rc = te_cuda_enter_device(0, &saved);
        if (!rc)
            r = d->PointerGetAttributes(5, attrs, vals,
                                        (CUdeviceptr)(uintptr_t)ptr);
        te_cuda_restore(saved);
        if (rc)
            return rc;
        if (r != CUDA_SUCCESS)
            return te_cuda_fail(r, "cuPointerGetAttributes");
    }
    memset(out, 0, sizeof(*out));
    out->device = -1;
    if (managed) {
        out->kind = TE_CUDA_PTR_MANAGED;
    } else if (mem_type == CU_MEMORYTYPE_DEVICE) {
        out->kind = TE_CUDA_PTR_DEVICE;
    } else if (mem_type == CU_MEMORYTYPE_HOST) {
        out->kind = TE_CUDA_PTR_HOST_PINNED;
    } else {
        out->kind = TE_CUDA_PTR_HOST;
        return 0;
    }
    if (out->kind != TE_CUDA_PTR_HOST_PINNED)
        out->device = ordinal;
    out->alloc_base = (uint64_t)start;
    out->alloc_len = (uint64_t)range;
    if (out->kind == TE_CUDA_PTR_DEVICE && ordinal >= 0) {
        CUdevice dev;
        int dmabuf = 0;
        if (d->DeviceGet(&dev, ordinal) == CUDA_SUCCESS &&
            d->DeviceGetAttribute(&dmabuf,
                                  CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
                                  dev) == CUDA_SUCCESS)
            out->dmabuf = dmabuf ? 1u : 0u;
    }
    if (len && out->kind != TE_CUDA_PTR_HOST && range) {
        uint64_t p = (uint64_t)(uintptr_t)ptr;
        if (p < start || p - start > range || len > range - (p - start))
            return te_fail(-ERANGE, "%zu bytes at %p run past the CUDA "
                           "allocation [0x%llx, +%zu)", len, ptr,
                           (unsigned long long)start, range);
    }
    return 0;
}
#endif

TE_API int te_cuda_status(char *why, size_t len)
{
    te_error_clear();
    int rc = te_cuda_ready();
    if (why && len)
        snprintf(why, len, "%s", rc ? te_cuda_unavailable_reason() : "");
    return rc;
}

TE_API int te_cuda_pointer_info(const void *ptr, size_t len,
                                te_cuda_ptr_info *out)
{
    te_error_clear();
    if (!out)
        return te_fail(-EINVAL, "te_cuda_pointer_info: out is NULL");
    memset(out, 0, sizeof(*out));
    out->device = -1;
    if (!ptr)
        return te_fail(-EINVAL, "te_cuda_pointer_info: NULL pointer");
#ifdef TE_HAVE_CUDA
    return classify(ptr, len, out, 1);
#else
    return te_cuda_ready();
#endif
}

int te_cuda_check_registration(void *addr, size_t len, uint32_t mem_kind,
                               int *device_id)
{
    *device_id = 0;
    if (mem_kind == TE_MEM_HOST && !te_cuda_loaded())
        return 0;
    if (mem_kind == TE_MEM_CUDA) {
        int rc = te_cuda_ready();
        if (rc)
            return te_fail(rc, "te_mr_reg: TE_MEM_CUDA: %s",
                           te_cuda_unavailable_reason());
    }
#ifdef TE_HAVE_CUDA
    te_cuda_ptr_info info;
    if (mem_kind == TE_MEM_HOST && te_cuda_ready()) {
        te_error_clear(); /* a stub/broken driver: nothing to ask */
        return 0;
    }
    int rc = classify(addr, len, &info, mem_kind == TE_MEM_CUDA);
    if (rc && mem_kind == TE_MEM_HOST) {
        te_error_clear(); /* the check is a courtesy: never block host memory */
        return 0;
    }
    if (rc) {
        char why[256];
        snprintf(why, sizeof(why), "%s", te_last_error());
        return te_fail(rc, "te_mr_reg: cannot classify %p: %s", addr, why);
    }
    if (mem_kind == TE_MEM_HOST) {
        if (info.kind == TE_CUDA_PTR_DEVICE)
            return te_fail(-EINVAL, "te_mr_reg: %p is memory of CUDA device "
                           "%d, registered as TE_MEM_HOST (use TE_MEM_CUDA)",
                           addr, info.device);
        return 0;
    }
    if (info.kind != TE_CUDA_PTR_DEVICE)
        return te_fail(-EINVAL, "te_mr_reg: %p is %s, registered as "
                       "TE_MEM_CUDA (device memory from cuMemAlloc/cudaMalloc "
                       "only)", addr,
                       info.kind == TE_CUDA_PTR_HOST ? "host memory unknown "
                       "to CUDA (freed device memory reads the same)"
                       : info.kind == TE_CUDA_PTR_MANAGED ? "managed memory"
                       : "pinned host memory");
    *device_id = info.device;
    return 0;
#else
    (void)addr;
    (void)len;
    return 0;
#endif
}
