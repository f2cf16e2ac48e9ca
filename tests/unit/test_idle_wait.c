/*
 * Idle workers block on their NICs' wait objects (engine.idle_wait =
 * block, plugin ABI 1.3 wait_fd/wait_arm; core/wait.c, loopback
 * lb_wait.c).
 *
 * The lost-wakeup tests switch off every timed wake-up (idle_spin_us = 0,
 * idle_block_max_ms = 0, no heartbeats, no request or peer deadlines): a
 * worker then blocks after every turn without work and wakes only through
 * a doorbell, so one missed doorbell is a hang, caught by the waits'
 * deadlines.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine_internal.h"
#include "te_test.h"
#include "te_clock.h"
#include "wait.h"

/* busy_wait = block: with requests in flight the default naps (a timed
 * wake-up), which would hide a missed NIC wake-up. */
#define NO_TIMED_WAKEUPS                                                       \
    "[engine]\nidle_spin_us = 0\nidle_spin_max_us = 0\n"                      \
    "idle_block_max_ms = 0\nheartbeat_ms = 0\n"                               \
    "request_timeout_ms = 0\npeer_timeout_ms = 0\nbusy_wait = block\n"

enum { ROUNDS = 400, WAIT_MS = 20000 };

/* One WriteImm at a time: the receiver's worker and the sender's (for the
 * response) block between any two. */
static void write_imm_rounds(te_test_pair *x, uint32_t imm, int rounds)
{
    for (int k = 0; k < rounds; k++) {
        te_request r = te_test_pair_write(x, 64, 0);
        r.flags = TE_F_IMM;
        r.imm = imm;
        x->src[0] = (uint8_t)k;
        ck_assert_int_ge(te_submit(x->a, &r), 0);
        te_test_complete(x->a, 1, WAIT_MS);
        ck_assert_uint_eq(te_test_wait_banked(x->b, imm, (uint64_t)k + 1,
                                              WAIT_MS),
                          (uint64_t)k + 1);
        ck_assert_uint_eq(x->dst[0], (uint8_t)k);
    }
}

START_TEST(no_lost_wakeup_in_process)
{
    te_test_pair x;
    te_test_pair_open(&x, NO_TIMED_WAKEUPS, NO_TIMED_WAKEUPS, 4096);
    write_imm_rounds(&x, 7, ROUNDS);
    te_test_pair_close(&x);
}
END_TEST

/* Two NICs per group: two wait objects in one epoll set, and shards. */
START_TEST(no_lost_wakeup_two_nics)
{
    const char *ini = NO_TIMED_WAKEUPS "nics_per_group = 2\n"
                                       "[loopback]\ndevices = 2\n";
    te_test_pair x;
    te_test_pair_open(&x, ini, ini, 1 << 20);
    for (int k = 0; k < ROUNDS / 4; k++) {
        te_request r = te_test_pair_write(&x, 1 << 20, 0);
        r.flags = TE_F_IMM;
        r.imm = 9;
        ck_assert_int_ge(te_submit(x.a, &r), 0);
        te_test_complete(x.a, 1, WAIT_MS);
    }
    /* Two shards a write: two immediates. */
    ck_assert_uint_eq(te_test_wait_banked(x.b, 9, ROUNDS / 2, WAIT_MS),
                      ROUNDS / 2);
    te_test_pair_close(&x);
}
END_TEST

/* Across processes the doorbells are bytes on the channel's socket: the
 * child is the target, the parent waits for responses. */
START_TEST(no_lost_wakeup_two_processes)
{
    te_test_imm_target t;
    te_test_imm_target_start(&t, NO_TIMED_WAKEUPS, 11, ROUNDS, WAIT_MS);
    te_engine *e = te_test_engine(NO_TIMED_WAKEUPS);
    uint8_t *src = calloc(1, 4096);
    te_mr *mr = te_test_reg(e, src, 4096, 0, NULL);
    te_peer p;
    ck_assert_msg(te_peer_add(e, 0, t.addr, t.alen, &p) == 0, "%s",
                  te_last_error());
    for (int k = 0; k < ROUNDS; k++) {
        te_request r = te_test_write(p, mr, &t.desc, 64, 0);
        r.flags = TE_F_IMM;
        r.imm = 11;
        ck_assert_int_ge(te_submit(e, &r), 0);
        te_test_complete(e, 1, WAIT_MS);
    }
    int st = te_test_imm_target_end(&t);
    ck_assert_msg(st == 0, "child: status %d (3: its te_imm_wait timed out)",
                  st);
    te_mr_dereg(e, mr);
    te_engine_destroy(e);
    free(src);
}
END_TEST

