/*
 * te-kv-decoder-idle: what an idle decoder costs. An engine (settings from
 * the environment, e.g. TE_ENGINE_PROGRESS=caller) sits idle for SECONDS,
 * then the same engine with a decoder (its own page pool, no request in
 * flight); prints each one's CPU time (user + system, the whole process)
 * per wall second, as a fraction of one core, and the process's voluntary
 * context switches per second (its threads' wake-ups). A benchmark
 * (docs/kvcache.md "An idle decoder"), not a test: ctest only checks that
 * it runs.
 *
 * usage: te-kv-decoder-idle [SECONDS]   (1..60, default 3)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "te/kv.h"

struct idle_cost {
    double cpu;    /* cores */
    double wakes;  /* voluntary context switches per second */
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage_now(double *cpu, double *nvcsw)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    *cpu = (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
    *nvcsw = (double)u.ru_nvcsw;
}

/* The process's cost over `seconds` of this thread sleeping. */
static struct idle_cost idle_cost(unsigned seconds)
{
    double c0, w0, c1, w1, t0 = now_s();
    usage_now(&c0, &w0);
    struct timespec ts = {(time_t)seconds, 0};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
    usage_now(&c1, &w1);
    double wall = now_s() - t0;
    /* Less our own wake-up at the end of the sleep. */
    return (struct idle_cost){(c1 - c0) / wall, (w1 - w0 - 1) / wall};
}

int main(int argc, char **argv)
{
    long seconds = 3;
    if (argc > 2 || (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
        fprintf(stderr, "usage: te-kv-decoder-idle [SECONDS]   (1..60, default 3)\n");
        return argc == 2 ? 0 : 2;
    }
    if (argc == 2) {
        char *end;
        seconds = strtol(argv[1], &end, 10);
        if (*end || seconds < 1 || seconds > 60) {
            fprintf(stderr, "te-kv-decoder-idle: SECONDS must be 1..60, not '%s'\n", argv[1]);
            return 2;
        }
    }
    te_engine *e;
    if (te_engine_create(NULL, &e)) {
        fprintf(stderr, "te-kv-decoder-idle: engine: %s\n", te_last_error());
        return 1;
    }
    const int caller = te_engine_progress_mode(e) == TE_PROGRESS_CALLER;
    struct idle_cost engine = idle_cost((unsigned)seconds);
    te_kv_decoder_opts o;
    memset(&o, 0, sizeof(o));
    te_kv_decoder *d = NULL;
    int rc = te_kv_shape_preset("llama-3.1-70b", 0, &o.shape);
    if (!rc) {
        o.pool_pages = 64;
        o.max_requests = 64;
        rc = te_kv_decoder_new(e, &o, &d);
    }
    if (rc) {
        fprintf(stderr, "te-kv-decoder-idle: decoder: %s\n", te_kv_last_error());
        te_engine_destroy(e);
        return 1;
    }
    struct idle_cost decoder = idle_cost((unsigned)seconds);
    printf("# te-kv-decoder-idle: %s mode, %ld s each, per wall second: CPU time of "
           "the process (cores), its voluntary context switches\n",
           caller ? "caller" : "thread", seconds);
    printf("engine idle:              %.4f cores  %7.1f wakes/s\n", engine.cpu, engine.wakes);
    printf("engine + idle decoder:    %.4f cores  %7.1f wakes/s\n", decoder.cpu,
           decoder.wakes);
    te_kv_decoder_free(d);
    te_engine_destroy(e);
    return 0;
}
