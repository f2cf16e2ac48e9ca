/*
 * The receive side: one shared receive queue (SRQ) per NIC for every RC QP.
 *
 * A write-with-immediate and a SEND both consume a receive request; verbs
 * cannot route them to different queues of one QP, so the SRQ is fed from
 * a pool of plugin-owned buffers of msg_size bytes. An immediate completes
 * as TE_PCQ_IMM and its buffer returns to the pool at once. A SEND's bytes
 * are copied into the oldest RECV buffer the core posted and complete it as
 * TE_PCQ_RECV; if the core has none posted, the pool buffer waits in a FIFO
 * (never dropped). When the pool runs dry the SRQ is no longer refilled and
 * senders see receiver-not-ready, which they retry forever (rnr_retry 7):
 * back-pressure instead of loss.
 *
 * The SRQ is refilled in batches of srq_depth/8 (one ibv_post_srq_recv
 * call per chain of up to 64 requests), not one buffer at a time, and it is
 * deep enough (srq_depth) that bursts of immediates do not run it dry.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mx_internal.h"

#define MX_SRQ_CHAIN 64

static unsigned char *mx_rbuf(mx_nic *nic, uint32_t i)
{
    return nic->rbuf + (size_t)i * nic->msg_size;
}

int mx_recv_init(mx_nic *nic)
{
    /* Spare buffers beyond the SRQ hold messages no RECV was posted for. */
    nic->nrbuf = nic->srq_depth + nic->srq_depth / 4;
    nic->srq_batch = nic->srq_depth / 8 < 16 ? 16 : nic->srq_depth / 8;
    size_t sz = (size_t)nic->nrbuf * nic->msg_size;
    nic->rbuf = aligned_alloc(4096, (sz + 4095) & ~(size_t)4095);
    nic->rfree = calloc(nic->nrbuf, sizeof(*nic->rfree));
    if (!nic->rbuf || !nic->rfree ||
        tpc_fifo_init(&nic->recvq, sizeof(struct mx_recv), nic->recv_cap) ||
        tpc_fifo_init(&nic->pending, sizeof(struct mx_pending), 64))
        return -ENOMEM;
    for (uint32_t i = 0; i < nic->nrbuf; i++)
        nic->rfree[i] = nic->nrbuf - 1 - i;
    nic->nrfree = nic->nrbuf;
    nic->rbuf_mr = ibv_reg_mr(nic->pd, nic->rbuf, sz, IBV_ACCESS_LOCAL_WRITE);
    if (!nic->rbuf_mr) {
        int e = errno;
        mx_err(nic, "ibv_reg_mr of %zu bytes of receive buffers failed: %s "
                    "(errno %d)%s",
               sz, strerror(e), e,
               e == ENOMEM || e == EPERM ? "; raise ulimit -l or lower keys "
                                           "srq_depth/msg_size"
                                         : "");
        return -e;
    }
    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr = nic->srq_depth;
    sa.attr.max_sge = 1;
    nic->srq = ibv_create_srq(nic->pd, &sa);
    if (!nic->srq) {
        int e = errno;
        mx_err(nic, "ibv_create_srq(%u requests) failed: %s (errno %d)",
               nic->srq_depth, strerror(e), e);
        return -e;
    }
    return 0;
}

void mx_recv_fini(mx_nic *nic)
{
    if (nic->srq) {
        int rc = ibv_destroy_srq(nic->srq);
        if (rc)
            mx_log(nic->ctx, 1, "%s: ibv_destroy_srq failed: %s (errno %d)",
                   nic->name, strerror(rc), rc);
        nic->srq = NULL;
    }
    if (nic->rbuf_mr)
        ibv_dereg_mr(nic->rbuf_mr);
    nic->rbuf_mr = NULL;
    free(nic->rbuf);
    free(nic->rfree);
    nic->rbuf = NULL;
    nic->rfree = NULL;
    tpc_fifo_free(&nic->recvq);
    tpc_fifo_free(&nic->pending);
}

