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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/kv.h"
#include "te_args.h"
#include "te_idle_cost.h"

int main(int argc, char **argv)
{
    unsigned seconds = 3;
    int ex = te_idle_cost_args("te-kv-decoder-idle", argc, argv, &seconds);
    if (ex != TE_IDLE_COST_GO_ON)
        return ex;
    te_engine *e;
    if (te_engine_create(NULL, &e)) {
        fprintf(stderr, "te-kv-decoder-idle: engine: %s\n", te_last_error());
        return 1;
    }
    const int caller = te_engine_progress_mode(e) == TE_PROGRESS_CALLER;
    struct te_idle_cost engine = te_idle_cost_measure(seconds);
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
    struct te_idle_cost decoder = te_idle_cost_measure(seconds);
    printf("# te-kv-decoder-idle: %s mode, %u s each, per wall second: CPU time of "
           "the process (cores), its voluntary context switches\n",
           caller ? "caller" : "thread", (unsigned)seconds);
    printf("engine idle:              %.4f cores  %7.1f wakes/s\n", engine.cores, engine.wakes_per_s);
    printf("engine + idle decoder:    %.4f cores  %7.1f wakes/s\n", decoder.cores,
           decoder.wakes_per_s);
    te_kv_decoder_free(d);
    te_engine_destroy(e);
    return 0;
}
