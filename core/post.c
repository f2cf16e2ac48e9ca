/*
 * Posting on the worker: cursors wait in per-(NIC, peer) FIFOs; each NIC
 * keeps a FIFO of the peers that have work, served round-robin, so a peer
 * whose queue is full never blocks the others (no head-of-line blocking
 * across peers). Operations are generated lazily from cursors and posted in
 * batches; what the NIC does not take stays queued.
 */
#include <errno.h>
#include <string.h>

#include "nic_guard.h"
#include "te_error.h"
#include "te_hot.h"

static void push_active(struct te_nic *n, struct te_peer_queue *pq)
{
    pq->active = 1;
    pq->next_active = NULL;
    if (!n->active)
        n->active = pq;
    else
        n->active_tail->next_active = pq;
    n->active_tail = pq;
}

static struct te_peer_queue *pop_active(struct te_nic *n)
{
    struct te_peer_queue *pq = n->active;
    if (pq) {
        n->active = pq->next_active;
        if (!n->active)
            n->active_tail = NULL;
        pq->next_active = NULL;
        pq->active = 0;
    }
    return pq;
}

static void queue_cursor(struct te_nic *n, struct te_peer_queue *pq,
                         struct te_cursor *c)
{
    c->next = NULL;
    if (pq->tail)
        pq->tail->next = c;
    else
        pq->head = c;
    pq->tail = c;
    n->pending_cursors++;
    if (!pq->active)
        push_active(n, pq);
}

/* te_submit checked its peers on the caller's thread; one may have gone
 * down (or been removed) before this worker took the request. te_peer_down
 * failed what was queued then and never runs again for that peer, so a
 * request queued now would be posted to a dead peer and wait for its
 * deadline, or forever without one. Fail it here instead, as te_submit
 * would have. Returns 1 if q failed (all its ops skipped). */
static int fail_if_peer_gone(struct te_req *q)
{
    for (uint32_t i = 0; i < q->ncursors; i++) {
        struct te_peer_entry *pe = q->cursors[i].peer;
        if (!pe)
            continue;
        int st = atomic_load_explicit(&pe->state, memory_order_acquire);
        int same = atomic_load_explicit(&pe->id, memory_order_relaxed) ==
                   q->cursors[i].peer_id;
        if (st == TE_PEER_LIVE && same)
            continue;
        if (st == TE_PEER_FREE || !same)
            te_req_fail(q, -ECONNABORTED, "peer %u: removed before the "
                        "request was posted", pe->id);
        else
            te_req_fail(q, -ECONNRESET, "peer %u: down before the request "
                        "was posted", pe->id);
        for (uint32_t j = 0; j < q->ncursors; j++) {
            q->ops_skipped += q->cursors[j].remaining;
            q->cursors[j].remaining = 0;
        }
        return 1;
    }
    return 0;
}

static int fill_op(struct te_group *g, struct te_cursor *c, uint32_t k,
                   struct te_plugin_op *op);
static void note_posted(struct turn *t, const struct te_cursor *h,
                        size_t posted);
static void release_send_slot(struct te_nic *n, const struct te_plugin_op *op);

/* The plugin refused q's op outright (post returned rc < 0): q fails with
 * rc, in the plugin's words if it gave any. */
static void fail_refused(const struct te_nic *n, struct te_req *q, int rc)
{
    const char *said = te_last_error(); /* the plugin's, if any */
    te_req_fail(q, rc, "post on NIC %s refused: %s%s%s", n->info.name,
                te_strerror(rc), said[0] ? ": " : "", said);
}

/*
 * A request of one operation (a lone small write, the latency case) whose
 * peer and NIC have nothing queued goes to the plugin at once, without
 * passing through the peer's FIFO and the NIC's round of peers: the same
 * op, guard and accounting as te_post_nic, fewer structures touched (on a
 * cold cache each is a miss on the way to the wire). Returns 1 when the
 * cursor was dealt with (posted, or its request failed and settled); 0
 * when it must be queued (the NIC took nothing: full, or a send slot is
 * missing), as any other.
 */
static int post_lone(struct te_engine *e, struct te_group *g, struct turn *t,
                     struct te_cursor *c)
{
    struct te_nic *n = &g->nics[c->nic];
    if (c->remaining != 1 || n->active || c->peer->q[c->nic].head)
        return 0;
    struct te_plugin_op op;
    if (fill_op(g, c, 0, &op) == -EAGAIN)
        return 0;
    int rc = te_guard_post(e, g, n, &op, 1);
    if (rc == 1) {
        note_posted(t, c, 1);
        c->remaining = 0;
        c->inflight = 1;
        return 1;
    }
    release_send_slot(n, &op);
    if (rc == 0)
        return 0;
    fail_refused(n, c->req, rc);
    c->req->ops_skipped += c->remaining;
    c->remaining = 0;
    te_req_settle(e, t, c->req);
    return 1;
}

