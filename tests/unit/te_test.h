/*
 * Shared helpers of the Check unit tests (tests/unit/te_test.c, built once
 * as the static library te_test and linked by every tests/unit/test_*.c).
 *
 *  - the Check runner: a suite described as a table of test cases
 *    (TE_TEST_MAIN / TE_TEST_RUN), run with CK_NORMAL, so the CK_* variables
 *    of Check (CK_RUN_CASE, CK_DEFAULT_TIMEOUT, CK_TIMEOUT_MULTIPLIER,
 *    CK_FORK, CK_TAP_LOG_FILE_NAME, ...) act as they always did;
 *  - engines from an INI string, two engines joined by a peer with a
 *    registered region on each (te_test_pair), an engine that is its own
 *    peer (te_test_self), registration, and waits with deadlines;
 *  - pipe helpers for tests that fork a peer and hand it an address and a
 *    descriptor.
 *
 * Every helper asserts with Check, so a failure names the test that called
 * it. Only the public API (te/te.h) is used here.
 */
#ifndef TE_TEST_H
#define TE_TEST_H

#include <check.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "te/te.h"

/* ------------------------------------------------------------- runner */

/* One TCase: its name, tests (NULL-terminated), the timeout in seconds
 * (0: Check's default, CK_DEFAULT_TIMEOUT), an optional checked fixture,
 * and tests run as loop tests with _i from 0 to loop_end - 1 (added after
 * the plain ones). */
typedef struct te_tcase {
    const char *name;
    const TTest *const *tests;
    double timeout;
    void (*setup)(void);
    void (*teardown)(void);
    const TTest *const *loop_tests;
    int loop_end;
} te_tcase;

#define TE_TESTS(...) ((const TTest *const[]){__VA_ARGS__, NULL})
/* A case with Check's default timeout and no fixture. */
#define TE_TCASE(name, ...) {(name), TE_TESTS(__VA_ARGS__), 0, NULL, NULL, NULL, 0}
/* A case with a timeout (0: default) and a checked fixture (or NULLs). */
#define TE_TCASE_FULL(name, timeout, setup, teardown, ...)                     \
    {(name), TE_TESTS(__VA_ARGS__), (timeout), (setup), (teardown), NULL, 0}

/* Runs the suite of the cases (terminated by a case with a NULL name) and
 * returns EXIT_SUCCESS when no test failed, EXIT_FAILURE otherwise. */
int te_test_run(const char *suite, const te_tcase *cases);

#define TE_TEST_RUN(suite, ...)                                                \
    te_test_run((suite), (const te_tcase[]){__VA_ARGS__, {NULL, NULL, 0, NULL, NULL, NULL, 0}})
#define TE_TEST_MAIN(suite, ...)                                               \
    int main(void) { return TE_TEST_RUN(suite, __VA_ARGS__); }

/* ------------------------------------------------------------ engines */

/* An engine from an INI string (asserted to be created, the error named).
 * NULL: te_engine_create(NULL, ...), the defaults (loopback) or $TE_CONFIG;
 * "" : the defaults alone. */
te_engine *te_test_engine(const char *ini);
/* The same without asserting (so also outside a test: main, a forked
 * child): the INI's parse error or te_engine_create's result; *e is NULL
 * when it failed. */
int te_test_engine_try(const char *ini, te_engine **e);

/* A test program's guard: when probe is NULL (the engine a test needs
 * could not be created), prints "SKIP: no WHAT here: <error>" and exits 77
 * (ctest's SKIP_RETURN_CODE); otherwise destroys probe and returns. */
void te_test_skip_without(te_engine *probe, const char *what);
/* Exit 77 (skipped, naming what and why) unless an engine can be made from
 * ini; the probe engine is destroyed again. */
void te_test_require(const char *ini, const char *what);

/* `to`'s address of group 0 added as a peer of `from` (group 0). */
te_peer te_test_peer(te_engine *from, te_engine *to);

/* buf..buf+len registered on group 0 with `access`, host memory; *desc
 * (when not NULL) describes it. */
te_mr *te_test_reg(te_engine *e, void *buf, size_t len, uint32_t access,
                   te_mr_desc *desc);

/* Two engines and a peer from a to b: src (on a, local) and dst (on b,
 * remotely writable, described by d) of `size` zeroed bytes each. */
typedef struct te_test_pair {
    te_engine *a, *b;
    uint8_t *src, *dst;
    size_t size;
    te_mr *smr, *dmr;
    te_mr_desc d;
    te_peer p;
} te_test_pair;

void te_test_pair_open(te_test_pair *x, const char *a_ini, const char *b_ini,
                       size_t size);
/* dst deregistered, b then a destroyed (src goes with a), buffers freed. */
void te_test_pair_close(te_test_pair *x);

/* A write of len bytes from local to remote (offsets 0), no immediate. */
te_request te_test_write(te_peer peer, te_mr *local, const te_mr_desc *remote,
                         size_t len, int32_t timeout_ms);
