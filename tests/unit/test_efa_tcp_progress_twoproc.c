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

#define SKIP_RC 77

enum { CHUNK = 64 << 10, CHUNKS = 256, DEADLINE_S = 20 };

static te_engine *tcp_engine(int sleepy)
{
    te_config *c = te_config_new();
    te_config_set(c, "engine", "plugin", "efa");
    te_config_set(c, "efa", "provider", "tcp;ofi_rxm");
    te_config_set(c, "efa", "node", "127.0.0.1");
    if (sleepy) {
        te_config_set(c, "engine", "idle_spin_us", "0");
        te_config_set(c, "engine", "idle_sleep_us", "500000");
    }
    te_engine *e = NULL;
    int rc = te_engine_create(c, &e);
    te_config_free(c);
    return rc ? NULL : e;
}

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 13 + 5);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int write_all(int fd, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const char *)p + done, n - done);
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t r = read(fd, (char *)p + done, n - done);
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

/* The target: a sleepy engine whose buffer must fill with the pattern. */
static int target(int to_parent, int from_parent)
{
    size_t sz = (size_t)CHUNK * CHUNKS;
    te_engine *e = tcp_engine(1);
    uint8_t *buf = e ? aligned_alloc(4096, sz) : NULL;
    te_mr *mr = NULL;
    te_mr_desc d;
    uint8_t msg[TE_ADDR_MAX + 1024];
    size_t alen = TE_ADDR_MAX, dlen = 1024;
    if (!buf || te_mr_reg(e, 0, buf, sz, TE_MR_REMOTE_WRITE, TE_MEM_HOST,
                          &mr) || te_mr_describe(mr, &d) ||
        te_engine_address(e, 0, msg + 8, &alen) ||
        te_desc_serialize(&d, msg + 8 + alen, &dlen)) {
        fprintf(stderr, "target: %s\n", te_last_error());
        return 1;
    }
    memset(buf, 0, sz);
    uint32_t lens[2] = {(uint32_t)alen, (uint32_t)dlen};
    memcpy(msg, lens, 8);
    if (write_all(to_parent, msg, 8 + alen + dlen))
        return 1;
    char go;
    if (read_all(from_parent, &go, 1))
        return 1;
    /* Wait for the bytes themselves: the writer's completions may come
     * before they are placed here. */
    double end = now_s() + DEADLINE_S;
    size_t ok = 0;
    while (ok < sz && now_s() < end) {
        while (ok < sz && buf[ok] == pattern(ok))
            ok++;
        if (ok < sz) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
    if (ok < sz)
        fprintf(stderr, "target: %zu of %zu bytes landed after %d s\n", ok,
                sz, DEADLINE_S);
    char done = ok == sz ? 'y' : 'n';
    write_all(to_parent, &done, 1);
    te_mr_dereg(e, mr);
    te_engine_destroy(e);
    free(buf);
    return ok == sz ? 0 : 1;
}

START_TEST(sleepy_target_receives_writes_without_imm)
{
    int up[2], down[2];
    ck_assert_int_eq(pipe(up), 0);
    ck_assert_int_eq(pipe(down), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        close(up[0]);
        close(down[1]);
        _exit(target(up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    uint32_t lens[2];
    ck_assert_int_eq(read_all(up[0], lens, 8), 0);
    ck_assert(lens[0] <= TE_ADDR_MAX && lens[1] <= 1024);
    uint8_t addr[TE_ADDR_MAX], desc[1024];
    ck_assert_int_eq(read_all(up[0], addr, lens[0]), 0);
    ck_assert_int_eq(read_all(up[0], desc, lens[1]), 0);
    te_mr_desc d;
    ck_assert_int_eq(te_desc_parse(desc, lens[1], &d), 0);

    size_t sz = (size_t)CHUNK * CHUNKS;
    te_engine *e = tcp_engine(0);
    ck_assert_msg(e, "%s", te_last_error());
    uint8_t *src = aligned_alloc(4096, sz);
    for (size_t i = 0; i < sz; i++)
        src[i] = pattern(i);
    te_mr *mr;
    ck_assert_int_eq(te_mr_reg(e, 0, src, sz, 0, TE_MEM_HOST, &mr), 0);
    te_peer p;
    ck_assert_msg(te_peer_add(e, 0, addr, lens[0], &p) == 0, "%s",
                  te_last_error());
    for (uint32_t i = 0; i < CHUNKS; i++) {
        te_request r;
        te_request_init(&r, TE_OP_WRITE);
        r.u.xfer.peer = p;
        r.u.xfer.local = mr;
        r.u.xfer.remote = &d;
        r.u.xfer.local_off = (uint64_t)i * CHUNK;
        r.u.xfer.remote_off = (uint64_t)i * CHUNK;
        r.u.xfer.len = CHUNK;
        r.timeout_ms = DEADLINE_S * 1000;
        ck_assert_msg(te_submit(e, &r) > 0, "%s", te_last_error());
    }
    double end = now_s() + DEADLINE_S;
    int done = 0;
    while (done < CHUNKS && now_s() < end) {
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
    ck_assert_int_eq(write_all(down[1], &go, 1), 0);
    ck_assert_int_eq(read_all(up[0], &landed, 1), 0);
    int st = 0;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert_msg(landed == 'y' && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the target's bytes did not all land (see its stderr)");
    ck_assert_int_eq(te_mr_dereg(e, mr), 0);
    te_engine_destroy(e);
    free(src);
    close(up[0]);
    close(down[1]);
}
END_TEST

int main(void)
{
    te_engine *probe = tcp_engine(0);
    if (!probe) {
        printf("skip: efa plugin over tcp;ofi_rxm unavailable: %s\n",
               te_last_error());
        return SKIP_RC;
    }
    te_engine_destroy(probe);
    return TE_TEST_RUN("efa_tcp_progress",
                       TE_TCASE_FULL("progress", 3 * DEADLINE_S + 30, NULL, NULL,
                         sleepy_target_receives_writes_without_imm));
}