TE_HOT
void te_post_accept(struct te_engine *e, struct te_group *g, struct turn *t,
                    struct te_req *q)
{
    te_req_track(g, t, q);
    if (q->ops_total == 0) {
        te_req_settle(e, t, q);
        return;
    }
    if (fail_if_peer_gone(q) || te_guard_refuse(g, q)) {
        te_req_settle(e, t, q);
        return;
    }
    if (q->ncursors == 1 && post_lone(e, g, t, &q->cursors[0]))
        return;
    for (uint32_t i = 0; i < q->ncursors; i++) {
        struct te_cursor *c = &q->cursors[i];
        if (c->remaining)
            queue_cursor(&g->nics[c->nic], &c->peer->q[c->nic], c);
    }
}

/* Fill op number k of cursor c without consuming it. -EAGAIN when a send
 * slot is missing. */
TE_HOT
static int fill_op(struct te_group *g, struct te_cursor *c, uint32_t k,
                   struct te_plugin_op *op)
{
    struct te_req *q = c->req;
    op->kind = c->kind;
    op->flags = c->flags;
    op->imm = c->imm;
    op->reserved = 0;
    op->peer = c->pp;
    op->mr = c->lmr ? c->lmr->pmr[c->nic] : NULL;
    op->context = (uint64_t)(uintptr_t)c | TE_CTX_CURSOR;
    if (c->paged) {
        uint32_t j = c->index + k * c->step;
        const typeof(q->r.u.paged) *p = &q->r.u.paged;
        op->local_addr = p->src->addr + p->src_off +
                         p->src_stride * (uint64_t)p->src_idx[j];
        op->len = p->page_len;
        op->remote_addr = c->rdesc->nic[c->remote_nic].remote_base +
                          p->dst_off + p->dst_stride * (uint64_t)p->dst_idx[j];
        op->rkey = c->rdesc->nic[c->remote_nic].rkey;
        return 0;
    }
    op->local_addr = c->local_addr;
    op->len = c->len;
    op->remote_addr = c->remote_addr;
    op->rkey = c->rkey;
    if (c->kind == TE_POP_SEND) {
        struct te_nic *n = &g->nics[c->nic];
        struct te_msg_slot *s = n->send_free;
        if (!s)
            return -EAGAIN;
        n->send_free = s->next_free;
        s->cursor = c;
        memcpy(s->buf, c->local_addr, c->len);
        op->local_addr = s->buf;
        op->mr = n->send_mr;
        op->context = (uint64_t)(uintptr_t)s | TE_CTX_SEND;
    }
    return 0;
}

TE_HOT
static void release_send_slot(struct te_nic *n, const struct te_plugin_op *op)
{
    if (TE_CTX_TAG(op->context) == TE_CTX_SEND) {
        struct te_msg_slot *s = TE_CTX_PTR(op->context);
        s->next_free = n->send_free;
        n->send_free = s;
    }
}

static void drop_head(struct te_nic *n, struct te_peer_queue *pq)
{
    pq->head = pq->head->next;
    if (!pq->head)
        pq->tail = NULL;
    n->pending_cursors--;
}

/* Drop what is left of failed requests' cursors at the head of pq. */
static void skip_failed(struct te_engine *e, struct turn *t, struct te_nic *n,
                        struct te_peer_queue *pq)
{
    while (pq->head && pq->head->req->status) {
        struct te_cursor *c = pq->head;
        struct te_req *q = c->req;
        q->ops_skipped += c->remaining;
        c->remaining = 0;
        drop_head(n, pq);
        te_req_settle(e, t, q);
    }
}

/* The peer's side of `posted` ops taken from cursor h on: its liveness
 * clock, the heartbeat's target, its outstanding count (and the turn did
 * work). */
TE_HOT
static void note_posted(struct turn *t, const struct te_cursor *h,
                        size_t posted)
{
    struct te_peer_entry *pe = h->peer;
    uint32_t nic = h->nic;
    if (pe->outstanding[nic] == 0)
        pe->last_progress_ns[nic] = te_turn_now(t);
    /* The heartbeat's target: where this write goes (a place the peer
     * registered for remote writes, with a key valid on that NIC pair). */
    if (h->kind == TE_POP_WRITE) {
        if (!pe->hb_known[nic])
            te_heartbeat_watch(t);
        pe->hb_addr[nic] = h->paged ? h->rdesc->nic[h->remote_nic].remote_base
                                    : h->remote_addr;
        pe->hb_rkey[nic] = h->paged ? h->rdesc->nic[h->remote_nic].rkey
                                    : h->rkey;
        pe->hb_known[nic] = TE_HB_PLACE;
    }
    pe->outstanding[nic] += (uint32_t)posted;
    t->did_work = 1;
}

