/*
 * te-moe: MoE dispatch/combine over TransferEngine (docs/moe.md).
 *
 *   te-moe run   [options]  R ranks as engines in this process, B batches,
 *                           every result compared with the dense reference
 *   te-moe bench [options]  dispatch and combine latency (p50/p99 over the
 *                           ranks and batches) of the protocol and of the
 *                           naive exchange (one write per row after the
 *                           counts), measured in the same run
 * Options: --ranks R (8) --experts E (256) --topk K (8) --hidden H (7168)
 * --tokens T (128 per rank) --private P (rows per source taken at once;
 * default T/R*2) --batches B (run 3, bench 20) --bf16 --skew
 * --timeout-ms MS (deadline of every phase; prefill shapes need more than 5 s here)
 * --set section.key=value (every engine).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_job.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* p50/p99 of dispatch and combine over every rank and measured batch. */
static int measure(te_moe_config c, int naive, uint32_t batches,
                   const char *const *sets, double out[4])
{
    c.naive = (uint32_t)naive;
    struct moe_job j;
    if (moe_job_open(&j, &c, sets))
        return 1;
    uint32_t tok[TE_MOE_MAX_RANKS];
    for (uint32_t i = 0; i < c.ranks; i++)
        tok[i] = c.max_tokens;
    moe_job_inputs(&j, tok, 42, 0);
    size_t n = (size_t)batches * c.ranks, k = 0;
    double *d = calloc(n, sizeof(double)), *cb = calloc(n, sizeof(double));
    int rc = 0;
    for (uint32_t b = 0; b < batches + 2 && !rc; b++) {
        rc = moe_job_batch(&j, b);
        if (b < 2)
            continue; /* warm-up */
        for (uint32_t i = 0; i < c.ranks; i++) {
            te_moe_stats st;
            te_moe_rank_stats(j.r[i], &st);
            d[k] = st.dispatch_us;
            cb[k++] = st.combine_us;
        }
    }
    if (rc)
        fprintf(stderr, "te-moe bench: %s\n", j.why[0]);
    qsort(d, k, sizeof(double), cmp_double);
    qsort(cb, k, sizeof(double), cmp_double);
    out[0] = d[k / 2];
    out[1] = d[k * 99 / 100];
    out[2] = cb[k / 2];
    out[3] = cb[k * 99 / 100];
    free(d);
    free(cb);
    moe_job_close(&j);
    return rc;
}

int main(int argc, char **argv)
{
    te_moe_config c = {.ranks = 8, .experts = 256, .topk = 8, .hidden = 7168,
                       .dtype = TE_MOE_FP32, .max_tokens = 128,
                       .weights_seed = 1};
    uint32_t batches = 0, skew = 0;
    int have_private = 0;
    const char *sets[33] = {0};
    int nsets = 0;
    if (argc < 2 || (strcmp(argv[1], "run") && strcmp(argv[1], "bench"))) {
        fprintf(stderr, "usage: te-moe run|bench [options] (docs/moe.md)\n");
        return 2;
    }
    int bench = !strcmp(argv[1], "bench");
    static const struct option lo[] = {
        {"ranks", 1, 0, 'r'}, {"experts", 1, 0, 'e'}, {"topk", 1, 0, 'k'},
        {"hidden", 1, 0, 'h'}, {"tokens", 1, 0, 't'}, {"private", 1, 0, 'p'},
        {"batches", 1, 0, 'b'}, {"bf16", 0, 0, 'B'}, {"skew", 0, 0, 's'},
        {"set", 1, 0, 'S'}, {"timeout-ms", 1, 0, 'T'}, {0, 0, 0, 0}};
    int o;
    optind = 2;
    while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (o) {
        case 'r': c.ranks = (uint32_t)atoi(optarg); break;
        case 'e': c.experts = (uint32_t)atoi(optarg); break;
        case 'k': c.topk = (uint32_t)atoi(optarg); break;
        case 'h': c.hidden = (uint32_t)atoi(optarg); break;
        case 't': c.max_tokens = (uint32_t)atoi(optarg); break;
        case 'p': c.private_rows = (uint32_t)atoi(optarg); have_private = 1; break;
        case 'b': batches = (uint32_t)atoi(optarg); break;
        case 'B': c.dtype = TE_MOE_BF16; break;
        case 's': skew = 1; break;
        case 'S': if (nsets < 32) sets[nsets++] = optarg; break;
        case 'T': c.timeout_ms = atoi(optarg); break; /* prefill batches take seconds here */
        default: return 2;
        }
    }
    if (!have_private) {
        c.private_rows = c.max_tokens * 2 / (c.ranks ? c.ranks : 1);
        if (c.private_rows > c.max_tokens)
            c.private_rows = c.max_tokens;
    }
    if (!batches)
        batches = bench ? 20 : 3;
    if (bench) {
        double p[4], n[4];
        if (measure(c, 0, batches, sets, p) || measure(c, 1, batches, sets, n))
            return 1;
        printf("{\"ranks\": %u, \"experts\": %u, \"topk\": %u, \"hidden\": %u, "
               "\"tokens\": %u, \"private_rows\": %u, \"dtype\": \"%s\", "
               "\"batches\": %u, \"dispatch_p50_us\": %.1f, \"dispatch_p99_us\": "
               "%.1f, \"combine_p50_us\": %.1f, \"combine_p99_us\": %.1f, "
               "\"naive_dispatch_p50_us\": %.1f, \"naive_dispatch_p99_us\": "
               "%.1f, \"naive_combine_p50_us\": %.1f, \"dispatch_vs_naive\": "
               "%.3f}\n", c.ranks, c.experts, c.topk, c.hidden, c.max_tokens,
               c.private_rows, c.dtype == TE_MOE_BF16 ? "bf16" : "fp32",
               batches, p[0], p[1], p[2], p[3], n[0], n[1], n[2], p[0] / n[0]);
        return 0;
    }
    struct moe_job j;
    if (moe_job_open(&j, &c, sets))
        return 1;
    uint32_t tok[TE_MOE_MAX_RANKS];
    int ok = 1;
    for (uint32_t b = 0; b < batches; b++) {
        for (uint32_t i = 0; i < c.ranks; i++)
            tok[i] = c.max_tokens - (uint32_t)((b * 7 + i * 13) % (c.max_tokens / 2 + 1));
        moe_job_inputs(&j, tok, b + 1, skew);
        int rc = moe_job_batch(&j, b);
        uint64_t bad = rc ? 0 : moe_job_check(&j);
        te_moe_stats st;
        te_moe_rank_stats(j.r[0], &st);
        printf("batch %u: %s, %llu values differ from the reference; rank 0: "
               "dispatch %.0f us, combine %.0f us\n", b, rc ? j.why[0] : "ok",
               (unsigned long long)bad, st.dispatch_us, st.combine_us);
        ok &= !rc && !bad;
    }
    moe_job_close(&j);
    printf("%s\n", ok ? "te-moe run: OK" : "te-moe run: FAILED");
    return ok ? 0 : 1;
}
