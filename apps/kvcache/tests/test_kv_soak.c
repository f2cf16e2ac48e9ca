/* te-kv soak on the loopback plugin: many requests with random cancels,
 * a prefiller joining and one leaving mid-run. The decoder poisons every
 * page and hidden slot it gets back and checks the poison when it hands
 * them out again, so a write landing after its request's pages were
 * returned is counted (must be 0); every request must end exactly once
 * (no lost or duplicated completion), and every completed one must verify
 * byte for byte. TE_KV_SOAK_REQUESTS overrides the count (default 10000). */
#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "te/kv.h"

#define WINDOW 8 /* requests in flight */
#define PREFILLERS 3

static te_engine *engine(void)
{
    te_config *c = te_config_new();
    char v[32];
    snprintf(v, sizeof(v), "%d", TE_KV_MSG_MAX + 64);
    te_config_set(c, "engine", "max_msg_size", v);
    te_engine *e = NULL;
    ck_assert_msg(te_engine_create(c, &e) == 0, "%s", te_last_error());
    te_config_free(c);
    return e;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct outcome {
    atomic_int calls;  /* completions seen: must end at exactly 1 */
    atomic_int status;
};

static struct outcome *g_out;

static void on_done(uint64_t id, int status, const char *why, void *arg)
{
    (void)why;
    (void)arg;
    atomic_store(&g_out[id].status, status);
    atomic_fetch_add(&g_out[id].calls, 1);
}

struct member {
    te_engine *e;
    te_kv_prefiller *p;
    uint32_t id;   /* index at the decoder */
    int live;      /* takes new requests */
    int inflight;
};

static void join(te_kv_decoder *d, te_kv_shape s, struct member *m)
{
    m->e = engine();
    te_kv_prefiller_opts o = {.shape = s, .max_pages = 16, .layer_us = 800,
                              .ref_tokens = 128};
    ck_assert_int_eq(te_kv_prefiller_new(m->e, &o, &m->p), 0);
    uint8_t addr[TE_ADDR_MAX];
    size_t len = sizeof(addr);
    ck_assert_int_eq(te_engine_address(m->e, 0, addr, &len), 0);
    ck_assert_msg(te_kv_decoder_add_prefiller(d, addr, len, &m->id) == 0, "%s",
                  te_kv_last_error());
    m->live = 1;
}

START_TEST(random_cancels_no_late_write_no_lost_completion)
{
    const char *env = getenv("TE_KV_SOAK_REQUESTS");
    uint64_t n = env ? strtoull(env, NULL, 10) : 10000;
    if (n < 8)
        n = 8;
    te_kv_shape s;
    ck_assert_int_eq(te_kv_shape_preset("qwen3-235b-a22b", 8192, &s), 0);
    s.layers = 3; /* the real token shape, few layers: many requests */
    te_engine *de = engine();
    te_kv_decoder_opts o = {.shape = s, .pool_pages = 16 * WINDOW,
                            .max_requests = WINDOW, .accept_timeout_ms = 10000,
                            .cancel_timeout_ms = 10000, .poison_freed = 1};
    te_kv_decoder *d;
    ck_assert_int_eq(te_kv_decoder_new(de, &o, &d), 0);
    g_out = calloc(n + 1, sizeof(*g_out));
    struct member m[PREFILLERS] = {{0}};
    join(d, s, &m[0]);
    join(d, s, &m[1]);
    unsigned seed = 12345;
    uint64_t slot_id[WINDOW] = {0}, next = 1, ended = 0;
    uint32_t slot_pf[WINDOW] = {0};
    uint64_t completed = 0, cancelled = 0, verified = 0, cancel_calls = 0;
    double deadline = now_s() + 50; /* bounded in time as well as count */
    while (ended < n && now_s() < deadline) {
        /* Membership changes while requests flow: one joins at n/3, one
         * leaves at 2n/3 (takes no new requests, then goes once idle). */
        if (next == n / 3 && !m[2].e)
            join(d, s, &m[2]);
        if (next >= 2 * n / 3 && m[1].live)
            m[1].live = 0;
        if (!m[1].live && m[1].p && !m[1].inflight) {
            te_kv_prefiller_free(m[1].p);
            te_engine_destroy(m[1].e);
            m[1].p = NULL;
        }
        int progressed = 0;
        for (int w = 0; w < WINDOW; w++) {
            uint64_t id = slot_id[w];
            if (id && atomic_load(&g_out[id].calls)) {
                int st = atomic_load(&g_out[id].status);
                if (st == 0) {
                    ck_assert_msg(te_kv_decoder_verify(d, id) == 0, "%s",
                                  te_kv_last_error());
                    ck_assert_int_eq(te_kv_decoder_release(d, id), 0);
                    completed++;
                    verified++;
                } else {
                    ck_assert_msg(st == -ECANCELED, "request %llu: %d",
                                  (unsigned long long)id, st);
                    cancelled++;
                }
                m[slot_pf[w]].inflight--;
                slot_id[w] = 0;
                ended++;
                progressed = 1;
            }
            if (!slot_id[w] && next <= n) {
                uint32_t k = (uint32_t)(next % PREFILLERS);
                while (!m[k].live)
                    k = (k + 1) % PREFILLERS;
                /* 8..64 tokens: 2..16 pages of 4 tokens */
                uint32_t tokens = 8 + rand_r(&seed) % 57;
                int rc = te_kv_decoder_submit(d, m[k].id, next, tokens, 20000,
                                              on_done, NULL);
                ck_assert_msg(rc == 0, "submit %llu: %s",
                              (unsigned long long)next, te_kv_last_error());
                slot_id[w] = next++;
                slot_pf[w] = k;
                m[k].inflight++;
                progressed = 1;
            }
        }
        /* Cancel a random in-flight request about a third of the time:
         * some before ACCEPT, some between layers, some already done. */
        if (rand_r(&seed) % 3 == 0) {
            uint64_t id = slot_id[rand_r(&seed) % WINDOW];
            if (id && te_kv_decoder_cancel(d, id) == 0)
                cancel_calls++;
        }
        if (!progressed)
            usleep(50);
    }
    ck_assert_msg(ended == n, "only %llu of %llu requests ended in time",
                  (unsigned long long)ended, (unsigned long long)n);
    uint64_t lost = 0, dup = 0;
    for (uint64_t id = 1; id <= n; id++) {
        int c = atomic_load(&g_out[id].calls);
        lost += c == 0;
        dup += c > 1;
    }
    uint64_t late = te_kv_decoder_late_writes(d);
    fprintf(stderr, "kvcache_soak: %llu requests, %llu completed and "
            "verified, %llu cancelled (%llu cancel calls), lost %llu, "
            "duplicated %llu, late writes %llu\n", (unsigned long long)n,
            (unsigned long long)verified, (unsigned long long)cancelled,
            (unsigned long long)cancel_calls, (unsigned long long)lost,
            (unsigned long long)dup, (unsigned long long)late);
    ck_assert_uint_eq(lost, 0);
    ck_assert_uint_eq(dup, 0);
    ck_assert_uint_eq(late, 0);
    ck_assert_uint_eq(completed + cancelled, n);
    ck_assert_uint_gt(cancelled, 0); /* the cancel paths were exercised */
    ck_assert_uint_gt(completed, 0);
    ck_assert_ptr_null(m[1].p);      /* the leaver left */
    uint32_t free_pages;
    te_kv_pool_counts(te_kv_decoder_pool(d), &free_pages, NULL, NULL);
    ck_assert_uint_eq(free_pages, 16 * WINDOW);
    te_kv_decoder_free(d);
    for (int k = 0; k < PREFILLERS; k++)
        if (m[k].p) {
            te_kv_prefiller_free(m[k].p);
            te_engine_destroy(m[k].e);
        }
    te_engine_destroy(de);
    free(g_out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kv_soak");
    TCase *t = tcase_create("soak");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, random_cancels_no_late_write_no_lost_completion);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
