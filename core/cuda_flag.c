/*
 * GPU-visible completion flags: an ImmCounter expectation whose completion
 * stores a value where a spinning kernel sees it.
 *
 * The flag is host-pinned memory mapped into the device (cuMemHostAlloc
 * with DEVICEMAP), written by the CPU thread that completes the counter.
 * The other choice, device memory written by cuStreamWriteValue32, puts a
 * driver call, a stream and the device's stream-memop support on every
 * completion; a CPU store to mapped memory is one release store that the
 * GPU reads over PCIe/C2C on its next poll. docs/cuda.md has the argument
 * and the measurement that is still owed.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cuda_driver.h"
#include "engine_internal.h"
#include "te_error.h"

struct te_gpu_flag {
    _Atomic uint32_t *host;   /* the word, as the CPU sees it */
    void *device;             /* the same word, as kernels see it */
    _Atomic uint32_t value;   /* what the armed expectation stores */
    atomic_int armed;
    int device_ordinal;       /* CUDA ordinal it was made for */
};

TE_API int te_gpu_flag_create(int device, te_gpu_flag **out)
{
    te_error_clear();
    if (!out)
        return te_fail(-EINVAL, "te_gpu_flag_create: out is NULL");
    *out = NULL;
#ifdef TE_HAVE_CUDA
    CUcontext saved;
    int rc = te_cuda_enter_device(device, &saved);
    if (rc) {
        te_cuda_restore(saved);
        return rc;
    }
    te_gpu_flag *f = calloc(1, sizeof(*f));
    if (!f) {
        te_cuda_restore(saved);
        return te_fail(-ENOMEM, "te_gpu_flag_create: out of memory");
    }
    void *host = NULL, *dev = NULL;
    if ((rc = te_cuda_mapped_word("te_gpu_flag_create", &host, &dev))) {
        free(f);
        te_cuda_restore(saved);
        return rc;
    }
    f->host = host;
    atomic_store(f->host, 0);
    f->device = dev;
    f->device_ordinal = device;
    *out = f;
    te_cuda_restore(saved);
    return 0;
#else
    (void)device;
    return te_cuda_ready();
#endif
}

TE_API int te_gpu_flag_destroy(te_gpu_flag *f)
{
    te_error_clear();
    if (!f)
        return 0;
    if (atomic_load(&f->armed))
        return te_fail(-EBUSY, "te_gpu_flag_destroy: an expectation is "
                       "armed on this flag (te_gpu_flag_disarm after "
                       "te_imm_remove)");
#ifdef TE_HAVE_CUDA
    /* Freed in its device's context, whatever the caller's is. */
    const struct te_cuda_driver *d = te_cuda_driver();
    CUcontext saved;
    if (d && !te_cuda_enter_device(f->device_ordinal, &saved))
        d->MemFreeHost((void *)f->host);
    if (d)
        te_cuda_restore(saved);
#endif
    free(f);
    return 0;
}

TE_API void *te_gpu_flag_device_ptr(const te_gpu_flag *f)
{
    return f ? f->device : NULL;
}

TE_API uint32_t te_gpu_flag_read(const te_gpu_flag *f)
{
    return f ? atomic_load_explicit(f->host, memory_order_acquire) : 0;
}

TE_API void te_gpu_flag_store(te_gpu_flag *f, uint32_t v)
{
    if (f)
        atomic_store_explicit(f->host, v, memory_order_release);
}

TE_API void te_gpu_flag_disarm(te_gpu_flag *f)
{
    if (f)
        atomic_store(&f->armed, 0);
}

/* Runs exactly once per expectation: on the worker that counted the last
 * arrival (te_imm_cb_runs_inline), or on the callback thread for a
 * deadline or a cancellation. Two stores: no lock, no call that can block,
 * so it may run on a worker. */
static void gpu_flag_complete(uint32_t imm, int status, void *arg)
{
    te_gpu_flag *f = arg;
    uint32_t v = status ? TE_GPU_FLAG_FAILED
                        : atomic_load_explicit(&f->value, memory_order_relaxed);
    /* Release: the payload the imm announces was written before the imm
     * was reported, so a kernel that sees v sees the payload too. The
     * flag is written before the arming is cleared: from then on the owner
     * may free or re-arm it (te_gpu_flag_destroy answers -EBUSY until). */
    atomic_store_explicit(f->host, v, memory_order_release);
    atomic_store_explicit(&f->armed, 0, memory_order_release);
}

bool te_imm_cb_runs_inline(te_imm_fn cb)
{
    /* A GPU flag is on the latency path of a spinning kernel: handing it
     * to the callback thread cost one more thread wake-up per flag. */
    return cb == gpu_flag_complete;
}

TE_API int te_imm_expect_gpu_flag(te_engine *e, uint32_t imm, uint64_t count,
                                  int timeout_ms, te_gpu_flag *f,
                                  uint32_t value)
{
    te_error_clear();
    if (!e || !f)
        return te_fail(-EINVAL, "te_imm_expect_gpu_flag: NULL engine or flag");
    if (value == 0 || value == TE_GPU_FLAG_FAILED)
        return te_fail(-EINVAL, "te_imm_expect_gpu_flag: value 0x%x is "
                       "reserved (0 = not yet, 0x%x = failed)", value,
                       TE_GPU_FLAG_FAILED);
    int expected = 0;
    if (!atomic_compare_exchange_strong(&f->armed, &expected, 1))
        return te_fail(-EBUSY, "te_imm_expect_gpu_flag: the flag is already "
                       "armed");
    atomic_store_explicit(&f->value, value, memory_order_relaxed);
    int rc = te_imm_expect_timeout(e, imm, count, timeout_ms,
                                   gpu_flag_complete, f);
    if (rc)
        atomic_store(&f->armed, 0);
    return rc;
}
