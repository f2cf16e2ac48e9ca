/*
 * Caller-driven progress (engine.progress = caller; core/progress.c):
 * no engine threads, te_progress() runs the group's turn and the
 * callbacks on the calling thread, blocking calls progress themselves.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "te_test.h"

#define CALLER "[engine]\nprogress = caller\n"

enum { WAIT_MS = 20000 };

static int progress_until(te_engine **es, int n, atomic_int *v, int want)
{
    int64_t end = te_test_now_ms() + WAIT_MS;
    while (atomic_load(v) < want && te_test_now_ms() < end)
        for (int i = 0; i < n; i++)
            ck_assert_int_ge(te_progress(es[i], -1, 0), 0);
    return atomic_load(v);
}

static atomic_int done_count, imm_count;
static pthread_t cb_thread;
static int cb_status;

static void on_done(const te_completion *c, void *arg)
{
    (void)arg;
    cb_thread = pthread_self();
    cb_status = c->status;
    atomic_fetch_add(&done_count, 1);
}

static void on_imm(uint32_t imm, int status, void *arg)
{
    (void)imm, (void)arg;
    ck_assert_int_eq(status, 0);
    atomic_fetch_add(&imm_count, 1);
}

START_TEST(thread_mode_refuses)
{
    te_engine *e = te_test_engine("");
    ck_assert_int_eq(te_progress(e, 0, 0), -EINVAL);
    ck_assert_msg(strstr(te_last_error(), "engine.progress"), "%s",
                  te_last_error());
    ck_assert_int_eq(te_progress_wait(e, 0, 1), -EINVAL);
    ck_assert_int_eq(te_progress_fd(e, 0), -EINVAL);
    ck_assert_int_eq(te_progress_arm(e, 0), -EINVAL);
    te_engine_destroy(e);
    ck_assert_int_eq(te_test_engine_try("[engine]\nprogress = spin\n", &e),
                     -EINVAL);
    ck_assert_msg(strstr(te_last_error(), "spin"), "%s", te_last_error());
}
END_TEST

START_TEST(bad_arguments_are_named)
{
    te_engine *e = te_test_engine(CALLER);
    ck_assert_int_eq(te_progress(NULL, 0, 0), -EINVAL);
    ck_assert_int_eq(te_progress(e, 1, 0), -EINVAL);
    ck_assert_msg(strstr(te_last_error(), "group 1"), "%s", te_last_error());
    ck_assert_int_eq(te_progress(e, -2, 0), -EINVAL);
    ck_assert_int_eq(te_progress(e, 0, -1), -EINVAL);
    ck_assert_msg(strstr(te_last_error(), "budget"), "%s", te_last_error());
    /* Nothing to do: 0, not an error. */
    ck_assert_int_eq(te_progress(e, 0, 0), 0);
    ck_assert_int_eq(te_progress_wait(e, 0, 10), 0);
    te_engine_destroy(e);
}
END_TEST

/* Two caller-driven engines moved by this thread alone: the write lands,
 * the completion and the imm callback run here, inside te_progress. */
START_TEST(one_thread_moves_two_engines)
{
    te_test_pair x;
    te_test_pair_open(&x, CALLER, CALLER, 4096);
    atomic_store(&done_count, 0);
    atomic_store(&imm_count, 0);
    ck_assert_int_eq(te_imm_expect(x.b, 3, 100, on_imm, NULL), 0);
    for (int k = 0; k < 100; k++) {
        te_request r = te_test_pair_write(&x, 64, 0);
        r.flags = TE_F_IMM;
        r.imm = 3;
        r.done = on_done;
        x.src[0] = (uint8_t)(k + 1);
        ck_assert_int_ge(te_submit(x.a, &r), 0);
        te_engine *es[2] = {x.a, x.b};
        ck_assert_int_eq(progress_until(es, 2, &done_count, k + 1), k + 1);
        ck_assert_int_eq(cb_status, 0);
        ck_assert(pthread_equal(cb_thread, pthread_self()));
        ck_assert_uint_eq(x.dst[0], (uint8_t)(k + 1));
    }
    te_engine *es[2] = {x.a, x.b};
    ck_assert_int_eq(progress_until(es, 2, &imm_count, 1), 1);
    te_test_pair_close(&x);
}
END_TEST

