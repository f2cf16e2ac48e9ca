/* te-kv over the engine's own caches (te_kv_cache, te_kv_source,
 * te_kv_decoder_new_cache) on the loopback plugin, two engines in one
 * process. The two caches have different layouts on purpose: the source's
 * is vLLM-like (per layer, all K pages then all V pages), the decoder's
 * FlashInfer-like (per layer, K and V of a page side by side), so a write
 * that ignored either side's region table would land in the wrong place. */
#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "te/kv.h"
#include "kv_test_util.h"

#define LAYERS 3
#define PAGES 8
#define SENTINEL 0xEE

/* 2 KV heads of 16 bf16 elements, 4 tokens per page: a region's page is
 * 4 * 2 * 16 * 2 = 256 bytes; hidden 32 elements = 64 bytes. */
static te_kv_shape shape(uint32_t elem_bytes)
{
    te_kv_shape s;
    ck_assert_int_eq(te_kv_shape_custom(LAYERS, 2, 16, elem_bytes, 2, 32,
                                        4 * 2 * 2 * 16 * elem_bytes, &s), 0);
    ck_assert_uint_eq(s.tokens_per_page, 4);
    return s;
}

struct cache {
    uint8_t *mem;
    size_t len;
    te_kv_region reg[LAYERS * 2];
    te_kv_cache *c;
    uint64_t page;
};

/* interleaved 0: [layer][kv][page] (vLLM); 1: [layer][page][kv]. Then two
 * hidden slots. */
static struct cache cache_new(te_kv_shape s, int interleaved)
{
    struct cache x = {0};
    x.page = te_kv_region_page_bytes(&s);
    uint64_t hidden = (uint64_t)s.hidden * s.elem_bytes;
    x.len = LAYERS * 2 * PAGES * x.page + 2 * hidden;
    x.mem = aligned_alloc(4096, (x.len + 4095) & ~(size_t)4095);
    memset(x.mem, SENTINEL, x.len);
    for (uint32_t l = 0; l < LAYERS; l++)
        for (uint32_t k = 0; k < 2; k++)
            x.reg[l * 2 + k] = interleaved
                ? (te_kv_region){.offset = (l * PAGES * 2 + k) * x.page,
                                 .page_stride = 2 * x.page}
                : (te_kv_region){.offset = ((l * 2 + k) * PAGES) * x.page,
                                 .page_stride = x.page};
    te_kv_cache_desc d = {.shape = s, .base = x.mem, .len = x.len,
                          .mem = TE_MEM_HOST, .pages = PAGES,
                          .regions = x.reg,
                          .hidden_offset = LAYERS * 2 * PAGES * x.page,
                          .hidden_stride = hidden, .hidden_slots = 2};
    ck_assert_msg(te_kv_cache_new(&d, &x.c) == 0, "%s", te_kv_last_error());
    return x;
}

static uint8_t *page_at(struct cache *x, uint32_t layer, uint32_t kv,
                        uint32_t page)
{
    te_kv_region r = x->reg[layer * 2 + kv];
    return x->mem + r.offset + page * r.page_stride;
}

static uint8_t byte_of(uint32_t layer, uint32_t kv, uint32_t k, uint64_t i)
{
    return (uint8_t)(layer * 131 + kv * 71 + k * 29 + i * 7 + 1);
}

struct pair {
    te_engine *pe, *de;
    struct cache src, dst;
    te_kv_source *s;
    te_kv_decoder *d;
    uint32_t pf;
};

/* Two engines, a source on cache sc and a decoder (of shape ds) on dc
 * that knows it as prefiller *pf. */
static void link_new(te_kv_cache *sc, te_kv_cache *dc, te_kv_shape ds,
                     te_engine **pe, te_engine **de, te_kv_source **s,
                     te_kv_decoder **d, uint32_t *pf)
{
    *pe = kv_test_engine();
    *de = kv_test_engine();
    ck_assert_int_eq(te_kv_source_new(*pe, 0, sc, 5000, s), 0);
    te_kv_decoder_opts o = {.shape = ds, .max_requests = 4};
    ck_assert_msg(te_kv_decoder_new_cache(*de, &o, dc, d) == 0, "%s",
                  te_kv_last_error());
    uint8_t addr[TE_ADDR_MAX];
    size_t n = sizeof(addr);
    ck_assert_int_eq(te_engine_address(*pe, 0, addr, &n), 0);
    ck_assert_int_eq(te_kv_decoder_add_prefiller(*d, addr, n, pf), 0);
}

/* The decoder, the source, then their engines (the caches are the
 * caller's to free). */
static void link_free(te_engine *pe, te_engine *de, te_kv_source *s,
                      te_kv_decoder *d)
{
    te_kv_decoder_free(d);
    te_kv_source_free(s);
    te_engine_destroy(de);
    te_engine_destroy(pe);
}