/* The same from the pair's src to its dst. */
te_request te_test_pair_write(const te_test_pair *x, size_t len,
                              int32_t timeout_ms);

/* An engine that is its own peer, with buf registered remotely writable
 * and described. */
typedef struct te_test_self {
    te_engine *e;
    te_peer peer;
    te_mr *mr;
    te_mr_desc desc;
} te_test_self;

void te_test_self_open(te_test_self *s, const char *ini, void *buf,
                       size_t len);
void te_test_self_close(te_test_self *s);

/* -------------------------------------------------------------- waits */

/* One completion of e within timeout_ms, asserted to come, returned. */
te_completion te_test_completion(te_engine *e, int timeout_ms);
/* n completions of e, each within timeout_ms and each with status 0 (the
 * reason named when not). */
void te_test_complete(te_engine *e, int n, int timeout_ms);
/* Caller mode on both engines of x: a write of len bytes (as
 * te_test_pair_write), this thread progressing both until its completion
 * (within timeout_ms), asserted to come with status 0. */
void te_test_pair_write_caller(te_test_pair *x, size_t len, int timeout_ms);

/* Waits (polling every millisecond) until *v >= want or timeout_ms has
 * passed; returns *v. */
int te_test_wait_int(atomic_int *v, int want, int timeout_ms);
/* The same for the arrivals of imm banked at e (te_imm_poll). */
uint64_t te_test_wait_banked(te_engine *e, uint32_t imm, uint64_t want,
                             int timeout_ms);
/* Waits (polling every millisecond) until te_peer_status() of the peer is
 * not 0 or timeout_ms has passed; returns its last answer, with its
 * te_last_error() (the down reason) left in place. */
int te_test_wait_peer_down(te_engine *e, int group, te_peer peer,
                           int timeout_ms);

/* CLOCK_MONOTONIC in milliseconds; a sleep of ms milliseconds. */
int64_t te_test_now_ms(void);
void te_test_sleep_ms(int ms);

/* Sleeps so far (voluntary context switches, /proc/self/task/N/status)
 * of this process's threads whose name starts with `prefix` ("te-": the
 * engines' threads). */
long te_test_thread_sleeps(const char *prefix);
/* Threads of this process named `name` (/proc/self/task/N/comm): how
 * many, and the task id of one of them in *tid (0: none) if tid is set. */
int te_test_threads_named(const char *name, long *tid);
/* te_test_threads_named() until it counts `want` (at most timeout_ms);
 * returns the last count. A thread names itself as it starts, and a joined
 * thread may still be listed for a moment (pthread_join returns when the
 * kernel clears its tid; under qemu-user the host thread exits after). */
int te_test_threads_named_settle(const char *name, int want, int timeout_ms);

/* -------------------------------------------------------------- pipes */

/* Two pipes and a fork: in the parent and in the child (0 returned), *wr
 * is this side's end towards the other and *rd its end from the other
 * (the other ends closed). The fork is asserted. */
pid_t te_test_fork(int *wr, int *rd);

/* A forked WriteImm target: an engine from `ini` with a 4 KiB remotely
 * writable region whose endpoint the parent receives (addr, alen, desc),
 * then te_imm_wait(imm, count, wait_ms) in the child. te_test_imm_target_end
 * releases it and returns its exit status: 0 when the immediates came, 3
 * when they did not, 2 when it could not set up. */
typedef struct te_test_imm_target {
    pid_t pid;
    int wr, rd;
    uint8_t addr[TE_ADDR_MAX];
    size_t alen;
    te_mr_desc desc;
} te_test_imm_target;

void te_test_imm_target_start(te_test_imm_target *t, const char *ini,
                              uint32_t imm, uint64_t count, int wait_ms);
int te_test_imm_target_end(te_test_imm_target *t);

/* All n bytes written / read (retrying short transfers): 0, or -1. */
int te_test_write_all(int fd, const void *p, size_t n);
int te_test_read_all(int fd, void *p, size_t n);

/* e's group-0 address and the descriptor d sent on fd / received from fd
 * (a forked peer hands itself over): 0, or -1 (not asserted, so a child
 * can use them). */
int te_test_send_endpoint(int fd, te_engine *e, const te_mr_desc *d);
int te_test_recv_endpoint(int fd, uint8_t addr[TE_ADDR_MAX], size_t *alen,
                          te_mr_desc *d);
/* The endpoint received from fd added as a peer of e's group 0; its
 * descriptor in *d (asserted: for the test's own process). */
te_peer te_test_recv_peer(int fd, te_engine *e, te_mr_desc *d);
/* The same in a forked child, which must not assert: e (NULL: failed to
 * create) registers buf of len bytes as *mr, and the endpoint received
 * from fd becomes peer *p, its descriptor *d. 0, or -1 with the reason on
 * stderr. */
int te_test_child_peer(int fd, te_engine *e, void *buf, size_t len,
                       te_mr **mr, te_peer *p, te_mr_desc *d);

#endif
