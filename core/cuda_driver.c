/*
 * Loading the CUDA driver at run time (see cuda_driver.h for why).
 *
 * The outcome of the first load is kept for the life of the process: a host
 * without a driver answers every later CUDA call with the same reason at no
 * cost, and a loaded driver is never unloaded (CUDA does not support it).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "te_error.h"

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static int driver_rc;             /* 0 or -errno of the first load */
static char driver_reason[256];   /* why driver_rc != 0 */

#ifdef TE_HAVE_CUDA
static struct te_cuda_driver driver;
static void *driver_handle;

/* The versioned names: dlsym of "cuMemAlloc" would give the CUDA 3.1 ABI. */
static const struct {
    const char *name;
    size_t offset;
} driver_symbols[] = {
#define SYM(field, name) {name, offsetof(struct te_cuda_driver, field)}
    SYM(GetErrorString, "cuGetErrorString"),
    SYM(GetErrorName, "cuGetErrorName"),
    SYM(DriverGetVersion, "cuDriverGetVersion"),
    SYM(DeviceGetCount, "cuDeviceGetCount"),
    SYM(DeviceGet, "cuDeviceGet"),
    SYM(DeviceGetName, "cuDeviceGetName"),
    SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
    SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
    SYM(CtxGetCurrent, "cuCtxGetCurrent"),
    SYM(CtxSetCurrent, "cuCtxSetCurrent"),
    SYM(PointerGetAttributes, "cuPointerGetAttributes"),
    SYM(MemAlloc, "cuMemAlloc_v2"),
    SYM(MemFree, "cuMemFree_v2"),
    SYM(MemHostAlloc, "cuMemHostAlloc"),
    SYM(MemFreeHost, "cuMemFreeHost"),
    SYM(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"),
    SYM(Memcpy, "cuMemcpy"),
    SYM(MemcpyAsync, "cuMemcpyAsync"),
    SYM(StreamCreate, "cuStreamCreate"),
    SYM(StreamSynchronize, "cuStreamSynchronize"),
    SYM(StreamDestroy, "cuStreamDestroy_v2"),
    SYM(IpcGetMemHandle, "cuIpcGetMemHandle"),
    SYM(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2"),
    SYM(IpcCloseMemHandle, "cuIpcCloseMemHandle"),
#undef SYM
};

/* Names and texts of the results cuInit gives where there is no working
 * driver: the driver cannot describe its own results then (the toolkit's
 * stub answers cuGetErrorName with an error too). */
static const struct {
    CUresult r;
    const char *name, *text;
} known_results[] = {
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY",
     "the library is the CUDA toolkit's stub, not a real driver (install "
     "the NVIDIA driver or put its libcuda.so.1 first in the search path)"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device"},
    {CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER,
     "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
     "the driver is older than this CUDA version"},
    {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
     "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
     "forward compatibility is not supported on this device"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "the user-mode driver and the kernel module differ in version"},
};

static void result_text(CUresult r, const char **name, const char **text)
{
    *name = NULL;
    *text = NULL;
    for (size_t i = 0; i < sizeof(known_results) / sizeof(known_results[0]);
         i++)
        if (known_results[i].r == r) {
            *name = known_results[i].name;
            *text = known_results[i].text;
        }
    const char *n = NULL, *t = NULL;
    if (driver.GetErrorName && driver.GetErrorName(r, &n) == CUDA_SUCCESS && n)
        *name = n;
    if (driver.GetErrorString && driver.GetErrorString(r, &t) == CUDA_SUCCESS &&
        t)
        *text = t;
    if (!*name)
        *name = "CUresult";
    if (!*text)
        *text = "no description from the driver";
}

static void driver_unavailable(int rc, const char *fmt, const char *a,
                               const char *b)
{
    driver_rc = rc;
    snprintf(driver_reason, sizeof(driver_reason), fmt, a, b);
}

static void driver_load(void)
{
    /* TE_CUDA_DRIVER names another library (tests: the toolkit's stub). */
    const char *path = getenv("TE_CUDA_DRIVER");
    if (!path || !*path)
        path = "libcuda.so.1";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        driver_unavailable(-ENOTSUP, "CUDA memory needs %s: not found (%s)",
                           path, why ? why : "dlopen failed");
        return;
    }
    for (size_t i = 0; i < sizeof(driver_symbols) / sizeof(driver_symbols[0]);
         i++) {
        void *fn = dlsym(h, driver_symbols[i].name);
        if (!fn) {
            driver_unavailable(-ENOTSUP,
                               "CUDA memory needs %s from the driver: "
                               "missing in %s (driver too old?)",
                               driver_symbols[i].name, path);
            dlclose(h);
            return;
        }
        memcpy((char *)&driver + driver_symbols[i].offset, &fn, sizeof(fn));
    }
    CUresult (*init)(unsigned) = NULL;
    void *init_sym = dlsym(h, "cuInit");
    memcpy(&init, &init_sym, sizeof(init));
    if (!init) {
        driver_unavailable(-ENOTSUP, "CUDA memory needs cuInit: missing in %s%s",
                           path, "");
        dlclose(h);
        return;
    }
    CUresult r = init(0);
    if (r != CUDA_SUCCESS) {
        const char *name, *str;
        result_text(r, &name, &str);
        char what[160];
        snprintf(what, sizeof(what), "cuInit failed in %s: %s (%d)", path,
                 name, (int)r);
        driver_unavailable(r == CUDA_ERROR_NO_DEVICE ? -ENODEV : -ENOTSUP,
                           "CUDA memory unavailable: %s: %s", what, str);
        /* Kept loaded: a stub or a broken driver costs nothing more, and a
         * library the application also uses must not be unloaded. */
        driver_handle = h;
        return;
    }
    driver_handle = h;
    driver_rc = 0;
}

static void driver_once_fn(void)
{
    driver_load();
}

const struct te_cuda_driver *te_cuda_driver(void)
{
    pthread_once(&driver_once, driver_once_fn);
    if (driver_rc) {
        te_fail(driver_rc, "%s", driver_reason);
        return NULL;
    }
    return &driver;
}

int te_cuda_fail(CUresult r, const char *what)
{
    const char *name, *str;
    result_text(r, &name, &str);
    return te_fail(r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO,
                   "%s: %s (%d): %s", what, name, (int)r, str);
}

int te_cuda_use_device(int ordinal)
{
    const struct te_cuda_driver *d = te_cuda_driver();
    if (!d)
        return driver_rc;
    int count = 0;
    CUresult r = d->DeviceGetCount(&count);
    if (r != CUDA_SUCCESS)
        return te_cuda_fail(r, "cuDeviceGetCount");
    if (ordinal < 0 || ordinal >= count)
        return te_fail(-ENODEV, "CUDA device %d does not exist (%d device%s)",
                       ordinal, count, count == 1 ? "" : "s");
    CUdevice dev;
    if ((r = d->DeviceGet(&dev, ordinal)) != CUDA_SUCCESS)
        return te_cuda_fail(r, "cuDeviceGet");
    /* Retained once per device for the life of the process, like the CUDA
     * runtime does: releasing would destroy memory the application holds. */
    static CUcontext primary[64];
    static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
    if (ordinal >= 64)
        return te_fail(-ENODEV, "CUDA device %d: at most 64 devices", ordinal);
    pthread_mutex_lock(&primary_lock);
    if (!primary[ordinal]) {
        r = d->DevicePrimaryCtxRetain(&primary[ordinal], dev);
        if (r != CUDA_SUCCESS) {
            primary[ordinal] = NULL;
            pthread_mutex_unlock(&primary_lock);
            return te_cuda_fail(r, "cuDevicePrimaryCtxRetain");
        }
    }
    CUcontext ctx = primary[ordinal];
    pthread_mutex_unlock(&primary_lock);
    if ((r = d->CtxSetCurrent(ctx)) != CUDA_SUCCESS)
        return te_cuda_fail(r, "cuCtxSetCurrent");
    return 0;
}

int te_cuda_enter_device(int ordinal, CUcontext *saved)
{
    *saved = NULL;
    const struct te_cuda_driver *d = te_cuda_driver();
    if (!d)
        return driver_rc;
    if (d->CtxGetCurrent(saved) != CUDA_SUCCESS)
        *saved = NULL;
    return te_cuda_use_device(ordinal);
}

void te_cuda_restore(CUcontext saved)
{
    if (saved && driver_rc == 0)
        driver.CtxSetCurrent(saved);
}

int te_cuda_mapped_word(const char *who, void **host, void **dev)
{
    char what[96];
    void *h = NULL;
    CUresult r = driver.MemHostAlloc(&h, 64, CU_MEMHOSTALLOC_DEVICEMAP |
                                                 CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS) {
        snprintf(what, sizeof(what), "%s: cuMemHostAlloc", who);
        return te_cuda_fail(r, what);
    }
    CUdeviceptr dp = 0;
    if ((r = driver.MemHostGetDevicePointer(&dp, h, 0)) != CUDA_SUCCESS) {
        driver.MemFreeHost(h);
        snprintf(what, sizeof(what), "%s: cuMemHostGetDevicePointer", who);
        return te_cuda_fail(r, what);
    }
    memset(h, 0, 64);
    *host = h;
    *dev = (void *)(uintptr_t)dp;
    return 0;
}

int te_cuda_loaded(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h) {
        dlclose(h); /* drops only the reference NOLOAD took */
        return 1;
    }
    return driver_handle != NULL;
}
#else /* !TE_HAVE_CUDA */
static void driver_once_fn(void)
{
    driver_rc = -ENOTSUP;
    snprintf(driver_reason, sizeof(driver_reason),
             "CUDA memory unavailable: this build has no CUDA support "
             "(configure with TE_WITH_CUDA=ON and the CUDA toolkit)");
}

int te_cuda_loaded(void)
{
    return 0;
}
#endif

int te_cuda_ready(void)
{
    pthread_once(&driver_once, driver_once_fn);
    if (driver_rc)
        return te_fail(driver_rc, "%s", driver_reason);
    return 0;
}

const char *te_cuda_unavailable_reason(void)
{
    pthread_once(&driver_once, driver_once_fn);
    return driver_reason;
}
