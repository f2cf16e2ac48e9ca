/*
 * Initiator side: post() turns ops into request ring entries (or into
 * immediate failures for injected faults and dead peers), poll() turns
 * responses into LOCAL completions. An op holds a slot from post until its
 * response; the response names slot and generation, so a late or forged
 * response can never complete an op twice.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lb_internal.h"

int lb_slots_init(lb_nic *nic)
{
    nic->slots = calloc(nic->qd, sizeof(*nic->slots));
    if (!nic->slots)
        return -ENOMEM;
    for (uint32_t i = 0; i < nic->qd; i++)
        nic->slots[i].next_free = i + 1;
    nic->free_slot = 0;
    return 0;
}

static void lb_slot_free(lb_nic *nic, uint32_t idx)
{
    struct lb_slot *s = &nic->slots[idx];
    s->used = 0;
    s->next_free = nic->free_slot;
    nic->free_slot = idx;
}

/* --------------------------------------------------------------- post */

/* Local protection check, as a NIC does it with the lkey. */
static int lb_local_check(lb_nic *nic, const struct te_plugin_op *op)
{
    const lb_mr *mr = op->mr;
    return op->len ? tpc_op_local_check(&nic->ctx->host, LB_NAME, nic->name,
                                        op, mr->addr, mr->len, mr->access)
                   : 0;
}

static const char *lb_malformed(lb_nic *nic, const struct te_plugin_op *op,
                                struct lb_peer **pp)
{
    const char *bad = tpc_op_malformed(op, op->mr ? op->mr->nic : NULL, nic);
    if (bad)
        return bad;
    if (op->len > LB_MAX_MSG_SIZE)
        return "length exceeds max_msg_size";
    if (op->kind != TE_POP_RECV && !(*pp = lb_peer_get(nic, op->peer)))
        return "unknown peer handle";
    return NULL;
}

static void lb_fail_now(lb_nic *nic, const struct te_plugin_op *op, int status)
{
    struct te_plugin_cq_entry e = tpc_op_completion(op, status, 0);
    lb_cq_push(nic, &e);
}

/*
 * Room in p's request ring for `conts` continuation entries besides the
 * request's own? Taken only while the ring stays at most half full: the
 * other half is for ops of one entry each, so that a burst of small SENDs
 * leaves room for the ops behind it. Past that a SEND goes the way of a
 * long one (the target copies it). A ring that fills all the same (ops of
 * several entries took their half, single ones the rest) makes post()
 * return short: the peer's queue is full, as the plugin ABI allows, until
 * the target consumes entries (a real NIC's send queue, whose inline
 * payloads also take queue entries, behaves the same).
 */
static bool lb_inline_room(struct lb_peer *p, uint32_t conts)
{
    if (!conts)
        return true;
    uint64_t need = 1 + conts + (p->req.mask + 1) / 2;
    return lb_ring_prod_free(&p->req, need) >= need;
}

