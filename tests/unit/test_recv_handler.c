/* te_set_recv_handler() swaps synchronously: once it returns, the old
 * handler is not running and is never called again, even for messages that
 * were already queued for the callback thread (the apps free the handler's
 * arg right after clearing it). Loopback plugin, two engines. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "te/te.h"
#include "te_test.h"

/* Engine a sends to engine b through peer p. */
struct link {
    te_engine *a, *b;
    te_peer p;
};

static void link_open(struct link *l)
{
    l->a = te_test_engine(NULL); /* defaults: loopback */
    l->b = te_test_engine(NULL);
    l->p = te_test_peer(l->a, l->b);
}

static void link_close(struct link *l)
{
    te_engine_destroy(l->b);
    te_engine_destroy(l->a);
}

/* Send n messages and wait until the sender saw each one complete. */
static void send_n(struct link *l, int n)
{
    static const char msg[] = "hello";
    for (int i = 0; i < n; i++) {
        te_request r;
        te_request_init(&r, TE_OP_SEND);
        r.timeout_ms = 10000;
        r.u.send.peer = l->p;
        r.u.send.buf = msg;
        r.u.send.len = sizeof(msg);
        ck_assert_int_gt(te_submit(l->a, &r), 0);
    }
    te_test_complete(l->a, n, 10000);
}

static int wait_flag(atomic_int *f)
{
    return te_test_wait_int(f, 1, 10000);
}

static void on_msg_count(int group, te_peer from, const void *data,
                         size_t len, void *arg)
{
    (void)group, (void)from, (void)data, (void)len;
    atomic_fetch_add((atomic_int *)arg, 1);
}

/* A handler whose first call holds the callback thread until told to go
 * on; then it swaps the handler itself if asked to (swap_to). */
struct gate {
    te_engine *e;
    atomic_int calls, entered, go, finished;
    te_recv_fn swap_to;
    void *swap_arg;
};

static void on_msg_gated(int group, te_peer from, const void *data,
                         size_t len, void *arg)
{
    (void)from, (void)data, (void)len;
    struct gate *g = arg;
    if (atomic_fetch_add(&g->calls, 1) > 0)
        return;
    atomic_store(&g->entered, 1);
    wait_flag(&g->go);
    if (g->swap_to)
        ck_assert_int_eq(te_set_recv_handler(g->e, group, g->swap_to,
                                             g->swap_arg), 0);
    else
        usleep(200000); /* the main thread is entering the swap */
    atomic_store(&g->finished, 1);
}

/* Install the gated handler on l->b, let a first message enter it (and
 * stay there until g->go), and queue three more behind it. */
static void hold_one_queue_three(struct link *l, struct gate *g)
{
    ck_assert_int_eq(te_set_recv_handler(l->b, 0, on_msg_gated, g), 0);
    send_n(l, 1);
    ck_assert_int_eq(wait_flag(&g->entered), 1);
    send_n(l, 3);
    usleep(100000); /* let the three reach the callback queue */
}

/* The first message holds the handler; three more are queued behind it.
 * Clearing the handler from another thread waits for the running call to
 * end, and nothing reaches the old handler after it returned. */
START_TEST(clearing_waits_for_the_running_call_and_drops_the_queued)
{
    struct link l;
    link_open(&l);
    struct gate g = {.e = l.b};
    hold_one_queue_three(&l, &g);
    atomic_store(&g.go, 1);
    ck_assert_int_eq(te_set_recv_handler(l.b, 0, NULL, NULL), 0);
    int calls = atomic_load(&g.calls);
    ck_assert_int_eq(atomic_load(&g.finished), 1); /* it waited */
    usleep(100000);
    ck_assert_int_eq(atomic_load(&g.calls), calls); /* none after */
    link_close(&l);
}
END_TEST

/* Messages queued behind a running call go to the handler installed when
 * they are delivered (here: installed by the running call itself). */
START_TEST(queued_messages_go_to_the_new_handler)
{
    struct link l;
    link_open(&l);
    atomic_int later = 0;
    struct gate g = {.e = l.b, .swap_to = on_msg_count, .swap_arg = &later};
    hold_one_queue_three(&l, &g);
    atomic_store(&g.go, 1);
    ck_assert_int_eq(te_test_wait_int(&later, 3, 10000), 3);
    ck_assert_int_eq(atomic_load(&g.calls), 1);
    link_close(&l);
}
END_TEST

/* A handler that clears its own group's handler from inside a call (the
 * callback thread) does not deadlock, and is not called again. */
struct self_clear {
    te_engine *e;
    atomic_int calls;
    atomic_int rc;
};

static void on_msg_self_clear(int group, te_peer from, const void *data,
                              size_t len, void *arg)
{
    (void)from, (void)data, (void)len;
    struct self_clear *s = arg;
    atomic_fetch_add(&s->calls, 1);
    atomic_store(&s->rc, te_set_recv_handler(s->e, group, NULL, NULL));
}

START_TEST(a_handler_may_clear_itself)
{
    struct link l;
    link_open(&l);
    struct self_clear s = {.e = l.b};
    ck_assert_int_eq(te_set_recv_handler(l.b, 0, on_msg_self_clear, &s), 0);
    send_n(&l, 4);
    te_test_wait_int(&s.calls, 1, 3000);
    usleep(100000);
    ck_assert_int_eq(atomic_load(&s.calls), 1);
    ck_assert_int_eq(atomic_load(&s.rc), 0);
    link_close(&l);
}
END_TEST