/* Messages wake the receiving worker too (RECV completions). */
static atomic_int got;
static void on_msg(int group, te_peer from, const void *data, size_t len,
                   void *arg)
{
    (void)group, (void)from, (void)data, (void)len, (void)arg;
    atomic_fetch_add(&got, 1);
}

START_TEST(no_lost_wakeup_send)
{
    te_test_pair x;
    te_test_pair_open(&x, NO_TIMED_WAKEUPS, NO_TIMED_WAKEUPS, 4096);
    atomic_store(&got, 0);
    ck_assert_int_eq(te_set_recv_handler(x.b, 0, on_msg, NULL), 0);
    for (int k = 0; k < ROUNDS; k++) {
        te_request r;
        te_request_init(&r, TE_OP_SEND);
        r.u.send.peer = x.p;
        r.u.send.buf = &k;
        r.u.send.len = sizeof(k);
        ck_assert_int_ge(te_submit(x.a, &r), 0);
        te_test_complete(x.a, 1, WAIT_MS);
        ck_assert_int_eq(te_test_wait_int(&got, k + 1, WAIT_MS), k + 1);
    }
    ck_assert_int_eq(te_set_recv_handler(x.b, 0, NULL, NULL), 0);
    te_test_pair_close(&x);
}
END_TEST

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The point of blocking: an idle engine (default settings, peers added,
 * traffic done) costs no CPU. Sleep-polling every 20 us cost about a
 * quarter of a core here; a blocked one wakes only for its heartbeats (one
 * a period per idle peer written to) and engine.idle_block_max_ms. The
 * bound is loose: 5% of one core. */
START_TEST(idle_engine_costs_no_cpu)
{
    te_test_pair x;
    te_test_pair_open(&x, NULL, NULL, 4096);
    write_imm_rounds(&x, 5, 10);
    te_test_sleep_ms(100); /* past idle_spin_us */
    double c0 = cpu_seconds();
    int64_t t0 = te_test_now_ms();
    te_test_sleep_ms(1000);
    double used = cpu_seconds() - c0;
    double wall = (double)(te_test_now_ms() - t0) / 1000.0;
    ck_assert_msg(used < 0.05 * wall, "two idle engines used %.3f s of CPU "
                  "in %.3f s", used, wall);
    te_test_pair_close(&x);
}
END_TEST

/* An idle engine whose peers were never written to has nothing that time
 * could bring: its worker and callback thread sleep until an event. (They
 * woke ten times a second each, and the heartbeat scan four more, before
 * the callback thread slept without a timer and the scan ran only for
 * peers it watches.) Heartbeats stay on (the default period); only the
 * safety net is off, as in the lost-wakeup tests. */
START_TEST(idle_engine_threads_sleep)
{
    /* Keyless probes off: with them a's peer b is due a probe every second
     * (heartbeat_scan_waits_for_watched_peers), work to wake for. */
    const char *ini = "[engine]\nidle_block_max_ms = 0\n"
                      "heartbeat_keyless = false\n";
    te_test_pair x;
    te_test_pair_open(&x, ini, ini, 4096);
    te_test_sleep_ms(300); /* past the spins and the first scans */
    long s0 = te_test_thread_sleeps("te-");
    te_test_sleep_ms(1500);
    long woke = te_test_thread_sleeps("te-") - s0;
    ck_assert_msg(woke <= 3, "the idle engines' threads slept %ld times in "
                  "1.5 s (nothing was due)", woke);
    te_test_pair_close(&x);
}
END_TEST

/* The nap of a worker without wait objects grows with its idleness: an
 * eighth of it, between idle_sleep_us and idle_sleep_max_us; fixed with
 * requests in flight, with a ceiling not above idle_sleep_us, and never
 * where idle_sleep_us = 0 (spin). */
