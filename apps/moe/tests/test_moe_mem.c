/* te-moe memory backends (te/moe.h te_moe_rank_mem_ops) on the loopback
 * plugin. The backend here stands for device memory the CPU cannot read:
 * the caller's tensors (x, recv.x, y, out) are mapped PROT_NONE while the
 * library runs and opened only inside the backend's copy and wsum, so any
 * access by the library itself crashes the test. Results still equal the
 * dense reference bit for bit (R 2/4, top-k 1/2/8, fp32 and bf16, staged,
 * in place, index mode, private rows below the row count); bf16 expert
 * outputs give the bits of the same values as fp32; a failing
 * backend fails the batch on every rank, naming the step; bad backends and
 * changes at the wrong time are refused. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "moe_internal.h" /* white box: in_mr */
#include "moe_job.h"

/* One rank's tensors, each its own mapping (pages of no other buffer). */
struct guarded {
    void *x, *recv_x, *y, *out;
    size_t x_len, recv_len, y_len, out_len;
    /* the backend's ctx */
    int open;              /* the tensors are readable now (between calls) */
    uint32_t copies, wsums, syncs, from_x;
    int fail_step;         /* 1 copy, 2 wsum, 3 sync: return -EIO there */
    uint32_t copy_calls, fail_copy_call; /* fail that copy call (1 = first) */
    int inplace;           /* x is registered for in-place dispatch */
    int attach_rc, attached;
    uint32_t version;      /* of the backend (0: TE_MOE_MEM_OPS_VERSION) */
    uint32_t bf16_sums;    /* wsum calls handed bf16 rows */
};

static void *map(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    return p;
}

/* In place, x stays readable: the engine (standing for the NIC) reads it
 * for the span writes at any time until the batch ends. */
static void set_prot(struct guarded *g, int prot)
{
    ck_assert_int_eq(mprotect(g->x, g->x_len, g->inplace ? prot | PROT_READ
                                                          : prot), 0);
    ck_assert_int_eq(mprotect(g->recv_x, g->recv_len, prot), 0);
    ck_assert_int_eq(mprotect(g->y, g->y_len, prot), 0);
    ck_assert_int_eq(mprotect(g->out, g->out_len, prot), 0);
}

static int in_range(const void *p, const void *base, size_t len)
{
    return (const char *)p >= (const char *)base &&
           (const char *)p < (const char *)base + len;
}

/* What te/moe.h says the lists mean, written out here (not the library's
 * own host backend: the test checks the contract, not a copy of it). */
static void do_copies(const te_moe_copy_list *l)
{
    for (uint32_t i = 0; i < l->n; i++)
        memcpy(l->dst[i], l->src[i], l->bytes);
}

static void do_wsums(const te_moe_wsum_list *l)
{
    for (uint32_t i = 0; i < l->n; i++)
        for (uint32_t h = 0; h < l->hidden; h++) {
            float acc = 0;
            for (uint32_t f = l->first[i]; f < l->first[i + 1]; f++)
                acc += l->w[f] *
                       (l->src_dtype == TE_MOE_BF16
                            ? moe_ref_bf16_to_f32(((const uint16_t *)l->src[f])[h])
                            : ((const float *)l->src[f])[h]);
            l->dst[i][h] = acc;
        }
}

static int g_copy(void *ctx, const te_moe_copy_list *l)
{
    struct guarded *g = ctx;
    if (g->fail_step == 1 || ++g->copy_calls == g->fail_copy_call)
        return -EIO;
    set_prot(g, PROT_READ | PROT_WRITE);
    for (uint32_t i = 0; i < l->n; i++)
        g->from_x += (uint32_t)in_range(l->src[i], g->x, g->x_len);
    do_copies(l);
    set_prot(g, PROT_NONE);
    g->copies += l->n;
    return 0;
}

