/* Writes without an immediate over the efa plugin's tcp;ofi_rxm provider,
 * whose bytes move only while the target polls (manual data progress), to
 * a target whose worker sleeps half a second whenever it sees no work.
 * Such writes give the target no completion entry; the plugin tells its
 * worker from the CQ's wait fd that inbound bytes are pending
 * (efa_cq.c inbound_pending, plugin ABI 1.2 host.progressed). Without
 * that, each sleep stalls the stream and 16 MiB do not land within the
 * 20 s deadline (a polling target takes milliseconds). Skipped (77) where
 * the efa plugin or libfabric's tcp;ofi_rxm is not there. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "te/te.h"
#include "te_test.h"

enum { CHUNK = 64 << 10, CHUNKS = 256, DEADLINE_S = 20 };

static te_engine *tcp_engine(int sleepy)
{
    te_engine *e;
    /* idle_wait = sleep: host.progressed is what a sleep-polling worker
     * has (test_idle_wait_efa covers the blocking one). */
    te_test_engine_try(sleepy ? "[engine]\nplugin = efa\nidle_spin_us = 0\n"
                                "idle_spin_max_us = 0\n"
                                "idle_sleep_us = 500000\nidle_wait = sleep\n"
                                "[efa]\nprovider = \"tcp;ofi_rxm\"\nnode = 127.0.0.1\n"
                              : "[engine]\nplugin = efa\n"
                                "[efa]\nprovider = \"tcp;ofi_rxm\"\nnode = 127.0.0.1\n",
                       &e);
    return e;
}

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 13 + 5);
}

/* The target: a sleepy engine whose buffer must fill with the pattern. */
static int target(int to_parent, int from_parent)
{
    size_t sz = (size_t)CHUNK * CHUNKS;
    te_engine *e = tcp_engine(1);
    uint8_t *buf = e ? aligned_alloc(4096, sz) : NULL;
    te_mr *mr = NULL;
    te_mr_desc d;
    if (!buf || te_mr_reg(e, 0, buf, sz, TE_MR_REMOTE_WRITE, TE_MEM_HOST,
                          &mr) || te_mr_describe(mr, &d)) {
        fprintf(stderr, "target: %s\n", te_last_error());
        return 1;
    }
    memset(buf, 0, sz);
    if (te_test_send_endpoint(to_parent, e, &d)) {
        fprintf(stderr, "target: %s\n", te_last_error());
        return 1;
    }
    char go;
    if (te_test_read_all(from_parent, &go, 1))
        return 1;
    /* Wait for the bytes themselves: the writer's completions may come
     * before they are placed here. */
    int64_t end = te_test_now_ms() + DEADLINE_S * 1000;
    size_t ok = 0;
    while (ok < sz && te_test_now_ms() < end) {
        while (ok < sz && buf[ok] == pattern(ok))
            ok++;
        if (ok < sz)
            te_test_sleep_ms(1);
    }
    if (ok < sz)
        fprintf(stderr, "target: %zu of %zu bytes landed after %d s\n", ok,
                sz, DEADLINE_S);
    char done = ok == sz ? 'y' : 'n';
    te_test_write_all(to_parent, &done, 1);
    te_mr_dereg(e, mr);
    te_engine_destroy(e);
    free(buf);
    return ok == sz ? 0 : 1;
}

START_TEST(sleepy_target_receives_writes_without_imm)
{
    int wr, rd;
    pid_t child = te_test_fork(&wr, &rd);
    if (child == 0)
        _exit(target(wr, rd));
    uint8_t addr[TE_ADDR_MAX];
    size_t alen;
    te_mr_desc d;
    ck_assert_int_eq(te_test_recv_endpoint(rd, addr, &alen, &d), 0);

    size_t sz = (size_t)CHUNK * CHUNKS;
    te_engine *e = tcp_engine(0);
    ck_assert_msg(e, "%s", te_last_error());
    uint8_t *src = aligned_alloc(4096, sz);
    for (size_t i = 0; i < sz; i++)
        src[i] = pattern(i);
    te_mr *mr = te_test_reg(e, src, sz, 0, NULL);
    te_peer p;
    ck_assert_msg(te_peer_add(e, 0, addr, alen, &p) == 0, "%s",
                  te_last_error());
    for (uint32_t i = 0; i < CHUNKS; i++) {
        te_request r = te_test_write(p, mr, &d, CHUNK, DEADLINE_S * 1000);
        r.u.xfer.local_off = (uint64_t)i * CHUNK;
        r.u.xfer.remote_off = (uint64_t)i * CHUNK;
        ck_assert_msg(te_submit(e, &r) > 0, "%s", te_last_error());
    }
    int64_t end = te_test_now_ms() + DEADLINE_S * 1000;
    int done = 0;
    while (done < CHUNKS && te_test_now_ms() < end) {
        te_completion c[64];
        int n = te_poll_completions(e, c, 64, 100);
        for (int i = 0; i < n; i++)
            ck_assert_msg(c[i].status == 0, "write %d failed: %d", done + i,
                          c[i].status);
        done += n > 0 ? n : 0;
    }
    ck_assert_msg(done == CHUNKS, "%d of %d writes done after %d s", done,
                  CHUNKS, DEADLINE_S);
    char go = 'g', landed = 'n';
    ck_assert_int_eq(te_test_write_all(wr, &go, 1), 0);
    ck_assert_int_eq(te_test_read_all(rd, &landed, 1), 0);
    int st = 0;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert_msg(landed == 'y' && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the target's bytes did not all land (see its stderr)");
    ck_assert_int_eq(te_mr_dereg(e, mr), 0);
    te_engine_destroy(e);
    free(src);
    close(rd);
    close(wr);
}
END_TEST

int main(void)
{
    te_test_skip_without(tcp_engine(0), "efa plugin over tcp;ofi_rxm");
    return TE_TEST_RUN("efa_tcp_progress",
                       TE_TCASE_FULL("progress", 3 * DEADLINE_S + 30, NULL, NULL,
                         sleepy_target_receives_writes_without_imm));
}
