/* Per-layer notify latency of the engine-owned way, against the raw core
 * in the same run: how long from te_kv_source_layer_done() of a request's
 * last layer to the decoder's completion callback, and, as the reference,
 * from te_submit() of the same paged writes (kv_factor of them, same
 * pages) to the te_imm_expect() callback of a bare engine pair; and
 * from layer_done() of layer 0 to that layer's note (te_kv_decoder_on_layer:
 * a LAYER message once its writes completed at the source). Two
 * loopback engines in one process; CLOCK_MONOTONIC on both ends.
 *
 *   bench_kv_cache [iterations] [pages per request]
 * prints the medians and p90s in us and the ratio of the medians. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "te/kv.h"

#define LAYERS 4
#define CACHE_PAGES 64

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static te_engine *engine(void)
{
    te_config *c = te_config_new();
    char v[32];
    snprintf(v, sizeof(v), "%d", TE_KV_MSG_MAX + 64);
    te_config_set(c, "engine", "max_msg_size", v);
    te_engine *e = NULL;
    if (te_engine_create(c, &e)) {
        fprintf(stderr, "engine: %s\n", te_last_error());
        exit(1);
    }
    te_config_free(c);
    return e;
}

static _Atomic uint64_t g_t1;

static void on_kv(uint64_t id, int status, const char *why, void *arg)
{
    (void)id, (void)arg;
    if (status)
        fprintf(stderr, "request failed: %s\n", why);
    atomic_store(&g_t1, status ? 1 : now_ns());
}

static _Atomic uint64_t g_note;

static void on_layer(uint64_t id, uint32_t layer, void *arg)
{
    (void)id, (void)arg;
    if (layer == 0)
        atomic_store(&g_note, now_ns());
}

static void on_imm(uint32_t imm, int status, void *arg)
{
    (void)imm, (void)arg;
    atomic_store(&g_t1, status ? 1 : now_ns());
}

static uint64_t wait_for(_Atomic uint64_t *v)
{
    for (int i = 0; i < 1000000 && !atomic_load(v); i++)
        usleep(10); /* 10 s at most */
    uint64_t t = atomic_exchange(v, 0);
    if (t <= 1) {
        fprintf(stderr, "no completion\n");
        exit(1);
    }
    return t;
}

/* Qwen3-235B's KV shape: 4 KV heads of 128 bf16, 16 tokens per page (a
 * region's page is 16 KiB); layer-major [layer][kv][page] arena. */
static te_kv_cache *cache(uint8_t **mem, te_kv_region *reg, uint64_t *len)
{
    te_kv_shape s;
    te_kv_shape_custom(LAYERS, 4, 128, 2, 2, 4096, 32768, &s);
    uint64_t page = te_kv_region_page_bytes(&s);
    *len = (uint64_t)LAYERS * 2 * CACHE_PAGES * page;
    *mem = aligned_alloc(4096, *len);
    memset(*mem, 1, *len);
    for (uint32_t r = 0; r < LAYERS * 2; r++)
        reg[r] = (te_kv_region){.offset = r * CACHE_PAGES * page,
                                .page_stride = page};
    te_kv_cache_desc d = {.shape = s, .base = *mem, .len = *len,
                          .mem = TE_MEM_HOST, .pages = CACHE_PAGES,
                          .regions = reg};
    te_kv_cache *c;
    if (te_kv_cache_new(&d, &c)) {
        fprintf(stderr, "cache: %s\n", te_kv_last_error());
        exit(1);
    }
    return c;
}

