/* libte-kv pieces without traffic: model shapes, the page pool's states,
 * the message format (round trips; every truncation and corruption refused
 * with a message naming the field), the embedded membership store. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv_internal.h"
#include "te/kv.h"
#include "kv_test_util.h"

START_TEST(presets_have_the_real_shapes)
{
    te_kv_shape s;
    ck_assert_int_eq(te_kv_shape_preset("qwen3-235b-a22b", 0, &s), 0);
    ck_assert_uint_eq(s.layers, 94);
    ck_assert_uint_eq(te_kv_token_bytes(&s), 2 * 4 * 128 * 2); /* 2 KiB */
    ck_assert_uint_eq(s.tokens_per_page, 16);
    ck_assert_uint_eq(te_kv_page_bytes(&s), 32768);
    ck_assert_int_eq(te_kv_shape_preset("llama-3.1-70b", 0, &s), 0);
    ck_assert_uint_eq(s.layers, 80);
    ck_assert_uint_eq(s.tokens_per_page, 8);
    ck_assert_int_eq(te_kv_shape_preset("deepseek-v3", 0, &s), 0);
    ck_assert_uint_eq(s.layers, 61);
    ck_assert_uint_eq(te_kv_token_bytes(&s), 1152);
    ck_assert_uint_eq(s.tokens_per_page, 28);
    ck_assert_uint_eq(te_kv_pages_for(&s, 29), 2);
    ck_assert_int_eq(te_kv_shape_preset("gpt-5", 0, &s), -ENOENT);
    ck_assert_ptr_nonnull(strstr(te_kv_last_error(), "qwen3-235b-a22b"));
    ck_assert_int_eq(te_kv_shape_custom(0, 1, 1, 2, 2, 1, 0, &s), -EINVAL);
    ck_assert_int_eq(te_kv_shape_custom(2, 1, 64, 2, 2, 8, 100, &s), 0);
    ck_assert_uint_eq(s.tokens_per_page, 1); /* a token larger than a page */
}
END_TEST

START_TEST(pool_never_reuses_a_page_before_release)
{
    te_kv_pool *p;
    ck_assert_int_eq(te_kv_pool_new(8, &p), 0);
    uint32_t a[5], b[3], f, u, fe;
    ck_assert_int_eq(te_kv_pool_alloc(p, 5, a), 0);
    ck_assert_int_eq(te_kv_pool_alloc(p, 4, b), -ENOSPC);
    ck_assert_ptr_nonnull(strstr(te_kv_last_error(), "3 free"));
    ck_assert_int_eq(te_kv_pool_fence(p, 2, a), 0);
    te_kv_pool_counts(p, &f, &u, &fe);
    ck_assert_uint_eq(f, 3);
    ck_assert_uint_eq(u, 3);
    ck_assert_uint_eq(fe, 2);
    ck_assert_int_eq(te_kv_pool_alloc(p, 3, b), 0);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++)
            ck_assert_uint_ne(b[i], a[j]); /* fencing pages are not handed out */
    ck_assert_int_eq(te_kv_pool_fence(p, 2, a), -EINVAL); /* already fencing */
    ck_assert_int_eq(te_kv_pool_release(p, 5, a), 0);
    ck_assert_int_eq(te_kv_pool_release(p, 1, a), -EINVAL); /* double free */
    ck_assert_ptr_nonnull(strstr(te_kv_last_error(), "free"));
    uint32_t bad = 99;
    ck_assert_int_eq(te_kv_pool_release(p, 1, &bad), -ERANGE);
    te_kv_pool_counts(p, &f, &u, &fe);
    ck_assert_uint_eq(f, 5);
    te_kv_pool_free(p);
}
END_TEST

static int encode(const te_kv_msg *m, uint8_t *buf, size_t cap)
{
    int n = te_kv_msg_encode(m, buf, cap);
    ck_assert_msg(n > 0, "%s", te_kv_last_error());
    return n;
}

