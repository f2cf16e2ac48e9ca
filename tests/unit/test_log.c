/* Unit tests of the log sink (core/log.c, te.h "logging"): the default
 * stderr output is today's, a sink gets the core's and a plugin's messages
 * with their level and origin, the process threshold and engine.log_level,
 * NULL restores stderr, a sink that logs or swaps from inside itself, and
 * threads logging while another swaps sinks (the old sink is never called
 * after te_set_log_fn returns: its argument is freed right after; run it
 * under TSan, scripts/sanitize.sh tsan -R test_log). A libte-kv message
 * reaching the sink: apps/kvcache/tests/test_kv_units.c (it links the
 * shared libraries; these tests link the static core). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "te/te.h"
#include "te_test.h"

/* ----------------------------------------------------------- helpers */

/* A sink that keeps what it gets. */
#define MAX_RECS 256
struct rec {
    int level;
    char origin[32];
    char msg[512];
};
static struct {
    pthread_mutex_t lock;
    int n;
    struct rec r[MAX_RECS];
} got = {PTHREAD_MUTEX_INITIALIZER, 0, {{0}}};

static void keep(int level, const char *origin, const char *msg, void *arg)
{
    ck_assert_ptr_eq(arg, &got);
    pthread_mutex_lock(&got.lock);
    if (got.n < MAX_RECS) {
        struct rec *r = &got.r[got.n++];
        r->level = level;
        snprintf(r->origin, sizeof(r->origin), "%s", origin);
        snprintf(r->msg, sizeof(r->msg), "%s", msg);
    }
    pthread_mutex_unlock(&got.lock);
}

static void got_reset(void)
{
    pthread_mutex_lock(&got.lock);
    got.n = 0;
    pthread_mutex_unlock(&got.lock);
}

/* The first record from origin whose message contains text, or NULL. */
static const struct rec *got_find(const char *origin, const char *text)
{
    const struct rec *found = NULL;
    pthread_mutex_lock(&got.lock);
    for (int i = 0; i < got.n && !found; i++)
        if (!strcmp(got.r[i].origin, origin) && strstr(got.r[i].msg, text))
            found = &got.r[i];
    pthread_mutex_unlock(&got.lock);
    return found;
}

static void got_dump(void)
{
    pthread_mutex_lock(&got.lock);
    for (int i = 0; i < got.n; i++)
        fprintf(stderr, "  sink got: [%d] %s | %s\n", got.r[i].level,
                got.r[i].origin, got.r[i].msg);
    pthread_mutex_unlock(&got.lock);
}

static void restore_defaults(void)
{
    te_set_log_fn(NULL, NULL);
    te_set_log_level(TE_LOG_DEBUG);
}

/* stderr (fd 2) redirected into a temporary file between begin and end;
 * end returns what was written (static buffer). */
static int saved_fd = -1, cap_fd = -1;
static void capture_begin(void)
{
    char path[] = "/tmp/te-test-log-XXXXXX";
    cap_fd = mkstemp(path);
    ck_assert_int_ge(cap_fd, 0);
    unlink(path);
    fflush(stderr);
    saved_fd = dup(2);
    ck_assert_int_ge(saved_fd, 0);
    ck_assert_int_eq(dup2(cap_fd, 2), 2);
}

static const char *capture_end(void)
{
    static char text[16384];
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    off_t n = lseek(cap_fd, 0, SEEK_END);
    ck_assert_int_ge(n, 0);
    if (n >= (off_t)sizeof(text))
        n = sizeof(text) - 1;
    ck_assert_int_eq(pread(cap_fd, text, (size_t)n, 0), n);
    text[n] = 0;
    close(cap_fd);
    return text;
}

/* An engine that is its own peer with every loopback operation failing
 * (fault_fail_every = 1: the plugin reports each failure through the host
 * table's log at debug level), engine.log_level as given; one write is
 * made and its failed completion collected. */
static void failing_write(int log_level)
{
    char ini[160];
    snprintf(ini, sizeof(ini), "[engine]\nlog_level = %d\n"
             "[loopback]\nfault_fail_every = 1\n", log_level);
    static uint8_t buf[4096];
    te_test_self s;
    te_test_self_open(&s, ini, buf, sizeof(buf));
    te_request r = te_test_write(s.peer, s.mr, &s.desc, 64, 2000);
    ck_assert_int_ge(te_submit(s.e, &r), 0);
    te_completion c = te_test_completion(s.e, 5000);
    ck_assert_int_ne(c.status, 0);
    te_test_self_close(&s);
}

/* ------------------------------------------------------------- tests */

