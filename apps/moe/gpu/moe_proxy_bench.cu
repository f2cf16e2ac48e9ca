// te-moe-proxy-bench: what the proxy adds to a GPU-initiated transfer
// (docs/moe.md, "GPU path"). Three round trips, interleaved per repetition,
// medians and p99 printed per repetition:
//   floor  a kernel stores a word into mapped host memory, a CPU thread
//          spinning on it stores it back, the kernel sees it: the two bus
//          crossings any CPU proxy costs (no engine);
//   cpu    te_submit of a WriteImm on engine a -> te_imm_wait on engine b
//          returns, on one CPU thread: the engine alone (no GPU);
//   proxy  a kernel posts the same WriteImm into a's proxy ring, the proxy
//          submits it, b's proxy raises a flag when the imm is counted
//          (te_moe_proxy_watch), the kernel sees the flag: the GPU path.
// proxy - cpu is what the proxy and the GPU's bus crossings add to the
// engine; proxy - cpu - floor what the proxy adds beyond the crossings.
// The proxy row is run with three producers (PRODUCE_* below: bus reads of
// the ring's `consumed` per post or only when full, narrow or wide stores)
// and a CPU thread's view of each round trip (.eng: submitted -> flag
// stored; .loop: flag stored -> the next entry submitted).
// Engine settings come from the environment (TE_ENGINE_PROGRESS=caller,
// TE_PLUGIN=efa, TE_EFA_PROVIDER=shm, ...). Exits 77 without a device.
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <vector>

#include "te/moe_gpu.h"

