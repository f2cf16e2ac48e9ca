/*
 * Error paths of the runtime, in one process on the loopback transport:
 *  - writes held past the push's drain (fault_delay_us) fail the push
 *    instead of being reported as delivered;
 *  - late failures of a push that returned at its deadline do not count
 *    against the next push;
 *  - an engine shared with another user keeps that user's completions;
 *  - a receiver whose revoke or retire failed refuses the next version
 *    until it succeeds;
 *  - a te_mr_reg error reaches the caller with its code and reason.
 * Failures of the core are injected by interposing te_mr_reg, te_mr_revoke
 * and te_imm_space_retire (this executable exports them; the library's
 * calls bind to them first) and forwarding to the real ones otherwise.
 */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "te/weights.h"

/* ------------------------------------------------------- interposers */

static int fail_mr_reg, fail_revoke, fail_retire;

int te_mr_reg(te_engine *e, int group, void *addr, size_t len, uint32_t access,
              uint32_t mem_kind, te_mr **out)
{
    int (*real)(te_engine *, int, void *, size_t, uint32_t, uint32_t, te_mr **) =
        (int (*)(te_engine *, int, void *, size_t, uint32_t, uint32_t, te_mr **))
            dlsym(RTLD_NEXT, "te_mr_reg");
    if (fail_mr_reg) {
        fail_mr_reg = 0;
        access = 0x80; /* a real error of the core, with its own reason */
    }
    return real(e, group, addr, len, access, mem_kind, out);
}

int te_mr_revoke(te_engine *e, te_mr *mr, te_mr_desc *new_desc)
{
    int (*real)(te_engine *, te_mr *, te_mr_desc *) =
        (int (*)(te_engine *, te_mr *, te_mr_desc *))dlsym(RTLD_NEXT, "te_mr_revoke");
    return real(e, fail_revoke ? NULL : mr, new_desc);
}

int te_imm_space_retire(te_imm_space *s)
{
    int (*real)(te_imm_space *) =
        (int (*)(te_imm_space *))dlsym(RTLD_NEXT, "te_imm_space_retire");
    return fail_retire ? -ESTALE : real(s);
}

/* ------------------------------------------------------------ set-up */

struct fix {
    te_wt_model *m;
    te_wt_sharding *sh;
    te_wt_schedule *s;
    uint8_t *data;
    char dir[32], path[64];
    te_engine *et, *er;
    te_wt_trainer *t;
    te_wt_receiver *r;
};

static te_engine *engine(const char *delay_us)
{
    te_config *cfg = te_config_new();
    ck_assert_ptr_nonnull(cfg);
    if (delay_us)
        ck_assert_int_eq(te_config_set(cfg, "loopback", "fault_delay_us", delay_us), 0);
    te_engine *e;
    ck_assert_msg(te_engine_create(cfg, &e) == 0, "%s", te_last_error());
    te_config_free(cfg);
    return e;
}

/* One trainer, one receiver; a staging ring larger than the trainer's
 * writes, so every write is submitted at once. delay_us: the trainer's. */
static void setup(struct fix *f, const char *delay_us)
{
    memset(f, 0, sizeof(*f));
    ck_assert_int_eq(te_wt_preset_model(TE_WT_SMALL_MOE, &f->m), 0);
    te_wt_infer_layout l = {1, 1, 0, 1};
    ck_assert_int_eq(te_wt_sharding_build(f->m, &l, &f->sh), 0);
    ck_assert_int_eq(te_wt_schedule_build(f->m, f->sh, 1, 1, 64 << 20, &f->s), 0);
    f->data = malloc(f->m->data_bytes);
    for (uint64_t i = 0; i < f->m->data_bytes; i++)
        f->data[i] = (uint8_t)(i & 1 ? 0x3c : i * 7); /* finite bf16 */
    strcpy(f->dir, "/tmp/weights_ft_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/ckpt.safetensors", f->dir);
    ck_assert_int_eq(te_wt_safetensors_write(f->path, f->m, f->data), 0);
    f->et = engine(delay_us);
    f->er = engine(NULL);
    ck_assert_msg(te_wt_receiver_create(f->er, f->m, f->sh, f->s, 0, &f->r) == 0, "%s",
                  te_wt_last_error());
    ck_assert_msg(te_wt_trainer_create(f->et, f->m, f->sh, f->s, 0, &f->t) == 0, "%s",
                  te_wt_last_error());
    ck_assert_int_eq(te_wt_trainer_load(f->t, f->path), 0);
    ck_assert_int_eq(te_wt_trainer_connect(f->t, f->dir, 5000), 0);
}