static int g_wsum(void *ctx, const te_moe_wsum_list *l)
{
    struct guarded *g = ctx;
    if (g->fail_step == 2)
        return -EIO;
    ck_assert(l->src_dtype == TE_MOE_FP32 || l->src_dtype == TE_MOE_BF16);
    g->bf16_sums += l->src_dtype == TE_MOE_BF16;
    set_prot(g, PROT_READ | PROT_WRITE);
    do_wsums(l);
    set_prot(g, PROT_NONE);
    g->wsums += l->n;
    return 0;
}

static int g_sync(void *ctx)
{
    struct guarded *g = ctx;
    g->syncs++;
    return g->fail_step == 3 ? -EIO : 0;
}

static const char *g_why(void *ctx)
{
    struct guarded *g = ctx;
    return g->fail_step || g->fail_copy_call || g->attach_rc ? "failed on purpose"
                                                             : "";
}

static int g_attach(void *ctx, void *area, size_t len)
{
    struct guarded *g = ctx;
    (void)area;
    (void)len;
    if (!g->attach_rc)
        g->attached++;
    return g->attach_rc;
}

static void g_detach(void *ctx, void *area, size_t len)
{
    struct guarded *g = ctx;
    (void)area;
    (void)len;
    g->attached--;
}

static te_moe_mem_ops ops_of(struct guarded *g)
{
    return (te_moe_mem_ops){.version = g->version ? g->version
                                                  : TE_MOE_MEM_OPS_VERSION,
                            .mem = TE_MEM_HOST, .ctx = g, .attach = g_attach,
                            .detach = g_detach, .copy = g_copy, .wsum = g_wsum,
                            .sync = g_sync, .why = g_why};
}

struct setup {
    struct moe_job j;
    struct guarded g[TE_MOE_MAX_RANKS];
    uint32_t capacity; /* rows per local expert of the guarded recv.x / y */
    size_t elem;
    /* The expert outputs handed to combine: the reference's fp32 (0), the
     * same rounded to bf16 precision but given as fp32 (1), or given as
     * bf16 (2): 1 and 2 must give the same bits. */
    int y_mode;
};

static void setup_open(struct setup *s, te_moe_config c, int inplace, int index)
{
    memset(s, 0, sizeof(*s));
    ck_assert_int_eq(moe_job_open(&s->j, &c, NULL), 0);
    /* Not the job's own in-place input (it would register its x): the
     * guarded x is registered below. */
    s->j.index = index;
    s->elem = c.dtype == TE_MOE_BF16 ? 2 : 4;
    s->capacity = c.ranks * c.max_tokens;
    uint32_t L = c.experts / c.ranks;
    for (uint32_t i = 0; i < c.ranks; i++) {
        struct guarded *g = &s->g[i];
        g->x_len = (size_t)c.max_tokens * c.hidden * s->elem;
        g->recv_len = (size_t)L * s->capacity * c.hidden * s->elem;
        g->y_len = (size_t)L * s->capacity * c.hidden * sizeof(float);
        g->out_len = (size_t)c.max_tokens * c.hidden * sizeof(float);
        g->x = map(g->x_len);
        g->recv_x = map(g->recv_len);
        g->y = map(g->y_len);
        g->out = map(g->out_len);
        te_moe_mem_ops o = ops_of(g);
        ck_assert_int_eq(te_moe_rank_mem_ops(s->j.r[i], &o), 0);
        ck_assert_int_eq(g->attached, 1);
        g->inplace = inplace;
        if (inplace)
            ck_assert_msg(te_moe_rank_input(s->j.r[i], g->x, g->x_len) == 0,
                          "%s", te_moe_last_error());
        s->j.bufs[i].index = index;
        ck_assert_int_eq(moe_ref_bufs_grow(&c, &s->j.bufs[i], s->capacity), 0);
    }
}

