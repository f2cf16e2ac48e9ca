/*
 * GPU memory end to end on a real CUDA device: pointer classification,
 * registration errors, loopback transfers host<->device<->device with keys
 * and bounds, GPU flags and the watcher (cuda_gpu_flag.c). Label gpu: exits
 * 77 with the reason where no CUDA device can be used.
 *
 * Usage: cuda_gpu <case> (pointer, registration, loopback, flag, watcher).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_gpu.h"

#define MIB (1u << 20)

te_engine *gpu_engine(int nics)
{
    te_config *c = te_config_new();
    ck_assert_ptr_nonnull(c);
    if (nics == 2)
        ck_assert_int_eq(te_config_load_string(c, "[engine]\nnics_per_group = 2\n"
                                                  "[loopback]\ndevices = 2\n"),
                         0);
    te_engine *e = NULL;
    int rc = te_engine_create(c, &e);
    te_config_free(c);
    ck_assert_msg(rc == 0, "engine: %s", te_last_error());
    return e;
}

START_TEST(pointer)
{
    void *d = NULL, *pinned = NULL, *managed = NULL;
    CUDA_OK(cudaMalloc(&d, MIB));
    te_cuda_ptr_info info;
    ck_assert_msg(te_cuda_pointer_info(d, MIB, &info) == 0, "%s",
                  te_last_error());
    ck_assert_uint_eq(info.kind, TE_CUDA_PTR_DEVICE);
    ck_assert_int_eq(info.device, 0);
    ck_assert_uint_eq(info.alloc_base, (uint64_t)(uintptr_t)d);
    ck_assert_uint_ge(info.alloc_len, MIB);
    printf("device memory: dma-buf %s\n", info.dmabuf ? "yes" : "no");
    /* Inside the allocation at an offset: same allocation. */
    ck_assert_int_eq(te_cuda_pointer_info((char *)d + 4096, 4096, &info), 0);
    ck_assert_uint_eq(info.alloc_base, (uint64_t)(uintptr_t)d);
    /* Running past its end. */
    ck_assert_int_eq(te_cuda_pointer_info((char *)d + info.alloc_len - 16, 32,
                                          &info), -ERANGE);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "past the CUDA allocation"));

    char *host = malloc(4096);
    ck_assert_int_eq(te_cuda_pointer_info(host, 4096, &info), 0);
    ck_assert_uint_eq(info.kind, TE_CUDA_PTR_HOST);
    ck_assert_int_eq(info.device, -1);
    CUDA_OK(cudaMallocHost(&pinned, 4096));
    ck_assert_int_eq(te_cuda_pointer_info(pinned, 4096, &info), 0);
    ck_assert_uint_eq(info.kind, TE_CUDA_PTR_HOST_PINNED);
    CUDA_OK(cudaMallocManaged(&managed, 4096, cudaMemAttachGlobal));
    ck_assert_int_eq(te_cuda_pointer_info(managed, 4096, &info), 0);
    ck_assert_uint_eq(info.kind, TE_CUDA_PTR_MANAGED);
    /* Freed device memory no longer reads as device memory. */
    CUDA_OK(cudaFree(d));
    ck_assert_int_eq(te_cuda_pointer_info(d, 4096, &info), 0);
    ck_assert_uint_ne(info.kind, TE_CUDA_PTR_DEVICE);
    CUDA_OK(cudaFreeHost(pinned));
    CUDA_OK(cudaFree(managed));
    free(host);
}
END_TEST

