// moe_gpu_mem (ctest label gpu): te-moe's split calls on CUDA device
// tensors through te_moe_gpu_mem_ops (x, recv.x, the expert outputs and
// out in device memory; staged, in place with x registered as TE_MEM_CUDA,
// index mode; fp32 and bf16; R 2 and 4, top-k 1/2/8): every output equals
// the dense single-process reference bit for bit, as on the host. Exits 77
// with the reason when no CUDA device (or driver) is present. --host runs
// the same job harness on host tensors (ctest moe_gpu_job_host, runs
// everywhere: the harness te-moe-gpu-bench also uses).
#include <errno.h>
#include <stdio.h>
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
    static const uint32_t ks[] = {1, 2, 8};
    for (uint32_t R = 2; R <= 4; R *= 2)
        for (int q = 0; q < 3; q++)
            run(R, ks[q], 8 * R, TE_MOE_FP32, 0, 0, 0);
    run(2, 2, 16, TE_MOE_BF16, 0, 0, 0);
    run(2, 2, 16, TE_MOE_FP32, 1, 0, 0);
    run(4, 8, 32, TE_MOE_FP32, 1, 0, 0); /* spans */
    run(4, 2, 16, TE_MOE_BF16, 1, 0, 1); /* skewed, in place */
    run(2, 2, 16, TE_MOE_FP32, 0, 1, 0); /* index mode */
    printf("moe_gpu_mem: %s (%d failures)\n", failures ? "FAILED" : "PASS", failures);
    return failures ? 1 : 0;
}
