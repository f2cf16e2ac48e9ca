/* A prefiller given bad requests on the wire, by a hand-written decoder
 * (this test's own engine speaking the message format, not libte-kv's
 * decoder): a page index past the pool's pages per layer, a truncated
 * descriptor, a wrong page count, a cancel of an unknown request. Each is
 * refused with its errno, nothing lands in the decoder's memory, and the
 * prefiller then serves a good request whose every write is counted. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "te/kv.h"
#include "kv_test_util.h"

#define POOL 8 /* pages per layer in the hand-made decoder region */
#define LAYERS 2

static te_engine *engine(void) { return kv_test_engine(); }

/* Replies the prefiller sent us, parsed. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static te_kv_msg g_replies[16];
static int g_nreplies;

static void on_reply(int group, te_peer from, const void *data, size_t len,
                     void *arg)
{
    (void)group, (void)from, (void)arg;
    static te_kv_msg m;
    pthread_mutex_lock(&g_lock);
    if (te_kv_msg_parse(data, len, &m) == 0 && g_nreplies < 16)
        g_replies[g_nreplies++] = m;
    pthread_mutex_unlock(&g_lock);
}

/* The reply about request `id`, waited for (bounded). */
static te_kv_msg reply_for(uint64_t id)
{
    for (int i = 0; i < 10000; i++) {
        pthread_mutex_lock(&g_lock);
        for (int k = 0; k < g_nreplies; k++)
            if (g_replies[k].request_id == id) {
                te_kv_msg m = g_replies[k];
                pthread_mutex_unlock(&g_lock);
                return m;
            }
        pthread_mutex_unlock(&g_lock);
        usleep(1000);
    }
    ck_abort_msg("no reply about request %llu in 10 s", (unsigned long long)id);
    te_kv_msg none = {0};
    return none;
}

static te_engine *g_de;
static te_peer g_pf;

static void send_msg(const te_kv_msg *m)
{
    static uint8_t buf[TE_KV_MSG_MAX];
    int n = te_kv_msg_encode(m, buf, sizeof(buf));
    ck_assert_int_gt(n, 0);
    te_request r;
    te_request_init(&r, TE_OP_SEND);
    r.u.send.peer = g_pf;
    r.u.send.buf = buf;
    r.u.send.len = (uint32_t)n;
    ck_assert_msg(te_submit(g_de, &r) > 0, "%s", te_last_error());
}

