/* te-kv soak on the loopback plugin: many requests with random cancels,
 * a prefiller joining and one leaving mid-run. The decoder poisons every
 * page and hidden slot it gets back and checks the poison when it hands
 * them out again, so a write landing after its request's pages were
 * returned is counted (must be 0); every request must end exactly once
 * (no lost or duplicated completion), and every completed one must verify
 * byte for byte. TE_KV_SOAK_REQUESTS overrides the count (default 10000). */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "te/kv.h"
#include "kv_test_util.h"

#define WINDOW 8 /* requests in flight */
#define PREFILLERS 3

static te_engine *engine(void) { return kv_test_engine(); }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct outcome {
    atomic_int calls;  /* completions seen: must end at exactly 1 */
    atomic_int status;
};

static struct outcome *g_out;
static uint64_t g_nout;               /* ids 0..g_nout-1 are tracked */
static atomic_int g_unexpected;       /* completions of untracked ids */

static void on_done(uint64_t id, int status, const char *why, void *arg)
{
    (void)why;
    (void)arg;
    if (id >= g_nout) {
        atomic_fetch_add(&g_unexpected, 1);
        return;
    }
    atomic_store(&g_out[id].status, status);
    atomic_fetch_add(&g_out[id].calls, 1);
}

struct member {
    te_engine *e;
    te_kv_prefiller *p;
    uint32_t id;   /* index at the decoder */
    int live;      /* takes new requests */
    int inflight;
};

static void join(te_kv_decoder *d, te_kv_shape s, struct member *m)
{
    m->e = engine();
    te_kv_prefiller_opts o = {.shape = s, .max_pages = 16, .layer_us = 800,
                              .ref_tokens = 128};
    ck_assert_int_eq(te_kv_prefiller_new(m->e, &o, &m->p), 0);
    uint8_t addr[TE_ADDR_MAX];
    size_t len = sizeof(addr);
    ck_assert_int_eq(te_engine_address(m->e, 0, addr, &len), 0);
    ck_assert_msg(te_kv_decoder_add_prefiller(d, addr, len, &m->id) == 0, "%s",
                  te_kv_last_error());
    m->live = 1;
}