static void teardown(struct fix *f)
{
    te_wt_trainer_destroy(f->t);
    te_wt_receiver_destroy(f->r);
    te_engine_destroy(f->et);
    te_engine_destroy(f->er);
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
    ck_assert_int_eq(system(cmd), 0);
    free(f->data);
    te_wt_schedule_free(f->s);
    te_wt_sharding_free(f->sh);
    te_wt_model_free(f->m);
}

/* Receivers run versions first..last on a thread, each with its timeout. */
struct recv_job {
    struct fix *f;
    uint32_t first, last;
    int timeout_ms[4], rc[4];
    char err[4][512];
};

static void *receive(void *arg)
{
    struct recv_job *j = arg;
    for (uint32_t v = j->first; v <= j->last; v++) {
        te_wt_update_report rep;
        j->rc[v] = te_wt_receiver_update(j->f->r, j->f->dir, v, j->timeout_ms[v], &rep);
        snprintf(j->err[v], sizeof(j->err[v]), "%s", te_wt_last_error());
    }
    return NULL;
}

/* Bounded wait for the receiver's record to exist. */
static void wait_record(const struct fix *f)
{
    char p[64];
    snprintf(p, sizeof(p), "%s/infer-0", f->dir);
    for (int i = 0; i < 10000 && access(p, F_OK); i++)
        usleep(1000);
    ck_assert_int_eq(access(p, F_OK), 0);
}

/* ------------------------------------------------------------- tests */

/* Writes held 8 s by the transport outlive the push's 5 s drain: the
 * push must not report them delivered. */
START_TEST(unconfirmed_writes_fail_the_push)
{
    struct fix f;
    setup(&f, "8000000");
    struct recv_job j = {.f = &f, .first = 1, .last = 1, .timeout_ms = {0, 60000}};
    pthread_t th;
    pthread_create(&th, NULL, receive, &j);
    wait_record(&f);
    te_wt_push_stats st;
    int rc = te_wt_trainer_push(f.t, f.dir, 1, 200, &st);
    ck_assert_msg(rc == -ETIMEDOUT, "push: %d %s", rc, te_wt_last_error());
    ck_assert_uint_eq(st.writes, f.sh->nslices);
    ck_assert_msg(strstr(te_wt_last_error(), "unconfirmed"), "%s", te_wt_last_error());
    pthread_join(th, NULL);
    /* The held writes land later: the version is whole at the receiver. */
    ck_assert_msg(j.rc[1] == 0, "receive: %s", j.err[1]);
    teardown(&f);
}
END_TEST

/* Push 1 returns at its drain with its writes held; the receiver gives up
 * on version 1 and revokes, so those writes fail when they run, during
 * push 2. Push 2 must not take their failures (or their completions) as
 * its own, nor reuse the staging ring under them. */
START_TEST(late_completions_of_previous_push)
{
    struct fix f;
    setup(&f, "8000000");
    struct recv_job j = {.f = &f, .first = 1, .last = 2, .timeout_ms = {0, 2000, 60000}};
    pthread_t th;
    pthread_create(&th, NULL, receive, &j);
    wait_record(&f);
    te_wt_push_stats st;
    ck_assert_int_ne(te_wt_trainer_push(f.t, f.dir, 1, 200, &st), 0);
    int rc = te_wt_trainer_push(f.t, f.dir, 2, 60000, &st);
    ck_assert_msg(rc == 0, "push 2: %s", te_wt_last_error());
    ck_assert_uint_le(st.peak_inflight, f.s->staging_bytes);
    pthread_join(th, NULL);
    ck_assert_int_eq(j.rc[1], -ETIMEDOUT);
    ck_assert_msg(j.rc[2] == 0, "receive 2: %s", j.err[2]);
    uint32_t v;
    ck_assert_ptr_nonnull(te_wt_receiver_live(f.r, &v));
    ck_assert_uint_eq(v, 2);
    teardown(&f);
}
END_TEST