static void setup_close(struct setup *s)
{
    for (uint32_t i = 0; i < s->j.c.ranks; i++) {
        struct guarded *g = &s->g[i];
        te_moe_rank_free(s->j.r[i]);
        s->j.r[i] = NULL;
        ck_assert_int_eq(g->attached, 0); /* detached by te_moe_rank_free */
        munmap(g->x, g->x_len);
        munmap(g->recv_x, g->recv_len);
        munmap(g->y, g->y_len);
        munmap(g->out, g->out_len);
    }
    moe_job_close(&s->j);
}

struct arg {
    struct setup *s;
    uint32_t i;
    uint64_t b;
    int rc;
    char why[256];
};

/* One rank's batch with its tensors closed while the library runs. */
static void *run_rank(void *p)
{
    struct arg *a = p;
    struct setup *s = a->s;
    struct moe_job *j = &s->j;
    struct guarded *g = &s->g[a->i];
    const te_moe_config *c = &j->c;
    uint32_t tokens = j->tokens[a->i];
    struct moe_ref_bufs *bufs = &j->bufs[a->i];
    te_moe_recv recv = bufs->recv;
    if (!j->index)
        recv.x = g->recv_x;
    memcpy(g->x, j->x[a->i], (size_t)tokens * c->hidden * s->elem);
    set_prot(g, PROT_NONE);
    a->rc = te_moe_dispatch(j->r[a->i], a->b, tokens, g->x, j->experts[a->i],
                            j->weights[a->i], &recv);
    set_prot(g, PROT_READ | PROT_WRITE);
    if (!a->rc) {
        /* The reference experts on the host: they read recv.x / rows. */
        void *keep = bufs->recv.x;
        bufs->recv = recv;
        moe_ref_run_experts(j->r[a->i], bufs);
        bufs->recv.x = keep;
        size_t n = (size_t)(c->experts / c->ranks) * s->capacity * c->hidden;
        if (!s->y_mode)
            memcpy(g->y, bufs->y, n * sizeof(float));
        for (size_t e = 0; s->y_mode && e < n; e++) {
            uint16_t v = moe_ref_f32_to_bf16(bufs->y[e]);
            if (s->y_mode == 2)
                ((uint16_t *)g->y)[e] = v;
            else
                ((float *)g->y)[e] = moe_ref_bf16_to_f32(v);
        }
        te_moe_expert_out y = {g->y, s->y_mode == 2 ? TE_MOE_BF16 : TE_MOE_FP32,
                               c->experts / c->ranks, s->capacity, c->hidden};
        set_prot(g, PROT_NONE);
        a->rc = te_moe_combine(j->r[a->i], a->b, &y, g->out);
        set_prot(g, PROT_READ | PROT_WRITE);
        memcpy(j->out[a->i], g->out, (size_t)tokens * c->hidden * sizeof(float));
    }
    snprintf(a->why, sizeof(a->why), "%s", a->rc ? te_moe_last_error() : "");
    return NULL;
}

static int run_batch(struct setup *s, uint64_t b, struct arg *args)
{
    pthread_t th[TE_MOE_MAX_RANKS];
    for (uint32_t i = 0; i < s->j.c.ranks; i++) {
        args[i] = (struct arg){.s = s, .i = i, .b = b};
        pthread_create(&th[i], NULL, run_rank, &args[i]);
    }
    int rc = 0;
    for (uint32_t i = 0; i < s->j.c.ranks; i++) {
        pthread_join(th[i], NULL);
        if (args[i].rc && !rc)
            rc = args[i].rc;
    }
    return rc;
}

static te_moe_config cfg(uint32_t R, uint32_t k, uint32_t E, uint32_t P,
                         uint32_t dtype)
{
    return (te_moe_config){.ranks = R, .experts = E, .topk = k, .hidden = 64,
                           .dtype = dtype, .max_tokens = 40,
                           .private_rows = P, .timeout_ms = 20000};
}

/* Every batch equal to the dense reference with the library never
 * touching the tensors itself (it would crash). */
