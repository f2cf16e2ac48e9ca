/*
 * The group worker: one thread per NIC group. It owns the group's NICs
 * (every post/poll/peer call on them), runs peer add/remove handed over by
 * application threads, turns queued requests into plugin operations
 * (post.c), handles completions (poll.c) and request outcomes, deadlines
 * and peer liveness (outcome.c). It never runs user code: events go to the
 * callback thread in batches.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "te_clock.h"
#include "te_error.h"
#include "wait.h"
#include "thread_setup.h"
#include "worker.h"
#include "spin_window.h"
#include "te_hot.h"

/* ------------------------------------------------------------- control */

/* A removed peer's slot, once nothing of its old life can come back to
 * it (no op, heartbeat or queued cursor left), else n (append). */
static uint32_t reusable_slot(struct te_group *g, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        struct te_peer_entry *pe = &g->peers[i];
        if (atomic_load_explicit(&pe->state, memory_order_relaxed) !=
            TE_PEER_FREE)
            continue;
        int quiet = 1;
        for (uint32_t k = 0; k < g->nic_count && quiet; k++)
            quiet = !pe->outstanding[k] && !pe->hb_inflight[k] &&
                    !pe->q[k].head && !pe->q[k].active;
        if (quiet)
            return i;
    }
    return n;
}

/* Worker-only state of a slot for its next peer, and its new handle. */
static void reset_slot(struct te_peer_entry *pe, uint32_t slot, int reused)
{
    memset(pe->q, 0, sizeof(pe->q));
    memset(pe->outstanding, 0, sizeof(pe->outstanding));
    memset(pe->last_progress_ns, 0, sizeof(pe->last_progress_ns));
    memset(pe->hb_known, 0, sizeof(pe->hb_known));
    memset(pe->hb_inflight, 0, sizeof(pe->hb_inflight));
    memset(pe->hb_keyless_refused, 0, sizeof(pe->hb_keyless_refused));
    if (reused)
        pe->gen = pe->gen + 1 < TE_PEER_GEN_LIMIT ? pe->gen + 1 : 0;
    atomic_store_explicit(&pe->id, pe->gen << TE_PEER_SLOT_BITS | slot,
                          memory_order_release);
}

static void run_control(struct te_engine *e, struct te_group *g,
                        struct te_control *c, struct turn *t);

TE_HOT
static void drain_control(struct te_engine *e, struct te_group *g,
                          struct turn *t)
{
    if (!atomic_load_explicit(&g->ctl_pending, memory_order_acquire))
        return;
    pthread_mutex_lock(&g->ctl_lock);
    struct te_control *list = g->ctl_head;
    g->ctl_head = NULL;
    atomic_store_explicit(&g->ctl_pending, 0, memory_order_relaxed);
    pthread_mutex_unlock(&g->ctl_lock);
    while (list) {
        struct te_control *c = list;
        list = c->next;
        run_control(e, g, c, t);
        pthread_mutex_lock(&g->ctl_lock);
        c->done = 1;
        int abandoned = c->abandoned;
        pthread_cond_broadcast(&g->ctl_cond);
        pthread_mutex_unlock(&g->ctl_lock);
        if (abandoned)
            free(c);
    }
}

int te_group_control(struct te_group *g, struct te_control *c, int timeout_ms)
{
    if (g->e->s.caller_progress) {
        /* No worker: run it here, as te_progress() would, once no other
         * thread is progressing the group. */
        pthread_mutex_lock(&g->progress_lock);
        struct turn *t = g->turn;
        te_turn_tick(t);
        c->next = NULL;
        run_control(g->e, g, c, t);
        c->done = 1;
        te_turn_flush(g->e, t); /* rings a waiter if it queued callbacks */
        pthread_mutex_unlock(&g->progress_lock);
        return 0;
    }
    pthread_mutex_lock(&g->ctl_lock);
    c->next = g->ctl_head;
    g->ctl_head = c;
    atomic_store_explicit(&g->ctl_pending, 1, memory_order_release);
    te_group_wake(g);
    struct timespec ts = te_deadline_ms(timeout_ms);
    while (!c->done) {
        if (pthread_cond_timedwait(&g->ctl_cond, &g->ctl_lock, &ts) ==
            ETIMEDOUT && !c->done) {
            c->abandoned = 1; /* the worker frees it when it gets there */
            pthread_mutex_unlock(&g->ctl_lock);
            return -ETIMEDOUT;
        }
    }
    pthread_mutex_unlock(&g->ctl_lock);
    return 0;
}