static struct pair pair_new(uint32_t dst_elem_bytes)
{
    struct pair p = {0};
    p.src = cache_new(shape(2), 0);
    p.dst = cache_new(shape(dst_elem_bytes), 1);
    link_new(p.src.c, p.dst.c, shape(dst_elem_bytes), &p.pe, &p.de, &p.s,
             &p.d, &p.pf);
    return p;
}

static void pair_free(struct pair *p)
{
    link_free(p->pe, p->de, p->s, p->d);
    ck_assert_int_eq(te_kv_cache_free(p->src.c), 0);
    ck_assert_int_eq(te_kv_cache_free(p->dst.c), 0);
    free(p->src.mem);
    free(p->dst.mem);
}

static const uint32_t SRC_PAGES[3] = {5, 2, 7};
static const uint32_t DST_PAGES[3] = {1, 6, 3};

static void fill_source(struct pair *p)
{
    for (uint32_t l = 0; l < LAYERS; l++)
        for (uint32_t kv = 0; kv < 2; kv++)
            for (uint32_t k = 0; k < 3; k++)
                for (uint64_t i = 0; i < p->src.page; i++)
                    page_at(&p->src, l, kv, SRC_PAGES[k])[i] =
                        byte_of(l, kv, k, i);
    uint8_t *h = p->src.mem + LAYERS * 2 * PAGES * p->src.page + 64;
    for (int i = 0; i < 64; i++) /* hidden slot 1 */
        h[i] = (uint8_t)(200 + i);
}

/* Every byte of the decoder's buffer: the named pages hold the source's
 * pages, hidden slot 0 the source's slot 1, everything else the sentinel
 * (nothing landed outside the engine's named pages). */
static void check_landed(struct pair *p, int with_hidden)
{
    uint8_t *expect = malloc(p->dst.len);
    memset(expect, SENTINEL, p->dst.len);
    for (uint32_t l = 0; l < LAYERS; l++)
        for (uint32_t kv = 0; kv < 2; kv++)
            for (uint32_t k = 0; k < 3; k++) {
                te_kv_region r = p->dst.reg[l * 2 + kv];
                for (uint64_t i = 0; i < p->dst.page; i++)
                    expect[r.offset + DST_PAGES[k] * r.page_stride + i] =
                        byte_of(l, kv, k, i);
            }
    for (int i = 0; with_hidden && i < 64; i++)
        expect[LAYERS * 2 * PAGES * p->dst.page + i] = (uint8_t)(200 + i);
    for (size_t i = 0; i < p->dst.len; i++)
        ck_assert_msg(p->dst.mem[i] == expect[i], "decoder cache byte %zu: %u,"
                      " want %u", i, p->dst.mem[i], expect[i]);
    free(expect);
}

/* The decoder asks first; the engine reports layer by layer. */
START_TEST(lands_in_the_engines_pages)
{
    struct pair p = pair_new(2);
    fill_source(&p);
    struct kv_test_result r = {0};
    ck_assert_msg(te_kv_decoder_submit_pages(p.d, p.pf, 11, 10, DST_PAGES, 3,
                                             0, 10000,
                                             kv_test_on_done, &r) == 0,
                  "%s", te_kv_last_error());
    ck_assert_int_eq(te_kv_source_begin(p.s, 11, 10, SRC_PAGES, 3, 1), 0);
    for (uint32_t l = 0; l < LAYERS; l++)
        ck_assert_int_eq(te_kv_source_layer_done(p.s, 11, l), 0);
    ck_assert_int_eq(te_kv_source_hidden_done(p.s, 11), 0);
    kv_test_wait_done(&r, 10000);
    ck_assert_msg(r.status == 0, "%s", r.why);
    ck_assert_int_eq(te_kv_source_wait(p.s, 11, 10000), 0);
    check_landed(&p, 1);
    /* Misuse after the end: the id is forgotten at the source. */
    ck_assert_int_eq(te_kv_source_layer_done(p.s, 11, 0), -ENOENT);
    /* The pages stay the request's until released. */
    struct kv_test_result r2 = {0};
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, p.pf, 12, 10, DST_PAGES,
                                                3, 0, 10000,
                                                kv_test_on_done, &r2),
                     -EBUSY);
    ck_assert_msg(strstr(te_kv_last_error(), "pages[0] = 1 is in use"), "%s",
                  te_kv_last_error());
    uint32_t got[8], n = 8;
    ck_assert_int_eq(te_kv_decoder_pages(p.d, 11, got, &n), 0);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(got[1], 6);
    ck_assert_int_eq(te_kv_decoder_release(p.d, 11), 0);
    ck_assert_int_eq(te_kv_cache_free(p.dst.c), -EBUSY); /* decoder on it */
    pair_free(&p);
}
END_TEST

struct notes {
    atomic_uint mask; /* bit l: layer l's note */
};

