/*
 * Connections: one RC QP per remote NIC, created lazily by peer_add() or by
 * the remote's first handshake datagram, driven by the pure state machine
 * of mx_hs.c. This file executes its actions (connect the QP, send a
 * datagram, replace the QP) and turns failures into errors:
 *
 *  - posts to a conn that is not established yet are not accepted (post()
 *    returns fewer than n and the core retries): nothing waits inside the
 *    plugin, so nothing can be forgotten there;
 *  - a QP in the error state (an error completion) is replaced; the ops
 *    still on it complete with errors; the remote replaces its QP too;
 *  - a deadline or a bye from the remote fails the conn: its ops complete
 *    with errors, one TE_PCQ_PEER_DOWN is reported, later posts to it
 *    complete with an error at once; peer_add() of it again restarts it;
 *  - with a job secret (docs/security.md), a peer that fails authentication
 *    fails the conn the same way with -EACCES, the reason logged and in the
 *    engine's last error; its QP never left INIT.
 *
 * Peer handles are (seq << 32 | slot + 1) in a handle table, so a handle
 * removed and a new one added are never confused.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mx_internal.h"

/* ------------------------------------------------------------ bookkeeping */

/* Keep nic->connecting equal to the number of conns in CONNECTING. */
static void mx_conn_sync(mx_nic *nic, struct mx_conn *c)
{
    bool now = c->hs.state == MX_HS_CONNECTING;
    if (now != c->counted) {
        if (now)
            nic->connecting++;
        else
            nic->connecting--;
        c->counted = now;
    }
}

/* c's QP is gone or replaced: it needs no replacement any more. */
static void mx_conn_unbreak(mx_nic *nic, struct mx_conn *c)
{
    if (!c->broken)
        return;
    for (struct mx_conn **pp = &nic->broken; *pp; pp = &(*pp)->next_broken)
        if (*pp == c) {
            *pp = c->next_broken;
            break;
        }
    c->broken = false;
}

static void mx_conn_drop_qp(mx_nic *nic, struct mx_conn *c)
{
    if (!c->qp)
        return;
    /* Completions already in the CQ are real results: take them first
     * (this may mark c broken; dropping its QP settles that). */
    mx_send_progress(nic, NULL, 0, 0, true);
    mx_conn_unbreak(nic, c);
    mx_map_del(&nic->by_qpn, c->qp->qp_num);
    int rc = ibv_destroy_qp(c->qp);
    if (rc)
        mx_log(nic->ctx, 1, "%s: ibv_destroy_qp(0x%x) failed: %s (errno %d)",
               nic->name, c->qp->qp_num, strerror(rc), rc);
    c->qp = NULL;
    c->qp_failed = false;
}

static void mx_conn_destroy(mx_nic *nic, struct mx_conn *c)
{
    mx_conn_drop_qp(nic, c);
    mx_conn_fail_ops(nic, c, -ECONNRESET);
    mx_conn_unbreak(nic, c);
    c->hs.state = MX_HS_FAILED;
    mx_conn_sync(nic, c);
    if (c->ah)
        mx_oob_ah_release(nic, c->ah); /* a REFUSE may still be leaving */
    mx_map_del(&nic->by_rid, c->rid);
    nic->conns[c->index] = NULL;
    while (nic->nconns && !nic->conns[nic->nconns - 1])
        nic->nconns--;
    free(c->ring);
    free(c);
}