/* Blocking calls progress the engine themselves (here an engine that is
 * its own peer: nobody else would). */
START_TEST(blocking_calls_progress)
{
    uint8_t *buf = calloc(1, 8192);
    te_test_self s;
    te_test_self_open(&s, CALLER, buf, 8192);
    te_mr *src = te_test_reg(s.e, buf + 4096, 4096, 0, NULL);
    for (int k = 0; k < 50; k++) {
        te_request r;
        te_request_init(&r, TE_OP_WRITE);
        r.flags = TE_F_IMM;
        r.imm = 9;
        r.u.xfer.peer = s.peer;
        r.u.xfer.local = src;
        r.u.xfer.remote = &s.desc;
        r.u.xfer.len = 128;
        ck_assert_int_ge(te_submit(s.e, &r), 0);
        te_completion c = te_test_completion(s.e, WAIT_MS);
        ck_assert_msg(c.status == 0, "%s", c.reason);
        ck_assert_int_eq(te_imm_wait(s.e, 9, 1, WAIT_MS), 0);
    }
    te_mr_dereg(s.e, src);
    te_test_self_close(&s);
    free(buf);
}
END_TEST

static te_engine *reentry_engine;
static int reentry_rc;
static void on_done_reenter(const te_completion *c, void *arg)
{
    (void)c, (void)arg;
    reentry_rc = te_progress(reentry_engine, -1, 0);
    te_engine_destroy(reentry_engine); /* refused: logged, no effect */
    atomic_fetch_add(&done_count, 1);
}

START_TEST(callbacks_cannot_reenter)
{
    te_test_pair x;
    te_test_pair_open(&x, CALLER, CALLER, 4096);
    atomic_store(&done_count, 0);
    reentry_engine = x.a;
    te_request r = te_test_pair_write(&x, 64, 0);
    r.done = on_done_reenter;
    ck_assert_int_ge(te_submit(x.a, &r), 0);
    te_engine *es[2] = {x.a, x.b};
    ck_assert_int_eq(progress_until(es, 2, &done_count, 1), 1);
    ck_assert_int_eq(reentry_rc, -EDEADLK);
    /* Still alive and usable. */
    r.done = on_done;
    ck_assert_int_ge(te_submit(x.a, &r), 0);
    ck_assert_int_eq(progress_until(es, 2, &done_count, 2), 2);
    te_test_pair_close(&x);
}
END_TEST

/* Callbacks of requests nobody progressed run at destroy, once. */
START_TEST(destroy_runs_what_is_left)
{
    te_test_pair x;
    te_test_pair_open(&x, CALLER, "", 4096); /* b moves by itself */
    atomic_store(&done_count, 0);
    for (int k = 0; k < 8; k++) {
        te_request r = te_test_pair_write(&x, 64, 0);
        r.done = on_done;
        ck_assert_int_ge(te_submit(x.a, &r), 0);
    }
    te_mr_dereg(x.b, x.dmr);
    te_engine_destroy(x.a); /* never progressed */
    ck_assert_int_eq(atomic_load(&done_count), 8);
    te_engine_destroy(x.b);
    free(x.src);
    free(x.dst);
}
END_TEST

/* Several threads progress one group while another submits: every
 * request completes exactly once; a busy group answers -EBUSY, never
 * blocks. */
/* Callbacks run on the progressing threads, concurrently: count only. */
static void on_done_count(const te_completion *c, void *arg)
{
    (void)arg;
    ck_assert_int_eq(c->status, 0);
    atomic_fetch_add(&done_count, 1);
}

