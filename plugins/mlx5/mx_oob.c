/*
 * The handshake's out-of-band channel: one UD QP per NIC. Datagrams are
 * unreliable by nature, so the state machine (mx_hs.c) retransmits; here we
 * only sign, send, receive, authenticate and dispatch them.
 *
 * Why UD rather than a TCP socket on the GID's IP: it works on InfiniBand
 * (no IP at all) exactly as on RoCE, needs no port allocation or firewall
 * rule, and uses the same path the RC traffic will use.
 *
 * Authentication: a datagram is accepted only if its SipHash MAC verifies
 * under a secret the receiver trusts: its own (the sender holds our
 * address) or the sender's, as published in an address the core gave us
 * through peer_add() (we contacted the sender). A stray or forged datagram
 * therefore cannot create, reset or tear down a connection.
 *
 * That secret travels in the address, so it keeps out strays, not a peer
 * that holds the address. With a job secret (engine.auth_key), the state
 * machine also proves and checks the job's HMAC in every HELLO, BYE and
 * CHALLENGE (version 2 datagrams, mx_hs.h) before it connects a QP.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mx_internal.h"

#define MX_UD_SLOT 256u /* GRH (40) + datagram (88 or 152), rounded up */
#define MX_UD_SEND_TAG 0x100000000ull

static unsigned char *mx_ud_slot(mx_nic *nic, uint32_t i)
{
    return nic->ubuf + (size_t)i * MX_UD_SLOT;
}

static int mx_ud_post_recv(mx_nic *nic, uint32_t i)
{
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)mx_ud_slot(nic, i),
                          .length = MX_UD_SLOT, .lkey = nic->ubuf_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad = NULL;
    int rc = ibv_post_recv(nic->ud, &wr, &bad);
    if (rc)
        mx_log(nic->ctx, 0, "%s: ibv_post_recv on the handshake QP failed: %s "
                            "(errno %d)",
               nic->name, strerror(rc), rc);
    return -rc;
}

