// moe_gpu_mem (ctest label gpu): te-moe's split calls on CUDA device
// tensors through te_moe_gpu_mem_ops (x, recv.x, the expert outputs and
// out in device memory; staged, in place with x registered as TE_MEM_CUDA,
// index mode; fp32 and bf16; R 2 and 4, top-k 1/2/8): every output equals
// the dense single-process reference bit for bit, as on the host; bf16
// expert outputs give the host run's bits. Exits 77
// with the reason when no CUDA device (or driver) is present. --host runs
// the same job harness on host tensors (ctest moe_gpu_job_host, runs
// everywhere: the harness te-moe-gpu-bench also uses).
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_gpu_job.h"

static int failures;
static int on_device = 1; /* --host: the same runs on host tensors */

static void run(uint32_t R, uint32_t k, uint32_t E, uint32_t dtype, int inplace,
                int index, uint32_t skew)
{
    te_moe_config c = {.ranks = R, .experts = E, .topk = k, .hidden = 256,
                       .dtype = dtype, .max_tokens = 64, .private_rows = 16,
                       .timeout_ms = 20000, .naive = 0};
    struct moe_gpu_job g;
    const char *what = dtype == TE_MOE_BF16 ? "bf16" : "fp32";
    int rc = moe_gpu_job_open(&g, &c, NULL, on_device, inplace, index, 0);
    for (uint32_t b = 0; !rc && b < 3; b++) {
        uint32_t tok[TE_MOE_MAX_RANKS];
        for (uint32_t i = 0; i < R; i++)
            tok[i] = c.max_tokens - (i * 7 + b) % 11;
        moe_job_inputs(&g.j, tok, 900 + b, skew);
        if ((rc = moe_gpu_job_batch(&g, b)))
            break;
        uint64_t bad = moe_job_check(&g.j);
        if (bad) {
            printf("FAIL R=%u k=%u %s inplace %d index %d batch %u: %llu floats "
                   "differ from the dense reference\n", R, k, what, inplace, index,
                   b, (unsigned long long)bad);
            failures++;
        }
    }
    if (rc) {
        printf("FAIL R=%u k=%u %s inplace %d index %d: %s\n", R, k, what, inplace,
               index, g.why);
        failures++;
    } else {
        printf("ok R=%u k=%u %s inplace %d index %d skew %u\n", R, k, what, inplace,
               index, skew);
    }
    moe_gpu_job_close(&g);
}

/* bf16 expert outputs through the library and the backend: every
 * rank's result equals the same job's on host tensors (the built-in host
 * backend) bit for bit. --host: the host against itself (the harness). */
static void run_bf16_outputs(uint32_t R, uint32_t k, uint32_t E)
{
    te_moe_config c = {.ranks = R, .experts = E, .topk = k, .hidden = 256,
                       .dtype = TE_MOE_FP32, .max_tokens = 64, .private_rows = 16,
                       .timeout_ms = 20000, .naive = 0};
    static float want[TE_MOE_MAX_RANKS][64 * 256];
    uint32_t tok[TE_MOE_MAX_RANKS];
    for (uint32_t i = 0; i < R; i++)
        tok[i] = c.max_tokens - (i * 5) % 9;
    for (int pass = 0; pass < 2; pass++) { /* 0: host tensors, 1: device */
        struct moe_gpu_job g;
        int rc = moe_gpu_job_open(&g, &c, NULL, pass ? on_device : 0, 0, 0, 0);
        if (!rc) {
            g.bf16_out = 1;
            moe_job_inputs(&g.j, tok, 77, 0);
            rc = moe_gpu_job_batch(&g, 0);
        }
        for (uint32_t i = 0; !rc && i < R; i++) {
            size_t bytes = (size_t)tok[i] * c.hidden * sizeof(float);
            if (!pass) {
                memcpy(want[i], g.j.out[i], bytes);
            } else if (memcmp(want[i], g.j.out[i], bytes)) {
                printf("FAIL bf16 outputs R=%u k=%u rank %u: differ from the "
                       "host run\n", R, k, i);
                failures++;
            }
        }
        if (rc) {
            printf("FAIL bf16 outputs R=%u k=%u: %s\n", R, k, g.why);
            failures++;
        }
        moe_gpu_job_close(&g);
        if (rc)
            return;
    }
    printf("ok bf16 outputs R=%u k=%u\n", R, k);
}

