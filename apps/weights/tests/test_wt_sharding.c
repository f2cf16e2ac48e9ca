/*
 * Sharding rules: the inference ranks' slices put back together give the
 * checkpoint tensors exactly (columns, rows, experts, fused qkv/gate_up,
 * replicated kv heads); fp8 slices dequantise to within e4m3 precision;
 * shapes that do not split are refused naming the tensor; FSDP ranges
 * cover every tensor exactly once.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

static struct ckpt make_ckpt(const te_wt_model *m)
{
    struct ckpt c = {m, malloc(m->data_bytes)};
    uint64_t x = 12345;
    for (uint64_t i = 0; i + 1 < m->data_bytes; i += 2) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        c.data[i] = (uint8_t)(x >> 33);
        c.data[i + 1] = (uint8_t)(0x3c + ((x >> 41) & 3) + ((x >> 45) & 1) * 0x80);
    }
    return c;
}

static uint64_t cols_of(const te_wt_tensor *t)
{
    uint64_t c = 1;
    for (uint32_t d = 1; d < t->ndim; d++)
        c *= t->shape[d];
    return c;
}

/* Rebuild every tensor from the slices (no fp8) and compare. */
static void check_reassembly(te_wt_preset preset, te_wt_infer_layout l)
{
    te_wt_model *m;
    te_wt_sharding *s;
    ck_assert_int_eq(te_wt_preset_model(preset, &m), 0);
    ck_assert_msg(te_wt_sharding_build(m, &l, &s) == 0, "%s", te_wt_last_error());
    struct ckpt c = make_ckpt(m);
    uint8_t *seen = calloc(m->data_bytes, 1); /* bytes covered by some slice */
    uint64_t bad = 0; /* counted, asserted once: Check's asserts are syscalls */
    for (uint64_t k = 0; k < s->nslices; k++) {
        const te_wt_slice *sl = &s->slices[k];
        const te_wt_param *p = &s->params[sl->param];
        ck_assert_uint_le(sl->dst_off + sl->bytes, s->rank_bytes[sl->rank]);
        if (k && s->slices[k - 1].rank == sl->rank && s->slices[k - 1].param == sl->param)
            ck_abort_msg("two slices of one param on one rank");
        uint8_t *buf = malloc(sl->bytes);
        ck_assert_int_eq(te_wt_slice_produce(m, s, sl, tensor_data, &c, buf), 0);
        uint64_t rows, cols, col0, r0[3], nr[3];
        te_wt_slice_geometry(m, s, sl->param, sl->rank, &rows, &cols, &col0, r0, nr);
        uint64_t row = 0;
        for (uint32_t i = 0; i < p->members; i++) {
            const te_wt_tensor *t = &m->tensors[s->members[p->first_member + i]];
            unsigned es = te_wt_dtype_size(t->dtype);
            uint64_t fc = cols_of(t);
            for (uint64_t r = 0; r < nr[i]; r++, row++) {
                uint64_t src = t->offset + ((r0[i] + r) * fc + col0) * es;
                bad += memcmp(buf + row * cols * es, c.data + src, cols * es) != 0;
                memset(seen + src, 1, cols * es);
            }
        }
        ck_assert_uint_eq(row, rows);
        free(buf);
    }
    ck_assert_msg(bad == 0, "%llu rows differ from the checkpoint",
                  (unsigned long long)bad);
    uint64_t unseen = 0;
    for (uint64_t i = 0; i < m->data_bytes; i++)
        unseen += !seen[i];
    ck_assert_msg(unseen == 0, "%llu bytes of the checkpoint reach no rank",
                  (unsigned long long)unseen);
    free(seen);
    free(c.data);
    te_wt_sharding_free(s);
    te_wt_model_free(m);
}

