/*
 * The core against a plugin that breaks its contract (tests/hostile/, one
 * misbehaviour per [hostile] mode, on NIC h0 only): the process never
 * crashes, one error line names the plugin, the NIC and what it did, the
 * requests on that NIC fail with -EPROTO naming the cause, and NIC h1 keeps
 * working. Also: a plugin's refusal text (set_error) reaches
 * te_last_error(), whether peer_add() refuses or poll() refuses later.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te_test.h"

#define WAIT_MS 10000
#define LEN 1024

/* ------------------------------------------------------- log capture */

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];
static int log_contract_errors; /* error lines saying "broke its contract" */

static void capture(int level, const char *origin, const char *msg, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&log_lock);
    size_t n = strlen(log_text);
    snprintf(log_text + n, sizeof(log_text) - n, "%d %s: %s\n", level, origin,
             msg);
    if (level == TE_LOG_ERROR && strstr(msg, "broke its contract"))
        log_contract_errors++;
    pthread_mutex_unlock(&log_lock);
}

/* 1 if the captured log has a line containing both a and b. */
static int logged(const char *a, const char *b)
{
    pthread_mutex_lock(&log_lock);
    int found = 0;
    for (char *l = log_text; l && *l && !found;) {
        char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        char line[1024];
        snprintf(line, sizeof(line), "%.*s", (int)len, l);
        found = strstr(line, a) && strstr(line, b);
        l = end ? end + 1 : NULL;
    }
    pthread_mutex_unlock(&log_lock);
    return found;
}

static const char *log_dump(void) { return log_text; }

/* ------------------------------------------------------------ engine */

static char ini[1024];

/* engine.progress = caller for the mode named "caller:<mode>". */
static const char *hostile_ini(const char *mode)
{
    int caller = !strncmp(mode, "caller:", 7);
    snprintf(ini, sizeof(ini),
             "[engine]\nplugin = hostile\nplugin_path = %s\n"
             "nics_per_group = 2\nrequest_timeout_ms = 5000\n%s"
             "[hostile]\nmode = %s\nbad_nic = 0\n",
             TE_HOSTILE_PLUGIN_DIR, caller ? "progress = caller\n" : "",
             mode + (caller ? 7 : 0));
    return ini;
}

static uint8_t buf[2 * 4096];

static void open_self(te_test_self *s, const char *mode)
{
    log_text[0] = 0;
    log_contract_errors = 0;
    te_set_log_fn(capture, NULL);
    te_test_self_open(s, hostile_ini(mode), buf, sizeof(buf));
}

/* A write of LEN bytes from the first half of buf to the second, pinned
 * to NIC `nic` (-1: sharded over both), tagged with user_data `tag`; the
 * next completion, asserted to be its own (a request completes once). */
static te_completion write_tagged(te_test_self *s, int nic, uint64_t tag)
{
    te_request r = te_test_write(s->peer, s->mr, &s->desc, LEN, 0);
    r.u.xfer.remote_off = 4096;
    r.user_data = tag;
    if (nic >= 0) {
        r.route.kind = TE_ROUTE_PIN;
        r.route.nic = (uint32_t)nic;
    }
    int64_t id = te_submit(s->e, &r);
    ck_assert_msg(id >= 0, "te_submit: %s", te_last_error());
    te_completion c = te_test_completion(s->e, WAIT_MS);
    ck_assert_msg(c.user_data == tag, "completion of request %llu while "
                  "waiting for %llu (%d %s)", (unsigned long long)c.user_data,
                  (unsigned long long)tag, c.status, c.reason);
    return c;
}

static uint64_t next_tag = 1;

static te_completion write_on(te_test_self *s, int nic)
{
    return write_tagged(s, nic, next_tag++);
}

static void expect_eproto(const te_completion *c, const char *what)
{
    ck_assert_msg(c->status == -EPROTO, "status %d (%s), want -EPROTO naming "
                  "\"%s\"", c->status, c->reason, what);
    ck_assert_msg(strstr(c->reason, "NIC h0 failed"), "reason: %s", c->reason);
    ck_assert_msg(strstr(c->reason, what), "reason \"%s\" lacks \"%s\"",
                  c->reason, what);
}

