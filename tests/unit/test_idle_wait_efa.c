/*
 * Idle workers of the efa plugin over tcp;ofi_rxm block on the CQ's wait
 * fd (efa_cq.c efa_wait_fd/efa_wait_arm, fi_trywait). Every timed wake-up
 * is off, as in test_idle_wait.c: a missed wake-up is a hang, caught by
 * the waits' deadlines. Exits 77 (skip) where the efa plugin or
 * tcp;ofi_rxm is not there.
 */
#include <check.h>
#include <stdlib.h>

#include "te_test.h"

#define TCP_NO_TIMED_WAKEUPS                                                   \
    "[engine]\nplugin = efa\nidle_spin_us = 0\nidle_spin_max_us = 0\n"         \
    "idle_block_max_ms = 0\n"                                                  \
    "heartbeat_ms = 0\nrequest_timeout_ms = 0\npeer_timeout_ms = 0\n"         \
    "busy_wait = block\n"                                                     \
    "[efa]\nprovider = \"tcp;ofi_rxm\"\nnode = 127.0.0.1\n"

enum { ROUNDS = 200, WAIT_MS = 20000 };

/* With an immediate (the target reports it) and without (the target's
 * polls move the bytes and report nothing: only the wait fd wakes it). */
START_TEST(no_lost_wakeup_tcp)
{
    te_test_pair x;
    te_test_pair_open(&x, TCP_NO_TIMED_WAKEUPS, TCP_NO_TIMED_WAKEUPS,
                      64 << 10);
    for (int k = 0; k < ROUNDS; k++) {
        int imm = k % 2;
        te_request r = te_test_pair_write(&x, imm ? 64 : 64 << 10, 0);
        if (imm) {
            r.flags = TE_F_IMM;
            r.imm = 21;
        }
        x.src[0] = (uint8_t)(k + 1);
        ck_assert_int_ge(te_submit(x.a, &r), 0);
        te_test_complete(x.a, 1, WAIT_MS);
        if (imm)
            ck_assert_uint_eq(te_test_wait_banked(x.b, 21, (uint64_t)k / 2 + 1,
                                                  WAIT_MS),
                              (uint64_t)k / 2 + 1);
    }
    te_test_pair_close(&x);
}
END_TEST

int main(void)
{
    te_test_require(TCP_NO_TIMED_WAKEUPS,
                    "efa plugin over tcp;ofi_rxm");
    return TE_TEST_RUN("idle_wait_efa",
                       TE_TCASE_FULL("tcp", 120, NULL, NULL,
                                     no_lost_wakeup_tcp));
}