static void on_layer(uint64_t id, uint32_t layer, void *arg)
{
    struct notes *n = arg;
    ck_assert_uint_eq(id, 71);
    atomic_fetch_or(&n->mask, 1u << layer);
}

/* Per-layer arrival: layer 0's note comes while layer 1 is not even
 * reported, and by then layer 0's bytes are in the decoder's pages. */
START_TEST(layer_notes_follow_the_bytes)
{
    struct pair p = pair_new(2);
    fill_source(&p);
    struct notes n = {0};
    ck_assert_int_eq(te_kv_decoder_on_layer(p.d, on_layer, &n), 0);
    struct kv_test_result r = {0};
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, p.pf, 71, 10, DST_PAGES,
                                                3, 0, 10000,
                                                kv_test_on_done, &r), 0);
    ck_assert_int_eq(te_kv_source_begin(p.s, 71, 10, SRC_PAGES, 3, 1), 0);
    ck_assert_int_eq(te_kv_source_layer_done(p.s, 71, 0), 0);
    for (int i = 0; i < 10000 && !atomic_load(&n.mask); i++)
        usleep(1000);
    ck_assert_uint_eq(atomic_load(&n.mask), 1u); /* layer 0 only */
    for (uint32_t kv = 0; kv < 2; kv++)
        for (uint32_t k = 0; k < 3; k++) {
            ck_assert_uint_eq(page_at(&p.dst, 0, kv, DST_PAGES[k])[9],
                              byte_of(0, kv, k, 9));
            ck_assert_uint_eq(page_at(&p.dst, 1, kv, DST_PAGES[k])[9],
                              SENTINEL);
        }
    for (uint32_t l = 1; l < LAYERS; l++)
        ck_assert_int_eq(te_kv_source_layer_done(p.s, 71, l), 0);
    ck_assert_int_eq(te_kv_source_hidden_done(p.s, 71), 0);
    kv_test_wait_done(&r, 10000);
    ck_assert_msg(r.status == 0, "%s", r.why);
    ck_assert_int_eq(te_kv_source_wait(p.s, 71, 10000), 0);
    check_landed(&p, 1);
    /* notes of layers 1 and 2 may follow the completion: wait for them */
    for (int i = 0; i < 10000 && atomic_load(&n.mask) != 7u; i++)
        usleep(1000);
    ck_assert_uint_eq(atomic_load(&n.mask), 7u);
    pair_free(&p);
}
END_TEST

/* The engine finished every layer before the decoder asked: all of it is
 * written on acceptance. No hidden state asked for: none written. */
START_TEST(layers_done_before_the_request)
{
    struct pair p = pair_new(2);
    fill_source(&p);
    ck_assert_int_eq(te_kv_source_begin(p.s, 21, 10, SRC_PAGES, 3, 1), 0);
    for (uint32_t l = 0; l < LAYERS; l++)
        ck_assert_int_eq(te_kv_source_layer_done(p.s, 21, l), 0);
    ck_assert_int_eq(te_kv_source_hidden_done(p.s, 21), 0);
    ck_assert_int_eq(te_kv_source_wait(p.s, 21, 0), -ETIMEDOUT);
    struct kv_test_result r = {0};
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, p.pf, 21, 10, DST_PAGES,
                                                3, UINT32_MAX, 10000,
                                                kv_test_on_done,
                                                &r), 0);
    kv_test_wait_done(&r, 10000);
    ck_assert_msg(r.status == 0, "%s", r.why);
    ck_assert_int_eq(te_kv_source_wait(p.s, 21, 10000), 0);
    check_landed(&p, 0);
    pair_free(&p);
}
END_TEST

/* A cancel between layers: confirmed only when nothing can land, then the
 * pages can be claimed again. */
START_TEST(cancel_between_layers)
{
    struct pair p = pair_new(2);
    fill_source(&p);
    struct kv_test_result r = {0};
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, p.pf, 31, 10, DST_PAGES,
                                                3, 0, 10000,
                                                kv_test_on_done, &r), 0);
    ck_assert_int_eq(te_kv_source_begin(p.s, 31, 10, SRC_PAGES, 3, 1), 0);
    ck_assert_int_eq(te_kv_source_layer_done(p.s, 31, 0), 0);
    /* Cancel only once the decoder is ARMED (ACCEPT handled): the cancel
     * then races nothing but layer 0's write. */
    for (int i = 0; i < 10000 && te_kv_decoder_cancel(p.d, 31) != 0; i++)
        usleep(1000);
    kv_test_wait_done(&r, 10000);
    ck_assert_int_eq(r.status, -ECANCELED);
    ck_assert_int_eq(te_kv_source_wait(p.s, 31, 10000), -ECANCELED);
    struct kv_test_result r2 = {0};
    ck_assert_msg(te_kv_decoder_submit_pages(p.d, p.pf, 32, 10, DST_PAGES, 3,
                                             0, 10000,
                                             kv_test_on_done, &r2) == 0,
                  "%s", te_kv_last_error());
    te_kv_decoder_cancel(p.d, 32);
    kv_test_wait_done(&r2, 10000);
    pair_free(&p);
}
END_TEST

