// moe_gpu (ctest label gpu): the kernels against the CPU layout and
// arithmetic, and the proxy driven by a GPU kernel through a ring in
// host-pinned mapped memory. Exits 77 with the reason when no CUDA device
// (or driver) is present.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "te/moe.h"
#include "te/moe_gpu.h"

static int failures;
#define CHECK(c, msg) do { if (!(c)) { failures++; printf("FAIL line %d: %s\n", __LINE__, msg); } } while (0)
#define CU(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

static int test_pack_combine(void)
{
    const uint32_t T = 8, K = 2, H = 16, R = 2, E = 4, epr = E / R;
    const uint64_t hdr = 64, rec = 16 + H * 4, orec = H * 4;
    std::vector<float> x(T * H), w(T * K);
    std::vector<uint32_t> ids(T * K), dest(T * K), pos(T * K), cnt(R, 0);
    for (uint32_t i = 0; i < T * H; i++)
        x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    for (uint32_t p = 0; p < T * K; p++) {
        ids[p] = (p * 3 + p / K) % E;
        w[p] = 0.25f + (float)(p % 5) / 8.0f;
        dest[p] = ids[p] / epr;
        pos[p] = cnt[dest[p]]++;
    }
    std::vector<uint64_t> blk(R);
    blk[0] = 0;
    blk[1] = hdr + cnt[0] * rec;
    size_t send_len = 2 * hdr + T * K * rec;
    std::vector<uint8_t> want(send_len, 0), got(send_len, 0);
    for (uint32_t p = 0; p < T * K; p++) {
        uint8_t *r = want.data() + blk[dest[p]] + hdr + pos[p] * rec;
        uint32_t h[4] = {p / K, ids[p], p % K, 5};
        memcpy(r, h, 16);
        memcpy(r + 16, &x[(p / K) * H], H * 4);
    }
    void *dx, *dids, *ddest, *dpos, *dblk, *dsend, *dw, *dcomb, *dbase, *dout;
    CU(cudaMalloc(&dx, T * H * 4));
    CU(cudaMalloc(&dids, T * K * 4));
    CU(cudaMalloc(&ddest, T * K * 4));
    CU(cudaMalloc(&dpos, T * K * 4));
    CU(cudaMalloc(&dblk, R * 8));
    CU(cudaMalloc(&dsend, send_len));
    CU(cudaMemset(dsend, 0, send_len));
    CU(cudaMemcpy(dx, x.data(), T * H * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dids, ids.data(), T * K * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(ddest, dest.data(), T * K * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dpos, pos.data(), T * K * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dblk, blk.data(), R * 8, cudaMemcpyHostToDevice));
    CHECK(te_moe_gpu_pack(dx, H * 4, (uint32_t *)dids, (uint32_t *)ddest, (uint32_t *)dpos,
                          (uint64_t *)dblk, T, K, hdr, rec, 5, dsend, NULL) == 0, "pack launch");
    CU(cudaMemcpy(got.data(), dsend, send_len, cudaMemcpyDeviceToHost));
    CHECK(memcmp(got.data(), want.data(), send_len) == 0, "packed records differ from the CPU layout");

    // combine: outputs laid out per destination, fp32 then bf16
    for (uint32_t dtype = 0; dtype < 2; dtype++) {
        size_t elt = dtype ? 2 : 4, ro = H * elt;
        std::vector<uint64_t> base(R);
        base[0] = 64;
        base[1] = 64 + cnt[0] * orec + 64;
        size_t comb_len = base[1] + cnt[1] * orec;
        std::vector<uint8_t> comb(comb_len, 0);
        for (size_t i = 0; i < comb_len / 2; i++)
            if (dtype)
                ((uint16_t *)comb.data())[i] = te_moe_f32_to_bf16((float)((i * 13) % 29) / 7.0f - 2.0f);
            else if (i % 2 == 0)
                ((float *)comb.data())[i / 2] = (float)((i * 13) % 29) / 7.0f - 2.0f;
        std::vector<uint8_t> expect(T * ro), out(T * ro);
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t i = 0; i < H; i++) {
                float acc = 0.0f;
                for (uint32_t k = 0; k < K; k++) {
                    uint32_t p = t * K + k;
                    const uint8_t *y = comb.data() + base[dest[p]] + pos[p] * orec;
                    float v = dtype ? te_moe_bf16_to_f32(((const uint16_t *)y)[i]) : ((const float *)y)[i];
                    float prod = w[p] * v; // two roundings, as on the GPU (-fmad=false)
                    acc = acc + prod;
                }
                if (dtype)
                    ((uint16_t *)expect.data())[t * H + i] = te_moe_f32_to_bf16(acc);
                else
                    ((float *)expect.data())[t * H + i] = acc;
            }
        CU(cudaMalloc(&dw, T * K * 4));
        CU(cudaMalloc(&dcomb, comb_len));
        CU(cudaMalloc(&dbase, R * 8));
        CU(cudaMalloc(&dout, T * ro));
        CU(cudaMemcpy(dw, w.data(), T * K * 4, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dcomb, comb.data(), comb_len, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dbase, base.data(), R * 8, cudaMemcpyHostToDevice));
        CHECK(te_moe_gpu_combine(dcomb, (uint64_t *)dbase, (uint32_t *)ddest, (uint32_t *)dpos,
                                 (float *)dw, T, K, H, dtype, orec, dout, NULL) == 0, "combine launch");
        CU(cudaMemcpy(out.data(), dout, T * ro, cudaMemcpyDeviceToHost));
        CHECK(memcmp(out.data(), expect.data(), T * ro) == 0, dtype ? "bf16 combine differs" : "fp32 combine differs");
        cudaFree(dw), cudaFree(dcomb), cudaFree(dbase), cudaFree(dout);
    }
    cudaFree(dx), cudaFree(dids), cudaFree(ddest), cudaFree(dpos), cudaFree(dblk), cudaFree(dsend);
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