START_TEST(random_cancels_no_late_write_no_lost_completion)
{
    const char *env = getenv("TE_KV_SOAK_REQUESTS");
    uint64_t n = env ? strtoull(env, NULL, 10) : 10000;
    if (n < 8)
        n = 8;
    te_kv_shape s;
    ck_assert_int_eq(te_kv_shape_preset("qwen3-235b-a22b", 8192, &s), 0);
    s.layers = 3; /* the real token shape, few layers: many requests */
    te_engine *de = engine();
    te_kv_decoder_opts o = {.shape = s, .pool_pages = 16 * WINDOW,
                            .max_requests = WINDOW, .accept_timeout_ms = 10000,
                            .cancel_timeout_ms = 10000, .poison_freed = 1};
    te_kv_decoder *d;
    ck_assert_int_eq(te_kv_decoder_new(de, &o, &d), 0);
    g_out = calloc(n + 1, sizeof(*g_out));
    g_nout = n + 1;
    struct member m[PREFILLERS] = {{0}};
    join(d, s, &m[0]);
    join(d, s, &m[1]);
    unsigned seed = 12345;
    uint64_t slot_id[WINDOW] = {0}, next = 1, ended = 0;
    uint32_t slot_pf[WINDOW] = {0};
    uint64_t completed = 0, cancelled = 0, verified = 0, cancel_calls = 0;
    double deadline = now_s() + 50; /* bounded in time as well as count */
    while (ended < n && now_s() < deadline) {
        /* Membership changes while requests flow: one joins at n/3, one
         * leaves at 2n/3 (takes no new requests, then goes once idle). */
        if (next == n / 3 && !m[2].e)
            join(d, s, &m[2]);
        if (next >= 2 * n / 3 && m[1].live)
            m[1].live = 0;
        if (!m[1].live && m[1].p && !m[1].inflight) {
            te_kv_prefiller_free(m[1].p);
            te_engine_destroy(m[1].e);
            m[1].p = NULL;
        }
        int progressed = 0;
        for (int w = 0; w < WINDOW; w++) {
            uint64_t id = slot_id[w];
            if (id && atomic_load(&g_out[id].calls)) {
                int st = atomic_load(&g_out[id].status);
                if (st == 0) {
                    ck_assert_msg(te_kv_decoder_verify(d, id) == 0, "%s",
                                  te_kv_last_error());
                    ck_assert_int_eq(te_kv_decoder_release(d, id), 0);
                    completed++;
                    verified++;
                } else {
                    ck_assert_msg(st == -ECANCELED, "request %llu: %d",
                                  (unsigned long long)id, st);
                    cancelled++;
                }
                m[slot_pf[w]].inflight--;
                slot_id[w] = 0;
                ended++;
                progressed = 1;
            }
            if (!slot_id[w] && next <= n) {
                uint32_t k = (uint32_t)(next % PREFILLERS);
                while (!m[k].live)
                    k = (k + 1) % PREFILLERS;
                /* 8..64 tokens: 2..16 pages of 4 tokens */
                uint32_t tokens = 8 + rand_r(&seed) % 57;
                int rc = te_kv_decoder_submit(d, m[k].id, next, tokens, 20000,
                                              on_done, NULL);
                ck_assert_msg(rc == 0, "submit %llu: %s",
                              (unsigned long long)next, te_kv_last_error());
                slot_id[w] = next++;
                slot_pf[w] = k;
                m[k].inflight++;
                progressed = 1;
            }
        }
        /* Cancel a random in-flight request about a third of the time:
         * some before ACCEPT, some between layers, some already done. */
        if (rand_r(&seed) % 3 == 0) {
            uint64_t id = slot_id[rand_r(&seed) % WINDOW];
            if (id && te_kv_decoder_cancel(d, id) == 0)
                cancel_calls++;
        }
        if (!progressed)
            usleep(50);
    }
    ck_assert_msg(ended == n, "only %llu of %llu requests ended in time",
                  (unsigned long long)ended, (unsigned long long)n);
    uint64_t lost = 0, dup = 0;
    for (uint64_t id = 1; id <= n; id++) {
        int c = atomic_load(&g_out[id].calls);
        lost += c == 0;
        dup += c > 1;
    }
    uint64_t late = te_kv_decoder_late_writes(d);
    fprintf(stderr, "kvcache_soak: %llu requests, %llu completed and "
            "verified, %llu cancelled (%llu cancel calls), lost %llu, "
            "duplicated %llu, late writes %llu\n", (unsigned long long)n,
            (unsigned long long)verified, (unsigned long long)cancelled,
            (unsigned long long)cancel_calls, (unsigned long long)lost,
            (unsigned long long)dup, (unsigned long long)late);
    ck_assert_uint_eq(lost, 0);
    ck_assert_uint_eq(dup, 0);
    ck_assert_uint_eq(late, 0);
    ck_assert_uint_eq(completed + cancelled, n);
    ck_assert_uint_gt(cancelled, 0); /* the cancel paths were exercised */
    ck_assert_uint_gt(completed, 0);
    ck_assert_ptr_null(m[1].p);      /* the leaver left */
    uint32_t free_pages;
    te_kv_pool_counts(te_kv_decoder_pool(d), &free_pages, NULL, NULL);
    ck_assert_uint_eq(free_pages, 16 * WINDOW);
    te_kv_decoder_free(d);
    for (int k = 0; k < PREFILLERS; k++)
        if (m[k].p) {
            te_kv_prefiller_free(m[k].p);
            te_engine_destroy(m[k].e);
        }
    te_engine_destroy(de);
    free(g_out);
}
END_TEST

/* A prefiller in a child process. Forked before this process has any
 * engine (a fork of a process with engine threads could inherit a held
 * lock and hang in the child); it starts its engine when the parent
 * writes a byte on fd_pair[0] and sends its address back. */
static pid_t fork_prefiller(te_kv_shape s, int fd_pair[2])
{
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fd_pair), 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* Die with the test if it fails part way. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(0);
        close(fd_pair[0]);
        char go;
        if (read(fd_pair[1], &go, 1) != 1)
            _exit(0); /* the parent went away first */
        te_engine *e = engine();
        /* 64-token prompts: 8 ms per layer, 96 ms per request */
        te_kv_prefiller_opts o = {.shape = s, .max_pages = 16,
                                  .layer_us = 16000, .ref_tokens = 128};
        te_kv_prefiller *p;
        if (te_kv_prefiller_new(e, &o, &p))
            _exit(1);
        uint8_t addr[TE_ADDR_MAX];
        size_t len = sizeof(addr);
        te_engine_address(e, 0, addr, &len);
        uint64_t l = len;
        if (write(fd_pair[1], &l, 8) != 8 ||
            write(fd_pair[1], addr, len) != (ssize_t)len)
            _exit(1);
        for (int i = 0; i < 600; i++) /* bounded: the parent kills us */
            sleep(1);
        _exit(0);
    }
    close(fd_pair[1]);
    return pid;
}

