// moe_gpu (ctest label gpu): the kernels against the CPU layout and
// arithmetic, and the proxy driven by a GPU kernel through a ring in
// host-pinned mapped memory. Exits 77 with the reason when no CUDA device
// (or driver) is present.
#include <cuda_runtime.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "te/moe_gpu.h"

static int failures;
#define CHECK(c, msg) do { if (!(c)) { failures++; printf("FAIL line %d: %s\n", __LINE__, msg); } } while (0)
#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

// The CPU staging of libte-moe (moe_dispatch.c, stage_rows) written out here: rows
// per destination in token order, meta = the token's experts on d in
// top-k order. The kernels must produce exactly these bytes.
static int test_pack_combine(void)
{
    const uint32_t T = 9, K = 3, H = 16, R = 3, E = 6, per = E / R;
    const uint64_t row_bytes = 64 + H * 4, slot = 64 + T * row_bytes;
    const uint64_t crow = 16 + H * 4, cslot = T * crow;
    std::vector<float> x(T * H), w(T * K);
    std::vector<uint16_t> ids(T * K);
    for (uint32_t i = 0; i < T * H; i++)
        x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (uint32_t p = 0; p < T * K; p++) {
        ids[p] = (uint16_t)((p * 5 + p / K) % E);
        w[p] = 0.25f + (float)(p % 5) / 8.0f;
    }
    std::vector<uint8_t> want(R * slot, 0), got(R * slot, 0);
    std::vector<uint32_t> wpos(T * R, 0xffffffffu), n(R, 0);
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t d = 0; d < R; d++) {
            uint32_t meta[16] = {0};
            uint16_t *ex = (uint16_t *)&meta[2];
            float *wt = (float *)&meta[6];
            uint8_t *sl = (uint8_t *)&meta[14];
            uint32_t m = 0;
            for (uint32_t j = 0; j < K; j++)
                if (ids[t * K + j] / per == d) {
                    ex[m] = ids[t * K + j];
                    sl[m] = (uint8_t)j;
                    wt[m++] = w[t * K + j];
                }
            if (!m)
                continue;
            meta[0] = t;
            meta[1] = m;
            wpos[t * R + d] = n[d];
            uint8_t *row = want.data() + d * slot + 64 + n[d]++ * row_bytes;
            memcpy(row, meta, 64);
            memcpy(row + 64, &x[t * H], H * 4);
        }
    void *dx, *dids, *dw, *dpos, *drows, *dsend, *dcomb, *dout;
    CU(cudaMalloc(&dx, T * H * 4));
    CU(cudaMalloc(&dids, T * K * 2));
    CU(cudaMalloc(&dw, T * K * 4));
    CU(cudaMalloc(&dpos, T * R * 4));
    CU(cudaMalloc(&drows, R * 4));
    CU(cudaMalloc(&dsend, R * slot));
    CU(cudaMemset(dsend, 0, R * slot));
    CU(cudaMemcpy(dx, x.data(), T * H * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dids, ids.data(), T * K * 2, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dw, w.data(), T * K * 4, cudaMemcpyHostToDevice));
    CHECK(te_moe_gpu_route((uint16_t *)dids, T, K, R, per, (uint32_t *)dpos, (uint32_t *)drows,
                           NULL) == 0, "route launch");
    CHECK(te_moe_gpu_pack(dx, H * 4, (uint16_t *)dids, (float *)dw, (uint32_t *)dpos, T, K, R,
                          per, slot, row_bytes, dsend, NULL) == 0, "pack launch");
    std::vector<uint32_t> gpos(T * R), grows(R);
    CU(cudaMemcpy(gpos.data(), dpos, T * R * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(grows.data(), drows, R * 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(got.data(), dsend, R * slot, cudaMemcpyDeviceToHost));
    CHECK(gpos == wpos && grows == n, "row positions differ from the CPU staging");
    CHECK(memcmp(got.data(), want.data(), R * slot) == 0, "packed rows differ from the CPU staging");

    // combine: partials per rank, summed 0 + rank 0 + rank 1 + ... in float32
    std::vector<uint8_t> comb(R * cslot, 0);
    for (size_t i = 0; i < comb.size() / 4; i++)
        ((float *)comb.data())[i] = (float)((i * 13) % 29) / 7.0f - 2.0f;
    std::vector<float> expect(T * H), out(T * H);
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t i = 0; i < H; i++) {
            float acc = 0.0f;
            for (uint32_t d = 0; d < R; d++)
                if (wpos[t * R + d] != 0xffffffffu)
                    acc += ((const float *)(comb.data() + d * cslot + wpos[t * R + d] * crow + 16))[i];
            expect[t * H + i] = acc;
        }
    CU(cudaMalloc(&dcomb, comb.size()));
    CU(cudaMalloc(&dout, T * H * 4));
    CU(cudaMemcpy(dcomb, comb.data(), comb.size(), cudaMemcpyHostToDevice));
    CHECK(te_moe_gpu_combine(dcomb, (uint32_t *)dpos, T, R, H, cslot, crow, (float *)dout,
                             NULL) == 0, "combine launch");
    CU(cudaMemcpy(out.data(), dout, T * H * 4, cudaMemcpyDeviceToHost));
    CHECK(memcmp(out.data(), expect.data(), T * H * 4) == 0, "combine differs from the CPU sum");
    cudaFree(dx), cudaFree(dids), cudaFree(dw), cudaFree(dpos), cudaFree(drows);
    cudaFree(dsend), cudaFree(dcomb), cudaFree(dout);
    return 0;
}

