/* See moe_bench.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_bench.h"
#include "moe_job.h"

#define WARMUP 2
#define NV 7

/* What one measurement (one protocol, `batches` batches) gives. */
struct measured {
    char transport[256];            /* moe_job_describe */
    double dispatch[2], combine[2]; /* p50, p99 over ranks x batches (us) */
    double pack, post, experts;     /* p50 of the parts (us) */
    double arrival, layout;         /* p50: dispatch until every row is in,
                                       and its copy into te_moe_recv */
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

/* One protocol's job and its samples. */
struct side {
    struct moe_job j;
    int naive, opened;
    /* dispatch, combine, pack, post, experts, arrival (dispatch without
     * the layout copy), layout per rank-batch */
    double *v[NV];
    size_t k;
    double peers, writes, bytes, cwrites, cbytes;
    uint32_t writes_max;
};

/* s zeroed by the caller (so side_close works after any failure). */
static int side_open(struct side *s, te_moe_config c, int naive,
                     uint32_t batches, const char *const *sets, int inplace)
{
    s->naive = naive;
    c.naive = (uint32_t)naive;
    size_t n = (size_t)batches * c.ranks;
    for (int i = 0; i < NV; i++)
        if (!(s->v[i] = calloc(n ? n : 1, sizeof(double))))
            return 1;
    s->opened = 1;
    if (moe_job_open(&s->j, &c, sets))
        return 1;
    /* Index mode (no copy into per-expert buffers): the reference experts
     * read the rows where they arrived, as the library's own experts did
     * before the split; layout_us is then the indexing alone. */
    s->j.index = 1;
    s->j.inplace = inplace; /* the naive side: one write per row from x */
    uint32_t tok[TE_MOE_MAX_RANKS];
    for (uint32_t i = 0; i < c.ranks; i++)
        tok[i] = c.max_tokens;
    moe_job_inputs(&s->j, tok, 42, 0);
    return 0;
}

static int side_batch(struct side *s, uint32_t b)
{
    const te_moe_config *c = &s->j.c;
    if (moe_job_batch(&s->j, b)) {
        fprintf(stderr, "te-moe bench: %s batch %u failed: %s\n",
                s->naive ? "naive" : "protocol", b, s->j.why[0]);
        return 1;
    }
    if (b < WARMUP)
        return 0;
    for (uint32_t i = 0; i < c->ranks; i++) {
        te_moe_stats st;
        te_moe_rank_stats(s->j.r[i], &st);
        s->v[0][s->k] = st.dispatch_us;
        s->v[1][s->k] = st.combine_us;
        s->v[2][s->k] = st.pack_us;
        s->v[3][s->k] = st.post_us;
        s->v[4][s->k] = st.experts_us;
        s->v[5][s->k] = st.dispatch_us - st.layout_us;
        s->v[6][s->k++] = st.layout_us;
        for (uint32_t d = 0; d < c->ranks; d++) {
            if (d == i)
                continue;
            s->peers++;
            s->writes += st.dispatch_writes[d];
            s->bytes += (double)st.dispatch_bytes[d];
            s->cwrites += st.combine_writes[d];
            s->cbytes += (double)st.combine_bytes[d];
            if (st.dispatch_writes[d] > s->writes_max)
                s->writes_max = st.dispatch_writes[d];
        }
    }
    return 0;
}

static void side_result(struct side *s, struct measured *m)
{
    memset(m, 0, sizeof(*m));
    moe_job_describe(&s->j, m->transport, sizeof(m->transport));
    size_t k = s->k;
    if (k) {
        m->dispatch[0] = pct(s->v[0], k, 50);
        m->dispatch[1] = pct(s->v[0], k, 99);
        m->combine[0] = pct(s->v[1], k, 50);
        m->combine[1] = pct(s->v[1], k, 99);
        m->pack = pct(s->v[2], k, 50);
        m->post = pct(s->v[3], k, 50);
        m->experts = pct(s->v[4], k, 50);
        m->arrival = pct(s->v[5], k, 50);
        m->layout = pct(s->v[6], k, 50);
    }
    if (s->peers > 0) {
        m->writes_avg = s->writes / s->peers;
        m->bytes_avg = s->bytes / s->peers;
        m->combine_writes_avg = s->cwrites / s->peers;
        m->combine_bytes_avg = s->cbytes / s->peers;
    }
    m->writes_max = s->writes_max;
}

static void side_close(struct side *s)
{
    if (s->opened)
        moe_job_close(&s->j);
    for (int i = 0; i < NV; i++)
        free(s->v[i]);
}

/* The protocol and the naive exchange, batch by batch in turn (which goes
 * first alternates), so that both see the same machine: on a shared,
 * loaded machine, measuring one after the other compares two different
 * loads. */
static int measure(const te_moe_config *c, uint32_t batches,
                   const char *const *sets, int inplace, struct measured *p,
                   struct measured *n)
{
    struct side s[2];
    memset(s, 0, sizeof(s));
    int rc = side_open(&s[0], *c, 0, batches, sets, inplace) ||
             side_open(&s[1], *c, 1, batches, sets, inplace);
    for (uint32_t b = 0; !rc && b < batches + WARMUP; b++)
        rc = side_batch(&s[b % 2], b) || side_batch(&s[(b + 1) % 2], b);
    if (!rc) {
        side_result(&s[0], p);
        side_result(&s[1], n);
    }
    side_close(&s[0]);
    side_close(&s[1]);
    return rc;
}

static void print_one(const te_moe_config *c, uint32_t batches, uint32_t rep,
                      int inplace, const struct measured *p,
                      const struct measured *n)
{
    printf("{\"repeat\": %u, \"inplace\": %s, \"transport\": \"%s\", \"ranks\": %u, \"experts\": %u, \"topk\": %u, "
           "\"hidden\": %u, \"tokens\": %u, \"private_rows\": %u, "
           "\"dtype\": \"%s\", \"batches\": %u, "
           "\"dispatch_p50_us\": %.1f, \"dispatch_p99_us\": %.1f, "
           "\"pack_p50_us\": %.1f, \"post_p50_us\": %.1f, "
           "\"combine_p50_us\": %.1f, \"combine_p99_us\": %.1f, "
           "\"experts_p50_us\": %.1f, \"arrival_p50_us\": %.1f, "
           "\"layout_p50_us\": %.1f, \"naive_arrival_p50_us\": %.1f, "
           "\"dispatch_writes_per_peer\": %.2f, \"dispatch_writes_per_peer_max\": %u, "
           "\"dispatch_bytes_per_peer\": %.0f, \"combine_writes_per_peer\": %.2f, "
           "\"combine_bytes_per_peer\": %.0f, "
           "\"naive_dispatch_p50_us\": %.1f, \"naive_dispatch_p99_us\": %.1f, "
           "\"naive_pack_p50_us\": %.1f, \"naive_post_p50_us\": %.1f, "
           "\"naive_combine_p50_us\": %.1f, \"naive_dispatch_writes_per_peer\": %.2f, "
           "\"dispatch_vs_naive\": %.3f, \"arrival_vs_naive\": %.3f}\n",
           rep, inplace ? "true" : "false", p->transport, c->ranks, c->experts, c->topk, c->hidden, c->max_tokens,
           c->private_rows, c->dtype == TE_MOE_BF16 ? "bf16" : "fp32", batches,
           p->dispatch[0], p->dispatch[1], p->pack, p->post, p->combine[0],
           p->combine[1], p->experts, p->arrival, p->layout, n->arrival,
           p->writes_avg, p->writes_max,
           p->bytes_avg, p->combine_writes_avg, p->combine_bytes_avg,
           n->dispatch[0], n->dispatch[1], n->pack, n->post, n->combine[0],
           n->writes_avg, p->dispatch[0] / n->dispatch[0],
           p->arrival / n->arrival);
    fflush(stdout);
}

static double median(double *v, uint32_t n) { return pct(v, n, 50); }

int moe_bench(const te_moe_config *c, uint32_t batches, uint32_t repeat,
              const char *const *settings, int inplace)
{
    double *pd = calloc(repeat, sizeof(double));
    double *nd = calloc(repeat, sizeof(double));
    double *ratio = calloc(repeat, sizeof(double));
    double *pc = calloc(repeat, sizeof(double));
    double *aratio = calloc(repeat, sizeof(double));
    int rc = !pd || !nd || !ratio || !pc || !aratio;
    for (uint32_t r = 0; r < repeat && !rc; r++) {
        struct measured p, n;
        rc = measure(c, batches, settings, inplace, &p, &n);
        if (rc)
            break;
        print_one(c, batches, r + 1, inplace, &p, &n);
        pd[r] = p.dispatch[0];
        nd[r] = n.dispatch[0];
        pc[r] = p.combine[0];
        ratio[r] = p.dispatch[0] / n.dispatch[0];
        aratio[r] = p.arrival / n.arrival;
    }
    if (!rc && repeat > 1) {
        double a = median(pd, repeat), b = median(nd, repeat);
        printf("{\"summary\": true, \"repeats\": %u, "
               "\"dispatch_p50_us_median\": %.1f, "
               "\"naive_dispatch_p50_us_median\": %.1f, "
               "\"combine_p50_us_median\": %.1f, "
               "\"ratio_of_medians\": %.3f, \"median_ratio\": %.3f, "
               "\"arrival_median_ratio\": %.3f}\n",
               repeat, a, b, median(pc, repeat), a / b,
               median(ratio, repeat), median(aratio, repeat));
    }
    free(pd);
    free(nd);
    free(ratio);
    free(pc);
    free(aratio);
    return rc;
}
