/* What the kvcache tests share: an engine able to carry te-kv messages,
 * and prefiller counters as a test may assert them.
 *
 * A prefiller counts a request as completed, failed or cancelled only after
 * all its writes completed at the initiator; the decoder can see the last
 * immediate (and the test go on) before that. Reading the counters once is
 * a race under load, so a test waits, bounded, until `finished` requests
 * are counted, then asserts on what it got. */
#ifndef KV_TEST_UTIL_H
#define KV_TEST_UTIL_H

#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "te/kv.h"

/* A loopback engine (the defaults) whose messages fit a te-kv message,
 * with one more key set when section is not NULL (a fault to inject). */
static inline te_engine *kv_test_engine_set(const char *section,
                                            const char *key, const char *value)
{
    te_config *c = te_config_new();
    char v[32];
    snprintf(v, sizeof(v), "%d", TE_KV_MSG_MAX + 64);
    te_config_set(c, "engine", "max_msg_size", v);
    if (section)
        ck_assert_int_eq(te_config_set(c, section, key, value), 0);
    te_engine *e = NULL;
    ck_assert_msg(te_engine_create(c, &e) == 0, "%s", te_last_error());
    te_config_free(c);
    return e;
}

static inline te_engine *kv_test_engine(void)
{
    return kv_test_engine_set(NULL, NULL, NULL);
}

/* Completions that went to the engine-wide queue (te_poll_completions):
 * te-kv gives every request a callback, so there must be none. */
static inline int kv_test_queued_completions(te_engine *e)
{
    te_completion c[16];
    return te_poll_completions(e, c, 16, 0);
}

static inline te_kv_prefiller_stats kv_test_stats_after(te_kv_prefiller *p,
                                                        uint64_t finished)
{
    te_kv_prefiller_stats st;
    for (int i = 0; i < 10000; i++) { /* 10 s at most */
        te_kv_prefiller_stats_get(p, &st);
        if (st.completed + st.failed + st.cancelled >= finished)
            break;
        usleep(1000);
    }
    return st;
}

/* The outcome of one request (a te_kv_done_fn's arguments), for the tests
 * that submit one at a time: kv_test_on_done records it,
 * kv_test_wait_done waits (bounded) until it came, exactly once. */
struct kv_test_result {
    atomic_int done;
    int status;
    char why[300];
};

static inline void kv_test_on_done(uint64_t id, int status, const char *why,
                                   void *arg)
{
    struct kv_test_result *r = arg;
    (void)id;
    r->status = status;
    snprintf(r->why, sizeof(r->why), "%s", why);
    atomic_fetch_add(&r->done, 1);
}

static inline void kv_test_wait_done(struct kv_test_result *r, int timeout_ms)
{
    for (int i = 0; i < timeout_ms && !atomic_load(&r->done); i++)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&r->done), 1);
}

#endif
