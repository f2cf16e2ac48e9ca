/*
 * post(): operations to libfabric calls.
 *  WRITE  fi_writemsg, FI_REMOTE_CQ_DATA carrying the imm when TE_POP_F_IMM,
 *         plus the completion flag the probe chose; small writes may use
 *         fi_inject_write[data] (no completion from the provider: the LOCAL
 *         entry is produced here), and so may zero-length WriteImms where
 *         the probe saw a zero-length inject deliver its immediate. A
 *         zero-length write without a key goes to the peer's landing region
 *         (EFA needs a valid key even then).
 *  READ   fi_readmsg.   SEND fi_sendmsg, or fi_inject up to inject_size
 *         where the probe saw injected messages arrive intact (LOCAL entry
 *         produced here).   RECV fi_recvmsg (FI_ADDR_UNSPEC).
 * Each provider operation holds a slot whose fi_context2 is the op context,
 * so a completion finds its op in O(1) and is reported exactly once.
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "efa_internal.h"

/* ---------------------------------------------------------------- slots */

int efa_slots_init(efa_nic *nic)
{
    /* Headroom beyond the queue depth for orphans: operations failed early
     * (peer down or removed) whose provider completion is still due. */
    nic->nslots = 2 * nic->qd + nic->recv_cap + 16;
    nic->slots = calloc(nic->nslots, sizeof(*nic->slots));
    if (!nic->slots)
        return -ENOMEM;
    for (uint32_t i = 0; i < nic->nslots; i++)
        nic->slots[i].next_free = i + 1;
    nic->free_slot = 0;
    return 0;
}

struct efa_slot *efa_slot_alloc(efa_nic *nic)
{
    if (nic->free_slot >= nic->nslots)
        return NULL;
    struct efa_slot *s = &nic->slots[nic->free_slot];
    nic->free_slot = s->next_free;
    s->state = EFA_SLOT_LIVE;
    s->repost = 0;
    return s;
}

void efa_slot_free(efa_nic *nic, struct efa_slot *s)
{
    s->state = EFA_SLOT_FREE;
    s->next_free = nic->free_slot;
    nic->free_slot = (uint32_t)(s - nic->slots);
}

struct efa_slot *efa_slot_of(efa_nic *nic, void *op_context)
{
    uintptr_t p = (uintptr_t)op_context, base = (uintptr_t)nic->slots;
    if (p < base || p >= base + (uintptr_t)nic->nslots * sizeof(struct efa_slot) ||
        (p - base) % sizeof(struct efa_slot))
        return NULL;
    struct efa_slot *s = (struct efa_slot *)op_context;
    return s->state == EFA_SLOT_FREE ? NULL : s;
}

/* ---------------------------------------------------------------- helpers */

/* A LOCAL (or RECV) completion produced here instead of by the provider. */
static void complete_now(efa_nic *nic, const struct te_plugin_op *op,
                         int status, te_plugin_peer peer)
{
    struct te_plugin_cq_entry e = tpc_op_completion(op, status, peer);
    efa_cq_push(nic, &e);
    if (op->kind == TE_POP_RECV)
        nic->rx_out++;
    else
        nic->tx_out++;
}

static int post_recv(efa_nic *nic, const struct te_plugin_op *op)
{
    if (nic->rx_out >= nic->recv_cap)
        return 0;
    struct efa_slot *s = efa_slot_alloc(nic);
    if (!s)
        return 0;
    s->kind = TE_POP_RECV;
    s->context = op->context;
    s->peer = 0;
    s->buf = op->local_addr;
    s->len = op->len;
    s->desc = op->mr ? op->mr->desc : NULL;
    int rc = efa_recv_repost(nic, s);
    if (rc == -FI_EAGAIN) {
        efa_slot_free(nic, s);
        return 0;
    }
    if (rc) {
        efa_slot_free(nic, s);
        efa_err(nic, "fi_recvmsg: %s", fi_strerror(-rc));
        complete_now(nic, op, efa_errno(rc), 0);
        return 1;
    }
    nic->rx_out++;
    return 1;
}

int efa_recv_repost(efa_nic *nic, struct efa_slot *s)
{
    struct iovec iov = {.iov_base = s->buf, .iov_len = s->len};
    void *desc = s->desc;
    struct fi_msg m = {.msg_iov = &iov, .desc = &desc, .iov_count = 1,
                       .addr = FI_ADDR_UNSPEC, .context = &s->fctx};
    return (int)fi_recvmsg(nic->ep, &m, 0);
}

/* ------------------------------------------------------------ doorbells */

/* After a provider call towards p (whatever it returned: a refused first
 * post may wait for the peer's progress to connect): its doorbell is rung
 * once this post() call is done with it (efa_shm_bell.h). */
