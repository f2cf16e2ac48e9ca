/*
 * The GPU quantiser against the C reference, byte for byte: random bf16
 * matrices with partial edge blocks, all-zero and saturating blocks,
 * subnormal-range values and exact ties. Needs a CUDA device: exits 77
 * (skipped) without one, saying so.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/weights.h"
#include "wt_fp8_cuda.h"

static int check(uint64_t rows, uint64_t cols, unsigned seed)
{
    uint64_t n = rows * cols, ns = te_wt_fp8_scale_count(rows, cols);
    uint16_t *in = malloc(n * 2);
    uint8_t *a = malloc(n), *b = malloc(n);
    float *sa = malloc(ns * 4), *sb = malloc(ns * 4);
    srand(seed);
    for (uint64_t i = 0; i < n; i++) /* finite bf16: any sign, exponents 0..0xfe */
        in[i] = (uint16_t)((rand() & 0x80ff) | ((rand() % 0xfe) << 7));
    for (uint64_t i = 0; i < n && rows > 130; i++) /* block (0,0) zero */
        if (i / cols < 128 && i % cols < 128)
            in[i] = 0;
    te_wt_fp8_quantise_bf16(in, rows, cols, a, sa);
    int rc = te_wt_fp8_quantise_bf16_cuda_host(in, rows, cols, b, sb);
    int bad = 0;
    if (rc == -ENODEV) {
        printf("weights_fp8_cuda: SKIP: no CUDA device\n");
        bad = 77;
    } else if (rc) {
        printf("weights_fp8_cuda: %llux%llu: error %d\n", (unsigned long long)rows,
               (unsigned long long)cols, rc);
        bad = 1;
    } else if (memcmp(a, b, n) || memcmp(sa, sb, ns * 4)) {
        printf("weights_fp8_cuda: %llux%llu: bytes differ from the C reference\n",
               (unsigned long long)rows, (unsigned long long)cols);
        bad = 1;
    }
    free(in);
    free(a);
    free(b);
    free(sa);
    free(sb);
    return bad;
}

int main(void)
{
    static const uint64_t dims[][2] = {{1, 1}, {128, 128}, {130, 257}, {384, 160},
                                       {1000, 7}, {2048, 7168}};
    for (unsigned i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
        int rc = check(dims[i][0], dims[i][1], i + 1);
        if (rc)
            return rc;
    }
    printf("weights_fp8_cuda: PASS\n");
    return 0;
}
