/*
 * post() and send completions.
 *
 * Every WRITE/READ/SEND holds a slot (generation-tagged) from post until
 * its LOCAL completion; wr_id = generation << 32 | slot, so a completion of
 * a QP that was already replaced can never complete a newer op.
 *
 * Selective signalling: a QP requests a completion for every signal_every-th
 * work request and for the last one of each post() call, never for the
 * others. RC completes a QP's requests in order, so a successful signalled
 * completion also completes every earlier request of that QP: each conn
 * keeps its requests in posting order (ring) and pops them up to the
 * signalled one. An error completion is always generated (signalled or
 * not); everything before it succeeded, it fails, the QP is then in the
 * error state and mx_conn.c replaces it, failing what is left on it.
 *
 * An op longer than the port's max_msg_sz becomes several work requests
 * (only the last carries the immediate: RC places them in order, so the
 * payload is complete before the immediate is reported).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mx_internal.h"

int mx_slots_init(mx_nic *nic)
{
    nic->slots = calloc(nic->qd, sizeof(*nic->slots));
    if (!nic->slots)
        return -ENOMEM;
    for (uint32_t i = 0; i < nic->qd; i++)
        nic->slots[i].next_free = i + 1;
    nic->free_slot = 0;
    return 0;
}

static void mx_slot_complete(mx_nic *nic, uint32_t idx, int status,
                             struct te_plugin_cq_entry *out, int *n, int max)
{
    struct mx_slot *s = &nic->slots[idx];
    struct te_plugin_cq_entry e = {.kind = TE_PCQ_LOCAL, .status = status,
                                   .context = s->context};
    s->used = 0;
    s->gen++;
    s->next_free = nic->free_slot;
    nic->free_slot = idx;
    nic->outstanding--;
    mx_emit(nic, out, n, max, &e);
}

static uint32_t mx_ring_used(const struct mx_conn *c)
{
    return c->ring_head - c->ring_tail;
}

/* Oldest work request of c's QP. */
static uint32_t mx_ring_pop(mx_nic *nic, struct mx_conn *c)
{
    nic->wr_inflight--;
    return c->ring[c->ring_tail++ & c->ring_mask];
}

void mx_conn_fail_ops(mx_nic *nic, struct mx_conn *c, int status)
{
    int n = 0;
    uint32_t failed = 0;
    while (c->ring_tail != c->ring_head) {
        uint32_t idx = mx_ring_pop(nic, c) & ~MX_FILLER;
        if (nic->slots[idx].used && nic->slots[idx].conn == c) {
            mx_slot_complete(nic, idx, status, NULL, &n, 0);
            failed++;
        }
    }
    c->ring_head = c->ring_tail = 0;
    c->unsig = 0;
    if (failed)
        mx_err(nic, "%u op(s) to NIC %016llx failed: %s (their QP was reset)",
               failed, (unsigned long long)c->rid, strerror(-status));
}

/* --------------------------------------------------------------- post */

/* Local protection check, as the NIC makes it with the lkey (with our
 * message instead of a completion error). */
static int mx_local_check(mx_nic *nic, const struct te_plugin_op *op)
{
    const mx_mr *mr = op->mr;
    return op->len ? tpc_op_local_check(&nic->ctx->host, MX_NAME, nic->name,
                                        op, mr->addr, mr->len, mr->access)
                   : 0;
}

static const char *mx_malformed(mx_nic *nic, const struct te_plugin_op *op,
                                struct mx_conn **pc)
{
    const char *bad = tpc_op_malformed(op, op->mr ? op->mr->nic : NULL, nic);
    if (!bad && op->kind != TE_POP_RECV &&
        !(*pc = mx_handle_conn(nic, op->peer)))
        bad = "unknown peer handle";
    return bad;
}

static void mx_fail_now(mx_nic *nic, const struct te_plugin_op *op, int status)
{
    struct te_plugin_cq_entry e = tpc_op_completion(op, status, 0);
    mx_cq_push(nic, &e);
}

