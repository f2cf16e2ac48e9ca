/*
 * Completions on the worker: local completions close operations of their
 * cursor (and track the peer's liveness), immediates go to the ImmCounter,
 * received messages to the callback thread, and receive buffers are
 * reposted in batches.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nic_guard.h"
#include "te_error.h"
#include "te_hot.h"

/* The peer whose plugin handle on `nic` is pp (live or already down). */
te_peer te_peer_of(struct te_group *g, uint32_t nic, te_plugin_peer pp)
{
    uint32_t n = atomic_load_explicit(&g->peer_count, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++)
        if (atomic_load_explicit(&g->peers[i].state, memory_order_relaxed) !=
                TE_PEER_FREE && g->peers[i].pp[nic] == pp)
            return g->peers[i].id;
    return TE_PEER_UNKNOWN;
}

static const char *op_word(uint32_t kind)
{
    return kind == TE_POP_READ ? "read" : kind == TE_POP_SEND ? "send"
                                                              : "write";
}

TE_HOT
static void on_local(struct te_engine *e, struct te_group *g, struct turn *t,
                     struct te_nic *n, const struct te_plugin_cq_entry *ce)
{
    struct te_cursor *c;
    if (TE_CTX_TAG(ce->context) == TE_CTX_HEARTBEAT) {
        te_heartbeat_done(e, g, t, ce);
        return;
    }
    if (TE_CTX_TAG(ce->context) == TE_CTX_SEND) {
        struct te_msg_slot *s = TE_CTX_PTR(ce->context);
        c = s->cursor;
        s->cursor = NULL;
        s->next_free = n->send_free;
        n->send_free = s;
    } else {
        c = TE_CTX_PTR(ce->context);
    }
    struct te_req *q = c->req;
    struct te_peer_entry *pe = c->peer;
    c->inflight--;
    pe->outstanding[c->nic]--;
    pe->last_progress_ns[c->nic] = te_turn_now(t);
    q->ops_done++;
    if (ce->status)
        te_req_fail(q, ce->status, "%s to peer %u on NIC %s failed: %s",
                    op_word(c->kind), pe->id, n->info.name,
                    te_strerror(ce->status));
    te_req_settle(e, t, q);
}

static void on_recv(struct te_engine *e, struct te_group *g, struct turn *t,
                    uint32_t nic, const struct te_plugin_cq_entry *ce)
{
    struct te_nic *n = &g->nics[nic];
    struct te_msg_slot *s = TE_CTX_PTR(ce->context);
    if (ce->status == 0 &&
        !atomic_load_explicit(&e->stopping, memory_order_relaxed)) {
        /* Only a hint: the callback thread reads the handler itself. */
        if (atomic_load_explicit(&g->recv.set, memory_order_acquire)) {
            uint8_t *copy = malloc(ce->len ? ce->len : 1);
            if (copy) {
                memcpy(copy, s->buf, ce->len);
                struct te_cb_event *ev = te_turn_event(e, t);
                ev->kind = TE_CB_RECV;
                ev->u.recv.slot = &g->recv;
                ev->u.recv.group = g->index;
                ev->u.recv.from = te_peer_of(g, nic, ce->peer);
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

void te_repost_recvs(struct te_engine *e, struct te_group *g,
                     struct te_nic *n)
{
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
        int rc = te_guard_post(e, g, n, ops, cnt);
        if (rc <= 0)
            return; /* retry next turn */
        n->recv_to_post -= (uint32_t)rc;
    }
}

TE_HOT
void te_poll_nic(struct te_engine *e, struct te_group *g, struct turn *t,
                 uint32_t nic)
{
    struct te_nic *n = &g->nics[nic];
    struct te_plugin_cq_entry ce[TE_POLL_BATCH];
    if (n->failed) {
        /* Its requests fail once; what it still reports is drained (so a
         * wait object's readiness clears) and dropped unread. */
        te_guard_sweep(e, g, t, nic);
        e->plugin.ops->poll(n->pn, ce, TE_POLL_BATCH);
        return;
    }
    te_worker_progress = 0;
    /* What the plugin says through set_error() during this poll belongs
     * to what it reports here (a peer it refuses, say). */
    te_error_clear();
    int got = e->plugin.ops->poll(n->pn, ce, TE_POLL_BATCH);
    if (te_worker_progress)
        t->did_work = 1; /* work without entries (host->progressed) */
    if (te_guard_poll_count(e, g, n, got, TE_POLL_BATCH)) {
        te_guard_sweep(e, g, t, nic);
        return;
    }
    if (got < 0) {
        te_log(e, 0, "group %d NIC %s: poll failed: %s", g->index,
               n->info.name, te_strerror(got));
        return;
    }
    if (got)
        t->did_work = 1;
    for (int i = 0; i < got; i++) {
        if (te_guard_entry(e, g, n, &ce[i])) {
            te_guard_sweep(e, g, t, nic);
            return;
        }
        switch (ce[i].kind) {
        case TE_PCQ_LOCAL:
            on_local(e, g, t, n, &ce[i]);
            break;
        case TE_PCQ_IMM:
            if (te_imm_spaces_stale(&e->spaces, ce[i].imm))
                break; /* a retired life's: counted in its space only */
            if (te_imm_table_arrive(e->imms, ce[i].imm, 1) == -ENOSPC)
                te_log(e, 0, "ImmCounter table full (engine.imm_table_size "
                       "= %u): arrival of imm %u counted as overflow",
                       e->s.imm_table_size, ce[i].imm);
            break;
        case TE_PCQ_RECV:
            on_recv(e, g, t, nic, &ce[i]);
            break;
        case TE_PCQ_PEER_DOWN: {
            te_peer p = te_peer_of(g, nic, ce[i].peer);
            if (p != TE_PEER_UNKNOWN) {
                char why[320];
                /* -ESHUTDOWN: the peer closed in order (plugin ABI 1.x,
                 * older plugins report 0 = a failure). The plugin's own
                 * words (set_error during this poll: "authentication
                 * failed", say) follow. */
                int orderly = ce[i].status == -ESHUTDOWN;
                const char *said = te_last_error();
                snprintf(why, sizeof(why), orderly
                         ? "it closed its NIC %s in order%s%s"
                         : "the transport reported it unreachable on NIC "
                           "%s%s%s",
                         n->info.name, said[0] ? ": " : "", said);
                if (orderly)
                    te_peer_closing(e, g, t, te_group_peer(g, p), why);
                else
                    te_peer_down(e, g, t, te_group_peer(g, p), -ECONNRESET,
                                 why);
            }
            break;
        }
        default: /* te_guard_entry let no other kind through */
            break;
        }
    }
}