static void run_guarded(te_moe_config c, int inplace, int index, uint32_t skew)
{
    struct setup s;
    setup_open(&s, c, inplace, index);
    for (uint32_t b = 0; b < 3; b++) {
        uint32_t tok[TE_MOE_MAX_RANKS];
        for (uint32_t i = 0; i < c.ranks; i++)
            tok[i] = c.max_tokens - (i * 3 + b) % 7;
        moe_job_inputs(&s.j, tok, 40 + b, skew);
        struct arg args[TE_MOE_MAX_RANKS];
        int rc = run_batch(&s, b, args);
        ck_assert_msg(rc == 0, "R=%u k=%u inplace %d index %d: %s", c.ranks,
                      c.topk, inplace, index, args[0].why[0] ? args[0].why
                                                             : args[1].why);
        ck_assert_uint_eq(moe_job_check(&s.j), 0);
    }
    /* Across the ranks (a skewed batch leaves some with no rows). */
    uint32_t copies = 0, wsums = 0, syncs = 0, from_x = 0;
    for (uint32_t i = 0; i < c.ranks; i++) {
        copies += s.g[i].copies;
        wsums += s.g[i].wsums;
        syncs += s.g[i].syncs;
        from_x += s.g[i].from_x;
    }
    ck_assert_uint_gt(wsums, 0);
    ck_assert_uint_gt(syncs, 0);
    if (!index || !inplace)
        ck_assert_uint_gt(copies, 0);
    /* In place, our own rows come from x through the backend. */
    if (inplace && !index)
        ck_assert_uint_gt(from_x, 0);
    setup_close(&s);
}

START_TEST(guarded_tensors_equal_reference)
{
    static const uint32_t ks[] = {1, 2, 8};
    for (uint32_t R = 2; R <= 4; R *= 2)
        for (size_t q = 0; q < 3; q++)
            run_guarded(cfg(R, ks[q], 8 * R, 6, TE_MOE_FP32), 0, 0, 0);
    run_guarded(cfg(2, 2, 8, 6, TE_MOE_BF16), 0, 0, 0);
    run_guarded(cfg(2, 2, 8, 0, TE_MOE_FP32), 0, 0, 0); /* naive protocol */
}
END_TEST

START_TEST(guarded_in_place_and_index_mode)
{
    run_guarded(cfg(2, 2, 8, 6, TE_MOE_FP32), 1, 0, 0);
    run_guarded(cfg(4, 8, 32, 6, TE_MOE_FP32), 1, 0, 0); /* spans at R = 4 */
    run_guarded(cfg(4, 2, 16, 6, TE_MOE_FP32), 1, 0, 1); /* skewed */
    run_guarded(cfg(2, 2, 8, 6, TE_MOE_FP32), 0, 1, 0);
    run_guarded(cfg(2, 2, 8, 6, TE_MOE_BF16), 1, 1, 0);
}
END_TEST

/* A backend step failing at rank 0 fails the batch there naming it, and at
 * rank 1 naming rank 0; the next batch (backend mended) succeeds. */
START_TEST(failing_backend_fails_the_batch_everywhere)
{
    static const char *const step[] = {"", "copy", "wsum", "sync"};
    for (int f = 1; f <= 3; f++) {
        struct setup s;
        te_moe_config c = cfg(2, 2, 8, 6, TE_MOE_FP32);
        c.timeout_ms = 5000;
        setup_open(&s, c, 0, 0);
        uint32_t tok[2] = {30, 30};
        moe_job_inputs(&s.j, tok, 7, 0);
        s.g[0].fail_step = f;
        struct arg args[2];
        ck_assert_int_ne(run_batch(&s, 0, args), 0);
        ck_assert_int_eq(args[0].rc, -EIO);
        char want[64];
        snprintf(want, sizeof(want), "memory backend: %s failed (-5): failed "
                 "on purpose", step[f]);
        ck_assert_msg(strstr(args[0].why, want), "step %s: %s", step[f],
                      args[0].why);
        ck_assert_int_ne(args[1].rc, 0);
        ck_assert_msg(strstr(args[1].why, "rank 0"), "%s", args[1].why);
        s.g[0].fail_step = 0;
        ck_assert_int_eq(run_batch(&s, 1, args), 0);
        ck_assert_uint_eq(moe_job_check(&s.j), 0);
        setup_close(&s);
    }
}
END_TEST