static te_kv_msg *request(uint32_t npages)
{
    te_kv_msg *m = calloc(1, sizeof(*m));
    m->type = TE_KV_MSG_REQUEST;
    m->request_id = 0x1122334455667788ull;
    m->tokens = npages * 16;
    m->layers = 94;
    m->page_bytes = 32768;
    m->layer_stride = 1 << 20;
    m->imm = 0x80000005u;
    m->npages = npages;
    m->hidden_off = 123456;
    m->hidden_bytes = 8192;
    m->desc_len = 48;
    for (uint32_t i = 0; i < m->desc_len; i++)
        m->desc[i] = (uint8_t)i;
    for (uint32_t i = 0; i < npages; i++)
        m->pages[i] = i * 7;
    return m;
}

START_TEST(messages_round_trip)
{
    static uint8_t buf[TE_KV_MSG_MAX];
    te_kv_msg *m = request(300), *out = calloc(1, sizeof(*out));
    int n = encode(m, buf, sizeof(buf));
    ck_assert_int_eq(te_kv_msg_parse(buf, (size_t)n, out), 0);
    ck_assert_uint_eq(out->request_id, m->request_id);
    ck_assert_uint_eq(out->npages, 300);
    ck_assert_uint_eq(out->pages[299], 299 * 7);
    ck_assert_int_eq(memcmp(out->desc, m->desc, 48), 0);
    ck_assert_uint_eq(out->hidden_off, 123456);
    te_kv_msg a = {.type = TE_KV_MSG_ACCEPT, .request_id = 9,
                   .expected_imms = 1234};
    n = encode(&a, buf, sizeof(buf));
    ck_assert_int_eq(te_kv_msg_parse(buf, (size_t)n, out), 0);
    ck_assert_uint_eq(out->expected_imms, 1234);
    te_kv_msg h = {.type = TE_KV_MSG_HELLO, .addr_len = 5};
    memcpy(h.addr, "abcde", 5);
    n = encode(&h, buf, sizeof(buf));
    ck_assert_int_eq(te_kv_msg_parse(buf, (size_t)n, out), 0);
    ck_assert_int_eq(memcmp(out->addr, "abcde", 5), 0);
    ck_assert_int_eq(te_kv_msg_encode(m, buf, 100), -ENOSPC);
    free(m);
    free(out);
}
END_TEST

START_TEST(every_truncation_and_corruption_is_refused)
{
    static uint8_t buf[TE_KV_MSG_MAX];
    te_kv_msg *m = request(17), *out = calloc(1, sizeof(*out));
    int n = encode(m, buf, sizeof(buf));
    for (int len = 0; len < n; len++)
        ck_assert_msg(te_kv_msg_parse(buf, (size_t)len, out) < 0,
                      "truncated to %d bytes accepted", len);
    ck_assert_int_eq(te_kv_msg_parse(buf, 10, out), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(te_kv_last_error(), "length"));
    /* A header that lies about the length. */
    uint32_t lie = (uint32_t)n + 4;
    memcpy(buf + 8, &lie, 4);
    ck_assert_int_eq(te_kv_msg_parse(buf, (size_t)n, out), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(te_kv_last_error(), "header says"));
    n = encode(m, buf, sizeof(buf));
    buf[0] ^= 1;
    ck_assert_int_eq(te_kv_msg_parse(buf, (size_t)n, out), -EPROTO);
    buf[0] ^= 1;
    buf[4] = 9; /* version */
    ck_assert_int_eq(te_kv_msg_parse(buf, (size_t)n, out), -EPROTO);
    ck_assert_ptr_nonnull(strstr(te_kv_last_error(), "version 9"));
    buf[4] = 1;
    buf[5] = 77; /* type */
    ck_assert_int_eq(te_kv_msg_parse(buf, (size_t)n, out), -EPROTO);
    buf[5] = TE_KV_MSG_REQUEST;
    /* npages beyond the maximum, with a matching length */
    uint32_t big = TE_KV_MAX_PAGES + 1;
    memcpy(buf + 28 + 28, &big, 4);
    ck_assert_int_eq(te_kv_msg_parse(buf, (size_t)n, out), -EBADMSG);
    ck_assert_ptr_nonnull(strstr(te_kv_last_error(), "pages"));
    /* Random bytes never crash and never parse as a request by chance. */
    srand(7);
    for (int i = 0; i < 20000; i++) {
        size_t len = (size_t)(rand() % 200);
        for (size_t k = 0; k < len; k++)
            buf[k] = (uint8_t)rand();
        if (len >= 4 && (i & 1))
            memcpy(buf, "TEKV", 4);
        te_kv_msg_parse(buf, len, out);
    }
    free(m);
    free(out);
}
END_TEST