/* Work requests being chained for one QP. */
struct mx_chain {
    struct mx_conn *c;
    uint32_t n;
    size_t op[MX_POST_CHAIN]; /* index in ops[] of each request */
    struct ibv_send_wr wr[MX_POST_CHAIN];
    struct ibv_sge sge[MX_POST_CHAIN];
};

/*
 * Post the chain. Returns the index in ops[] of the first op that did not
 * go out completely (SIZE_MAX if all did); its requests and everything
 * after them are taken back, so the caller reports only whole ops.
 */
static size_t mx_chain_flush(mx_nic *nic, struct mx_chain *ch)
{
    if (!ch->n)
        return SIZE_MAX;
    struct mx_conn *c = ch->c;
    struct ibv_send_wr *last = &ch->wr[ch->n - 1];
    last->send_flags |= IBV_SEND_SIGNALED; /* completions always come */
    last->next = NULL;
    c->unsig = 0;
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(c->qp, ch->wr, &bad);
    size_t stop = SIZE_MAX;
    if (rc) {
        uint32_t k = bad ? (uint32_t)(bad - ch->wr) : 0;
        if (k >= ch->n)
            k = 0;
        /* Take back the whole op the failed request belongs to. */
        while (k > 0 && ch->op[k - 1] == ch->op[k])
            k--;
        stop = ch->op[k];
        mx_err(nic, "ibv_post_send on QP 0x%x (%u requests) failed at #%u: %s "
                    "(errno %d)",
               c->qp->qp_num, ch->n, k, strerror(rc), rc);
        for (uint32_t j = ch->n; j > k; j--) {
            uint32_t e = c->ring[--c->ring_head & c->ring_mask];
            nic->wr_inflight--;
            if (!(e & MX_FILLER)) {
                struct mx_slot *s = &nic->slots[e];
                s->used = 0;
                s->gen++;
                s->next_free = nic->free_slot;
                nic->free_slot = e;
                nic->outstanding--;
            }
        }
        /* ENOMEM: send queue full (retry later). Anything else: the QP is
         * unusable; replace it. */
        if (rc != ENOMEM)
            mx_conn_mark_broken(nic, c);
    }
    ch->n = 0;
    ch->c = NULL;
    return stop;
}

/* Append the requests of one op to the chain. */
static void mx_chain_add(mx_nic *nic, struct mx_chain *ch, struct mx_conn *c,
                         const struct te_plugin_op *op, size_t opi,
                         uint32_t nwr)
{
    uint32_t idx = nic->free_slot;
    struct mx_slot *s = &nic->slots[idx];
    nic->free_slot = s->next_free;
    s->used = 1;
    s->kind = (uint8_t)op->kind;
    s->context = op->context;
    s->conn = c;
    nic->outstanding++;
    uint64_t chunk = nwr > 1 ? nic->max_msg : op->len;
    for (uint32_t k = 0; k < nwr; k++) {
        bool lastwr = k + 1 == nwr;
        uint64_t off = (uint64_t)k * chunk;
        uint64_t len = lastwr ? op->len - off : chunk;
        struct ibv_send_wr *w = &ch->wr[ch->n];
        struct ibv_sge *g = &ch->sge[ch->n];
        memset(w, 0, sizeof(*w));
        w->wr_id = (uint64_t)s->gen << 32 | idx;
        w->next = &ch->wr[ch->n + 1];
        if (len) {
            g->addr = (uint64_t)(uintptr_t)op->local_addr + off;
            g->length = (uint32_t)len;
            g->lkey = op->mr->mr->lkey;
            w->sg_list = g;
            w->num_sge = 1;
        }
        switch (op->kind) {
        case TE_POP_WRITE:
            w->opcode = lastwr && (op->flags & TE_POP_F_IMM)
                            ? IBV_WR_RDMA_WRITE_WITH_IMM
                            : IBV_WR_RDMA_WRITE;
            if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
                w->imm_data = htonl(op->imm);
            w->wr.rdma.remote_addr = op->remote_addr + off;
            w->wr.rdma.rkey = (uint32_t)op->rkey;
            break;
        case TE_POP_READ:
            w->opcode = IBV_WR_RDMA_READ;
            w->wr.rdma.remote_addr = op->remote_addr + off;
            w->wr.rdma.rkey = (uint32_t)op->rkey;
            break;
        default:
            w->opcode = IBV_WR_SEND;
            break;
        }
        if (len && len <= nic->max_inline && op->kind != TE_POP_READ)
            w->send_flags |= IBV_SEND_INLINE;
        if (lastwr && ++c->unsig >= nic->signal_every) {
            w->send_flags |= IBV_SEND_SIGNALED;
            c->unsig = 0;
        }
        c->ring[c->ring_head++ & c->ring_mask] = idx | (lastwr ? 0 : MX_FILLER);
        nic->wr_inflight++;
        ch->op[ch->n] = opi;
        ch->n++;
    }
}

