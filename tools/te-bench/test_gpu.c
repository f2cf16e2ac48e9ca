/*
 * GPU benchmarks of te-bench (docs/cuda.md), run in one process on the
 * loopback transport, each with a reference measured in the same run:
 *
 *  --test cudawrite  write bandwidth with --mem-src/--mem-dst host|cuda
 *                    (or --mem for both), 1..64 MiB; reference: cudaMemcpy
 *                    of the same size and direction.
 *  --test watcher    a kernel in a replayed CUDA graph bumps a watcher word:
 *                    graph launch -> CPU callback; references: graph launch
 *                    -> cudaStreamSynchronize return of the same graph, and
 *                    the floor: the same kernel bumping a mapped word that
 *                    the launching thread spins on itself (no watcher).
 *  --test gpuflag    submit of a WriteImm -> a spinning kernel sees the flag
 *                    (it acks to host-mapped memory the CPU spins on);
 *                    references: the CPU stores the flag itself (GPU round
 *                    trip alone) and submit -> imm counted at the target
 *                    (the transfer alone).
 *
 * Medians (and p99 for latencies) of --iters samples. Exit 77 where CUDA
 * is unusable, with the reason.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "te/te.h"
#include "test_gpu.h"

#ifdef TB_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "te_cuda_kernels.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, int n, int p)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_u64);
    int i = (int)((int64_t)(n - 1) * p / 100);
    return v[i];
}

#define CU(call)                                                             \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess) {                                             \
            fprintf(stderr, "te-bench: %s: %s\n", #call,                     \
                    cudaGetErrorString(e_));                                 \
            return 1;                                                        \
        }                                                                    \
    } while (0)

struct pair {
    te_engine *a, *b;
    te_peer pb;
};

static int pair_open(struct pair *p)
{
    memset(p, 0, sizeof(*p));
    te_config *c = te_config_new();
    int rc = c ? 0 : -ENOMEM;
    if (!rc)
        rc = te_engine_create(c, &p->a);
    if (!rc)
        rc = te_engine_create(c, &p->b);
    te_config_free(c);
    uint8_t addr[TE_ADDR_MAX];
    size_t len = sizeof(addr);
    if (!rc)
        rc = te_engine_address(p->b, 0, addr, &len);
    if (!rc)
        rc = te_peer_add(p->a, 0, addr, len, &p->pb);
    if (rc)
        fprintf(stderr, "te-bench: engines: %s\n", te_last_error());
    return rc;
}

static void pair_close(struct pair *p)
{
    te_engine_destroy(p->a);
    te_engine_destroy(p->b);
}

/* ------------------------------------------------------------ cudawrite */

static int alloc_kind(int cuda, size_t len, void **out)
{
    if (cuda)
        return cudaMalloc(out, len) == cudaSuccess ? 0 : -ENOMEM;
    *out = aligned_alloc(4096, len);
    if (*out)
        memset(*out, 1, len);
    return *out ? 0 : -ENOMEM;
}

static void free_kind(int cuda, void *p)
{
    if (cuda)
        cudaFree(p);
    else
        free(p);
}

