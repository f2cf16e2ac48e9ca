/*
 * Updates from the caller's own tensors into the caller's own parameters,
 * in one process on loopback: two trainer engines (FSDP halves, each part a
 * separate allocation of "the framework"), one receiver engine whose
 * params are separate allocations too, double-buffered and in place.
 * Checks by address ranges that nothing goes through a buffer of the
 * library's (the trainers' registered parts and the receiver's published
 * destinations are the caller's ranges), that every version lands byte for
 * byte, that the serving set is never written, that unchanged addresses
 * are not re-registered, and that bad input is refused naming the tensor.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/weights.h"
#include "wt_entries.h"
#include "wt_runtime.h"

#define T 2

struct fixture {
    te_wt_model *m;
    te_wt_sharding *sh;
    te_wt_schedule *s;
    uint8_t *ckpt;               /* full tensors of the current version */
    uint8_t **part[T];           /* [trainer][tensor]: the caller's parts */
    te_engine *et[T], *er;
    te_wt_trainer *t[T];
    char dir[64];
};

static const void *tensor_data(uint32_t i, void *arg)
{
    struct fixture *f = arg;
    return f->ckpt + f->m->tensors[i].offset;
}

/* Version v's bytes (finite bf16), cut into each trainer's parts. */
static void make_version(struct fixture *f, uint32_t v)
{
    for (uint64_t i = 0; i < f->m->data_bytes; i++)
        f->ckpt[i] = (uint8_t)(((i + 7919 * v) * 2654435761u) >> 13);
    for (uint64_t i = 1; i < f->m->data_bytes; i += 2)
        f->ckpt[i] = (uint8_t)(0x3c + (f->ckpt[i] & 3));
    for (int r = 0; r < T; r++)
        for (uint32_t i = 0; i < f->m->count; i++) {
            uint64_t b, e;
            te_wt_fsdp_range(&f->m->tensors[i], T, r, &b, &e);
            memcpy(f->part[r][i], f->ckpt + f->m->tensors[i].offset + b, e - b);
        }
}

static te_wt_source *sources(struct fixture *f, int r)
{
    te_wt_source *src = calloc(f->m->count, sizeof(*src));
    for (uint32_t i = 0; i < f->m->count; i++) {
        const te_wt_tensor *x = &f->m->tensors[i];
        uint64_t b, e;
        te_wt_fsdp_range(x, T, r, &b, &e);
        src[i] = (te_wt_source){x->name, f->part[r][i], e - b, x->dtype, x->ndim,
                                {0}, TE_MEM_HOST};
        memcpy(src[i].shape, x->shape, sizeof(src[i].shape));
    }
    return src;
}

/* A te_wt_source_fn: the framework's tensor of `tensor` for trainer 1. */
static int source_of(uint32_t tensor, te_wt_source *out, void *arg)
{
    struct fixture *f = arg;
    te_wt_source *src = sources(f, 1);
    *out = src[tensor];
    free(src);
    return 0;
}