static struct mx_conn *mx_conn_new(mx_nic *nic, const struct mx_addr *ra,
                                   bool has_secret, bool initiator)
{
    struct mx_conn *c = calloc(1, sizeof(*c));
    uint32_t cap = 16;
    while (cap < nic->qp_depth)
        cap <<= 1;
    if (c)
        c->ring = malloc(cap * sizeof(*c->ring));
    if (!c || !c->ring) {
        free(c);
        mx_err(nic, "out of memory creating a connection");
        errno = ENOMEM;
        return NULL;
    }
    uint8_t nonce[MX_NONCE_LEN];
    if (nic->hsp.auth && mx_nonce(nic, nonce)) {
        free(c->ring);
        free(c);
        errno = EIO;
        return NULL;
    }
    c->ring_mask = cap - 1;
    c->rid = ra->nic_id;
    c->ra = *ra;
    c->has_secret = has_secret;
    c->path_mtu = ra->mtu < nic->mtu ? ra->mtu : nic->mtu;
    uint32_t idx = 0;
    while (idx < nic->nconns && nic->conns[idx])
        idx++;
    if (idx == nic->conns_cap) {
        uint32_t nc = nic->conns_cap ? nic->conns_cap * 2 : 16;
        struct mx_conn **np = realloc(nic->conns, nc * sizeof(*np));
        if (!np) {
            free(c->ring);
            free(c);
            errno = ENOMEM;
            return NULL;
        }
        nic->conns = np;
        nic->conns_cap = nc;
    }
    if (!(c->qp = mx_qp_create(nic))) {
        int e = errno;
        free(c->ring);
        free(c);
        errno = e;
        return NULL;
    }
    if (mx_map_put(&nic->by_rid, c->rid, c) ||
        mx_map_put(&nic->by_qpn, c->qp->qp_num, c)) {
        mx_map_del(&nic->by_rid, c->rid);
        ibv_destroy_qp(c->qp);
        free(c->ring);
        free(c);
        errno = ENOMEM;
        return NULL;
    }
    c->index = idx;
    nic->conns[idx] = c;
    if (idx == nic->nconns)
        nic->nconns++;
    mx_hs_init(&c->hs, c->qp->qp_num, mx_psn_random(), ++nic->epoch, nonce,
               initiator, tpc_now_ns(), &nic->hsp);
    mx_ident(&nic->addr, c->hs.l_ident);
    mx_ident(&c->ra, c->hs.r_ident);
    mx_conn_sync(nic, c);
    return c;
}

/* ----------------------------------------------------------- down, renew */

void mx_conn_say_down(mx_nic *nic, const struct mx_conn *c, int status,
                      const char *why)
{
    if (status == -EACCES) /* why: "failed authentication: ..." */
        mx_err(nic, "peer NIC %016llx %s", (unsigned long long)c->rid, why);
    else
        mx_err(nic, "peer NIC %016llx is down: %s", (unsigned long long)c->rid,
               why);
}

/* c is down: its ops and later posts fail with status; the PEER_DOWN
 * says -ESHUTDOWN instead when the remote closed in order (its bye), as
 * the plugin ABI asks, so the core tells a close from a failure. */
static void mx_conn_down_as(mx_nic *nic, struct mx_conn *c, int status,
                            bool orderly, const char *why)
{
    c->hs.state = MX_HS_FAILED;
    mx_conn_sync(nic, c);
    mx_conn_drop_qp(nic, c);
    mx_conn_fail_ops(nic, c, status);
    if (status == -EACCES) /* both sides say so, whoever refused */
        mx_log(nic->ctx, 1, "%s: peer NIC %016llx %s", nic->name,
               (unsigned long long)c->rid, why);
    if (!c->refs) {
        mx_log(nic->ctx, 2, "%s: connection from NIC %016llx dropped: %s",
               nic->name, (unsigned long long)c->rid, why);
        mx_conn_destroy(nic, c);
        return;
    }
    c->down_status = status;
    c->down_why = why;
    mx_conn_say_down(nic, c, status, why);
    if (!c->down_reported) {
        c->down_reported = true;
        struct te_plugin_cq_entry e = {.kind = TE_PCQ_PEER_DOWN,
                                       .status = orderly ? -ESHUTDOWN : status,
                                       .peer = c->handle};
        mx_cq_push(nic, &e);
    }
}

static void mx_conn_down(mx_nic *nic, struct mx_conn *c, int status,
                         const char *why)
{
    mx_conn_down_as(nic, c, status, false, why);
}

