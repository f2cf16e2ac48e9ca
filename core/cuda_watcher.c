/*
 * The GPU watcher: a 64-bit word in host-pinned memory mapped into the
 * device, bumped by kernels (also kernels of a replayed CUDA graph, which
 * cannot call back to the host themselves), and a CPU thread that turns
 * every change into a callback.
 *
 * The thread only reads the word: a kernel's system-scope atomic add and a
 * CPU load of the same pinned line are coherent, and nothing else writes it.
 * With TE_GPU_WATCH_EACH_STEP the word is a counter and each +1 gets its
 * own callback, so bumps that land between two looks are not merged.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_driver.h"
#include "engine_internal.h"
#include "te_clock.h"
#include "te_error.h"
#include "thread_setup.h"

#define WATCH_IDLE_NS 1000000ll    /* spin this long without a change ... */
#define WATCH_NAP_NS 50000l        /* ... then look this often ... */
/* ... and after this long without one (no forward pass running: the
 * engine is idle) only every WATCH_DOZE_NAP_NS, so that an idle watcher
 * costs about nothing; the first bump after such a pause is seen up to
 * that much later, the next ones at once. */
#define WATCH_DOZE_NS 100000000ll
#define WATCH_DOZE_NAP_NS 1000000l

struct te_gpu_watcher {
    _Atomic uint64_t *host;       /* the word, CPU view */
    void *device;                 /* the word, kernel view */
    uint32_t flags;
    te_gpu_watch_fn cb;
    void *arg;
    pthread_t thread;
    atomic_bool stop;
    _Atomic uint64_t delivered;   /* last value whose callback returned */
    pthread_mutex_t lock;         /* with `changed`: te_gpu_watcher_wait */
    pthread_cond_t changed;
    int device_ordinal;           /* CUDA ordinal it was made for */
};

static __thread te_gpu_watcher *watcher_self; /* to refuse destroy from cb */

#ifdef TE_HAVE_CUDA /* the thread exists only where the word can */
static int64_t now_ns(void)
{
    return (int64_t)te_clock_ns();
}

static void deliver(te_gpu_watcher *w, uint64_t old_value, uint64_t new_value)
{
    if (w->flags & TE_GPU_WATCH_EACH_STEP && new_value > old_value) {
        for (uint64_t k = old_value; k != new_value; k++)
            w->cb(k, k + 1, w->arg);
    } else {
        w->cb(old_value, new_value, w->arg);
    }
    pthread_mutex_lock(&w->lock);
    atomic_store_explicit(&w->delivered, new_value, memory_order_release);
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->lock);
}

static void *watch_thread(void *p)
{
    te_gpu_watcher *w = p;
    watcher_self = w;
    te_thread_name("te-gpu-watcher");
    te_thread_tighten_slack(WATCH_NAP_NS / 1000);
    uint64_t seen = 0;
    int64_t last_change = now_ns();
    for (;;) {
        bool stopping = atomic_load_explicit(&w->stop, memory_order_acquire);
        uint64_t v = atomic_load_explicit(w->host, memory_order_acquire);
        if (v != seen) {
            deliver(w, seen, v);
            seen = v;
            last_change = now_ns();
            continue;
        }
        if (stopping)
            break; /* the last look after stop delivered what was visible */
        if (w->flags & TE_GPU_WATCH_SPIN)
            continue;
        int64_t quiet = now_ns() - last_change;
        if (quiet < WATCH_IDLE_NS) {
            sched_yield();
        } else {
            struct timespec nap = {
                0, quiet < WATCH_DOZE_NS ? WATCH_NAP_NS : WATCH_DOZE_NAP_NS};
            nanosleep(&nap, NULL);
        }
    }
    return NULL;
}
#endif