static int all_zero(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

START_TEST(bad_requests_are_refused_and_nothing_lands)
{
    te_kv_shape s;
    ck_assert_int_eq(te_kv_shape_preset("qwen3-235b-a22b", 8192, &s), 0);
    s.layers = LAYERS;
    uint64_t page = te_kv_page_bytes(&s), hidden = (uint64_t)s.hidden * s.elem_bytes;
    uint64_t stride = POOL * page, region = LAYERS * stride + hidden;

    te_engine *pe = engine();
    te_kv_prefiller_opts po = {.shape = s, .max_pages = 16, .layer_us = 0,
                               .ref_tokens = 128};
    te_kv_prefiller *p;
    ck_assert_int_eq(te_kv_prefiller_new(pe, &po, &p), 0);

    g_de = engine();
    ck_assert_int_eq(te_set_recv_handler(g_de, 0, on_reply, NULL), 0);
    uint8_t *mem = aligned_alloc(4096, (region + 4095) & ~4095ull);
    memset(mem, 0, region);
    te_mr *mr;
    ck_assert_int_eq(te_mr_reg(g_de, 0, mem, region, TE_MR_REMOTE_WRITE,
                               TE_MEM_HOST, &mr), 0);
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    ck_assert_int_eq(te_engine_address(pe, 0, addr, &alen), 0);
    ck_assert_int_eq(te_peer_add(g_de, 0, addr, alen, &g_pf), 0);

    static te_kv_msg m;
    memset(&m, 0, sizeof(m));
    m.type = TE_KV_MSG_HELLO;
    m.sender = 0x5eed;
    alen = sizeof(m.addr);
    size_t my_len = sizeof(m.addr);
    ck_assert_int_eq(te_engine_address(g_de, 0, m.addr, &my_len), 0);
    m.addr_len = (uint32_t)my_len;
    send_msg(&m);

    te_mr_desc d;
    ck_assert_int_eq(te_mr_describe(mr, &d), 0);
    memset(&m, 0, sizeof(m));
    m.type = TE_KV_MSG_REQUEST;
    m.sender = 0x5eed;
    m.tokens = 8; /* 2 pages of 4 tokens */
    m.layers = LAYERS;
    m.page_bytes = page;
    m.layer_stride = stride;
    m.imm = 77;
    m.npages = 2;
    m.hidden_off = LAYERS * stride;
    m.hidden_bytes = (uint32_t)hidden;
    size_t dl = sizeof(m.desc);
    ck_assert_int_eq(te_desc_serialize(&d, m.desc, &dl), 0);
    m.desc_len = (uint32_t)dl;

    /* 1: page index POOL: inside the region (layer 0 + POOL pages is layer
     * 1's first page) but outside its layer. */
    m.request_id = 1;
    m.pages[0] = 0;
    m.pages[1] = POOL;
    send_msg(&m);
    te_kv_msg r = reply_for(1);
    ck_assert_int_eq(r.type, TE_KV_MSG_REJECT);
    ck_assert_int_eq(r.status, ERANGE);

    /* 2: the descriptor cut short. */
    m.request_id = 2;
    m.pages[1] = 1;
    m.desc_len = 10;
    send_msg(&m);
    r = reply_for(2);
    ck_assert_int_eq(r.type, TE_KV_MSG_REJECT);
    ck_assert_int_eq(r.status, EBADMSG);
    m.desc_len = (uint32_t)dl;

    /* 3: a page count that does not match the tokens. */
    m.request_id = 3;
    m.npages = 1;
    send_msg(&m);
    r = reply_for(3);
    ck_assert_int_eq(r.type, TE_KV_MSG_REJECT);
    ck_assert_int_eq(r.status, EINVAL);
    m.npages = 2;

    /* 4: a cancel nobody knows. */
    te_kv_msg c;
    memset(&c, 0, offsetof(te_kv_msg, desc));
    c.type = TE_KV_MSG_CANCEL;
    c.sender = 0x5eed;
    c.request_id = 4;
    send_msg(&c);
    r = reply_for(4);
    ck_assert_int_eq(r.type, TE_KV_MSG_CANCELLED);
    ck_assert_int_eq(r.status, ENOENT);

    ck_assert_msg(all_zero(mem, region), "a refused request wrote");

    /* 5: a good request is still served: ACCEPT names the count, and every
     * write it promised is counted on imm 77. */
    m.request_id = 5;
    m.pages[0] = 3;
    m.pages[1] = POOL - 1;
    send_msg(&m);
    r = reply_for(5);
    ck_assert_int_eq(r.type, TE_KV_MSG_ACCEPT);
    ck_assert_uint_gt(r.expected_imms, 0);
    ck_assert_int_eq(te_imm_wait(g_de, 77, r.expected_imms, 10000), 0);
    /* Pages 3 and POOL-1 of both layers and the hidden slot hold data;
     * every other page is untouched. */
    for (uint32_t l = 0; l < LAYERS; l++)
        for (uint32_t k = 0; k < POOL; k++) {
            int used = k == 3 || k == POOL - 1;
            ck_assert_msg(all_zero(mem + l * stride + k * page, page) != used,
                          "layer %u page %u: %s", l, k,
                          used ? "not written" : "written");
        }
    te_kv_prefiller_stats st = kv_test_stats_after(p, 1);
    ck_assert_uint_eq(st.rejected, 3);
    ck_assert_uint_eq(st.completed, 1);

    te_kv_prefiller_free(p);
    te_engine_destroy(pe);
    te_set_recv_handler(g_de, 0, NULL, NULL);
    te_mr_dereg(g_de, mr);
    te_engine_destroy(g_de);
    free(mem);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kv_badreq");
    TCase *t = tcase_create("badreq");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, bad_requests_are_refused_and_nothing_lands);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