TPC_HOT
static inline void ring_later(efa_nic *nic, struct efa_peer *p)
{
    if (!p->bell || nic->ring_due == p)
        return;
    if (nic->ring_due)
        efa_bell_ring(nic->ring_due->bell, &nic->bell_tx_fd);
    nic->ring_due = p;
}

void efa_bell_ring_busy(efa_nic *nic)
{
    efa_bell_fence();
    for (uint32_t i = 0; i < nic->npeers; i++) {
        struct efa_peer *p = &nic->peers[i];
        if (p->bell && p->live_ops)
            efa_bell_ring_fenced(p->bell, &nic->bell_tx_fd);
    }
}

void efa_bell_ring_addr(efa_nic *nic, fi_addr_t fa)
{
    struct efa_bell_remote *b = NULL;
    if (fa < nic->av_map_cap && nic->av_map[fa])
        b = nic->peers[nic->av_map[fa] - 1].bell;
    if (!b) /* a remote that is no peer of ours (authentication) */
        b = efa_auth_bell(nic, fa);
    if (b)
        efa_bell_ring(b, &nic->bell_tx_fd);
}

/* The provider call of a WRITE/READ/SEND; -FI_EAGAIN when full. */
TPC_HOT
static ssize_t issue(efa_nic *nic, const struct te_plugin_op *op,
                     struct efa_peer *p, struct efa_slot *s, uint64_t raddr,
                     uint64_t rkey)
{
    struct iovec iov = {.iov_base = op->local_addr, .iov_len = op->len};
    void *desc = op->mr ? op->mr->desc : NULL;
    /* No local buffer at all (barriers): no iov, so no descriptor needed. */
    size_t cnt = op->mr || op->len ? 1 : 0;
    if (op->kind == TE_POP_SEND) {
        struct fi_msg m = {.msg_iov = &iov, .desc = &desc, .iov_count = cnt,
                           .addr = p->fi_addr, .context = &s->fctx};
        return fi_sendmsg(nic->ep, &m, FI_COMPLETION);
    }
    struct fi_rma_iov rma = {.addr = raddr, .len = op->len, .key = rkey};
    struct fi_msg_rma m = {.msg_iov = &iov, .desc = &desc, .iov_count = cnt,
                           .addr = p->fi_addr, .rma_iov = &rma,
                           .rma_iov_count = 1, .context = &s->fctx,
                           .data = op->imm};
    if (op->kind == TE_POP_READ)
        return fi_readmsg(nic->ep, &m, FI_COMPLETION);
    uint64_t flags = FI_COMPLETION | nic->write_flags;
    if (op->flags & TE_POP_F_IMM)
        flags |= FI_REMOTE_CQ_DATA;
    return fi_writemsg(nic->ep, &m, flags);
}

/* -FI_EAGAIN towards p although nothing of ours is in flight to it: not our
 * own backpressure. Lasting stall_timeout_ms, it means the provider gave up
 * on the peer (tcp;ofi_rxm after the peer died: every post, forever).
 * Returns true when p was declared down. */
static bool stalled(efa_nic *nic, struct efa_peer *p)
{
    uint32_t limit = nic->ctx->cfg.stall_timeout_ms;
    if (!limit || p->live_ops)
        return false;
    uint64_t now = tpc_now_ns();
    if (!p->stall_since_ns) {
        p->stall_since_ns = now;
        return false;
    }
    if (now - p->stall_since_ns < (uint64_t)limit * 1000000u)
        return false;
    char why[128];
    snprintf(why, sizeof(why), "the provider refused every operation "
             "(-FI_EAGAIN) for %u ms with none in flight", limit);
    efa_peer_down(nic, p, -ECONNRESET, why);
    return true;
}

/* A same-host peer (shm) is entered through a lock that lives in ITS
 * shared memory: if it was killed holding that lock, fi_writemsg() would
 * spin forever and the worker with it (measured: conformance remote_killed
 * hung so under ASan). Its pidfd is read before going in: once per post()
 * call, and then only when the shm guard, which polls the pidfds of the
 * peers it watches, has seen some process die since the last read, or,
 * for a peer it does not watch, at most every EFA_POST_CHECK_NS (why that
 * is enough: efa_internal.h). Reading it before every post that came
 * 50 us after the last one cost a poll(2), 0.3-0.7 us, in each operation
 * of a low-rate stream. A dead peer is held here (nothing more is posted
 * to it) and turned down by the next poll. */
