/*
 * The group worker: one thread per NIC group. It owns the group's NICs
 * (every post/poll/peer call on them), turns queued requests into plugin
 * operations, aggregates shard completions into request completions and
 * feeds immediates to the ImmCounter. It never runs user code: events go to
 * the callback thread in batches.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"
#include "te_error.h"

#define TE_POST_BATCH 32
#define TE_POLL_BATCH 64
#define TE_SUBMIT_BATCH 64
#define TE_EVENT_BATCH 128

/* Events gathered during one loop turn, flushed together. */
struct turn {
    struct te_cb_event ev[TE_EVENT_BATCH];
    size_t nev;
    te_completion cq[TE_EVENT_BATCH];
    size_t ncq;
    int did_work;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void flush(struct te_engine *e, struct turn *t)
{
    if (t->nev && te_callbacks_push(&e->cb, t->ev, t->nev))
        te_log(e, 0, "callback queue: out of memory, %zu events lost", t->nev);
    if (t->ncq && te_cq_push(&e->cb, t->cq, t->ncq))
        te_log(e, 0, "completion queue: out of memory, %zu lost", t->ncq);
    t->nev = t->ncq = 0;
}

static struct te_cb_event *next_event(struct te_engine *e, struct turn *t)
{
    if (t->nev == TE_EVENT_BATCH)
        flush(e, t);
    return &t->ev[t->nev++];
}

static void complete_batched(struct te_engine *e, struct turn *t,
                             struct te_req *q)
{
    q->g->inflight_reqs--;
    q->link.prev->next = q->link.next;
    q->link.next->prev = q->link.prev;
    te_completion *c;
    if (q->r.done) {
        struct te_cb_event *ev = next_event(e, t);
        ev->kind = TE_CB_DONE;
        ev->u.done.fn = q->r.done;
        ev->u.done.arg = q->r.done_arg;
        c = &ev->u.done.c;
    } else {
        if (t->ncq == TE_EVENT_BATCH)
            flush(e, t);
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
    te_req_free(q);
}

static void req_fail(struct te_req *q, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void req_fail(struct te_req *q, int status, const char *fmt, ...)
{
    if (q->status)
        return; /* first error wins: a request fails once */
    q->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->reason, sizeof(q->reason), fmt, ap);
    va_end(ap);
}

static int req_finished(const struct te_req *q)
{
    return q->ops_done + q->ops_skipped == q->ops_total;
}

/* ------------------------------------------------------------- queues */

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
    if (!pq->active) {
        pq->active = 1;
        pq->next_active = NULL;
        /* append to the NIC's active FIFO (n->active is its head; the tail
         * is found through a walk-free trick: keep a tail pointer in
         * pending list order) */
        if (!n->active) {
            n->active = pq;
            n->active_tail = pq;
        } else {
            n->active_tail->next_active = pq;
            n->active_tail = pq;
        }
    }
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

static void accept_request(struct te_engine *e, struct te_group *g,
                           struct turn *t, struct te_req *q)
{
    g->inflight_reqs++;
    q->link.next = &g->inflight;
    q->link.prev = g->inflight.prev;
    g->inflight.prev->next = &q->link;
    g->inflight.prev = &q->link;
    if (q->ops_total == 0) {
        complete_batched(e, t, q);
        return;
    }
    for (uint32_t i = 0; i < q->ncursors; i++) {
        struct te_cursor *c = &q->cursors[i];
        if (c->remaining == 0)
            continue;
        queue_cursor(&g->nics[c->nic], &c->peer->q[c->nic], c);
    }
}

/* ------------------------------------------------------------- posting */

/* Fill op number t of cursor c (non-destructive). Returns 0, or -EAGAIN
 * when a resource (a send slot) is missing. */
static int fill_op(struct te_group *g, struct te_cursor *c, uint32_t t,
                   struct te_plugin_op *op)
{
    struct te_req *q = c->req;
    op->kind = c->kind;
    op->flags = c->flags;
    op->imm = c->imm;
    op->reserved = 0;
    op->peer = c->pp;
    op->mr = c->lmr ? c->lmr->pmr[c->nic] : NULL;
    if (c->paged) {
        uint32_t j = c->index + t * c->step;
        const typeof(q->r.u.paged) *p = &q->r.u.paged;
        op->local_addr = p->src->addr + p->src_off +
                         p->src_stride * (uint64_t)p->src_idx[j];
        op->len = p->page_len;
        op->remote_addr = c->rdesc->nic[c->remote_nic].remote_base +
                          p->dst_off + p->dst_stride * (uint64_t)p->dst_idx[j];
        op->rkey = c->rdesc->nic[c->remote_nic].rkey;
        op->context = (uint64_t)(uintptr_t)q | TE_CTX_REQ;
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
        s->req = q;
        memcpy(s->buf, c->local_addr, c->len);
        op->local_addr = s->buf;
        op->mr = n->send_mr;
        op->context = (uint64_t)(uintptr_t)s | TE_CTX_SEND;
        return 0;
    }
    op->context = (uint64_t)(uintptr_t)q | TE_CTX_REQ;
    return 0;
}

static void release_send_slot(struct te_nic *n, const struct te_plugin_op *op)
{
    if (TE_CTX_TAG(op->context) == TE_CTX_SEND) {
        struct te_msg_slot *s = TE_CTX_PTR(op->context);
        s->next_free = n->send_free;
        n->send_free = s;
    }
}

static void drop_cursor_head(struct te_nic *n, struct te_peer_queue *pq)
{
    struct te_cursor *c = pq->head;
    pq->head = c->next;
    if (!pq->head)
        pq->tail = NULL;
    n->pending_cursors--;
}

/* Skip what is left of failed requests' cursors at the head of pq. */
static void skip_failed(struct te_engine *e, struct turn *t, struct te_nic *n,
                        struct te_peer_queue *pq)
{
    while (pq->head && pq->head->req->status) {
        struct te_cursor *c = pq->head;
        struct te_req *q = c->req;
        q->ops_skipped += c->remaining;
        c->remaining = 0;
        drop_cursor_head(n, pq);
        if (req_finished(q))
            complete_batched(e, t, q);
    }
}

/* Post from one peer queue; returns 1 if the NIC refused more work. */
static int post_peer(struct te_engine *e, struct te_group *g, struct turn *t,
                     struct te_nic *n, struct te_peer_queue *pq)
{
    struct te_plugin_op ops[TE_POST_BATCH];
    const struct te_plugin_ops *P = e->plugin.ops;
    for (;;) {
        skip_failed(e, t, n, pq);
        if (!pq->head)
            return 0;
        size_t cnt = 0;
        struct te_cursor *c = pq->head;
        uint32_t off = 0;
        int starved = 0;
        while (c && cnt < TE_POST_BATCH) {
            if (c->req->status)
                break; /* skip at the next round, in order */
            if (fill_op(g, c, off, &ops[cnt]) == -EAGAIN) {
                starved = 1;
                break;
            }
            cnt++;
            if (++off == c->remaining) {
                c = c->next;
                off = 0;
            }
        }
        if (cnt == 0)
            return starved;
        int rc = P->post(n->pn, ops, cnt);
        size_t posted = rc > 0 ? (size_t)rc : 0;
        if (rc < 0) {
            /* The plugin rejected the first op outright: fail its request. */
            struct te_req *q = pq->head->req;
            req_fail(q, rc, "post on NIC %s rejected: %s: %s", n->info.name,
                     te_strerror(rc), te_last_error());
        }
        for (size_t i = posted; i < cnt; i++)
            release_send_slot(n, &ops[i]);
        /* Commit the posted ops to the cursors. */
        size_t left = posted;
        while (left) {
            struct te_cursor *h = pq->head;
            uint32_t take = left < h->remaining ? (uint32_t)left : h->remaining;
            h->remaining -= take;
            if (h->paged)
                h->index += take * h->step;
            left -= take;
            if (h->remaining == 0)
                drop_cursor_head(n, pq);
        }
        if (posted)
            t->did_work = 1;
        if (rc < 0)
            continue; /* skip_failed() drops the failed request */
        if (posted < cnt || starved)
            return 1;
    }
}

static void post_nic(struct te_engine *e, struct te_group *g, struct turn *t,
                     struct te_nic *n)
{
    /* One pass over the peers with work: a peer whose queue is full does
     * not stop the others (no head-of-line blocking across peers). */
    struct te_peer_queue *stop = NULL;
    struct te_peer_queue *pq;
    while ((pq = pop_active(n)) != NULL) {
        if (pq == stop) {
            push_active(n, pq);
            break;
        }
        post_peer(e, g, t, n, pq);
        if (pq->head) {
            push_active(n, pq);
            if (!stop)
                stop = pq;
        }
    }
}

/* ------------------------------------------------------------- polling */

/* The peer whose plugin handle on `nic` is pp (live or already down). */
static te_peer peer_of(struct te_group *g, uint32_t nic, te_plugin_peer pp)
{
    uint32_t n = atomic_load_explicit(&g->peer_count, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++)
        if (atomic_load_explicit(&g->peers[i].state, memory_order_relaxed) !=
                TE_PEER_FREE && g->peers[i].pp[nic] == pp)
            return g->peers[i].id;
    return TE_PEER_UNKNOWN;
}

static void fail_peer_queues(struct te_engine *e, struct te_group *g,
                             struct turn *t, struct te_peer_entry *pe,
                             int status, const char *why)
{
    for (uint32_t i = 0; i < g->nic_count; i++) {
        struct te_peer_queue *pq = &pe->q[i];
        for (struct te_cursor *c = pq->head; c; c = c->next)
            req_fail(c->req, status, "peer %u: %s", pe->id, why);
        skip_failed(e, t, &g->nics[i], pq);
    }
}

static void on_local(struct te_engine *e, struct te_group *g, struct turn *t,
                     struct te_nic *n, const struct te_plugin_cq_entry *ce)
{
    struct te_req *q;
    if (TE_CTX_TAG(ce->context) == TE_CTX_SEND) {
        struct te_msg_slot *s = TE_CTX_PTR(ce->context);
        q = s->req;
        s->req = NULL;
        s->next_free = n->send_free;
        n->send_free = s;
    } else {
        q = TE_CTX_PTR(ce->context);
    }
    q->ops_done++;
    if (ce->status)
        req_fail(q, ce->status, "%s on NIC %s failed: %s",
                 q->r.op == TE_OP_READ ? "read"
                 : q->r.op == TE_OP_SEND ? "send" : "write",
                 n->info.name, te_strerror(ce->status));
    if (req_finished(q))
        complete_batched(e, t, q);
}

static void on_recv(struct te_engine *e, struct te_group *g, struct turn *t,
                    uint32_t nic, const struct te_plugin_cq_entry *ce)
{
    struct te_nic *n = &g->nics[nic];
    struct te_msg_slot *s = TE_CTX_PTR(ce->context);
    if (ce->status == 0 && !atomic_load_explicit(&e->stopping,
                                                 memory_order_relaxed)) {
        pthread_mutex_lock(&g->recv_lock);
        te_recv_fn fn = g->recv_fn;
        void *arg = g->recv_arg;
        pthread_mutex_unlock(&g->recv_lock);
        if (fn) {
            uint8_t *copy = malloc(ce->len ? ce->len : 1);
            if (copy) {
                memcpy(copy, s->buf, ce->len);
                struct te_cb_event *ev = next_event(e, t);
                ev->kind = TE_CB_RECV;
                ev->u.recv.fn = fn;
                ev->u.recv.arg = arg;
                ev->u.recv.group = g->index;
                ev->u.recv.from = peer_of(g, nic, ce->peer);
                ev->u.recv.len = (uint32_t)ce->len;
                ev->u.recv.data = copy;
            } else {
                te_log(e, 0, "group %d: message of %" PRIu64
                       " bytes dropped: out of memory", g->index, ce->len);
            }
        }
    }
    /* A message too large for its buffer costs only that message; any other
     * receive error means the NIC's receive path is gone, and reposting
     * would spin on failures. */
    if (ce->status == 0 || ce->status == -EMSGSIZE) {
        n->recv_repost[n->recv_to_post++] = s;
    } else if (ce->status != -ECANCELED && !n->recv_broken) {
        n->recv_broken = 1;
        te_log(e, 1, "group %d NIC %s: receive failed: %s; receive buffers "
               "of this NIC are not reposted", g->index, n->info.name,
               te_strerror(ce->status));
    }
    if (ce->status == -EMSGSIZE)
        te_log(e, 1, "group %d NIC %s: message larger than "
               "engine.max_msg_size (%u) dropped", g->index, n->info.name,
               e->s.max_msg_size);
}

static void repost_recvs(struct te_engine *e, struct te_nic *n)
{
    /* Refill in batches: one post call for all freed buffers. */
    const struct te_plugin_ops *P = e->plugin.ops;
    while (n->recv_to_post) {
        struct te_plugin_op ops[TE_POST_BATCH];
        size_t cnt = n->recv_to_post < TE_POST_BATCH ? n->recv_to_post
                                                     : TE_POST_BATCH;
        for (size_t i = 0; i < cnt; i++) {
            struct te_msg_slot *s = n->recv_repost[n->recv_to_post - 1 - i];
            memset(&ops[i], 0, sizeof(ops[i]));
            ops[i].kind = TE_POP_RECV;
            ops[i].mr = n->recv_mr;
            ops[i].local_addr = s->buf;
            ops[i].len = e->s.max_msg_size;
            ops[i].context = (uint64_t)(uintptr_t)s | TE_CTX_RECV;
        }
        int rc = P->post(n->pn, ops, cnt);
        if (rc <= 0)
            return; /* retry next turn */
        n->recv_to_post -= (uint32_t)rc;
    }
}

static void poll_nic(struct te_engine *e, struct te_group *g, struct turn *t,
                     uint32_t nic)
{
    struct te_nic *n = &g->nics[nic];
    struct te_plugin_cq_entry ce[TE_POLL_BATCH];
    int got = e->plugin.ops->poll(n->pn, ce, TE_POLL_BATCH);
    if (got < 0) {
        te_log(e, 0, "group %d NIC %s: poll failed: %s", g->index,
               n->info.name, te_strerror(got));
        return;
    }
    if (got)
        t->did_work = 1;
    for (int i = 0; i < got; i++) {
        switch (ce[i].kind) {
        case TE_PCQ_LOCAL:
            on_local(e, g, t, n, &ce[i]);
            break;
        case TE_PCQ_IMM:
            if (te_imm_table_arrive(e->imms, ce[i].imm, 1) == -ENOSPC)
                te_log(e, 0, "ImmCounter table full (engine.imm_table_size "
                       "= %u): arrival of imm %u counted as overflow",
                       e->s.imm_table_size, ce[i].imm);
            break;
        case TE_PCQ_RECV:
            on_recv(e, g, t, nic, &ce[i]);
            break;
        case TE_PCQ_PEER_DOWN: {
            te_peer p = peer_of(g, nic, ce[i].peer);
            struct te_peer_entry *pe =
                p == TE_PEER_UNKNOWN ? NULL : te_group_peer(g, p);
            if (pe && atomic_load_explicit(&pe->state, memory_order_relaxed) ==
                          TE_PEER_LIVE) {
                te_log(e, 1, "group %d NIC %s: peer %u is down", g->index,
                       n->info.name, p);
                atomic_store_explicit(&pe->state, TE_PEER_DOWN,
                                      memory_order_release);
                fail_peer_queues(e, g, t, pe, -ECONNRESET,
                                 "peer is down (transport reported it)");
            }
            break;
        }
        default:
            te_log(e, 0, "group %d NIC %s: unknown completion kind %u",
                   g->index, n->info.name, ce[i].kind);
        }
    }
}

/* ------------------------------------------------------------- control */

static void run_control(struct te_engine *e, struct te_group *g,
                        struct te_control *c, struct turn *t);

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
    pthread_mutex_lock(&g->ctl_lock);
    c->next = g->ctl_head;
    g->ctl_head = c;
    atomic_store_explicit(&g->ctl_pending, 1, memory_order_release);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
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
        if (n >= g->peer_cap) {
            c->result = -ENOSPC;
            snprintf(c->reason, sizeof(c->reason),
                     "group %d already has %u peers (the maximum)", g->index,
                     g->peer_cap);
            return;
        }
        struct te_peer_entry *pe = &g->peers[n];
        memset(pe->q, 0, sizeof(pe->q));
        pe->id = n;
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
    fail_peer_queues(e, g, t, pe, -ECONNABORTED, "peer removed");
    for (uint32_t i = 0; i < g->nic_count; i++)
        P->peer_remove(g->nics[i].pn, pe->pp[i]);
    /* The slot is never reused, so a stale te_peer cannot alias a new peer. */
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

static int worker_turn(struct te_engine *e, struct te_group *g,
                       struct turn *t)
{
    t->did_work = 0;
    drain_control(e, g, t);
    void *items[TE_SUBMIT_BATCH];
    size_t n = te_mpsc_pop(g->subq, items, TE_SUBMIT_BATCH);
    for (size_t i = 0; i < n; i++)
        accept_request(e, g, t, items[i]);
    if (n)
        t->did_work = 1;
    for (uint32_t i = 0; i < g->nic_count; i++) {
        if (g->nics[i].active)
            post_nic(e, g, t, &g->nics[i]);
        poll_nic(e, g, t, i);
        if (g->nics[i].recv_to_post)
            repost_recvs(e, &g->nics[i]);
    }
    flush(e, t);
    return t->did_work;
}

/* Fail everything still queued; wait (bounded) for posted ops to return. */
static void worker_shutdown(struct te_engine *e, struct te_group *g,
                            struct turn *t)
{
    void *items[TE_SUBMIT_BATCH];
    size_t n;
    while ((n = te_mpsc_pop(g->subq, items, TE_SUBMIT_BATCH)) > 0)
        for (size_t i = 0; i < n; i++)
            accept_request(e, g, t, items[i]);
    uint32_t np = atomic_load_explicit(&g->peer_count, memory_order_relaxed);
    for (uint32_t p = 0; p < np; p++)
        fail_peer_queues(e, g, t, &g->peers[p], -ECANCELED,
                         "engine destroyed");
    uint64_t deadline = now_ns() + 2000000000ull;
    while (g->inflight_reqs && now_ns() < deadline) {
        drain_control(e, g, t);
        for (uint32_t i = 0; i < g->nic_count; i++)
            poll_nic(e, g, t, i);
        flush(e, t);
    }
    drain_control(e, g, t);
    flush(e, t);
    if (g->inflight_reqs)
        te_log(e, 1, "group %d: %" PRIu64 " requests still in flight after "
               "2 s at shutdown: failing them with -ECANCELED", g->index,
               g->inflight_reqs);
    /* Their late completions can never arrive: the NICs close next. */
    while (g->inflight.next != &g->inflight) {
        struct te_req *q = (struct te_req *)g->inflight.next;
        req_fail(q, -ECANCELED, "engine destroyed before the transport "
                 "completed %" PRIu64 " of %" PRIu64 " operations",
                 q->ops_total - q->ops_done - q->ops_skipped, q->ops_total);
        complete_batched(e, t, q);
    }
    flush(e, t);
}

static void *worker_main(void *arg)
{
    struct te_group *g = arg;
    struct te_engine *e = g->e;
    pin_worker(e, g);
    struct turn *t = calloc(1, sizeof(*t));
    if (!t) {
        te_log(e, 0, "group %d: worker out of memory", g->index);
        return NULL;
    }
    for (uint32_t i = 0; i < g->nic_count; i++)
        repost_recvs(e, &g->nics[i]);
    uint64_t idle_since = 0;
    while (!atomic_load_explicit(&e->stopping, memory_order_acquire)) {
        if (worker_turn(e, g, t)) {
            idle_since = 0;
            continue;
        }
        uint64_t now = now_ns();
        if (!idle_since)
            idle_since = now;
        if (now - idle_since >= (uint64_t)e->s.idle_spin_us * 1000u &&
            e->s.idle_sleep_us) {
            struct timespec ts = {0, (long)e->s.idle_sleep_us * 1000L};
            nanosleep(&ts, NULL);
        }
    }
    worker_shutdown(e, g, t);
    free(t);
    return NULL;
}

int te_worker_start(struct te_group *g)
{
    int rc = pthread_create(&g->worker, NULL, worker_main, g);
    if (rc)
        return -rc;
    g->worker_started = 1;
    return 0;
}

void te_worker_stop(struct te_group *g)
{
    if (g->worker_started) {
        pthread_join(g->worker, NULL);
        g->worker_started = 0;
    }
}