static int bench_cudawrite(const struct tb_gpu_opts *o)
{
    static const size_t sizes[] = {1u << 20, 4u << 20, 16u << 20, 64u << 20};
    struct pair p;
    if (pair_open(&p))
        return 1;
    int iters = o->iters > 0 ? o->iters : 20;
    uint64_t *te_ns = calloc((size_t)iters, sizeof(uint64_t));
    uint64_t *ref_ns = calloc((size_t)iters, sizeof(uint64_t));
    printf("# cudawrite: loopback write (imm, waited at the target) vs "
           "cudaMemcpy, %s -> %s, median of %d\n",
           o->src_cuda ? "cuda" : "host", o->dst_cuda ? "cuda" : "host",
           iters);
    printf("%10s %12s %12s %8s\n", "bytes", "te_GBps", "memcpy_GBps", "ratio");
    int status = 0;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]) && !status; s++) {
        size_t len = sizes[s];
        void *src = NULL, *dst = NULL;
        te_mr *smr = NULL, *dmr = NULL;
        te_mr_desc dd;
        if (alloc_kind(o->src_cuda, len, &src) ||
            alloc_kind(o->dst_cuda, len, &dst) ||
            te_mr_reg(p.a, 0, src, len, 0,
                      o->src_cuda ? TE_MEM_CUDA : TE_MEM_HOST, &smr) ||
            te_mr_reg(p.b, 0, dst, len, TE_MR_REMOTE_WRITE,
                      o->dst_cuda ? TE_MEM_CUDA : TE_MEM_HOST, &dmr) ||
            te_mr_describe(dmr, &dd)) {
            fprintf(stderr, "te-bench: %zu bytes: %s\n", len, te_last_error());
            status = 1;
        }
        for (int i = 0; i < iters && !status; i++) {
            te_request q = tb_imm_write(p.pb, smr, &dd, len, 0x600u);
            uint64_t t0 = now_ns();
            if (te_submit(p.a, &q) < 0 || te_imm_wait(p.b, 0x600u, 1, 20000)) {
                fprintf(stderr, "te-bench: write: %s\n", te_last_error());
                status = 1;
                break;
            }
            te_ns[i] = now_ns() - t0;
            te_completion c;
            if (te_poll_completions(p.a, &c, 1, 20000) != 1 || c.status) {
                fprintf(stderr, "te-bench: write completion: %s\n", c.reason);
                status = 1;
            }
            t0 = now_ns();
            /* cudaMemcpy may return before the bytes land (device to
             * device, or from pageable memory): timed to completion. */
            if (cudaMemcpy(dst, src, len, cudaMemcpyDefault) != cudaSuccess ||
                cudaDeviceSynchronize() != cudaSuccess) {
                status = 1;
                break;
            }
            ref_ns[i] = now_ns() - t0;
        }
        if (!status) {
            double te_gbps = (double)len / (double)pct(te_ns, iters, 50);
            double ref_gbps = (double)len / (double)pct(ref_ns, iters, 50);
            printf("%10zu %12.2f %12.2f %8.3f\n", len, te_gbps, ref_gbps,
                   te_gbps / ref_gbps);
        }
        if (smr)
            te_mr_dereg(p.a, smr);
        if (dmr)
            te_mr_dereg(p.b, dmr);
        free_kind(o->src_cuda, src);
        free_kind(o->dst_cuda, dst);
    }
    free(te_ns);
    free(ref_ns);
    pair_close(&p);
    return status;
}

/* -------------------------------------------------------------- watcher */

static _Atomic uint64_t watch_cb_ns, watch_cb_value;

static void on_watch(uint64_t old_value, uint64_t new_value, void *arg)
{
    atomic_store(&watch_cb_ns, now_ns());
    atomic_store(&watch_cb_value, new_value);
}

static int bench_watcher(const struct tb_gpu_opts *o)
{
    int iters = o->iters > 0 ? o->iters : 2000;
    te_gpu_watcher *w = NULL;
    if (te_gpu_watcher_create(0, TE_GPU_WATCH_SPIN | TE_GPU_WATCH_EACH_STEP,
                              on_watch, NULL, &w)) {
        fprintf(stderr, "te-bench: watcher: %s\n", te_last_error());
        return 1;
    }
    cudaStream_t s;
    cudaGraph_t g, fg;
    cudaGraphExec_t ge, fge;
    /* The floor's word: what any CPU-side watcher of a bump must wait for
     * (launch, kernel start, the store crossing the bus). */
    volatile uint64_t *floor_word = NULL;
    void *floor_dev = NULL;
    CU(cudaHostAlloc((void **)&floor_word, sizeof(uint64_t),
                     cudaHostAllocMapped));
    CU(cudaHostGetDevicePointer(&floor_dev, (void *)floor_word, 0));
    *floor_word = 0;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CU((cudaError_t)te_k_bump_watcher(te_gpu_watcher_device_ptr(w), s));
    CU(cudaStreamEndCapture(s, &g));
    CU(cudaGraphInstantiate(&ge, g, 0));
    CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CU((cudaError_t)te_k_bump_watcher(floor_dev, s));
    CU(cudaStreamEndCapture(s, &fg));
    CU(cudaGraphInstantiate(&fge, fg, 0));
    uint64_t *lat = calloc((size_t)iters, sizeof(uint64_t));
    uint64_t *ref = calloc((size_t)iters, sizeof(uint64_t));
    uint64_t *flo = calloc((size_t)iters, sizeof(uint64_t));
    int status = 0;
    uint64_t expect = 0; /* bumps launched so far = the word's value */
    for (int i = 0; i < iters && !status; i++) {
        /* Floor: launch -> this thread sees the bump of the mapped word. */
        uint64_t t0f = now_ns();
        CU(cudaGraphLaunch(fge, s));
        while (*floor_word != (uint64_t)i + 1 && !status)
            if (now_ns() - t0f > 5000000000ull) {
                fprintf(stderr, "te-bench: watcher: floor bump not seen "
                        "within 5 s\n");
                status = 1;
            }
        flo[i] = now_ns() - t0f;
        CU(cudaStreamSynchronize(s));
        uint64_t t0 = now_ns(), deadline = t0 + 5000000000ull;
        CU(cudaGraphLaunch(ge, s));
        expect++;
        while (atomic_load(&watch_cb_value) != expect && !status)
            if (now_ns() > deadline) {
                fprintf(stderr, "te-bench: watcher: no callback for bump "
                        "%llu within 5 s\n", (unsigned long long)expect);
                status = 1;
            }
        lat[i] = atomic_load(&watch_cb_ns) - t0;
        CU(cudaStreamSynchronize(s));
        /* Reference: the same graph, launch -> stream synchronize. */
        t0 = now_ns();
        CU(cudaGraphLaunch(ge, s));
        CU(cudaStreamSynchronize(s));
        ref[i] = now_ns() - t0;
        expect++; /* its bump reaches the watcher too: drain it */
        if (te_gpu_watcher_wait(w, expect, 5000)) {
            fprintf(stderr, "te-bench: watcher: %s\n", te_last_error());
            status = 1;
        }
    }
    if (!status)
        printf("# watcher: graph launch -> CPU callback vs launch -> "
               "cudaStreamSynchronize (same graph) and launch -> the "
               "launching thread sees the bump itself (floor), %d samples\n"
               "watcher_us p50 %.2f p99 %.2f | sync_us p50 %.2f p99 %.2f | "
               "floor_us p50 %.2f p99 %.2f\n",
               iters, pct(lat, iters, 50) / 1e3, pct(lat, iters, 99) / 1e3,
               pct(ref, iters, 50) / 1e3, pct(ref, iters, 99) / 1e3,
               pct(flo, iters, 50) / 1e3, pct(flo, iters, 99) / 1e3);
    free(lat);
    free(ref);
    free(flo);
    cudaGraphExecDestroy(fge);
    cudaGraphDestroy(fg);
    cudaFreeHost((void *)floor_word);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    te_gpu_watcher_destroy(w);
    return status;
}