TPC_HOT
int lb_post(te_plugin_nic *nic, const struct te_plugin_op *ops, size_t n)
{
    if (!ops)
        return n ? -EINVAL : 0;
    bool dead = atomic_load_explicit(&nic->dead, memory_order_relaxed);
    uint64_t not_before = 0;
    struct lb_peer *last = NULL;
    size_t i;

    /* A batch across many peers (a scatter) writes one ring slot per
     * peer, each a cache line the peer's target (another core) last
     * touched: ask for all of them first, so that the misses overlap
     * instead of being paid one after the other. */
    if (n > 4) {
        for (i = 0; i < n && i < LB_PREFETCH_OPS; i++) {
            struct lb_peer *q;
            if (ops[i].kind == TE_POP_RECV || !(q = lb_peer_get(nic, ops[i].peer)) ||
                !q->shm)
                continue;
            __builtin_prefetch(q->req.slots + (q->req.pos & q->req.mask) *
                                                  LB_RING_ENTRY, 1);
        }
    }

    for (i = 0; i < n; i++) {
        const struct te_plugin_op *op = &ops[i];
        struct lb_peer *p = NULL;
        const char *bad = lb_malformed(nic, op, &p);
        if (bad) {
            if (i == 0) {
                lb_err(nic, "post: %s (kind %u, peer 0x%llx)", bad, op->kind,
                       (unsigned long long)op->peer);
                return -EINVAL;
            }
            break; /* the caller sees it first next time */
        }
        if (op->kind == TE_POP_RECV) {
            if (nic->recvq.count >= nic->recv_cap)
                break;
            int st = dead ? -ENETDOWN : lb_local_check(nic, op);
            if (st) {
                lb_fail_now(nic, op, st);
                continue;
            }
            struct lb_recv rv = {.context = op->context,
                                 .addr = op->local_addr, .len = op->len};
            if (tpc_fifo_push(&nic->recvq, &rv) < 0)
                break;
            continue;
        }

        if (nic->outstanding >= nic->qd)
            break;
        nic->outstanding++;
        nic->wrs_posted++;
        /* Fault decisions only when faults are configured: this loop is
         * the hot path of every benchmark. */
        if (nic->faults && !dead && lb_fault_kill_now(nic)) {
            if (last)
                lb_peer_publish(last);
            last = NULL;
            lb_nic_kill(nic);
            dead = true;
        }
        int st = 0;
        if (dead)
            st = -ENETDOWN;
        else if (nic->faults && lb_fault_fail_now(nic))
            st = -EIO;
        else if (p->dead || !p->shm)
            st = -ECONNRESET;
        else if (op->len)
            st = lb_local_check(nic, op);
        if (st) {
            lb_fail_now(nic, op, st);
            continue;
        }

        if (!lb_ring_prod_room(&p->req)) {
            /* The peer's queue is full (lb_inline_room): retry later. */
            nic->outstanding--;
            nic->wrs_posted--;
            break;
        }
        uint32_t idx = nic->free_slot;
        struct lb_slot *s = &nic->slots[idx];
        nic->free_slot = s->next_free;
        s->used = 1;
        s->gen++;
        s->kind = (uint8_t)op->kind;
        s->context = op->context;
        s->peer = p->handle;

        if (nic->delay_ns && !not_before)
            not_before = tpc_now_ns() + nic->delay_ns;
        struct lb_req req = {
            .kind = (uint8_t)op->kind, .flags = (uint8_t)op->flags,
            .imm = op->imm, .slot = idx, .gen = s->gen,
            .local_addr = (uint64_t)(uintptr_t)op->local_addr, .len = op->len,
            .remote_addr = op->remote_addr, .rkey = op->rkey,
            .not_before_ns = not_before, .pid = nic->addr.pid,
            .mem = op->len && op->mr->device ? LB_MEM_LOCAL_DEVICE : 0};
        uint32_t conts = 0; /* continuation entries behind the request */
        if (op->kind == TE_POP_SEND && op->len && op->len <= LB_INLINE_MAX &&
            !req.mem) {
            uint32_t c = lb_inline_conts(op->len);
            if (lb_inline_room(p, c)) {
                conts = c;
                memcpy(&req.remote_addr, op->local_addr,
                       c ? LB_INLINE_HEAD : op->len);
                req.local_addr = 0;
                req.mem = LB_MEM_INLINE;
            }
        }
        /* Visible to the target from here (lap stamp, lb_ring.h); the
         * publish below only rings a target that sleeps. */
        if (conts)
            lb_ring_prod_push_cont(&p->req, &req, sizeof(req),
                                   (const unsigned char *)op->local_addr +
                                       LB_INLINE_HEAD,
                                   op->len - LB_INLINE_HEAD);
        else
            lb_ring_prod_push(&p->req, &req, sizeof(req));
        p->outstanding++;
        if (p != last) {
            if (last)
                lb_peer_publish(last);
            last = p;
        }
    }
    if (last)
        lb_peer_publish(last);
    return (int)i;
}

/* ----------------------------------------------------------- completions */

static void lb_report(lb_nic *nic, const struct lb_peer *p,
                      const struct lb_resp *r, uint32_t kind)
{
    const char *k = tpc_op_name(kind);
    char tgt[24];
    snprintf(tgt, sizeof(tgt), "lo%u", p->nic_index);
    switch (r->reason) {
    case LB_R_RKEY:
        lb_err(nic, "%s to %s: rkey 0x%llx not registered on %s", k, tgt,
               (unsigned long long)r->a, tgt);
        break;
    case LB_R_ACCESS:
        lb_err(nic, "%s to %s: region of rkey 0x%llx does not allow remote %s",
               k, tgt, (unsigned long long)r->a,
               r->b == TE_PMR_REMOTE_READ ? "reads" : "writes");
        break;
    case LB_R_BOUNDS:
        lb_err(nic, "%s to %s: %s of %llu bytes at %+lld exceeds region of "
                    "%llu bytes",
               k, tgt, kind == TE_POP_READ ? "read" : "write",
               (unsigned long long)r->a, (long long)r->b,
               (unsigned long long)r->c);
        break;
    case LB_R_COPY:
        lb_err(nic, "%s to %s: cannot copy to/from pid %llu: %s (cross-process "
                    "copies need the same uid or CAP_SYS_PTRACE; see "
                    "kernel.yama.ptrace_scope)",
               k, tgt, (unsigned long long)r->b, strerror((int)r->a));
        break;
    case LB_R_DEVICE:
        lb_err(nic, "%s to %s: device memory copy failed: %s (CUDA buffers "
                    "of an initiator in another process (pid %llu) need CUDA "
                    "IPC, which loopback does not implement; else the "
                    "target's log has the CUDA error)",
               k, tgt, strerror((int)r->a), (unsigned long long)r->b);
        break;
    case LB_R_MSGSIZE:
        lb_err(nic, "%s to %s: message of %llu bytes exceeds the receive "
                    "buffer of %llu bytes",
               k, tgt, (unsigned long long)r->a, (unsigned long long)r->b);
        break;
    default:
        lb_err(nic, "%s to %s failed: %s", k, tgt, strerror(-r->status));
        break;
    }
}