TE_API int te_gpu_watcher_create(int device, uint32_t flags,
                                 te_gpu_watch_fn cb, void *arg,
                                 te_gpu_watcher **out)
{
    te_error_clear();
    if (!out || !cb)
        return te_fail(-EINVAL, "te_gpu_watcher_create: NULL callback or out");
    *out = NULL;
    if (flags & ~(TE_GPU_WATCH_EACH_STEP | TE_GPU_WATCH_SPIN))
        return te_fail(-EINVAL, "te_gpu_watcher_create: unknown flags 0x%x",
                       flags);
#ifdef TE_HAVE_CUDA
    CUcontext saved;
    int rc = te_cuda_enter_device(device, &saved);
    if (rc) {
        te_cuda_restore(saved);
        return rc;
    }
    const struct te_cuda_driver *d = te_cuda_driver();
    te_gpu_watcher *w = calloc(1, sizeof(*w));
    if (!w) {
        te_cuda_restore(saved);
        return te_fail(-ENOMEM, "te_gpu_watcher_create: out of memory");
    }
    void *host = NULL, *dev = NULL;
    if ((rc = te_cuda_mapped_word("te_gpu_watcher_create", &host, &dev))) {
        free(w);
        te_cuda_restore(saved);
        return rc;
    }
    w->host = host;
    atomic_store(w->host, 0);
    w->device = dev;
    w->flags = flags;
    w->device_ordinal = device;
    w->cb = cb;
    w->arg = arg;
    pthread_mutex_init(&w->lock, NULL);
    te_cond_init_monotonic(&w->changed);
    if ((rc = pthread_create(&w->thread, NULL, watch_thread, w)) != 0) {
        pthread_mutex_destroy(&w->lock);
        pthread_cond_destroy(&w->changed);
        d->MemFreeHost(host);
        free(w);
        te_cuda_restore(saved);
        return te_fail(-rc, "te_gpu_watcher_create: pthread_create failed");
    }
    *out = w;
    te_cuda_restore(saved);
    return 0;
#else
    (void)device;
    (void)arg;
    return te_cuda_ready();
#endif
}

TE_API void *te_gpu_watcher_device_ptr(const te_gpu_watcher *w)
{
    return w ? w->device : NULL;
}

TE_API uint64_t te_gpu_watcher_delivered(const te_gpu_watcher *w)
{
    return w ? atomic_load_explicit(&w->delivered, memory_order_acquire) : 0;
}

TE_API int te_gpu_watcher_wait(te_gpu_watcher *w, uint64_t value,
                               int timeout_ms)
{
    te_error_clear();
    if (!w || timeout_ms <= 0)
        return te_fail(-EINVAL, "te_gpu_watcher_wait: NULL watcher or "
                       "timeout %d ms (must be > 0)", timeout_ms);
    struct timespec dl = te_deadline_ms(timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&w->lock);
    while (atomic_load(&w->delivered) < value && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&w->changed, &w->lock, &dl);
    uint64_t got = atomic_load(&w->delivered);
    pthread_mutex_unlock(&w->lock);
    if (got < value)
        return te_fail(-ETIMEDOUT, "te_gpu_watcher_wait: value %llu not "
                       "delivered within %d ms (last %llu)",
                       (unsigned long long)value, timeout_ms,
                       (unsigned long long)got);
    return 0;
}

TE_API int te_gpu_watcher_destroy(te_gpu_watcher *w)
{
    te_error_clear();
    if (!w)
        return 0;
    if (watcher_self == w)
        return te_fail(-EDEADLK, "te_gpu_watcher_destroy: called from the "
                       "watcher's own callback");
    atomic_store_explicit(&w->stop, true, memory_order_release);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->changed);
#ifdef TE_HAVE_CUDA
    const struct te_cuda_driver *d = te_cuda_driver();
    CUcontext saved;
    if (d && !te_cuda_enter_device(w->device_ordinal, &saved))
        d->MemFreeHost((void *)w->host);
    if (d)
        te_cuda_restore(saved);
#endif
    free(w);
    return 0;
}
