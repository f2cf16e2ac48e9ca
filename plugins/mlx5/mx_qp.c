/*
 * RC queue pairs and address handles: creation, the INIT -> RTR -> RTS
 * transitions, and the mapping of work completion status to errno. Every
 * failing verbs call is reported with its errno.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "mx_internal.h"

uint32_t mx_psn_random(void)
{
    return (uint32_t)tpc_random64() & 0xffffffu;
}

int mx_nonce(mx_nic *nic, uint8_t out[MX_NONCE_LEN])
{
    /* Blocking only until the kernel's generator is seeded (early boot):
     * a nonce must be unpredictable, not merely unique. */
    ssize_t r;
    do
        r = getrandom(out, MX_NONCE_LEN, 0);
    while (r < 0 && errno == EINTR);
    if (r == (ssize_t)MX_NONCE_LEN)
        return 0;
    mx_err(nic, "getrandom failed: no nonce for authentication (%s)",
           r < 0 ? strerror(errno) : "short read");
    return -EIO;
}

struct ibv_qp *mx_qp_create(mx_nic *nic)
{
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = nic->scq;
    ia.recv_cq = nic->rcq;
    ia.srq = nic->srq;
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = 0; /* selective signalling (mx_post.c) */
    ia.cap.max_send_wr = nic->qp_depth;
    ia.cap.max_send_sge = 1;
    ia.cap.max_inline_data = nic->ctx->cfg.max_inline;
    struct ibv_qp *qp = ibv_create_qp(nic->pd, &ia);
    if (!qp && ia.cap.max_inline_data) {
        /* Some devices cap inline data lower than asked: retry without. */
        ia.cap.max_inline_data = 0;
        qp = ibv_create_qp(nic->pd, &ia);
    }
    if (!qp) {
        int e = errno;
        mx_err(nic, "ibv_create_qp(RC, %u send WRs) failed: %s (errno %d)",
               nic->qp_depth, strerror(e), e);
        errno = e;
        return NULL;
    }
    if (ia.cap.max_inline_data < nic->max_inline)
        nic->max_inline = ia.cap.max_inline_data;

    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = nic->port;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                        IBV_ACCESS_REMOTE_READ;
    int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                       IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc) {
        mx_err(nic, "ibv_modify_qp(QP 0x%x, INIT) failed: %s (errno %d)",
               qp->qp_num, strerror(rc), rc);
        ibv_destroy_qp(qp);
        errno = rc;
        return NULL;
    }
    return qp;
}

static void mx_ah_attr(mx_nic *nic, const uint8_t gid[16], uint16_t lid,
                       struct ibv_ah_attr *ah)
{
    memset(ah, 0, sizeof(*ah));
    ah->port_num = nic->port;
    ah->sl = (uint8_t)nic->ctx->cfg.service_level;
    ah->dlid = lid;
    /* RoCE always routes by GID; IB uses the LID inside one subnet. */
    if (nic->link_layer == MX_LL_ETH) {
        ah->is_global = 1;
        memcpy(ah->grh.dgid.raw, gid, 16);
        ah->grh.sgid_index = (uint8_t)nic->gid_index;
        ah->grh.hop_limit = 64;
        ah->grh.traffic_class = (uint8_t)nic->ctx->cfg.traffic_class;
    }
}

int mx_qp_connect(mx_nic *nic, struct mx_conn *c)
{
    mx_ctx *ctx = nic->ctx;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = (enum ibv_mtu)c->path_mtu;
    a.dest_qp_num = c->hs.r_qpn;
    a.rq_psn = c->hs.r_psn;
    a.max_dest_rd_atomic = nic->dest_rd_atom;
    a.min_rnr_timer = (uint8_t)ctx->cfg.rnr_timer;
    mx_ah_attr(nic, c->ra.gid, c->ra.lid, &a.ah_attr);
    int rc = ibv_modify_qp(c->qp, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                               IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc) {
        mx_err(nic, "ibv_modify_qp(QP 0x%x, RTR towards QP 0x%x) failed: %s "
                    "(errno %d)",
               c->qp->qp_num, c->hs.r_qpn, strerror(rc), rc);
        return -rc;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = (uint8_t)ctx->cfg.ack_timeout;
    a.retry_cnt = (uint8_t)ctx->cfg.retry_cnt;
    a.rnr_retry = 7; /* infinite: a full SRQ slows senders, never fails them */
    a.sq_psn = c->hs.l_psn;
    a.max_rd_atomic = nic->rd_atom;
    rc = ibv_modify_qp(c->qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc) {
        mx_err(nic, "ibv_modify_qp(QP 0x%x, RTS) failed: %s (errno %d)",
               c->qp->qp_num, strerror(rc), rc);
        return -rc;
    }
    return 0;
}

struct ibv_ah *mx_ah_create(mx_nic *nic, const struct mx_addr *ra)
{
    struct ibv_ah_attr ah;
    mx_ah_attr(nic, ra->gid, ra->lid, &ah);
    struct ibv_ah *h = ibv_create_ah(nic->pd, &ah);
    if (!h) {
        int e = errno;
        mx_err(nic, "ibv_create_ah towards NIC %016llx failed: %s (errno %d)",
               (unsigned long long)ra->nic_id, strerror(e), e);
        errno = e;
    }
    return h;
}

const char *mx_wc_status(enum ibv_wc_status s)
{
    return ibv_wc_status_str(s);
}

int mx_wc_errno(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_SUCCESS: return 0;
    case IBV_WC_LOC_LEN_ERR: return -EMSGSIZE;
    case IBV_WC_LOC_PROT_ERR: return -EACCES;
    case IBV_WC_REM_ACCESS_ERR: return -EACCES;
    case IBV_WC_REM_INV_REQ_ERR: return -EINVAL;
    case IBV_WC_WR_FLUSH_ERR: return -ECONNRESET;
    case IBV_WC_RETRY_EXC_ERR: return -ETIMEDOUT;
    case IBV_WC_RNR_RETRY_EXC_ERR: return -ETIMEDOUT;
    case IBV_WC_REM_OP_ERR: return -EREMOTEIO;
    case IBV_WC_REM_ABORT_ERR: return -ECONNABORTED;
    default: return -EIO;
    }
}