START_TEST(idle_nap_grows_with_idleness)
{
    te_engine *e = te_test_engine("[engine]\nidle_sleep_us = 20\n"
                                  "idle_sleep_max_us = 1000\n");
    ck_assert_uint_eq(te_idle_nap_us(e, 0, 0), 20);
    ck_assert_uint_eq(te_idle_nap_us(e, 100000, 0), 20);     /* 100 us */
    ck_assert_uint_eq(te_idle_nap_us(e, 800000, 0), 100);    /* 800 us */
    ck_assert_uint_eq(te_idle_nap_us(e, 7999999, 0), 999);
    ck_assert_uint_eq(te_idle_nap_us(e, 3600000000000ull, 0), 1000);
    ck_assert_uint_eq(te_idle_nap_us(e, 3600000000000ull, 1), 20);
    te_engine_destroy(e);
    e = te_test_engine("[engine]\nidle_sleep_us = 50\nidle_sleep_max_us = 10\n");
    ck_assert_uint_eq(te_idle_nap_us(e, 3600000000000ull, 0), 50);
    te_engine_destroy(e);
    e = te_test_engine("[engine]\nidle_sleep_us = 0\n");
    ck_assert_uint_eq(te_idle_nap_us(e, 3600000000000ull, 0), 0);
    te_engine_destroy(e);
    ck_assert_int_eq(te_test_engine_try("[engine]\nidle_sleep_max_us = "
                                        "1000001\n", &e), -EINVAL);
    ck_assert_msg(strstr(te_last_error(), "idle_sleep_max_us"), "%s",
                  te_last_error());
}
END_TEST

static int64_t block_ms(te_engine *e)
{
    return te_group_block_timeout_ms(e, &e->groups[0], te_clock_ns());
}

/* The heartbeat scan is scheduled for the peers it watches, a period
 * after their last activity; with none watched it is not scheduled at
 * all. A peer is watched from its te_peer_add (keyless probes, the
 * default) or from the first write to it (heartbeat_keyless = false).
 * Caller mode: this thread runs the turns, so the group's schedule is
 * read where it is written. */
static void scan_schedule(int keyless)
{
    char ini[256];
    snprintf(ini, sizeof(ini), "[engine]\nprogress = caller\n"
             "idle_block_max_ms = 0\nheartbeat_ms = 10000\n"
             "request_timeout_ms = 0\npeer_timeout_ms = 0\n"
             "heartbeat_keyless = %s\n", keyless ? "true" : "false");
    te_test_pair x;
    te_test_pair_open(&x, ini, ini, 4096);
    for (int i = 0; i < 20; i++) {
        ck_assert_int_ge(te_progress(x.a, -1, 0), 0);
        ck_assert_int_ge(te_progress(x.b, -1, 0), 0);
    }
    int64_t ms = block_ms(x.a); /* a has a peer, never written to */
    if (keyless)
        ck_assert_msg(ms > 5000 && ms <= 10000, "blocks %lld ms",
                      (long long)ms);
    else
        ck_assert_int_eq(ms, -1);
    ck_assert_int_eq(block_ms(x.b), -1); /* no peer */
    te_test_pair_write_caller(&x, 64, WAIT_MS);
    ck_assert_int_ge(te_progress(x.a, -1, 0), 0);
    /* Watched now: due a period (10 s) after the write, not at the next
     * quarter period (2.5 s) as a fixed-rate scan would wake. */
    ms = block_ms(x.a);
    ck_assert_msg(ms > 5000 && ms <= 10000, "blocks %lld ms", (long long)ms);
    ck_assert_int_eq(block_ms(x.b), -1); /* b wrote to no one */
    te_test_pair_close(&x);
}

START_TEST(heartbeat_scan_waits_for_watched_peers)
{
    scan_schedule(1);
    scan_schedule(0);
}
END_TEST

/* Two caller-mode engines probing every 20 ms, a having b as a peer it
 * never writes to; the entry of b in a (read where this thread's turns
 * write it). */
#define PROBING "[engine]\nprogress = caller\nheartbeat_ms = 20\n"

static const struct te_peer_entry *probing_pair(te_test_pair *x,
                                                int peer_timeout_ms)
{
    char ini[128];
    snprintf(ini, sizeof(ini), PROBING "peer_timeout_ms = %d\n",
             peer_timeout_ms);
    te_test_pair_open(x, ini, ini, 4096);
    return &x->a->groups[0].peers[0];
}

/* A keyless probe to a peer never written to completes (loopback takes a
 * zero-length write without a key), over and over, and leaves the peer
 * live: 0.5 s of caller-mode turns on both. Each answer moves the peer's
 * progress clock. */