int mx_post(te_plugin_nic *nic, const struct te_plugin_op *ops, size_t n)
{
    if (!ops)
        return n ? -EINVAL : 0;
    struct mx_chain ch;
    ch.n = 0;
    ch.c = NULL;
    size_t i, stop;
#define MX_FLUSH()                                                             \
    do {                                                                       \
        if ((stop = mx_chain_flush(nic, &ch)) != SIZE_MAX)                     \
            return (int)stop;                                                  \
    } while (0)

    for (i = 0; i < n; i++) {
        const struct te_plugin_op *op = &ops[i];
        struct mx_conn *c = NULL;
        const char *bad = mx_malformed(nic, op, &c);
        if (bad) {
            if (i == 0) {
                mx_err(nic, "post: %s (kind %u, peer 0x%llx)", bad, op->kind,
                       (unsigned long long)op->peer);
                return -EINVAL;
            }
            break; /* the caller sees it first next time */
        }
        if (op->kind == TE_POP_RECV) {
            MX_FLUSH();
            int st = mx_local_check(nic, op);
            if (st) {
                mx_fail_now(nic, op, st);
                continue;
            }
            if (mx_recv_post(nic, op) < 0)
                break;
            continue;
        }
        if (c->hs.state == MX_HS_FAILED) {
            MX_FLUSH();
            mx_err(nic, "%s to NIC %016llx: peer is down: %s",
                   tpc_op_name(op->kind), (unsigned long long)c->rid,
                   c->down_why ? c->down_why : "connection failed");
            mx_fail_now(nic, op, c->down_status ? c->down_status : -ECONNRESET);
            continue;
        }
        if (c->hs.state != MX_HS_ESTABLISHED || c->broken)
            break; /* connecting: the core posts again later (mx_conn_act
                      makes it try once the connection is up) */
        int st = 0;
        if (op->kind == TE_POP_SEND && op->len > c->ra.msg_size) {
            mx_err(nic, "SEND of %llu bytes to NIC %016llx: its receive "
                        "buffers hold %u bytes (its key msg_size)",
                   (unsigned long long)op->len, (unsigned long long)c->rid,
                   c->ra.msg_size);
            st = -EMSGSIZE;
        }
        uint32_t nwr = 1;
        if (!st && op->len > nic->max_msg) {
            uint64_t k = (op->len + nic->max_msg - 1) / nic->max_msg;
            if (op->kind == TE_POP_SEND || k > nic->qp_depth / 2 ||
                k > MX_POST_CHAIN) {
                mx_err(nic, "%s of %llu bytes exceeds %llu work requests of "
                            "max_msg_sz %llu",
                       tpc_op_name(op->kind), (unsigned long long)op->len,
                       (unsigned long long)(nic->qp_depth / 2),
                       (unsigned long long)nic->max_msg);
                st = -EMSGSIZE;
            }
            nwr = (uint32_t)k;
        }
        if (!st)
            st = mx_local_check(nic, op);
        if (st) {
            MX_FLUSH();
            mx_fail_now(nic, op, st);
            continue;
        }
        if (c != ch.c)
            MX_FLUSH();
        if (ch.n + nwr > MX_POST_CHAIN)
            MX_FLUSH();
        if (nic->free_slot == nic->qd || nic->wr_inflight + nwr > nic->qd ||
            mx_ring_used(c) + nwr > nic->qp_depth)
            break; /* NIC or QP send queue full */
        ch.c = c;
        mx_chain_add(nic, &ch, c, op, i, nwr);
    }
    MX_FLUSH();
#undef MX_FLUSH
    return (int)i;
}