int mx_oob_init(mx_nic *nic)
{
    size_t sz = (size_t)(MX_UD_RECVS + MX_UD_SENDS) * MX_UD_SLOT;
    nic->ubuf = aligned_alloc(4096, (sz + 4095) & ~(size_t)4095);
    if (!nic->ubuf)
        return -ENOMEM;
    memset(nic->ubuf, 0, sz);
    nic->ubuf_mr = ibv_reg_mr(nic->pd, nic->ubuf, sz, IBV_ACCESS_LOCAL_WRITE);
    if (!nic->ubuf_mr) {
        int e = errno;
        mx_err(nic, "ibv_reg_mr of handshake buffers failed: %s (errno %d)%s",
               strerror(e), e,
               e == ENOMEM || e == EPERM ? "; raise ulimit -l" : "");
        return -e;
    }
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = nic->ucq;
    ia.recv_cq = nic->ucq;
    ia.qp_type = IBV_QPT_UD;
    ia.sq_sig_all = 1;
    ia.cap.max_send_wr = MX_UD_SENDS;
    ia.cap.max_recv_wr = MX_UD_RECVS;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    nic->ud = ibv_create_qp(nic->pd, &ia);
    if (!nic->ud) {
        int e = errno;
        mx_err(nic, "ibv_create_qp(UD) for the handshake failed: %s (errno %d)",
               strerror(e), e);
        return -e;
    }
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = nic->port;
    a.qkey = MX_QKEY;
    int rc = ibv_modify_qp(nic->ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                            IBV_QP_PORT | IBV_QP_QKEY);
    const char *st = "INIT";
    if (!rc) {
        memset(&a, 0, sizeof(a));
        a.qp_state = IBV_QPS_RTR;
        st = "RTR";
        rc = ibv_modify_qp(nic->ud, &a, IBV_QP_STATE);
    }
    if (!rc) {
        memset(&a, 0, sizeof(a));
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = mx_psn_random();
        st = "RTS";
        rc = ibv_modify_qp(nic->ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    }
    if (rc) {
        mx_err(nic, "ibv_modify_qp(handshake UD QP, %s) failed: %s (errno %d)",
               st, strerror(rc), rc);
        return -rc;
    }
    for (uint32_t i = 0; i < MX_UD_RECVS; i++)
        if ((rc = mx_ud_post_recv(nic, i)))
            return rc;
    for (uint32_t i = 0; i < MX_UD_SENDS; i++)
        nic->ud_free[i] = MX_UD_RECVS + i;
    nic->nud_free = MX_UD_SENDS;
    return 0;
}

/* Destroy the address handles of gone conns (no send can use them). */
static void mx_oob_ah_reap(mx_nic *nic)
{
    while (nic->ndead_ah)
        ibv_destroy_ah(nic->dead_ah[--nic->ndead_ah]);
}

void mx_oob_ah_release(mx_nic *nic, struct ibv_ah *ah)
{
    /* A datagram posted with ah (e.g. the REFUSE just sent to the conn
     * being destroyed) may still be in flight, and some providers (rxe)
     * look the handle up when the send is processed: keep it until every
     * send completed. */
    if (!nic->ud || nic->nud_free == MX_UD_SENDS) {
        ibv_destroy_ah(ah);
        return;
    }
    if (nic->ndead_ah == nic->dead_ah_cap) {
        uint32_t nc = nic->dead_ah_cap ? nic->dead_ah_cap * 2 : 8;
        struct ibv_ah **na = realloc(nic->dead_ah, nc * sizeof(*na));
        if (!na) {
            ibv_destroy_ah(ah); /* at worst that datagram is lost */
            return;
        }
        nic->dead_ah = na;
        nic->dead_ah_cap = nc;
    }
    nic->dead_ah[nic->ndead_ah++] = ah;
}

void mx_oob_fini(mx_nic *nic)
{
    if (nic->ud) {
        int rc = ibv_destroy_qp(nic->ud);
        if (rc)
            mx_log(nic->ctx, 1, "%s: ibv_destroy_qp(UD) failed: %s (errno %d)",
                   nic->name, strerror(rc), rc);
        nic->ud = NULL;
    }
    mx_oob_ah_reap(nic);
    free(nic->dead_ah);
    nic->dead_ah = NULL;
    nic->dead_ah_cap = 0;
    if (nic->ubuf_mr)
        ibv_dereg_mr(nic->ubuf_mr);
    nic->ubuf_mr = NULL;
    free(nic->ubuf);
    nic->ubuf = NULL;
}

int mx_oob_send(mx_nic *nic, struct mx_conn *c, struct mx_hs_wire *m)
{
    if (!c->ah && !(c->ah = mx_ah_create(nic, &c->ra)))
        return -errno;
    if (!nic->nud_free)
        return -EAGAIN; /* all in flight: the retransmission timer retries */
    m->src_id = nic->addr.nic_id;
    m->dst_id = c->rid;
    memcpy(m->src_gid, nic->addr.gid, 16);
    m->src_lid = nic->addr.lid;
    m->src_mtu = nic->addr.mtu;
    m->src_link_layer = nic->addr.link_layer;
    m->src_ud_qpn = nic->addr.ud_qpn;
    m->src_msg_size = nic->addr.msg_size;
    m->keysel = c->has_secret ? MX_KEY_RECEIVER : MX_KEY_SENDER;
    uint32_t slot = nic->ud_free[--nic->nud_free];
    unsigned char *buf = mx_ud_slot(nic, slot);
    size_t len =
        mx_hs_encode(m, c->has_secret ? c->ra.secret : nic->addr.secret, buf);

    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)buf,
                          .length = (uint32_t)len, .lkey = nic->ubuf_mr->lkey};
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = MX_UD_SEND_TAG | slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = c->ah;
    wr.wr.ud.remote_qpn = c->ra.ud_qpn;
    wr.wr.ud.remote_qkey = MX_QKEY;
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(nic->ud, &wr, &bad);
    if (rc) {
        nic->ud_free[nic->nud_free++] = slot;
        mx_log(nic->ctx, 1, "%s: ibv_post_send of a handshake datagram failed: "
                            "%s (errno %d)",
               nic->name, strerror(rc), rc);
        return -rc;
    }
    return 0;
}