#define CHECK(c, what)                                                         \
    do {                                                                       \
        if (!(c)) {                                                            \
            printf("FAIL backend: %s (line %d)\n", what, __LINE__);            \
            failures++;                                                        \
        }                                                                      \
    } while (0)

/* The CUDA backend on its own, before the library drives it (so that a
 * failure on a first GPU run names the step): row copies host area <->
 * device, weighted sums with 0, 1 and 3 terms of fp32 and of bf16 rows
 * against the same sums on the CPU (bit for bit: no FMA on either side),
 * an unknown dtype and a second attach refused. */
static void test_backend_direct(void)
{
    const size_t H = 64, area_len = 1 << 20;
    te_moe_mem_ops ops;
    CHECK(te_moe_gpu_mem_ops_new(NULL, &ops) == 0, te_moe_gpu_last_error());
    uint8_t *area = (uint8_t *)aligned_alloc(4096, area_len);
    float *dev = NULL;
    if (!area || cudaMalloc((void **)&dev, 8 * H * sizeof(float)) != cudaSuccess) {
        CHECK(0, "allocations");
        free(area);
        te_moe_gpu_mem_ops_free(&ops);
        return;
    }
    memset(area, 0, area_len);
    float *host = (float *)area; /* rows 0..7 source, 8.. results */
    for (size_t i = 0; i < 8 * H; i++)
        host[i] = (float)((int)(i * 37 % 101) - 50) / 7.0f;
    CHECK(ops.attach(ops.ctx, area, area_len) == 0, ops.why(ops.ctx));
    CHECK(ops.attach(ops.ctx, area, area_len) == -EBUSY, "second attach refused");
    /* host rows 0..7 -> device, then device rows back to host rows 8..15 */
    void *d1[8], *d2[8];
    const void *s1[8], *s2[8];
    for (int i = 0; i < 8; i++) {
        d1[i] = dev + i * H;
        s1[i] = host + i * H;
        d2[i] = host + (8 + i) * H;
        s2[i] = dev + (7 - i) * H; /* reversed */
    }
    te_moe_copy_list c1 = {8, H * sizeof(float), d1, s1};
    te_moe_copy_list c2 = {8, H * sizeof(float), d2, s2};
    CHECK(ops.copy(ops.ctx, &c1) == 0, ops.why(ops.ctx));
    CHECK(ops.copy(ops.ctx, &c2) == 0, ops.why(ops.ctx));
    CHECK(ops.sync(ops.ctx) == 0, ops.why(ops.ctx));
    for (int i = 0; i < 8; i++)
        CHECK(!memcmp(host + (8 + i) * H, host + (7 - i) * H, H * sizeof(float)),
              "copied rows");
    /* sums into host rows 16..18 from device rows: 0, 1 and 3 terms */
    float *dst[3] = {host + 16 * H, host + 17 * H, host + 18 * H};
    uint32_t first[4] = {5, 5, 6, 9}; /* absolute term indexes, base 5 */
    const void *src[9] = {0, 0, 0, 0, 0, dev + 2 * H, dev + 0 * H, dev + 4 * H,
                          dev + 7 * H};
    float w[9] = {0, 0, 0, 0, 0, 0.75f, -1.5f, 0.3f, 2.25f};
    te_moe_wsum_list wl = {3, (uint32_t)H, dst, first, src, w, TE_MOE_FP32};
    for (int k = 0; k < 3; k++)
        for (size_t h = 0; h < H; h++)
            dst[k][h] = 12345.0f; /* overwritten, not added to */
    CHECK(ops.wsum(ops.ctx, &wl) == 0, ops.why(ops.ctx));
    CHECK(ops.sync(ops.ctx) == 0, ops.why(ops.ctx));
    for (int k = 0; k < 3; k++)
        for (size_t h = 0; h < H; h++) {
            float want = 0.0f;
            for (uint32_t f = first[k]; f < first[k + 1]; f++) {
                const float *row = host + (size_t)((const float *)src[f] - dev);
                float prod = w[f] * row[h];
                want = want + prod;
            }
            if (memcmp(&want, &dst[k][h], 4)) {
                CHECK(0, "weighted sums (bits)");
                k = 3;
                break;
            }
        }
    /* The same sums from bf16 rows (expert outputs given as bf16): each
     * value widened exactly (bits << 16), as the CPU backend does. */
    uint16_t *hb = (uint16_t *)(area + 32 * H * sizeof(float));
    for (size_t e = 0; e < 8 * H; e++)
        hb[e] = moe_ref_f32_to_bf16(host[e]);
    uint16_t *devb = NULL;
    if (cudaMalloc((void **)&devb, 8 * H * 2) != cudaSuccess) {
        CHECK(0, "cudaMalloc bf16");
        devb = NULL;
    }
    CHECK(devb && cudaMemcpy(devb, hb, 8 * H * 2, cudaMemcpyHostToDevice) == cudaSuccess,
          "bf16 rows to the device");
    for (int k = 0; k < 3; k++)
        for (size_t h = 0; h < H; h++)
            dst[k][h] = 12345.0f; /* overwritten again, a row of no terms too */
    const void *srcb[9] = {0, 0, 0, 0, 0, devb + 2 * H, devb + 0 * H, devb + 4 * H,
                           devb + 7 * H};
    te_moe_wsum_list wb = {3, (uint32_t)H, dst, first, srcb, w, TE_MOE_BF16};
    CHECK(devb && ops.wsum(ops.ctx, &wb) == 0, ops.why(ops.ctx));
    CHECK(ops.sync(ops.ctx) == 0, ops.why(ops.ctx));
    for (int k = 0; devb && k < 3; k++)
        for (size_t h = 0; h < H; h++) {
            float want = 0.0f;
            for (uint32_t f = first[k]; f < first[k + 1]; f++) {
                float v = moe_ref_bf16_to_f32(hb[((const uint16_t *)srcb[f] - devb) + h]);
                float prod = w[f] * v;
                want = want + prod;
            }
            if (memcmp(&want, &dst[k][h], 4)) {
                CHECK(0, "bf16 weighted sums (bits)");
                k = 3;
                break;
            }
        }
    te_moe_wsum_list bad = wb;
    bad.src_dtype = 9;
    CHECK(ops.wsum(ops.ctx, &bad) == -EINVAL, "an unknown dtype refused");
    cudaFree(devb);
    ops.detach(ops.ctx, area, area_len);
    te_moe_gpu_mem_ops_free(&ops);
    cudaFree(dev);
    free(area);
    printf("%s backend direct\n", failures ? "FAIL" : "ok");
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--host"))
        on_device = 0;
    else if (argc > 1) {
        fprintf(stderr, "usage: moe_test_gpu_mem [--host]\n");
        return 2;
    }
    if (on_device && te_moe_gpu_device_count() <= 0) {
        printf("moe_gpu_mem: no CUDA device: %s\n", te_moe_gpu_last_error());
        return 77;
    }
    te_moe_mem_ops bad;
    if (on_device && te_moe_gpu_mem_ops_new(NULL, NULL) != -EINVAL) {
        printf("FAIL: te_moe_gpu_mem_ops_new(NULL) accepted\n");
        failures++;
    }
    if (on_device && te_moe_gpu_mem_ops_new(NULL, &bad) == 0)
        te_moe_gpu_mem_ops_free(&bad);
    if (on_device)
        test_backend_direct();
    static const uint32_t ks[] = {1, 2, 8};
    for (uint32_t R = 2; R <= 4; R *= 2)
        for (int q = 0; q < 3; q++)
            run(R, ks[q], 8 * R, TE_MOE_FP32, 0, 0, 0);
    run(2, 2, 16, TE_MOE_BF16, 0, 0, 0);
    run(2, 2, 16, TE_MOE_FP32, 1, 0, 0);
    run(4, 8, 32, TE_MOE_FP32, 1, 0, 0); /* spans */
    run(4, 2, 16, TE_MOE_BF16, 1, 0, 1); /* skewed, in place */
    run(2, 2, 16, TE_MOE_FP32, 0, 1, 0); /* index mode */
    run_bf16_outputs(2, 2, 16);
    run_bf16_outputs(4, 8, 32);
    printf("moe_gpu_mem: %s (%d failures)\n", failures ? "FAILED" : "PASS", failures);
    return failures ? 1 : 0;
}