/* Replace c's QP: its ops fail with status; 0, or -1 if c went down. */
static int mx_conn_renew(mx_nic *nic, struct mx_conn *c, int status)
{
    mx_conn_drop_qp(nic, c);
    mx_conn_fail_ops(nic, c, status);
    uint8_t nonce[MX_NONCE_LEN];
    if (nic->hsp.auth && mx_nonce(nic, nonce)) {
        mx_conn_down(nic, c, -EIO, "no randomness for an authentication nonce");
        return -1;
    }
    if (!(c->qp = mx_qp_create(nic)) ||
        mx_map_put(&nic->by_qpn, c->qp->qp_num, c)) {
        if (c->qp) {
            ibv_destroy_qp(c->qp);
            c->qp = NULL;
        }
        mx_conn_down(nic, c, -ENOMEM, "cannot create a new QP");
        return -1;
    }
    mx_hs_renewed(&c->hs, c->qp->qp_num, mx_psn_random(), ++nic->epoch, nonce,
                  tpc_now_ns(), &nic->hsp);
    c->down_reported = false;
    mx_conn_sync(nic, c);
    mx_log(nic->ctx, 2, "%s: QP towards NIC %016llx replaced by 0x%x",
           nic->name, (unsigned long long)c->rid, c->qp->qp_num);
    return 0;
}

/* Why a conn went down, by the event that said so. */
#define MX_WHY_TIMEOUT "not connected within connect_timeout_ms (remote " \
                       "unreachable, dead, or not polling its NIC)"
#define MX_WHY_BYE "the remote NIC closed"

/* Perform the actions of one state machine step (RENEW excluded). */
static void mx_conn_act(mx_nic *nic, struct mx_conn *c, unsigned act,
                        struct mx_hs_wire *out, bool timer)
{
    mx_conn_sync(nic, c);
    if (act & MX_HS_DOWN) {
        if (act & MX_HS_SEND) /* our refusal, with its reason */
            mx_oob_send(nic, c, out);
        if (c->hs.fail)
            mx_conn_down(nic, c, -EACCES, mx_hs_fail_str(c->hs.fail));
        else
            mx_conn_down_as(nic, c, timer ? -ETIMEDOUT : -ECONNRESET, !timer,
                            timer ? MX_WHY_TIMEOUT : MX_WHY_BYE);
        return;
    }
    if ((act & MX_HS_CONNECT) && mx_qp_connect(nic, c) < 0) {
        /* e.g. a GID not yet ready: start over with a fresh QP; the
         * deadline bounds how often. */
        mx_conn_mark_broken(nic, c);
        return;
    }
    if (act & MX_HS_SEND)
        mx_oob_send(nic, c, out); /* a lost datagram is retransmitted */
    if (act & MX_HS_UP) {
        mx_log(nic->ctx, 2, "%s: connected to NIC %016llx (QP 0x%x <-> 0x%x)",
               nic->name, (unsigned long long)c->rid, c->hs.l_qpn, c->hs.r_qpn);
        /* post() refused this conn's ops while it was connecting and the
         * core holds them, to post again on its next loop turn. Becoming
         * established produces no completion entry, and when the datagram
         * that did it needs no answer (the remote was up first) no later
         * CQ event comes either: without this the worker counts the turn
         * idle, arms (nothing connecting any more) and blocks with the
         * ops still queued, until some unrelated event or timed wake-up. */
        mx_progressed(nic);
    }
}

void mx_conn_mark_broken(mx_nic *nic, struct mx_conn *c)
{
    if (c->broken || c->hs.state == MX_HS_FAILED)
        return;
    c->broken = true;
    c->next_broken = nic->broken;
    nic->broken = c;
}

void mx_conn_fix_broken(mx_nic *nic)
{
    /* Renewing drains the send CQ, which may mark more conns: loop until
     * none is left (each conn at most once per QP incarnation). */
    while (nic->broken) {
        struct mx_conn *c = nic->broken;
        nic->broken = c->next_broken;
        c->broken = false;
        if ((mx_hs_on_error(&c->hs) & MX_HS_RENEW) &&
            mx_conn_renew(nic, c, -ECONNRESET) == 0) {
            struct mx_hs_wire out;
            mx_conn_act(nic, c, mx_hs_on_timer(&c->hs, tpc_now_ns(), &nic->hsp,
                                               &out), &out, true);
        }
    }
}

/* ---------------------------------------------------------- datagrams */

