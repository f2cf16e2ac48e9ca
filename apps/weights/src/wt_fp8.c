/*
 * fp8 E4M3 (OCP 8-bit floating point spec, "FN" variant used for weights:
 * bias 7, no infinities, S.1111.111 is NaN, largest finite 448) and the
 * 128x128 block quantisation of DeepSeek-V3 / Kimi-K2 checkpoints.
 *
 * The encoder is exact: the value is scaled by a power of two into the
 * integer range of the target's significand (exact in binary float), and
 * rounded once with rintf (round to nearest, ties to even, the default
 * mode), so no double rounding can occur.
 */
#include <math.h>
#include <string.h>

#include "wt_internal.h"

#define E4M3_MAX 448.0f

uint8_t te_wt_fp8_e4m3_from_float(float x)
{
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    if (isnan(x))
        return sign | 0x7f;
    if (a >= E4M3_MAX)                  /* saturate, infinities included */
        return sign | 0x7e;
    if (a < 0x1p-6f) {                  /* subnormal: m * 2^-9, m in 0..8 */
        float m = rintf(a * 512.0f);    /* m = 8 is the smallest normal */
        return sign | (uint8_t)m;
    }
    int k;
    frexpf(a, &k);                      /* a = f * 2^k, f in [0.5, 1) */
    int e = k - 1;                      /* a = 1.xxx * 2^e, e in -6..8 */
    float r = rintf(ldexpf(a, 3 - e));  /* significand * 8, in 8..16 */
    if (r == 16.0f) {
        r = 8.0f;
        e++;
    }
    return sign | (uint8_t)((e + 7) << 3) | (uint8_t)(r - 8.0f);
}

float te_wt_fp8_e4m3_to_float(uint8_t v)
{
    int e = (v >> 3) & 15, m = v & 7;
    float a;
    if (e == 15 && m == 7)
        a = NAN;
    else if (e == 0)
        a = ldexpf((float)m, -9);
    else
        a = ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return (v & 0x80) ? -a : a;
}

float te_wt_bf16_to_float(uint16_t v)
{
    uint32_t bits = (uint32_t)v << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static uint64_t blocks(uint64_t n)
{
    return (n + TE_WT_FP8_BLOCK - 1) / TE_WT_FP8_BLOCK;
}

uint64_t te_wt_fp8_scale_count(uint64_t rows, uint64_t cols)
{
    return blocks(rows) * blocks(cols);
}

void te_wt_fp8_quantise_bf16(const uint16_t *in, uint64_t rows, uint64_t cols,
                             uint8_t *out, float *scales)
{
    uint64_t bc = blocks(cols);
    for (uint64_t br = 0; br < blocks(rows); br++)
        for (uint64_t bj = 0; bj < bc; bj++) {
            uint64_t r0 = br * TE_WT_FP8_BLOCK, c0 = bj * TE_WT_FP8_BLOCK;
            uint64_t r1 = r0 + TE_WT_FP8_BLOCK < rows ? r0 + TE_WT_FP8_BLOCK : rows;
            uint64_t c1 = c0 + TE_WT_FP8_BLOCK < cols ? c0 + TE_WT_FP8_BLOCK : cols;
            float amax = 0;
            for (uint64_t r = r0; r < r1; r++)
                for (uint64_t c = c0; c < c1; c++) {
                    float v = fabsf(te_wt_bf16_to_float(in[r * cols + c]));
                    if (v > amax)
                        amax = v;
                }
            float s = amax > 0 && isfinite(amax) ? amax / E4M3_MAX : 1.0f;
            scales[br * bc + bj] = s;
            for (uint64_t r = r0; r < r1; r++)
                for (uint64_t c = c0; c < c1; c++)
                    out[r * cols + c] = te_wt_fp8_e4m3_from_float(
                        te_wt_bf16_to_float(in[r * cols + c]) / s);
        }
}