START_TEST(reassembly_small)
{
    check_reassembly(TE_WT_SMALL_MOE, (te_wt_infer_layout){1, 1, 0, 0});
    check_reassembly(TE_WT_SMALL_MOE, (te_wt_infer_layout){2, 2, 0, 0});
    check_reassembly(TE_WT_SMALL_MOE, (te_wt_infer_layout){4, 2, 4, 0});
    /* tp 4 > 2 kv heads: each kv head replicated on two ranks. */
    check_reassembly(TE_WT_SMALL_MOE, (te_wt_infer_layout){4, 4, 2, 0});
}
END_TEST

START_TEST(rules_by_name)
{
    te_wt_model *m;
    te_wt_sharding *s;
    ck_assert_int_eq(te_wt_preset_model(TE_WT_SMALL_MOE, &m), 0);
    te_wt_infer_layout l = {4, 2, 4, 1};
    ck_assert_int_eq(te_wt_sharding_build(m, &l, &s), 0);
    int qkv = 0, gate_up_experts = 0;
    for (uint32_t p = 0; p < s->nparams; p++) {
        const te_wt_param *pp = &s->params[p];
        const char *n = m->tensors[s->members[pp->first_member]].name;
        uint64_t ns = s->slice_of_param[p + 1] - s->slice_of_param[p];
        if (strstr(n, "q_proj")) {
            qkv++;
            ck_assert_uint_eq(pp->members, 3);
            ck_assert_uint_eq(pp->split, TE_WT_COLUMN);
            ck_assert(pp->fp8);
            ck_assert_uint_eq(ns, 4);
        }
        if (strstr(n, "experts") && strstr(n, "gate_proj")) {
            gate_up_experts++;
            ck_assert_uint_eq(pp->members, 2);
            ck_assert_uint_eq(ns, 1); /* ep 4 = ranks: one owner */
            ck_assert_uint_eq(s->slices[s->slice_of_param[p]].rank, pp->expert / 2);
        }
        if (strstr(n, "norm") || strstr(n, "mlp.gate.weight")) {
            ck_assert_uint_eq(pp->split, TE_WT_REPLICATE);
            ck_assert(!pp->fp8);
            ck_assert_uint_eq(ns, 4);
        }
        if (strstr(n, "o_proj"))
            ck_assert_uint_eq(pp->split, TE_WT_ROW);
        ck_assert(!strstr(n, "k_proj") && !strstr(n, "up_proj")); /* fused */
    }
    ck_assert_int_eq(qkv, 3);
    ck_assert_int_eq(gate_up_experts, 2 * 8);
    te_wt_sharding_free(s);
    /* Shapes that do not split: the tensor and the field are named. */
    l = (te_wt_infer_layout){3, 3, 0, 0};
    ck_assert_int_eq(te_wt_sharding_build(m, &l, &s), -EINVAL);
    ck_assert_msg(strstr(te_wt_last_error(), "tensor 'model.embed_tokens.weight'") ||
                  strstr(te_wt_last_error(), "does not split over tp 3"),
                  "%s", te_wt_last_error());
    l = (te_wt_infer_layout){3, 1, 3, 0};
    ck_assert_int_eq(te_wt_sharding_build(m, &l, &s), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "does not split over ep 3"));
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "experts."));
    l = (te_wt_infer_layout){4, 3, 0, 0};
    ck_assert_int_eq(te_wt_sharding_build(m, &l, &s), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "multiple of tp 3"));
    te_wt_model_free(m);
}
END_TEST

