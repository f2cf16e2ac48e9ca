/*
 * The engine's KV cache in device memory, layer readiness from the GPU
 * (ctest kvcache_gpu, labels kvcache;gpu): a source cache and a decoder
 * cache in cudaMalloc memory (TE_MEM_CUDA), two loopback engines in this
 * process; the source is told each layer by a kernel bumping the
 * te_kv_gpu_layers word on a stream (one bump per layer, one more for the
 * hidden state), as a CUDA graph of the forward pass would. Checks every
 * byte of the decoder's device cache: the named pages hold the source's
 * pages, the hidden slot its slot, all else the sentinel. Exits 77 where
 * CUDA or a device cannot be used (docs/kvcache.md "GPU").
 */
#include <check.h>
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "te/kv.h"
#include "te_cuda_kernels.h"
#include "kv_test_util.h"

#define LAYERS 3
#define PAGES 8
#define SENTINEL 0xEE
#define SEED 41

static const uint32_t SRC_PAGES[3] = {5, 2, 7};
static const uint32_t DST_PAGES[3] = {1, 6, 3};

struct dcache {
    uint8_t *dev;
    size_t len;
    uint64_t page, hidden;
    te_kv_region reg[LAYERS * 2];
    te_kv_cache *c;
};

static te_kv_shape shape(void)
{
    te_kv_shape s;
    ck_assert_int_eq(te_kv_shape_custom(LAYERS, 2, 16, 2, 2, 32,
                                        4 * 2 * 2 * 16 * 2, &s), 0);
    return s;
}

/* [layer][kv][page] regions, then two hidden slots, in one device
 * allocation. */
static struct dcache dcache_new(void)
{
    struct dcache x = {0};
    te_kv_shape s = shape();
    x.page = te_kv_region_page_bytes(&s);
    x.hidden = (uint64_t)s.hidden * s.elem_bytes;
    x.len = LAYERS * 2 * PAGES * x.page + 2 * x.hidden;
    ck_assert_int_eq(cudaMalloc((void **)&x.dev, x.len), cudaSuccess);
    for (uint32_t r = 0; r < LAYERS * 2; r++)
        x.reg[r] = (te_kv_region){.offset = r * PAGES * x.page,
                                  .page_stride = x.page};
    te_kv_cache_desc d = {.shape = s, .base = x.dev, .len = x.len,
                          .mem = TE_MEM_CUDA, .pages = PAGES,
                          .regions = x.reg,
                          .hidden_offset = LAYERS * 2 * PAGES * x.page,
                          .hidden_stride = x.hidden, .hidden_slots = 2};
    ck_assert_msg(te_kv_cache_new(&d, &x.c) == 0, "%s", te_kv_last_error());
    return x;
}

START_TEST(gpu_layers_land_in_device_pages)
{
    struct dcache src = dcache_new(), dst = dcache_new();
    ck_assert_int_eq(te_k_fill(src.dev, src.len, SEED, NULL), 0);
    ck_assert_int_eq(cudaMemset(dst.dev, SENTINEL, dst.len), cudaSuccess);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    te_engine *pe = kv_test_engine(), *de = kv_test_engine();
    te_kv_source *s;
    ck_assert_int_eq(te_kv_source_new(pe, 0, src.c, 5000, &s), 0);
    te_kv_decoder_opts o = {.shape = shape(), .max_requests = 4};
    te_kv_decoder *d;
    ck_assert_msg(te_kv_decoder_new_cache(de, &o, dst.c, &d) == 0, "%s",
                  te_kv_last_error());
    uint8_t addr[TE_ADDR_MAX];
    size_t n = sizeof(addr);
    uint32_t pf;
    ck_assert_int_eq(te_engine_address(pe, 0, addr, &n), 0);
    ck_assert_int_eq(te_kv_decoder_add_prefiller(d, addr, n, &pf), 0);

    struct kv_test_result r = {0};
    ck_assert_msg(te_kv_decoder_submit_pages(d, pf, 7, 10, DST_PAGES, 3, 0,
                                             20000, kv_test_on_done, &r) == 0,
                  "%s", te_kv_last_error());
    ck_assert_int_eq(te_kv_source_begin(s, 7, 10, SRC_PAGES, 3, 1), 0);
    te_kv_gpu_layers *g;
    ck_assert_msg(te_kv_gpu_layers_new(s, 7, LAYERS, 0, &g) == 0, "%s",
                  te_kv_last_error());
    /* The forward pass: a bump after each layer, one for the hidden state. */
    for (int k = 0; k < LAYERS + 1; k++)
        ck_assert_int_eq(te_k_bump_watcher(te_kv_gpu_layers_word(g), NULL), 0);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
    kv_test_wait_done(&r, 20000);
    ck_assert_msg(r.status == 0, "%s", r.why);
    ck_assert_int_eq(te_kv_source_wait(s, 7, 10000), 0);
    ck_assert_int_eq(te_kv_gpu_layers_free(g), 0);

    uint8_t *got = malloc(dst.len), *want = malloc(dst.len);
    ck_assert_int_eq(cudaMemcpy(got, dst.dev, dst.len, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    memset(want, SENTINEL, dst.len);
    for (uint32_t reg = 0; reg < LAYERS * 2; reg++)
        for (int k = 0; k < 3; k++)
            for (uint64_t i = 0; i < dst.page; i++)
                want[dst.reg[reg].offset + DST_PAGES[k] * dst.page + i] =
                    te_k_pattern_byte(SEED, src.reg[reg].offset +
                                                SRC_PAGES[k] * src.page + i);
    uint64_t h = LAYERS * 2 * PAGES * dst.page; /* src slot 1 -> dst slot 0 */
    for (uint64_t i = 0; i < dst.hidden; i++)
        want[h + i] = te_k_pattern_byte(SEED, h + dst.hidden + i);
    for (size_t i = 0; i < dst.len; i++)
        ck_assert_msg(got[i] == want[i], "decoder device byte %zu: %u, want %u",
                      i, got[i], want[i]);
    free(got);
    free(want);
    ck_assert_int_eq(te_kv_decoder_release(d, 7), 0);
    te_kv_decoder_free(d);
    te_kv_source_free(s);
    te_engine_destroy(de);
    te_engine_destroy(pe);
    ck_assert_int_eq(te_kv_cache_free(src.c), 0);
    ck_assert_int_eq(te_kv_cache_free(dst.c), 0);
    cudaFree(src.dev);
    cudaFree(dst.dev);
}
END_TEST

int main(void)
{
    char why[256];
    int devices = 0;
    if (te_cuda_status(why, sizeof(why)) != 0) {
        printf("kvcache_gpu: skipped: %s\n", why);
        return 77;
    }
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        printf("kvcache_gpu: skipped: the CUDA runtime sees no device\n");
        return 77;
    }
    Suite *su = suite_create("kvcache_gpu");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, gpu_layers_land_in_device_pages);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    /* No fork: main() initialised CUDA above, and a CUDA context does not
     * survive fork() (a forked test's cudaMalloc fails with error 3). */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
