#include "te_idle_cost.h"
#include "te_args.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage_now(double *cpu_s, double *nvcsw)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    *cpu_s = (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
             (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
    *nvcsw = (double)u.ru_nvcsw;
}

struct te_idle_cost te_idle_cost_measure(unsigned seconds)
{
    double c0, w0, c1, w1, t0 = now_s();
    usage_now(&c0, &w0);
    struct timespec ts = {(time_t)seconds, 0};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
    usage_now(&c1, &w1);
    double wall = now_s() - t0;
    return (struct te_idle_cost){(c1 - c0) / wall, (w1 - w0 - 1) / wall};
}

int te_idle_cost_args(const char *tool, int argc, char **argv,
                      unsigned *seconds)
{
    int help = argc == 2 && (!strcmp(argv[1], "-h") ||
                             !strcmp(argv[1], "--help"));
    if (argc > 2 || help) {
        fprintf(stderr, "usage: %s [SECONDS]   (1..60, default %u)\n", tool,
                *seconds);
        return help ? 0 : TE_ARGS_EXIT;
    }
    uint32_t v = *seconds;
    if (argc == 2 && te_arg_u32(tool, "SECONDS", argv[1], 1, 60, &v))
        return TE_ARGS_EXIT;
    *seconds = v;
    return TE_IDLE_COST_GO_ON;
}