TPC_HOT
static void check_alive(efa_nic *nic, struct efa_peer *p)
{
    if (p->guarded) {
        uint64_t d = efa_shm_guard_deaths();
        if (d == p->deaths_seen)
            return;
        p->deaths_seen = d;
    } else {
        uint64_t now = tpc_now_ns();
        if (now - p->pidfd_read_ns < EFA_POST_CHECK_NS)
            return;
        p->pidfd_read_ns = now;
    }
    /* Declared by the next poll, as an exit housekeeping saw: after a
     * goodbye sent before the exit has been read, so that an orderly close
     * is reported as one (efa_cq.c; efa_peers_exited). */
    if (!p->exit_seen && efa_pidfd_exited(p->pidfd))
        efa_peer_exit_seen(nic, p);
}

static int post_to(efa_nic *nic, const struct te_plugin_op *op,
                   struct efa_peer *p);

/* After an inject (no provider completion will come): 1 = consumed, its
 * LOCAL entry produced here; 0 = no room now (-FI_EAGAIN, retried). */
static int injected(efa_nic *nic, const struct te_plugin_op *op,
                    struct efa_peer *p, ssize_t rc, const char *call)
{
    if (rc == -FI_EAGAIN) {
        if (!stalled(nic, p))
            return 0;
        complete_now(nic, op, -ECONNRESET, op->peer);
        return 1;
    }
    p->stall_since_ns = 0;
    if (rc)
        efa_err(nic, "%s: %s", call, fi_strerror((int)-rc));
    complete_now(nic, op, rc ? efa_errno((int)rc) : 0, op->peer);
    return 1;
}

/* The core's heartbeat (plugin.h): a zero-length WRITE without an
 * immediate and without a local registration. */
static bool is_heartbeat(const struct te_plugin_op *op)
{
    return op->kind == TE_POP_WRITE && op->len == 0 && !op->mr &&
           !(op->flags & TE_POP_F_IMM);
}

/* 1 = consumed (posted or completed here), 0 = no room now, <0 = invalid. */
TPC_HOT
static int post_one(efa_nic *nic, const struct te_plugin_op *op)
{
    if (op->kind == TE_POP_RECV)
        return post_recv(nic, op);
    if (op->kind != TE_POP_WRITE && op->kind != TE_POP_READ &&
        op->kind != TE_POP_SEND) {
        efa_err(nic, "unknown operation kind %u", op->kind);
        return -EINVAL;
    }
    struct efa_peer *p = efa_peer_get(nic, op->peer);
    if (!p || p->state == EFA_PEER_REMOVED) {
        efa_err(nic, "%s: peer handle 0x%llx is not a peer of this NIC",
                tpc_op_name(op->kind), (unsigned long long)op->peer);
        return -EINVAL;
    }
    if (op->len && !op->mr) {
        efa_err(nic, "%s of %llu bytes without a local registration",
                tpc_op_name(op->kind), (unsigned long long)op->len);
        return -EINVAL;
    }
    if (nic->tx_out >= nic->qd)
        return 0;
    if (p->state == EFA_PEER_LIVE && p->pidfd >= 0 && p != nic->post_checked) {
        nic->post_checked = p;
        check_alive(nic, p);
    }
    /* Its process exited: nothing more goes to it; the next poll reports
     * it down (and the core fails what waits for it). */
    if (p->state == EFA_PEER_LIVE && p->exit_seen)
        return 0;
    if (p->state == EFA_PEER_LIVE && nic->shm_regions && !p->local &&
        is_heartbeat(op) && efa_shm_region_gone(p->raw, p->raw_len)) {
        /* Its engine closed in another process that lives on and that did
         * not say goodbye to us (we only write to it; one of this process
         * is efa_local's, below): shm would take this write, and every
         * other, into the closed region and report success. Not a failure
         * of the core's heartbeat (-ESHUTDOWN: not a connection errno),
         * the PEER_DOWN before it says why. */
        efa_peer_down(nic, p, -ESHUTDOWN, "it closed its endpoint (its shm "
                      "region is gone)");
        complete_now(nic, op, -ESHUTDOWN, op->peer);
        return 1;
    }
    if (p->state == EFA_PEER_LIVE && p->local) {
        /* Another endpoint of this process: it cannot close while we are
         * inside the provider's post (efa_local.h). */
        if (efa_local_enter(p->local)) {
            int rc = post_to(nic, op, p);
            efa_local_leave(p->local);
            return rc;
        }
        efa_peer_down(nic, p, -ECONNRESET, "its endpoint in this process "
                      "was closed (its engine was destroyed)");
    }
    return post_to(nic, op, p);
}

