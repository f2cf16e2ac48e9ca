/*
 * Heartbeats: a peer that dies while nothing is outstanding towards it is
 * otherwise noticed only at the next request (or by a transport that
 * watches processes). Every engine.heartbeat_ms, a live peer that has had
 * nothing outstanding on a NIC for that long gets one zero-length WRITE
 * without an immediate on that NIC: at the place the last write went (a
 * region the peer registered for remote writes), or, for a peer never
 * written to there, without an address or key (engine.heartbeat_keyless,
 * on one NIC per peer: a receiver that only takes writes from a peer
 * learns of its death too). A zero-length write changes nothing at the
 * peer and produces no event there; every transport of this tree takes
 * one without a key (loopback needs none, RDMA checks none for zero bytes,
 * efa sends it to the peer's landing region). Its completion is the
 * heartbeat's answer:
 *  - success: the peer is alive;
 *  - a connection error (the transport lost the peer): the peer is down,
 *    with the reason, and its requests fail as for any dead peer;
 *  - a key or range error, or a refusal at post: the place was
 *    deregistered or revoked since (forgotten until the next write; a
 *    keyless probe takes its turn), or the peer's NIC does not take
 *    keyless writes (none is tried there again);
 *  - no answer: the operation is outstanding, so the liveness rule
 *    (engine.peer_timeout_ms without progress) declares the peer down;
 *    not so for a keyless probe (hb_post says why): the peer is probed
 *    again once it answers.
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

/* Probe peer pe on NIC i without a key from now on (its place is
 * unknown), unless keyless probes are off or its NIC refused one. */
static void watch_keyless(struct te_engine *e, struct turn *t,
                          struct te_peer_entry *pe, uint32_t i)
{
    if (!e->s.heartbeat_keyless || pe->hb_keyless_refused[i]) {
        pe->hb_known[i] = TE_HB_NONE;
        return;
    }
    pe->hb_known[i] = TE_HB_KEYLESS;
    pe->hb_addr[i] = 0;
    pe->hb_rkey[i] = 0;
    te_heartbeat_watch(t);
}

void te_heartbeat_added(struct te_engine *e, struct te_group *g,
                        struct turn *t, struct te_peer_entry *pe)
{
    if (!e->s.heartbeat_ms || !e->s.heartbeat_keyless)
        return;
    /* One NIC is enough to find a dead process; spread peers (by slot)
     * over NICs. */
    uint32_t i = (uint32_t)(pe - g->peers) % g->nic_count;
    pe->last_progress_ns[i] = te_turn_now(t); /* due a period from now */
    watch_keyless(e, t, pe, i);
}

/* What a probe that failed without a connection error (or was refused at
 * post) means: its place is gone, or keyless probes are not taken there. */
static void forget_place(struct te_engine *e, struct te_group *g,
                         struct turn *t, struct te_peer_entry *pe, uint32_t i,
                         int keyless, int status)
{
    if (keyless) {
        pe->hb_keyless_refused[i] = 1;
        if (pe->hb_known[i] == TE_HB_KEYLESS)
            pe->hb_known[i] = TE_HB_NONE;
        te_log(e, 2, "group %d: peer %u takes no heartbeat without a key on "
               "NIC %s (%s): probed there only after a write to it",
               g->index, pe->id, g->nics[i].info.name, te_strerror(status));
        return;
    }
    if (pe->hb_known[i] != TE_HB_PLACE)
        return; /* a write since has given a new place */
    te_log(e, 2, "group %d: heartbeat to peer %u on NIC %s: %s; probed "
           "there %s until the next write", g->index, pe->id,
           g->nics[i].info.name, te_strerror(status),
           e->s.heartbeat_keyless && !pe->hb_keyless_refused[i]
               ? "without a key" : "no more");
    watch_keyless(e, t, pe, i);
}

