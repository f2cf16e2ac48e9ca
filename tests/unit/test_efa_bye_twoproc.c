/* A writer learns that its target closed its engine in a process that
 * lives on (plugins/efa/efa_bye.h, docs/efa.md "Orderly close"), over
 * libfabric's shm, two processes, the target never adding the writer as a
 * peer (one-sided: nothing of the writer's is in its address vector):
 *  - with a job secret the target's goodbye reaches the writer anyway (it
 *    knows every remote that authenticated with it);
 *  - without one the target cannot name the writer, and shm would take
 *    every write into the closed region and report success; the writer's
 *    heartbeat finds the region gone (plugins/efa/efa_post.c).
 * Either way the writer, with the peer timeout and request timeouts off,
 * reports the target down as closed in order while the target's process
 * still runs. And a keyed target that says goodbye and then exits is
 * still reported closed in order when the writer's next post is what
 * finds the exit (its pidfd), before any poll read the goodbye: the exit
 * waits for that poll (plugins/efa/efa_post.c check_alive). Forked
 * target: "twoproc" puts it in the tsan-twoproc pass.
 * Skipped (77) without the efa plugin or libfabric's shm. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "te/te.h"
#include "te_test.h"

enum { LEN = 4096, DEADLINE_MS = 10000 };

#define KEY "efa-bye-twoproc-secret-0123456"

static void ini_of(char *ini, size_t len, const char *key, int heartbeat_ms)
{
    snprintf(ini, len, "[engine]\nplugin = efa\nheartbeat_ms = %d\n"
             "peer_timeout_ms = 0\nrequest_timeout_ms = 0\n%s%s%s"
             "[efa]\nprovider = shm\n", heartbeat_ms,
             key ? "auth_key = " : "", key ? key : "", key ? "\n" : "");
}

/* The target: hands over its endpoint, waits for 'c', destroys its
 * engine, says 'd', and lives on until the parent closes the pipe (or,
 * with `exits`, exits at once). */
static int target(int to_parent, int from_parent, const char *key, int exits)
{
    char ini[300];
    ini_of(ini, sizeof(ini), key, 0);
    te_engine *e;
    uint8_t *buf = aligned_alloc(4096, LEN);
    te_mr_desc d;
    te_mr *mr;
    if (te_test_engine_try(ini, &e) || !buf ||
        te_mr_reg(e, 0, buf, LEN, TE_MR_REMOTE_WRITE, TE_MEM_HOST, &mr) ||
        te_mr_describe(mr, &d) || te_test_send_endpoint(to_parent, e, &d))
        return 2;
    char cmd = 0;
    if (te_test_read_all(from_parent, &cmd, 1) || cmd != 'c')
        return 3;
    te_mr_dereg(e, mr);
    te_engine_destroy(e);
    char said = 'd';
    te_test_write_all(to_parent, &said, 1);
    while (!exits && read(from_parent, &cmd, 1) > 0) /* alive until told */
        ;
    free(buf);
    return 0;
}

/* The writer's side, up to the target's engine closed: its engine from
 * `ini`, the target added, one write done, then 'c' sent and 'd' read. */
struct writer {
    te_engine *e;
    uint8_t *buf;
    te_mr *mr;
    te_mr_desc d;
    te_peer p;
    te_request r;
};

static void writer_until_closed(struct writer *w, const char *ini, int wr,
                                int rd)
{
    w->e = te_test_engine(ini);
    uint8_t addr[TE_ADDR_MAX];
    size_t alen;
    ck_assert_int_eq(te_test_recv_endpoint(rd, addr, &alen, &w->d), 0);
    w->buf = aligned_alloc(4096, LEN);
    memset(w->buf, 7, LEN);
    w->mr = te_test_reg(w->e, w->buf, LEN, 0, NULL);
    ck_assert_msg(te_peer_add(w->e, 0, addr, alen, &w->p) == 0, "%s",
                  te_last_error());
    w->r = te_test_write(w->p, w->mr, &w->d, 64, DEADLINE_MS);
    ck_assert_int_gt(te_submit(w->e, &w->r), 0);
    te_completion c = te_test_completion(w->e, DEADLINE_MS);
    ck_assert_msg(c.status == 0, "%s", c.reason);
    char cmd = 'c', said = 0;
    ck_assert_int_eq(te_test_write_all(wr, &cmd, 1), 0);
    ck_assert_int_eq(te_test_read_all(rd, &said, 1), 0);
    ck_assert_int_eq(said, 'd');
}

