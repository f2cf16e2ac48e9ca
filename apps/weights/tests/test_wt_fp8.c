/*
 * fp8 E4M3 against hand-computed encodings (OCP 8-bit FP spec, E4M3 "FN":
 * bias 7, 3 mantissa bits, S.1111.111 NaN, max 448), including every kind
 * of tie (round to nearest even), subnormals and saturation; and the
 * 128x128 block quantiser.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "te/weights.h"

#define ENC(x, code) ck_assert_msg(te_wt_fp8_e4m3_from_float(x) == (code),     \
    "e4m3(%a) = 0x%02x, expected 0x%02x", (double)(x),                       \
    te_wt_fp8_e4m3_from_float(x), (code))

START_TEST(encode_hand_computed)
{
    ENC(0.0f, 0x00);
    ENC(-0.0f, 0x80);
    ENC(1.0f, 0x38);                 /* 0.0111.000: 2^(7-7) */
    ENC(-2.0f, 0xc0);                /* 1.1000.000 */
    ENC(1.5f, 0x3c);                 /* 0.0111.100 */
    ENC(240.0f, 0x77);               /* 1.875 * 2^7: 0.1110.111 */
    ENC(256.0f, 0x78);               /* 0.1111.000 */
    ENC(448.0f, 0x7e);               /* largest finite */
    ENC(449.0f, 0x7e);               /* saturate */
    ENC(464.0f, 0x7e);               /* tie 448/480, 480 would be NaN: saturate */
    ENC(1e9f, 0x7e);
    ENC(-1e9f, 0xfe);
    ENC(INFINITY, 0x7e);
    ENC(-INFINITY, 0xfe);
    ck_assert_int_eq(te_wt_fp8_e4m3_from_float(NAN) & 0x7f, 0x7f);
    ENC(0x1p-9f, 0x01);              /* smallest subnormal */
    ENC(0x1p-10f, 0x00);             /* half of it: tie -> even (0) */
    ENC(0x1.8p-10f, 0x01);           /* 0.75 of it: nearest is 1 */
    ENC(0x3p-10f, 0x02);             /* 1.5 units: tie 1/2 -> even 2 */
    ENC(0x5p-10f, 0x02);             /* 2.5 units: tie 2/3 -> even 2 */
    ENC(0x7p-9f, 0x07);              /* largest subnormal 7 * 2^-9 */
    ENC(0xfp-10f, 0x08);             /* 7.5 units: tie 7/8 -> 8 = 2^-6 normal */
    ENC(0x1p-6f, 0x08);              /* smallest normal */
    ENC(1.0625f, 0x38);              /* tie 1.0/1.125 -> even mantissa 0 */
    ENC(1.1875f, 0x3a);              /* tie 1.125/1.25 -> even mantissa 2 */
    ENC(1.0624f, 0x38);
    ENC(1.0626f, 0x39);
    ENC(15.5f, 0x58);                /* tie 15 (0.1010.111) / 16 (0.1011.000) -> even 16 */
    ENC(-0.1f, 0x9d);                /* 0.1 = 1.6*2^-4 -> 1.625*2^-4: 1.0011.101 */
    ENC(1e-30f, 0x00);               /* underflow to zero */
}
END_TEST

START_TEST(decode_round_trip)
{
    float prev = -1;
    for (int c = 0; c < 256; c++) {
        float v = te_wt_fp8_e4m3_to_float((uint8_t)c);
        if ((c & 0x7f) == 0x7f) {
            ck_assert(isnan(v));
            continue;
        }
        ck_assert_int_eq(te_wt_fp8_e4m3_from_float(v), c);
        if (c < 0x7f) {
            ck_assert(v > prev); /* monotonic over the positive codes */
            prev = v;
        }
    }
    ck_assert(te_wt_fp8_e4m3_to_float(0x7e) == 448.0f);
    ck_assert(te_wt_fp8_e4m3_to_float(0x01) == 0x1p-9f);
    /* Every float between two neighbours goes to the nearer one. */
    for (int c = 1; c < 0x7e; c++) {
        float lo = te_wt_fp8_e4m3_to_float((uint8_t)c);
        float hi = te_wt_fp8_e4m3_to_float((uint8_t)(c + 1));
        float below = nextafterf((lo + hi) / 2, 0), above = nextafterf((lo + hi) / 2, 1e9f);
        ck_assert_int_eq(te_wt_fp8_e4m3_from_float(below), c);
        ck_assert_int_eq(te_wt_fp8_e4m3_from_float(above), c + 1);
        /* The exact midpoint goes to the even code. */
        ck_assert_int_eq(te_wt_fp8_e4m3_from_float((lo + hi) / 2), (c & 1) ? c + 1 : c);
    }
}
END_TEST

static uint16_t bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16); /* test values are exact in bf16 */
}

START_TEST(block_quantise)
{
    const uint64_t rows = 130, cols = 200;
    uint16_t *in = malloc(rows * cols * 2);
    uint8_t *out = malloc(rows * cols);
    for (uint64_t i = 0; i < rows * cols; i++)
        in[i] = bf16((float)((int)(i % 17) - 8) * 0.25f);
    in[5] = bf16(-12.0f);                 /* amax of block (0,0) */
    for (uint64_t r = 0; r < 128; r++)    /* block (0,1) all zero */
        for (uint64_t c = 128; c < cols; c++)
            in[r * cols + c] = 0;
    ck_assert_uint_eq(te_wt_fp8_scale_count(rows, cols), 4);
    float sc[4];
    te_wt_fp8_quantise_bf16(in, rows, cols, out, sc);
    ck_assert(sc[0] == 12.0f / 448.0f);
    ck_assert_int_eq(out[5], 0xfe);       /* -amax -> -448 */
    ck_assert(sc[1] == 1.0f);             /* zero block: scale 1 */
    ck_assert_int_eq(out[3 * cols + 150], 0);
    ck_assert(sc[2] == 2.0f / 448.0f);    /* partial rows 128..129: amax 8*0.25 */
    /* Each output is the encoding of x / scale (same rounding). */
    uint64_t bad = 0;
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t c = 0; c < cols; c++) {
            float s = sc[(r / 128) * 2 + c / 128];
            float x = te_wt_bf16_to_float(in[r * cols + c]);
            bad += out[r * cols + c] != te_wt_fp8_e4m3_from_float(x / s);
            float back = te_wt_fp8_e4m3_to_float(out[r * cols + c]) * s;
            bad += !(fabsf(back - x) <= fabsf(x) / 16 + s * 0x1p-9f);
        }
    ck_assert_uint_eq(bad, 0);
    free(in);
    free(out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("weights_fp8");
    TCase *tc = tcase_create("fp8");
    tcase_add_test(tc, encode_hand_computed);
    tcase_add_test(tc, decode_round_trip);
    tcase_add_test(tc, block_quantise);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