/* A version-2 CACHE_REQUEST: 5 regions over 3 allocations, hidden in
 * the third. */
static te_kv_msg *cache_request(void)
{
    te_kv_msg *m = request(9);
    m->type = TE_KV_MSG_CACHE_REQUEST;
    m->desc_len = 0;
    m->kv_factor = 1;
    m->elem_bytes = 2;
    m->tokens_per_page = 16;
    m->nregions = 5;
    for (uint32_t r = 0; r < 5; r++)
        m->regions[r] = (te_kv_region){.offset = r * 4096,
                                       .page_stride = 8192, .alloc = r % 3};
    m->layout = 4;
    m->nallocs = 3;
    m->hidden_alloc = 2;
    return m;
}

static te_kv_msg *descs(uint32_t first, uint32_t n, uint32_t nallocs)
{
    te_kv_msg *m = calloc(1, sizeof(*m));
    m->type = TE_KV_MSG_CACHE_DESCS;
    m->sender = 77;
    m->layout = 4;
    m->nallocs = nallocs;
    m->first = first;
    m->ndescs = n;
    for (uint32_t i = 0; i < n; i++) {
        m->desc_lens[i] = 40 + i;
        memset(m->descs[i], (int)(first + i), m->desc_lens[i]);
    }
    return m;
}

/* Version 2: the allocation table round-trips, the version byte says 2
 * only for the new forms, and a version-1 CACHE_REQUEST still parses (its
 * regions in allocation 0, its descriptor inline). */
START_TEST(version2_messages_round_trip)
{
    static uint8_t buf[TE_KV_MSG_MAX];
    te_kv_msg *m = cache_request(), *out = calloc(1, sizeof(*out));
    int n = encode(m, buf, sizeof(buf));
    ck_assert_uint_eq(buf[4], 2);
    ck_assert_int_eq(te_kv_msg_parse(buf, (size_t)n, out), 0);
    ck_assert_uint_eq(out->nallocs, 3);
    ck_assert_uint_eq(out->layout, 4);
    ck_assert_uint_eq(out->hidden_alloc, 2);
    ck_assert_uint_eq(out->desc_len, 0);
    for (uint32_t r = 0; r < 5; r++) {
        ck_assert_uint_eq(out->regions[r].alloc, r % 3);
        ck_assert_uint_eq(out->regions[r].offset, r * 4096);
    }
    m->nallocs = 0; /* version 1: one allocation, descriptor inline */
    m->desc_len = 48;
    n = encode(m, buf, sizeof(buf));
    ck_assert_uint_eq(buf[4], 1);
    ck_assert_int_eq(te_kv_msg_parse(buf, (size_t)n, out), 0);
    ck_assert_uint_eq(out->nallocs, 0);
    ck_assert_uint_eq(out->regions[4].alloc, 0);
    ck_assert_int_eq(memcmp(out->desc, m->desc, 48), 0);
    te_kv_msg *d = descs(TE_KV_MAX_ALLOCS - TE_KV_DESCS_PER_MSG,
                         TE_KV_DESCS_PER_MSG, TE_KV_MAX_ALLOCS);
    n = encode(d, buf, sizeof(buf));
    ck_assert_uint_eq(buf[4], 2);
    ck_assert_int_eq(te_kv_msg_parse(buf, (size_t)n, out), 0);
    ck_assert_uint_eq(out->ndescs, TE_KV_DESCS_PER_MSG);
    ck_assert_uint_eq(out->first, TE_KV_MAX_ALLOCS - TE_KV_DESCS_PER_MSG);
    ck_assert_uint_eq(out->desc_lens[31], 40 + 31);
    ck_assert_uint_eq(out->descs[31][70], (uint8_t)(d->first + 31));
    free(d);
    free(m);
    free(out);
}
END_TEST