START_TEST(default_output_is_todays_format)
{
    restore_defaults();
    capture_begin();
    te_log_printf(TE_LOG_WARN, "core", "hello %d", 7);
    te_log_printf(TE_LOG_ERROR, "te-kv", "decoder: %s", "dropped");
    te_log_printf(TE_LOG_INFO, NULL, "no origin");
    te_log_printf(TE_LOG_DEBUG, "loopback", "x");
    te_log_printf(9, "core", "above debug is debug");
    te_log_printf(-4, "core", "below error is error");
    failing_write(TE_LOG_DEBUG);
    const char *out = capture_end();
    ck_assert_msg(!strncmp(out,
                           "transferengine warning: hello 7\n"
                           "transferengine error: te-kv: decoder: dropped\n"
                           "transferengine info: no origin\n"
                           "transferengine debug: loopback: x\n"
                           "transferengine debug: above debug is debug\n"
                           "transferengine error: below error is error\n",
                           strlen("transferengine warning: hello 7\n"
                                  "transferengine error: te-kv: decoder: dropped\n"
                                  "transferengine info: no origin\n"
                                  "transferengine debug: loopback: x\n"
                                  "transferengine debug: above debug is debug\n"
                                  "transferengine error: below error is error\n")),
                  "stderr was:\n%s", out);
    /* The plugin's failure as it always read: the plugin's name once,
     * then its own prefix (lb_err: "loopback lo0: ..."). */
    ck_assert_msg(strstr(out, "\ntransferengine debug: loopback: loopback lo"),
                  "stderr was:\n%s", out);
    ck_assert_msg(strstr(out, "fault_fail_every=1: failing op"),
                  "stderr was:\n%s", out);
    /* A plugin message that names itself ("loopback: ...") is not
     * prefixed twice. */
    ck_assert_msg(!strstr(out, "loopback: loopback: "), "stderr was:\n%s", out);
}
END_TEST

START_TEST(sink_gets_core_and_plugin_messages)
{
    restore_defaults();
    got_reset();
    te_set_log_fn(keep, &got);
    capture_begin();
    failing_write(TE_LOG_DEBUG);
    te_log_printf(TE_LOG_WARN, "te-app", "value %s", "v");
    const char *out = capture_end();
    ck_assert_msg(out[0] == 0, "stderr got, with a sink set:\n%s", out);
    /* The plugin: its name as origin, its level (lb_err logs at debug),
     * the message without the "loopback: " the stderr line adds. */
    const struct rec *p = got_find("loopback", "fault_fail_every=1");
    if (!p)
        got_dump();
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(p->level, TE_LOG_DEBUG);
    ck_assert_msg(!strncmp(p->msg, "loopback lo", 11), "%s", p->msg);
    for (int i = 0; i < got.n; i++)
        ck_assert_msg(strncmp(got.r[i].msg, "loopback: ", 10),
                      "origin said twice: %s", got.r[i].msg);
    /* The core: origin "core" (a failed operation is logged by the core;
     * on a software transport its paths are logged at info). */
    int core = 0;
    for (int i = 0; i < got.n; i++) {
        ck_assert_int_ge(got.r[i].level, TE_LOG_ERROR);
        ck_assert_int_le(got.r[i].level, TE_LOG_DEBUG);
        ck_assert_ptr_eq(strchr(got.r[i].msg, '\n'), NULL);
        core += !strcmp(got.r[i].origin, "core");
    }
    if (!core)
        got_dump();
    ck_assert_int_gt(core, 0);
    const struct rec *a = got_find("te-app", "value v");
    ck_assert_ptr_nonnull(a);
    ck_assert_int_eq(a->level, TE_LOG_WARN);
    ck_assert_str_eq(a->msg, "value v");
    restore_defaults();
}
END_TEST

START_TEST(threshold_and_engine_log_level)
{
    restore_defaults();
    got_reset();
    te_set_log_fn(keep, &got);
    te_set_log_level(TE_LOG_WARN);
    te_log_printf(TE_LOG_INFO, "t", "info dropped");
    te_log_printf(TE_LOG_DEBUG, "t", "debug dropped");
    te_log_printf(TE_LOG_WARN, "t", "warn kept");
    te_log_printf(TE_LOG_ERROR, "t", "error kept");
    ck_assert_int_eq(got.n, 2);
    ck_assert_ptr_nonnull(got_find("t", "warn kept"));
    ck_assert_ptr_nonnull(got_find("t", "error kept"));
    /* Both ceilings apply to an engine's messages: engine.log_level 3
     * under a process threshold of warnings gives no info or debug. */
    failing_write(TE_LOG_DEBUG);
    for (int i = 0; i < got.n; i++)
        ck_assert_int_le(got.r[i].level, TE_LOG_WARN);
    ck_assert_ptr_null(got_find("loopback", "fault_fail_every"));
    /* ... and engine.log_level 1 under the process's debug: the same. */
    te_set_log_level(TE_LOG_DEBUG);
    got_reset();
    failing_write(TE_LOG_WARN);
    for (int i = 0; i < got.n; i++)
        ck_assert_int_le(got.r[i].level, TE_LOG_WARN);
    ck_assert_ptr_null(got_find("loopback", "fault_fail_every"));
    /* -1: nothing at all. */
    te_set_log_level(-1);
    got_reset();
    te_log_printf(TE_LOG_ERROR, "t", "silenced");
    failing_write(TE_LOG_DEBUG);
    ck_assert_int_eq(got.n, 0);
    /* Back to debug: messages without an engine all pass again. */
    te_set_log_level(TE_LOG_DEBUG);
    te_log_printf(TE_LOG_DEBUG, "t", "debug kept");
    ck_assert_ptr_nonnull(got_find("t", "debug kept"));
    restore_defaults();
}
END_TEST