START_TEST(registration)
{
    te_engine *e = gpu_engine(1);
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, MIB));
    char *host = aligned_alloc(4096, MIB);
    te_mr *mr = NULL;
    /* Host memory registered as CUDA. */
    ck_assert_int_eq(te_mr_reg(e, 0, host, MIB, 0, TE_MEM_CUDA, &mr), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "host memory"));
    /* Device memory registered as host. */
    ck_assert_int_eq(te_mr_reg(e, 0, d, MIB, 0, TE_MEM_HOST, &mr), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "TE_MEM_HOST"));
    /* A size past the allocation. */
    ck_assert_int_eq(te_mr_reg(e, 0, d, 2 * MIB, 0, TE_MEM_CUDA, &mr), -ERANGE);
    ck_assert_ptr_null(mr);
    /* A good one, then the same pointer once freed. */
    ck_assert_msg(te_mr_reg(e, 0, d, MIB, TE_MR_REMOTE_WRITE, TE_MEM_CUDA,
                            &mr) == 0, "%s", te_last_error());
    ck_assert_int_eq(te_mr_dereg(e, mr), 0);
    CUDA_OK(cudaFree(d));
    mr = NULL;
    ck_assert_int_eq(te_mr_reg(e, 0, d, MIB, 0, TE_MEM_CUDA, &mr), -EINVAL);
    ck_assert_ptr_null(mr);
    te_engine_destroy(e);
    free(host);
}
END_TEST

/* One side of a loopback transfer: a region of host or device memory. */
struct region {
    int device;
    uint8_t *p;
    te_mr *mr;
    te_mr_desc desc;
};

static void region_open(te_engine *e, struct region *r, int device, size_t len)
{
    memset(r, 0, sizeof(*r));
    r->device = device;
    if (device)
        CUDA_OK(cudaMalloc((void **)&r->p, len));
    else
        ck_assert_ptr_nonnull(r->p = aligned_alloc(4096, len));
    ck_assert_msg(te_mr_reg(e, 0, r->p, len,
                            TE_MR_REMOTE_WRITE | TE_MR_REMOTE_READ,
                            device ? TE_MEM_CUDA : TE_MEM_HOST, &r->mr) == 0,
                  "%s", te_last_error());
    ck_assert_int_eq(te_mr_describe(r->mr, &r->desc), 0);
}

static void region_fill(struct region *r, size_t len, uint64_t seed)
{
    if (r->device) {
        CUDA_OK((cudaError_t)te_k_fill(r->p, len, seed, NULL));
        CUDA_OK(cudaDeviceSynchronize());
    } else {
        for (size_t i = 0; i < len; i++)
            r->p[i] = te_k_pattern_byte(seed, i);
    }
}