/* Parse m's encoding (patched at byte `at` with the u32 v unless at is
 * 0): the error, whose message must contain `want`. */
static int refused(const te_kv_msg *m, size_t at, uint32_t v, int err,
                   const char *want)
{
    static uint8_t buf[TE_KV_MSG_MAX];
    te_kv_msg *out = malloc(sizeof(*out));
    int n = encode(m, buf, sizeof(buf));
    if (at)
        memcpy(buf + at, &v, 4);
    int rc = te_kv_msg_parse(buf, (size_t)n, out);
    ck_assert_msg(rc == err && strstr(te_kv_last_error(), want),
                  "got %d '%s', want %d '%s'", rc, te_kv_last_error(), err,
                  want);
    free(out);
    return rc;
}

/* Hostile version-2 input: each bound named, every truncation refused, and
 * random corruption of valid messages never crashes nor yields a message
 * whose allocation indices are out of range. */
START_TEST(version2_hostile_input_is_refused)
{
    static uint8_t buf[TE_KV_MSG_MAX];
    te_kv_msg *m = cache_request(), *out = calloc(1, sizeof(*out));
    te_kv_msg *d = descs(0, 3, 3);
    int n = encode(m, buf, sizeof(buf)), nd;
    for (int len = 0; len < n; len++)
        ck_assert_int_lt(te_kv_msg_parse(buf, (size_t)len, out), 0);
    m->regions[2].alloc = 3;
    refused(m, 0, 0, -EBADMSG, "regions[2].alloc 3 (nallocs 3)");
    m->regions[2].alloc = 2;
    m->hidden_alloc = 3;
    refused(m, 0, 0, -EBADMSG, "hidden_alloc 3 (nallocs 3)");
    m->hidden_alloc = 0;
    m->nallocs = TE_KV_MAX_ALLOCS + 1;
    refused(m, 0, 0, -EBADMSG, "nallocs 258");
    m->nallocs = 0; /* v1 encoding, its version byte set to 2 */
    m->desc_len = 48;
    refused(m, 4, 2 | TE_KV_MSG_CACHE_REQUEST << 8, -EBADMSG,
            "descriptor of 48 bytes (max 0)");
    te_kv_msg h = {.type = TE_KV_MSG_HELLO, .addr_len = 5};
    refused(&h, 4, 2 | TE_KV_MSG_HELLO << 8, -EPROTO,
            "type 6 is not sent in version 2");
    refused(d, 4, 1 | TE_KV_MSG_CACHE_DESCS << 8, -EPROTO,
            "type 9 is not sent in version 1");
    /* CACHE_DESCS: header 28, layout, nallocs, first, ndescs at 40, then
     * the first descriptor's length at 44. */
    refused(d, 36, UINT32_MAX, -EBADMSG, "from 4294967295 of nallocs 3");
    refused(d, 40, 0, -EBADMSG, "0 from 0");
    refused(d, 40, TE_KV_DESCS_PER_MSG + 1, -EBADMSG, "33 from 0");
    refused(d, 32, 2, -EBADMSG, "3 from 0 of nallocs 2");
    refused(d, 44, 0, -EBADMSG, "descriptor 0 of 0 bytes");
    refused(d, 44, TE_DESC_MAX + 1, -EBADMSG, "descriptor 0 of 289 bytes");
    refused(d, 44, 1000, -EBADMSG, "descriptor 0 of 1000 bytes");
    nd = encode(d, buf, sizeof(buf));
    for (int len = 0; len < nd; len++)
        ck_assert_int_lt(te_kv_msg_parse(buf, (size_t)len, out), 0);
    /* Corruption: up to 4 random bytes of a valid message changed, 20000
     * times per form (bounded). Whatever parses is within its bounds. */
    m->nallocs = 3;
    m->desc_len = 0;
    srand(23);
    for (int i = 0; i < 40000; i++) {
        const te_kv_msg *src = i & 1 ? d : m;
        int len = encode(src, buf, sizeof(buf));
        for (int k = rand() % 4 + 1; k > 0; k--)
            buf[rand() % len] = (uint8_t)rand();
        if (te_kv_msg_parse(buf, (size_t)len, out))
            continue;
        if (out->type == TE_KV_MSG_CACHE_REQUEST && out->nallocs) {
            ck_assert_uint_le(out->nallocs, TE_KV_MAX_ALLOCS);
            ck_assert_uint_lt(out->hidden_alloc, out->nallocs);
            for (uint32_t r = 0; r < out->nregions; r++)
                ck_assert_uint_lt(out->regions[r].alloc, out->nallocs);
        } else if (out->type == TE_KV_MSG_CACHE_DESCS) {
            ck_assert_uint_le((uint64_t)out->first + out->ndescs,
                              out->nallocs);
            for (uint32_t k = 0; k < out->ndescs; k++)
                ck_assert_uint_le(out->desc_lens[k], TE_DESC_MAX);
        }
    }
    free(d);
    free(m);
    free(out);
}
END_TEST