/* post_one for a peer that was found valid. */
TPC_HOT
static int post_to(efa_nic *nic, const struct te_plugin_op *op,
                   struct efa_peer *p)
{
    if (p->state == EFA_PEER_DOWN) {
        /* A refused peer's operations say so (-EACCES). */
        complete_now(nic, op, p->down_status == -EACCES ? -EACCES
                                                         : -ECONNRESET,
                     op->peer);
        return 1;
    }
    /* Not authenticated yet: held (the core retries; efa_auth.c fails
     * the peer within EFA_AUTH_TIMEOUT_NS if it never is). */
    if (p->auth && !efa_auth_tx_ready(nic, p))
        return p->state == EFA_PEER_DOWN ? post_to(nic, op, p) : 0;
    if (op->kind == TE_POP_READ && nic->ctx->probe.read != 1) {
        efa_err(nic, "READ: fi_read does not work on provider %s (probe)",
                nic->info->fabric_attr->prov_name);
        complete_now(nic, op, -ENOTSUP, op->peer);
        return 1;
    }
    uint64_t raddr = op->remote_addr, rkey = op->rkey;
    if (op->kind == TE_POP_WRITE && op->len == 0 && rkey == 0) {
        raddr = p->landing_addr;
        rkey = p->landing_key;
    } else if (op->kind != TE_POP_SEND && (p->flags & EFA_AF_KEYCHECK) &&
               !efa_key_valid(p->auth ? efa_auth_key_secret(nic, p)
                                      : p->key_secret,
                              rkey)) {
        efa_err(nic, "%s: rkey 0x%llx was not issued by the target NIC "
                "(forged, corrupted or another NIC's key); nothing sent",
                tpc_op_name(op->kind), (unsigned long long)rkey);
        complete_now(nic, op, -EACCES, op->peer);
        return 1;
    }
    if (op->kind == TE_POP_WRITE && nic->use_inject &&
        (op->len ? op->len <= nic->inject_max
                 : nic->inject_zero && (op->flags & TE_POP_F_IMM))) {
        /* A zero-length source may be NULL: give the provider a valid
         * address anyway (our landing region; nothing is read). */
        const void *src = op->len ? op->local_addr : nic->landing;
        ssize_t rc = (op->flags & TE_POP_F_IMM)
                         ? fi_inject_writedata(nic->ep, src, op->len,
                                               op->imm, p->fi_addr, raddr,
                                               rkey)
                         : fi_inject_write(nic->ep, op->local_addr, op->len,
                                           p->fi_addr, raddr, rkey);
        ring_later(nic, p);
        return injected(nic, op, p, rc, (op->flags & TE_POP_F_IMM)
                                            ? "fi_inject_writedata"
                                            : "fi_inject_write");
    }
    if (op->kind == TE_POP_SEND && nic->inject_send &&
        op->len <= nic->inject_max) {
        /* The bytes are the provider's when the call returns: the LOCAL
         * completion is ours to produce, as for an injected write. */
        ssize_t rc = fi_inject(nic->ep, op->local_addr, op->len, p->fi_addr);
        ring_later(nic, p);
        return injected(nic, op, p, rc, "fi_inject (send)");
    }
    struct efa_slot *s = efa_slot_alloc(nic);
    if (!s)
        return 0;
    s->kind = (uint8_t)op->kind;
    s->context = op->context;
    s->peer = (uint32_t)(p - nic->peers) + 1;
    ssize_t rc = issue(nic, op, p, s, raddr, rkey);
    ring_later(nic, p);
    if (rc == -FI_EAGAIN) {
        efa_slot_free(nic, s);
        if (!stalled(nic, p))
            return 0;
        complete_now(nic, op, -ECONNRESET, op->peer);
        return 1;
    }
    p->stall_since_ns = 0;
    if (rc) {
        efa_slot_free(nic, s);
        efa_err(nic, "%s to peer 0x%llx: %s", tpc_op_name(op->kind),
                (unsigned long long)op->peer, fi_strerror((int)-rc));
        complete_now(nic, op, efa_errno((int)rc), op->peer);
        return 1;
    }
    p->live_ops++;
    nic->tx_out++;
    return 1;
}

TPC_HOT
int efa_post(te_plugin_nic *nic, const struct te_plugin_op *ops, size_t n)
{
    if (!ops && n)
        return -EINVAL;
    pthread_mutex_lock(&nic->lock);
    if (nic->pending)
        efa_peers_resolve(nic); /* first use */
    nic->post_checked = NULL;
    size_t i;
    int rc = 0;
    for (i = 0; i < n; i++) {
        rc = post_one(nic, &ops[i]);
        if (rc <= 0)
            break;
    }
    /* Held back (queue full, or the provider's -FI_EAGAIN, e.g. while it
     * connects): what frees it may signal no wait fd, see efa_wait_arm. */
    nic->held_ns = i < n && rc == 0 ? tpc_now_ns() : 0;
    if (nic->ring_due) {
        efa_bell_ring(nic->ring_due->bell, &nic->bell_tx_fd);
        nic->ring_due = NULL;
    }
    pthread_mutex_unlock(&nic->lock);
    if (rc < 0 && i == 0)
        return rc;
    return (int)i;
}