/* The decoder cancels before the engine began the request: the source
 * confirms at once (nothing was written), and the engine's begin() is
 * told the request is gone. */
START_TEST(cancel_before_begin)
{
    struct pair p = pair_new(2);
    struct kv_test_result r = {0};
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, p.pf, 61, 10, DST_PAGES,
                                                3, 0, 10000,
                                                kv_test_on_done, &r), 0);
    usleep(50000); /* most often the REQUEST is at the source by now */
    ck_assert_int_eq(te_kv_decoder_cancel(p.d, 61), 0);
    kv_test_wait_done(&r, 10000);
    ck_assert_int_eq(r.status, -ECANCELED);
    /* confirmed by the source, not fenced at the cancel deadline */
    ck_assert_msg(strstr(r.why, "prefiller confirmed"), "%s", r.why);
    /* Either the REQUEST had arrived (cancelled there) or not yet (a
     * tombstone drops it): both ways begin() cannot start it. */
    int rc = te_kv_source_begin(p.s, 61, 10, SRC_PAGES, 3, 1);
    if (rc == 0) { /* the REQUEST never arrived before the CANCEL */
        ck_assert_int_eq(te_kv_source_wait(p.s, 61, 0), -ETIMEDOUT);
    } else {
        ck_assert_int_eq(rc, -ECANCELED);
        ck_assert_msg(strstr(te_kv_last_error(), "cancelled by the decoder"),
                      "%s", te_kv_last_error());
    }
    for (size_t i = 0; i < p.dst.len; i++)
        ck_assert_uint_eq(p.dst.mem[i], SENTINEL);
    pair_free(&p);
}
END_TEST

/* A decoder of another dtype: refused before anything is written, the
 * source naming the field. */
START_TEST(dtype_mismatch_is_named)
{
    struct pair p = pair_new(4);
    fill_source(&p);
    struct kv_test_result r = {0};
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, p.pf, 41, 10, DST_PAGES,
                                                3, UINT32_MAX, 10000,
                                                kv_test_on_done,
                                                &r), 0);
    ck_assert_int_eq(te_kv_source_begin(p.s, 41, 10, SRC_PAGES, 3, 1), 0);
    kv_test_wait_done(&r, 10000);
    ck_assert_int_eq(r.status, -EINVAL);
    ck_assert_int_eq(te_kv_source_wait(p.s, 41, 10000), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "elem_bytes (dtype): the "
                         "decoder's 4, ours 2"), "%s", te_kv_last_error());
    for (size_t i = 0; i < p.dst.len; i++)
        ck_assert_uint_eq(p.dst.mem[i], SENTINEL);
    pair_free(&p);
}
END_TEST

/* Bad input, each refused with the field named and nothing started. */
START_TEST(bad_input_is_named)
{
    struct pair p = pair_new(2);
    uint32_t dup[3] = {5, 2, 5}, far[3] = {5, 2, PAGES};
    ck_assert_int_eq(te_kv_source_begin(p.s, 51, 10, far, 3, 1), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "src_pages[2] = 8: out of range"),
                  "%s", te_kv_last_error());
    ck_assert_int_eq(te_kv_source_begin(p.s, 51, 10, dup, 3, 1), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "listed twice"), "%s",
                  te_kv_last_error());
    ck_assert_int_eq(te_kv_source_begin(p.s, 51, 10, SRC_PAGES, 2, 1),
                     -EINVAL);
    ck_assert_int_eq(te_kv_source_begin(p.s, 51, 10, SRC_PAGES, 3, 2),
                     -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "hidden_slot 2"), "%s",
                  te_kv_last_error());
    ck_assert_int_eq(te_kv_source_layer_done(p.s, 51, 0), -ENOENT);
    ck_assert_int_eq(te_kv_source_begin(p.s, 51, 10, SRC_PAGES, 3, 1), 0);
    ck_assert_int_eq(te_kv_source_begin(p.s, 51, 10, SRC_PAGES, 3, 1),
                     -EEXIST);
    ck_assert_int_eq(te_kv_source_layer_done(p.s, 51, LAYERS), -ERANGE);
    ck_assert_int_eq(te_kv_source_layer_done(p.s, 51, 1), 0);
    ck_assert_int_eq(te_kv_source_layer_done(p.s, 51, 1), -EALREADY);
    ck_assert_msg(strstr(te_kv_last_error(), "layer 1 reported twice"), "%s",
                  te_kv_last_error());
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, p.pf, 52, 10, far, 3, 0,
                                                1000, NULL, NULL), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "pages[2] = 8: out of range"),
                  "%s", te_kv_last_error());
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, p.pf, 52, 10, dup, 3, 0,
                                                1000, NULL, NULL), -EBUSY);
    ck_assert_msg(strstr(te_kv_last_error(), "pages[2] = 5 is in use"), "%s",
                  te_kv_last_error());
    ck_assert_int_eq(te_kv_decoder_submit(p.d, p.pf, 53, 10, 1000, NULL,
                                          NULL), -EINVAL);
    te_kv_decoder_opts o = {.shape = shape(2), .max_requests = 4};
    o.shape.head_dim = 8;
    te_kv_decoder *d2;
    ck_assert_int_eq(te_kv_decoder_new_cache(p.de, &o, p.dst.c, &d2), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "opts.shape.head_dim differs"),
                  "%s", te_kv_last_error());
    /* Nothing claimed by the refusals: all pages can be taken at once. */
    uint32_t all[3] = {5, 2, 0};
    struct kv_test_result r = {0};
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, p.pf, 54, 10, all, 3,
                                                UINT32_MAX, 1000,
                                                kv_test_on_done, &r),
                     0);
    te_kv_decoder_cancel(p.d, 54);
    kv_test_wait_done(&r, 10000);
    pair_free(&p);
}
END_TEST