/* A log sink keeping the last message (te.h "logging"). */
struct kv_log_rec {
    int calls, level;
    char origin[32], msg[256];
};
static void kv_log_keep(int level, const char *origin, const char *msg,
                        void *arg)
{
    struct kv_log_rec *r = arg;
    r->calls++;
    r->level = level;
    snprintf(r->origin, sizeof(r->origin), "%s", origin);
    snprintf(r->msg, sizeof(r->msg), "%s", msg);
}

START_TEST(embedded_store_lists_live_members_and_skips_bad_ones)
{
    char dir[] = "/tmp/te-kv-test-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char url[64];
    snprintf(url, sizeof(url), "dir:%s", dir);
    te_kv_store *a, *b;
    ck_assert_int_eq(te_kv_store_open(url, "c1", &a), 0);
    ck_assert_int_eq(te_kv_store_open(url, "c1", &b), 0);
    uint8_t addr[3] = {1, 2, 255};
    ck_assert_int_eq(te_kv_store_register(a, "pf-a", "prefill", addr, 3, 64, 30), 0);
    ck_assert_int_eq(te_kv_store_register(b, "dec-b", "decode", addr, 2, 8, 1), 0);
    te_kv_member m[4];
    ck_assert_int_eq(te_kv_store_list(a, "prefill", m, 4), 1);
    ck_assert_str_eq(m[0].name, "pf-a");
    ck_assert_uint_eq(m[0].addr_len, 3);
    ck_assert_uint_eq(m[0].addr[2], 255);
    ck_assert_uint_eq(m[0].capacity, 64);
    ck_assert_int_eq(te_kv_store_list(a, NULL, m, 4), 2);
    /* A record that does not parse is skipped; the others still listed. */
    char path[128];
    snprintf(path, sizeof(path), "%s/c1/evil.member", dir);
    FILE *f = fopen(path, "w");
    fputs("role=prefill\naddr=zz\n", f);
    fclose(f);
    /* ... and said so through the log sink (te_set_log_fn), not stderr. */
    struct kv_log_rec rec = {0};
    te_set_log_fn(kv_log_keep, &rec);
    ck_assert_int_eq(te_kv_store_list(a, "prefill", m, 4), 1);
    te_set_log_fn(NULL, NULL);
    ck_assert_int_eq(rec.calls, 1);
    ck_assert_int_eq(rec.level, TE_LOG_WARN);
    ck_assert_str_eq(rec.origin, "te-kv");
    ck_assert_msg(!strncmp(rec.msg, "store: member evil skipped: ", 28), "%s",
                  rec.msg);
    /* A member that stops keeping its record alive disappears. */
    sleep(2);
    ck_assert_int_eq(te_kv_store_list(a, "decode", m, 4), 0);
    ck_assert_int_eq(te_kv_store_keepalive(a), 0);
    /* ... and comes back, said so, at its next keepalive while it lives. */
    ck_assert_int_eq(te_kv_store_keepalive(b), 1);
    ck_assert_int_eq(te_kv_store_list(a, "decode", m, 4), 1);
    ck_assert_int_eq(te_kv_store_keepalive(b), 0);
    ck_assert_int_eq(te_kv_store_unregister(b), 0);
    ck_assert_int_eq(te_kv_store_list(a, "prefill", m, 4), 1);
    ck_assert_int_eq(te_kv_store_unregister(a), 0);
    ck_assert_int_eq(te_kv_store_list(a, "prefill", m, 4), 0);
    /* Bad input. */
    ck_assert_int_eq(te_kv_store_register(a, "bad/name", "prefill", addr, 3,
                                          1, 5), -EINVAL);
    ck_assert_int_eq(te_kv_store_register(a, "x", "router", addr, 3, 1, 5),
                     -EINVAL);
    te_kv_store *c;
    ck_assert_int_eq(te_kv_store_open("zk://x", "c1", &c), -EINVAL);
    ck_assert_int_eq(te_kv_store_open(url, "../up", &c), -EINVAL);
    /* An etcd that is not there: a clear error naming the URL. */
    ck_assert_int_lt(te_kv_store_open("etcd://127.0.0.1:1", "c1", &c), 0);
    ck_assert_ptr_nonnull(strstr(te_kv_last_error(), "127.0.0.1:1"));
    te_kv_store_close(a);
    te_kv_store_close(b);
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A record that cannot be removed is an error, and the name is kept so
 * that unregister can be tried again. */
START_TEST(store_unregister_reports_a_record_left_behind)
{
    char dir[] = "/tmp/te-kv-test-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char url[64];
    snprintf(url, sizeof(url), "dir:%s", dir);
    te_kv_store *a;
    ck_assert_int_eq(te_kv_store_open(url, "c1", &a), 0);
    uint8_t addr[3] = {1, 2, 3};
    ck_assert_int_eq(te_kv_store_register(a, "pf", "prefill", addr, 3, 4, 30), 0);
    /* unlink() of a directory fails even for root. */
    char path[128];
    snprintf(path, sizeof(path), "%s/c1/pf.member", dir);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    ck_assert_int_lt(te_kv_store_unregister(a), 0);
    ck_assert_ptr_nonnull(strstr(te_kv_last_error(), "pf.member"));
    ck_assert_int_eq(rmdir(path), 0);
    ck_assert_int_eq(te_kv_store_unregister(a), 0);
    te_kv_store_close(a);
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* The writes' deadline is also how long the prefiller waits for them to be
 * over: "none" (negative) or more than 120 s is refused, named. */
START_TEST(prefiller_timeout_out_of_range_is_refused)
{
    te_engine *e = kv_test_engine();
    te_kv_shape s;
    ck_assert_int_eq(te_kv_shape_preset("llama-3.1-70b", 0, &s), 0);
    te_kv_prefiller_opts o = {.shape = s, .max_pages = 4, .timeout_ms = -1};
    te_kv_prefiller *p = NULL;
    ck_assert_int_eq(te_kv_prefiller_new(e, &o, &p), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_kv_last_error(), "timeout_ms"));
    o.timeout_ms = 120001;
    ck_assert_int_eq(te_kv_prefiller_new(e, &o, &p), -EINVAL);
    o.timeout_ms = 120000;
    ck_assert_int_eq(te_kv_prefiller_new(e, &o, &p), 0);
    te_kv_prefiller_free(p);
    te_engine_destroy(e);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kv_units");
    TCase *t = tcase_create("units");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, presets_have_the_real_shapes);
    tcase_add_test(t, pool_never_reuses_a_page_before_release);
    tcase_add_test(t, messages_round_trip);
    tcase_add_test(t, every_truncation_and_corruption_is_refused);
    tcase_add_test(t, version2_messages_round_trip);
    tcase_add_test(t, version2_hostile_input_is_refused);
    tcase_add_test(t, embedded_store_lists_live_members_and_skips_bad_ones);
    tcase_add_test(t, store_unregister_reports_a_record_left_behind);
    tcase_add_test(t, prefiller_timeout_out_of_range_is_refused);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