void mx_conn_on_datagram(mx_nic *nic, struct mx_conn *c,
                         const struct mx_hs_wire *m)
{
    uint64_t now = tpc_now_ns();
    struct mx_hs_wire out;
    if (c->hs.state == MX_HS_FAILED && c->hs.fail) {
        /* Refused (the core still holds the peer): the peer cannot have
         * changed its key; repeat a refusal of ours if it asks again. */
        if (mx_hs_on_msg(&c->hs, m, now, &nic->hsp, &out) & MX_HS_SEND)
            mx_oob_send(nic, c, &out);
        return;
    }
    if (c->hs.state == MX_HS_FAILED) {
        /* The core still holds this peer as down. A newer QP of the remote
         * means it is back (e.g. it added us again): serve it. */
        if (m->type != MX_HS_T_HELLO || m->epoch <= c->hs.r_epoch)
            return;
        mx_hs_restart(&c->hs);
        if (mx_conn_renew(nic, c, -ECONNRESET))
            return;
    }
    unsigned act = mx_hs_on_msg(&c->hs, m, now, &nic->hsp, &out);
    if (act & MX_HS_RENEW) {
        if (mx_conn_renew(nic, c, -ECONNRESET))
            return;
        act = mx_hs_on_msg(&c->hs, m, now, &nic->hsp, &out);
    }
    mx_conn_act(nic, c, act, &out, false);
}

struct mx_conn *mx_conn_passive(mx_nic *nic, const struct mx_hs_wire *m)
{
    if (m->src_link_layer != nic->link_layer) {
        nic->hs_rejected++;
        return NULL;
    }
    struct mx_addr ra;
    memset(&ra, 0, sizeof(ra));
    ra.nic_id = m->src_id;
    memcpy(ra.gid, m->src_gid, 16);
    ra.lid = m->src_lid;
    ra.link_layer = m->src_link_layer;
    ra.ud_qpn = m->src_ud_qpn;
    ra.msg_size = m->src_msg_size;
    ra.mtu = m->src_mtu;
    struct mx_conn *c = mx_conn_new(nic, &ra, false, false);
    if (c)
        mx_log(nic->ctx, 2, "%s: NIC %016llx connects to us", nic->name,
               (unsigned long long)c->rid);
    return c;
}

void mx_conn_timers(mx_nic *nic)
{
    uint64_t now = tpc_now_ns();
    for (uint32_t i = 0; i < nic->nconns && nic->connecting; i++) {
        struct mx_conn *c = nic->conns[i];
        if (!c || c->hs.state != MX_HS_CONNECTING ||
            mx_hs_next_event(&c->hs) > now)
            continue;
        struct mx_hs_wire out;
        mx_conn_act(nic, c, mx_hs_on_timer(&c->hs, now, &nic->hsp, &out), &out,
                    true);
    }
}

/* ---------------------------------------------------------------- peers */