/* One probe to peer pe (slot p) on NIC i; 0 when the NIC took it. */
static int hb_post(struct te_engine *e, struct te_group *g, struct turn *t,
                   struct te_peer_entry *pe, uint32_t p, uint32_t i)
{
    struct te_plugin_op op;
    memset(&op, 0, sizeof(op));
    int keyless = pe->hb_known[i] == TE_HB_KEYLESS;
    op.kind = TE_POP_WRITE;
    op.peer = pe->pp[i];
    op.remote_addr = pe->hb_addr[i];
    op.rkey = pe->hb_rkey[i];
    op.context = ((uint64_t)p << 9 | (uint64_t)keyless << 8 | i) << 2 |
                 TE_CTX_HEARTBEAT;
    int rc = te_guard_post(e, g, &g->nics[i], &op, 1);
    if (rc < 0) { /* refused outright: not a place to probe */
        forget_place(e, g, t, pe, i, keyless, rc);
        return 0;
    }
    /* Queue full: the NIC is busy with others; try next time. */
    if (rc != 1)
        return -EAGAIN;
    pe->hb_inflight[i] = 1;
    /* A keyless probe does not count for the liveness rule: unanswered, it
     * says only that nobody polls the peer (a caller-mode engine between
     * progress calls, over a transport that needs the target's CPU), not
     * that the peer is gone; its transport's error says that. */
    if (!keyless)
        pe->outstanding[i]++;
    pe->last_progress_ns[i] = te_turn_now(t);
    t->did_work = 1;
    return 0;
}

/* When the scan next has something to do: the earliest time a watched
 * peer (live, with a place or a keyless probe on that NIC) can fall due;
 * never (UINT64_MAX) with none, until a peer is added (keyless probes) or
 * first written to (te_heartbeat_added, note_posted: te_heartbeat_watch).
 * An idle engine then wakes for heartbeats only when one is due (once a
 * period per idle peer), not every quarter period. */
void te_heartbeat_send(struct te_engine *e, struct te_group *g, struct turn *t)
{
    uint64_t idle_ns = (uint64_t)e->s.heartbeat_ms * 1000000ull;
    uint64_t now = te_turn_now(t);
    if (now < t->next_hb_ns)
        return;
    uint64_t next = UINT64_MAX;
    uint32_t np = atomic_load_explicit(&g->peer_count, memory_order_relaxed);
    for (uint32_t p = 0; p < np; p++) {
        struct te_peer_entry *pe = &g->peers[p];
        if (atomic_load_explicit(&pe->state, memory_order_relaxed) !=
            TE_PEER_LIVE)
            continue;
        for (uint32_t i = 0; i < g->nic_count; i++) {
            if (!pe->hb_known[i])
                continue;
            /* Busy (outstanding, or a probe in flight): its completions
             * restart its clock, so it is due a period after them at the
             * earliest; a later scan that finds it not yet due waits on. */
            uint64_t due = now + idle_ns;
            if (!pe->hb_inflight[i] && !pe->outstanding[i]) {
                if (now - pe->last_progress_ns[i] < idle_ns)
                    due = pe->last_progress_ns[i] + idle_ns;
                else if (hb_post(e, g, t, pe, p, i) != 0)
                    due = now; /* queue full: the next scan tries again */
            }
            if (due < next)
                next = due;
        }
    }
    /* Thousands of peers: one scan per quarter period at most; a probe is
     * then at most a quarter period late. */
    uint64_t soonest = now + idle_ns / 4;
    t->next_hb_ns = next == UINT64_MAX ? UINT64_MAX
                                       : (next > soonest ? next : soonest);
}

void te_heartbeat_done(struct te_engine *e, struct te_group *g, struct turn *t,
                       const struct te_plugin_cq_entry *ce)
{
    uint64_t v = ce->context >> 2;
    uint32_t p = (uint32_t)(v >> 9), i = (uint32_t)(v & 0xff);
    int keyless = (int)(v >> 8 & 1);
    if (p >= atomic_load_explicit(&g->peer_count, memory_order_relaxed) ||
        i >= g->nic_count) {
        te_log(e, 0, "group %d: heartbeat completion with a bad context "
               "0x%llx: ignored", g->index, (unsigned long long)ce->context);
        return;
    }
    struct te_peer_entry *pe = &g->peers[p];
    pe->hb_inflight[i] = 0;
    if (!keyless)
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
    forget_place(e, g, t, pe, i, keyless, ce->status);
}
