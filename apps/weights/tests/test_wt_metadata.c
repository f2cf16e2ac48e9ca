/*
 * safetensors parsing (valid files round-trip; every kind of lie in a
 * header is refused with a message naming the tensor and the field) and
 * the preset tensor tables (parameter totals recomputed here from the
 * published config numbers by a separate formula).
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "te/weights.h"

/* Header bytes: 8-byte length + json (no data unless data_len). */
static uint8_t *header(const char *json, size_t data_len, size_t *len)
{
    size_t n = strlen(json);
    *len = 8 + n + data_len;
    uint8_t *b = calloc(1, *len);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, json, n);
    return b;
}

static int parse(const char *json, size_t data_len, int whole, te_wt_model **m)
{
    size_t len;
    uint8_t *b = header(json, data_len, &len);
    int rc = te_wt_safetensors_parse(b, len, whole, m);
    free(b);
    return rc;
}

#define EXPECT_ERR(json, data_len, whole, code, needle)                        \
    do {                                                                       \
        te_wt_model *m_ = NULL;                                                \
        int rc_ = parse(json, data_len, whole, &m_);                           \
        ck_assert_msg(rc_ == (code), "rc %d for %s (%s)", rc_, json,           \
                      te_wt_last_error());                                     \
        ck_assert_msg(strstr(te_wt_last_error(), needle), "message '%s' lacks '%s'", \
                      te_wt_last_error(), needle);                             \
        ck_assert_ptr_null(m_);                                                \
    } while (0)

START_TEST(valid_header)
{
    te_wt_model *m;
    const char *j = "{\"b\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[8,32]},"
                    "\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]},"
                    "\"__metadata__\":{\"format\":\"pt\"}}";
    ck_assert_int_eq(parse(j, 32, 1, &m), 0);
    ck_assert_uint_eq(m->count, 2);
    ck_assert_str_eq(m->tensors[0].name, "a"); /* sorted by offset */
    ck_assert_uint_eq(m->tensors[1].nbytes, 24);
    ck_assert_uint_eq(m->data_bytes, 32);
    ck_assert_str_eq(m->metadata_json, "{\"format\":\"pt\"}");
    te_wt_model_free(m);
    /* Header only: data size unknown, still checked for gaps/overlaps. */
    ck_assert_int_eq(parse(j, 0, 0, &m), 0);
    te_wt_model_free(m);
}
END_TEST

START_TEST(bad_headers)
{
    const char *t = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    /* A length that lies (larger than the bytes that follow). */
    uint8_t b[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    te_wt_model *m = NULL;
    ck_assert_int_eq(te_wt_safetensors_parse(b, 10, 0, &m), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "header length 200 exceeds"));
    uint8_t huge[8] = {0, 0, 0, 0, 0, 0, 0, 0x80};
    ck_assert_int_eq(te_wt_safetensors_parse(huge, 8, 0, &m), -E2BIG);
    ck_assert_int_eq(te_wt_safetensors_parse(b, 5, 0, &m), -EBADMSG);
    EXPECT_ERR("{\"w\":", 0, 0, -EBADMSG, "JSON error");
    EXPECT_ERR("[1,2]", 0, 0, -EINVAL, "not a JSON object");
    EXPECT_ERR("{\"w\":{\"dtype\":\"F7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 0,
               -EINVAL, "tensor 'w': field dtype: unknown dtype 'F7'");
    EXPECT_ERR("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 0, -EINVAL,
               "tensor 'w': field dtype missing");
    EXPECT_ERR("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 0, 0,
               -EINVAL, "tensor 'w': field data_offsets [0, 8) holds 8 bytes but "
               "shape x F32 needs 12");
    EXPECT_ERR("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 0, 0,
               -EINVAL, "tensor 'w': field shape[0]");
    EXPECT_ERR("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
               "\"data_offsets\":[0,4]}}", 0, 0, -EINVAL, "9 dims");
    EXPECT_ERR("{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],"
               "\"data_offsets\":[0,8]}}", 0, 0, -ERANGE, "overflows");
    EXPECT_ERR("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 0, 0,
               -EINVAL, "begin <= end");
    EXPECT_ERR("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 0, 0,
               -EINVAL, "is not [begin, end]");
    EXPECT_ERR("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 0, 0,
               -EINVAL, "tensor 'b': field data_offsets [4, 12) overlaps tensor 'a'");
    EXPECT_ERR("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}", 0, 0,
               -EINVAL, "tensor 'b': field data_offsets begins at 16, leaving a gap");
    /* Out of range: the offsets point past the data section of the file. */
    EXPECT_ERR(t, 4, 1, -ERANGE, "tensor 'w': field data_offsets end 8 is beyond "
               "the data section of 4 bytes");
    EXPECT_ERR(t, 12, 1, -EINVAL, "cover 8 bytes of a data section of 12");
    EXPECT_ERR("{\"__metadata__\":{\"k\":1}}", 0, 0, -EINVAL,
               "__metadata__ field 'k' is not a string");
    EXPECT_ERR("{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
               "\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, 0,
               -EBADMSG, "duplicate");
}
END_TEST