/* -------------------------------------------------------------- gpuflag */

static int bench_gpuflag(const struct tb_gpu_opts *o)
{
    int iters = o->iters > 0 ? o->iters : 1000;
    struct pair p;
    if (pair_open(&p))
        return 1;
    te_gpu_flag *f = NULL;
    uint32_t *ack = NULL, *ack_dev = NULL;
    struct te_k_spin_result *res = NULL;
    cudaStream_t s;
    char *sbuf = calloc(1, 4096), *dbuf = calloc(1, 4096);
    te_mr *smr = NULL, *dmr = NULL;
    te_mr_desc dd;
    if (te_gpu_flag_create(0, &f) ||
        te_mr_reg(p.a, 0, sbuf, 4096, 0, TE_MEM_HOST, &smr) ||
        te_mr_reg(p.b, 0, dbuf, 4096, TE_MR_REMOTE_WRITE, TE_MEM_HOST, &dmr) ||
        te_mr_describe(dmr, &dd)) {
        fprintf(stderr, "te-bench: gpuflag: %s\n", te_last_error());
        return 1;
    }
    CU(cudaHostAlloc((void **)&ack, sizeof(*ack), cudaHostAllocMapped));
    CU(cudaHostGetDevicePointer((void **)&ack_dev, ack, 0));
    CU(cudaMallocManaged((void **)&res, sizeof(*res), cudaMemAttachGlobal));
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint64_t *lat = calloc((size_t)iters, sizeof(uint64_t));
    uint64_t *ref = calloc((size_t)iters, sizeof(uint64_t));
    uint64_t *cpu = calloc((size_t)iters, sizeof(uint64_t));
    int status = 0;
    /* Three kinds of sample, interleaved: submit -> kernel sees the flag;
     * a CPU store -> kernel sees it (the flag hop alone); submit -> the
     * target's ImmCounter has the imm, seen by a spinning CPU (the
     * transfer alone). Flag hop after arrival ~ first - third. */
    for (int i = 0; i < 3 * iters && !status; i++) {
        int kind = i % 3, reference = kind == 1;
        uint32_t value = 1u + (uint32_t)(i % 1000);
        if (kind == 2) {
            struct timespec nap = {0, 200000};
            nanosleep(&nap, NULL);
            te_request q = tb_imm_write(p.pb, smr, &dd, 8, 0x701u);
            uint64_t t0 = now_ns(), banked = 0;
            int armed = 0;
            if (te_submit(p.a, &q) < 0) {
                fprintf(stderr, "te-bench: gpuflag: %s\n", te_last_error());
                status = 1;
                break;
            }
            while (te_imm_poll(p.b, 0x701u, &banked, &armed) == 0 && banked < 1)
                if (now_ns() - t0 > 5000000000ull) {
                    fprintf(stderr, "te-bench: gpuflag: imm not seen in 5 s\n");
                    status = 1;
                    break;
                }
            cpu[i / 3] = now_ns() - t0;
            te_imm_remove(p.b, 0x701u, NULL);
            te_completion c;
            if (te_poll_completions(p.a, &c, 1, 5000) != 1 || c.status)
                status = 1;
            continue;
        }
        te_gpu_flag_store(f, 0);
        __atomic_store_n(ack, 0u, __ATOMIC_RELEASE);
        CU((cudaError_t)te_k_spin_flag(te_gpu_flag_device_ptr(f),
                                       5000000000ull, res, ack_dev, s));
        /* Let the kernel start spinning before the clock starts. */
        struct timespec nap = {0, 200000};
        nanosleep(&nap, NULL);
        uint64_t t0 = now_ns();
        if (reference) {
            te_gpu_flag_store(f, value);
        } else {
            te_request q = tb_imm_write(p.pb, smr, &dd, 8, 0x700u);
            if (te_imm_expect_gpu_flag(p.b, 0x700u, 1, 5000, f, value) ||
                te_submit(p.a, &q) < 0) {
                fprintf(stderr, "te-bench: gpuflag: %s\n", te_last_error());
                status = 1;
                break;
            }
        }
        while (__atomic_load_n(ack, __ATOMIC_ACQUIRE) != value)
            if (now_ns() - t0 > 5000000000ull) {
                fprintf(stderr, "te-bench: gpuflag: no ack within 5 s\n");
                status = 1;
                break;
            }
        (reference ? ref : lat)[i / 3] = now_ns() - t0;
        CU(cudaStreamSynchronize(s));
        if (!reference) {
            te_completion c;
            if (te_poll_completions(p.a, &c, 1, 5000) != 1 || c.status)
                status = 1;
        }
    }
    if (!status)
        printf("# gpuflag: submit of a WriteImm -> spinning kernel sees the "
               "flag (kernel ack seen by the CPU); CPU flag store -> ack; "
               "submit -> imm counted at the target (CPU spinning on "
               "te_imm_poll), %d samples each\n"
               "imm_to_kernel_us p50 %.2f p99 %.2f | store_to_kernel_us p50 "
               "%.2f p99 %.2f | submit_to_imm_us p50 %.2f p99 %.2f\n",
               iters, pct(lat, iters, 50) / 1e3, pct(lat, iters, 99) / 1e3,
               pct(ref, iters, 50) / 1e3, pct(ref, iters, 99) / 1e3,
               pct(cpu, iters, 50) / 1e3, pct(cpu, iters, 99) / 1e3);
    free(cpu);
    free(lat);
    free(ref);
    cudaStreamDestroy(s);
    cudaFree(res);
    cudaFreeHost(ack);
    te_mr_dereg(p.a, smr);
    te_mr_dereg(p.b, dmr);
    te_gpu_flag_destroy(f);
    pair_close(&p);
    free(sbuf);
    free(dbuf);
    return status;
}
#endif /* TB_HAVE_CUDA */

