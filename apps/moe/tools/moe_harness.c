/*
 * The harness of te-moe and the tests: R loopback engines (one per rank),
 * deterministic inputs, every batch compared with the dense reference.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "moe_harness.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 32);
}

/* Inputs of (batch, rank): tokens, expert ids and weights. */
static void make_inputs(const struct moe_job *j, uint32_t batch, uint32_t rank, void *x,
                        uint32_t *ids, float *w)
{
    const te_moe_params *p = &j->p;
    uint64_t seed = mix(((uint64_t)batch << 32) ^ rank ^ 0x1234);
    for (size_t i = 0; i < (size_t)j->tokens * p->hidden; i++) {
        float f = (float)(mix(seed + i) >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
        if (p->dtype == TE_MOE_F32)
            ((float *)x)[i] = f;
        else
            ((uint16_t *)x)[i] = te_moe_f32_to_bf16(f);
    }
    uint32_t epr = p->experts / p->ranks;
    for (size_t i = 0; i < (size_t)j->tokens * p->top_k; i++) {
        uint64_t r = mix(seed ^ (i * 0x9E3779B97F4A7C15ull));
        uint32_t e = (uint32_t)(r % p->experts);
        if (j->routing == ROUTE_ONE_EXPERT)
            e = 0;
        else if (j->routing == ROUTE_EMPTY_RANKS) /* only even ranks own used experts */
            e = (uint32_t)(((r % ((p->ranks + 1) / 2)) * 2) * epr + (r >> 20) % epr);
        else if (j->routing == ROUTE_BAD_ID && rank == 1 && i == 3)
            e = p->experts + 7;
        ids[i] = e;
        w[i] = (float)(r >> 44) / (float)(1u << 20);
    }
}

struct rank_ctx {
    const struct moe_job *job;
    uint32_t rank;
    te_moe_allgather_fn ag;
    void *ag_arg;
    int rc;
    char msg[320];
    uint32_t max_d, max_c, min_c, max_d_naive;
    uint64_t mismatched;
    double *dus, *cus;
};

static int rank_main(struct rank_ctx *c)
{
    const struct moe_job *j = c->job;
    te_config *cfg = te_config_new();
    te_engine *e = NULL;
    te_moe *m = NULL;
    int rc = te_config_set(cfg, "engine", "plugin", "loopback");
    if (!rc && j->faults && j->faults[0])
        rc = te_config_load_string(cfg, j->faults);
    if (!rc)
        rc = te_engine_create(cfg, &e);
    te_config_free(cfg);
    if (rc) {
        snprintf(c->msg, sizeof(c->msg), "rank %u engine: %s", c->rank, te_last_error());
        return c->rc = rc;
    }
    te_moe_params p = j->p;
    p.rank = c->rank;
    if (j->hidden_of_rank1 && c->rank == 1)
        p.hidden = (uint32_t)j->hidden_of_rank1;
    rc = te_moe_create(e, &p, c->ag, c->ag_arg, &m);
    if (rc) {
        snprintf(c->msg, sizeof(c->msg), "%s", te_moe_last_error());
        te_engine_destroy(e);
        return c->rc = rc;
    }
    size_t elt = p.dtype == TE_MOE_F32 ? 4 : 2, bytes = (size_t)j->tokens * p.hidden * elt;
    void *x = malloc(bytes + 1), *out = malloc(bytes + 1), *ref = malloc(bytes + 1);
    uint32_t *ids = malloc((size_t)j->tokens * p.top_k * 4 + 4);
    float *w = malloc((size_t)j->tokens * p.top_k * 4 + 4);
    c->min_c = UINT32_MAX;
    /* --interleave: a second rank state in naive mode on the same engines
     * (its own immediates), batches alternating between the two, so both
     * see the same machine load. */
    te_moe *ms[2] = {m, NULL};
    int nmodes = 1;
    if (j->interleave) {
        te_moe_params p2 = p;
        p2.mode = TE_MOE_NAIVE;
        p2.imm_base = 0x4e000000u;
        if ((rc = te_moe_create(e, &p2, c->ag, c->ag_arg, &ms[1])))
            snprintf(c->msg, sizeof(c->msg), "%s", te_moe_last_error());
        nmodes = 2;
    }
    for (uint32_t b = 0; b < j->warmup + j->batches && !rc; b++) {
      make_inputs(j, b, c->rank, x, ids, w);
      for (int mi = 0; mi < nmodes && !rc; mi++) {
        te_moe *mm = ms[mi];
        double t0 = now_us();
        rc = te_moe_dispatch(mm, j->tokens, x, ids);
        double t1 = now_us();
        if (!rc && j->kill_rank == (int)c->rank && j->kill_batch == (int)b) {
            if (j->stall) /* alive (sockets open) but silent past every deadline */
                usleep((useconds_t)(j->p.timeout_ms + 3000) * 1000u);
            _exit(3); /* dies mid-batch: after dispatch, before combine */
        }
        if (!rc)
            rc = te_moe_compute(mm);
        double t2 = now_us();
        if (!rc)
            rc = te_moe_combine(mm, w, out);
        double t3 = now_us();
        if (rc) {
            snprintf(c->msg, sizeof(c->msg), "rank %u batch %u: %s", c->rank, b,
                     te_moe_last_error());
            break;
        }
        te_moe_batch_stats st;
        te_moe_stats(mm, &st);
        if (mi == 1) {
            if (st.max_dispatch_writes > c->max_d_naive)
                c->max_d_naive = st.max_dispatch_writes;
        } else {
            if (st.max_dispatch_writes > c->max_d)
                c->max_d = st.max_dispatch_writes;
            if (st.max_combine_writes > c->max_c)
                c->max_c = st.max_combine_writes;
            if (st.min_combine_writes < c->min_c)
                c->min_c = st.min_combine_writes;
        }
        if (b >= j->warmup && c->dus) {
            c->dus[mi * j->batches + b - j->warmup] = t1 - t0;
            c->cus[mi * j->batches + b - j->warmup] = t3 - t2;
        }
        if (j->check) {
            te_moe_reference(p.experts, p.top_k, p.hidden, p.dtype, j->tokens, x, ids, w, ref);
            for (size_t i = 0; i < (size_t)j->tokens * p.hidden; i++)
                c->mismatched += memcmp((char *)out + i * elt, (char *)ref + i * elt, elt) != 0;
        }
      }
    }
    te_moe_destroy(ms[1]);
    free(x), free(out), free(ref), free(ids), free(w);
    te_moe_destroy(m);
    te_engine_destroy(e);
    if (!rc && c->mismatched) {
        snprintf(c->msg, sizeof(c->msg), "rank %u: %llu elements differ from the reference",
                 c->rank, (unsigned long long)c->mismatched);
        rc = -EDOM;
    }
    return c->rc = rc;
}

static void collect(const struct moe_job *j, struct rank_ctx *cs, struct moe_result *res)
{
    res->min_combine_writes = UINT32_MAX;
    for (uint32_t r = 0; r < j->p.ranks; r++) {
        struct rank_ctx *c = &cs[r];
        if (c->rc) {
            char tag[32];
            snprintf(tag, sizeof(tag), "batch %d:", j->kill_batch);
            res->failed_ranks++;
            res->failed_in_kill_batch += j->kill_batch >= 0 && strstr(c->msg, tag) != NULL;
            if (!res->rc) {
                res->rc = c->rc;
                snprintf(res->msg, sizeof(res->msg), "%s", c->msg);
            }
        }
        if (c->max_d > res->max_dispatch_writes)
            res->max_dispatch_writes = c->max_d;
        if (c->max_c > res->max_combine_writes)
            res->max_combine_writes = c->max_c;
        if (c->min_c < res->min_combine_writes)
            res->min_combine_writes = c->min_c;
        res->mismatched += c->mismatched;
        if (c->max_d_naive > res->max_dispatch_writes_naive)
            res->max_dispatch_writes_naive = c->max_d_naive;
    }
}

/* ------------------------------------------------------------ threads */

struct thread_ag {
    pthread_barrier_t bar;
    uint8_t *buf;
};

struct thread_arg {
    struct rank_ctx ctx;
    struct thread_ag *g;
};

static int tag(const void *mine, size_t len, void *all, void *arg)
{
    struct thread_arg *t = arg;
    struct thread_ag *g = t->g;
    if (len > 8192)
        return -EMSGSIZE;
    pthread_barrier_wait(&g->bar);
    memcpy(g->buf + t->ctx.rank * len, mine, len);
    pthread_barrier_wait(&g->bar);
    memcpy(all, g->buf, len * t->ctx.job->p.ranks);
    pthread_barrier_wait(&g->bar);
    return 0;
}

static void *thread_main(void *arg)
{
    struct thread_arg *t = arg;
    rank_main(&t->ctx);
    return NULL;
}

int moe_run_threads(const struct moe_job *j, struct moe_result *res)
{
    uint32_t R = j->p.ranks;
    memset(res, 0, sizeof(*res));
    struct thread_ag g;
    pthread_barrier_init(&g.bar, NULL, R);
    g.buf = calloc(R, 8192); /* the setup blob is under 8 KiB */
    struct thread_arg *ts = calloc(R, sizeof(*ts));
    pthread_t *th = calloc(R, sizeof(*th));
    res->dispatch_us = calloc(2 * j->batches + 1, sizeof(double));
    res->combine_us = calloc(2 * j->batches + 1, sizeof(double));
    for (uint32_t r = 0; r < R; r++) {
        ts[r].g = &g;
        ts[r].ctx = (struct rank_ctx){.job = j, .rank = r, .ag = tag, .ag_arg = &ts[r]};
        if (r == 0) {
            ts[r].ctx.dus = res->dispatch_us;
            ts[r].ctx.cus = res->combine_us;
        }
        pthread_create(&th[r], NULL, thread_main, &ts[r]);
    }
    for (uint32_t r = 0; r < R; r++)
        pthread_join(th[r], NULL);
    struct rank_ctx *cs = calloc(R, sizeof(*cs));
    for (uint32_t r = 0; r < R; r++)
        cs[r] = ts[r].ctx;
    collect(j, cs, res);
    pthread_barrier_destroy(&g.bar);
    free(g.buf), free(ts), free(th), free(cs);
    return res->rc;
}

/* ------------------------------------------------------------ processes */

static int xfer(int fd, void *b, size_t n, int out)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = out ? write(fd, (char *)b + done, n - done) : read(fd, (char *)b + done, n - done);
        if (r <= 0)
            return -EIO;
        done += (size_t)r;
    }
    return 0;
}