int mx_peer_add(te_plugin_nic *nic, const void *addr, size_t len,
                te_plugin_peer *out)
{
    if (!out)
        return -EINVAL;
    struct mx_addr ra;
    const char *why = NULL;
    if (mx_addr_decode(addr, len, &ra, &why)) {
        mx_err(nic, "peer address refused: %s (%zu bytes)", why, len);
        return -EINVAL;
    }
    if (ra.link_layer != nic->link_layer) {
        mx_err(nic, "peer NIC %016llx is on %s, this NIC on %s: no path",
               (unsigned long long)ra.nic_id,
               ra.link_layer == MX_LL_IB ? "InfiniBand" : "Ethernet (RoCE)",
               nic->link_layer == MX_LL_IB ? "InfiniBand" : "Ethernet (RoCE)");
        return -EINVAL;
    }
    /* The handle slot first, so a failure leaves no half-made conn. */
    uint32_t hi = 0;
    while (hi < nic->nhandles && nic->handles[hi].conn)
        hi++;
    if (hi == nic->handles_cap) {
        uint32_t nc = nic->handles_cap ? nic->handles_cap * 2 : 16;
        struct mx_handle *nh = realloc(nic->handles, nc * sizeof(*nh));
        if (!nh)
            return -ENOMEM;
        nic->handles = nh;
        nic->handles_cap = nc;
    }
    struct mx_conn *c = mx_map_get(&nic->by_rid, ra.nic_id);
    if (!c) {
        if (!(c = mx_conn_new(nic, &ra, true, true)))
            return -(errno ? errno : ENOMEM);
    } else {
        if (!c->has_secret) { /* it contacted us first */
            memcpy(c->ra.secret, ra.secret, MX_SECRET_LEN);
            c->has_secret = true;
        }
        if (c->hs.state == MX_HS_FAILED) { /* added again after going down */
            mx_hs_restart(&c->hs);
            if (mx_conn_renew(nic, c, -ECONNRESET))
                return c->down_status ? c->down_status : -ENOMEM;
        }
    }
    if (hi == nic->nhandles)
        nic->nhandles++;
    uint32_t seq = ++nic->handle_seq;
    if (!seq)
        seq = ++nic->handle_seq;
    nic->handles[hi] = (struct mx_handle){.conn = c, .seq = seq};
    c->refs++;
    c->handle = ((uint64_t)seq << 32) | (hi + 1);
    *out = c->handle;
    /* Send the first datagram now rather than at the next poll. */
    if (c->hs.state == MX_HS_CONNECTING &&
        mx_hs_next_event(&c->hs) <= tpc_now_ns()) {
        struct mx_hs_wire m;
        mx_conn_act(nic, c, mx_hs_on_timer(&c->hs, tpc_now_ns(), &nic->hsp, &m),
                    &m, true);
    }
    return 0;
}

int mx_peer_remove(te_plugin_nic *nic, te_plugin_peer peer)
{
    struct mx_conn *c = mx_handle_conn(nic, peer);
    if (!c) {
        mx_err(nic, "peer_remove: unknown peer handle 0x%llx",
               (unsigned long long)peer);
        return -ENOENT;
    }
    nic->handles[(uint32_t)peer - 1].conn = NULL;
    while (nic->nhandles && !nic->handles[nic->nhandles - 1].conn)
        nic->nhandles--;
    c->refs--;
    if (c->handle == peer) {
        c->handle = 0;
        for (uint32_t i = 0; i < nic->nhandles; i++)
            if (nic->handles[i].conn == c)
                c->handle = ((uint64_t)nic->handles[i].seq << 32) | (i + 1);
    }
    /*
     * The QP is shared with the remote's own traffic to us, so it stays
     * while healthy (the remote may still use it). Ops of this handle still
     * in flight complete normally, with their real status: completing them
     * early would let the core reuse buffers the NIC may still read.
     */
    if (!c->refs && c->hs.state == MX_HS_FAILED)
        mx_conn_destroy(nic, c);
    return 0;
}

void mx_conns_free_all(mx_nic *nic)
{
    nic->closing = true;
    if (!nic->conns)
        return;
    /* Best effort: tell every connected remote, so it fails its ops now
     * instead of after its transport retries. */
    int sent = 0;
    for (uint32_t i = 0; i < nic->nconns; i++) {
        struct mx_conn *c = nic->conns[i];
        if (c && c->hs.r_epoch && c->hs.state != MX_HS_FAILED && nic->ud) {
            struct mx_hs_wire m;
            mx_hs_fill(&c->hs, MX_HS_T_BYE, &m);
            sent += mx_oob_send(nic, c, &m) == 0;
        }
    }
    /* Let the byes leave before the UD QP goes (bounded: 100 ms). */
    uint64_t deadline = tpc_now_ns() + 100000000ull;
    while (sent && nic->nud_free < MX_UD_SENDS && tpc_now_ns() < deadline)
        mx_oob_progress(nic);
    for (uint32_t i = 0; i < nic->nconns; i++) {
        struct mx_conn *c = nic->conns[i];
        if (!c)
            continue;
        if (c->qp) {
            mx_map_del(&nic->by_qpn, c->qp->qp_num);
            ibv_destroy_qp(c->qp);
        }
        if (c->ah)
            mx_oob_ah_release(nic, c->ah); /* after the UD QP is gone */
        free(c->ring);
        free(c);
        nic->conns[i] = NULL;
    }
    nic->nconns = 0;
    nic->broken = NULL;
}