/*
 * 1 and *e filled if the response in `entry` completes one of our ops on p.
 * The entry lives in channel memory that the target (another process across
 * processes, possibly hostile) may rewrite at any moment: it is copied once
 * and only the copy is checked and used, so a slot index cannot change
 * between its bounds check and its use. The status must be 0 or a negative
 * errno: anything else fails the op with -EPROTO.
 */
TPC_HOT
static int lb_complete(lb_nic *nic, struct lb_peer *p, const void *entry,
                       struct te_plugin_cq_entry *e)
{
    struct lb_resp r;
    memcpy(&r, entry, sizeof(r));
    if (r.slot >= nic->qd)
        return 0;
    struct lb_slot *s = &nic->slots[r.slot];
    if (!s->used || s->gen != r.gen || s->peer != p->handle)
        return 0;
    bool bad = r.status > 0 || r.status < -4095;
    if (bad) {
        lb_err(nic, "%s to lo%u: the target answered with status %d, which "
                    "is not 0 or a negative errno; failing the op",
               tpc_op_name(s->kind), p->nic_index, (int)r.status);
        r.status = -EPROTO;
    }
    *e = (struct te_plugin_cq_entry){.kind = TE_PCQ_LOCAL, .status = r.status,
                                     .context = s->context};
    if (r.status && !bad)
        lb_report(nic, p, &r, s->kind);
    lb_slot_free(nic, r.slot);
    p->outstanding--;
    return 1;
}

TPC_HOT
int lb_initiator_progress(lb_nic *nic, struct te_plugin_cq_entry *out, int room)
{
    int n = 0;
    for (uint32_t i = 0; i < nic->npeers && n < room; i++) {
        struct lb_peer *p = nic->peers[i];
        if (!p || !p->outstanding || !p->shm)
            continue;
        uint64_t avail = lb_ring_cons_avail(&p->resp, (uint64_t)(room - n));
        if (avail > (uint64_t)(room - n))
            avail = (uint64_t)(room - n);
        for (uint64_t k = 0; k < avail; k++)
            n += lb_complete(nic, p, lb_ring_cons_slot(&p->resp, k), &out[n]);
        if (avail)
            lb_ring_cons_advance(&p->resp, avail);
    }
    nic->outstanding -= (uint32_t)n;
    if (n > 1 && nic->ctx->cfg.fault_reorder)
        lb_shuffle(nic, out, (size_t)n, sizeof(*out));
    return n;
}

void lb_peer_fail(lb_nic *nic, struct lb_peer *p, int status, bool drain)
{
    struct te_plugin_cq_entry e;
    if (drain && p->shm) {
        uint64_t avail;
        while ((avail = lb_ring_cons_avail(&p->resp, UINT64_MAX)) != 0) {
            for (uint64_t k = 0; k < avail; k++) {
                if (lb_complete(nic, p, lb_ring_cons_slot(&p->resp, k), &e))
                    lb_cq_push(nic, &e);
            }
            lb_ring_cons_advance(&p->resp, avail);
        }
    }
    uint32_t failed = 0;
    for (uint32_t i = 0; p->outstanding && i < nic->qd; i++) {
        struct lb_slot *s = &nic->slots[i];
        if (!s->used || s->peer != p->handle)
            continue;
        e = (struct te_plugin_cq_entry){.kind = TE_PCQ_LOCAL, .status = status,
                                        .context = s->context};
        lb_cq_push(nic, &e);
        lb_slot_free(nic, i);
        p->outstanding--;
        failed++;
    }
    p->outstanding = 0;
    if (failed)
        lb_err(nic, "%u ops to lo%u (pid %u) failed: %s", failed, p->nic_index,
               p->pid, strerror(-status));
}

void lb_recvq_fail(lb_nic *nic, int status)
{
    while (nic->recvq.count) {
        struct lb_recv *rv = tpc_fifo_at(&nic->recvq, 0);
        struct te_plugin_cq_entry e = {.kind = TE_PCQ_RECV, .status = status,
                                       .context = rv->context};
        lb_cq_push(nic, &e);
        tpc_fifo_pop(&nic->recvq);
    }
}