#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "te-moe-proxy-bench: %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define TE(x) do { int r_ = (x); if (r_ < 0) { \
    fprintf(stderr, "te-moe-proxy-bench: %s: %s (%s)\n", #x, te_strerror(r_), te_last_error()); exit(1); } } while (0)

#define IMM_PROXY 0x6d000000u
#define IMM_CPU 0x6e000000u
#define RING_ENTRIES 64u
#define WAIT_MS 5000

__device__ static inline unsigned long long global_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// span[0] = globaltimer ns over the loop, span[1] = clock64 cycles over it:
// the per-sample cycle counts are converted with their ratio (globaltimer's
// own tick can be a microsecond).
__global__ void floor_kernel(volatile uint32_t *ping, const volatile uint32_t *pong,
                             uint32_t iters, long long timeout_cycles, long long *cyc,
                             unsigned long long *span, int *status)
{
    unsigned long long g0 = global_ns();
    long long c0 = clock64();
    *status = 0;
    for (uint32_t i = 0; i < iters; i++) {
        long long t0 = clock64();
        *ping = i + 1;
        __threadfence_system();
        while (*pong != i + 1)
            if (clock64() - t0 > timeout_cycles) {
                *status = -1;
                return;
            }
        cyc[i] = clock64() - t0;
    }
    span[0] = global_ns() - g0;
    span[1] = (unsigned long long)(clock64() - c0);
}

// One write at a time through the ring (the producer protocol of
// te_moe_gpu_post), then a spin on its own flag.
// Producer variants: PRODUCE_PLAIN reads `consumed` (a bus read) before
// every post and writes the entry with 8-byte stores, as te_moe_gpu_post
// did before; PRODUCE_CACHED reads it only when its last value shows no
// room; PRODUCE_WIDE also writes the entry with 16-byte stores.
enum { PRODUCE_PLAIN = 0, PRODUCE_CACHED = 1, PRODUCE_WIDE = 3 };

__global__ void proxy_kernel(te_moe_ring *ring, const volatile uint32_t *flags, uint32_t iters,
                             uint64_t len, int produce, long long timeout_cycles,
                             long long *cyc, unsigned long long *span, int *status)
{
    te_moe_ring_entry *ents = (te_moe_ring_entry *)(ring + 1);
    uint32_t n = ring->entries;
    unsigned long long g0 = global_ns();
    long long c0 = clock64();
    uint64_t consumed = 0;
    *status = 0;
    for (uint32_t i = 0; i < iters; i++) {
        long long t0 = clock64();
        if (!(produce & PRODUCE_CACHED) || (uint64_t)i - consumed >= n)
            while ((uint64_t)i - (consumed = *(volatile uint64_t *)&ring->consumed) >= n)
                if (*(volatile int32_t *)&ring->error || clock64() - t0 > timeout_cycles) {
                    *status = -1;
                    return;
                }
        te_moe_ring_entry *slot = &ents[i & (n - 1)];
        if (produce == PRODUCE_WIDE) { // bytes 8..63 in four stores, target, then seq
            uint4 *w = (uint4 *)slot;
            w[1] = make_uint4(0, 0, 0, 0); // src_off, dst_off
            w[2] = make_uint4((uint32_t)len, (uint32_t)(len >> 32), 0, 0);
            w[3] = make_uint4(0, 0, 0, 0);
            ((uint2 *)slot)[1] = make_uint2(IMM_PROXY + i, 0);
        } else {
            uint64_t *w = (uint64_t *)slot;
            for (int j = 1; j < 8; j++)
                w[j] = 0;
            ((uint32_t *)slot)[2] = IMM_PROXY + i; // imm
            slot->len = len;
        }
        ((volatile uint32_t *)slot)[1] = 0; // target 0
        __threadfence_system();
        ((volatile uint32_t *)slot)[0] = i + 1;
        uint32_t v;
        while ((v = flags[i]) == 0)
            if (*(volatile int32_t *)&ring->error || clock64() - t0 > timeout_cycles) {
                *status = -1;
                return;
            }
        if (v == TE_MOE_FLAG_FAILED) {
            *status = -2;
            return;
        }
        cyc[i] = clock64() - t0;
    }
    span[0] = global_ns() - g0;
    span[1] = (unsigned long long)(clock64() - c0);
}

struct echo_arg {
    volatile uint32_t *ping, *pong;
    uint32_t iters;
};

// The floor's CPU side: hand every ping back, bounded by WAIT_MS per sample.
static void *echo_main(void *arg)
{
    struct echo_arg *a = (struct echo_arg *)arg;
    for (uint32_t i = 0; i < a->iters; i++) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (__atomic_load_n(a->ping, __ATOMIC_ACQUIRE) != i + 1) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > WAIT_MS)
                return NULL;
        }
        __atomic_store_n(a->pong, i + 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void stats(std::vector<double> &v, double *p50, double *p99)
{
    std::sort(v.begin(), v.end());
    *p50 = v[v.size() / 2];
    *p99 = v[std::min(v.size() - 1, (size_t)((double)v.size() * 0.99))];
}

// Device samples (cycles) to microseconds with the loop's ns/cycle.
static std::vector<double> device_us(const long long *dcyc, const unsigned long long *dspan,
                                     uint32_t iters)
{
    std::vector<long long> cyc(iters);
    unsigned long long span[2];
    CU(cudaMemcpy(cyc.data(), dcyc, iters * sizeof(long long), cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(span, dspan, sizeof(span), cudaMemcpyDeviceToHost));
    double ns_per_cycle = span[1] ? (double)span[0] / (double)span[1] : 0.0;
    std::vector<double> us(iters);
    for (uint32_t i = 0; i < iters; i++)
        us[i] = (double)cyc[i] * ns_per_cycle / 1e3;
    return us;
}

// Caller mode: progress the initiator and the target until the imm is
// banked at the target, then take it (bounded by WAIT_MS).
static int wait_both(te_engine *a, te_engine *b)
{
    double end = now_us() + WAIT_MS * 1000.0;
    uint64_t banked = 0;
    while (now_us() < end) {
        te_progress(a, -1, 0);
        te_progress(b, -1, 0);
        int rc = te_imm_poll(b, IMM_CPU, &banked, NULL);
        if (rc < 0)
            return rc;
        if (banked >= 1)
            return te_imm_wait(b, IMM_CPU, 1, WAIT_MS);
    }
    return -ETIMEDOUT;
}

// The proxy round trip seen from a CPU thread spinning on the two rings:
// when the proxy has submitted write i (a's ring->consumed passes i) and
// when b's watch stored flag i. flag - taken is the engine's share on the
// CPU; the kernel's round trip minus it is the bus crossings, the proxy's
// detection of the entry and te_submit.
struct monitor_arg {
    const te_moe_ring *ra;
    const volatile uint32_t *flags;
    uint32_t iters;
    double *taken, *flagged;
};

static void *monitor_main(void *arg)
{
    struct monitor_arg *m = (struct monitor_arg *)arg;
    double end = now_us() + 30e6;
    for (uint32_t i = 0; i < m->iters; i++) {
        while (__atomic_load_n(&m->ra->consumed, __ATOMIC_ACQUIRE) < (uint64_t)i + 1)
            if (__atomic_load_n(&m->ra->error, __ATOMIC_ACQUIRE) || now_us() > end)
                return NULL;
        m->taken[i] = now_us();
        while (__atomic_load_n(&m->flags[i], __ATOMIC_ACQUIRE) == 0)
            if (now_us() > end)
                return NULL;
        m->flagged[i] = now_us();
    }
    return NULL;
}

// One proxy round of `iters` writes with fresh rings (a proxy's ring
// starts at 0); prints its rows, returns its p50.
static double proxy_round(te_engine *a, te_engine *b, te_peer peer, te_mr *smr,
                          const te_mr_desc *dd, uint32_t iters, uint64_t bytes, int produce,
                          const char *name, int rep, long long timeout_cycles, long long *dcyc,
                          unsigned long long *dspan, int *dstatus)
{
    double p50, p99;
    int st;
    size_t rbytes = te_moe_ring_bytes(RING_ENTRIES, 1), wbytes = te_moe_ring_bytes(1, iters);
    void *ra, *rb, *dra, *drb;
    CU(cudaHostAlloc(&ra, rbytes, cudaHostAllocMapped));
    CU(cudaHostAlloc(&rb, wbytes, cudaHostAllocMapped));
    CU(cudaHostGetDevicePointer(&dra, ra, 0));
    CU(cudaHostGetDevicePointer(&drb, rb, 0));
    te_moe_proxy *pa, *pb;
    TE(te_moe_proxy_create(a, ra, RING_ENTRIES, 1, &pa));
    TE(te_moe_proxy_create(b, rb, 1, iters, &pb));
    TE(te_moe_proxy_target(pa, 0, peer, smr, dd));
    for (uint32_t i = 0; i < iters; i++)
        TE(te_moe_proxy_watch(pb, IMM_PROXY + i, 1, i, 1, 60000));
    const volatile uint32_t *dflags = (const volatile uint32_t *)(
        (uint8_t *)drb + ((uint8_t *)te_moe_ring_flags((te_moe_ring *)rb) - (uint8_t *)rb));
    std::vector<double> taken(iters, 0.0), flagged(iters, 0.0);
    struct monitor_arg ma = {(const te_moe_ring *)ra, te_moe_ring_flags((te_moe_ring *)rb),
                             iters, taken.data(), flagged.data()};
    pthread_t mon;
    pthread_create(&mon, NULL, monitor_main, &ma);
    proxy_kernel<<<1, 1>>>((te_moe_ring *)dra, dflags, iters, bytes, produce, timeout_cycles,
                           dcyc, dspan, dstatus);
    CU(cudaGetLastError());
    CU(cudaDeviceSynchronize());
    pthread_join(mon, NULL);
    CU(cudaMemcpy(&st, dstatus, sizeof(int), cudaMemcpyDeviceToHost));
    if (st) {
        fprintf(stderr, "te-moe-proxy-bench: proxy kernel %s: %s\n",
                st == -2 ? "saw a failed flag" : "timed out", te_moe_proxy_error(pa));
        exit(1);
    }
    std::vector<double> p = device_us(dcyc, dspan, iters);
    stats(p, &p50, &p99);
    printf("%4d %-7s %9.2f %9.2f\n", rep, name, p50, p99);
    // The CPU's view of the same round trips (0 where the monitor missed one).
    std::vector<double> eng, loop;
    for (uint32_t i = 0; i < iters; i++) {
        if (taken[i] > 0 && flagged[i] > 0)
            eng.push_back(flagged[i] - taken[i]);
        if (i + 1 < iters && flagged[i] > 0 && taken[i + 1] > 0)
            loop.push_back(taken[i + 1] - flagged[i]);
    }
    if (eng.size() > 1 && loop.size() > 1) {
        double e50, e99, l50, l99;
        stats(eng, &e50, &e99);
        stats(loop, &l50, &l99);
        printf("%4d %-7s %9.2f %9.2f   (CPU view: submitted -> flag stored)\n", rep, "  .eng",
               e50, e99);
        printf("%4d %-7s %9.2f %9.2f   (CPU view: flag stored -> next entry submitted)\n", rep,
               "  .loop", l50, l99);
    }
    te_moe_proxy_destroy(pa);
    te_moe_proxy_destroy(pb);
    cudaFreeHost(ra), cudaFreeHost(rb);
    return p50;
}

static int usage(void)
{
    fprintf(stderr, "usage: te-moe-proxy-bench [--iters N (1..100000, default 2000)] "
                    "[--bytes B (1..1048576, default 8)] [--mem host|cuda] [--reps R (1..50, default 3)]\n"
                    "engine settings from the environment: TE_ENGINE_PROGRESS=caller, "
                    "TE_PLUGIN=efa TE_EFA_PROVIDER=shm, ...\n");
    return 2;
}

int main(int argc, char **argv)
{
    long iters = 2000, bytes = 8, reps = 3;
    int cuda_mem = 0;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = strtol(argv[++i], &end, 10);
        else if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
            bytes = strtol(argv[++i], &end, 10);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = strtol(argv[++i], &end, 10);
        else if (!strcmp(argv[i], "--mem") && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "host") && strcmp(argv[i], "cuda"))
                return usage();
            cuda_mem = !strcmp(argv[i], "cuda");
            continue;
        } else
            return usage();
        if (!end || *end || iters < 1 || iters > 100000 || bytes < 1 || bytes > (1 << 20) ||
            reps < 1 || reps > 50)
            return usage();
    }
    if (te_moe_gpu_device_count() <= 0) {
        printf("SKIP te-moe-proxy-bench: no CUDA device usable (%s)\n", te_moe_gpu_last_error());
        return 77;
    }
    TE(te_moe_gpu_preload());
    cudaFuncAttributes fa; // loads the kernels now (lazy loading could wait on a running one)
    CU(cudaFuncGetAttributes(&fa, proxy_kernel));
    CU(cudaFuncGetAttributes(&fa, floor_kernel));

    te_engine *a, *b;
    TE(te_engine_create(NULL, &a));
    TE(te_engine_create(NULL, &b));
    int caller = te_engine_progress_mode(a) == TE_PROGRESS_CALLER;
    void *src, *dst;
    unsigned mem = cuda_mem ? TE_MEM_CUDA : TE_MEM_HOST;
    if (cuda_mem) {
        CU(cudaMalloc(&src, (size_t)bytes));
        CU(cudaMalloc(&dst, (size_t)bytes));
    } else {
        CU(cudaHostAlloc(&src, (size_t)bytes, cudaHostAllocDefault));
        CU(cudaHostAlloc(&dst, (size_t)bytes, cudaHostAllocDefault));
    }
    te_mr *smr, *dmr;
    te_mr_desc dd;
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    te_peer peer;
    TE(te_mr_reg(a, 0, src, (size_t)bytes, TE_MR_LOCAL, mem, &smr));
    TE(te_mr_reg(b, 0, dst, (size_t)bytes, TE_MR_REMOTE_WRITE, mem, &dmr));
    TE(te_mr_describe(dmr, &dd));
    TE(te_engine_address(b, 0, addr, &alen));
    TE(te_peer_add(a, 0, addr, alen, &peer));

    long long *dcyc;
    unsigned long long *dspan;
    int *dstatus;
    CU(cudaMalloc(&dcyc, (size_t)iters * sizeof(long long)));
    CU(cudaMalloc(&dspan, 2 * sizeof(unsigned long long)));
    CU(cudaMalloc(&dstatus, sizeof(int)));
    uint32_t *pingpong;
    void *dpingpong;
    CU(cudaHostAlloc((void **)&pingpong, 64, cudaHostAllocMapped));
    CU(cudaHostGetDevicePointer(&dpingpong, pingpong, 0));
    int prop_rate_khz = 0;
    CU(cudaDeviceGetAttribute(&prop_rate_khz, cudaDevAttrClockRate, 0));
    long long timeout_cycles = (long long)prop_rate_khz * WAIT_MS * 4; // generous at any clock

    printf("# te-moe-proxy-bench: %ld-byte WriteImm round trips, %s memory, plugin %s, "
           "progress %s, %ld samples per row\n", bytes, cuda_mem ? "cuda" : "host",
           te_engine_plugin_name(a), caller ? "caller" : "thread", iters);
    printf("%4s %-7s %9s %9s\n", "rep", "path", "p50_us", "p99_us");
    double med[5][50];
    for (long rep = 0; rep < reps; rep++) {
        double p50, p99;
        int st;
        // floor
        memset(pingpong, 0, 64);
        struct echo_arg ea = {pingpong, pingpong + 16, (uint32_t)iters};
        pthread_t echo;
        pthread_create(&echo, NULL, echo_main, &ea);
        floor_kernel<<<1, 1>>>((volatile uint32_t *)dpingpong,
                               (volatile uint32_t *)dpingpong + 16, (uint32_t)iters,
                               timeout_cycles, dcyc, dspan, dstatus);
        CU(cudaGetLastError());
        CU(cudaDeviceSynchronize());
        pthread_join(echo, NULL);
        CU(cudaMemcpy(&st, dstatus, sizeof(int), cudaMemcpyDeviceToHost));
        if (st) {
            fprintf(stderr, "te-moe-proxy-bench: floor kernel timed out\n");
            return 1;
        }
        std::vector<double> f = device_us(dcyc, dspan, (uint32_t)iters);
        stats(f, &p50, &p99);
        med[0][rep] = p50;
        printf("%4ld %-7s %9.2f %9.2f\n", rep + 1, "floor", p50, p99);

        // cpu: the engine alone
        std::vector<double> c(iters);
        for (long i = 0; i < iters; i++) {
            te_request r;
            te_request_init(&r, TE_OP_WRITE);
            r.flags = TE_F_IMM;
            r.imm = IMM_CPU;
            r.timeout_ms = WAIT_MS;
            r.u.xfer.peer = peer;
            r.u.xfer.local = smr;
            r.u.xfer.remote = &dd;
            r.u.xfer.len = (size_t)bytes;
            double t0 = now_us();
            int64_t id = te_submit(a, &r);
            TE((int)(id < 0 ? id : 0));
            if (caller) // both engines progressed by this thread (efa's initiator posts in its turn)
                TE(wait_both(a, b));
            else
                TE(te_imm_wait(b, IMM_CPU, 1, WAIT_MS));
            c[i] = now_us() - t0;
        }
        stats(c, &p50, &p99);
        med[1][rep] = p50;
        printf("%4ld %-7s %9.2f %9.2f\n", rep + 1, "cpu", p50, p99);
        if (caller) // the initiator's completions of this rep, before the proxies progress it
            for (int k = 0; k < 1000 && te_progress(a, -1, 0) >= 0; k++)
                ;

        static const struct { int produce; const char *name; } var[] = {
            {PRODUCE_PLAIN, "proxy"}, {PRODUCE_CACHED, "proxy.c"}, {PRODUCE_WIDE, "proxy.w"}};
        for (int v = 0; v < 3; v++)
            med[2 + v][rep] = proxy_round(a, b, peer, smr, &dd, (uint32_t)iters, (uint64_t)bytes,
                                          var[v].produce, var[v].name, (int)rep + 1,
                                          timeout_cycles, dcyc, dspan, dstatus);
        fflush(stdout);
    }
    double m[5];
    for (int k = 0; k < 5; k++) {
        std::vector<double> v(med[k], med[k] + reps);
        double unused;
        stats(v, &m[k], &unused);
    }
    printf("# medians of the reps' p50: floor %.2f us, cpu %.2f us, proxy %.2f / .c %.2f / "
           ".w %.2f us; proxy - cpu = %.2f us, proxy - cpu - floor = %.2f us (.w: %.2f, %.2f)\n",
           m[0], m[1], m[2], m[3], m[4], m[2] - m[1], m[2] - m[1] - m[0], m[4] - m[1],
           m[4] - m[1] - m[0]);
    te_mr_dereg(a, smr);
    te_mr_dereg(b, dmr);
    te_engine_destroy(a);
    te_engine_destroy(b);
    if (cuda_mem)
        cudaFree(src), cudaFree(dst);
    else
        cudaFreeHost(src), cudaFreeHost(dst);
    cudaFree(dcyc), cudaFree(dspan), cudaFree(dstatus), cudaFreeHost(pingpong);
    return 0;
}