static int test_proxy(void)
{
    const uint32_t N = 64, CH = 512;
    te_engine *a, *b;
    if (te_engine_create(NULL, &a) || te_engine_create(NULL, &b)) {
        printf("engine: %s\n", te_last_error());
        return 1;
    }
    uint8_t *src, *dst = (uint8_t *)aligned_alloc(4096, N * CH);
    CU(cudaHostAlloc((void **)&src, N * CH, cudaHostAllocDefault));
    for (uint32_t i = 0; i < N * CH; i++)
        src[i] = (uint8_t)(i * 11 + 1);
    memset(dst, 0, N * CH);
    te_mr *smr, *dmr;
    te_mr_desc dd;
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    te_peer peer;
    if (te_mr_reg(a, 0, src, N * CH, TE_MR_LOCAL, TE_MEM_HOST, &smr) ||
        te_mr_reg(b, 0, dst, N * CH, TE_MR_REMOTE_WRITE, TE_MEM_HOST, &dmr) ||
        te_mr_describe(dmr, &dd) || te_engine_address(b, 0, addr, &alen) ||
        te_peer_add(a, 0, addr, alen, &peer)) {
        printf("setup: %s\n", te_last_error());
        return 1;
    }
    void *ra, *rb, *dra, *drb;
    CU(cudaHostAlloc(&ra, te_moe_ring_bytes(16, 2), cudaHostAllocMapped));
    CU(cudaHostAlloc(&rb, te_moe_ring_bytes(16, 2), cudaHostAllocMapped));
    CU(cudaHostGetDevicePointer(&dra, ra, 0));
    CU(cudaHostGetDevicePointer(&drb, rb, 0));
    te_moe_proxy *pa, *pb;
    CHECK(te_moe_proxy_create(a, ra, 16, 2, &pa) == 0, "proxy a");
    CHECK(te_moe_proxy_create(b, rb, 16, 2, &pb) == 0, "proxy b");
    CHECK(te_moe_proxy_target(pa, 0, peer, smr, &dd) == 0, "target");
    CHECK(te_moe_proxy_watch(pb, 0x7700, N, 1, 9, 10000) == 0, "watch");
    std::vector<te_moe_ring_entry> ents(N);
    memset(ents.data(), 0, N * sizeof(te_moe_ring_entry));
    for (uint32_t i = 0; i < N; i++) {
        ents[i].target = 0;
        ents[i].imm = 0x7700;
        ents[i].src_off = (uint64_t)i * CH;
        ents[i].dst_off = (uint64_t)(N - 1 - i) * CH;
        ents[i].len = CH;
    }
    void *dents, *dposted, *dst1, *dst2;
    CU(cudaMalloc(&dents, N * sizeof(te_moe_ring_entry)));
    CU(cudaMalloc(&dposted, 8));
    CU(cudaMalloc(&dst1, 4));
    CU(cudaMalloc(&dst2, 4));
    CU(cudaMemset(dposted, 0, 8));
    CU(cudaMemcpy(dents, ents.data(), N * sizeof(te_moe_ring_entry), cudaMemcpyHostToDevice));
    cudaStream_t s1, s2;
    CU(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    long long cycles = 20LL * 1000 * 1000 * 1000; // ~10 s at 2 GHz
    volatile uint32_t *flag = te_moe_ring_flags((te_moe_ring *)rb) + 1;
    volatile uint32_t *dflag = (volatile uint32_t *)((uint8_t *)drb + ((uint8_t *)flag - (uint8_t *)rb));
    CHECK(te_moe_gpu_wait_flag(dflag, 9, cycles, (int *)dst2, s2) == 0, "wait launch");
    CHECK(te_moe_gpu_post((te_moe_ring *)dra, (unsigned long long *)dposted,
                          (te_moe_ring_entry *)dents, N, cycles, (int *)dst1, s1) == 0, "post launch");
    /* While the kernels run: when did the imms arrive at b, when did a's
     * writes complete (bounded: 12 s). */
    {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        double t_banked = -1, t_done = -1, t_flag = -1, el = 0;
        while (el < 12.0 && (t_banked < 0 || t_done < 0 || t_flag < 0)) {
            uint64_t banked = 0, sub = 0, done = 0;
            int armed = 0;
            te_imm_poll(b, 0x7700, &banked, &armed);
            te_moe_proxy_counts(pa, &sub, &done);
            done += te_moe_proxy_failed(pa);
            clock_gettime(CLOCK_MONOTONIC, &t);
            el = (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
            if (t_banked < 0 && (banked >= N || (!armed && *flag == 9)))
                t_banked = el;
            if (t_done < 0 && done >= N)
                t_done = el;
            if (t_flag < 0 && *flag != 0)
                t_flag = el;
            usleep(100);
        }
        printf("proxy timeline: imms at b %.6f s, a's writes done %.6f s, flag "
               "stored %.6f s (%u), failed %llu: %s\n", t_banked, t_done, t_flag,
               (unsigned)*flag, (unsigned long long)te_moe_proxy_failed(pa),
               te_moe_proxy_error(pa) ? te_moe_proxy_error(pa) : "");
    }
    CU(cudaStreamSynchronize(s1));
    CU(cudaStreamSynchronize(s2));
    int st1 = 1, st2 = 1;
    CU(cudaMemcpy(&st1, dst1, 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(&st2, dst2, 4, cudaMemcpyDeviceToHost));
    CHECK(st1 == 0, "GPU could not post every entry");
    CHECK(st2 == 0, "GPU flag not raised");
    int same = 1;
    for (uint32_t i = 0; i < N; i++)
        same &= memcmp(dst + (N - 1 - i) * CH, src + i * CH, CH) == 0;
    CHECK(same, "bytes written through the proxy differ");
    te_moe_proxy_destroy(pa);
    te_moe_proxy_destroy(pb);
    te_mr_dereg(a, smr);
    te_mr_dereg(b, dmr);
    te_engine_destroy(a);
    te_engine_destroy(b);
    cudaFreeHost(ra), cudaFreeHost(rb), cudaFreeHost(src), free(dst);
    cudaFree(dents), cudaFree(dposted), cudaFree(dst1), cudaFree(dst2);
    return 0;
}

int main(void)
{
    if (te_moe_gpu_device_count() <= 0) {
        printf("SKIP moe_gpu: no CUDA device usable (%s)\n",
               te_moe_gpu_last_error()[0] ? te_moe_gpu_last_error() : "0 devices");
        return 77;
    }
    if (test_pack_combine() || test_proxy())
        return 1;
    printf("%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