/* The misbehaviour was named once, at error level, with plugin and NIC;
 * NIC h1 still carries a write (its bytes arrive); the engine closes with
 * no request left behind. */
static void expect_contained(te_test_self *s, const char *what)
{
    ck_assert_msg(logged("plugin hostile broke its contract", what) &&
                      logged("NIC h0", what),
                  "no error line naming plugin, NIC and \"%s\":\n%s", what,
                  log_dump());
    ck_assert_int_eq(log_contract_errors, 1);
    memset(buf, 0x5c, LEN);
    memset(buf + 4096, 0, LEN);
    te_completion c = write_on(s, 1);
    ck_assert_msg(c.status == 0, "NIC h1 after h0 failed: %d %s", c.status,
                  c.reason);
    ck_assert_int_eq(buf[4096 + LEN - 1], 0x5c);
    te_test_self_close(s);
    te_set_log_fn(NULL, NULL);
    /* The failed NIC's operations were written off, not left for the
     * shutdown to give up on. */
    ck_assert_msg(!logged("still in flight", ""), "%s", log_dump());
}

/* The misbehaviour hits the first write on h0 itself. */
static void check_first_write_fails(const char *mode, const char *what)
{
    te_test_self s;
    open_self(&s, mode);
    te_completion c = write_on(&s, 0);
    expect_eproto(&c, what);
    expect_contained(&s, what);
}

/* The first write on h0 completes (the misbehaviour comes after its
 * completion); the next one finds the NIC failed. */
static void check_next_write_fails(const char *mode, const char *what)
{
    te_test_self s;
    open_self(&s, mode);
    te_completion c = write_on(&s, 0);
    ck_assert_msg(c.status == 0, "first write: %d %s", c.status, c.reason);
    c = write_on(&s, 0);
    expect_eproto(&c, "");
    expect_contained(&s, what);
}

START_TEST(conforming_plugin_trips_nothing)
{
    te_test_self s;
    open_self(&s, "none");
    for (int nic = 0; nic < 2; nic++)
        for (int i = 0; i < 100; i++) {
            te_completion c = write_on(&s, nic);
            ck_assert_msg(c.status == 0, "%d %s", c.status, c.reason);
        }
    ck_assert_msg(!logged("broke its contract", ""), "%s", log_dump());
    te_test_self_close(&s);
    te_set_log_fn(NULL, NULL);
}
END_TEST

START_TEST(duplicate_completion)
{
    check_next_write_fails("dup_local", "second LOCAL completion for context");
}
END_TEST

/* The same with no engine threads: te_progress() meets the breach. */
START_TEST(duplicate_completion_caller_mode)
{
    check_next_write_fails("caller:dup_local",
                           "second LOCAL completion for context");
}
END_TEST

/* A write sharded over h0 and h1: h0's shard meets the breach, h1's
 * completes; the request completes once, with -EPROTO (the next
 * completion is the next request's: write_tagged checks). */
START_TEST(sharded_request_fails_once)
{
    te_test_self s;
    open_self(&s, "unknown_ctx");
    te_completion c = write_on(&s, -1);
    expect_eproto(&c, "completion for unknown context");
    expect_contained(&s, "completion for unknown context");
}
END_TEST

/* plugin.h lets a RECV end with a LOCAL error: not a breach, and taken as
 * the failed receive (a write's completion path would crash on it). */
START_TEST(recv_ended_by_local_error)
{
    te_test_self s;
    open_self(&s, "recv_lerr");
    for (int i = 0; i < 3; i++) {
        te_completion c = write_on(&s, 0);
        ck_assert_msg(c.status == 0, "%d %s", c.status, c.reason);
    }
    ck_assert_msg(!logged("broke its contract", ""), "%s", log_dump());
    te_test_self_close(&s);
    te_set_log_fn(NULL, NULL);
}
END_TEST

START_TEST(unknown_context)
{
    check_first_write_fails("unknown_ctx", "completion for unknown context");
}
END_TEST