void mx_srq_refill(mx_nic *nic)
{
    uint32_t want = nic->srq_depth - nic->srq_posted;
    if (want < nic->srq_batch && nic->srq_posted)
        return;
    if (want > nic->nrfree)
        want = nic->nrfree;
    struct ibv_recv_wr wr[MX_SRQ_CHAIN];
    struct ibv_sge sge[MX_SRQ_CHAIN];
    while (want) {
        uint32_t k = want < MX_SRQ_CHAIN ? want : MX_SRQ_CHAIN;
        for (uint32_t j = 0; j < k; j++) {
            uint32_t b = nic->rfree[nic->nrfree - 1 - j];
            sge[j] = (struct ibv_sge){.addr = (uint64_t)(uintptr_t)mx_rbuf(nic, b),
                                      .length = nic->msg_size,
                                      .lkey = nic->rbuf_mr->lkey};
            wr[j] = (struct ibv_recv_wr){.wr_id = b, .sg_list = &sge[j],
                                         .num_sge = 1,
                                         .next = j + 1 < k ? &wr[j + 1] : NULL};
        }
        struct ibv_recv_wr *bad = NULL;
        int rc = ibv_post_srq_recv(nic->srq, wr, &bad);
        uint32_t done = rc ? (bad ? (uint32_t)(bad - wr) : 0) : k;
        nic->nrfree -= done;
        nic->srq_posted += done;
        want -= done;
        if (rc) {
            mx_log(nic->ctx, 0, "%s: ibv_post_srq_recv failed: %s (errno %d)",
                   nic->name, strerror(rc), rc);
            return;
        }
    }
}

int mx_recv_post(mx_nic *nic, const struct te_plugin_op *op)
{
    if (nic->recvq.count >= nic->recv_cap)
        return -ENOSPC;
    struct mx_recv r = {.context = op->context, .addr = op->local_addr,
                        .len = op->len};
    return tpc_fifo_push(&nic->recvq, &r);
}

/* Hand the message in pool buffer b to the oldest posted RECV. */
static void mx_deliver(mx_nic *nic, uint32_t b, uint32_t len,
                       te_plugin_peer peer, struct te_plugin_cq_entry *out,
                       int *n, int max)
{
    struct mx_recv *r = tpc_fifo_at(&nic->recvq, 0);
    struct te_plugin_cq_entry e = {.kind = TE_PCQ_RECV, .context = r->context,
                                   .peer = peer};
    if (len > r->len) {
        e.status = -EMSGSIZE;
        mx_err(nic, "message of %u bytes exceeds the posted receive buffer of "
                    "%llu bytes: dropped",
               len, (unsigned long long)r->len);
    } else {
        memcpy(r->addr, mx_rbuf(nic, b), len);
        e.len = len;
    }
    tpc_fifo_pop(&nic->recvq);
    nic->rfree[nic->nrfree++] = b;
    mx_emit(nic, out, n, max, &e);
}

int mx_recv_progress(mx_nic *nic, struct te_plugin_cq_entry *out, int n,
                     int max)
{
    while (nic->pending.count && nic->recvq.count && n < max) {
        struct mx_pending *p = tpc_fifo_at(&nic->pending, 0);
        struct mx_pending m = *p;
        tpc_fifo_pop(&nic->pending);
        mx_deliver(nic, m.buf, m.len, m.peer, out, &n, max);
    }
    if (n >= max)
        return n;
    struct ibv_wc wc[MX_POLL_BATCH];
    int room = max - n < MX_POLL_BATCH ? max - n : MX_POLL_BATCH;
    int got = mx_cq_poll(nic, nic->rcq, room, wc);
    if (got < 0) {
        mx_log(nic->ctx, 0, "%s: ibv_poll_cq(receive) failed: %d", nic->name,
               got);
        return n;
    }
    for (int k = 0; k < got; k++) {
        const struct ibv_wc *w = &wc[k];
        uint32_t b = (uint32_t)w->wr_id;
        nic->srq_posted--;
        struct mx_conn *c = mx_map_get(&nic->by_qpn, w->qp_num);
        te_plugin_peer peer = c ? c->handle : 0;
        if (w->status != IBV_WC_SUCCESS) {
            nic->rfree[nic->nrfree++] = b;
            if (w->status != IBV_WC_WR_FLUSH_ERR) {
                mx_log(nic->ctx, 1, "%s: receive from NIC %016llx failed: %s "
                                    "(vendor error 0x%x)",
                       nic->name, c ? (unsigned long long)c->rid : 0ull,
                       mx_wc_status(w->status), w->vendor_err);
                if (c) /* the QP is in the error state: replace it */
                    mx_conn_mark_broken(nic, c);
            }
            continue;
        }
        if (w->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
            struct te_plugin_cq_entry e = {.kind = TE_PCQ_IMM,
                                           .imm = ntohl(w->imm_data),
                                           .peer = peer};
            nic->rfree[nic->nrfree++] = b;
            mx_emit(nic, out, &n, max, &e);
        } else if (nic->recvq.count && !nic->pending.count) {
            mx_deliver(nic, b, w->byte_len, peer, out, &n, max);
        } else {
            struct mx_pending p = {.buf = b, .len = w->byte_len, .peer = peer};
            if (tpc_fifo_push(&nic->pending, &p)) {
                nic->rfree[nic->nrfree++] = b;
                mx_log(nic->ctx, 0, "%s: out of memory: message dropped",
                       nic->name);
            }
        }
    }
    return n;
}