/* engine.progress = caller: threads that progress the engine at once each
 * run callbacks, so two calls of one handler can overlap. A thread that
 * keeps progressing b (bounded: 20 s) until told to stop. */
struct progressor {
    te_engine *e;
    atomic_int stop;
    pthread_t t;
};

static void *progress_loop(void *arg)
{
    struct progressor *p = arg;
    for (int i = 0; i < 40000 && !atomic_load(&p->stop); i++) {
        te_progress(p->e, 0, 0); /* -EBUSY while the other one is in */
        usleep(500);
    }
    return NULL;
}

/* Call 1 holds one progressing thread inside the handler; call 2 runs on
 * a second thread and returns. Clearing the handler must still wait for
 * call 1 (a single 'a call is running' flag was cleared by call 2's end,
 * and the swap returned while call 1 still used the old arg: the apps
 * free it right after). */
START_TEST(clearing_waits_for_every_running_call)
{
    struct link l;
    l.a = te_test_engine(NULL);
    l.b = te_test_engine("[engine]\nprogress = caller\n");
    l.p = te_test_peer(l.a, l.b);
    struct gate g = {.e = l.b};
    ck_assert_int_eq(te_set_recv_handler(l.b, 0, on_msg_gated, &g), 0);
    struct progressor p1 = {.e = l.b}, p2 = {.e = l.b};
    ck_assert_int_eq(pthread_create(&p1.t, NULL, progress_loop, &p1), 0);
    send_n(&l, 1);
    ck_assert_int_eq(wait_flag(&g.entered), 1); /* p1 is inside call 1 */
    ck_assert_int_eq(pthread_create(&p2.t, NULL, progress_loop, &p2), 0);
    send_n(&l, 1);
    ck_assert_int_eq(te_test_wait_int(&g.calls, 2, 10000), 2); /* call 2 ran */
    atomic_store(&g.go, 1);
    ck_assert_int_eq(te_set_recv_handler(l.b, 0, NULL, NULL), 0);
    int finished = atomic_load(&g.finished);
    ck_assert_msg(finished == 1, "te_set_recv_handler returned while call 1 "
                  "of the old handler was still running (call 2, on "
                  "another thread, had ended)");
    atomic_store(&p1.stop, 1);
    atomic_store(&p2.stop, 1);
    pthread_join(p1.t, NULL);
    pthread_join(p2.t, NULL);
    link_close(&l);
}
END_TEST

/* Two handlers that clear the handler at once, on two progressing
 * threads, do not wait for each other (each swap waits only for calls
 * that are not themselves swapping). */
struct both_clear {
    te_engine *e;
    atomic_int entered, cleared;
};

static void on_msg_clear_together(int group, te_peer from, const void *data,
                                  size_t len, void *arg)
{
    (void)from, (void)data, (void)len;
    struct both_clear *b = arg;
    atomic_fetch_add(&b->entered, 1);
    te_test_wait_int(&b->entered, 2, 5000); /* both calls are in */
    ck_assert_int_eq(te_set_recv_handler(b->e, group, NULL, NULL), 0);
    atomic_fetch_add(&b->cleared, 1);
}

START_TEST(two_handlers_clearing_at_once_do_not_deadlock)
{
    struct link l;
    l.a = te_test_engine(NULL);
    l.b = te_test_engine("[engine]\nprogress = caller\n");
    l.p = te_test_peer(l.a, l.b);
    struct both_clear b = {.e = l.b};
    ck_assert_int_eq(te_set_recv_handler(l.b, 0, on_msg_clear_together, &b),
                     0);
    struct progressor p1 = {.e = l.b}, p2 = {.e = l.b};
    ck_assert_int_eq(pthread_create(&p1.t, NULL, progress_loop, &p1), 0);
    send_n(&l, 1);
    ck_assert_int_eq(te_test_wait_int(&b.entered, 1, 10000), 1);
    ck_assert_int_eq(pthread_create(&p2.t, NULL, progress_loop, &p2), 0);
    send_n(&l, 1);
    ck_assert_int_eq(te_test_wait_int(&b.cleared, 2, 10000), 2);
    atomic_store(&p1.stop, 1);
    atomic_store(&p2.stop, 1);
    pthread_join(p1.t, NULL);
    pthread_join(p2.t, NULL);
    link_close(&l);
}
END_TEST

START_TEST(bad_group_is_refused)
{
    te_engine *e = te_test_engine(NULL);
    ck_assert_int_eq(te_set_recv_handler(e, 1, on_msg_count, NULL), -EINVAL);
    ck_assert_int_eq(te_set_recv_handler(e, -1, NULL, NULL), -EINVAL);
    ck_assert_int_eq(te_set_recv_handler(NULL, 0, NULL, NULL), -EINVAL);
    te_engine_destroy(e);
}
END_TEST

TE_TEST_MAIN("recv_handler",
             TE_TCASE_FULL("swap", 60, NULL, NULL,
               clearing_waits_for_the_running_call_and_drops_the_queued,
               queued_messages_go_to_the_new_handler,
               a_handler_may_clear_itself,
               clearing_waits_for_every_running_call,
               two_handlers_clearing_at_once_do_not_deadlock,
               bad_group_is_refused))