int tb_gpu_is_test(const char *name)
{
    return name && (!strcmp(name, "cudawrite") || !strcmp(name, "watcher") ||
                    !strcmp(name, "gpuflag"));
}

static int parse_mem(const char *v, int *out)
{
    if (!strcmp(v, "cuda"))
        *out = 1;
    else if (!strcmp(v, "host"))
        *out = 0;
    else
        return -1;
    return 0;
}

int tb_gpu_main(int argc, char **argv)
{
    struct tb_gpu_opts o = {0};
    const char *test = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "te-bench: %s needs a value\n", a);
            return 2;
        }
        int bad = 0;
        if (!strcmp(a, "--test"))
            test = v;
        else if (!strcmp(a, "--iters"))
            bad = (o.iters = atoi(v)) <= 0;
        else if (!strcmp(a, "--mem"))
            bad = parse_mem(v, &o.src_cuda) || parse_mem(v, &o.dst_cuda);
        else if (!strcmp(a, "--mem-src"))
            bad = parse_mem(v, &o.src_cuda);
        else if (!strcmp(a, "--mem-dst"))
            bad = parse_mem(v, &o.dst_cuda);
        else {
            fprintf(stderr, "te-bench: GPU tests take --test, --iters, "
                    "--mem, --mem-src, --mem-dst; not %s\n", a);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "te-bench: bad value \"%s\" for %s\n", v, a);
            return 2;
        }
        i++;
    }
    char why[512];
    if (te_cuda_status(why, sizeof(why))) {
        printf("SKIP: --test %s needs CUDA: %s\n", test, why);
        return 77;
    }
#ifdef TB_HAVE_CUDA
    if (!strcmp(test, "cudawrite"))
        return bench_cudawrite(&o);
    if (!strcmp(test, "watcher"))
        return bench_watcher(&o);
    return bench_gpuflag(&o);
#else
    printf("SKIP: --test %s: te-bench was built without the CUDA kernels\n",
           test);
    return 77;
#endif
}
