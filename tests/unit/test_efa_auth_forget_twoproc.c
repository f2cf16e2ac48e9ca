/* The efa plugin forgets the authentication of a same-host remote that
 * has exited (plugins/efa/efa_auth.c forget_exited) or said goodbye
 * (efa_auth_bye_verify): a process that authenticates, writes to us and
 * exits leaves no record behind, and the next one authenticates from
 * scratch. Two forked initiators in turn write a WriteImm to this
 * process's keyed engine over libfabric's shm and exit, the first without
 * goodbyes (efa.bye_wait_ms = 0: its exit is what frees the record), the
 * second with them; each exit must be followed by the plugin's "forgot the
 * authentication of pid N" within the deadline, and the second write must
 * land like the first. Without the rules no record is ever freed (the line
 * never comes). Skipped (77) without the efa plugin or libfabric's shm. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "te/te.h"
#include "te_test.h"

enum { LEN = 4096, DEADLINE_MS = 20000 };

static const char *const INI =
    "[engine]\nplugin = efa\nlog_level = 2\n"
    "auth_key = efa-forget-test-secret-0123\n[efa]\nprovider = shm\n";

/* The initiator: writes one WriteImm (imm) to the endpoint it is handed,
 * waits for the completion, says 'w' and exits (goodbyes: whether its
 * engine says goodbye as it closes). */
static int initiator(int to_parent, int from_parent, uint32_t imm,
                     int goodbyes)
{
    char ini[256];
    snprintf(ini, sizeof(ini), "%s%s", INI,
             goodbyes ? "" : "bye_wait_ms = 0\n");
    uint8_t addr[TE_ADDR_MAX];
    size_t alen;
    te_mr_desc d;
    te_engine *e;
    uint8_t *buf = aligned_alloc(4096, LEN);
    te_mr *mr = NULL;
    te_peer p;
    if (te_test_recv_endpoint(from_parent, addr, &alen, &d) ||
        te_test_engine_try(ini, &e) || !buf ||
        te_mr_reg(e, 0, buf, LEN, 0, TE_MEM_HOST, &mr) ||
        te_peer_add(e, 0, addr, alen, &p)) {
        fprintf(stderr, "initiator: %s\n", te_last_error());
        return 2;
    }
    memset(buf, (int)imm, LEN);
    te_request r = te_test_write(p, mr, &d, LEN, DEADLINE_MS);
    r.flags |= TE_F_IMM;
    r.imm = imm;
    te_completion c;
    if (te_submit(e, &r) <= 0 || te_poll_completions(e, &c, 1,
                                                     DEADLINE_MS) != 1 ||
        c.status) {
        fprintf(stderr, "initiator: the write failed: %s\n", te_last_error());
        return 3;
    }
    char said = 'w';
    te_test_write_all(to_parent, &said, 1);
    te_mr_dereg(e, mr);
    te_engine_destroy(e);
    free(buf);
    return 0;
}

static atomic_int watched_pid, forgot;

static void sink(int level, const char *origin, const char *msg, void *arg)
{
    (void)arg;
    unsigned pid = 0;
    const char *at = strstr(msg, "forgot the authentication of pid ");
    if (!strcmp(origin, "efa") && at &&
        sscanf(at, "forgot the authentication of pid %u", &pid) == 1 &&
        (int)pid == atomic_load(&watched_pid))
        atomic_store(&forgot, strstr(at, "its goodbye came") ? 2 : 1);
    if (level <= 1)
        fprintf(stderr, "%s: %s\n", origin, msg);
}

START_TEST(exited_initiators_are_forgotten)
{
    /* Both initiators forked before this process has engine threads. */
    int wr[2], rd[2];
    pid_t child[2];
    for (int i = 0; i < 2; i++) {
        child[i] = te_test_fork(&wr[i], &rd[i]);
        if (child[i] == 0)
            _exit(initiator(wr[i], rd[i], 41 + (uint32_t)i, i == 1));
    }
    te_set_log_fn(sink, NULL);
    te_engine *e = te_test_engine(INI);
    uint8_t *buf = aligned_alloc(4096, LEN);
    memset(buf, 0, LEN);
    te_mr_desc d;
    te_mr *mr = te_test_reg(e, buf, LEN, TE_MR_REMOTE_WRITE, &d);
    for (int i = 0; i < 2; i++) {
        uint32_t imm = 41 + (uint32_t)i;
        atomic_store(&watched_pid, (int)child[i]);
        atomic_store(&forgot, 0);
        ck_assert_int_eq(te_test_send_endpoint(wr[i], e, &d), 0);
        ck_assert_uint_eq(te_test_wait_banked(e, imm, 1, DEADLINE_MS), 1);
        ck_assert_int_eq(((volatile uint8_t *)buf)[LEN - 1], imm);
        char said = 0;
        ck_assert_int_eq(te_test_read_all(rd[i], &said, 1), 0);
        ck_assert_int_eq(said, 'w');
        int st = 0;
        ck_assert_int_eq(waitpid(child[i], &st, 0), child[i]);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                      "initiator %d: status 0x%x", i, st);
        /* 1: freed at its exit; 2: at its goodbye. */
        int how = te_test_wait_int(&forgot, i == 1 ? 2 : 1, DEADLINE_MS);
        ck_assert_msg(how == (i == 1 ? 2 : 1), "initiator %d: the record of "
                      "exited pid %d was %s", i, (int)child[i],
                      how ? "freed, but not by its goodbye" : "kept");
        close(rd[i]);
        close(wr[i]);
    }
    ck_assert_int_eq(te_mr_dereg(e, mr), 0);
    te_engine_destroy(e);
    free(buf);
    te_set_log_fn(NULL, NULL);
}
END_TEST

int main(void)
{
    te_test_require("[engine]\nplugin = efa\n[efa]\nprovider = shm\n",
                    "efa plugin with libfabric's shm");
    return TE_TEST_RUN("efa_auth_forget",
        TE_TCASE_FULL("twoproc", 90, NULL, NULL,
                      exited_initiators_are_forgotten));
}