static void run_control(struct te_engine *e, struct te_group *g,
                        struct te_control *c, struct turn *t)
{
    const struct te_plugin_ops *P = e->plugin.ops;
    if (c->kind == TE_CTL_ADD) {
        uint32_t n = atomic_load_explicit(&g->peer_count, memory_order_relaxed);
        for (uint32_t i = 0; i < n; i++) {
            struct te_peer_entry *pe = &g->peers[i];
            if (atomic_load_explicit(&pe->state, memory_order_relaxed) ==
                    TE_PEER_LIVE && pe->engine_id == c->addr.engine_id &&
                pe->remote_group == c->addr.group) {
                c->peer = pe->id;
                c->result = 0;
                return;
            }
        }
        uint32_t slot = reusable_slot(g, n);
        if (slot == n && n >= g->peer_cap) {
            c->result = -ENOSPC;
            snprintf(c->reason, sizeof(c->reason),
                     "group %d already has %u peers, live or down (the "
                     "maximum; te_peer_remove() frees a down peer's slot)",
                     g->index, g->peer_cap);
            return;
        }
        struct te_peer_entry *pe = &g->peers[slot];
        reset_slot(pe, slot, slot < n);
        pe->remote_nics = c->addr.nic_count;
        pe->engine_id = c->addr.engine_id;
        pe->remote_group = c->addr.group;
        for (uint32_t i = 0; i < g->nic_count; i++) {
            uint32_t rn = i % c->addr.nic_count;
            te_error_clear();
            int rc = P->peer_add(g->nics[i].pn, c->addr.nic_addr[rn],
                                 c->addr.nic_addr_len[rn], &pe->pp[i]);
            if (rc) {
                snprintf(c->reason, sizeof(c->reason),
                         "NIC %s cannot reach remote NIC %u: %s%s%s",
                         g->nics[i].info.name, rn, te_strerror(rc),
                         te_last_error()[0] ? ": " : "", te_last_error());
                for (uint32_t j = 0; j < i; j++)
                    P->peer_remove(g->nics[j].pn, pe->pp[j]);
                c->result = rc;
                return;
            }
        }
        atomic_store_explicit(&pe->state, TE_PEER_LIVE, memory_order_release);
        te_heartbeat_added(e, g, t, pe);
        if (slot == n)
            atomic_store_explicit(&g->peer_count, n + 1, memory_order_release);
        c->peer = pe->id;
        c->result = 0;
        return;
    }
    /* remove */
    struct te_peer_entry *pe = te_group_peer(g, c->peer);
    if (!pe || atomic_load_explicit(&pe->state, memory_order_relaxed) ==
                   TE_PEER_FREE) {
        c->result = -ENOENT;
        snprintf(c->reason, sizeof(c->reason), "peer %u is not a peer of "
                 "group %d", c->peer, g->index);
        return;
    }
    te_peer_down(e, g, t, pe, -ECONNABORTED, "peer removed");
    for (uint32_t i = 0; i < g->nic_count; i++)
        P->peer_remove(g->nics[i].pn, pe->pp[i]);
    /* The slot is reused by a later add with the next generation (see
     * reusable_slot): a stale te_peer never matches the new handle. */
    atomic_store_explicit(&pe->state, TE_PEER_FREE, memory_order_release);
    c->result = 0;
}

/* ------------------------------------------------------------- loop */