/* Account for `posted` ops taken from the head of pq. */
static void commit(struct turn *t, struct te_nic *n,
                   struct te_peer_queue *pq, size_t posted)
{
    if (!posted)
        return;
    note_posted(t, pq->head, posted);
    while (posted) {
        struct te_cursor *h = pq->head;
        uint32_t take = posted < h->remaining ? (uint32_t)posted : h->remaining;
        h->remaining -= take;
        h->inflight += take;
        if (h->paged)
            h->index += take * h->step;
        posted -= take;
        if (h->remaining == 0)
            drop_head(n, pq);
    }
}

/* Fill up to `room` ops from the head of pq into ops; 0 if none (a
 * failed request at the head, or no send slot). */
static size_t fill_peer(struct te_group *g, struct te_peer_queue *pq,
                        struct te_plugin_op *ops, size_t room)
{
    size_t cnt = 0;
    struct te_cursor *c = pq->head;
    uint32_t k = 0;
    while (c && cnt < room && !c->req->status) {
        if (fill_op(g, c, k, &ops[cnt]) == -EAGAIN)
            break;
        cnt++;
        if (++k == c->remaining) {
            c = c->next;
            k = 0;
        }
    }
    return cnt;
}

/*
 * One pass over the peers with work, their operations posted in shared
 * batches: one plugin call carries up to TE_POST_BATCH ops of successive
 * peers (a scatter to 56 peers costs 2 calls instead of 56; each call and
 * its bookkeeping showed in the posting time). The plugin accepts a prefix
 * of the batch; each peer's part of it is committed. A peer with work left
 * goes to the back of the FIFO (no head-of-line blocking across peers); the
 * pass ends when the NIC takes no more or every peer was visited.
 */
TE_HOT
void te_post_nic(struct te_engine *e, struct te_group *g, struct turn *t,
                 struct te_nic *n)
{
    struct te_plugin_op ops[TE_POST_BATCH];
    struct te_peer_queue *segq[TE_POST_BATCH];
    size_t segn[TE_POST_BATCH];
    struct te_peer_queue *requeued = NULL; /* first peer sent back */
    for (;;) {
        size_t cnt = 0, nseg = 0;
        struct te_peer_queue *pq;
        while (cnt < TE_POST_BATCH && (pq = n->active) != NULL &&
               pq != requeued) {
            pop_active(n);
            skip_failed(e, t, n, pq);
            if (!pq->head)
                continue;
            size_t got = fill_peer(g, pq, ops + cnt, TE_POST_BATCH - cnt);
            if (got) {
                segq[nseg] = pq;
                segn[nseg++] = got;
                cnt += got;
            } else { /* out of send slots: retry next turn */
                push_active(n, pq);
                if (!requeued)
                    requeued = pq;
            }
        }
        if (cnt == 0)
            return;
        int rc = te_guard_post(e, g, n, ops, cnt);
        size_t posted = rc > 0 ? (size_t)rc : 0;
        for (size_t i = posted; i < cnt; i++)
            release_send_slot(n, &ops[i]);
        if (rc < 0) {
            /* The plugin refused the first op outright: fail its request
             * (skip_failed drops it on the next visit) and go on. */
            fail_refused(n, segq[0]->head->req, rc);
        }
        size_t off = 0;
        for (size_t s = 0; s < nseg; s++) {
            size_t take = posted > off ? posted - off : 0;
            if (take > segn[s])
                take = segn[s];
            commit(t, n, segq[s], take);
            off += segn[s];
            if (segq[s]->head) {
                push_active(n, segq[s]);
                if (!requeued)
                    requeued = segq[s];
            }
        }
        if (rc >= 0 && posted < cnt)
            return; /* the NIC (or a peer's queue) is full */
    }
}

void te_post_fail_peer(struct te_engine *e, struct te_group *g,
                       struct turn *t, struct te_peer_entry *pe, int status,
                       const char *why)
{
    for (uint32_t i = 0; i < g->nic_count; i++) {
        struct te_peer_queue *pq = &pe->q[i];
        for (struct te_cursor *c = pq->head; c; c = c->next)
            te_req_fail(c->req, status, "peer %u: %s", pe->id, why);
        skip_failed(e, t, &g->nics[i], pq);
    }
}
