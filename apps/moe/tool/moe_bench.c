/* See moe_bench.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_bench.h"
#include "moe_job.h"

#define WARMUP 2

/* What one measurement (one protocol, `batches` batches) gives. */
struct measured {
    char transport[256];            /* moe_job_describe */
    double dispatch[2], combine[2]; /* p50, p99 over ranks x batches (us) */
    double pack, post, experts;     /* p50 of the parts (us) */
    double writes_avg, bytes_avg;   /* dispatch, per peer per batch */
    uint32_t writes_max;
    double combine_writes_avg, combine_bytes_avg;
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, size_t n, int p)
{
    qsort(v, n, sizeof(double), cmp_double);
    size_t k = n * (size_t)p / 100;
    return v[k < n ? k : n - 1];
}

static int measure(te_moe_config c, int naive, uint32_t batches,
                   const char *const *sets, struct measured *m)
{
    c.naive = (uint32_t)naive;
    struct moe_job j;
    if (moe_job_open(&j, &c, sets)) {
        moe_job_close(&j);
        return 1;
    }
    uint32_t tok[TE_MOE_MAX_RANKS];
    for (uint32_t i = 0; i < c.ranks; i++)
        tok[i] = c.max_tokens;
    moe_job_inputs(&j, tok, 42, 0);
    memset(m, 0, sizeof(*m));
    moe_job_describe(&j, m->transport, sizeof(m->transport));
    size_t n = (size_t)batches * c.ranks, k = 0;
    double *v[5];
    for (int i = 0; i < 5; i++)
        v[i] = calloc(n ? n : 1, sizeof(double));
    double peers = 0, writes = 0, bytes = 0, cwrites = 0, cbytes = 0;
    int rc = 0;
    for (uint32_t b = 0; b < batches + WARMUP && !rc; b++) {
        rc = moe_job_batch(&j, b);
        if (rc || b < WARMUP)
            continue;
        for (uint32_t i = 0; i < c.ranks; i++) {
            te_moe_stats st;
            te_moe_rank_stats(j.r[i], &st);
            v[0][k] = st.dispatch_us;
            v[1][k] = st.combine_us;
            v[2][k] = st.pack_us;
            v[3][k] = st.post_us;
            v[4][k++] = st.experts_us;
            for (uint32_t d = 0; d < c.ranks; d++) {
                if (d == i)
                    continue;
                peers++;
                writes += st.dispatch_writes[d];
                bytes += (double)st.dispatch_bytes[d];
                cwrites += st.combine_writes[d];
                cbytes += (double)st.combine_bytes[d];
                if (st.dispatch_writes[d] > m->writes_max)
                    m->writes_max = st.dispatch_writes[d];
            }
        }
    }
    if (rc)
        fprintf(stderr, "te-moe bench: %s batch failed: %s\n",
                naive ? "naive" : "protocol", j.why[0]);
    else if (k) {
        m->dispatch[0] = pct(v[0], k, 50);
        m->dispatch[1] = pct(v[0], k, 99);
        m->combine[0] = pct(v[1], k, 50);
        m->combine[1] = pct(v[1], k, 99);
        m->pack = pct(v[2], k, 50);
        m->post = pct(v[3], k, 50);
        m->experts = pct(v[4], k, 50);
    }
    if (peers > 0) {
        m->writes_avg = writes / peers;
        m->bytes_avg = bytes / peers;
        m->combine_writes_avg = cwrites / peers;
        m->combine_bytes_avg = cbytes / peers;
    }
    for (int i = 0; i < 5; i++)
        free(v[i]);
    moe_job_close(&j);
    return rc ? 1 : 0;
}

static void print_one(const te_moe_config *c, uint32_t batches, uint32_t rep,
                      const struct measured *p, const struct measured *n)
{
    printf("{\"repeat\": %u, \"transport\": \"%s\", \"ranks\": %u, \"experts\": %u, \"topk\": %u, "
           "\"hidden\": %u, \"tokens\": %u, \"private_rows\": %u, "
           "\"dtype\": \"%s\", \"batches\": %u, "
           "\"dispatch_p50_us\": %.1f, \"dispatch_p99_us\": %.1f, "
           "\"pack_p50_us\": %.1f, \"post_p50_us\": %.1f, "
           "\"combine_p50_us\": %.1f, \"combine_p99_us\": %.1f, "
           "\"experts_p50_us\": %.1f, "
           "\"dispatch_writes_per_peer\": %.2f, \"dispatch_writes_per_peer_max\": %u, "
           "\"dispatch_bytes_per_peer\": %.0f, \"combine_writes_per_peer\": %.2f, "
           "\"combine_bytes_per_peer\": %.0f, "
           "\"naive_dispatch_p50_us\": %.1f, \"naive_dispatch_p99_us\": %.1f, "
           "\"naive_pack_p50_us\": %.1f, \"naive_post_p50_us\": %.1f, "
           "\"naive_combine_p50_us\": %.1f, \"naive_dispatch_writes_per_peer\": %.2f, "
           "\"dispatch_vs_naive\": %.3f}\n",
           rep, p->transport, c->ranks, c->experts, c->topk, c->hidden, c->max_tokens,
           c->private_rows, c->dtype == TE_MOE_BF16 ? "bf16" : "fp32", batches,
           p->dispatch[0], p->dispatch[1], p->pack, p->post, p->combine[0],
           p->combine[1], p->experts, p->writes_avg, p->writes_max,
           p->bytes_avg, p->combine_writes_avg, p->combine_bytes_avg,
           n->dispatch[0], n->dispatch[1], n->pack, n->post, n->combine[0],
           n->writes_avg, p->dispatch[0] / n->dispatch[0]);
    fflush(stdout);
}

static double median(double *v, uint32_t n) { return pct(v, n, 50); }

int moe_bench(const te_moe_config *c, uint32_t batches, uint32_t repeat,
              const char *const *settings)
{
    double *pd = calloc(repeat, sizeof(double));
    double *nd = calloc(repeat, sizeof(double));
    double *ratio = calloc(repeat, sizeof(double));
    double *pc = calloc(repeat, sizeof(double));
    int rc = !pd || !nd || !ratio || !pc;
    for (uint32_t r = 0; r < repeat && !rc; r++) {
        struct measured p, n;
        /* Alternate which goes first, so neither always gets the colder
         * (or warmer) machine. */
        if (r % 2 == 0)
            rc = measure(*c, 0, batches, settings, &p) ||
                 measure(*c, 1, batches, settings, &n);
        else
            rc = measure(*c, 1, batches, settings, &n) ||
                 measure(*c, 0, batches, settings, &p);
        if (rc)
            break;
        print_one(c, batches, r + 1, &p, &n);
        pd[r] = p.dispatch[0];
        nd[r] = n.dispatch[0];
        pc[r] = p.combine[0];
        ratio[r] = p.dispatch[0] / n.dispatch[0];
    }
    if (!rc && repeat > 1) {
        double a = median(pd, repeat), b = median(nd, repeat);
        printf("{\"summary\": true, \"repeats\": %u, "
               "\"dispatch_p50_us_median\": %.1f, "
               "\"naive_dispatch_p50_us_median\": %.1f, "
               "\"combine_p50_us_median\": %.1f, "
               "\"ratio_of_medians\": %.3f, \"median_ratio\": %.3f}\n",
               repeat, a, b, median(pc, repeat), a / b,
               median(ratio, repeat));
    }
    free(pd);
    free(nd);
    free(ratio);
    free(pc);
    return rc;
}