START_TEST(file_round_trip)
{
    te_wt_model *m, *back;
    ck_assert_int_eq(te_wt_preset_model(TE_WT_SMALL_MOE, &m), 0);
    uint8_t *data = malloc(m->data_bytes);
    for (uint64_t i = 0; i < m->data_bytes; i++)
        data[i] = (uint8_t)(i * 31);
    char path[] = "/tmp/weights_test_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(te_wt_safetensors_write(path, m, data), 0);
    ck_assert_int_eq(te_wt_safetensors_load(path, &back), 0);
    ck_assert_uint_eq(back->count, m->count);
    ck_assert_uint_eq(back->data_bytes, m->data_bytes);
    /* Same tensors (the file sorts by offset, presets are in offset order). */
    for (uint32_t i = 0; i < m->count; i++) {
        ck_assert_str_eq(back->tensors[i].name, m->tensors[i].name);
        ck_assert_uint_eq(back->tensors[i].offset, m->tensors[i].offset);
    }
    ck_assert_uint_eq(te_wt_model_fingerprint(back), te_wt_model_fingerprint(m));
    te_wt_model_free(back);
    /* A truncated file: the data section no longer covers the tensors. */
    ck_assert_int_eq(truncate(path, 8 + 100), 0);
    ck_assert_int_lt(te_wt_safetensors_load(path, &back), 0);
    unlink(path);
    ck_assert_int_eq(te_wt_safetensors_load(path, &back), -ENOENT);
    free(data);
    te_wt_model_free(m);
}
END_TEST

/* Parameters of a DeepSeek-V3-family model, from the config numbers. */
static uint64_t mla_params(uint64_t layers, uint64_t h, uint64_t heads, uint64_t vocab,
                           uint64_t experts, uint64_t dense_layers)
{
    uint64_t attn = h * 1536 + 1536 + 1536 * heads * 192 + h * 576 + 512 +
                    512 * heads * 256 + h * heads * 128 + 2 * h;
    uint64_t dense = 3 * h * 18432;
    uint64_t moe = experts * h + experts + experts * 3 * h * 2048 + 3 * h * 2048;
    return 2 * vocab * h + h + layers * attn + dense_layers * dense +
           (layers - dense_layers) * moe;
}

START_TEST(presets)
{
    te_wt_model *m;
    ck_assert_int_eq(te_wt_preset_model(TE_WT_KIMI_K2, &m), 0);
    ck_assert_uint_eq(te_wt_model_params(m), mla_params(61, 7168, 64, 163840, 384, 1));
    ck_assert_int_ge(te_wt_model_find(m, "model.layers.60.mlp.experts.383.down_proj.weight"), 0);
    ck_assert_int_eq(te_wt_model_find(m, "model.layers.0.mlp.experts.0.down_proj.weight"),
                     -ENOENT); /* the first layer is dense */
    int64_t q = te_wt_model_find(m, "model.layers.5.self_attn.q_b_proj.weight");
    ck_assert_uint_eq(m->tensors[q].shape[0], 64 * 192);
    ck_assert_uint_eq(m->tensors[q].shape[1], 1536);
    te_wt_model_free(m);
    ck_assert_int_eq(te_wt_preset_model(TE_WT_DEEPSEEK_V3, &m), 0);
    ck_assert_uint_eq(te_wt_model_params(m), mla_params(61, 7168, 128, 129280, 256, 3));
    /* Published: 671B parameters of the main model. */
    ck_assert(te_wt_model_params(m) > 670e9 && te_wt_model_params(m) < 672e9);
    te_wt_model_free(m);
    ck_assert_int_eq(te_wt_preset_model(TE_WT_QWEN3_235B, &m), 0);
    uint64_t h = 4096, attn = h * 8192 + 2 * h * 512 + 8192 * h + 2 * 128 + 2 * h;
    uint64_t moe = 128 * h + 128 * 3 * h * 1536;
    ck_assert_uint_eq(te_wt_model_params(m), 2 * 151936 * h + h + 94 * (attn + moe));
    ck_assert(te_wt_model_params(m) > 235e9 && te_wt_model_params(m) < 236e9);
    te_wt_model_free(m);
    te_wt_preset p;
    ck_assert_int_eq(te_wt_preset_parse("Kimi-K2", &p), 0);
    ck_assert_int_eq(p, TE_WT_KIMI_K2);
    ck_assert_int_eq(te_wt_preset_parse("gpt-5", &p), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_wt_last_error(), "unknown model preset 'gpt-5'"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("weights_metadata");
    TCase *tc = tcase_create("metadata");
    tcase_add_test(tc, valid_header);
    tcase_add_test(tc, bad_headers);
    tcase_add_test(tc, file_round_trip);
    tcase_add_test(tc, presets);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