static te_engine *shared_engine;
static atomic_int stop_progress;
static atomic_int busy_seen;
static void *progress_loop(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_progress)) {
        int rc = te_progress(shared_engine, 0, 0);
        if (rc == -EBUSY)
            atomic_fetch_add(&busy_seen, 1);
        else
            ck_assert_int_ge(rc, 0);
    }
    return NULL;
}

START_TEST(many_threads_one_group)
{
    te_test_pair x;
    te_test_pair_open(&x, CALLER, "", 4096);
    shared_engine = x.a;
    atomic_store(&stop_progress, 0);
    atomic_store(&done_count, 0);
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, progress_loop, NULL), 0);
    enum { N = 2000 };
    for (int k = 0; k < N; k++) {
        te_request r = te_test_pair_write(&x, 64, 0);
        r.done = on_done_count;
        int64_t id;
        while ((id = te_submit(x.a, &r)) == -EAGAIN)
            ;
        ck_assert_int_ge(id, 0);
    }
    ck_assert_int_eq(te_test_wait_int(&done_count, N, WAIT_MS), N);
    atomic_store(&stop_progress, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(atomic_load(&done_count), N);
    te_test_pair_close(&x);
}
END_TEST

/* An application's own event loop: arm, poll(2) the fd, progress. The
 * other side is a thread-mode engine, so only the fd can wake us. */
START_TEST(own_event_loop_on_the_fd)
{
    te_test_pair x;
    te_test_pair_open(&x, "", CALLER, 4096); /* b: caller-driven target */
    int fd = te_progress_fd(x.b, -1);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(te_progress_fd(x.b, 0) >= 0, 1);
    atomic_store(&imm_count, 0);
    ck_assert_int_eq(te_imm_expect(x.b, 5, 1, on_imm, NULL), 0);
    te_request r = te_test_pair_write(&x, 256, 0);
    r.flags = TE_F_IMM;
    r.imm = 5;
    x.src[10] = 0x5a;
    ck_assert_int_ge(te_submit(x.a, &r), 0);
    int64_t end = te_test_now_ms() + WAIT_MS;
    int waits = 0;
    while (atomic_load(&imm_count) < 1 && te_test_now_ms() < end) {
        int rc = te_progress_arm(x.b, -1);
        if (rc == 0) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            poll(&p, 1, 1000);
            waits++;
        } else {
            ck_assert_int_eq(rc, -EAGAIN);
        }
        ck_assert_int_ge(te_progress(x.b, -1, 0), 0);
    }
    ck_assert_int_eq(atomic_load(&imm_count), 1);
    ck_assert_uint_eq(x.dst[10], 0x5a);
    te_test_complete(x.a, 1, WAIT_MS);
    te_test_pair_close(&x);
}
END_TEST

/* Across processes: the child is a thread-mode target, the parent drives
 * its caller-mode initiator with te_progress_wait alone. */
START_TEST(progress_wait_two_processes)
{
    te_test_imm_target t;
    te_test_imm_target_start(&t, "", 13, 200, WAIT_MS);
    te_engine *e = te_test_engine(CALLER);
    uint8_t *src = calloc(1, 4096);
    te_mr *mr = te_test_reg(e, src, 4096, 0, NULL);
    te_peer p;
    ck_assert_msg(te_peer_add(e, 0, t.addr, t.alen, &p) == 0, "%s",
                  te_last_error());
    atomic_store(&done_count, 0);
    for (int k = 0; k < 200; k++) {
        te_request r = te_test_write(p, mr, &t.desc, 64, 0);
        r.flags = TE_F_IMM;
        r.imm = 13;
        r.done = on_done;
        ck_assert_int_ge(te_submit(e, &r), 0);
        int64_t end = te_test_now_ms() + WAIT_MS;
        while (atomic_load(&done_count) < k + 1 && te_test_now_ms() < end)
            ck_assert_int_ge(te_progress_wait(e, 0, 1000), 0);
        ck_assert_int_eq(atomic_load(&done_count), k + 1);
        ck_assert_int_eq(cb_status, 0);
    }
    int st = te_test_imm_target_end(&t);
    ck_assert_msg(st == 0, "child: status %d", st);
    te_mr_dereg(e, mr);
    te_engine_destroy(e);
    free(src);
}
END_TEST

