/* Runs R te-moe ranks (threads of one process, or processes) on loopback
 * engines and checks every batch against te_moe_reference(). Shared by
 * te-moe and the tests. */
#ifndef TE_MOE_HARNESS_H
#define TE_MOE_HARNESS_H
#include <stdint.h>
#include "te/moe.h"

enum moe_routing { ROUTE_RANDOM = 0, ROUTE_ONE_EXPERT = 1, ROUTE_EMPTY_RANKS = 2, ROUTE_BAD_ID = 3 };

struct moe_job {
    te_moe_params p;       /* ranks, experts, top_k, hidden, dtype, sizes, mode */
    uint32_t tokens;       /* tokens per rank per batch */
    uint32_t batches, warmup;
    uint32_t routing;      /* enum moe_routing */
    uint32_t check;        /* compare with the reference */
    const char *faults;    /* extra INI text for every engine ("" = none) */
    int kill_rank, kill_batch; /* processes: that rank exits before combining that batch */
    int interleave;        /* threads: also a naive-mode state, batches alternating */
    int stall;             /* with kill_*: the rank stays alive but silent past the deadline */
    int hidden_of_rank1;   /* != 0: rank 1 claims this hidden (mismatch test) */
};

struct moe_result {
    int rc;                /* 0 when every rank passed every batch */
    char msg[512];
    uint32_t max_dispatch_writes, max_combine_writes, min_combine_writes;
    uint32_t max_dispatch_writes_naive; /* interleave: the naive state's */
    uint64_t mismatched;   /* output elements differing from the reference */
    double *dispatch_us, *combine_us; /* [modes][batches] rank 0's times (caller frees) */
    int failed_ranks;      /* ranks whose batch failed (kill test) */
    int failed_in_kill_batch; /* of those, ranks that failed batch kill_batch */
};

int moe_run_threads(const struct moe_job *job, struct moe_result *res);
int moe_run_procs(const struct moe_job *job, struct moe_result *res);

#endif