/* The GPU-driven layer_done needs a CUDA device: without one (this
 * machine) it is refused, naming the device, with nothing left behind.
 * On a GPU machine it is created and freed (the steps are unrun here). */
START_TEST(gpu_layers_without_a_device)
{
    struct pair p = pair_new(2);
    te_kv_gpu_layers *g = NULL;
    int rc = te_kv_gpu_layers_new(p.s, 81, LAYERS, 0, &g);
    if (rc == 0) {
        ck_assert_ptr_nonnull(te_kv_gpu_layers_word(g));
        ck_assert_int_eq(te_kv_gpu_layers_free(g), 0);
    } else {
        ck_assert_int_lt(rc, 0);
        ck_assert_msg(strstr(te_kv_last_error(), "watcher on device 0"), "%s",
                      te_kv_last_error());
    }
    ck_assert_int_eq(te_kv_gpu_layers_new(p.s, 81, 0, 0, &g), -EINVAL);
    pair_free(&p);
}
END_TEST

/* An engine that allocates per layer and per K/V (vLLM, SGLang): each
 * region and the hidden slots in their own malloc'd buffer, pages a
 * little apart (stride a page + 64) so that a write using another stride
 * or another buffer's base would show. */
#define SEP_STRIDE(page) ((page) + 64)

struct sep {
    uint8_t *buf[LAYERS * 2 + 1]; /* [layer][kv], then hidden */
    size_t len[LAYERS * 2 + 1];
    te_kv_alloc allocs[LAYERS * 2 + 1];
    te_kv_region reg[LAYERS * 2];
    te_kv_cache *c;
    uint64_t page;
};

static struct sep sep_new(te_kv_shape s)
{
    struct sep x = {0};
    x.page = te_kv_region_page_bytes(&s);
    for (uint32_t a = 0; a <= LAYERS * 2; a++) {
        x.len[a] = a < LAYERS * 2 ? PAGES * SEP_STRIDE(x.page) : 2 * 64;
        x.buf[a] = malloc(x.len[a]);
        memset(x.buf[a], SENTINEL, x.len[a]);
        x.allocs[a] = (te_kv_alloc){x.buf[a], x.len[a]};
        if (a < LAYERS * 2)
            x.reg[a] = (te_kv_region){.offset = 0,
                                      .page_stride = SEP_STRIDE(x.page),
                                      .alloc = a};
    }
    te_kv_cache_desc d = {.shape = s, .mem = TE_MEM_HOST, .pages = PAGES,
                          .regions = x.reg, .hidden_stride = 64,
                          .hidden_slots = 2, .nallocs = LAYERS * 2 + 1,
                          .allocs = x.allocs, .hidden_alloc = LAYERS * 2};
    ck_assert_msg(te_kv_cache_new(&d, &x.c) == 0, "%s", te_kv_last_error());
    return x;
}

static void sep_free(struct sep *x)
{
    ck_assert_int_eq(te_kv_cache_free(x->c), 0);
    for (uint32_t a = 0; a <= LAYERS * 2; a++)
        free(x->buf[a]);
}

/* Every byte of every buffer of x (the engine's own memory, addressed
 * through the engine's pointers only): the named pages of the layers in
 * [0, layers) hold the source's pages, hidden slot 0 the source's slot 1
 * if with_hidden, all else the sentinel. */