/* Another user of the trainer's engine has a completed, callback-less
 * request (user_data 0) in the engine's queue: it stays there for them. */
START_TEST(shared_engine_keeps_others_completions)
{
    struct fix f;
    setup(&f, NULL);
    void *buf = aligned_alloc(4096, 4096);
    te_mr *mr;
    te_mr_desc d;
    ck_assert_int_eq(te_mr_reg(f.et, 0, buf, 4096, TE_MR_REMOTE_WRITE, TE_MEM_HOST, &mr), 0);
    ck_assert_int_eq(te_mr_describe(mr, &d), 0);
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    te_peer self;
    ck_assert_int_eq(te_engine_address(f.et, 0, addr, &alen), 0);
    ck_assert_int_eq(te_peer_add(f.et, 0, addr, alen, &self), 0);
    te_request rq;
    te_request_init(&rq, TE_OP_WRITE);
    rq.flags = TE_F_IMM;
    rq.imm = 0x1234;
    rq.u.xfer = (__typeof__(rq.u.xfer)){self, mr, 0, &d, 2048, 64};
    int64_t n = te_expected_imms(f.et, &rq, 0);
    ck_assert_int_gt(te_submit(f.et, &rq), 0);
    ck_assert_int_eq(te_imm_wait(f.et, 0x1234, (uint64_t)n, 10000), 0);

    struct recv_job j = {.f = &f, .first = 1, .last = 1, .timeout_ms = {0, 60000}};
    pthread_t th;
    pthread_create(&th, NULL, receive, &j);
    te_wt_push_stats st;
    int rc = te_wt_trainer_push(f.t, f.dir, 1, 60000, &st);
    pthread_join(th, NULL);
    ck_assert_msg(rc == 0, "push: %s", te_wt_last_error());
    ck_assert_msg(j.rc[1] == 0, "receive: %s", j.err[1]);
    ck_assert_uint_le(st.peak_inflight, f.s->staging_bytes);
    te_completion c;
    ck_assert_int_eq(te_poll_completions(f.et, &c, 1, 10000), 1);
    ck_assert_uint_eq(c.user_data, 0);
    ck_assert_int_eq(c.status, 0);
    ck_assert_int_eq(te_mr_dereg(f.et, mr), 0);
    free(buf);
    teardown(&f);
}
END_TEST

/* A standby buffer whose keys could not be revoked after an abandoned
 * version is not published again until a revoke succeeds. */
START_TEST(failed_revoke_refuses_next_version)
{
    struct fix f;
    setup(&f, NULL);
    te_wt_update_report rep;
    fail_revoke = 1;
    ck_assert_int_eq(te_wt_receiver_update(f.r, f.dir, 1, 100, &rep), -ETIMEDOUT);
    ck_assert_msg(strstr(te_wt_last_error(), "revoking the standby buffer failed"),
                  "%s", te_wt_last_error());
    int rc = te_wt_receiver_update(f.r, f.dir, 2, 100, &rep);
    ck_assert_msg(rc != 0 && rc != -ETIMEDOUT, "%d %s", rc, te_wt_last_error());
    ck_assert_msg(strstr(te_wt_last_error(), "abandoned version 1"), "%s",
                  te_wt_last_error());
    fail_revoke = 0;
    ck_assert_int_eq(te_wt_receiver_update(f.r, f.dir, 3, 100, &rep), -ETIMEDOUT);
    ck_assert_msg(!strstr(te_wt_last_error(), "revok"), "%s", te_wt_last_error());
    teardown(&f);
}
END_TEST