/* Messages and peer removal in caller mode. */
static atomic_int msgs;
static void on_msg(int group, te_peer from, const void *data, size_t len,
                   void *arg)
{
    (void)group, (void)from, (void)data, (void)len, (void)arg;
    atomic_fetch_add(&msgs, 1);
}

START_TEST(messages_and_peer_removal)
{
    te_test_pair x;
    te_test_pair_open(&x, CALLER, CALLER, 4096);
    atomic_store(&msgs, 0);
    ck_assert_int_eq(te_set_recv_handler(x.b, 0, on_msg, NULL), 0);
    te_engine *es[2] = {x.a, x.b};
    for (int k = 0; k < 20; k++) {
        te_request r;
        te_request_init(&r, TE_OP_SEND);
        r.u.send.peer = x.p;
        r.u.send.buf = &k;
        r.u.send.len = sizeof(k);
        ck_assert_int_ge(te_submit(x.a, &r), 0);
    }
    ck_assert_int_eq(progress_until(es, 2, &msgs, 20), 20);
    te_test_complete(x.a, 20, WAIT_MS);
    ck_assert_int_eq(te_peer_remove(x.a, 0, x.p), 0);
    ck_assert_int_eq(te_peer_status(x.a, 0, x.p), -ENOENT);
    x.p = te_test_peer(x.a, x.b);
    ck_assert_int_eq(te_set_recv_handler(x.b, 0, NULL, NULL), 0);
    te_test_pair_close(&x);
}
END_TEST

/* A callback queued by another thread (an expectation met by banked
 * arrivals) wakes a thread blocked in te_progress_wait: it returns with the
 * callback run, not at its timeout (every timed wake-up is off). */
static te_engine *expecting_engine;
static void *expect_later(void *arg)
{
    (void)arg;
    te_test_sleep_ms(50);
    ck_assert_int_eq(te_imm_expect(expecting_engine, 21, 1, on_imm, NULL), 0);
    return NULL;
}

START_TEST(callback_from_another_thread_wakes_the_waiter)
{
    const char *ini = "[engine]\nprogress = caller\nidle_block_max_ms = 0\n"
                      "heartbeat_ms = 0\nrequest_timeout_ms = 0\n"
                      "peer_timeout_ms = 0\n";
    te_test_pair x;
    te_test_pair_open(&x, ini, ini, 4096);
    te_request r = te_test_pair_write(&x, 8, 0);
    r.flags = TE_F_IMM;
    r.imm = 21;
    ck_assert_int_ge(te_submit(x.a, &r), 0);
    uint64_t banked = 0;
    int64_t end = te_test_now_ms() + WAIT_MS;
    while (banked < 1 && te_test_now_ms() < end) {
        te_progress(x.a, -1, 0);
        te_progress(x.b, -1, 0);
        te_imm_poll(x.b, 21, &banked, NULL);
    }
    ck_assert_uint_eq(banked, 1);
    atomic_store(&imm_count, 0);
    expecting_engine = x.b;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, expect_later, NULL), 0);
    int64_t t0 = te_test_now_ms();
    while (atomic_load(&imm_count) < 1 && te_test_now_ms() - t0 < 10000)
        ck_assert_int_ge(te_progress_wait(x.b, -1, 10000), 0);
    int64_t dt = te_test_now_ms() - t0;
    pthread_join(t, NULL);
    ck_assert_int_eq(atomic_load(&imm_count), 1);
    ck_assert_msg(dt < 5000, "woken after %lld ms (the wait's own timeout "
                  "is 10000)", (long long)dt);
    te_test_pair_close(&x);
}
END_TEST

/* A callback that te_engine_destroy runs and that adds or removes a peer
 * gets -ESHUTDOWN (it crashed on the freed loop state). */
