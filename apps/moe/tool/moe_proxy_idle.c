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
#include <unistd.h>

#include "te/moe_proxy.h"
#include "te_args.h"
#include "te_idle_cost.h"

int main(int argc, char **argv)
{
    unsigned seconds = 3;
    int ex = te_idle_cost_args("te-moe-proxy-idle", argc, argv, &seconds);
    if (ex != TE_IDLE_COST_GO_ON)
        return ex;
    te_engine *e;
    if (te_engine_create(NULL, &e)) {
        fprintf(stderr, "te-moe-proxy-idle: engine: %s\n", te_last_error());
        return 1;
    }
    const int caller = te_engine_progress_mode(e) == TE_PROGRESS_CALLER;
    double engine = te_idle_cost_measure(seconds).cores;
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
    te_idle_cost_measure(1);
    double proxied = te_idle_cost_measure(seconds).cores;
    printf("# te-moe-proxy-idle: %s mode, %u s each, CPU time of the process "
           "per wall second\n", caller ? "caller" : "thread", seconds);
    printf("engine idle:            %.4f of a core\n", engine);
    printf("engine + idle proxy:    %.4f of a core\n", proxied);
    te_moe_proxy_destroy(p);
    te_engine_destroy(e);
    free(ring);
    return 0;
}