/* Child side: send ours to the parent (the hub), receive everyone's. */
static uint32_t g_proc_ranks; /* in a child: the number of ranks */

static int proc_allgather(const void *mine, size_t len, void *all, void *arg)
{
    int fd = (int)(intptr_t)arg;
    uint64_t l = len;
    if (xfer(fd, &l, 8, 1) || xfer(fd, (void *)mine, len, 1))
        return -EIO;
    return xfer(fd, all, len * g_proc_ranks, 0);
}

struct proc_report {
    int32_t rc;
    uint32_t max_d, max_c, min_c;
    uint64_t mismatched;
    char msg[320];
};

int moe_run_procs(const struct moe_job *j, struct moe_result *res)
{
    uint32_t R = j->p.ranks;
    memset(res, 0, sizeof(*res));
    int *fds = calloc(R, sizeof(int));
    pid_t *pids = calloc(R, sizeof(pid_t));
    for (uint32_t r = 0; r < R; r++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
            return -errno;
        pid_t pid = fork();
        if (pid == 0) {
            close(sv[0]);
            for (uint32_t i = 0; i < r; i++)
                close(fds[i]);
            struct rank_ctx c = {.job = j, .rank = r, .ag = proc_allgather};
            g_proc_ranks = R;
            c.ag_arg = (void *)(intptr_t)sv[1];
            rank_main(&c);
            struct proc_report rep = {c.rc, c.max_d, c.max_c, c.min_c, c.mismatched, ""};
            snprintf(rep.msg, sizeof(rep.msg), "%s", c.msg);
            xfer(sv[1], &rep, sizeof(rep), 1);
            _exit(0);
        }
        close(sv[1]);
        fds[r] = sv[0];
        pids[r] = pid;
    }
    /* Hub of the setup exchange. */
    uint64_t len = 0;
    uint8_t *all = NULL;
    int rc = 0;
    for (uint32_t r = 0; r < R && !rc; r++) {
        uint64_t l;
        if (xfer(fds[r], &l, 8, 0) || l > 65536 || (len && l != len)) {
            rc = -EIO;
            break;
        }
        len = l;
        if (!all)
            all = calloc(R, len);
        rc = xfer(fds[r], all + r * len, len, 0);
    }
    for (uint32_t r = 0; r < R && !rc; r++)
        rc = xfer(fds[r], all, len * R, 1);
    struct rank_ctx *cs = calloc(R, sizeof(*cs));
    for (uint32_t r = 0; r < R; r++) {
        struct proc_report rep;
        if (rc || xfer(fds[r], &rep, sizeof(rep), 0)) {
            cs[r].rc = -ECONNRESET;
            snprintf(cs[r].msg, sizeof(cs[r].msg), "rank %u died", r);
            if (j->kill_rank == (int)r)
                cs[r].rc = 0; /* the rank we killed on purpose */
            continue;
        }
        cs[r].rc = rep.rc;
        cs[r].max_d = rep.max_d, cs[r].max_c = rep.max_c, cs[r].min_c = rep.min_c;
        cs[r].mismatched = rep.mismatched;
        snprintf(cs[r].msg, sizeof(cs[r].msg), "%s", rep.msg);
    }
    for (uint32_t r = 0; r < R; r++) {
        close(fds[r]);
        waitpid(pids[r], NULL, 0);
    }
    collect(j, cs, res);
    if (rc && !res->rc) {
        res->rc = rc;
        snprintf(res->msg, sizeof(res->msg), "setup exchange between processes failed");
    }
    free(all), free(cs), free(fds), free(pids);
    return res->rc;
}