/* Likewise a life of the immediate space that could not be retired. */
START_TEST(failed_retire_refuses_next_version)
{
    struct fix f;
    setup(&f, NULL);
    te_wt_update_report rep;
    fail_retire = 1;
    ck_assert_int_eq(te_wt_receiver_update(f.r, f.dir, 1, 100, &rep), -ETIMEDOUT);
    int rc = te_wt_receiver_update(f.r, f.dir, 2, 100, &rep);
    ck_assert_msg(rc == -ESTALE, "%d %s", rc, te_wt_last_error());
    ck_assert_msg(strstr(te_wt_last_error(), "cannot be retired"), "%s",
                  te_wt_last_error());
    fail_retire = 0;
    ck_assert_int_eq(te_wt_receiver_update(f.r, f.dir, 3, 100, &rep), -ETIMEDOUT);
    teardown(&f);
}
END_TEST

START_TEST(mr_reg_error_reaches_the_caller)
{
    te_wt_model *m;
    te_wt_sharding *sh;
    te_wt_schedule *s;
    ck_assert_int_eq(te_wt_preset_model(TE_WT_SMALL_MOE, &m), 0);
    te_wt_infer_layout l = {1, 1, 0, 1};
    ck_assert_int_eq(te_wt_sharding_build(m, &l, &sh), 0);
    ck_assert_int_eq(te_wt_schedule_build(m, sh, 1, 1, 1 << 20, &s), 0);
    te_engine *e = engine(NULL);
    te_wt_trainer *t = NULL;
    fail_mr_reg = 1; /* the first: the staging buffer's */
    int rc = te_wt_trainer_create(e, m, sh, s, 0, &t);
    ck_assert_msg(rc == -EINVAL, "%d %s", rc, te_wt_last_error());
    ck_assert_msg(strstr(te_wt_last_error(), "staging") &&
                  strstr(te_wt_last_error(), "access"), "%s", te_wt_last_error());
    /* A source's registration: the tensor is named, and the trainer stays
     * unbound (no push) until a bind succeeds. */
    ck_assert_int_eq(te_wt_trainer_create(e, m, sh, s, 0, &t), 0);
    te_wt_source *src = calloc(m->count, sizeof(*src));
    uint8_t *part = malloc(m->data_bytes);
    for (uint32_t i = 0; i < m->count; i++) {
        src[i] = (te_wt_source){m->tensors[i].name, part + m->tensors[i].offset,
                                m->tensors[i].nbytes, m->tensors[i].dtype,
                                m->tensors[i].ndim, {0}, TE_MEM_HOST};
        memcpy(src[i].shape, m->tensors[i].shape, sizeof(src[i].shape));
    }
    fail_mr_reg = 1;
    rc = te_wt_trainer_bind(t, src, m->count);
    ck_assert_msg(rc == -EINVAL && strstr(te_wt_last_error(), m->tensors[0].name) &&
                  strstr(te_wt_last_error(), "access"), "%d %s", rc, te_wt_last_error());
    te_wt_push_stats st;
    ck_assert_int_eq(te_wt_trainer_push(t, "/nonexistent", 1, 100, &st), -EINVAL);
    ck_assert_msg(strstr(te_wt_last_error(), "no sources bound"), "%s",
                  te_wt_last_error());
    ck_assert_int_eq(te_wt_trainer_bind(t, src, m->count), (int)m->count);
    te_wt_trainer_destroy(t);
    free(src);
    free(part);
    te_engine_destroy(e);
    te_wt_schedule_free(s);
    te_wt_sharding_free(sh);
    te_wt_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("weights_faults");
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, unconfirmed_writes_fail_the_push);
    tcase_add_test(tc, late_completions_of_previous_push);
    tcase_add_test(tc, shared_engine_keeps_others_completions);
    tcase_add_test(tc, failed_revoke_refuses_next_version);
    tcase_add_test(tc, failed_retire_refuses_next_version);
    tcase_add_test(tc, mr_reg_error_reaches_the_caller);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