static void writer_close(struct writer *w)
{
    ck_assert_int_eq(te_mr_dereg(w->e, w->mr), 0);
    te_engine_destroy(w->e);
    free(w->buf);
}

static void writer_learns(const char *key, const char *how)
{
    int wr, rd;
    pid_t child = te_test_fork(&wr, &rd);
    if (child == 0)
        _exit(target(wr, rd, key, 0));
    char ini[300];
    ini_of(ini, sizeof(ini), key, key ? 0 : 50);
    struct writer w;
    writer_until_closed(&w, ini, wr, rd);
    int st = te_test_wait_peer_down(w.e, 0, w.p, DEADLINE_MS);
    ck_assert_msg(st == -ECONNRESET, "the closed target was not reported "
                  "down within %d ms (status %d)", DEADLINE_MS, st);
    ck_assert_msg(strstr(te_last_error(), "in order") &&
                  strstr(te_last_error(), how), "%s", te_last_error());
    /* Its process still runs: this was no exit seen by a pidfd. */
    ck_assert_int_eq(waitpid(child, NULL, WNOHANG), 0);

    close(wr);
    int wst = 0;
    ck_assert_int_eq(waitpid(child, &wst, 0), child);
    ck_assert_msg(WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "target: 0x%x",
                  wst);
    close(rd);
    writer_close(&w);
}

/* Caller mode, so that nothing polls between the target's exit and the
 * post that reads its pidfd. */
START_TEST(a_goodbye_then_exit_is_an_orderly_close_at_the_next_post)
{
    int wr, rd;
    pid_t child = te_test_fork(&wr, &rd);
    if (child == 0)
        _exit(target(wr, rd, KEY, 1));
    char ini[300];
    ini_of(ini, sizeof(ini), KEY, 0);
    strcat(ini, "[engine]\nprogress = caller\n");
    struct writer w;
    writer_until_closed(&w, ini, wr, rd);
    int wst = 0;
    ck_assert_int_eq(waitpid(child, &wst, 0), child);
    te_test_sleep_ms(200); /* the shm guard sees the exit */
    /* Its goodbye waits unread: nobody progressed this engine since. */
    ck_assert_int_gt(te_submit(w.e, &w.r), 0);
    te_completion c = te_test_completion(w.e, DEADLINE_MS);
    ck_assert_int_ne(c.status, 0);
    ck_assert_int_eq(te_peer_status(w.e, 0, w.p), -ECONNRESET);
    ck_assert_msg(strstr(te_last_error(), "in order") &&
                  strstr(te_last_error(), "goodbye"), "%s", te_last_error());
    close(wr);
    close(rd);
    writer_close(&w);
}
END_TEST

START_TEST(a_keyed_target_says_goodbye_to_a_writer_it_never_added)
{
    writer_learns(KEY, "goodbye");
}
END_TEST

START_TEST(an_unkeyed_writer_finds_the_shm_region_gone)
{
    writer_learns(NULL, "shm region is gone");
}
END_TEST

int main(void)
{
    te_test_require("[engine]\nplugin = efa\n[efa]\nprovider = shm\n",
                    "efa plugin with libfabric's shm");
    return TE_TEST_RUN("efa_bye_twoproc",
        TE_TCASE_FULL("twoproc", 60, NULL, NULL,
                      a_keyed_target_says_goodbye_to_a_writer_it_never_added,
                      an_unkeyed_writer_finds_the_shm_region_gone,
                      a_goodbye_then_exit_is_an_orderly_close_at_the_next_post));
}