static void setup(struct fixture *f)
{
    memset(f, 0, sizeof(*f));
    ck_assert_int_eq(te_wt_preset_model(TE_WT_SMALL_MOE, &f->m), 0);
    te_wt_infer_layout l = {1, 1, 0, 1};
    ck_assert_int_eq(te_wt_sharding_build(f->m, &l, &f->sh), 0);
    ck_assert_int_eq(te_wt_schedule_build(f->m, f->sh, T, 1, 1 << 20, &f->s), 0);
    f->ckpt = malloc(f->m->data_bytes);
    snprintf(f->dir, sizeof(f->dir), "/tmp/weights_caller_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    ck_assert_int_eq(te_engine_create(NULL, &f->er), 0);
    for (int r = 0; r < T; r++) {
        f->part[r] = calloc(f->m->count, sizeof(uint8_t *));
        for (uint32_t i = 0; i < f->m->count; i++)
            f->part[r][i] = malloc(f->m->tensors[i].nbytes / T + 64);
        ck_assert_int_eq(te_engine_create(NULL, &f->et[r]), 0);
        ck_assert_msg(te_wt_trainer_create(f->et[r], f->m, f->sh, f->s, (uint32_t)r,
                                           &f->t[r]) == 0, "%s", te_wt_last_error());
        te_wt_source *src = sources(f, r);
        /* Every part with bytes is registered once. */
        int want = 0;
        for (uint32_t i = 0; i < f->m->count; i++)
            want += src[i].bytes > 0;
        ck_assert_int_eq(te_wt_trainer_bind(f->t[r], src, f->m->count), want);
        free(src);
    }
}

struct push_job {
    struct fixture *f;
    int r, rc;
    uint32_t version;
    int timeout_ms;
};

/* Bytes the trainers read through their engines in the last update. */
static uint64_t read_bytes[T];

static void *push(void *arg)
{
    struct push_job *j = arg;
    te_wt_push_stats st = {0};
    j->rc = te_wt_trainer_push(j->f->t[j->r], j->f->dir, j->version, j->timeout_ms, &st);
    read_bytes[j->r] = st.read_bytes;
    if (!j->rc)
        j->rc = te_wt_trainer_wait_done(j->f->t[j->r], j->f->dir, j->version, 10000);
    return NULL;
}

/* Both trainers push `version` (pushers = 0: nobody) while the receiver
 * takes it; returns the receiver's answer. */
static int update(struct fixture *f, te_wt_receiver *rv, uint32_t version, int pushers,
                  int timeout_ms, te_wt_update_report *rep)
{
    pthread_t th[T];
    struct push_job j[T];
    for (int r = 0; r < pushers; r++) {
        j[r] = (struct push_job){f, r, -1, version, timeout_ms};
        pthread_create(&th[r], NULL, push, &j[r]);
    }
    int rc = te_wt_receiver_update(rv, f->dir, version, timeout_ms, rep);
    for (int r = 0; r < pushers; r++) {
        pthread_join(th[r], NULL);
        ck_assert_msg(j[r].rc == 0, "trainer %d: %s", r, te_wt_last_error());
    }
    return rc;
}

/* Destinations: one allocation per param, per set. */
static te_wt_dest *dests(struct fixture *f, te_wt_rank_param **params, int64_t *n)
{
    *n = te_wt_rank_params(f->m, f->sh, 0, NULL, 0);
    ck_assert_int_gt(*n, 0);
    *params = calloc((size_t)*n, sizeof(**params));
    ck_assert_int_eq(te_wt_rank_params(f->m, f->sh, 0, *params, (uint64_t)*n), *n);
    te_wt_dest *d = calloc(2 * (size_t)*n, sizeof(*d));
    for (int64_t i = 0; i < 2 * *n; i++) {
        const te_wt_rank_param *p = &(*params)[i % *n];
        d[i] = (te_wt_dest){p->name, calloc(1, p->bytes), p->bytes, TE_MEM_HOST};
    }
    return d;
}

static void free_dests(te_wt_receiver *rv, te_wt_dest *d, te_wt_rank_param *params,
                       int64_t n)
{
    te_wt_receiver_destroy(rv);
    for (int64_t i = 0; i < 2 * n; i++)
        free(d[i].addr);
    free(d);
    free(params);
}

/* Set `set` holds exactly the current version, cut and quantised. */
static uint64_t differ(struct fixture *f, const te_wt_dest *d, int64_t n)
{
    uint64_t bad = 0;
    uint8_t *want = malloc(f->sh->rank_bytes[0] + 64);
    for (uint64_t k = 0, i = 0; k < f->sh->nslices; k++, i++) {
        ck_assert_int_eq(te_wt_slice_produce(f->m, f->sh, &f->sh->slices[k], tensor_data,
                                             f, want), 0);
        ck_assert_str_eq(d[i].name, f->m->tensors[f->sh->members[
                             f->sh->params[f->sh->slices[k].param].first_member]].name);
        bad += memcmp(want, d[i].addr, f->sh->slices[k].bytes) != 0;
    }
    ck_assert_uint_eq(f->sh->nslices, (uint64_t)n);
    free(want);
    return bad;
}

/* <dir>/infer-0.table (wt_entries.c's format, read here independently):
 * version v, and each slice's descriptor is the caller's destination. */
static void check_table(const char *dir, uint32_t v, const te_wt_dest *d, int64_t n)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/infer-0.table", dir);
    FILE *fp = fopen(path, "rb");
    ck_assert_ptr_nonnull(fp);
    uint8_t buf[1 << 16];
    size_t len = fread(buf, 1, sizeof(buf), fp), off = 12;
    fclose(fp);
    uint32_t ver, cnt, dlen;
    ck_assert_uint_ge(len, 12);
    memcpy(&ver, buf + 4, 4);
    memcpy(&cnt, buf + 8, 4);
    ck_assert_uint_eq(ver, v);
    ck_assert_uint_eq(cnt, (uint32_t)n);
    for (int64_t i = 0; i < n; i++) {
        te_mr_desc desc;
        memcpy(&dlen, buf + off, 4);
        ck_assert_int_eq(te_desc_parse(buf + off + 4, dlen, &desc), 0);
        ck_assert_uint_eq(desc.addr, (uintptr_t)d[i].addr);
        ck_assert_uint_eq(desc.len, d[i].bytes);
        off += 4 + dlen;
    }
}

