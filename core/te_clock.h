/*
 * The core's one clock and its one architecture-specific instruction.
 *
 * Every time the core measures or waits on is CLOCK_MONOTONIC nanoseconds:
 * a wall-clock step (NTP, an operator's `date`) must neither shorten nor
 * stretch a deadline. Condition variables that are waited on with a timeout
 * are created by te_cond_init_monotonic() and given te_timespec_ns()
 * deadlines; nothing in the core reads CLOCK_REALTIME.
 */
#ifndef TE_CORE_CLOCK_H
#define TE_CORE_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/** Monotonic time in nanoseconds (arbitrary origin, never steps back). */
static inline uint64_t te_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/** CLOCK_MONOTONIC as of the last timer tick (1-4 ms old), a fifth of
 *  te_clock_ns()'s cost: to notice that a tick passed, not to time. */
static inline uint64_t te_clock_tick_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/** ns as a timespec: the absolute CLOCK_MONOTONIC time of a te_clock_ns()
 *  value, or a span for nanosleep/ppoll. */
static inline struct timespec te_timespec_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull),
                          (long)(ns % 1000000000ull)};
    return ts;
}

/** A monotonic timespec timeout_ms from now (for pthread_cond_timedwait on
 *  a condition made by te_cond_init_monotonic). */
static inline struct timespec te_deadline_ms(int timeout_ms)
{
    return te_timespec_ns(te_clock_ns() +
                         (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) *
                             1000000ull);
}

/** pthread_cond_init whose timed waits count on CLOCK_MONOTONIC. */
static inline int te_cond_init_monotonic(pthread_cond_t *c)
{
    pthread_condattr_t a;
    int rc = pthread_condattr_init(&a);
    if (rc)
        return rc;
    rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    if (!rc)
        rc = pthread_cond_init(c, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

/** Tell the CPU we are spinning (frees the sibling hyperthread, saves
 *  power); the only architecture-specific instruction of the core. */
static inline void te_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield" ::: "memory");
#elif defined(__powerpc64__)
    __asm__ __volatile__("or 27,27,27" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

#endif