static void sep_check(const struct sep *x, uint32_t layers, int with_hidden)
{
    for (uint32_t a = 0; a <= LAYERS * 2; a++)
        for (size_t i = 0; i < x->len[a]; i++) {
            uint8_t want = SENTINEL;
            size_t pg = i / SEP_STRIDE(x->page), in = i % SEP_STRIDE(x->page);
            for (uint32_t k = 0; a < LAYERS * 2 && a / 2 < layers && k < 3;
                 k++)
                if (pg == DST_PAGES[k] && in < x->page)
                    want = byte_of(a / 2, a % 2, k, in);
            if (a == LAYERS * 2 && with_hidden && i < 64)
                want = (uint8_t)(200 + i);
            ck_assert_msg(x->buf[a][i] == want, "allocation %u byte %zu: %u, "
                          "want %u", a, i, x->buf[a][i], want);
        }
}

/* A source over one allocation, a decoder whose K, V (per layer) and
 * hidden slots are 7 separate allocations. */
struct sep_pair {
    te_engine *pe, *de;
    struct cache src;
    struct sep dst;
    te_kv_source *s;
    te_kv_decoder *d;
    uint32_t pf;
};

static struct sep_pair sep_pair_new(void)
{
    struct sep_pair p = {0};
    p.src = cache_new(shape(2), 0);
    p.dst = sep_new(shape(2));
    link_new(p.src.c, p.dst.c, shape(2), &p.pe, &p.de, &p.s, &p.d, &p.pf);
    return p;
}

static void sep_pair_free(struct sep_pair *p)
{
    link_free(p->pe, p->de, p->s, p->d);
    ck_assert_int_eq(te_kv_cache_free(p->src.c), 0);
    sep_free(&p->dst);
    free(p->src.mem);
}

static void sep_fill_source(struct sep_pair *p)
{
    struct pair q = {.src = p->src};
    fill_source(&q);
}

/* The bytes land in the engine's own separate buffers, at the pages named,
 * and nowhere else in any of them: zero copy into 7 allocations. */
START_TEST(separate_allocations_land_in_place)
{
    struct sep_pair p = sep_pair_new();
    sep_fill_source(&p);
    struct kv_test_result r = {0};
    ck_assert_msg(te_kv_decoder_submit_pages(p.d, p.pf, 91, 10, DST_PAGES, 3,
                                             0, 10000,
                                             kv_test_on_done, &r) == 0,
                  "%s", te_kv_last_error());
    ck_assert_int_eq(te_kv_source_begin(p.s, 91, 10, SRC_PAGES, 3, 1), 0);
    for (uint32_t l = 0; l < LAYERS; l++)
        ck_assert_int_eq(te_kv_source_layer_done(p.s, 91, l), 0);
    ck_assert_int_eq(te_kv_source_hidden_done(p.s, 91), 0);
    kv_test_wait_done(&r, 10000);
    ck_assert_msg(r.status == 0, "%s", r.why);
    ck_assert_int_eq(te_kv_source_wait(p.s, 91, 10000), 0);
    sep_check(&p.dst, LAYERS, 1);
    ck_assert_int_eq(te_kv_decoder_release(p.d, 91), 0);
    sep_pair_free(&p);
}
END_TEST

/* The other way round: the source's cache is separate allocations (its
 * own registrations, one per buffer), the decoder's one allocation. */
START_TEST(separate_source_allocations)
{
    struct pair p = {0};
    struct sep src = sep_new(shape(2));
    p.dst = cache_new(shape(2), 1);
    link_new(src.c, p.dst.c, shape(2), &p.pe, &p.de, &p.s, &p.d, &p.pf);
    for (uint32_t a = 0; a < LAYERS * 2; a++)
        for (uint32_t k = 0; k < 3; k++)
            for (uint64_t i = 0; i < src.page; i++)
                src.buf[a][SRC_PAGES[k] * SEP_STRIDE(src.page) + i] =
                    byte_of(a / 2, a % 2, k, i);
    for (int i = 0; i < 64; i++)
        src.buf[LAYERS * 2][64 + i] = (uint8_t)(200 + i);
    struct kv_test_result r = {0};
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, p.pf, 92, 10, DST_PAGES,
                                                3, 0, 10000,
                                                kv_test_on_done, &r), 0);
    ck_assert_int_eq(te_kv_source_begin(p.s, 92, 10, SRC_PAGES, 3, 1), 0);
    for (uint32_t l = 0; l < LAYERS; l++)
        ck_assert_int_eq(te_kv_source_layer_done(p.s, 92, l), 0);
    ck_assert_int_eq(te_kv_source_hidden_done(p.s, 92), 0);
    kv_test_wait_done(&r, 10000);
    ck_assert_msg(r.status == 0, "%s", r.why);
    ck_assert_int_eq(te_kv_source_wait(p.s, 92, 10000), 0);
    check_landed(&p, 1);
    link_free(p.pe, p.de, p.s, p.d);
    sep_free(&src);
    ck_assert_int_eq(te_kv_cache_free(p.dst.c), 0);
    free(p.dst.mem);
}
END_TEST