/* The rest's staging failing after the head went to the peer: the peer
 * cannot be told by a dispatch head any more; it learns it from the
 * combine failure head at once (its reason, not a timeout). */
START_TEST(failure_after_the_head_reaches_the_peer)
{
    struct setup s;
    te_moe_config c = cfg(2, 2, 8, 6, TE_MOE_FP32); /* P = 6 of ~30 rows */
    c.timeout_ms = 20000;
    setup_open(&s, c, 0, 0);
    uint32_t tok[2] = {36, 36};
    moe_job_inputs(&s.j, tok, 9, 0);
    s.g[0].fail_copy_call = 2; /* 1: the head's rows, 2: the rest */
    struct arg args[2];
    ck_assert_int_ne(run_batch(&s, 0, args), 0);
    ck_assert_msg(strstr(args[0].why, "memory backend: copy failed"), "%s",
                  args[0].why);
    ck_assert_int_eq(args[1].rc, -EPROTO);
    ck_assert_msg(strstr(args[1].why, "rank 0 failed batch 0") &&
                      strstr(args[1].why, "copy failed"),
                  "%s", args[1].why);
    s.g[0].fail_copy_call = 0;
    ck_assert_int_eq(run_batch(&s, 1, args), 0);
    ck_assert_uint_eq(moe_job_check(&s.j), 0);
    setup_close(&s);
}
END_TEST

/* bf16 expert outputs: the same bits as the same values given as fp32
 * (each widened exactly, weighed in fp32), at R 2/4 and top-k 1/2/8; a
 * backend of version 1 is still taken and handed fp32 rows only, and
 * bf16 outputs on its rank are refused (-ENOTSUP) with the other rank
 * told. */
static void bf16_outputs_equal_fp32(te_moe_config c)
{
    struct setup s;
    setup_open(&s, c, 0, 0);
    uint32_t tok[TE_MOE_MAX_RANKS];
    for (uint32_t i = 0; i < c.ranks; i++)
        tok[i] = c.max_tokens - i;
    static float want[TE_MOE_MAX_RANKS][40 * 64];
    struct arg args[TE_MOE_MAX_RANKS];
    for (int mode = 1; mode <= 2; mode++) {
        moe_job_inputs(&s.j, tok, 11, 0); /* the same tokens and routing */
        s.y_mode = mode;
        ck_assert_msg(run_batch(&s, (uint64_t)mode - 1, args) == 0, "%s",
                      args[0].why);
        for (uint32_t i = 0; i < c.ranks; i++) {
            size_t bytes = (size_t)tok[i] * c.hidden * sizeof(float);
            if (mode == 1)
                memcpy(want[i], s.j.out[i], bytes);
            else
                ck_assert_msg(!memcmp(want[i], s.j.out[i], bytes),
                              "R=%u k=%u rank %u: bf16 outputs differ from "
                              "fp32 of the same values", c.ranks, c.topk, i);
        }
    }
    uint32_t bf16_sums = 0;
    for (uint32_t i = 0; i < c.ranks; i++)
        bf16_sums += s.g[i].bf16_sums;
    ck_assert_uint_gt(bf16_sums, 0);
    setup_close(&s);
}