START_TEST(keyless_heartbeats_keep_peer_live)
{
    te_test_pair x;
    const struct te_peer_entry *pe = probing_pair(&x, 200);
    ck_assert_int_eq(pe->hb_known[0], TE_HB_KEYLESS);
    uint64_t last = pe->last_progress_ns[0];
    int answers = 0;
    int64_t end = te_test_now_ms() + 500;
    while (te_test_now_ms() < end) {
        ck_assert_int_ge(te_progress(x.a, -1, 0), 0);
        ck_assert_int_ge(te_progress(x.b, -1, 0), 0);
        if (pe->last_progress_ns[0] != last && !pe->hb_inflight[0]) {
            answers++;
            last = pe->last_progress_ns[0];
        }
    }
    ck_assert_msg(answers >= 5, "%d heartbeat answers in 0.5 s", answers);
    ck_assert_int_eq(pe->hb_keyless_refused[0], 0);
    ck_assert_int_eq(pe->hb_known[0], TE_HB_KEYLESS);
    ck_assert_msg(te_peer_status(x.a, 0, x.p) == 0, "%s", te_last_error());
    te_test_pair_close(&x);
}
END_TEST

/* An unanswered keyless probe is not a death: b (caller mode, never
 * progressed for 0.5 s, five peer timeouts) cannot answer a's probe over
 * loopback, and stays live for a, which only ever received from it; the
 * probe is answered once b is progressed again. */
START_TEST(unanswered_keyless_probe_is_not_death)
{
    te_test_pair x;
    const struct te_peer_entry *pe = probing_pair(&x, 100);
    int64_t end = te_test_now_ms() + 500;
    while (te_test_now_ms() < end)
        ck_assert_int_ge(te_progress(x.a, -1, 0), 0);
    ck_assert_int_eq(pe->hb_inflight[0], 1);
    ck_assert_msg(te_peer_status(x.a, 0, x.p) == 0, "%s", te_last_error());
    end = te_test_now_ms() + WAIT_MS;
    while (pe->hb_inflight[0] && te_test_now_ms() < end) {
        ck_assert_int_ge(te_progress(x.b, -1, 0), 0);
        ck_assert_int_ge(te_progress(x.a, -1, 0), 0);
    }
    ck_assert_int_eq(pe->hb_inflight[0], 0);
    ck_assert_int_eq(te_peer_status(x.a, 0, x.p), 0);
    te_test_pair_close(&x);
}
END_TEST

/* A NIC that holds work no event will announce (loopback's
 * fault_delay_us holds each request 0.4 s at the target) refuses to arm;
 * the worker then polls every idle_sleep_us instead of spinning (it took
 * a whole core for the hold before). Thread mode, then caller mode with
 * te_progress_wait. The bound is loose: half a core. */
#define HELD "[engine]\nidle_spin_us = 0\nidle_spin_max_us = 0\n"           \
             "idle_sleep_us = 1000\n"

static void held_write(te_test_pair *x, int caller)
{
    te_request r = te_test_pair_write(x, 64, 0);
    r.flags = TE_F_IMM;
    r.imm = 31;
    double c0 = cpu_seconds();
    int64_t t0 = te_test_now_ms();
    ck_assert_int_ge(te_submit(x->a, &r), 0);
    uint64_t banked = 0;
    int64_t end = t0 + WAIT_MS;
    while (banked < 1 && te_test_now_ms() < end) {
        if (caller) {
            ck_assert_int_ge(te_progress(x->a, -1, 0), 0);
            ck_assert_int_ge(te_progress_wait(x->b, -1, 50), 0);
        } else {
            te_test_sleep_ms(10);
        }
        ck_assert_int_eq(te_imm_poll(x->b, 31, &banked, NULL), 0);
    }
    double used = cpu_seconds() - c0;
    double wall = (double)(te_test_now_ms() - t0) / 1000.0;
    ck_assert_uint_eq(banked, 1);
    ck_assert_msg(wall >= 0.35, "the write was not held (%.3f s)", wall);
    ck_assert_msg(used < 0.5 * wall, "%s: %.3f s of CPU while a request was "
                  "held for %.3f s", caller ? "caller" : "thread", used, wall);
}

START_TEST(held_request_polls_not_spins)
{
    te_test_pair x;
    te_test_pair_open(&x, HELD "[loopback]\nfault_delay_us = 400000\n", HELD,
                      4096);
    held_write(&x, 0);
    te_test_pair_close(&x);
    te_test_pair_open(&x,
                      HELD "progress = caller\n[loopback]\n"
                           "fault_delay_us = 400000\n",
                      HELD "progress = caller\n", 4096);
    held_write(&x, 1);
    te_test_pair_close(&x);
}
END_TEST

/*
 * engine.waiter_progress: te_imm_wait runs the turn of a group whose worker
 * sleeps through an event. Every other round is left to the worker alone
 * (te_imm_poll does not progress): a helper that took the worker's event
 * and left its NICs disarmed would hang that round (no timed wake-ups).
 */