static te_test_pair *destroy_pair;
static int destroy_cb_rc = 1;
static void on_done_remove(const te_completion *c, void *arg)
{
    (void)c, (void)arg;
    destroy_cb_rc = te_peer_remove(destroy_pair->a, 0, destroy_pair->p);
}

START_TEST(peer_calls_from_callbacks_at_destroy)
{
    te_test_pair x;
    te_test_pair_open(&x, CALLER, "", 4096);
    destroy_pair = &x;
    te_request r = te_test_pair_write(&x, 64, 0);
    r.done = on_done_remove;
    ck_assert_int_ge(te_submit(x.a, &r), 0);
    te_mr_dereg(x.b, x.dmr);
    te_engine_destroy(x.a); /* runs on_done_remove */
    ck_assert_int_eq(destroy_cb_rc, -ESHUTDOWN);
    te_engine_destroy(x.b);
    free(x.src);
    free(x.dst);
}
END_TEST

/* Another thread that only submits never makes te_progress_wait report a
 * busy group (it holds the group's lock briefly to post). */
static atomic_int submitting;
static void *submit_loop(void *arg)
{
    te_test_pair *x = arg;
    for (int k = 0; k < 5000; k++) {
        te_request r = te_test_pair_write(x, 64, 0);
        r.done = on_done_count;
        while (te_submit(x->a, &r) == -EAGAIN)
            ;
    }
    atomic_store(&submitting, 0);
    return NULL;
}

START_TEST(submitter_is_not_a_busy_group)
{
    te_test_pair x;
    te_test_pair_open(&x, CALLER, "", 4096);
    atomic_store(&done_count, 0);
    atomic_store(&submitting, 1);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, submit_loop, &x), 0);
    int64_t end = te_test_now_ms() + WAIT_MS;
    while (atomic_load(&done_count) < 5000 && te_test_now_ms() < end) {
        int rc = te_progress_wait(x.a, 0, 5);
        ck_assert_msg(rc >= 0, "te_progress_wait: %d (%s)", rc,
                      te_last_error());
    }
    pthread_join(t, NULL);
    ck_assert_int_eq(atomic_load(&done_count), 5000);
    te_test_pair_close(&x);
}
END_TEST

/* The ImmCounter callbacks that a te_progress call raises itself run in
 * that call (its own batch, core/callback.c), the rest wait in the shared
 * queue: a budget of 1 still runs one callback per call, none is lost or
 * run twice, and they run in the order the immediates arrived (one NIC,
 * one peer: the loopback ring keeps order), also past the batch's 16. */
enum { ORDERED = 40, ORDERED_BASE = 300 };
static uint32_t order_seen[ORDERED];
static atomic_int order_n;

static void on_imm_in_order(uint32_t imm, int status, void *arg)
{
    (void)arg;
    ck_assert_int_eq(status, 0);
    int i = atomic_fetch_add(&order_n, 1);
    ck_assert_int_lt(i, ORDERED);
    order_seen[i] = imm;
}

/* Arm imm ORDERED_BASE + k on b and submit a's 64-byte WriteImm of it,
 * pinned to NIC 0 (one ring: arrivals in submission order). */
static void submit_ordered(te_test_pair *x, uint32_t k)
{
    ck_assert_int_eq(te_imm_expect(x->b, ORDERED_BASE + k, 1, on_imm_in_order, NULL),
                     0);
    te_request r = te_test_pair_write(x, 64, 0);
    r.flags = TE_F_IMM;
    r.imm = ORDERED_BASE + k;
    r.route.kind = TE_ROUTE_PIN;
    r.route.nic = 0;
    r.done = on_done;
    ck_assert_int_ge(te_submit(x->a, &r), 0);
}