static void teardown(struct fixture *f)
{
    for (int r = 0; r < T; r++) {
        te_wt_trainer_destroy(f->t[r]);
        te_engine_destroy(f->et[r]);
        for (uint32_t i = 0; i < f->m->count; i++)
            free(f->part[r][i]);
        free(f->part[r]);
    }
    te_engine_destroy(f->er);
    free(f->ckpt);
    te_wt_schedule_free(f->s);
    te_wt_sharding_free(f->sh);
    te_wt_model_free(f->m);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(double_buffered_from_caller_tensors)
{
    struct fixture f;
    setup(&f);
    te_wt_rank_param *params;
    int64_t n;
    te_wt_dest *d = dests(&f, &params, &n);
    te_wt_receiver *rv;
    ck_assert_msg(te_wt_receiver_create_into(f.er, f.m, f.sh, f.s, 0, d, d + n,
                                             (uint32_t)n, &rv) == 0, "%s",
                  te_wt_last_error());
    te_wt_update_report rep;
    for (uint32_t v = 1; v <= 3; v++) {
        make_version(&f, v);
        if (v == 3) { /* the framework moved one tensor: only it is re-registered */
            uint8_t *moved = malloc(f.m->tensors[0].nbytes / T + 64);
            memcpy(moved, f.part[1][0], f.m->tensors[0].nbytes / T + 1);
            free(f.part[1][0]);
            f.part[1][0] = moved;
        }
        uint64_t regs1 = te_wt_trainer_registrations(f.t[1]);
        for (int r = 0; r < T; r++) {
            te_wt_source *src = sources(&f, r);
            if (v == 3 && r == 1) /* asked at the push instead */
                te_wt_trainer_set_source_fn(f.t[1], source_of, &f);
            else
                ck_assert_int_eq(te_wt_trainer_bind(f.t[r], src, f.m->count), 0);
            free(src);
        }
        int rc = update(&f, rv, v, T, 20000, &rep);
        /* Only the moved tensor was registered again. */
        ck_assert_uint_eq(te_wt_trainer_registrations(f.t[1]) - regs1, v == 3);
        ck_assert_msg(rc == 0, "version %u: %s", v, te_wt_last_error());
        /* Every tensor is gathered once; with TE_WT_LOCAL_READS=engine (the
         * path of device-memory parts) a trainer's own parts come through
         * its engine too, so the reads carry every byte of the model. */
        const char *lr = getenv("TE_WT_LOCAL_READS");
        if (lr && !strcmp(lr, "engine"))
            ck_assert_uint_eq(read_bytes[0] + read_bytes[1], f.m->data_bytes);
        else
            ck_assert_uint_lt(read_bytes[0] + read_bytes[1], f.m->data_bytes);
        int set = (int)(v - 1) % 2;
        ck_assert_int_eq(rep.live_set, set);
        ck_assert_int_eq(te_wt_receiver_live_set(rv, NULL), set);
        ck_assert_uint_eq(differ(&f, d + set * n, n), 0);
        /* The trainers read the caller's parts where they are: each one's
         * registration is the caller's range, and the peer gathers from it. */
        for (int r = 0; r < T; r++)
            for (uint32_t i = 0; i < f.m->count; i++) {
                uint64_t b, e;
                te_wt_fsdp_range(&f.m->tensors[i], T, r, &b, &e);
                ck_assert_ptr_eq(f.t[r]->src.v[i].addr, f.part[r][i]);
                if (e > b)
                    ck_assert_uint_eq(f.t[!r]->descs[(uint64_t)r * f.m->count + i].addr,
                                      (uintptr_t)f.part[r][i]);
            }
        ck_assert_ptr_null(f.t[0]->load_buf);
        /* The receiver published the engine's own params as destinations. */
        check_table(f.dir, v, d + set * n, n);
    }
    /* Version 4 nobody pushes: the serving set (version 3's) is untouched. */
    ck_assert_int_eq(update(&f, rv, 4, 0, 300, &rep), -ETIMEDOUT);
    ck_assert_int_eq(rep.live_set, 0);
    ck_assert_uint_eq(rep.live_version, 3);
    ck_assert_uint_eq(rep.clobbered, 0);
    ck_assert_uint_eq(differ(&f, d, n), 0);
    free_dests(rv, d, params, n);
    teardown(&f);
}
END_TEST

START_TEST(in_place)
{
    struct fixture f;
    setup(&f);
    te_wt_rank_param *params;
    int64_t n;
    te_wt_dest *d = dests(&f, &params, &n);
    te_wt_receiver *rv;
    ck_assert_int_eq(te_wt_receiver_create_into(f.er, f.m, f.sh, f.s, 0, d, NULL,
                                                (uint32_t)n, &rv), 0);
    te_wt_update_report rep;
    for (uint32_t v = 1; v <= 2; v++) {
        make_version(&f, v);
        ck_assert_msg(update(&f, rv, v, T, 20000, &rep) == 0, "%s", te_wt_last_error());
        ck_assert_int_eq(rep.live_set, 0);
        ck_assert_uint_eq(differ(&f, d, n), 0);
    }
    /* A failed version in place: said so, nothing claimed to serve. */
    ck_assert_int_eq(update(&f, rv, 3, 0, 300, &rep), -ETIMEDOUT);
    ck_assert_uint_eq(rep.clobbered, 1);
    ck_assert_int_eq(rep.live_set, -1);
    ck_assert_int_eq(te_wt_receiver_live_set(rv, NULL), -1);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "mix of versions"));
    free_dests(rv, d, params, n);
    teardown(&f);
}
END_TEST

