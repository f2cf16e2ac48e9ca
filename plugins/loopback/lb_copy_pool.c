/*
 * Copy engines of the loopback target: see lb_copy_pool.h.
 *
 * A job is published as one 64-bit claim word: generation (24 bits),
 * chunk count (20) and the next unclaimed chunk (20). Threads claim a
 * chunk with a compare-and-swap on the whole word, so a helper that read
 * the word of a finished job can never claim a chunk of the next one (its
 * generation differs), and it reads the job's copies only after its claim
 * succeeded: the polling thread rewrites them only once every claimed
 * chunk is done, which this chunk is not yet.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "lb_copy_pool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CL_BITS 20u
#define CL_MAX ((1u << CL_BITS) - 1)
#define CL_NEXT(c) ((uint32_t)((c) & CL_MAX))
#define CL_COUNT(c) ((uint32_t)(((c) >> CL_BITS) & CL_MAX))
#define CL_GEN(c) ((uint32_t)((c) >> (2 * CL_BITS)))

struct lb_copy_pool {
    pthread_mutex_t submit;  /* the job with helpers; others copy alone */
    _Atomic uint64_t claim;  /* gen | count | next */
    _Atomic uint32_t done;   /* chunks of the job copied */
    struct lb_copy *copies;  /* the job's (valid while chunks are claimed) */
    uint32_t ncopies;
    uint64_t chunk;
    _Atomic uint32_t wake;     /* futex word, bumped to wake sleepers */
    _Atomic uint32_t sleepers; /* helpers in (or entering) futex_wait */
    _Atomic bool stop;
    _Atomic uint64_t helped; /* chunks copied by helpers */
    uint32_t want;     /* helpers to start at the first job that needs them */
    bool tried;        /* (under submit) they were started, or failed to */
    uint32_t nhelpers; /* running */
    pthread_t th[LB_COPY_MAX_HELPERS];
};

int lb_copy_xfer(bool local, pid_t pid, bool out, void *here, uint64_t there,
                 uint64_t len)
{
    void *far = (void *)(uintptr_t)there;
    if (local) {
        if (out)
            memcpy(far, here, len);
        else
            memcpy(here, far, len);
        return 0;
    }
    while (len) {
        struct iovec l = {here, len}, r = {far, len};
        ssize_t k = out ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                        : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EFAULT;
        here = (char *)here + k;
        far = (char *)far + k;
        len -= (uint64_t)k;
    }
    return 0;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void copy_alone(struct lb_copy *c)
{
    int rc = lb_copy_xfer(c->local, c->pid, c->out, c->here, c->there, c->len);
    atomic_store_explicit(&c->status, rc, memory_order_relaxed);
}

/* Copy chunk i of the job: the copy holding it is the last whose first
 * chunk is <= i. */
static void copy_chunk(struct lb_copy_pool *p, uint32_t i)
{
    uint32_t lo = 0, hi = p->ncopies - 1;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        if (p->copies[mid].first_chunk <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    struct lb_copy *c = &p->copies[lo];
    uint64_t off = (uint64_t)(i - c->first_chunk) * p->chunk;
    uint64_t len = c->len - off < p->chunk ? c->len - off : p->chunk;
    int rc = lb_copy_xfer(c->local, c->pid, c->out, (char *)c->here + off,
                          c->there + off, len);
    if (rc) {
        int zero = 0;
        atomic_compare_exchange_strong(&c->status, &zero, rc);
    }
}

/* Claim and copy one chunk of the current job: false if none is left. */
static bool take_chunk(struct lb_copy_pool *p)
{
    uint64_t c = atomic_load(&p->claim);
    do {
        if (CL_NEXT(c) >= CL_COUNT(c))
            return false;
    } while (!atomic_compare_exchange_weak(&p->claim, &c, c + 1));
    copy_chunk(p, CL_NEXT(c));
    atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    return true;
}

static bool has_work(struct lb_copy_pool *p)
{
    uint64_t c = atomic_load(&p->claim);
    return CL_NEXT(c) < CL_COUNT(c);
}

static void futex_wait(_Atomic uint32_t *w, uint32_t seen)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL,
            0);
}

static void *helper_main(void *arg)
{
    struct lb_copy_pool *p = arg;
    uint64_t idle_since = now_ns();
    while (!atomic_load(&p->stop)) {
        if (take_chunk(p)) {
            atomic_fetch_add_explicit(&p->helped, 1, memory_order_relaxed);
            idle_since = 0;
            continue;
        }
        uint64_t t = now_ns();
        if (!idle_since)
            idle_since = t;
        if (t - idle_since < LB_COPY_SPIN_NS) {
            sched_yield(); /* the CPU to anyone who has work */
            continue;
        }
        /* Sleep. The publisher stores the claim and then reads sleepers;
         * we count ourselves and then read the claim: one of the two sees
         * the other (both sequentially consistent). */
        uint32_t seen = atomic_load(&p->wake);
        atomic_fetch_add(&p->sleepers, 1);
        if (!has_work(p) && !atomic_load(&p->stop))
            futex_wait(&p->wake, seen);
        atomic_fetch_sub(&p->sleepers, 1);
        idle_since = 0;
    }
    return NULL;
}

