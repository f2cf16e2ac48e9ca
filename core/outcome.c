/*
 * Request outcomes on the worker: completion delivery (exactly once),
 * first-error-wins failure, deadlines, and peers declared down. A request
 * can be delivered early (deadline, dead peer) while the transport still
 * holds some of its operations; it is freed, and its registrations
 * released, only when all of them have come back.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "worker.h"
#include "te_hot.h"

/* Scan for expired deadlines and silent peers this often. */
#define TE_CHECK_INTERVAL_NS 5000000ull

TE_HOT
void te_turn_flush(struct te_engine *e, struct turn *t)
{
    if (t->nev && te_callbacks_push(&e->cb, t->ev, t->nev))
        te_log(e, 0, "callback queue: out of memory, %zu events lost", t->nev);
    if (t->ncq && te_cq_push(&e->cb, t->cq, t->ncq))
        te_log(e, 0, "completion queue: out of memory, %zu lost", t->ncq);
    t->nev = t->ncq = 0;
}

TE_HOT
struct te_cb_event *te_turn_event(struct te_engine *e, struct turn *t)
{
    if (t->nev == TE_EVENT_BATCH)
        te_turn_flush(e, t);
    return &t->ev[t->nev++];
}

void te_req_fail(struct te_req *q, int status, const char *fmt, ...)
{
    if (q->status)
        return; /* first error wins: a request fails once */
    q->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->reason, sizeof(q->reason), fmt, ap);
    va_end(ap);
}

TE_HOT
void te_req_track(struct te_group *g, struct turn *t, struct te_req *q)
{
    g->inflight_reqs++;
    q->link.next = &g->inflight;
    q->link.prev = g->inflight.prev;
    g->inflight.prev->next = &q->link;
    g->inflight.prev = &q->link;
    int32_t ms = q->r.timeout_ms;
    if (ms == 0)
        ms = (int32_t)g->e->s.request_timeout_ms;
    q->deadline_ns = ms > 0 ? te_turn_now(t) + (uint64_t)ms * 1000000ull : 0;
    if (q->deadline_ns)
        g->timed_reqs++;
}

TE_HOT
void te_req_deliver(struct te_engine *e, struct turn *t, struct te_req *q)
{
    if (q->delivered)
        return;
    q->delivered = 1;
    te_completion *c;
    if (q->r.done) {
        struct te_cb_event *ev = te_turn_event(e, t);
        ev->kind = TE_CB_DONE;
        ev->u.done.fn = q->r.done;
        ev->u.done.arg = q->r.done_arg;
        c = &ev->u.done.c;
    } else {
        if (t->ncq == TE_EVENT_BATCH)
            te_turn_flush(e, t);
        c = &t->cq[t->ncq++];
    }
    c->user_data = q->r.user_data;
    c->req_id = (uint64_t)q->id;
    c->status = q->status;
    c->op = q->r.op;
    if (q->status)
        snprintf(c->reason, sizeof(c->reason), "%s", q->reason);
    else
        c->reason[0] = 0;
    memset(c->reserved, 0, sizeof(c->reserved)); /* growth rule: zero */
}

TE_HOT
void te_req_settle(struct te_engine *e, struct turn *t, struct te_req *q)
{
    if (q->ops_done + q->ops_skipped != q->ops_total)
        return;
    te_req_deliver(e, t, q);
    q->g->inflight_reqs--;
    if (q->deadline_ns)
        q->g->timed_reqs--;
    q->link.prev->next = q->link.next;
    q->link.next->prev = q->link.prev;
    te_req_free(q);
}

/* Does q still have work (queued or posted) towards pe? */
static int req_uses_peer(const struct te_req *q, const struct te_peer_entry *pe)
{
    for (uint32_t i = 0; i < q->ncursors; i++) {
        const struct te_cursor *c = &q->cursors[i];
        if (c->peer == pe && (c->remaining || c->inflight))
            return 1;
    }
    return 0;
}

