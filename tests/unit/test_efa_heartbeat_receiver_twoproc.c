/* A receiver that never writes to its sender learns of the sender's death
 * from a heartbeat (a zero-length write without a key, core/heartbeat.c),
 * not only at an ImmCounter deadline: a forked sender writes three
 * immediates to the parent, which has it as a peer and never writes to it,
 * and is then killed (SIGKILL: no goodbye). Over efa (shm and tcp;ofi_rxm)
 * nothing else tells the receiver: shm's guard looks at a peer's process
 * when something is posted to it, tcp reports a lost connection on a
 * posted operation. With engine.heartbeat_keyless = false the receiver
 * keeps the dead sender live, as before that key. Skipped (77) where the
 * efa plugin or the provider is not there. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "te/te.h"
#include "te_test.h"

enum { IMM = 7, WRITES = 3, WAIT_MS = 20000 };

static const char *const SHM = "[efa]\nprovider = shm\n";
static const char *const TCP =
    "[efa]\nprovider = \"tcp;ofi_rxm\"\nnode = 127.0.0.1\n";

static te_engine *engine(const char *efa, const char *extra)
{
    char ini[512];
    snprintf(ini, sizeof(ini),
             "[engine]\nplugin = efa\nheartbeat_ms = 200\n"
             "peer_timeout_ms = 3000\n%s%s", extra, efa);
    te_engine *e = NULL;
    te_test_engine_try(ini, &e);
    return e;
}

/* The sender: adds the receiver, writes WRITES immediates to it, hands
 * over its own address, then waits to be killed. */
static int sender(const char *efa, int to_parent, int from_parent)
{
    te_engine *e = engine(efa, "");
    static uint8_t src[64];
    te_mr *mr;
    te_peer p;
    te_mr_desc d;
    if (te_test_child_peer(from_parent, e, src, sizeof(src), &mr, &p, &d))
        return 2;
    for (int i = 0; i < WRITES; i++) {
        te_request r = te_test_write(p, mr, &d, sizeof(src), WAIT_MS);
        r.flags = TE_F_IMM;
        r.imm = IMM;
        if (te_submit(e, &r) <= 0) {
            fprintf(stderr, "sender: %s\n", te_last_error());
            return 2;
        }
    }
    te_test_complete(e, WRITES, WAIT_MS);
    if (te_test_send_endpoint(to_parent, e, &d))
        return 2;
    for (;;)
        pause();
}

/* Forks the sender, takes its immediates, kills it; returns the
 * receiver's view of it after up to wait_ms (te_peer_status). */
static int receiver_after_kill(const char *efa, const char *extra,
                               int wait_ms)
{
    /* Forked before this process starts threads (TSan's rule). */
    int wr, rd;
    pid_t child = te_test_fork(&wr, &rd);
    if (child == 0)
        _exit(sender(efa, wr, rd));
    te_engine *e = engine(efa, extra);
    static uint8_t buf[4096];
    te_mr *mr = te_test_reg(e, buf, sizeof(buf), TE_MR_REMOTE_WRITE, NULL);
    te_mr_desc d;
    ck_assert_int_eq(te_mr_describe(mr, &d), 0);
    ck_assert_int_eq(te_test_send_endpoint(wr, e, &d), 0);
    ck_assert_uint_eq(te_test_wait_banked(e, IMM, WRITES, WAIT_MS), WRITES);
    te_mr_desc sd;
    te_peer p = te_test_recv_peer(rd, e, &sd);
    /* Live while the sender lives (and answers the probes). */
    te_test_sleep_ms(600);
    ck_assert_msg(te_peer_status(e, 0, p) == 0, "sender down while alive: %s",
                  te_last_error());
    kill(child, SIGKILL);
    int st;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    int down = te_test_wait_peer_down(e, 0, p, wait_ms);
    if (down)
        fprintf(stderr, "receiver: sender down: %s\n", te_last_error());
    ck_assert_int_eq(te_mr_dereg(e, mr), 0);
    te_engine_destroy(e);
    close(rd);
    close(wr);
    return down;
}

START_TEST(receiver_learns_sender_died_shm)
{
    ck_assert_int_ne(receiver_after_kill(SHM, "", WAIT_MS), 0);
}
END_TEST

START_TEST(receiver_learns_sender_died_tcp)
{
    ck_assert_int_ne(receiver_after_kill(TCP, "", WAIT_MS), 0);
}
END_TEST

/* The switch: without keyless probes nothing is posted to the dead sender,
 * so nothing finds it dead (a bounded look, longer than 10 probe periods
 * and the peer timeout's share of them). */
START_TEST(keyless_off_keeps_old_behaviour_tcp)
{
    ck_assert_int_eq(receiver_after_kill(TCP, "heartbeat_keyless = false\n",
                                         2500), 0);
}
END_TEST

int main(void)
{
    te_test_skip_without(engine(SHM, ""), "efa plugin over shm");
    te_test_skip_without(engine(TCP, ""), "efa plugin over tcp;ofi_rxm");
    return TE_TEST_RUN("efa_heartbeat_receiver",
                       TE_TCASE_FULL("receiver", 3 * WAIT_MS / 1000 + 30,
                                     NULL, NULL,
                                     receiver_learns_sender_died_shm,
                                     receiver_learns_sender_died_tcp,
                                     keyless_off_keeps_old_behaviour_tcp));
}
