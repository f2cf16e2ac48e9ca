/* Two engines of one process over the efa plugin's shm provider: a peer
 * that is another engine of this process, destroyed while the first still
 * has it as a peer (heartbeats every 20 ms), becomes a down peer, not a
 * crash (libfabric's shm reaches it through memory that closed with it:
 * plugins/efa/efa_local.h). And shm regions are named per process
 * incarnation, those of dead processes removed (efa_shm_name.h). Skipped
 * (77) where the efa plugin or libfabric's shm is not there. */
#include <signal.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "te/te.h"
#include "te_test.h"

static te_engine *shm_engine(void)
{
    te_engine *e;
    te_test_engine_try("[engine]\nplugin = efa\nheartbeat_ms = 20\n"
                       "[efa]\nprovider = shm\n", &e);
    return e;
}

START_TEST(destroyed_in_process_peer_is_down_not_a_crash)
{
    te_engine *a = shm_engine(), *b = shm_engine();
    ck_assert_msg(a && b, "%s", te_last_error());
    static char abuf[4096] __attribute__((aligned(4096)));
    static char bbuf[4096] __attribute__((aligned(4096)));
    te_mr_desc d;
    te_mr *ma = te_test_reg(a, abuf, sizeof(abuf), 0, NULL);
    te_mr *mb = te_test_reg(b, bbuf, sizeof(bbuf), TE_MR_REMOTE_WRITE, &d);
    te_peer p = te_test_peer(a, b);
    uint8_t addr[TE_ADDR_MAX]; /* added again once b is gone */
    size_t len = sizeof(addr);
    ck_assert_int_eq(te_engine_address(b, 0, addr, &len), 0);
    memset(abuf, 0x5a, 64);
    te_request r = te_test_write(p, ma, &d, 64, 5000);
    ck_assert_int_gt(te_submit(a, &r), 0);
    te_completion c;
    ck_assert_int_eq(te_poll_completions(a, &c, 1, 5000), 1);
    ck_assert_int_eq(c.status, 0);
    /* shm completes the write at transmit (docs/efa.md): the bytes land
     * when b's worker progresses, which may be after a's completion (1 run
     * in 6 under qemu-user, docs/arm64.md). */
    for (int i = 0; i < 500 && ((volatile char *)bbuf)[63] != 0x5a; i++)
        usleep(10000);
    ck_assert_int_eq(((volatile char *)bbuf)[63], 0x5a);

    ck_assert_int_eq(te_mr_dereg(b, mb), 0);
    te_engine_destroy(b); /* a's heartbeats to b go on */
    int st = te_test_wait_peer_down(a, 0, p, 5000);
    ck_assert_msg(st == -ECONNRESET, "peer status %d after 5 s", st);
    /* The transport's own words, not only "unreachable" (efa_cq.c
     * taking, through tpc_cq_take: the PEER_DOWN's poll sets them). */
    ck_assert_msg(strstr(te_last_error(), "is down: its endpoint in this "
                         "process was closed"), "%s", te_last_error());
    /* A write to it fails with the reason; nothing crashes. */
    int64_t id = te_submit(a, &r);
    if (id > 0) {
        ck_assert_int_eq(te_poll_completions(a, &c, 1, 5000), 1);
        ck_assert_int_eq(c.status, -ECONNRESET);
    } else {
        ck_assert_int_eq(id, -ECONNRESET);
    }
    /* Its address, added again, is refused naming the cause. */
    te_peer again;
    ck_assert_int_ne(te_peer_add(a, 0, addr, len, &again), 0);
    ck_assert_msg(strstr(te_last_error(), "closed"), "%s", te_last_error());
    ck_assert_int_eq(te_mr_dereg(a, ma), 0);
    te_engine_destroy(a);
}
END_TEST

/* Two peers lost at once: each one's reason is its own (the plugin says
 * one PEER_DOWN per poll, so the poll's error the core quotes names the
 * peer it reports). Both are seen down by the same housekeeping pass. */