START_TEST(bf16_expert_outputs)
{
    static const uint32_t ks[] = {1, 2, 8};
    for (uint32_t R = 2; R <= 4; R *= 2)
        for (size_t q = 0; q < 3; q++)
            bf16_outputs_equal_fp32(cfg(R, ks[q], 8 * R, 6, TE_MOE_FP32));
    bf16_outputs_equal_fp32(cfg(2, 2, 8, 6, TE_MOE_BF16)); /* bf16 tokens */
}
END_TEST

START_TEST(bf16_outputs_refused_by_a_version_1_backend)
{
    struct setup s;
    te_moe_config c = cfg(2, 2, 8, 6, TE_MOE_FP32);
    c.timeout_ms = 5000;
    setup_open(&s, c, 0, 0);
    s.g[0].version = 1; /* rank 0: a backend written before bf16 outputs */
    te_moe_mem_ops o = ops_of(&s.g[0]);
    ck_assert_int_eq(te_moe_rank_mem_ops(s.j.r[0], &o), 0);
    uint32_t tok[2] = {20, 20};
    moe_job_inputs(&s.j, tok, 5, 0);
    struct arg args[2];
    ck_assert_int_eq(run_batch(&s, 0, args), 0); /* fp32 works with it */
    ck_assert_uint_eq(moe_job_check(&s.j), 0);
    s.y_mode = 2;
    ck_assert_int_ne(run_batch(&s, 1, args), 0);
    ck_assert_int_eq(args[0].rc, -ENOTSUP);
    ck_assert_msg(strstr(args[0].why, "bf16 expert outputs need a memory "
                         "backend of version 2"), "%s", args[0].why);
    ck_assert_int_ne(args[1].rc, 0);
    ck_assert_msg(strstr(args[1].why, "rank 0"), "%s", args[1].why);
    ck_assert_uint_eq(s.g[0].bf16_sums, 0);
    s.y_mode = 0;
    ck_assert_int_eq(run_batch(&s, 2, args), 0);
    ck_assert_uint_eq(moe_job_check(&s.j), 0);
    setup_close(&s);
}
END_TEST