static void wake_helpers(struct lb_copy_pool *p)
{
    if (atomic_load(&p->sleepers)) {
        atomic_fetch_add(&p->wake, 1);
        futex_wake_all(&p->wake);
    }
}

int lb_copy_pool_new(uint32_t helpers, struct lb_copy_pool **out)
{
    if (!out || helpers < 1 || helpers > LB_COPY_MAX_HELPERS)
        return -EINVAL;
    struct lb_copy_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    pthread_mutex_init(&p->submit, NULL);
    p->want = helpers;
    *out = p;
    return 0;
}

/* Stop and join the running helpers (they may start again later). */
static void stop_helpers(struct lb_copy_pool *p)
{
    atomic_store(&p->stop, true);
    atomic_fetch_add(&p->wake, 1);
    futex_wake_all(&p->wake);
    for (uint32_t i = 0; i < p->nhelpers; i++)
        pthread_join(p->th[i], NULL);
    p->nhelpers = 0;
    atomic_store(&p->stop, false);
}

/* Once, with submit held: all helpers, or none and -errno. */
static int start_helpers(struct lb_copy_pool *p)
{
    p->tried = true;
    for (uint32_t i = 0; i < p->want; i++) {
        int rc = pthread_create(&p->th[i], NULL, helper_main, p);
        if (rc) {
            stop_helpers(p);
            return -rc;
        }
        p->nhelpers = i + 1;
        pthread_setname_np(p->th[i], "te-lb-copy");
    }
    return 0;
}

void lb_copy_pool_free(struct lb_copy_pool *p)
{
    if (!p)
        return;
    stop_helpers(p);
    pthread_mutex_destroy(&p->submit);
    free(p);
}

uint64_t lb_copy_pool_helped(const struct lb_copy_pool *p)
{
    return p ? atomic_load_explicit(&p->helped, memory_order_relaxed) : 0;
}

/* One job with the helpers: chunks published, claimed by all, waited for
 * (submit held). */
static void run_job(struct lb_copy_pool *p, struct lb_copy *c, uint32_t n)
{
    /* Chunks of LB_COPY_CHUNK, larger if the count would not fit. */
    uint64_t chunk = LB_COPY_CHUNK;
    for (;;) {
        uint64_t chunks = 0;
        for (uint32_t i = 0; i < n; i++)
            chunks += (c[i].len + chunk - 1) / chunk;
        if (chunks <= CL_MAX)
            break;
        chunk *= 2;
    }
    uint32_t count = 0;
    for (uint32_t i = 0; i < n; i++) {
        c[i].first_chunk = count;
        count += (uint32_t)((c[i].len + chunk - 1) / chunk);
    }
    /* A copy of 0 bytes has no chunk and the first chunk of the copy
     * after it: the search (copy_chunk) picks the last such copy. */
    p->copies = c;
    p->ncopies = n;
    p->chunk = chunk;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    uint64_t old = atomic_load(&p->claim);
    uint64_t gen = (CL_GEN(old) + 1) & 0xffffffu;
    atomic_store(&p->claim, gen << (2 * CL_BITS) | (uint64_t)count << CL_BITS);
    wake_helpers(p);
    while (take_chunk(p))
        ;
    /* The chunks helpers claimed: at most one each, being copied now (or
     * waiting for a CPU: after a short spin, yield ours to them). */
    for (uint32_t spins = 0;
         atomic_load_explicit(&p->done, memory_order_acquire) < count; spins++)
        if (spins < 1024)
            cpu_relax();
        else
            sched_yield();
}

int lb_copy_run(struct lb_copy_pool *p, struct lb_copy *c, uint32_t n)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        atomic_store_explicit(&c[i].status, 0, memory_order_relaxed);
        total += c[i].len;
    }
    int rc = 0;
    if (p && n && total > LB_COPY_CHUNK &&
        pthread_mutex_trylock(&p->submit) == 0) {
        if (!p->tried)
            rc = start_helpers(p);
        if (p->nhelpers) {
            run_job(p, c, n);
            pthread_mutex_unlock(&p->submit);
            return rc;
        }
        pthread_mutex_unlock(&p->submit);
    }
    for (uint32_t i = 0; i < n; i++)
        copy_alone(&c[i]);
    return rc;
}