static uint64_t waiter_turns_of(te_test_pair *x, int on)
{
    const char *ini = on ? NO_TIMED_WAKEUPS "waiter_progress = true\n"
                         : NO_TIMED_WAKEUPS "waiter_progress = false\n";
    te_test_pair_open(x, ini, ini, 4096);
    for (int k = 0; k < ROUNDS / 2; k++) {
        te_request r = te_test_pair_write(x, 64, 0);
        r.flags = TE_F_IMM;
        r.imm = 21;
        x->src[0] = (uint8_t)k;
        ck_assert_int_ge(te_submit(x->a, &r), 0);
        ck_assert_msg(te_imm_wait(x->b, 21, 1, WAIT_MS) == 0, "round %d: %s",
                      k, te_last_error());
        ck_assert_uint_eq(x->dst[0], (uint8_t)k);
        te_test_complete(x->a, 1, WAIT_MS);
        r.imm = 22;
        x->src[0] = (uint8_t)(k + 100);
        ck_assert_int_ge(te_submit(x->a, &r), 0);
        te_test_complete(x->a, 1, WAIT_MS);
        ck_assert_uint_eq(te_test_wait_banked(x->b, 22, (uint64_t)k + 1,
                                              WAIT_MS),
                          (uint64_t)k + 1);
        ck_assert_uint_eq(x->dst[0], (uint8_t)(k + 100));
    }
    return atomic_load(&x->b->groups[0].waiter_turns);
}

START_TEST(waiter_progresses_a_sleeping_group)
{
    te_test_pair x;
    /* The worker blocks after every turn (idle_spin_us = 0): the waiter
     * finds it asleep with the doorbell rung in most rounds. Whether it
     * does is a race with the woken worker that the threads' placement
     * decides for a whole pair: under emulation (qemu-aarch64) 1 pair in
     * 16 lost every round, 200 or 2000 of them. New engines (new threads)
     * draw again: up to 4 pairs. */
    uint64_t turns = 0;
    int pairs = 0;
    while (!turns && pairs < 4) {
        turns = waiter_turns_of(&x, 1);
        te_test_pair_close(&x);
        pairs++;
    }
    ck_assert_msg(turns > 0, "te_imm_wait never ran a turn in %d rounds of "
                  "each of %d engine pairs", ROUNDS / 2, pairs);
    ck_assert_uint_eq(waiter_turns_of(&x, 0), 0);
    te_test_pair_close(&x);
}
END_TEST

/* engine.idle_wait = sleep keeps the old loop (and must still work). */
START_TEST(sleep_mode_still_works)
{
    const char *ini = "[engine]\nidle_wait = sleep\nidle_spin_us = 0\n"
                      "idle_spin_max_us = 0\n";
    te_test_pair x;
    te_test_pair_open(&x, ini, ini, 4096);
    write_imm_rounds(&x, 3, 50);
    te_test_pair_close(&x);
}
END_TEST

START_TEST(bad_idle_wait_is_named)
{
    te_engine *e;
    int rc = te_test_engine_try("[engine]\nidle_wait = nap\n", &e);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_ptr_null(e);
    ck_assert_msg(strstr(te_last_error(), "idle_wait") &&
                      strstr(te_last_error(), "nap"),
                  "%s", te_last_error());
    rc = te_test_engine_try("[engine]\nbusy_wait = doze\n", &e);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(te_last_error(), "busy_wait"), "%s", te_last_error());
    rc = te_test_engine_try("[engine]\nidle_block_max_ms = -1\n", &e);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(te_last_error(), "idle_block_max_ms"), "%s",
                  te_last_error());
}
END_TEST

TE_TEST_MAIN("idle_wait",
             TE_TCASE_FULL("lost_wakeup", 240, NULL, NULL,
                           no_lost_wakeup_in_process, no_lost_wakeup_two_nics,
                           no_lost_wakeup_two_processes, no_lost_wakeup_send,
                           waiter_progresses_a_sleeping_group),
             TE_TCASE_FULL("idle", 60, NULL, NULL, idle_engine_costs_no_cpu,
                           idle_engine_threads_sleep,
                           idle_nap_grows_with_idleness,
                           heartbeat_scan_waits_for_watched_peers,
                           keyless_heartbeats_keep_peer_live,
                           unanswered_keyless_probe_is_not_death,
                           held_request_polls_not_spins,
                           sleep_mode_still_works, bad_idle_wait_is_named))
