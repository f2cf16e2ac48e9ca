/*
 * The CUDA driver API, loaded at run time.
 *
 * The core never links libcuda: the same build runs on hosts without a
 * driver, and says why CUDA memory is unavailable there. te_cuda_driver()
 * loads libcuda.so.1 once (or the library named by TE_CUDA_DRIVER, which
 * tests use for the toolkit's stub), calls cuInit(0) and resolves the table
 * below with dlsym on the exact versioned symbol names (so the ABI of each
 * entry is the one this file was written against, whatever driver is
 * installed).
 */
#ifndef TE_CORE_CUDA_DRIVER_H
#define TE_CORE_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#ifdef TE_HAVE_CUDA
#include <cuda.h>

/** The driver entry points the core uses; all non-NULL once loaded. */
struct te_cuda_driver {
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*PointerGetAttributes)(unsigned, CUpointer_attribute *,
                                     void **, CUdeviceptr);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemHostAlloc)(void **, size_t, unsigned);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
    CUresult (*Memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*StreamDestroy)(CUstream);
    CUresult (*IpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*IpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
    CUresult (*IpcCloseMemHandle)(CUdeviceptr);
};

/**
 * The loaded driver, or NULL with te_last_error() naming the cause
 * ("CUDA memory needs libcuda.so.1: not found", or cuInit's own error
 * string, e.g. the toolkit stub's CUDA_ERROR_STUB_LIBRARY). The outcome of
 * the first call is kept: later calls answer the same at no cost.
 */
const struct te_cuda_driver *te_cuda_driver(void);

/**
 * Record "<what>: <CUDA error name>: <driver's string>" as the last error
 * and return -EIO (-ENOMEM for CUDA_ERROR_OUT_OF_MEMORY).
 */
int te_cuda_fail(CUresult r, const char *what);

/**
 * Make device `ordinal`'s primary context current on this thread (the one
 * the CUDA runtime uses too, so memory of cudaMalloc and of the core mix).
 */
int te_cuda_use_device(int ordinal);

/**
 * te_cuda_use_device() on an application thread: *saved receives the
 * context that was current (maybe NULL), to give back with
 * te_cuda_restore(), so the library never changes the caller's context.
 */
int te_cuda_enter_device(int ordinal, CUcontext *saved);
void te_cuda_restore(CUcontext saved);

/* 64 bytes of host-pinned memory mapped into the current context's device
 * (what the GPU flag and the watcher word live in): *host for the CPU,
 * *dev for kernels, zeroed. Needs a current context (te_cuda_enter_device);
 * freed with the driver's MemFreeHost(*host). 0 or the failure, named with
 * `who`, recorded by te_cuda_fail(). */
int te_cuda_mapped_word(const char *who, void **host, void **dev);
#endif /* TE_HAVE_CUDA */

/**
 * 0 if CUDA memory can be used in this process, else -ENOTSUP/-ENODEV/-EIO
 * with the reason in te_last_error() (also when built without CUDA).
 */
int te_cuda_ready(void);

/** The reason te_cuda_ready() failed ("" when it did not), kept. */
const char *te_cuda_unavailable_reason(void);

/**
 * Whether libcuda is already loaded in this process (by the application or
 * by us), without loading it: host registrations check "is this really
 * host memory?" only then, so host-only users never pay for the driver.
 */
int te_cuda_loaded(void);

#endif