START_TEST(poll_more_than_max)
{
    check_first_write_fails("poll_over", "poll() returned 65 for at most 64");
}
END_TEST

START_TEST(poll_below_errno_range)
{
    check_first_write_fails("poll_neg", "poll() returned -5000");
}
END_TEST

START_TEST(post_more_than_n)
{
    /* Its receive buffers are posted at start: the NIC fails then, and the
     * write is refused on arrival. */
    check_first_write_fails("post_over", "post() returned 33 for 32 operations");
}
END_TEST

START_TEST(unknown_kind)
{
    check_first_write_fails("bad_kind", "completion of unknown kind 9");
}
END_TEST

START_TEST(positive_status)
{
    check_first_write_fails("pos_status", "LOCAL completion with status 5");
}
END_TEST

START_TEST(recv_len_beyond_buffer)
{
    check_next_write_fails("recv_len", "RECV of 4097 bytes into a 4096-byte");
}
END_TEST

/* post() refuses a write outright (allowed): the request fails with
 * post()'s errno and the plugin's words, and a refusal without words does
 * not leave an empty ": " behind. No breach: h0 stays in use. */
static void check_post_refusal(const char *mode, const char *want)
{
    te_test_self s;
    open_self(&s, mode);
    for (int i = 0; i < 2; i++) {
        te_completion c = write_on(&s, 0);
        ck_assert_int_eq(c.status, -EINVAL);
        ck_assert_str_eq(c.reason, want);
    }
    ck_assert_msg(!logged("broke its contract", ""), "%s", log_dump());
    te_test_self_close(&s);
    te_set_log_fn(NULL, NULL);
}

START_TEST(refusal_text_from_post)
{
    check_post_refusal("post_refuse", "post on NIC h0 refused: Invalid "
                       "argument: hostile h0: no route for this key");
    check_post_refusal("post_quiet",
                       "post on NIC h0 refused: Invalid argument");
}
END_TEST

/* peer_add() refuses with a reason: the reason is te_last_error()'s. */
START_TEST(refusal_text_from_peer_add)
{
    te_engine *e = te_test_engine(hostile_ini("refuse_peer"));
    uint8_t addr[TE_ADDR_MAX];
    size_t n = sizeof(addr);
    ck_assert_int_eq(te_engine_address(e, 0, addr, &n), 0);
    te_peer p;
    int rc = te_peer_add(e, 0, addr, n, &p);
    ck_assert_int_eq(rc, -EHOSTUNREACH);
    ck_assert_msg(strstr(te_last_error(), "NIC h0") &&
                      strstr(te_last_error(), "hostile h0: peer refused: "
                             "credentials rejected by the fabric manager"),
                  "te_last_error: %s", te_last_error());
    te_engine_destroy(e);
}
END_TEST

/* The plugin refuses the peer in poll() (after a handshake, say): its
 * set_error text is in the peer's down reason and the log. */
START_TEST(refusal_text_from_poll)
{
    te_test_self s;
    open_self(&s, "refuse_late");
    ck_assert_int_eq(te_test_wait_peer_down(s.e, 0, s.peer, WAIT_MS),
                     -ECONNRESET);
    const char *why = "peer refused after the handshake: credentials rejected";
    ck_assert_msg(strstr(te_last_error(), why), "te_last_error: %s",
                  te_last_error());
    ck_assert_msg(logged("is down", why), "%s", log_dump());
    te_test_self_close(&s);
    te_set_log_fn(NULL, NULL);
}
END_TEST

TE_TEST_MAIN("hostile_plugin",
             TE_TCASE("guard", conforming_plugin_trips_nothing,
                      duplicate_completion, duplicate_completion_caller_mode,
                      sharded_request_fails_once, recv_ended_by_local_error,
                      unknown_context,
                      poll_more_than_max, poll_below_errno_range,
                      post_more_than_n, unknown_kind, positive_status,
                      recv_len_beyond_buffer),
             TE_TCASE("refusal_text", refusal_text_from_peer_add,
                      refusal_text_from_poll, refusal_text_from_post))
