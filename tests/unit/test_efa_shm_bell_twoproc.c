/* The efa plugin's shm doorbell across processes
 * (plugins/efa/efa_shm_bell.h): a receiver whose worker blocks with every
 * timed wake-up off (no heartbeats, no deadline scans, no safety-net look)
 * is woken by its sender's rings, write after write, and by the sender's
 * death (its pidfd is in the doorbell's epoll set): nothing else would
 * wake it, so a missed ring or death fails the bounded waits. The sender
 * is forked before this process starts threads (TSan's rule). Skipped
 * (77) where the efa plugin or libfabric's shm is not there. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "te/te.h"
#include "te_test.h"

enum { IMM = 11, LEN = 64 << 10, WRITES = 60, WAIT_MS = 20000 };

static const char *const SENDER =
    "[engine]\nplugin = efa\n[efa]\nprovider = shm\n";
static const char *const BLOCKED =
    "[engine]\nplugin = efa\nidle_spin_us = 0\nidle_spin_max_us = 0\n"
    "idle_block_max_ms = 0\nheartbeat_ms = 0\nrequest_timeout_ms = 0\n"
    "peer_timeout_ms = 0\nbusy_wait = block\n[efa]\nprovider = shm\n";

static te_engine *engine(const char *ini)
{
    te_engine *e = NULL;
    te_test_engine_try(ini, &e);
    return e;
}

/* The sender: hands over its address, then writes WRITES WriteImms of LEN
 * bytes one at a time, 3 ms apart (the receiver's worker blocks in
 * between), then waits to be killed. */
static int sender(int to_parent, int from_parent)
{
    te_engine *e = engine(SENDER);
    static uint8_t src[LEN];
    te_mr *mr;
    te_peer p;
    te_mr_desc d;
    if (te_test_child_peer(from_parent, e, src, sizeof(src), &mr, &p, &d))
        return 2;
    te_mr_desc mine;
    if (te_mr_describe(mr, &mine) || te_test_send_endpoint(to_parent, e, &mine))
        return 2;
    for (int i = 0; i < WRITES; i++) {
        src[0] = (uint8_t)(i + 1);
        te_request r = te_test_write(p, mr, &d, sizeof(src), WAIT_MS);
        r.flags = TE_F_IMM;
        r.imm = IMM;
        if (te_submit(e, &r) <= 0) {
            fprintf(stderr, "sender: %s\n", te_last_error());
            return 2;
        }
        te_test_complete(e, 1, WAIT_MS);
        te_test_sleep_ms(3);
    }
    for (;;)
        pause();
}

START_TEST(blocked_receiver_takes_each_write_and_sees_the_sender_die)
{
    int wr, rd;
    pid_t child = te_test_fork(&wr, &rd);
    if (child == 0)
        _exit(sender(wr, rd));
    te_engine *e = engine(BLOCKED);
    ck_assert_msg(e, "%s", te_last_error());
    static uint8_t buf[LEN];
    te_mr *mr = te_test_reg(e, buf, sizeof(buf), TE_MR_REMOTE_WRITE, NULL);
    te_mr_desc d;
    ck_assert_int_eq(te_mr_describe(mr, &d), 0);
    ck_assert_int_eq(te_test_send_endpoint(wr, e, &d), 0);
    te_mr_desc sd;
    te_peer p = te_test_recv_peer(rd, e, &sd);
    ck_assert_uint_eq(te_test_wait_banked(e, IMM, WRITES, WAIT_MS), WRITES);
    ck_assert_uint_eq(((volatile uint8_t *)buf)[0], WRITES);
    /* Blocked again (nothing is timed); the sender dies without a word. */
    te_test_sleep_ms(50);
    ck_assert_msg(te_peer_status(e, 0, p) == 0, "sender down while alive: %s",
                  te_last_error());
    kill(child, SIGKILL);
    int st;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert_msg(te_test_wait_peer_down(e, 0, p, WAIT_MS),
                  "the blocked receiver did not see its sender die");
    ck_assert_int_eq(te_mr_dereg(e, mr), 0);
    te_engine_destroy(e);
    close(rd);
    close(wr);
}
END_TEST

int main(void)
{
    te_test_skip_without(engine(SENDER), "efa plugin over shm");
    return TE_TEST_RUN("efa_shm_bell_twoproc",
                       TE_TCASE_FULL("bell", 2 * WAIT_MS / 1000 + 30, NULL,
                                     NULL,
                                     blocked_receiver_takes_each_write_and_sees_the_sender_die));
}