/* Fencing covers every allocation: the decoder's deadline passes after
 * layer 0 landed; its fence revokes all 7 registrations, so layer 1 and
 * the hidden state, reported later, fail at the source (old keys) and
 * land in none of the buffers. */
START_TEST(fence_revokes_every_allocation)
{
    struct sep_pair p = sep_pair_new();
    sep_fill_source(&p);
    struct kv_test_result r = {0};
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, p.pf, 93, 10, DST_PAGES,
                                                3, 0, 1500,
                                                kv_test_on_done, &r), 0);
    ck_assert_int_eq(te_kv_source_begin(p.s, 93, 10, SRC_PAGES, 3, 1), 0);
    ck_assert_int_eq(te_kv_source_layer_done(p.s, 93, 0), 0);
    kv_test_wait_done(&r, 10000); /* the request's 1.5 s deadline: fenced */
    ck_assert_int_eq(r.status, -ETIMEDOUT);
    ck_assert_msg(strstr(r.why, "keys revoked"), "%s", r.why);
    for (uint32_t l = 1; l < LAYERS; l++)
        ck_assert_int_eq(te_kv_source_layer_done(p.s, 93, l), 0);
    ck_assert_int_eq(te_kv_source_hidden_done(p.s, 93), 0);
    int rc = te_kv_source_wait(p.s, 93, 10000);
    ck_assert_msg(rc < 0 && rc != -ETIMEDOUT, "source wait: %d %s", rc,
                  te_kv_last_error());
    sep_check(&p.dst, 1, 0); /* layer 0 only: nothing after the fence */
    sep_pair_free(&p);
}
END_TEST

/* A decoder that registers with the same source again (its prefiller
 * index 1): the source keeps the newer descriptor set, so a request on
 * the older registration (index 0) is refused, ESTALE, nothing written,
 * while the newer one serves. */
START_TEST(older_registration_is_refused)
{
    struct sep_pair p = sep_pair_new();
    sep_fill_source(&p);
    uint8_t addr[TE_ADDR_MAX];
    size_t n = sizeof(addr);
    uint32_t pf1;
    ck_assert_int_eq(te_engine_address(p.pe, 0, addr, &n), 0);
    ck_assert_int_eq(te_kv_decoder_add_prefiller(p.d, addr, n, &pf1), 0);
    ck_assert_uint_eq(pf1, p.pf + 1);
    /* Served on the newer: the source has its whole set from now on. */
    struct kv_test_result r = {0};
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, pf1, 94, 10, DST_PAGES,
                                                3, 0, 10000,
                                                kv_test_on_done, &r), 0);
    ck_assert_int_eq(te_kv_source_begin(p.s, 94, 10, SRC_PAGES, 3, 1), 0);
    for (uint32_t l = 0; l < LAYERS; l++)
        ck_assert_int_eq(te_kv_source_layer_done(p.s, 94, l), 0);
    ck_assert_int_eq(te_kv_source_hidden_done(p.s, 94), 0);
    kv_test_wait_done(&r, 10000);
    ck_assert_msg(r.status == 0, "%s", r.why);
    ck_assert_int_eq(te_kv_source_wait(p.s, 94, 10000), 0);
    sep_check(&p.dst, LAYERS, 1);
    ck_assert_int_eq(te_kv_decoder_release(p.d, 94), 0);
    for (uint32_t a = 0; a <= LAYERS * 2; a++) /* back to the sentinel */
        memset(p.dst.buf[a], SENTINEL, p.dst.len[a]);
    struct kv_test_result r2 = {0};
    ck_assert_int_eq(te_kv_decoder_submit_pages(p.d, p.pf, 95, 10, DST_PAGES,
                                                3, 0, 10000,
                                                kv_test_on_done, &r2), 0);
    ck_assert_int_eq(te_kv_source_begin(p.s, 95, 10, SRC_PAGES, 3, 1), 0);
    kv_test_wait_done(&r2, 10000);
    ck_assert_int_eq(r2.status, -ESTALE);
    ck_assert_int_eq(te_kv_source_wait(p.s, 95, 10000), -ESTALE);
    ck_assert_msg(strstr(te_kv_last_error(), "layout 0: the decoder "
                         "registered anew since (layout 1)"), "%s",
                  te_kv_last_error());
    sep_check(&p.dst, 0, 0);
    sep_pair_free(&p);
}
END_TEST

