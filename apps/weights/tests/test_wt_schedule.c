/*
 * The static schedule: every slice written exactly once, staging ranges of
 * a trainer never overlap while both can be in flight (the ring), the same
 * inputs give the same bytes, balance by bytes over trainers and receivers
 * on the real Kimi-K2 table, and the serialised form refuses damaged
 * input and a schedule of another model or layout.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "te/weights.h"

static void build(te_wt_preset p, te_wt_infer_layout l, uint32_t trainers,
                  uint64_t staging, te_wt_model **m, te_wt_sharding **sh,
                  te_wt_schedule **s)
{
    ck_assert_int_eq(te_wt_preset_model(p, m), 0);
    ck_assert_int_eq(te_wt_sharding_build(*m, &l, sh), 0);
    ck_assert_msg(te_wt_schedule_build(*m, *sh, trainers, 2, staging, s) == 0, "%s",
                  te_wt_last_error());
}

static void destroy(te_wt_model *m, te_wt_sharding *sh, te_wt_schedule *s)
{
    te_wt_schedule_free(s);
    te_wt_sharding_free(sh);
    te_wt_model_free(m);
}

START_TEST(every_slice_once)
{
    te_wt_model *m;
    te_wt_sharding *sh;
    te_wt_schedule *s;
    const uint64_t staging = 256 << 10;
    build(TE_WT_SMALL_MOE, (te_wt_infer_layout){4, 2, 4, 1}, 3, staging, &m, &sh, &s);
    ck_assert_uint_eq(s->nwrites, sh->nslices);
    uint8_t *seen = calloc(sh->nslices, 1);
    uint64_t bad = 0;
    for (uint32_t t = 0; t < 3; t++) {
        uint64_t prev_end = 0;
        for (uint64_t w = s->trainer_first[t]; w < s->trainer_first[t + 1]; w++) {
            const te_wt_write *x = &s->writes[w];
            bad += x->trainer != t || x->seq != w - s->trainer_first[t];
            bad += seen[x->slice]++ != 0;
            uint64_t len = sh->slices[x->slice].bytes;
            bad += x->staging_off + len > staging;
            /* Ring: a write starts where the previous ended, or at 0. */
            bad += x->staging_off != 0 && x->staging_off != ((prev_end + 63) & ~63ull);
            prev_end = x->staging_off + len;
        }
    }
    ck_assert_uint_eq(bad, 0);
    for (uint64_t k = 0; k < sh->nslices; k++)
        bad += !seen[k];
    ck_assert_uint_eq(bad, 0);
    free(seen);
    destroy(m, sh, s);
}
END_TEST

START_TEST(deterministic_and_round_trip)
{
    te_wt_model *m, *m2;
    te_wt_sharding *sh, *sh2;
    te_wt_schedule *s, *s2, *back;
    build(TE_WT_SMALL_MOE, (te_wt_infer_layout){2, 2, 0, 1}, 2, 0, &m, &sh, &s);
    build(TE_WT_SMALL_MOE, (te_wt_infer_layout){2, 2, 0, 1}, 2, 0, &m2, &sh2, &s2);
    void *a, *b;
    size_t la, lb;
    ck_assert_int_eq(te_wt_schedule_serialize(s, &a, &la), 0);
    ck_assert_int_eq(te_wt_schedule_serialize(s2, &b, &lb), 0);
    ck_assert_uint_eq(la, lb);
    ck_assert(memcmp(a, b, la) == 0);
    ck_assert_int_eq(te_wt_schedule_parse(a, la, m, sh, &back), 0);
    ck_assert_uint_eq(back->nwrites, s->nwrites);
    ck_assert(memcmp(back->writes, s->writes, s->nwrites * sizeof(te_wt_write)) == 0);
    ck_assert(memcmp(back->trainer_first, s->trainer_first, 3 * sizeof(uint64_t)) == 0);
    te_wt_schedule_free(back);
    /* Damaged input. */
    uint8_t *d = malloc(la);
    memcpy(d, a, la);
    ck_assert_int_eq(te_wt_schedule_parse(d, la - 1, m, sh, &back), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "do not match the length"));
    ck_assert_int_eq(te_wt_schedule_parse(d, 20, m, sh, &back), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "truncated"));
    d[100] ^= 1;
    ck_assert_int_eq(te_wt_schedule_parse(d, la, m, sh, &back), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "checksum"));
    memcpy(d, a, la);
    d[8] = 9;
    ck_assert_int_eq(te_wt_schedule_parse(d, la, m, sh, &back), -EPROTO);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "version 9"));
    free(d);
    /* The same model cut for another layout. */
    te_wt_sharding *other;
    te_wt_infer_layout l4 = {4, 2, 0, 1};
    ck_assert_int_eq(te_wt_sharding_build(m, &l4, &other), 0);
    ck_assert_int_eq(te_wt_schedule_parse(a, la, m, other, &back), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "field layout"));
    te_wt_sharding_free(other);
    /* Another model: refused by fingerprint. */
    te_wt_model *q;
    ck_assert_int_eq(te_wt_preset_model(TE_WT_QWEN3_235B, &q), 0);
    ck_assert_int_eq(te_wt_schedule_parse(a, la, q, sh, &back), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "field fingerprint"));
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "Qwen3-235B-A22B"));
    te_wt_model_free(q);
    free(a);
    free(b);
    destroy(m, sh, s);
    destroy(m2, sh2, s2);
}
END_TEST