void te_peer_down(struct te_engine *e, struct te_group *g, struct turn *t,
                  struct te_peer_entry *pe, int status, const char *why)
{
    if (atomic_load_explicit(&pe->state, memory_order_relaxed) !=
        TE_PEER_LIVE)
        return;
    /* An orderly close (-ESHUTDOWN from the plugin) of a peer we owe
     * nothing is the normal end of a conversation, not a warning; requests
     * it leaves unfinished still fail with -ECONNRESET and are warned of. */
    int busy = 0;
    for (struct te_link *l = g->inflight.next; l != &g->inflight && !busy;
         l = l->next)
        busy = !((struct te_req *)l)->delivered &&
               req_uses_peer((struct te_req *)l, pe);
    int quiet = status == -ECONNABORTED || (status == -ESHUTDOWN && !busy);
    if (status == -ESHUTDOWN)
        status = -ECONNRESET;
    te_log(e, quiet ? 2 : 1, "group %d: peer %u is down: %s", g->index,
           pe->id, why);
    snprintf(pe->down_why, sizeof(pe->down_why), "%s", why);
    atomic_store_explicit(&pe->state, TE_PEER_DOWN, memory_order_release);
    /* In-flight first: requests whose operations the transport still holds
     * are delivered now, and freed when those operations come back. */
    for (struct te_link *l = g->inflight.next; l != &g->inflight;) {
        struct te_req *q = (struct te_req *)l;
        l = l->next;
        if (!q->delivered && req_uses_peer(q, pe)) {
            te_req_fail(q, status, "peer %u: %s", pe->id, why);
            te_req_deliver(e, t, q);
        }
    }
    te_post_fail_peer(e, g, t, pe, status, why);
}

void te_peer_closing(struct te_engine *e, struct te_group *g, struct turn *t,
                     struct te_peer_entry *pe, const char *why)
{
    if (atomic_load_explicit(&pe->state, memory_order_relaxed) !=
        TE_PEER_LIVE)
        return;
    for (uint32_t i = 0; i < t->nclosing; i++)
        if (t->closing[i] == pe)
            return; /* its other NICs said so too */
    const uint32_t max = sizeof(t->closing) / sizeof(t->closing[0]);
    if (t->nclosing == max) {
        te_peer_down(e, g, t, pe, -ESHUTDOWN, why);
        return;
    }
    /* Kept until then where te_peer_status reads it once the peer is down. */
    snprintf(pe->down_why, sizeof(pe->down_why), "%s", why);
    t->closing[t->nclosing++] = pe;
}

void te_turn_close_peers(struct te_engine *e, struct te_group *g,
                         struct turn *t)
{
    for (uint32_t i = 0; i < t->nclosing; i++) {
        char why[sizeof(t->closing[i]->down_why)];
        memcpy(why, t->closing[i]->down_why, sizeof(why));
        te_peer_down(e, g, t, t->closing[i], -ESHUTDOWN, why);
    }
    t->nclosing = 0;
}

static void check_deadlines(struct te_engine *e, struct te_group *g,
                            struct turn *t)
{
    for (struct te_link *l = g->inflight.next; l != &g->inflight;) {
        struct te_req *q = (struct te_req *)l;
        l = l->next;
        if (q->delivered || !q->deadline_ns || te_turn_now(t) < q->deadline_ns)
            continue;
        int32_t ms = q->r.timeout_ms ? q->r.timeout_ms
                                     : (int32_t)e->s.request_timeout_ms;
        te_req_fail(q, -ETIMEDOUT, "timed out after %d ms: %" PRIu64 " of %"
                    PRIu64 " operations unfinished", ms,
                    q->ops_total - q->ops_done - q->ops_skipped, q->ops_total);
        te_req_deliver(e, t, q);
    }
}

static void check_peers(struct te_engine *e, struct te_group *g,
                        struct turn *t)
{
    uint64_t limit = (uint64_t)e->s.peer_timeout_ms * 1000000ull;
    uint32_t n = atomic_load_explicit(&g->peer_count, memory_order_relaxed);
    for (uint32_t p = 0; p < n; p++) {
        struct te_peer_entry *pe = &g->peers[p];
        if (atomic_load_explicit(&pe->state, memory_order_relaxed) !=
            TE_PEER_LIVE)
            continue;
        for (uint32_t i = 0; i < g->nic_count; i++) {
            if (pe->outstanding[i] &&
                te_turn_now(t) - pe->last_progress_ns[i] > limit) {
                char why[192];
                snprintf(why, sizeof(why), "no completion on NIC %s for %u "
                         "ms with %u operations outstanding (engine."
                         "peer_timeout_ms)", g->nics[i].info.name,
                         e->s.peer_timeout_ms, pe->outstanding[i]);
                te_peer_down(e, g, t, pe, -ETIMEDOUT, why);
                break;
            }
        }
    }
}

TE_HOT
void te_worker_check(struct te_engine *e, struct te_group *g, struct turn *t)
{
    if (!te_turn_clock_due(t) || te_turn_now(t) < t->next_check_ns)
        return;
    t->next_check_ns = te_turn_now(t) + TE_CHECK_INTERVAL_NS;
    if (g->inflight_reqs)
        check_deadlines(e, g, t);
    if (e->s.peer_timeout_ms)
        check_peers(e, g, t);
    if (e->s.heartbeat_ms)
        te_heartbeat_send(e, g, t);
}