START_TEST(bad_backends_and_changes_refused)
{
    struct setup s;
    te_moe_config c = cfg(2, 2, 8, 6, TE_MOE_FP32);
    setup_open(&s, c, 0, 0);
    te_moe_rank *r = s.j.r[0];
    struct guarded *g = &s.g[0];
    te_moe_mem_ops o = ops_of(g);
    static const uint32_t unknown[] = {0, TE_MOE_MEM_OPS_VERSION + 1, 99};
    for (size_t v = 0; v < 3; v++) {
        o.version = unknown[v];
        ck_assert_int_eq(te_moe_rank_mem_ops(r, &o), -EINVAL);
        char want[32];
        snprintf(want, sizeof(want), "version %u (want 1..", unknown[v]);
        ck_assert_msg(strstr(te_moe_last_error(), want), "%s", te_moe_last_error());
    }
    o = ops_of(g);
    o.wsum = NULL;
    ck_assert_int_eq(te_moe_rank_mem_ops(r, &o), -EINVAL);
    o = ops_of(g);
    o.mem = 7;
    ck_assert_int_eq(te_moe_rank_mem_ops(r, &o), -EINVAL);
    ck_assert_int_eq(te_moe_rank_mem_ops(NULL, &o), -EINVAL);
    /* attach failing keeps the previous backend (still attached once) */
    struct guarded other = {.attach_rc = -ENOMEM};
    o = ops_of(&other);
    ck_assert_int_eq(te_moe_rank_mem_ops(r, &o), -ENOMEM);
    ck_assert_msg(strstr(te_moe_last_error(), "attaching the rank's") &&
                  strstr(te_moe_last_error(), "failed (-12): failed on purpose"),
                  "%s", te_moe_last_error());
    ck_assert_int_eq(g->attached, 1);
    ck_assert_int_eq(other.attached, 0);
    /* with an input registered: refused until it is dropped */
    ck_assert_int_eq(te_moe_rank_input(r, g->x, g->x_len), 0);
    o = ops_of(g);
    ck_assert_int_eq(te_moe_rank_mem_ops(r, &o), -EBUSY);
    ck_assert_ptr_nonnull(strstr(te_moe_last_error(), "input is registered"));
    ck_assert_int_eq(te_moe_rank_input(r, NULL, 0), 0);
    /* during a batch */
    uint32_t tok[2] = {10, 10};
    moe_job_inputs(&s.j, tok, 3, 0);
    ck_assert_int_eq(te_moe_dispatch_start(r, 0, 10, s.j.x[0], s.j.experts[0],
                                           s.j.weights[0]), 0);
    ck_assert_int_eq(te_moe_rank_mem_ops(r, NULL), -EBUSY);
    ck_assert_int_eq(te_moe_dispatch_start(s.j.r[1], 0, 10, s.j.x[1],
                                           s.j.experts[1], s.j.weights[1]), 0);
    for (int i = 0; i < 2; i++) {
        te_moe_recv recv = s.j.bufs[i].recv;
        recv.x = s.g[i].recv_x;
        set_prot(&s.g[i], PROT_NONE);
        ck_assert_int_eq(te_moe_dispatch_wait(s.j.r[i], &recv), 0);
        set_prot(&s.g[i], PROT_READ | PROT_WRITE);
    }
    for (int i = 0; i < 2; i++) {
        te_moe_expert_out y = {s.g[i].y, TE_MOE_FP32, 4, s.capacity, 64};
        ck_assert_int_eq(te_moe_combine_start(s.j.r[i], 0, &y), 0);
    }
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(te_moe_combine_wait(s.j.r[i], s.g[i].out), 0);
    /* back to the built-in host copies: the old backend is detached */
    ck_assert_int_eq(te_moe_rank_mem_ops(r, NULL), 0);
    ck_assert_int_eq(g->attached, 0);
    g->attached = 1; /* setup_close expects the rank to detach it */
    o = ops_of(g);
    g->attached = 0;
    ck_assert_int_eq(te_moe_rank_mem_ops(r, &o), 0);
    ck_assert_int_eq(g->attached, 1);
    setup_close(&s);
}
END_TEST

/* A backend saying its memory is CUDA's: the input is registered as such,
 * which the engine refuses without CUDA (nothing registered). */
START_TEST(cuda_kind_reaches_the_registration)
{
    struct setup s;
    setup_open(&s, cfg(2, 2, 8, 6, TE_MOE_FP32), 0, 0);
    te_moe_mem_ops o = ops_of(&s.g[0]);
    o.mem = TE_MEM_CUDA;
    ck_assert_int_eq(te_moe_rank_mem_ops(s.j.r[0], &o), 0);
    int rc = te_moe_rank_input(s.j.r[0], s.g[0].x, s.g[0].x_len);
    if (rc) { /* no CUDA here (the usual case on the build machines) */
        ck_assert_ptr_nonnull(strstr(te_moe_last_error(), "registering the input"));
        ck_assert_ptr_null(s.j.r[0]->in_mr);
    } else { /* a CUDA machine took host memory as CUDA's: unregister */
        ck_assert_int_eq(te_moe_rank_input(s.j.r[0], NULL, 0), 0);
    }
    setup_close(&s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("moe_mem");
    TCase *t = tcase_create("backend");
    tcase_set_timeout(t, 240);
    tcase_add_test(t, guarded_tensors_equal_reference);
    tcase_add_test(t, guarded_in_place_and_index_mode);
    tcase_add_test(t, failing_backend_fails_the_batch_everywhere);
    tcase_add_test(t, failure_after_the_head_reaches_the_peer);
    tcase_add_test(t, bf16_expert_outputs);
    tcase_add_test(t, bf16_outputs_refused_by_a_version_1_backend);
    tcase_add_test(t, bad_backends_and_changes_refused);
    tcase_add_test(t, cuda_kind_reaches_the_registration);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
