/*
 * Heartbeats: a peer that dies while nothing is outstanding towards it is
 * otherwise noticed only at the next request (or by a transport that
 * watches processes). Every engine.heartbeat_ms, a live peer that was
 * written to before and has had nothing outstanding on a NIC for that long
 * gets one zero-length WRITE without an immediate on that NIC, at the
 * place the last write went (a region the peer registered for remote
 * writes; a zero-length write changes nothing there and produces no event
 * at the peer). Its completion is the heartbeat's answer:
 *  - success: the peer is alive;
 *  - a connection error (the transport lost the peer): the peer is down,
 *    with the reason, and its requests fail as for any dead peer;
 *  - a key or range error (the region was deregistered or revoked since):
 *    the place is forgotten until the next write;
 *  - no answer: the operation is outstanding, so the liveness rule
 *    (engine.peer_timeout_ms without progress) declares the peer down.
 * No wire format, no cooperation from the peer, any plugin.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "nic_guard.h"

static int connection_error(int status)
{
    switch (-status) {
    case ECONNRESET:
    case ECONNABORTED:
    case ECONNREFUSED:
    case ENOTCONN:
    case ENETDOWN:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case EPIPE:
    case ETIMEDOUT:
        return 1;
    default:
        return 0;
    }
}

void te_heartbeat_send(struct te_engine *e, struct te_group *g, struct turn *t)
{
    uint64_t idle_ns = (uint64_t)e->s.heartbeat_ms * 1000000ull;
    /* Scan a quarter period at a time: thousands of peers cost the worker
     * a scan every few ms otherwise; a probe is at most 1.25 periods late. */
    if (te_turn_now(t) < t->next_hb_ns)
        return;
    t->next_hb_ns = te_turn_now(t) + idle_ns / 4;
    uint32_t np = atomic_load_explicit(&g->peer_count, memory_order_relaxed);
    for (uint32_t p = 0; p < np; p++) {
        struct te_peer_entry *pe = &g->peers[p];
        if (atomic_load_explicit(&pe->state, memory_order_relaxed) !=
            TE_PEER_LIVE)
            continue;
        for (uint32_t i = 0; i < g->nic_count; i++) {
            if (!pe->hb_known[i] || pe->hb_inflight[i] || pe->outstanding[i] ||
                te_turn_now(t) - pe->last_progress_ns[i] < idle_ns)
                continue;
            struct te_plugin_op op;
            memset(&op, 0, sizeof(op));
            op.kind = TE_POP_WRITE;
            op.peer = pe->pp[i];
            op.remote_addr = pe->hb_addr[i];
            op.rkey = pe->hb_rkey[i];
            op.context = ((uint64_t)p << 8 | i) << 2 | TE_CTX_HEARTBEAT;
            /* Queue full: the NIC is busy with others; try next time. */
            if (te_guard_post(e, g, &g->nics[i], &op, 1) != 1)
                continue;
            pe->hb_inflight[i] = 1;
            pe->outstanding[i]++;
            pe->last_progress_ns[i] = te_turn_now(t);
            t->did_work = 1;
        }
    }
}

void te_heartbeat_done(struct te_engine *e, struct te_group *g, struct turn *t,
                       const struct te_plugin_cq_entry *ce)
{
    uint64_t v = ce->context >> 2;
    uint32_t p = (uint32_t)(v >> 8), i = (uint32_t)(v & 0xff);
    if (p >= atomic_load_explicit(&g->peer_count, memory_order_relaxed) ||
        i >= g->nic_count) {
        te_log(e, 0, "group %d: heartbeat completion with a bad context "
               "0x%llx: ignored", g->index, (unsigned long long)ce->context);
        return;
    }
    struct te_peer_entry *pe = &g->peers[p];
    pe->hb_inflight[i] = 0;
    pe->outstanding[i]--;
    pe->last_progress_ns[i] = te_turn_now(t);
    if (ce->status == 0)
        return;
    if (connection_error(ce->status)) {
        char why[160];
        snprintf(why, sizeof(why), "heartbeat on NIC %s failed: %s",
                 g->nics[i].info.name, te_strerror(ce->status));
        te_peer_down(e, g, t, pe, ce->status, why);
        return;
    }
    /* The place went away (revoked, deregistered) or the transport refused
     * this one write: forget it until the next write to the peer. */
    pe->hb_known[i] = 0;
    te_log(e, 2, "group %d: heartbeat to peer %u on NIC %s: %s; no "
           "heartbeat there until the next write", g->index, pe->id,
           g->nics[i].info.name, te_strerror(ce->status));
}
