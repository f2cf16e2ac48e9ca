/*
 * Clocks and statistics. Every time is CLOCK_MONOTONIC, which is shared by
 * all processes of a host: a server and a client on one machine can
 * subtract each other's stamps. Percentiles use the nearest rank on a
 * sorted copy (no interpolation: a p99.9 of 1000 samples is a real sample).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "bench.h"

uint64_t tb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void tb_sleep_us(uint32_t us)
{
    struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000L};
    nanosleep(&ts, NULL);
}

/*
 * A precise nap for the harness's completion batching. The default timer
 * slack (50 us) would oversleep short naps; it is lowered only around the
 * nap, because threads inherit it and the engines' threads (created by
 * this one) must behave as in any application.
 */
void tb_nap_us(uint32_t us)
{
    int old = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    tb_sleep_us(us);
    if (old > 0)
        prctl(PR_SET_TIMERSLACK, (unsigned long)old, 0, 0, 0);
}

void tb_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

void tb_samples_add(struct tb_samples *s, double x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        double *v = realloc(s->v, cap * sizeof(*v));
        if (!v)
            return; /* a lost sample under memory pressure, not a failure */
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
}

void tb_samples_free(struct tb_samples *s)
{
    free(s->v);
    memset(s, 0, sizeof(*s));
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double tb_percentile(const struct tb_samples *s, double p)
{
    if (!s->n)
        return NAN;
    double *c = malloc(s->n * sizeof(*c));
    if (!c)
        return NAN;
    memcpy(c, s->v, s->n * sizeof(*c));
    qsort(c, s->n, sizeof(*c), cmp_double);
    size_t rank = (size_t)ceil(p / 100.0 * (double)s->n);
    if (rank < 1)
        rank = 1;
    if (rank > s->n)
        rank = s->n;
    double v = c[rank - 1];
    free(c);
    return v;
}

double tb_median(const double *v, int n)
{
    if (n <= 0)
        return NAN;
    double c[64];
    if (n > 64)
        n = 64;
    memcpy(c, v, (size_t)n * sizeof(*c));
    qsort(c, (size_t)n, sizeof(*c), cmp_double);
    return n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
}

double tb_min(const double *v, int n)
{
    double m = n > 0 ? v[0] : NAN;
    for (int i = 1; i < n; i++)
        if (v[i] < m)
            m = v[i];
    return m;
}

double tb_max(const double *v, int n)
{
    double m = n > 0 ? v[0] : NAN;
    for (int i = 1; i < n; i++)
        if (v[i] > m)
            m = v[i];
    return m;
}