START_TEST(peers_lost_together_each_named)
{
    te_engine *a = shm_engine(), *b = shm_engine(), *c = shm_engine();
    ck_assert_msg(a && b && c, "%s", te_last_error());
    static char abuf[4096] __attribute__((aligned(4096)));
    static char tbuf[2][4096] __attribute__((aligned(4096)));
    te_engine *t[2] = {b, c};
    te_peer ps[2];
    te_mr *ma = te_test_reg(a, abuf, sizeof(abuf), 0, NULL);
    /* A write to each first: a's heartbeats then go on to both (a
     * heartbeat needs a place the peer registered for writes). */
    for (int i = 0; i < 2; i++) {
        te_mr_desc d;
        te_mr *m = te_test_reg(t[i], tbuf[i], 4096, TE_MR_REMOTE_WRITE, &d);
        ps[i] = te_test_peer(a, t[i]);
        te_request r = te_test_write(ps[i], ma, &d, 64, 5000);
        ck_assert_int_gt(te_submit(a, &r), 0);
        te_completion cq;
        ck_assert_int_eq(te_poll_completions(a, &cq, 1, 5000), 1);
        ck_assert_int_eq(cq.status, 0);
        ck_assert_int_eq(te_mr_dereg(t[i], m), 0);
    }
    te_engine_destroy(b);
    te_engine_destroy(c);
    char why[2][512];
    for (int i = 0; i < 2; i++) {
        int st = te_test_wait_peer_down(a, 0, ps[i], 5000);
        ck_assert_msg(st == -ECONNRESET, "peer %d: status %d after 5 s", i,
                      st);
        snprintf(why[i], sizeof(why[i]), "%s", te_last_error());
        ck_assert_msg(strstr(why[i], "its endpoint in this process was "
                             "closed"), "%s", why[i]);
    }
    /* "... peer 0x<plugin handle> is down: ...": different peers. */
    const char *h0 = strstr(why[0], "peer 0x"), *h1 = strstr(why[1], "peer 0x");
    ck_assert_msg(h0 && h1, "%s | %s", why[0], why[1]);
    ck_assert_msg(strncmp(h0, h1, 24) != 0, "both reasons name one peer: "
                  "%s | %s", why[0], why[1]);
    ck_assert_int_eq(te_mr_dereg(a, ma), 0);
    te_engine_destroy(a);
}
END_TEST

static unsigned long long start_time_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long long v = 0;
    int field = 2;
    for (char *t = p ? strtok(p + 1, " ") : NULL; t; t = strtok(NULL, " "))
        if (++field == 22) {
            v = strtoull(t, NULL, 10);
            break;
        }
    return v;
}

static int shm_exists(const char *name)
{
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

START_TEST(regions_named_per_process_and_dead_ones_removed)
{
    /* A region as a killed process of ours would leave it. */
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    unsigned long long cstart = 0;
    for (int i = 0; i < 1000 && !cstart; i++)
        cstart = start_time_of(child);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    char dead[64], live[64];
    snprintf(dead, sizeof(dead), "/te-%d-%llx-0", (int)child, cstart);
    snprintf(live, sizeof(live), "/te-%d-%llx-999", (int)getpid(),
             start_time_of(getpid()));
    int fd = shm_open(dead, O_CREAT | O_RDWR, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_ge(fd = shm_open(live, O_CREAT | O_RDWR, 0600), 0);
    close(fd);
    te_engine *a = shm_engine(); /* the plugin's start removes dead ones */
    ck_assert_msg(a, "%s", te_last_error());
    ck_assert_msg(!shm_exists(dead), "%s (its process is gone) was kept", dead);
    ck_assert_msg(shm_exists(live), "%s (this process) was removed", live);
    shm_unlink(live);
    /* The engine's own endpoint has such a name. */
    char mine[32];
    snprintf(mine, sizeof(mine), "te-%010d-", (int)getpid()); /* fixed width */
    int found = 0;
    DIR *d = opendir("/dev/shm");
    for (struct dirent *de; d && (de = readdir(d));)
        found += !strncmp(de->d_name, mine, strlen(mine));
    if (d)
        closedir(d);
    ck_assert_int_gt(found, 0);
    te_engine_destroy(a);
}
END_TEST

int main(void)
{
    te_test_skip_without(shm_engine(), "efa plugin with libfabric's shm");
    return TE_TEST_RUN("efa_inprocess",
                       TE_TCASE_FULL("close", 60, NULL, NULL,
                         destroyed_in_process_peer_is_down_not_a_crash,
                         peers_lost_together_each_named,
                         regions_named_per_process_and_dead_ones_removed));
}