static void pin_worker(struct te_engine *e, struct te_group *g)
{
    if (g->cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(g->cpu, &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    if (rc)
        te_log(e, 1, "group %d: cannot pin worker to CPU %d: %s", g->index,
               g->cpu, strerror(rc));
}

/* Take up to a batch of submitted requests into the group's queues;
 * returns how many. */
TE_HOT
static size_t accept_submitted(struct te_engine *e, struct te_group *g,
                               struct turn *t)
{
    void *items[TE_SUBMIT_BATCH];
    size_t n = te_mpsc_pop(g->subq, items, TE_SUBMIT_BATCH);
    for (size_t i = 0; i < n; i++)
        te_post_accept(e, g, t, items[i]);
    return n;
}

TE_HOT
int te_worker_turn(struct te_engine *e, struct te_group *g, struct turn *t)
{
    t->did_work = 0;
    te_turn_tick(t);
    drain_control(e, g, t);
    if (accept_submitted(e, g, t))
        t->did_work = 1;
    for (uint32_t i = 0; i < g->nic_count; i++) {
        if (g->nics[i].active)
            te_post_nic(e, g, t, &g->nics[i]);
        te_poll_nic(e, g, t, i);
        if (g->nics[i].recv_to_post)
            te_repost_recvs(e, g, &g->nics[i]);
    }
    if (t->nclosing) {
        /* What the closing peer's other NICs returned before the close
         * counts first (a sharded request it completed is not failed). */
        for (uint32_t i = 0; i < g->nic_count; i++)
            te_poll_nic(e, g, t, i);
        te_turn_close_peers(e, g, t);
    }
    te_worker_check(e, g, t);
    te_turn_flush(e, t);
    return t->did_work;
}

TE_HOT
void te_worker_post_now(struct te_engine *e, struct te_group *g,
                        struct turn *t, struct te_req *q)
{
    te_turn_tick(t);
    /* Older submissions first, all of them: q must not overtake one its
     * own thread queued while another thread held the turn (at most the
     * queue's capacity was queued before this call). */
    size_t rounds = e->s.submit_queue_depth / TE_SUBMIT_BATCH + 1;
    while (accept_submitted(e, g, t) == TE_SUBMIT_BATCH && --rounds)
        ;
    if (q)
        te_post_accept(e, g, t, q);
    for (uint32_t i = 0; i < g->nic_count; i++)
        if (g->nics[i].active)
            te_post_nic(e, g, t, &g->nics[i]);
    te_turn_flush(e, t);
}

/* Fail everything still queued; give posted operations a bounded time to
 * come back, then fail their requests too: every request completes once. */
static void worker_shutdown(struct te_engine *e, struct te_group *g,
                            struct turn *t)
{
    te_turn_tick(t);
    while (accept_submitted(e, g, t))
        ;
    uint32_t np = atomic_load_explicit(&g->peer_count, memory_order_relaxed);
    for (uint32_t p = 0; p < np; p++)
        te_post_fail_peer(e, g, t, &g->peers[p], -ECANCELED,
                          "engine destroyed");
    uint64_t deadline = te_now_ns() + 2000000000ull;
    while (g->inflight_reqs && te_now_ns() < deadline) {
        te_turn_tick(t);
        drain_control(e, g, t);
        for (uint32_t i = 0; i < g->nic_count; i++)
            te_poll_nic(e, g, t, i);
        te_turn_close_peers(e, g, t);
        te_turn_flush(e, t);
    }
    drain_control(e, g, t);
    if (g->inflight_reqs)
        te_log(e, 1, "group %d: %" PRIu64 " requests still in flight after "
               "2 s at shutdown: failing them with -ECANCELED", g->index,
               g->inflight_reqs);
    /* Their late completions can never arrive: the NICs close next. */
    while (g->inflight.next != &g->inflight) {
        struct te_req *q = (struct te_req *)g->inflight.next;
        te_req_fail(q, -ECANCELED, "engine destroyed before the transport "
                    "completed %" PRIu64 " of %" PRIu64 " operations",
                    q->ops_total - q->ops_done - q->ops_skipped, q->ops_total);
        q->ops_skipped = q->ops_total - q->ops_done;
        te_req_settle(e, t, q);
    }
    te_turn_flush(e, t);
}

static void *worker_main(void *arg)
{
    struct te_group *g = arg;
    struct te_engine *e = g->e;
    pin_worker(e, g);
    char name[16];
    snprintf(name, sizeof(name), "te-worker-%d", g->index);
    te_thread_name(name);
    if (e->s.idle_sleep_us)
        te_thread_tighten_slack(e->s.idle_sleep_us);
    struct turn *t = g->turn;
    pthread_mutex_lock(&g->progress_lock); /* a submitter may post already */
    for (uint32_t i = 0; i < g->nic_count; i++)
        te_repost_recvs(e, g, &g->nics[i]);
    pthread_mutex_unlock(&g->progress_lock);
    uint64_t idle_since = 0;
    struct te_spin_window spin;
    te_spin_window_init(&spin, e->s.idle_spin_us, e->s.idle_spin_max_us);
    /* Each turn holds the group's progress_lock: between turns, and while
     * the worker blocks, te_submit can take it and post a request at once
     * instead of waiting for this thread to wake (core/request.c). */
    while (!atomic_load_explicit(&e->stopping, memory_order_acquire)) {
        pthread_mutex_lock(&g->progress_lock);
        int did = te_worker_turn(e, g, t);
        uint64_t now = te_turn_now(t); /* t is the lock's: read it here */
        if (did) {
            t->arm_refused = 0;
            pthread_mutex_unlock(&g->progress_lock);
            if (idle_since)
                te_spin_window_learn(&spin, now - idle_since);
            idle_since = 0;
            continue;
        }
        if (!idle_since)
            idle_since = now;
        if (now - idle_since < spin.cur_ns) {
            pthread_mutex_unlock(&g->progress_lock);
            /* The turn found nothing: let the thread we are waiting on
             * (a peer's worker, a callback thread) have this CPU. */
            te_thread_spin_pause();
            continue;
        }
        if (g->can_block) {
            te_group_block(e, g, t); /* releases the lock */
        } else if (g->wake_fd >= 0 && e->s.idle_sleep_us) {
            te_group_nap_idle(e, g, now - idle_since); /* releases it */
        } else {
            pthread_mutex_unlock(&g->progress_lock);
            if (e->s.idle_sleep_us) {
                /* idle_sleep_us may be 1 s: tv_nsec must stay below 10^9 */
                struct timespec ts =
                    te_timespec_ns(e->s.idle_sleep_us * 1000ull);
                nanosleep(&ts, NULL);
            }
        }
    }
    pthread_mutex_lock(&g->progress_lock);
    worker_shutdown(e, g, t);
    pthread_mutex_unlock(&g->progress_lock);
    return NULL;
}

_Thread_local int te_worker_progress;

void te_worker_progressed(void *host_ctx)
{
    (void)host_ctx; /* the calling worker's own flag: poll() runs on it */
    te_worker_progress = 1;
}

int te_worker_start(struct te_group *g)
{
    /* Allocated here, not on the thread: a worker that could not start its
     * loop would leave the group's requests (and deadlines) unserved while
     * te_engine_create() reported success. */
    g->turn = calloc(1, sizeof(*g->turn));
    if (!g->turn)
        return -ENOMEM;
    g->turn->hb_period_ns = (uint64_t)g->e->s.heartbeat_ms * 1000000ull;
    if (g->e->s.caller_progress) { /* te_progress() runs the turns */
        for (uint32_t i = 0; i < g->nic_count; i++)
            te_repost_recvs(g->e, g, &g->nics[i]);
        return 0;
    }
    int rc = pthread_create(&g->worker, NULL, worker_main, g);
    if (rc) {
        free(g->turn);
        g->turn = NULL;
        return -rc;
    }
    g->worker_started = 1;
    return 0;
}

void te_worker_stop(struct te_group *g)
{
    if (g->worker_started) {
        pthread_join(g->worker, NULL);
        g->worker_started = 0;
    } else if (g->turn && g->e->s.caller_progress) {
        pthread_mutex_lock(&g->progress_lock);
        worker_shutdown(g->e, g, g->turn);
        pthread_mutex_unlock(&g->progress_lock);
    }
    free(g->turn);
    g->turn = NULL;
    for (uint32_t i = 0; i < g->nic_count; i++) /* nothing polls them now */
        te_op_table_free(&g->nics[i].posted);
}