static void budget_run(int budget)
{
    te_test_pair x;
    te_test_pair_open(&x, CALLER, CALLER, 4096);
    atomic_store(&order_n, 0);
    atomic_store(&done_count, 0);
    for (uint32_t k = 0; k < ORDERED; k++)
        submit_ordered(&x, k);
    /* b's turns execute a's writes (loopback's target side), so both
     * progress until every write completed and every callback ran. */
    int64_t end = te_test_now_ms() + WAIT_MS;
    while ((atomic_load(&order_n) < ORDERED || atomic_load(&done_count) < ORDERED) &&
           te_test_now_ms() < end) {
        ck_assert_int_ge(te_progress(x.a, -1, 0), 0);
        int before = atomic_load(&order_n);
        ck_assert_int_ge(te_progress(x.b, -1, budget), 0);
        if (budget)
            ck_assert_int_le(atomic_load(&order_n) - before, budget);
    }
    ck_assert_int_eq(atomic_load(&order_n), ORDERED);
    for (uint32_t k = 0; k < ORDERED; k++)
        ck_assert_uint_eq(order_seen[k], ORDERED_BASE + k);
    /* Nothing left over to run twice. */
    for (int i = 0; i < 20; i++)
        ck_assert_int_ge(te_progress(x.b, -1, 0), 0);
    ck_assert_int_eq(atomic_load(&order_n), ORDERED);
    te_test_pair_close(&x);
}

START_TEST(budget_bounds_callbacks_in_arrival_order)
{
    budget_run(1);
    budget_run(3);
    budget_run(0);
}
END_TEST

/* A deadline that passed still fails its expectation when every call's
 * budget goes to a callback the call raised itself: one WriteImm per
 * round, te_progress(b, budget 1) runs its callback from the call's own
 * batch, and the due timer runs beside it (as it did from the queue). */
static atomic_int timed_out;

static void on_deadline(uint32_t imm, int status, void *arg)
{
    (void)imm, (void)arg;
    if (status == -ETIMEDOUT)
        atomic_store(&timed_out, 1);
}

START_TEST(due_deadlines_run_under_a_budget)
{
    te_test_pair x;
    te_test_pair_open(&x, CALLER, CALLER, 4096);
    atomic_store(&order_n, 0);
    atomic_store(&timed_out, 0);
    atomic_store(&done_count, 0);
    ck_assert_int_eq(te_imm_expect_timeout(x.b, 999, 1, 1, on_deadline, NULL), 0);
    usleep(20000); /* due from here */
    for (uint32_t k = 0; k < ORDERED && !atomic_load(&timed_out); k++) {
        submit_ordered(&x, k);
        int64_t end = te_test_now_ms() + WAIT_MS;
        while (atomic_load(&order_n) < (int)k + 1 && te_test_now_ms() < end) {
            ck_assert_int_ge(te_progress(x.b, -1, 1), 0);
            ck_assert_int_ge(te_progress(x.a, -1, 0), 0);
        }
        ck_assert_int_eq(atomic_load(&order_n), (int)k + 1);
    }
    ck_assert_msg(atomic_load(&timed_out), "the deadline of imm 999 never ran "
                  "while callbacks took every call's budget");
    int64_t end = te_test_now_ms() + WAIT_MS; /* a's completions */
    while (atomic_load(&done_count) < atomic_load(&order_n) && te_test_now_ms() < end) {
        ck_assert_int_ge(te_progress(x.a, -1, 0), 0);
        ck_assert_int_ge(te_progress(x.b, -1, 0), 0);
    }
    te_test_pair_close(&x);
}
END_TEST

TE_TEST_MAIN("progress",
             TE_TCASE_FULL("api", 120, NULL, NULL, thread_mode_refuses,
                           bad_arguments_are_named,
                           one_thread_moves_two_engines,
                           blocking_calls_progress, callbacks_cannot_reenter,
                           destroy_runs_what_is_left,
                           messages_and_peer_removal,
                           budget_bounds_callbacks_in_arrival_order,
                           due_deadlines_run_under_a_budget),
             TE_TCASE_FULL("threads", 240, NULL, NULL,
                           many_threads_one_group, own_event_loop_on_the_fd,
                           progress_wait_two_processes,
                           callback_from_another_thread_wakes_the_waiter,
                           peer_calls_from_callbacks_at_destroy,
                           submitter_is_not_a_busy_group))
