/*
 * The runtime in one process on the loopback transport: a trainer engine
 * and a receiver engine (separate engines, like two GPUs), the small model,
 * fp8. Checks that a pushed version goes live with every byte equal to the
 * checkpoint cut by the same rules, and that a version nobody pushes is
 * rejected at its deadline with every tensor named missing and the
 * previous version still live.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "te/weights.h"

struct ckpt {
    const te_wt_model *m;
    uint8_t *data;
};

static const void *tensor_data(uint32_t t, void *arg)
{
    struct ckpt *c = arg;
    return c->data + c->m->tensors[t].offset;
}

struct recv_job {
    te_wt_receiver *r;
    const char *dir;
    uint32_t version;
    int timeout_ms, rc;
    te_wt_update_report rep;
};

static void *receive(void *arg)
{
    struct recv_job *j = arg;
    j->rc = te_wt_receiver_update(j->r, j->dir, j->version, j->timeout_ms, &j->rep);
    return NULL;
}

static te_engine *engine(void)
{
    te_engine *e;
    ck_assert_msg(te_engine_create(NULL, &e) == 0, "%s", te_last_error());
    return e;
}

START_TEST(push_then_deadline)
{
    te_wt_model *m;
    te_wt_sharding *sh;
    te_wt_schedule *s;
    ck_assert_int_eq(te_wt_preset_model(TE_WT_SMALL_MOE, &m), 0);
    te_wt_infer_layout l = {1, 1, 0, 1};
    ck_assert_int_eq(te_wt_sharding_build(m, &l, &sh), 0);
    ck_assert_int_eq(te_wt_schedule_build(m, sh, 1, 1, 1 << 20, &s), 0);
    /* A checkpoint file of the model. */
    struct ckpt c = {m, malloc(m->data_bytes)};
    for (uint64_t i = 0; i < m->data_bytes; i++)
        c.data[i] = (uint8_t)((i * 2654435761u) >> 13);
    for (uint64_t i = 1; i < m->data_bytes; i += 2)
        c.data[i] = (uint8_t)(0x3c + (c.data[i] & 3)); /* finite bf16 */
    char dir[] = "/tmp/weights_rt_XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/ckpt.safetensors", dir);
    ck_assert_int_eq(te_wt_safetensors_write(path, m, c.data), 0);

    te_engine *et = engine(), *er = engine();
    te_wt_trainer *t;
    te_wt_receiver *r;
    ck_assert_msg(te_wt_receiver_create(er, m, sh, s, 0, &r) == 0, "%s", te_wt_last_error());
    ck_assert_msg(te_wt_trainer_create(et, m, sh, s, 0, &t) == 0, "%s", te_wt_last_error());
    ck_assert_int_eq(te_wt_trainer_load(t, path), 0);
    ck_assert_int_eq(te_wt_trainer_connect(t, dir, 5000), 0);
    ck_assert_ptr_null(te_wt_receiver_live(r, NULL));

    struct recv_job j = {r, dir, 1, 20000, -1, {0}};
    pthread_t th;
    pthread_create(&th, NULL, receive, &j);
    te_wt_push_stats st;
    int rc = te_wt_trainer_push(t, dir, 1, 20000, &st);
    pthread_join(th, NULL);
    ck_assert_msg(rc == 0, "push: %s", te_wt_last_error());
    ck_assert_msg(j.rc == 0, "receive: %d", j.rc);
    ck_assert_uint_eq(st.writes, sh->nslices);
    ck_assert_uint_le(st.peak_inflight, 1 << 20); /* the watermark */
    uint32_t v;
    const uint8_t *live = te_wt_receiver_live(r, &v);
    ck_assert_ptr_nonnull(live);
    ck_assert_uint_eq(v, 1);
    uint8_t *want = aligned_alloc(64, (sh->rank_bytes[0] + 63) & ~63ull);
    uint64_t differ = 0;
    for (uint64_t k = 0; k < sh->nslices; k++) {
        ck_assert_int_eq(te_wt_slice_produce(m, sh, &sh->slices[k], tensor_data, &c,
                                             want), 0);
        differ += memcmp(want, live + sh->slices[k].dst_off, sh->slices[k].bytes) != 0;
    }
    ck_assert_uint_eq(differ, 0);

    /* Version 2: nobody pushes it. */
    j = (struct recv_job){r, dir, 2, 300, -1, {0}};
    receive(&j);
    ck_assert_int_eq(j.rc, -ETIMEDOUT);
    ck_assert_uint_eq(j.rep.missing, j.rep.expected);
    ck_assert_uint_eq(j.rep.live_version, 1);
    ck_assert_ptr_nonnull(strstr(j.rep.missing_names, "model.embed_tokens.weight"));
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "version 1 stays live"));
    ck_assert_ptr_eq(te_wt_receiver_live(r, &v), live);
    ck_assert_uint_eq(v, 1);
    /* A late push of version 1 is refused by the trainer (the receiver moved
     * on to version 2) rather than written into a buffer. */
    ck_assert_int_ne(te_wt_trainer_push(t, dir, 1, 500, &st), 0);

    te_wt_trainer_destroy(t);
    te_wt_receiver_destroy(r);
    te_engine_destroy(et);
    te_engine_destroy(er);
    free(want);
    free(c.data);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    te_wt_schedule_free(s);
    te_wt_sharding_free(sh);
    te_wt_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("weights_runtime");
    TCase *tc = tcase_create("runtime");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, push_then_deadline);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