/* The allocations form: each field named. */
START_TEST(separate_allocations_desc_is_checked)
{
    te_kv_shape s = shape(2);
    struct sep x = sep_new(s);
    te_kv_cache_desc d = {.shape = s, .mem = TE_MEM_HOST, .pages = PAGES,
                          .regions = x.reg, .hidden_stride = 64,
                          .hidden_slots = 2, .nallocs = LAYERS * 2 + 1,
                          .allocs = x.allocs, .hidden_alloc = LAYERS * 2};
    te_kv_cache *c;
    d.base = x.buf[0]; /* both forms */
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "base/len and allocs both set"),
                  "%s", te_kv_last_error());
    d.base = NULL;
    x.reg[3].alloc = LAYERS * 2 + 1;
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "regions[3].alloc 7: 7 "
                         "allocation(s)"), "%s", te_kv_last_error());
    x.reg[3].alloc = 2; /* layer 1 V moved into K's buffer: its own idle */
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "allocs[3]: no region"), "%s",
                  te_kv_last_error());
    x.reg[3].alloc = 3;
    x.allocs[5].len -= 65; /* layer 2 V's last page ends past its buffer */
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "regions[5]: 8 pages") &&
                  strstr(te_kv_last_error(), "of allocation 5"), "%s",
                  te_kv_last_error());
    x.allocs[5].len += 65;
    x.allocs[4].base = x.buf[3] + 64; /* inside layer 1 V's buffer */
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "allocs[4] overlaps allocs[3]"),
                  "%s", te_kv_last_error());
    x.allocs[4].base = x.buf[4];
    d.hidden_alloc = LAYERS * 2 + 1;
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "hidden_alloc 7"), "%s",
                  te_kv_last_error());
    d.hidden_alloc = 0; /* the hidden slots' own buffer left idle */
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "allocs[6]: no region"), "%s",
                  te_kv_last_error());
    d.hidden_alloc = LAYERS * 2;
    d.nallocs = TE_KV_MAX_ALLOCS + 1;
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "nallocs 258"), "%s",
                  te_kv_last_error());
    d.nallocs = LAYERS * 2 + 1;
    x.allocs[2].base = NULL;
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "allocs[2]: no memory"), "%s",
                  te_kv_last_error());
    x.allocs[2].base = x.buf[2];
    ck_assert_int_eq(te_kv_cache_new(&d, &c), 0); /* all repaired */
    ck_assert_int_eq(te_kv_cache_free(c), 0);
    sep_free(&x);
}
END_TEST

/* The cache description: overlaps, strides and bounds named. */
START_TEST(cache_desc_is_checked)
{
    te_kv_shape s = shape(2);
    static uint8_t mem[LAYERS * 2 * PAGES * 256 + 128];
    te_kv_region reg[LAYERS * 2];
    for (uint32_t r = 0; r < LAYERS * 2; r++)
        reg[r] = (te_kv_region){.offset = r * PAGES * 256, .page_stride = 256};
    te_kv_cache_desc d = {.shape = s, .base = mem, .len = sizeof(mem),
                          .mem = TE_MEM_HOST, .pages = PAGES, .regions = reg,
                          .hidden_offset = LAYERS * 2 * PAGES * 256,
                          .hidden_stride = 64, .hidden_slots = 2};
    te_kv_cache *c;
    ck_assert_int_eq(te_kv_cache_new(&d, &c), 0);
    ck_assert_int_eq(te_kv_cache_free(c), 0);
    reg[3].offset = reg[2].offset + 256; /* layer 1 V starts in layer 1 K */
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "regions[2] (layer 1 K) page 1 "
                         "overlaps regions[3] (layer 1 V) page 0"), "%s",
                  te_kv_last_error());
    reg[3].offset = 3 * PAGES * 256;
    reg[4].page_stride = 128;
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "regions[4].page_stride 128"),
                  "%s", te_kv_last_error());
    reg[4].page_stride = 256;
    d.hidden_slots = 3;
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "hidden:"), "%s",
                  te_kv_last_error());
    d.hidden_slots = 2;
    d.len = sizeof(mem) - 200;
    ck_assert_int_eq(te_kv_cache_new(&d, &c), -EINVAL);
    ck_assert_msg(strstr(te_kv_last_error(), "end past len"), "%s",
                  te_kv_last_error());
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kvcache_cache");
    TCase *t = tcase_create("cache");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, lands_in_the_engines_pages);
    tcase_add_test(t, layers_done_before_the_request);
    tcase_add_test(t, cancel_between_layers);
    tcase_add_test(t, cancel_before_begin);
    tcase_add_test(t, layer_notes_follow_the_bytes);
    tcase_add_test(t, dtype_mismatch_is_named);
    tcase_add_test(t, bad_input_is_named);
    tcase_add_test(t, cache_desc_is_checked);
    tcase_add_test(t, gpu_layers_without_a_device);
    tcase_add_test(t, separate_allocations_land_in_place);
    tcase_add_test(t, separate_source_allocations);
    tcase_add_test(t, fence_revokes_every_allocation);
    tcase_add_test(t, older_registration_is_refused);
    tcase_add_test(t, separate_allocations_desc_is_checked);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