/* Bytes of [off, off+len) that differ from the pattern (seed, from 0). */
static unsigned long long region_mismatches(struct region *r, size_t off,
                                            size_t len, uint64_t seed)
{
    if (r->device) {
        unsigned long long *bad = NULL, got = 0;
        CUDA_OK(cudaMalloc((void **)&bad, sizeof(*bad)));
        CUDA_OK(cudaMemset(bad, 0, sizeof(*bad)));
        CUDA_OK((cudaError_t)te_k_verify(r->p + off, len, seed, 0, bad, NULL));
        CUDA_OK(cudaMemcpy(&got, bad, sizeof(got), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaFree(bad));
        return got;
    }
    unsigned long long n = 0;
    for (size_t i = 0; i < len; i++)
        n += r->p[off + i] != te_k_pattern_byte(seed, i);
    return n;
}

static void region_close(te_engine *e, struct region *r)
{
    ck_assert_int_eq(te_mr_dereg(e, r->mr), 0);
    if (r->device)
        CUDA_OK(cudaFree(r->p));
    else
        free(r->p);
}

static int xfer(te_engine *a, te_peer peer, uint32_t op, struct region *local,
                struct region *remote, uint64_t roff, uint64_t len,
                uint32_t imm, char *reason)
{
    te_request q;
    te_request_init(&q, op);
    q.flags = imm ? TE_F_IMM : 0;
    q.imm = imm;
    q.u.xfer.peer = peer;
    q.u.xfer.local = local->mr;
    q.u.xfer.remote = &remote->desc;
    q.u.xfer.remote_off = roff;
    q.u.xfer.len = len;
    int64_t id = te_submit(a, &q);
    if (id < 0) {
        snprintf(reason, 96, "%s", te_last_error());
        return (int)id;
    }
    te_completion c;
    int n = te_poll_completions(a, &c, 1, 20000);
    ck_assert_int_eq(n, 1);
    snprintf(reason, 96, "%s", c.reason);
    return c.status;
}

START_TEST(loopback)
{
    const size_t len = 8 * MIB;
    for (int nics = 1; nics <= 2; nics++) {
        te_engine *a = gpu_engine(nics), *b = gpu_engine(nics);
        uint8_t addr[TE_ADDR_MAX];
        size_t alen = sizeof(addr);
        ck_assert_int_eq(te_engine_address(b, 0, addr, &alen), 0);
        te_peer pb;
        ck_assert_int_eq(te_peer_add(a, 0, addr, alen, &pb), 0);
        /* src kind x dst kind: D2D, H2D, D2H (H2H is the host suite's). */
        static const int kinds[3][2] = {{1, 1}, {0, 1}, {1, 0}};
        for (int k = 0; k < 3; k++) {
            struct region src, dst;
            region_open(a, &src, kinds[k][0], len);
            region_open(b, &dst, kinds[k][1], len + 4096);
            uint64_t seed = 100 + (uint64_t)k * 10 + (uint64_t)nics;
            region_fill(&src, len, seed);
            char why[96];
            uint32_t imm = 0x1000u + (uint32_t)k;
            int st = xfer(a, pb, TE_OP_WRITE, &src, &dst, 4096, len, imm, why);
            ck_assert_msg(st == 0, "write %d->%d: %s", kinds[k][0],
                          kinds[k][1], why);
            ck_assert_int_eq(te_imm_wait(b, imm, 1, 20000), 0);
            ck_assert_uint_eq(region_mismatches(&dst, 4096, len, seed), 0);
            /* Read it back into a zeroed source. */
            /* cudaMemset is asynchronous and the library copies on its own
             * stream: the caller finishes its work before submitting. */
            if (src.device) {
                CUDA_OK(cudaMemset(src.p, 0, len));
                CUDA_OK(cudaDeviceSynchronize());
            } else {
                memset(src.p, 0, len);
            }
            st = xfer(a, pb, TE_OP_READ, &src, &dst, 4096, len, 0, why);
            ck_assert_msg(st == 0, "read: %s", why);
            ck_assert_uint_eq(region_mismatches(&src, 0, len, seed), 0);
            /* Bounds and keys as for host memory. */
            st = xfer(a, pb, TE_OP_WRITE, &src, &dst, 8192, len, 0, why);
            ck_assert_int_eq(st, -ERANGE); /* refused by te_submit */
            te_mr_desc stale = dst.desc;
            te_mr *old = dst.mr;
            ck_assert_int_eq(te_mr_revoke(b, old, &dst.desc), 0);
            struct region bad = dst;
            bad.desc = stale;
            st = xfer(a, pb, TE_OP_WRITE, &src, &bad, 0, 4096, 0, why);
            ck_assert_int_eq(st, -EACCES);
            region_close(a, &src);
            region_close(b, &dst);
        }
        te_engine_destroy(a);
        te_engine_destroy(b);
    }
}
END_TEST

int main(int argc, char **argv)
{
    char why[512];
    if (te_cuda_status(why, sizeof(why))) {
        printf("SKIP: no usable CUDA device: %s\n", why);
        return 77;
    }
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        printf("SKIP: the CUDA runtime sees no device\n");
        return 77;
    }
    const char *which = argc > 1 ? argv[1] : "";
    Suite *s = suite_create("cuda_gpu");
    TCase *t = tcase_create("gpu");
    tcase_set_timeout(t, 100);
    if (!*which || !strcmp(which, "pointer"))
        tcase_add_test(t, pointer);
    if (!*which || !strcmp(which, "registration"))
        tcase_add_test(t, registration);
    if (!*which || !strcmp(which, "loopback"))
        tcase_add_test(t, loopback);
    suite_add_tcase(s, t);
    if (!*which || !strcmp(which, "flag"))
        suite_add_tcase(s, cuda_gpu_flag_cases());
    if (!*which || !strcmp(which, "watcher"))
        suite_add_tcase(s, cuda_gpu_watcher_cases());
    SRunner *r = srunner_create(s);
    /* No fork: CUDA contexts do not survive fork(). */
    srunner_set_fork_status(r, CK_NOFORK);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
