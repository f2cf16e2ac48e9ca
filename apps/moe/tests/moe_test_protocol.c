/*
 * moe_protocol: ranks as engines (threads) of one process on loopback.
 * Every case compares every output element with the dense reference and
 * asserts the writes per peer (<= 2 dispatch, exactly 1 combine), counted
 * where te-moe submits them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/moe_harness.h"

static int failures;

static struct moe_job job(uint32_t R, uint32_t E, uint32_t K, uint32_t H, uint32_t T)
{
    struct moe_job j = {.p = {.ranks = R, .experts = E, .top_k = K, .hidden = H,
                              .max_tokens = T ? T : 1, .timeout_ms = 5000},
                        .tokens = T, .batches = 2, .check = 1, .faults = "",
                        .kill_rank = -1, .kill_batch = -1};
    return j;
}

/* Runs j; expect_ok: all equal to the reference with the write bounds;
 * else the run must fail with `want` in the message on every rank. */
static void run(const char *name, const struct moe_job *j, int expect_ok, const char *want)
{
    struct moe_result r;
    int rc = moe_run_threads(j, &r);
    int ok;
    if (expect_ok)
        ok = rc == 0 && r.mismatched == 0 && r.max_dispatch_writes <= 2 &&
             (j->p.ranks == 1 || (r.max_combine_writes == 1 && r.min_combine_writes == 1));
    else
        ok = rc != 0 && strstr(r.msg, want) && r.failed_ranks == (int)j->p.ranks;
    printf("%s %s: rc=%d dispatch<=%u combine=%u..%u failed_ranks=%d %s\n", ok ? "PASS" : "FAIL",
           name, rc, r.max_dispatch_writes, r.min_combine_writes, r.max_combine_writes,
           r.failed_ranks, r.msg);
    failures += !ok;
    free(r.dispatch_us), free(r.combine_us);
}

int main(void)
{
    static const uint32_t ranks[] = {2, 4, 8, 16}, topk[] = {1, 2, 8};
    char name[96];
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 3; b++) {
            struct moe_job j = job(ranks[a], 32, topk[b], 32, 12);
            j.p.dtype = (a + b) % 2 ? TE_MOE_BF16 : TE_MOE_F32;
            snprintf(name, sizeof(name), "R=%u K=%u %s", ranks[a], topk[b],
                     j.p.dtype ? "bf16" : "fp32");
            run(name, &j, 1, NULL);
        }
    struct moe_job j = job(4, 16, 2, 64, 24);
    j.routing = ROUTE_ONE_EXPERT; /* every token of every rank to expert 0 */
    j.p.overflow_tokens = 4 * 24 * 2; /* room for all of it */
    run("skew: all tokens to one expert (overflow write used)", &j, 1, NULL);
    j.routing = ROUTE_EMPTY_RANKS;
    j.p.overflow_tokens = 0;
    run("skew: odd ranks receive nothing", &j, 1, NULL);
    j = job(4, 16, 2, 64, 0);
    run("zero tokens", &j, 1, NULL);
    j = job(4, 16, 8, 64, 16);
    j.faults = "[loopback]\nfault_reorder = true\nfault_delay_us = 200\n";
    j.batches = 4;
    run("loopback reordering + 200 us delay", &j, 1, NULL);
    j = job(4, 16, 2, 64, 16);
    j.p.mode = TE_MOE_NAIVE;
    struct moe_result r;
    int rc = moe_run_threads(&j, &r);
    int ok = rc == 0 && r.mismatched == 0 && r.max_dispatch_writes > 2;
    printf("%s naive exchange: equal to the reference, %u writes to one peer\n",
           ok ? "PASS" : "FAIL", r.max_dispatch_writes);
    failures += !ok;
    free(r.dispatch_us), free(r.combine_us);
    /* Bad input: every rank fails the batch with the cause. */
    j = job(4, 16, 2, 64, 16);
    j.routing = ROUTE_BAD_ID;
    run("expert id out of range", &j, 0, "out of range");
    j = job(4, 16, 2, 64, 24);
    j.routing = ROUTE_ONE_EXPERT;
    j.p.private_tokens = 4;
    j.p.overflow_tokens = 20;
    run("overflow of the receive buffers caught before writing", &j, 0, "overflow capacity");
    j = job(2, 8, 2, 64, 8);
    j.hidden_of_rank1 = 128;
    run("hidden size mismatch at setup", &j, 0, "hidden");
    printf("%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
