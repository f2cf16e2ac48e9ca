// te-moe-gpu-bench: te-moe's split calls with the tokens in CUDA device
// memory (te_moe_gpu_mem_ops) against the same job on host memory in the
// same run, at the decode shape by default (128 tokens per rank, hidden
// 7168, top-8, 256 experts, fp32; R ranks as engines in this process).
// Per memory kind: dispatch p50/p99 (start to recv.x written), layout p50
// (its copying into recv.x), combine p50/p99 (combine_start to out written,
// the caller's experts excluded: they run on the host here, between the
// two calls). Every batch's output is checked against the dense reference.
// Exits 77 without a device (after checking the arguments).
#include <algorithm>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "moe_gpu_job.h"
extern "C" {
#include "te_args.h"
}

#define TOOL "te-moe-gpu-bench"

static int usage(void)
{
    fprintf(stderr,
            "usage: " TOOL " [--ranks R (2..8) [2]] [--tokens T [128]] [--hidden H [7168]]\n"
            "       [--topk K [8]] [--experts E [256]] [--capacity C (rows per expert) [64]]\n"
            "       [--batches N (1..1000) [20]] [--warmup N [3]] [--inplace] [--bf16]\n"
            "       [--mem host|cuda|both [both]] [--set S.K=V ...]\n");
    return TE_ARGS_EXIT;
}

static double pct(std::vector<double> v, double p)
{
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    size_t i = (size_t)(p * (double)(v.size() - 1) + 0.5);
    return v[i];
}

struct series {
    std::vector<double> dispatch, layout, combine;
};

static int bench(const te_moe_config *c, const char *const *sets, int device,
                 int inplace, uint32_t capacity, uint32_t warmup, uint32_t batches,
                 series *out)
{
    struct moe_gpu_job g;
    int rc = moe_gpu_job_open(&g, c, sets, device, inplace, 0, capacity);
    uint32_t tok[TE_MOE_MAX_RANKS];
    for (uint32_t i = 0; i < c->ranks; i++)
        tok[i] = c->max_tokens;
    for (uint32_t b = 0; !rc && b < warmup + batches; b++) {
        moe_job_inputs(&g.j, tok, 77 + b, 0);
        if ((rc = moe_gpu_job_batch(&g, b)))
            break;
        uint64_t bad = moe_job_check(&g.j);
        if (bad) {
            snprintf(g.why, sizeof(g.why), "batch %u: %llu floats differ from the dense "
                     "reference", b, (unsigned long long)bad);
            rc = -EPROTO;
            break;
        }
        for (uint32_t i = 0; b >= warmup && i < c->ranks; i++) {
            out->dispatch.push_back(g.st[i].dispatch_us);
            out->layout.push_back(g.st[i].layout_us);
            out->combine.push_back(g.st[i].combine_us - g.st[i].experts_us);
        }
    }
    if (rc)
        fprintf(stderr, TOOL ": %s tensors: %s\n", device ? "cuda" : "host", g.why);
    moe_gpu_job_close(&g);
    return rc;
}

int main(int argc, char **argv)
{
    te_moe_config c = {.ranks = 2, .experts = 256, .topk = 8, .hidden = 7168,
                       .dtype = TE_MOE_FP32, .max_tokens = 128, .private_rows = 32,
                       .timeout_ms = 20000, .naive = 0};
    uint32_t capacity = 64, batches = 20, warmup = 3;
    int inplace = 0, mems = 3; /* bit 0 host, bit 1 cuda */
    std::vector<const char *> sets;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--inplace")) {
            inplace = 1;
            continue;
        }
        if (!strcmp(a, "--bf16")) {
            c.dtype = TE_MOE_BF16;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        }
        if (strncmp(a, "--", 2) || !(!strcmp(a, "--ranks") || !strcmp(a, "--tokens") ||
                                     !strcmp(a, "--hidden") || !strcmp(a, "--topk") ||
                                     !strcmp(a, "--experts") || !strcmp(a, "--capacity") ||
                                     !strcmp(a, "--batches") || !strcmp(a, "--warmup") ||
                                     !strcmp(a, "--mem") || !strcmp(a, "--set"))) {
            te_arg_bad_option(TOOL, a, 0);
            return usage();
        }
        if (!v) {
            te_arg_bad_option(TOOL, a, 1);
            return usage();
        }
        i++;
        if (!strcmp(a, "--ranks"))
            bad = te_arg_u32(TOOL, a, v, 2, 8, &c.ranks);
        else if (!strcmp(a, "--tokens"))
            bad = te_arg_u32(TOOL, a, v, 1, 4096, &c.max_tokens);
        else if (!strcmp(a, "--hidden"))
            bad = te_arg_u32(TOOL, a, v, 8, 65536, &c.hidden);
        else if (!strcmp(a, "--topk"))
            bad = te_arg_u32(TOOL, a, v, 1, TE_MOE_MAX_TOPK, &c.topk);
        else if (!strcmp(a, "--experts"))
            bad = te_arg_u32(TOOL, a, v, 1, TE_MOE_MAX_EXPERTS, &c.experts);
        else if (!strcmp(a, "--capacity"))
            bad = te_arg_u32(TOOL, a, v, 1, 65536, &capacity);
        else if (!strcmp(a, "--batches"))
            bad = te_arg_u32(TOOL, a, v, 1, 1000, &batches);
        else if (!strcmp(a, "--warmup"))
            bad = te_arg_u32(TOOL, a, v, 0, 100, &warmup);
        else if (!strcmp(a, "--set"))
            sets.push_back(v);
        else if (!strcmp(v, "host") || !strcmp(v, "cuda") || !strcmp(v, "both"))
            mems = !strcmp(v, "host") ? 1 : !strcmp(v, "cuda") ? 2 : 3;
        else {
            fprintf(stderr, TOOL ": --mem: expected host, cuda or both, got \"%s\"\n", v);
            bad = 1;
        }
        if (bad)
            return usage();
    }
    if (c.private_rows > c.max_tokens)
        c.private_rows = c.max_tokens;
    sets.push_back(NULL);
    if ((mems & 2) && te_moe_gpu_device_count() <= 0) {
        printf(TOOL ": no CUDA device: %s\n", te_moe_gpu_last_error());
        return 77;
    }
    printf(TOOL ": R=%u tokens=%u hidden=%u top-%u experts=%u %s capacity=%u%s, "
           "%u batches after %u warm-up, p50/p99 over every rank's batches\n",
           c.ranks, c.max_tokens, c.hidden, c.topk, c.experts,
           c.dtype == TE_MOE_BF16 ? "bf16" : "fp32", capacity, inplace ? " in place" : "",
           batches, warmup);
    int rc = 0;
    for (int m = 0; m < 2 && !rc; m++) {
        if (!(mems >> m & 1))
            continue;
        series s;
        rc = bench(&c, sets.data(), m, inplace, capacity, warmup, batches, &s);
        if (!rc)
            printf("mem %s: dispatch p50 %.1f us p99 %.1f | layout p50 %.1f | "
                   "combine p50 %.1f us p99 %.1f\n", m ? "cuda" : "host",
                   pct(s.dispatch, 0.5), pct(s.dispatch, 0.99), pct(s.layout, 0.5),
                   pct(s.combine, 0.5), pct(s.combine, 0.99));
    }
    printf(TOOL ": %s\n", rc ? "FAILED" : "OK");
    return rc ? 1 : 0;
}