START_TEST(kimi_balanced)
{
    te_wt_model *m;
    te_wt_sharding *sh;
    te_wt_schedule *s;
    build(TE_WT_KIMI_K2, (te_wt_infer_layout){128, 8, 0, 1}, 256, 0, &m, &sh, &s);
    te_wt_summary su;
    te_wt_schedule_summary(m, sh, s, &su);
    ck_assert_uint_eq(su.writes, sh->nslices);
    ck_assert_msg(su.trainer_imbalance < 1.10, "trainer imbalance %.3f",
                  su.trainer_imbalance);
    ck_assert_msg(su.receiver_imbalance < 1.01, "receiver imbalance %.3f",
                  su.receiver_imbalance);
    /* Simulator: monotone in the link speed; the per-write CPU term is
     * exactly linear in the overhead. */
    te_wt_sim_params p = {400, 1, 23, 2, 2000, 0, 1 << 30, 0};
    te_wt_sim_result r1, r2;
    ck_assert_int_eq(te_wt_simulate(m, sh, s, &p, &r1), 0);
    p.nic_gbps = 800;
    ck_assert_int_eq(te_wt_simulate(m, sh, s, &p, &r2), 0);
    ck_assert(r2.seconds < r1.seconds);
    ck_assert(r2.receiver_rx_s * 2 > r1.receiver_rx_s * 0.999 &&
              r2.receiver_rx_s * 2 < r1.receiver_rx_s * 1.001);
    p.nic_gbps = 400;
    p.write_overhead_us = 46;
    p.read_overhead_us = 4;
    ck_assert_int_eq(te_wt_simulate(m, sh, s, &p, &r2), 0);
    ck_assert(r2.submit_s > r1.submit_s * 1.999 && r2.submit_s < r1.submit_s * 2.001);
    ck_assert_ptr_nonnull(r1.bound);
    destroy(m, sh, s);
}
END_TEST

START_TEST(watermark_too_small)
{
    te_wt_model *m;
    te_wt_sharding *sh;
    te_wt_schedule *s;
    ck_assert_int_eq(te_wt_preset_model(TE_WT_SMALL_MOE, &m), 0);
    te_wt_infer_layout l = {1, 1, 0, 0};
    ck_assert_int_eq(te_wt_sharding_build(m, &l, &sh), 0);
    ck_assert_int_eq(te_wt_schedule_build(m, sh, 1, 1, 4096, &s), -E2BIG);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "exceeds the staging watermark"));
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "tensor '"));
    te_wt_sharding_free(sh);
    te_wt_model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("weights_schedule");
    TCase *tc = tcase_create("schedule");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, every_slice_once);
    tcase_add_test(tc, deterministic_and_round_trip);
    tcase_add_test(tc, kimi_balanced);
    tcase_add_test(tc, watermark_too_small);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
