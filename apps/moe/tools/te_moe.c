/*
 * te-moe: run or benchmark MoE dispatch/combine over loopback engines.
 *   te-moe run   [options]   batches checked against the dense reference
 *   te-moe bench [options]   dispatch/combine p50/p99, speculative vs naive
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_harness.h"

static void usage(void)
{
    puts("usage: te-moe run|bench [--ranks R] [--experts E] [--top-k K] [--hidden H]\n"
         "       [--tokens T] [--batches N] [--bf16] [--procs] [--naive]\n"
         "       [--routing random|one|empty|bad] [--faults INI] [--private P]\n"
         "       [--warmup N] [--prefill (4096 tokens)] [--overflow C] [--kill RANK:BATCH] [--stall RANK:BATCH] [--timeout-ms MS]\n"
         "run: every batch compared bit for bit with the dense reference; prints\n"
         "     the most writes per peer (dispatch, combine). --kill: that rank\n"
         "     exits mid-batch (--stall: stays alive, silent); succeeds when every\n"
         "     other rank failed that batch with an error (none hangs).\n"
         "bench: decode (128 tokens, hidden 7168, top-8, 256 experts) by default;\n"
         "     speculative and naive exchanges in the same run, p50/p99 in us.");
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, uint32_t n, double q)
{
    qsort(v, n, sizeof(double), cmpd);
    return v[(uint32_t)(q * (n - 1) + 0.5)];
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage();
        return argc < 2;
    }
    int bench = !strcmp(argv[1], "bench");
    if (!bench && strcmp(argv[1], "run")) {
        usage();
        return 2;
    }
    struct moe_job j = {.p = {.ranks = 2, .experts = 8, .top_k = 2, .hidden = 64,
                              .max_tokens = 0, .timeout_ms = 5000},
                        .tokens = 16, .batches = 3, .check = !bench, .faults = "",
                        .kill_rank = -1, .kill_batch = -1};
    if (bench)
        j.p.ranks = 4, j.p.experts = 256, j.p.top_k = 8, j.p.hidden = 7168, j.tokens = 128,
        j.batches = 20, j.warmup = 3;
    int procs = 0;
    static struct option lo[] = {
        {"ranks", 1, 0, 'r'}, {"experts", 1, 0, 'e'}, {"top-k", 1, 0, 'k'},
        {"hidden", 1, 0, 'H'}, {"tokens", 1, 0, 't'}, {"batches", 1, 0, 'b'},
        {"bf16", 0, 0, 'B'}, {"procs", 0, 0, 'p'}, {"naive", 0, 0, 'n'},
        {"routing", 1, 0, 'R'}, {"faults", 1, 0, 'f'}, {"private", 1, 0, 'P'},
        {"overflow", 1, 0, 'C'}, {"kill", 1, 0, 'K'}, {"timeout-ms", 1, 0, 'T'},
        {"check", 0, 0, 'c'}, {"stall", 1, 0, 'S'}, {"warmup", 1, 0, 'W'},
        {"prefill", 0, 0, 'F'}, {0, 0, 0, 0}};
    int o;
    optind = 2;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'r': j.p.ranks = (uint32_t)atoi(optarg); break;
        case 'e': j.p.experts = (uint32_t)atoi(optarg); break;
        case 'k': j.p.top_k = (uint32_t)atoi(optarg); break;
        case 'H': j.p.hidden = (uint32_t)atoi(optarg); break;
        case 't': j.tokens = (uint32_t)atoi(optarg); break;
        case 'b': j.batches = (uint32_t)atoi(optarg); break;
        case 'B': j.p.dtype = TE_MOE_BF16; break;
        case 'p': procs = 1; break;
        case 'n': j.p.mode = TE_MOE_NAIVE; break;
        case 'R': j.routing = !strcmp(optarg, "one") ? ROUTE_ONE_EXPERT
                             : !strcmp(optarg, "empty") ? ROUTE_EMPTY_RANKS
                             : !strcmp(optarg, "bad") ? ROUTE_BAD_ID : ROUTE_RANDOM; break;
        case 'f': j.faults = optarg; break;
        case 'P': j.p.private_tokens = (uint32_t)atoi(optarg); break;
        case 'C': j.p.overflow_tokens = (uint32_t)atoi(optarg); break;
        case 'K': if (sscanf(optarg, "%d:%d", &j.kill_rank, &j.kill_batch) != 2) return 2; break;
        case 'W': j.warmup = (uint32_t)atoi(optarg); break;
        case 'F': j.tokens = 4096; break;
        case 'S': if (sscanf(optarg, "%d:%d", &j.kill_rank, &j.kill_batch) != 2) return 2;
                  j.stall = 1; break;
        case 'T': j.p.timeout_ms = atoi(optarg); break;
        case 'c': j.check = 1; break;
        default: usage(); return 2;
        }
    }
    j.p.max_tokens = j.tokens ? j.tokens : 1;
    struct moe_result res;
    if (!bench) {
        int rc = procs ? moe_run_procs(&j, &res) : moe_run_threads(&j, &res);
        if (j.kill_rank >= 0) {
            uint32_t others = j.p.ranks - 1;
            printf("te-moe: rank %d %s in batch %d: %d of %u other ranks failed that batch: %s\n",
                   j.kill_rank, j.stall ? "stalled" : "killed", j.kill_batch,
                   res.failed_in_kill_batch, others, res.msg);
            free(res.dispatch_us), free(res.combine_us);
            return (uint32_t)res.failed_in_kill_batch == others &&
                   (uint32_t)res.failed_ranks == others ? 0 : 1;
        }
        printf("te-moe: %s R=%u E=%u K=%u hidden=%u %s tokens=%u batches=%u: %s\n",
               procs ? "processes" : "threads", j.p.ranks, j.p.experts, j.p.top_k, j.p.hidden,
               j.p.dtype ? "bf16" : "fp32", j.tokens, j.batches, rc ? res.msg : "equal to the reference");
        printf("te-moe: writes per peer: dispatch <= %u, combine %u..%u\n",
               res.max_dispatch_writes, res.min_combine_writes, res.max_combine_writes);
        free(res.dispatch_us), free(res.combine_us);
        return rc ? 1 : 0;
    }
    printf("# R=%u E=%u K=%u hidden=%u tokens/rank=%u batches=%u (+%u warm-up), loopback, threads\n",
           j.p.ranks, j.p.experts, j.p.top_k, j.p.hidden, j.tokens, j.batches, j.warmup);
    printf("%-12s %10s %10s %10s %10s %8s\n", "mode", "disp_p50", "disp_p99", "comb_p50",
           "comb_p99", "writes/peer");
    double d50[2] = {0};
    j.interleave = 1;
    if (moe_run_threads(&j, &res)) {
        fprintf(stderr, "te-moe bench: %s\n", res.msg);
        return 1;
    }
    for (int mode = 0; mode < 2; mode++) {
        double *dv = res.dispatch_us + mode * j.batches, *cv = res.combine_us + mode * j.batches;
        double dp50 = pct(dv, j.batches, 0.5), dp99 = pct(dv, j.batches, 0.99);
        double cp50 = pct(cv, j.batches, 0.5), cp99 = pct(cv, j.batches, 0.99);
        d50[mode] = dp50;
        printf("%-12s %10.1f %10.1f %10.1f %10.1f %8u\n", mode ? "naive" : "speculative", dp50,
               dp99, cp50, cp99, mode ? res.max_dispatch_writes_naive : res.max_dispatch_writes);
    }
    free(res.dispatch_us), free(res.combine_us);
    printf("dispatch p50 ratio speculative/naive: %.3f\n", d50[0] / d50[1]);
    return 0;
}
