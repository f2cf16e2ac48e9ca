/*
 * Every wait of the core counts on CLOCK_MONOTONIC (core/te_clock.h): a
 * wall-clock step must neither stretch nor shorten it. This program
 * defines clock_gettime() itself, which the statically linked core then
 * calls, and steps what CLOCK_REALTIME reads by +/- one day; the other
 * clocks read the kernel's. A wait computed from the wall clock and handed
 * to a CLOCK_REALTIME condition would then last a day (caught by Check's
 * timeout) or not at all (caught by the elapsed time).
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "te_test.h"

static _Atomic long long wall_step_s;

int clock_gettime(clockid_t id, struct timespec *ts)
{
    long rc = syscall(SYS_clock_gettime, id, ts);
    if (rc == 0 && id == CLOCK_REALTIME)
        ts->tv_sec += (time_t)atomic_load(&wall_step_s);
    return (int)rc;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static atomic_int timed_out;
static void on_imm(uint32_t imm, int status, void *arg)
{
    (void)imm, (void)arg;
    if (status == -ETIMEDOUT)
        atomic_store(&timed_out, 1);
}

/* The waits a user sees: a completion-queue poll with a timeout (its
 * condition variable), an expectation's deadline (the callback thread's
 * timed sleep), te_imm_wait, and a peer add (the worker's control wait).
 * Each must last what it says, whatever the wall clock reads. */
static void waits_last_what_they_say(long long step_s)
{
    te_engine *e = te_test_engine("");
    atomic_store(&wall_step_s, step_s);

    te_completion c;
    int64_t t0 = mono_ms();
    ck_assert_int_eq(te_poll_completions(e, &c, 1, 300), 0);
    int64_t dt = mono_ms() - t0;
    ck_assert_msg(dt >= 290, "a 300 ms poll returned after %lld ms",
                  (long long)dt);

    atomic_store(&timed_out, 0);
    t0 = mono_ms();
    ck_assert_int_eq(te_imm_expect_timeout(e, 77, 1, 200, on_imm, NULL), 0);
    ck_assert_int_eq(te_test_wait_int(&timed_out, 1, 20000), 1);
    dt = mono_ms() - t0;
    ck_assert_msg(dt >= 190, "a 200 ms expectation ended after %lld ms",
                  (long long)dt);

    t0 = mono_ms();
    ck_assert_int_eq(te_imm_wait(e, 78, 1, 250), -ETIMEDOUT);
    dt = mono_ms() - t0;
    ck_assert_msg(dt >= 240, "a 250 ms te_imm_wait returned after %lld ms",
                  (long long)dt);

    atomic_store(&wall_step_s, 0);
    te_engine_destroy(e);
}

START_TEST(wall_clock_a_day_ahead)
{
    waits_last_what_they_say(86400);
}
END_TEST

START_TEST(wall_clock_a_day_behind)
{
    waits_last_what_they_say(-86400);
}
END_TEST

/* A peer add goes through the worker's control wait (10 s deadline). */
START_TEST(control_wait_with_stepped_clock)
{
    atomic_store(&wall_step_s, -86400);
    uint8_t buf[64];
    te_test_self s;
    te_test_self_open(&s, "", buf, sizeof(buf));
    ck_assert_int_eq(te_peer_status(s.e, 0, s.peer), 0);
    te_test_self_close(&s);
    atomic_store(&wall_step_s, 0);
}
END_TEST

TE_TEST_MAIN("clock",
             TE_TCASE_FULL("stepped", 60, NULL, NULL, wall_clock_a_day_ahead,
                           wall_clock_a_day_behind,
                           control_wait_with_stepped_clock))