START_TEST(fp8_slices)
{
    te_wt_model *m;
    te_wt_sharding *s;
    ck_assert_int_eq(te_wt_preset_model(TE_WT_SMALL_MOE, &m), 0);
    te_wt_infer_layout l = {2, 2, 0, 1};
    ck_assert_int_eq(te_wt_sharding_build(m, &l, &s), 0);
    struct ckpt c = make_ckpt(m);
    uint64_t checked = 0, bad = 0;
    for (uint64_t k = 0; k < s->nslices; k++) {
        const te_wt_slice *sl = &s->slices[k];
        if (!s->params[sl->param].fp8)
            continue;
        uint64_t rows, cols, col0, r0[3], nr[3];
        te_wt_slice_geometry(m, s, sl->param, sl->rank, &rows, &cols, &col0, r0, nr);
        ck_assert_uint_eq(sl->bytes, ((rows * cols + 3) & ~3ull) +
                                     4 * te_wt_fp8_scale_count(rows, cols));
        uint8_t *q = aligned_alloc(64, (sl->bytes + 63) & ~63ull);
        ck_assert_int_eq(te_wt_slice_produce(m, s, sl, tensor_data, &c, q), 0);
        const float *sc = (const float *)(q + ((rows * cols + 3) & ~3ull));
        const te_wt_param *p = &s->params[sl->param];
        const te_wt_tensor *t = &m->tensors[s->members[p->first_member]];
        /* First member, row r: compare dequantised values with bf16 input. */
        for (uint64_t r = 0; r < nr[0]; r += 7)
            for (uint64_t cc = 0; cc < cols; cc += 5) {
                uint16_t v;
                memcpy(&v, c.data + t->offset + ((r0[0] + r) * cols_of(t) + col0 + cc) * 2, 2);
                float x = te_wt_bf16_to_float(v);
                float scale = sc[(r / 128) * ((cols + 127) / 128) + cc / 128];
                float back = te_wt_fp8_e4m3_to_float(q[r * cols + cc]) * scale;
                bad += !(fabsf(back - x) <= fabsf(x) / 16 + scale * 0x1p-9f);
                checked++;
            }
        free(q);
    }
    ck_assert_uint_gt(checked, 1000);
    ck_assert_uint_eq(bad, 0);
    free(c.data);
    te_wt_sharding_free(s);
    te_wt_model_free(m);
}
END_TEST

START_TEST(fsdp_ranges)
{
    te_wt_model *m;
    ck_assert_int_eq(te_wt_preset_model(TE_WT_SMALL_MOE, &m), 0);
    for (uint32_t n = 1; n <= 7; n++) {
        uint64_t total = 0;
        for (uint32_t t = 0; t < m->count; t++) {
            uint64_t next = 0, b, e;
            for (uint32_t r = 0; r < n; r++) {
                te_wt_fsdp_range(&m->tensors[t], n, r, &b, &e);
                ck_assert_uint_eq(b, next); /* contiguous, in rank order */
                ck_assert_uint_eq(b % te_wt_dtype_size(m->tensors[t].dtype), 0);
                next = e;
            }
            ck_assert_uint_eq(next, m->tensors[t].nbytes);
        }
        for (uint32_t r = 0; r < n; r++)
            total += te_wt_fsdp_bytes(m, n, r);
        ck_assert_uint_eq(total, m->data_bytes);
    }
    te_wt_model_free(m);
}
END_TEST

START_TEST(big_models_cut)
{
    /* The real tables cut for 128 inference GPUs (tp 8): no error, every
     * rank holds bytes, experts spread evenly. */
    for (int p = TE_WT_KIMI_K2; p <= TE_WT_QWEN3_235B; p++) {
        te_wt_model *m;
        te_wt_sharding *s;
        ck_assert_int_eq(te_wt_preset_model(p, &m), 0);
        te_wt_infer_layout l = {128, 8, 0, 1};
        ck_assert_msg(te_wt_sharding_build(m, &l, &s) == 0, "%s", te_wt_last_error());
        for (uint32_t r = 1; r < 128; r++)
            ck_assert_uint_eq(s->rank_bytes[r], s->rank_bytes[0]);
        te_wt_sharding_free(s);
        te_wt_model_free(m);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("weights_sharding");
    TCase *tc = tcase_create("sharding");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, reassembly_small);
    tcase_add_test(tc, rules_by_name);
    tcase_add_test(tc, fp8_slices);
    tcase_add_test(tc, fsdp_ranges);
    tcase_add_test(tc, big_models_cut);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
