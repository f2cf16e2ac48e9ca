/*
 * te-moe-proxy-idle: what an idle MoE proxy costs. An engine (settings
 * from the environment, e.g. TE_ENGINE_PROGRESS=caller) sits idle for
 * SECONDS, then the same engine with a proxy on an empty ring; prints each
 * one's CPU time (user + system, the whole process) over its wall time, as
 * a fraction of one core. A benchmark (docs/moe.md "An idle proxy"), not a
 * test: ctest only checks that it runs.
 *
 * usage: te-moe-proxy-idle [SECONDS]   (1..60, default 3)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "te/moe_proxy.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/* CPU of the process over `seconds` of sleeping, per second of wall time. */
static double idle_share(unsigned seconds)
{
    double c0 = cpu_s(), t0 = now_s();
    struct timespec ts = {(time_t)seconds, 0};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
    return (cpu_s() - c0) / (now_s() - t0);
}

int main(int argc, char **argv)
{
    long seconds = 3;
    if (argc > 2 || (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
        fprintf(stderr, "usage: te-moe-proxy-idle [SECONDS]   (1..60, default 3)\n");
        return argc == 2 ? 0 : 2;
    }
    if (argc == 2) {
        char *end;
        seconds = strtol(argv[1], &end, 10);
        if (*end || seconds < 1 || seconds > 60) {
            fprintf(stderr, "te-moe-proxy-idle: SECONDS must be 1..60, not '%s'\n", argv[1]);
            return 2;
        }
    }
    te_engine *e;
    if (te_engine_create(NULL, &e)) {
        fprintf(stderr, "te-moe-proxy-idle: engine: %s\n", te_last_error());
        return 1;
    }
    const int caller = te_engine_progress_mode(e) == TE_PROGRESS_CALLER;
    double engine = idle_share((unsigned)seconds);
    void *ring = calloc(1, te_moe_ring_bytes(64, 4));
    te_moe_proxy *p = NULL;
    int rc = ring ? te_moe_proxy_create(e, ring, 64, 4, &p) : -ENOMEM;
    if (rc) {
        fprintf(stderr, "te-moe-proxy-idle: proxy: %s\n", strerror(-rc));
        te_engine_destroy(e);
        free(ring);
        return 1;
    }
    /* Past the proxy's first second (spinning, then short naps): the
     * state an idle rank stays in. */
    idle_share(1);
    double proxied = idle_share((unsigned)seconds);
    printf("# te-moe-proxy-idle: %s mode, %ld s each, CPU time of the process "
           "per wall second\n", caller ? "caller" : "thread", seconds);
    printf("engine idle:            %.4f of a core\n", engine);
    printf("engine + idle proxy:    %.4f of a core\n", proxied);
    te_moe_proxy_destroy(p);
    te_engine_destroy(e);
    free(ring);
    return 0;
}
