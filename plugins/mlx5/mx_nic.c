/*
 * NIC lifetime: open a verbs device, choose port and GID, create the PD,
 * the three CQs, the SRQ with its buffer pool, the handshake UD QP and the
 * NIC address; and tear all of it down again in dependency order.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mx_internal.h"

static void mx_nic_free(mx_nic *nic)
{
    mx_conns_free_all(nic);
    mx_oob_fini(nic);
    mx_recv_fini(nic);
    if (nic->scq)
        ibv_destroy_cq(nic->scq);
    if (nic->rcq)
        ibv_destroy_cq(nic->rcq);
    if (nic->ucq)
        ibv_destroy_cq(nic->ucq);
    mx_wait_close(nic);
    mx_mr_free_all(nic);
    if (nic->pd) {
        int rc = ibv_dealloc_pd(nic->pd);
        if (rc)
            mx_log(nic->ctx, 1, "%s: ibv_dealloc_pd failed: %s (errno %d)",
                   nic->name, strerror(rc), rc);
    }
    if (nic->vctx)
        ibv_close_device(nic->vctx);
    tpc_fifo_free(&nic->cq);
    free(nic->slots);
    free(nic->conns);
    free(nic->handles);
    mx_map_free(&nic->by_rid);
    mx_map_free(&nic->by_qpn);
    pthread_mutex_destroy(&nic->mr_lock);
    free(nic);
}

static struct ibv_cq *mx_cq(mx_nic *nic, int cqe, const char *what)
{
    struct ibv_cq *cq = ibv_create_cq(nic->vctx, cqe, NULL, nic->chan, 0);
    if (!cq) {
        int e = errno;
        mx_err(nic, "ibv_create_cq(%s, %d entries) failed: %s (errno %d)",
               what, cqe, strerror(e), e);
        errno = e;
    }
    return cq;
}

static uint32_t mx_min(uint32_t a, uint32_t b) { return a < b ? a : b; }

int mx_nic_open(te_plugin_ctx *ctx, int idx,
                const struct te_plugin_nic_attr *attr, te_plugin_nic **out)
{
    if (!out)
        return -EINVAL;
    if (idx < 0 || idx >= ctx->ndev) {
        mx_ctx_err(ctx, "cannot open device %d: %d verbs device%s%s", idx,
                   ctx->ndev, ctx->ndev == 1 ? "" : "s",
                   ctx->ndev ? " usable (key devices)"
                             : " found; is a driver such as mlx5_ib or "
                               "rdma_rxe loaded?");
        return -ENODEV;
    }
    /* A job secret (docs/security.md): every connection proves it
     * (mx_hs.h). A core older than ABI 1.4 has none to offer. */
    const struct te_plugin_host *h = &ctx->host;
    bool auth = h->struct_size >= offsetof(struct te_plugin_host, auth_verify) +
                                      sizeof(h->auth_verify) &&
                h->auth_required && h->auth_required(h->host_ctx) == 1;
    if (auth && (!h->auth_mac || !h->auth_verify)) {
        mx_ctx_err(ctx, "engine.auth_key is set but the core offers no "
                   "auth_mac/auth_verify: refused rather than accept "
                   "unauthenticated peers (docs/security.md)");
        return -ENOTSUP;
    }
    const struct mx_cfg *cfg = &ctx->cfg;
    uint32_t qd = cfg->queue_depth, rd = 0;
    if (attr && attr->struct_size >= offsetof(struct te_plugin_nic_attr, recv_depth) &&
        attr->queue_depth)
        qd = attr->queue_depth;
    if (attr && attr->struct_size >= offsetof(struct te_plugin_nic_attr, reserved))
        rd = attr->recv_depth;
    if (qd < 16 || qd > 65536) {
        mx_ctx_err(ctx, "queue depth %u outside [16, 65536]", qd);
        return -EINVAL;
    }

    mx_nic *nic = calloc(1, sizeof(*nic));
    if (!nic)
        return -ENOMEM;
    nic->ctx = ctx;
    nic->index = idx;
    snprintf(nic->name, sizeof(nic->name), "%s", ctx->dev[idx]);
    pthread_mutex_init(&nic->mr_lock, NULL);
    int rc = -ENOMEM;

    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    for (int i = 0; list && i < n && !nic->vctx; i++)
        if (strcmp(list[i]->name, nic->name) == 0 &&
            !(nic->vctx = ibv_open_device(list[i]))) {
            rc = -(errno ? errno : EIO);
            mx_err(nic, "ibv_open_device failed: %s (errno %d)", strerror(-rc),
                   -rc);
        }
    if (list)
        ibv_free_device_list(list);
    if (!nic->vctx) {
        if (rc == -ENOMEM) {
            rc = -ENODEV;
            mx_err(nic, "device disappeared since the plugin was loaded");
        }
        goto fail;
    }
    if ((rc = mx_select_port_gid(nic)))
        goto fail;

    struct ibv_device_attr da;
    if ((rc = ibv_query_device(nic->vctx, &da))) {
        mx_err(nic, "ibv_query_device failed: %s (errno %d)", strerror(rc), rc);
        rc = -rc;
        goto fail;
    }
    nic->rd_atom = (uint8_t)mx_min((uint32_t)da.max_qp_init_rd_atom, 16);
    nic->dest_rd_atom = (uint8_t)mx_min((uint32_t)da.max_qp_rd_atom, 16);
    nic->qp_depth = mx_min(cfg->qp_depth, (uint32_t)da.max_qp_wr);
    nic->srq_depth = mx_min(cfg->srq_depth, da.max_srq_wr ? (uint32_t)da.max_srq_wr
                                                          : cfg->srq_depth);
    /* The send CQ must hold one entry per outstanding op, plus the flushes
     * of a QP being replaced while its successor already carries ops. */
    uint32_t max_cqe = da.max_cqe > 0 ? (uint32_t)da.max_cqe : 65536;
    if (2 * qd + 64 > max_cqe)
        qd = (max_cqe - 64) / 2;
    nic->qd = qd;
    nic->max_inline = cfg->max_inline;
    nic->signal_every = cfg->signal_every;
    nic->msg_size = cfg->msg_size;
    nic->recv_cap = rd > qd ? rd : qd;
    nic->hsp.timeout_ns = cfg->connect_timeout_ms * 1000000ull;
    nic->hsp.retry_ns = cfg->connect_retry_ms * 1000000ull;
    nic->hsp.retry_max_ns = 1000000000ull;
    if (auth) {
        nic->auth.mac = h->auth_mac;
        nic->auth.verify = h->auth_verify;
        nic->auth.ctx = h->host_ctx;
        nic->hsp.auth = &nic->auth;
        /* One MAC now: libcrypto's one-time set-up (tens of ms in the
         * emulated test guest) is paid here, not by the first connection. */
        uint8_t mac[TE_PLUGIN_AUTH_MAC_LEN];
        if (h->auth_mac(h->host_ctx, MX_AUTH_LABEL, sizeof(MX_AUTH_LABEL),
                        mac)) {
            mx_err(nic, "engine.auth_key is set but computing a MAC failed: "
                   "refused rather than accept unauthenticated peers");
            rc = -EIO;
            goto fail;
        }
    }
    if (nic->hsp.retry_max_ns < nic->hsp.retry_ns)
        nic->hsp.retry_max_ns = nic->hsp.retry_ns;

    if (!(nic->pd = ibv_alloc_pd(nic->vctx))) {
        rc = -(errno ? errno : ENOMEM);
        mx_err(nic, "ibv_alloc_pd failed: %s (errno %d)", strerror(-rc), -rc);
        goto fail;
    }
    if ((rc = mx_wait_open(nic)))
        goto fail;
    if (!(nic->scq = mx_cq(nic, (int)(2 * qd + 64), "send")) ||
        !(nic->rcq = mx_cq(nic, (int)(nic->srq_depth + 64), "receive")) ||
        !(nic->ucq = mx_cq(nic, MX_UD_RECVS + MX_UD_SENDS + 16, "handshake"))) {
        rc = -(errno ? errno : ENOMEM);
        goto fail;
    }
    if ((rc = mx_recv_init(nic)) || (rc = mx_slots_init(nic)) ||
        (rc = tpc_fifo_init(&nic->cq, sizeof(struct te_plugin_cq_entry), 2 * qd)) ||
        (rc = mx_oob_init(nic)))
        goto fail;

    nic->addr.nic_id = tpc_random64();
    memcpy(nic->addr.gid, nic->gid.raw, 16);
    nic->addr.lid = nic->lid;
    nic->addr.port = nic->port;
    nic->addr.link_layer = nic->link_layer;
    nic->addr.ud_qpn = nic->ud->qp_num;
    nic->addr.msg_size = nic->msg_size;
    nic->addr.mtu = nic->mtu;
    nic->addr.gid_index = (uint8_t)nic->gid_index;
    tpc_random_bytes(nic->addr.secret, MX_SECRET_LEN);
    mx_addr_encode(&nic->addr, nic->addr_bytes);
    mx_srq_refill(nic);
    *out = nic;
    return 0;
fail:
    if (rc == -ENOMEM)
        mx_err(nic, "out of memory opening the NIC");
    mx_nic_free(nic);
    return rc;
}

void mx_nic_close(te_plugin_nic *nic)
{
    if (nic)
        mx_nic_free(nic);
}

int mx_nic_address(te_plugin_nic *nic, void *buf, size_t *len)
{
    if (!len)
        return -EINVAL;
    if (!buf || *len < MX_ADDR_LEN) {
        *len = MX_ADDR_LEN;
        mx_err(nic, "address buffer too small: need %u bytes", MX_ADDR_LEN);
        return -ENOSPC;
    }
    memcpy(buf, nic->addr_bytes, MX_ADDR_LEN);
    *len = MX_ADDR_LEN;
    return 0;
}
