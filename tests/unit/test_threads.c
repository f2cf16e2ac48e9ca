/*
 * The engine's threads as the system sees them: named (te-worker-N,
 * te-callback) and, for workers that sleep when idle, a timer slack small
 * enough that idle_sleep_us is honoured (thread_setup.h).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "te/te.h"
#include "thread_setup.h"
#include "te_test.h"

static int read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char *got = fgets(buf, (int)len, f);
    fclose(f);
    if (!got)
        return -1;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* The worker names itself as it starts: wait for it (bounded). */
static long wait_thread(const char *name)
{
    for (int i = 0; i < 2000; i++) {
        long tid;
        if (te_test_threads_named(name, &tid))
            return tid;
        te_test_sleep_ms(1);
    }
    return 0;
}

static unsigned long slack_of(long tid)
{
    char path[64], line[32];
    snprintf(path, sizeof(path), "/proc/%ld/timerslack_ns", tid);
    ck_assert_int_eq(read_line(path, line, sizeof(line)), 0);
    return strtoul(line, NULL, 10);
}

START_TEST(threads_are_named)
{
    te_engine *e = te_test_engine("[engine]\ngroups = 2\n");
    ck_assert_msg(wait_thread("te-worker-0"), "no thread te-worker-0");
    ck_assert_msg(wait_thread("te-worker-1"), "no thread te-worker-1");
    ck_assert_msg(wait_thread("te-callback"), "no thread te-callback");
    te_engine_destroy(e);
}
END_TEST

START_TEST(sleeping_worker_gets_tight_slack)
{
    /* Default 20 us sleeps: a tenth of that, but never below 1 us. */
    te_engine *e = te_test_engine("[engine]\nidle_sleep_us = 20\n");
    long tid = wait_thread("te-worker-0");
    ck_assert(tid);
    ck_assert_uint_eq(slack_of(tid), 2000);
    te_engine_destroy(e);

    e = te_test_engine("[engine]\nidle_sleep_us = 5\n");
    tid = wait_thread("te-worker-0");
    ck_assert(tid);
    ck_assert_uint_eq(slack_of(tid), 1000);
    te_engine_destroy(e);
}
END_TEST

START_TEST(spinning_worker_keeps_slack)
{
    /* A worker that never sleeps has no reason to change it; threads
     * inherit the creator's slack. */
    unsigned long mine = (unsigned long)prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    te_engine *e = te_test_engine("[engine]\nidle_sleep_us = 0\n");
    long tid = wait_thread("te-worker-0");
    ck_assert(tid);
    ck_assert_uint_eq(slack_of(tid), mine);
    te_engine_destroy(e);
}
END_TEST

START_TEST(tighten_never_raises)
{
    unsigned long before = (unsigned long)prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    ck_assert_int_eq(prctl(PR_SET_TIMERSLACK, 1500UL, 0, 0, 0), 0);
    ck_assert_uint_eq(te_thread_tighten_slack(1000000), 1500);
    ck_assert_uint_eq(te_thread_tighten_slack(10), 1000);
    ck_assert_int_eq(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), 1000);
    ck_assert_int_eq(prctl(PR_SET_TIMERSLACK, before, 0, 0, 0), 0);
}
END_TEST

TE_TEST_MAIN("threads",
             TE_TCASE("threads",
               threads_are_named, sleeping_worker_gets_tight_slack,
               spinning_worker_keeps_slack, tighten_never_raises))
