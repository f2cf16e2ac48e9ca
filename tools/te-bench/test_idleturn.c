/*
 * te-bench --test idleturn: what one te_progress() call costs when it finds
 * nothing, on a caller-driven engine with one peer (engine.progress =
 * caller, one process). A latency-bound application spins on te_progress;
 * an arrival waits on average half such a call before it is seen, and a
 * spinning thread's core does nothing else. Reference in the same run: one
 * CLOCK_MONOTONIC read (what a turn must not do many of), timed the same
 * way, interleaved with the turns.
 *
 *   te-bench --test idleturn [--iters N] [--reps N]
 *            [--set section.key=value ...]   (e.g. engine.plugin=efa)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "alone_args.h"
#include "bench.h"
#include "te/te.h"
#include "test_idleturn.h"

/* ns per call of `calls` te_progress() on e; < 0 when one did something or
 * failed (an idle engine must not). */
static double time_turns(te_engine *e, long calls)
{
    uint64_t t0 = tb_now_ns();
    for (long i = 0; i < calls; i++) {
        int rc = te_progress(e, -1, 0);
        if (rc) {
            fprintf(stderr, "te-bench: idleturn: te_progress returned %d "
                    "on an idle engine: %s\n", rc, rc < 0 ? te_last_error()
                    : "it found work");
            return -1;
        }
    }
    return (double)(tb_now_ns() - t0) / (double)calls;
}

static double time_clock(long calls)
{
    struct timespec ts;
    uint64_t t0 = tb_now_ns();
    for (long i = 0; i < calls; i++)
        clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)(tb_now_ns() - t0) / (double)calls;
}

static int open_pair(const struct tb_alone_args *a, te_engine **e,
                     te_engine **other)
{
    struct tb_sets mode = {0};
    tb_sets_add(&mode, "engine.progress=caller");
    char err[512] = "";
    int rc = mode.n == 1 ? 0 : -1;
    if (!rc)
        rc = tb_engine_create(NULL, a->sets, a->nsets, &mode, 0, e, err,
                              sizeof(err));
    if (!rc)
        rc = tb_engine_create(NULL, a->sets, a->nsets, &mode, 0, other, err,
                              sizeof(err));
    tb_sets_free(&mode);
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    te_peer p;
    if (!rc && ((rc = te_engine_address(*other, 0, addr, &alen)) ||
                (rc = te_peer_add(*e, 0, addr, alen, &p))))
        snprintf(err, sizeof(err), "peer: %s", te_last_error());
    if (rc)
        fprintf(stderr, "te-bench: idleturn engines: %s\n",
                err[0] ? err : "out of memory");
    return rc;
}

int tb_idleturn_main(int argc, char **argv)
{
    struct tb_alone_args args = {.iters = 1000000, .iters_max = 100000000,
                                 .reps = 5};
    if (tb_alone_parse(argc, argv, "idleturn",
                       TB_ARG_ITERS | TB_ARG_REPS | TB_ARG_SET, &args))
        return 2;
    te_engine *e = NULL, *other = NULL;
    int rc = open_pair(&args, &e, &other) ? 1 : 0;
    /* Settle: the peer's set-up, and the loops' code and data warm. */
    for (int i = 0; i < 1000 && !rc; i++)
        if (te_progress(e, -1, 0) < 0 || te_progress(other, -1, 0) < 0)
            rc = 1;
    double turn[64], clk[64];
    if (!rc && time_turns(e, args.iters / 10 + 1) < 0)
        rc = 1;
    for (int r = 0; r < args.reps && !rc; r++) {
        clk[r] = time_clock(args.iters);
        if ((turn[r] = time_turns(e, args.iters)) < 0)
            rc = 1;
    }
    if (!rc) {
        double t = tb_median(turn, args.reps), c = tb_median(clk, args.reps);
        printf("# idleturn: te_progress() finding nothing, caller-driven "
               "engine with one peer, plugin %s, %ld calls x %d reps "
               "(median)\n"
               "idle_turn_ns %.1f (min %.1f) | clock_read_ns %.1f | "
               "turn/clock %.2f\n",
               te_engine_plugin_name(e), args.iters, args.reps, t,
               tb_min(turn, args.reps), c, t / c);
    }
    te_engine_destroy(e);
    te_engine_destroy(other);
    return rc;
}
