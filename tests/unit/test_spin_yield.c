/*
 * An engine thread that busy-polls gives its CPU to the threads it waits
 * for (core/thread_setup.h, te_thread_spin_pause).
 *
 * The whole test process runs on one CPU under SCHED_FIFO: threads of one
 * real-time priority never preempt each other, so a thread runs until it
 * blocks or yields. The engines spin for 10 s when idle (workers and
 * callback threads alike). A WriteImm between two engines in this process
 * needs the initiator's worker, the target's worker, the target's
 * callback thread and this thread in turn; a spinning thread that kept
 * the CPU would hold up each hand-off for its whole 10 s spin, and the
 * rounds below would outlast the case's timeout many times over (it
 * fails as a timeout, not on a measured time). A spin that yields hands
 * over at once. (On an ordinary SCHED_OTHER machine the same starvation
 * lasted the spinner's scheduler slice or its spin: 117-170 us per
 * in-process WriteImm on 2 cores, docs/benchmarks.md.)
 *
 * Needs the right to use SCHED_FIFO (root or CAP_SYS_NICE, an RLIMIT_RTPRIO
 * above 0); without it the test says so and passes without checking.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "te_test.h"

/* Spinning far longer than the case's timeout: without the yield one
 * hand-off already fails the test. */
#define SPIN_FOREVER                                                           \
    "[engine]\nidle_spin_us = 10000000\ncallback_spin_us = 10000000\n"

enum { ROUNDS = 50, WAIT_MS = 60000, IMM = 0x51 };

static atomic_int g_calls;

static void on_imm(uint32_t imm, int status, void *arg)
{
    (void)imm, (void)arg;
    if (status == 0)
        atomic_fetch_add(&g_calls, 1);
}

/* This thread (and the engine threads it creates, which inherit both) on
 * one CPU under SCHED_FIFO; 0, or -errno when not permitted here. */
static int one_cpu_no_preemption(void)
{
    cpu_set_t set, one;
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return -errno;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            CPU_SET(c, &one);
            break;
        }
    if (sched_setaffinity(0, sizeof(one), &one) != 0)
        return -errno;
    struct sched_param sp = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0)
        return -errno;
    return 0;
}

START_TEST(spinning_threads_hand_over_the_cpu)
{
    int rc = one_cpu_no_preemption();
    if (rc) {
        printf("SKIP: SCHED_FIFO not permitted here (%s): nothing checked\n",
               strerror(-rc));
        return;
    }
    te_test_pair x;
    te_test_pair_open(&x, SPIN_FOREVER, SPIN_FOREVER, 4096);
    for (int k = 0; k < ROUNDS; k++) {
        /* the expectation's callback runs on b's callback thread */
        ck_assert_int_eq(te_imm_expect(x.b, IMM, 1, on_imm, NULL), 0);
        te_request r = te_test_pair_write(&x, 64, 0);
        r.flags = TE_F_IMM;
        r.imm = IMM;
        x.src[0] = (uint8_t)(k + 1);
        ck_assert_int_ge(te_submit(x.a, &r), 0);
        te_test_complete(x.a, 1, WAIT_MS);
        ck_assert_int_eq(te_test_wait_int(&g_calls, k + 1, WAIT_MS), k + 1);
        ck_assert_uint_eq(x.dst[0], (uint8_t)(k + 1));
    }
    te_test_pair_close(&x);
}
END_TEST

TE_TEST_MAIN("spin_yield",
             TE_TCASE_FULL("one_cpu", 60, NULL, NULL,
                           spinning_threads_hand_over_the_cpu))