static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void stats(const char *what, uint64_t *v, int n, double *median)
{
    qsort(v, (size_t)n, sizeof(*v), cmp);
    *median = v[n / 2] / 1000.0;
    printf("%-44s p50 %7.1f us  p90 %7.1f us  (n %d)\n", what, *median,
           v[n * 9 / 10] / 1000.0, n);
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 200;
    uint32_t npages = argc > 2 ? (uint32_t)atoi(argv[2]) : 1;
    if (iters < 1 || npages < 1 || npages > CACHE_PAGES) {
        fprintf(stderr, "usage: bench_kv_cache [iterations] [pages 1..%d]\n",
                CACHE_PAGES);
        return 2;
    }
    te_engine *pe = engine(), *de = engine();
    uint8_t *smem, *dmem;
    te_kv_region sreg[LAYERS * 2], dreg[LAYERS * 2];
    uint64_t slen, dlen;
    te_kv_cache *sc = cache(&smem, sreg, &slen), *dc = cache(&dmem, dreg, &dlen);
    te_kv_source *src;
    te_kv_decoder *dec;
    te_kv_shape s;
    te_kv_shape_custom(LAYERS, 4, 128, 2, 2, 4096, 32768, &s);
    te_kv_decoder_opts o = {.shape = s, .max_requests = 4};
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    uint32_t pf;
    if (te_kv_source_new(pe, 0, sc, 0, &src) ||
        te_kv_decoder_new_cache(de, &o, dc, &dec) ||
        te_engine_address(pe, 0, addr, &alen) ||
        te_kv_decoder_add_prefiller(dec, addr, alen, &pf)) {
        fprintf(stderr, "setup: %s %s\n", te_kv_last_error(), te_last_error());
        return 1;
    }
    uint32_t pages[CACHE_PAGES];
    for (uint32_t k = 0; k < npages; k++)
        pages[k] = k;
    uint32_t tokens = npages * s.tokens_per_page;
    /* The raw reference: the same kv_factor paged writes, same pages,
     * between a second pair of registrations of the same memory. */
    te_mr *smr, *dmr;
    te_mr_desc dd;
    te_peer peer;
    if (te_mr_reg(pe, 0, smem, slen, 0, TE_MEM_HOST, &smr) ||
        te_mr_reg(de, 0, dmem, dlen, TE_MR_REMOTE_WRITE, TE_MEM_HOST, &dmr) ||
        te_mr_describe(dmr, &dd) || te_peer_add(pe, 0, addr, 0, &peer)) {
        /* te_peer_add of the decoder's address, below */
    }
    alen = sizeof(addr);
    te_engine_address(de, 0, addr, &alen);
    if (te_peer_add(pe, 0, addr, alen, &peer)) {
        fprintf(stderr, "peer: %s\n", te_last_error());
        return 1;
    }
    uint64_t *kv_ns = calloc((size_t)iters, 8), *raw_ns = calloc((size_t)iters, 8);
    uint64_t *note_ns = calloc((size_t)iters, 8);
    te_kv_decoder_on_layer(dec, on_layer, NULL);
    for (int i = 0; i < iters; i++) {
        /* the library: the last layer's notify */
        uint64_t id = (uint64_t)i + 1;
        if (te_kv_decoder_submit_pages(dec, pf, id, tokens, pages, npages,
                                       UINT32_MAX, 10000, on_kv, NULL) ||
            te_kv_source_begin(src, id, tokens, pages, npages, UINT32_MAX)) {
            fprintf(stderr, "submit: %s\n", te_kv_last_error());
            return 1;
        }
        usleep(2000); /* the ACCEPT is through */
        uint64_t t0 = now_ns();
        te_kv_source_layer_done(src, id, 0);
        note_ns[i] = wait_for(&g_note) - t0;
        for (uint32_t l = 1; l + 1 < LAYERS; l++)
            te_kv_source_layer_done(src, id, l);
        usleep(2000); /* earlier layers and the ACCEPT are through */
        t0 = now_ns();
        te_kv_source_layer_done(src, id, LAYERS - 1);
        kv_ns[i] = wait_for(&g_t1) - t0;
        te_kv_source_wait(src, id, 10000);
        te_kv_decoder_release(dec, id);
        /* the raw core: the same writes, an expectation armed first */
        uint32_t imm = 0x7e000000u + (uint32_t)i;
        te_request r[2];
        int64_t count = 0;
        for (int k = 0; k < 2; k++) {
            te_request_init(&r[k], TE_OP_PAGED);
            r[k].flags = TE_F_IMM;
            r[k].imm = imm;
            r[k].u.paged.peer = peer;
            r[k].u.paged.src = smr;
            r[k].u.paged.src_off = sreg[(LAYERS - 1) * 2 + k].offset;
            r[k].u.paged.src_stride = sreg[0].page_stride;
            r[k].u.paged.src_idx = pages;
            r[k].u.paged.dst = &dd;
            r[k].u.paged.dst_off = dreg[(LAYERS - 1) * 2 + k].offset;
            r[k].u.paged.dst_stride = dreg[0].page_stride;
            r[k].u.paged.dst_idx = pages;
            r[k].u.paged.page_len = te_kv_region_page_bytes(&s);
            r[k].u.paged.count = npages;
            count += te_expected_imms(pe, &r[k], 0);
        }
        te_imm_expect(de, imm, (uint64_t)count, on_imm, NULL);
        usleep(2000);
        t0 = now_ns();
        for (int k = 0; k < 2; k++)
            if (te_submit(pe, &r[k]) < 0) {
                fprintf(stderr, "raw submit: %s\n", te_last_error());
                return 1;
            }
        raw_ns[i] = wait_for(&g_t1) - t0;
    }
    te_completion cq[64];
    while (te_poll_completions(pe, cq, 64, 0) > 0) /* the raw writes' */
        ;
    double mk, mr, mn;
    printf("%u page(s) of 16 KiB per region, K and V: %u KiB per layer\n",
           npages, npages * 32);
    stats("layer_done -> decoder callback (libte-kv)", kv_ns, iters, &mk);
    stats("te_submit x2 -> imm callback (raw core)", raw_ns, iters, &mr);
    stats("layer_done -> that layer's note (LAYER msg)", note_ns, iters, &mn);
    printf("ratio of medians libte-kv / raw: %.2f, layer note / raw: %.2f\n",
           mk / mr, mn / mr);
    te_kv_decoder_free(dec);
    te_kv_source_free(src);
    te_mr_dereg(pe, smr);
    te_mr_dereg(de, dmr);
    te_kv_cache_free(sc);
    te_kv_cache_free(dc);
    te_engine_destroy(de);
    te_engine_destroy(pe);
    free(smem);
    free(dmem);
    free(kv_ns);
    free(raw_ns);
    free(note_ns);
    return 0;
}