/* Authenticate and dispatch one received datagram. */
static void mx_oob_datagram(mx_nic *nic, const unsigned char *p, uint32_t len)
{
    struct mx_hs_wire m;
    const char *why = NULL;
    if (nic->closing)
        return; /* tearing down: no new conns, no renewals */
    if (mx_hs_decode(p, len, &m, &why)) {
        nic->hs_rejected++;
        mx_log(nic->ctx, 3, "%s: handshake datagram dropped: %s", nic->name, why);
        return;
    }
    if (m.dst_id != nic->addr.nic_id) {
        nic->hs_rejected++;
        mx_log(nic->ctx, 3, "%s: handshake datagram for NIC %016llx dropped "
                            "(this is %016llx: a closed NIC's stale peer?)",
               nic->name, (unsigned long long)m.dst_id,
               (unsigned long long)nic->addr.nic_id);
        return;
    }
    struct mx_conn *c = mx_map_get(&nic->by_rid, m.src_id);
    const uint8_t *key = NULL;
    if (m.keysel == MX_KEY_RECEIVER)
        key = nic->addr.secret;
    else if (c && c->has_secret)
        key = c->ra.secret;
    if (!key || !mx_hs_verify(p, key)) {
        nic->hs_rejected++;
        mx_log(nic->ctx, 2, "%s: handshake datagram from NIC %016llx failed "
                            "authentication: dropped",
               nic->name, (unsigned long long)m.src_id);
        return;
    }
    if (!c) {
        if (m.type != MX_HS_T_HELLO)
            return; /* a bye for a connection we never had */
        if (!(c = mx_conn_passive(nic, &m)))
            return;
    }
    mx_conn_on_datagram(nic, c, &m);
}

void mx_oob_progress(mx_nic *nic)
{
    struct ibv_wc wc[16];
    /* Bounded: at most the CQ's size per call. */
    for (int round = 0; round < (MX_UD_RECVS + MX_UD_SENDS) / 16 + 1; round++) {
        int got = mx_cq_poll(nic, nic->ucq, 16, wc);
        if (got < 0) {
            mx_log(nic->ctx, 0, "%s: ibv_poll_cq(handshake) failed: %d",
                   nic->name, got);
            return;
        }
        for (int i = 0; i < got; i++) {
            if (wc[i].wr_id & MX_UD_SEND_TAG) {
                nic->ud_free[nic->nud_free++] = (uint32_t)wc[i].wr_id;
                if (wc[i].status != IBV_WC_SUCCESS)
                    mx_log(nic->ctx, 1, "%s: handshake send failed: %s",
                           nic->name, mx_wc_status(wc[i].status));
                continue;
            }
            uint32_t slot = (uint32_t)wc[i].wr_id;
            if (wc[i].status == IBV_WC_SUCCESS && wc[i].byte_len >= MX_GRH_LEN)
                mx_oob_datagram(nic, mx_ud_slot(nic, slot) + MX_GRH_LEN,
                                wc[i].byte_len - MX_GRH_LEN);
            else if (wc[i].status != IBV_WC_WR_FLUSH_ERR)
                mx_log(nic->ctx, 1, "%s: handshake receive failed: %s",
                       nic->name, mx_wc_status(wc[i].status));
            if (wc[i].status != IBV_WC_WR_FLUSH_ERR)
                mx_ud_post_recv(nic, slot);
        }
        if (nic->ndead_ah && nic->nud_free == MX_UD_SENDS)
            mx_oob_ah_reap(nic);
        if (got < 16)
            return;
    }
}