/* ----------------------------------------------------------- completions */

static void mx_report(mx_nic *nic, const struct mx_slot *s,
                      const struct ibv_wc *wc)
{
    const char *hint = "";
    switch (wc->status) {
    case IBV_WC_REM_ACCESS_ERR:
        hint = ": the target refused the rkey or the range (forged, "
               "deregistered, out of bounds or without that access right)";
        break;
    case IBV_WC_RETRY_EXC_ERR:
        hint = ": no acknowledgement from the target (dead, unreachable or "
               "wrong GID; see keys gid_index, ack_timeout, retry_cnt)";
        break;
    case IBV_WC_REM_INV_REQ_ERR:
        hint = ": the target found the request invalid (e.g. a message "
               "longer than its receive buffers)";
        break;
    default:
        break;
    }
    mx_err(nic, "%s to NIC %016llx failed: %s (status %d, vendor error "
                "0x%x)%s",
           tpc_op_name(s->kind), (unsigned long long)s->conn->rid,
           mx_wc_status(wc->status), (int)wc->status, wc->vendor_err, hint);
}

static void mx_send_wc(mx_nic *nic, const struct ibv_wc *wc,
                       struct te_plugin_cq_entry *out, int *n, int max)
{
    uint32_t idx = (uint32_t)wc->wr_id, gen = (uint32_t)(wc->wr_id >> 32);
    if (idx >= nic->qd)
        return;
    struct mx_slot *s = &nic->slots[idx];
    if (!s->used || s->gen != gen)
        return; /* its QP was replaced and the op already failed */
    struct mx_conn *c = s->conn;
    int status = mx_wc_errno(wc->status);
    /* Everything posted before this request on the QP has succeeded,
     * unless the QP already failed (then it was flushed). */
    int before = c->qp_failed ? -ECONNRESET : 0;
    while (c->ring_tail != c->ring_head) {
        uint32_t e = mx_ring_pop(nic, c);
        uint32_t j = e & ~MX_FILLER;
        if (j == idx && (!(e & MX_FILLER) || status))
            break;
        if (j != idx && nic->slots[j].used && nic->slots[j].conn == c)
            mx_slot_complete(nic, j, before, out, n, max);
    }
    if (status) {
        if (!c->qp_failed)
            mx_report(nic, s, wc); /* the first error is the cause */
        c->qp_failed = true;
        mx_conn_mark_broken(nic, c);
    }
    mx_slot_complete(nic, idx, status, out, n, max);
}

int mx_send_progress(mx_nic *nic, struct te_plugin_cq_entry *out, int n,
                     int max, bool all)
{
    struct ibv_wc wc[MX_POLL_BATCH];
    /* Bounded: a few batches per call, or the whole CQ when draining. */
    uint32_t rounds = all ? (2 * nic->qd + 64) / MX_POLL_BATCH + 1 : 4;
    for (uint32_t r = 0; r < rounds; r++) {
        int got = mx_cq_poll(nic, nic->scq, MX_POLL_BATCH, wc);
        if (got < 0) {
            mx_log(nic->ctx, 0, "%s: ibv_poll_cq(send) failed: %d", nic->name,
                   got);
            break;
        }
        for (int k = 0; k < got; k++)
            mx_send_wc(nic, &wc[k], out, &n, max);
        if (got < MX_POLL_BATCH || (!all && n >= max))
            break;
    }
    return n;
}