/* bind() refuses, naming the tensor, and changes nothing. */
static void refused(struct fixture *f, te_wt_source *src, uint32_t n, const char *want)
{
    uint64_t regs = te_wt_trainer_registrations(f->t[0]);
    ck_assert_int_eq(te_wt_trainer_bind(f->t[0], src, n), -EINVAL);
    ck_assert_msg(strstr(te_wt_last_error(), want), "'%s' lacks '%s'",
                  te_wt_last_error(), want);
    ck_assert_uint_eq(te_wt_trainer_registrations(f->t[0]), regs);
}

START_TEST(bad_input)
{
    struct fixture f;
    setup(&f);
    const char *name = f.m->tensors[3].name;
    char want[256];
    te_wt_source *src = sources(&f, 0);
    src[3].shape[0]++;
    snprintf(want, sizeof(want), "tensor '%s': BF16 [", name);
    refused(&f, src, f.m->count, want);
    src[3].shape[0]--;
    src[3].dtype = TE_WT_F32;
    refused(&f, src, f.m->count, "F32");
    src[3].dtype = f.m->tensors[3].dtype;
    src[3].bytes--;
    snprintf(want, sizeof(want), "tensor '%s': %llu bytes", name,
             (unsigned long long)src[3].bytes);
    refused(&f, src, f.m->count, want);
    src[3].bytes++;
    snprintf(want, sizeof(want), "tensor '%s' has no source",
             f.m->tensors[f.m->count - 1].name);
    refused(&f, src, f.m->count - 1, want);
    src[3].mem = 7;
    snprintf(want, sizeof(want), "tensor '%s': mem 7 is neither", name);
    refused(&f, src, f.m->count, want);
    src[3].mem = TE_MEM_HOST;
    src[3].name = "no.such.tensor";
    refused(&f, src, f.m->count, "'no.such.tensor' is not in model");
    /* Device memory where CUDA cannot be used: the registration's reason,
     * naming the tensor (the trainer is unbound until a bind succeeds). */
    char why[256];
    if (te_cuda_status(why, sizeof(why)) != 0) {
        src[3].name = name;
        src[3].mem = TE_MEM_CUDA;
        ck_assert_int_lt(te_wt_trainer_bind(f.t[0], src, f.m->count), 0);
        ck_assert_msg(strstr(te_wt_last_error(), name), "%s", te_wt_last_error());
        te_wt_push_stats unbound;
        ck_assert_int_eq(te_wt_trainer_push(f.t[0], f.dir, 1, 100, &unbound), -EINVAL);
    }
    free(src);
    /* Receiver: a destination too small, one missing, one unknown. */
    te_wt_rank_param *params;
    int64_t n;
    te_wt_dest *d = dests(&f, &params, &n);
    te_wt_receiver *rv = NULL;
    d[2].bytes--;
    ck_assert_int_eq(te_wt_receiver_create_into(f.er, f.m, f.sh, f.s, 0, d, d + n,
                                                (uint32_t)n, &rv), -EINVAL);
    snprintf(want, sizeof(want), "set 0: param '%s': %llu bytes", params[2].name,
             (unsigned long long)d[2].bytes);
    ck_assert_msg(strstr(te_wt_last_error(), want), "%s", te_wt_last_error());
    d[2].bytes++;
    ck_assert_int_eq(te_wt_receiver_create_into(f.er, f.m, f.sh, f.s, 0, d, d + n,
                                                (uint32_t)n - 1, &rv), -EINVAL);
    snprintf(want, sizeof(want), "set 0: param '%s' has no destination",
             params[n - 1].name);
    ck_assert_msg(strstr(te_wt_last_error(), want), "%s", te_wt_last_error());
    d[n + 1].name = "model.norm.bias";
    ck_assert_int_eq(te_wt_receiver_create_into(f.er, f.m, f.sh, f.s, 0, d, d + n,
                                                (uint32_t)n, &rv), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "set 1: destination 1: "
                                 "'model.norm.bias' is not a param"));
    ck_assert_ptr_null(rv);
    /* A push without sources is refused before anything is published. */
    te_wt_trainer *bare;
    ck_assert_int_eq(te_wt_trainer_create(f.et[0], f.m, f.sh, f.s, 0, &bare), 0);
    te_wt_push_stats st;
    ck_assert_int_eq(te_wt_trainer_push(bare, f.dir, 1, 100, &st), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "no sources bound"));
    te_wt_trainer_destroy(bare);
    /* A misspelt TE_WT_LOCAL_READS is refused by name, not ignored. */
    const char *lr = getenv("TE_WT_LOCAL_READS");
    char *keep = lr ? strdup(lr) : NULL;
    setenv("TE_WT_LOCAL_READS", "gpu", 1);
    ck_assert_int_eq(te_wt_trainer_create(f.et[0], f.m, f.sh, f.s, 0, &bare), -EINVAL);
    ck_assert_msg(strstr(te_wt_last_error(), "TE_WT_LOCAL_READS=gpu: want engine or cpu"),
                  "%s", te_wt_last_error());
    if (keep)
        setenv("TE_WT_LOCAL_READS", keep, 1);
    else
        unsetenv("TE_WT_LOCAL_READS");
    free(keep);
    free_dests(NULL, d, params, n);
    teardown(&f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("weights_caller");
    TCase *tc = tcase_create("caller");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, double_buffered_from_caller_tensors);
    tcase_add_test(tc, in_place);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