/* Read exactly n bytes within 20 s (a child that never answers is an
 * error, not a hang). */
static void read_within(int fd, void *b, size_t n)
{
    size_t got = 0;
    while (got < n) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ck_assert_msg(poll(&pfd, 1, 20000) == 1, "child prefiller silent "
                      "for 20 s");
        ssize_t r = read(fd, (char *)b + got, n - got);
        ck_assert_msg(r > 0, "child prefiller closed its socket");
        got += (size_t)r;
    }
}

/* Rounds of: requests in flight to a child prefiller and to a live
 * in-process one; the child is SIGKILLed (even rounds) or SIGSTOPped
 * (odd rounds: silent but alive) at a random point. The decoder must fail
 * the child's requests by fencing it (te_mr_revoke of the child's
 * registration), put their pages back, poisoned, and reuse them for the
 * live prefiller's requests. A stopped child is then resumed: it goes on
 * writing with its revoked keys, and none of that may land (late writes
 * 0, reused pages verify). */
START_TEST(killed_and_silent_prefillers_are_fenced_no_late_write)
{
    te_kv_shape s;
    ck_assert_int_eq(te_kv_shape_preset("qwen3-235b-a22b", 8192, &s), 0);
    s.layers = 12;
    enum { ROUNDS = 4 };
    int fds[ROUNDS][2];
    pid_t pids[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) /* before any engine exists here */
        pids[i] = fork_prefiller(s, fds[i]);
    te_engine *de = engine();
    te_kv_decoder_opts o = {.shape = s, .pool_pages = 6 * 16,
                            .max_requests = 8, .accept_timeout_ms = 2000,
                            .cancel_timeout_ms = 2000, .poison_freed = 1};
    te_kv_decoder *d;
    ck_assert_int_eq(te_kv_decoder_new(de, &o, &d), 0);
    const int rounds = ROUNDS, per = 3;
    g_nout = (size_t)rounds * 4 * per + 1 + rounds; /* ids used */
    g_out = calloc(g_nout, sizeof(*g_out));
    struct member live = {0};
    te_kv_prefiller_opts lo = {.shape = s, .max_pages = 16, .layer_us = 1000,
                               .ref_tokens = 128};
    live.e = engine();
    ck_assert_int_eq(te_kv_prefiller_new(live.e, &lo, &live.p), 0);
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    ck_assert_int_eq(te_engine_address(live.e, 0, addr, &alen), 0);
    ck_assert_int_eq(te_kv_decoder_add_prefiller(d, addr, alen, &live.id), 0);
    unsigned seed = 777;
    uint64_t id = 1, fenced = 0, finished_first = 0;
    for (int round = 0; round < rounds; round++) {
        int *fd = fds[round];
        pid_t pid = pids[round];
        char go = 1;
        ck_assert_int_eq(write(fd[0], &go, 1), 1);
        uint64_t len = 0;
        read_within(fd[0], &len, 8);
        ck_assert_uint_le(len, TE_ADDR_MAX);
        read_within(fd[0], addr, len);
        uint32_t child;
        ck_assert_int_eq(te_kv_decoder_add_prefiller(d, addr, len, &child), 0);
        uint64_t first = id;
        uint64_t fenced_before = fenced;
        for (int k = 0; k < per; k++) {
            ck_assert_int_eq(te_kv_decoder_submit(d, child, id++, 64, 1500,
                                                  on_done, NULL), 0);
            ck_assert_int_eq(te_kv_decoder_submit(d, live.id, id++, 64, 20000,
                                                  on_done, NULL), 0);
        }
        /* A random point, but at the latest once only the child's last
         * request is left (it serves one at a time, 96 ms each): on a
         * slow, loaded machine (TSan) all three had finished before a
         * fixed delay, and nothing was ever fenced. */
        int delay_ms = 20 + (int)(rand_r(&seed) % 150);
        for (int t = 0; t < delay_ms; t++) {
            int done = 0;
            for (uint64_t q = first; q < id; q += 2) /* the child's */
                done += atomic_load(&g_out[q].calls) > 0;
            if (done >= per - 1)
                break;
            usleep(1000);
        }
        int silent = round & 1;
        kill(pid, silent ? SIGSTOP : SIGKILL);
        /* Every request of the round ends (bounded by the 1.5 s deadline). */
        for (int i = 0; i < 10000; i++) {
            int all = 1;
            for (uint64_t q = first; q < id; q++)
                all &= atomic_load(&g_out[q].calls) > 0;
            if (all)
                break;
            usleep(1000);
        }
        for (uint64_t q = first; q < id; q++) {
            ck_assert_msg(atomic_load(&g_out[q].calls) == 1,
                          "request %llu ended %d times",
                          (unsigned long long)q, atomic_load(&g_out[q].calls));
            int st = atomic_load(&g_out[q].status);
            int to_child = (q - first) % 2 == 0;
            if (st == 0) {
                finished_first += to_child;
                ck_assert_msg(te_kv_decoder_verify(d, q) == 0, "%s",
                              te_kv_last_error());
                ck_assert_int_eq(te_kv_decoder_release(d, q), 0);
            } else {
                ck_assert_msg(to_child, "request %llu to the live prefiller "
                              "failed: %d", (unsigned long long)q, st);
                fenced++;
            }
        }
        if (fenced == fenced_before)
            fprintf(stderr, "kvcache_soak: round %d: every request to the "
                    "child finished before the %s\n", round,
                    silent ? "stop" : "kill");
        if (silent) {
            /* Wake it: it resumes its layers with revoked keys. Meanwhile
             * the live prefiller fills the same (poisoned) pages. */
            kill(pid, SIGCONT);
            uint64_t again = id;
            for (int k = 0; k < 2 * per; k++)
                ck_assert_int_eq(te_kv_decoder_submit(d, live.id, id++, 64,
                                                      20000, on_done, NULL), 0);
            usleep(150000);
            for (int i = 0; i < 10000; i++) {
                int all = 1;
                for (uint64_t q = again; q < id; q++)
                    all &= atomic_load(&g_out[q].calls) > 0;
                if (all)
                    break;
                usleep(1000);
            }
            for (uint64_t q = again; q < id; q++) {
                ck_assert_int_eq(atomic_load(&g_out[q].status), 0);
                ck_assert_msg(te_kv_decoder_verify(d, q) == 0, "%s",
                              te_kv_last_error());
                ck_assert_int_eq(te_kv_decoder_release(d, q), 0);
            }
            kill(pid, SIGKILL);
        }
        waitpid(pid, NULL, 0);
        close(fd[0]);
        /* The dead child takes no more requests: refused as fenced
         * (-ENOENT), or at the send (-ECONNRESET) once the transport saw
         * it die; the engine may not have seen the hang-up yet (it is
         * asynchronous to waitpid): then accepted, and failed through
         * its callback (a fence) by its 1 s deadline. Never completed,
         * and never both refused and ended. */
        uint64_t dead_id = (uint64_t)rounds * 4 * per + 1 + round;
        int rc = te_kv_decoder_submit(d, child, dead_id, 64, 1000, on_done,
                                      NULL);
        ck_assert_msg(rc == 0 || rc == -ENOENT || rc == -ECONNRESET,
                      "round %d (%s): submit to the dead child: %d (%s); "
                      "%llu fenced, %llu finished so far", round,
                      silent ? "stopped" : "killed", rc, te_kv_last_error(),
                      (unsigned long long)fenced,
                      (unsigned long long)finished_first);
        if (rc == 0) {
            for (int i = 0; i < 20000 && !atomic_load(&g_out[dead_id].calls);
                 i++)
                usleep(1000);
            ck_assert_int_eq(atomic_load(&g_out[dead_id].calls), 1);
            ck_assert_int_ne(atomic_load(&g_out[dead_id].status), 0);
        } else {
            usleep(10000);
            ck_assert_int_eq(atomic_load(&g_out[dead_id].calls), 0);
        }
    }
    uint64_t late = te_kv_decoder_late_writes(d);
    fprintf(stderr, "kvcache_soak: %d kill/stop rounds: %llu requests "
            "fenced, %llu to the child finished before it died, late writes "
            "%llu\n", rounds, (unsigned long long)fenced,
            (unsigned long long)finished_first, (unsigned long long)late);
    ck_assert_uint_gt(fenced, 0);
    ck_assert_uint_eq(late, 0);
    ck_assert_int_eq(atomic_load(&g_unexpected), 0);
    uint32_t free_pages;
    te_kv_pool_counts(te_kv_decoder_pool(d), &free_pages, NULL, NULL);
    ck_assert_uint_eq(free_pages, 6 * 16);
    te_kv_decoder_free(d);
    te_kv_prefiller_free(live.p);
    te_engine_destroy(live.e);
    te_engine_destroy(de);
    free(g_out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kv_soak");
    TCase *t = tcase_create("soak");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, random_cancels_no_late_write_no_lost_completion);
    tcase_add_test(t, killed_and_silent_prefillers_are_fenced_no_late_write);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