START_TEST(null_restores_stderr)
{
    restore_defaults();
    got_reset();
    te_set_log_fn(keep, &got);
    te_log_printf(TE_LOG_ERROR, "t", "to the sink");
    ck_assert_int_eq(got.n, 1);
    te_set_log_fn(NULL, NULL);
    capture_begin();
    te_log_printf(TE_LOG_ERROR, "t", "to stderr");
    const char *out = capture_end();
    ck_assert_str_eq(out, "transferengine error: t: to stderr\n");
    ck_assert_int_eq(got.n, 1);
}
END_TEST

/* A sink that logs (to stderr instead of itself: no recursion) and swaps
 * itself for `keep` (applied when it returns). */
static atomic_int selfish_calls;
static void selfish(int level, const char *origin, const char *msg, void *arg)
{
    (void)level;
    (void)origin;
    (void)arg;
    atomic_fetch_add(&selfish_calls, 1);
    te_log_printf(TE_LOG_WARN, "sink", "inside: %s", msg);
    te_set_log_fn(keep, &got);
    /* Not yet: this call is still running on the old sink. */
    te_log_printf(TE_LOG_WARN, "sink", "still inside");
}

START_TEST(sink_may_log_and_swap_from_inside)
{
    restore_defaults();
    got_reset();
    atomic_store(&selfish_calls, 0);
    te_set_log_fn(selfish, NULL);
    capture_begin();
    te_log_printf(TE_LOG_ERROR, "t", "first");
    te_log_printf(TE_LOG_ERROR, "t", "second");
    const char *out = capture_end();
    ck_assert_int_eq(atomic_load(&selfish_calls), 1);
    ck_assert_str_eq(out, "transferengine warning: sink: inside: first\n"
                          "transferengine warning: sink: still inside\n");
    ck_assert_int_eq(got.n, 1);
    ck_assert_str_eq(got.r[0].msg, "second");
    restore_defaults();
}
END_TEST

/* Threads log while the main thread swaps between sinks whose arguments
 * it frees as soon as te_set_log_fn has returned. */
struct epoch {
    atomic_int calls;
    atomic_int retired;
};
static atomic_int late_calls, total_calls, stop;

static void counting(int level, const char *origin, const char *msg, void *arg)
{
    (void)level;
    (void)origin;
    (void)msg;
    struct epoch *ep = arg;
    if (atomic_load(&ep->retired))
        atomic_fetch_add(&late_calls, 1);
    atomic_fetch_add(&ep->calls, 1);
    atomic_fetch_add(&total_calls, 1);
}

static void *logger(void *arg)
{
    long id = (long)arg;
    unsigned n = 0;
    while (!atomic_load(&stop)) {
        te_log_printf((int)(n % 4), "thread", "thread %ld message %u", id, n);
        n++;
    }
    return NULL;
}

START_TEST(concurrent_logging_while_swapping)
{
    restore_defaults();
    atomic_store(&late_calls, 0);
    atomic_store(&total_calls, 0);
    atomic_store(&stop, 0);
    struct epoch *cur = calloc(1, sizeof(*cur));
    te_set_log_fn(counting, cur);
    enum { THREADS = 4, SWAPS = 300 };
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, logger, (void *)i), 0);
    for (int s = 0; s < SWAPS; s++) {
        struct epoch *next = calloc(1, sizeof(*next));
        ck_assert_ptr_nonnull(next);
        te_set_log_fn(counting, next);
        /* The old sink is never called again: retire it and free it. */
        atomic_store(&cur->retired, 1);
        free(cur);
        cur = next;
        if (s % 50 == 0) /* the threshold moves meanwhile too */
            te_set_log_level(s % 100 ? TE_LOG_DEBUG : TE_LOG_WARN);
        usleep(100);
    }
    te_set_log_level(TE_LOG_DEBUG);
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    te_set_log_fn(NULL, NULL);
    free(cur);
    ck_assert_int_eq(atomic_load(&late_calls), 0);
    ck_assert_int_gt(atomic_load(&total_calls), SWAPS);
}
END_TEST

TE_TEST_MAIN("log",
             TE_TCASE("default", default_output_is_todays_format,
                      null_restores_stderr),
             TE_TCASE("sink", sink_gets_core_and_plugin_messages,
                      threshold_and_engine_log_level,
                      sink_may_log_and_swap_from_inside),
             TE_TCASE_FULL("threads", 120, NULL, NULL,
                           concurrent_logging_while_swapping))
