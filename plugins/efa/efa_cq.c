/*
 * poll(): the completion queue to TE_PCQ_* entries. Reading the CQ is also
 * what moves data (manual progress: the target must poll for writes to it
 * to land, and shm and tcp copy inbound bytes inside this call).
 *
 *  - remote CQ data on a remote write  -> TE_PCQ_IMM (checked before the
 *    op_context: shm fills it with junk on such entries, measured);
 *  - our slot, RECV                    -> TE_PCQ_RECV with length and sender;
 *  - our slot, WRITE/READ/SEND         -> TE_PCQ_LOCAL;
 *  - an orphan's late completion       -> nothing (it was reported already);
 *  - every error entry is read with fi_cq_readerr and reported with the
 *    provider's own text (fi_cq_strerror); connection errors also turn the
 *    peer down (TE_PCQ_PEER_DOWN, its other ops fail at once).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "efa_internal.h"
#include "tpc_cq.h"

/* ---------------------------------------------------------------- fifo */

void efa_cq_push(efa_nic *nic, const struct te_plugin_cq_entry *e)
{
    if (tpc_fifo_push(&nic->cq_fifo, e) != 0)
        efa_log(nic->ctx, 0, "%s: out of memory queueing a completion "
                "(kind %u)", nic->name, e->kind);
}

/* An entry leaves for the core: the outstanding counts. */
static void count_out(efa_nic *nic, const struct te_plugin_cq_entry *e)
{
    if (e->kind == TE_PCQ_LOCAL)
        nic->tx_out--;
    else if (e->kind == TE_PCQ_RECV)
        nic->rx_out--;
}

/* Hand one entry to the core, keeping the outstanding counts. */
TPC_HOT
static void emit(efa_nic *nic, const struct te_plugin_cq_entry *e,
                 struct te_plugin_cq_entry *out, int *n)
{
    count_out(nic, e);
    out[(*n)++] = *e;
}

/* A queued entry on its way to the core (tpc_cq_take): its counts, and a
 * PEER_DOWN's words as this poll's error (the core's te_peer_status and
 * warning quote it). A peer removed since has no words left: its status
 * then. */
static void taking(void *arg, const struct te_plugin_cq_entry *e)
{
    efa_nic *nic = arg;
    count_out(nic, e);
    if (e->kind != TE_PCQ_PEER_DOWN)
        return;
    const struct efa_peer *p = efa_peer_get(nic, e->peer);
    efa_err(nic, "peer 0x%llx is down: %s", (unsigned long long)e->peer,
            p && p->state == EFA_PEER_DOWN && p->down_why[0]
                ? p->down_why
                : strerror(-e->status));
}

/* The fifo's entries, one PEER_DOWN per poll (nic->down_said). */
TPC_HOT
static void fifo_drain(efa_nic *nic, struct te_plugin_cq_entry *out, int max,
                       int *n)
{
    *n = tpc_cq_take(&nic->cq_fifo, out, *n, max, &nic->down_said, taking,
                     nic);
}

/* ---------------------------------------------------------------- entries */

static bool conn_error(int err)
{
    switch (err) {
    case FI_ECONNRESET: case FI_ECONNREFUSED: case FI_ECONNABORTED:
    case FI_ENOTCONN: case FI_EHOSTUNREACH: case FI_ENETDOWN:
    case FI_ENETUNREACH: case FI_ETIMEDOUT: case EPIPE:
        return true;
    default:
        return false;
    }
}

TPC_HOT
static struct efa_peer *slot_peer(efa_nic *nic, const struct efa_slot *s)
{
    return s->peer && s->peer <= nic->npeers ? &nic->peers[s->peer - 1] : NULL;
}

/* A slot's provider completion arrived; its op is done with `status`. */
TPC_HOT
static void finish(efa_nic *nic, struct efa_slot *s, int status, uint64_t len,
                   fi_addr_t src, struct te_plugin_cq_entry *out, int *n)
{
    if (s->state == EFA_SLOT_ORPHAN) {
        efa_peer_orphan_done(nic, s->peer);
        efa_slot_free(nic, s);
        return;
    }
    struct te_plugin_cq_entry e = {.status = status, .context = s->context};
    if (s->kind == TE_POP_RECV) {
        if (status == 0 && nic->auth.on &&
            !efa_auth_accept(nic, src, "a SEND")) {
            /* Not for the core: the buffer goes back to the provider. */
            if (efa_recv_repost(nic, s) != 0) {
                s->repost = 1;
                nic->reposts_due++;
            }
            return;
        }
        e.kind = TE_PCQ_RECV;
        e.len = len;
        e.peer = efa_peer_of_src(nic, src);
    } else {
        struct efa_peer *p = slot_peer(nic, s);
        e.kind = TE_PCQ_LOCAL;
        e.peer = p ? p->handle : 0;
        if (p && p->live_ops)
            p->live_ops--;
    }
    efa_slot_free(nic, s);
    emit(nic, &e, out, n);
}

TPC_HOT
static void on_entry(efa_nic *nic, const struct fi_cq_data_entry *ce,
                     fi_addr_t src, struct te_plugin_cq_entry *out, int *n)
{
    if ((ce->flags & FI_REMOTE_CQ_DATA) && (ce->flags & FI_REMOTE_WRITE)) {
        struct te_plugin_cq_entry e = {.kind = TE_PCQ_IMM,
                                       .imm = (uint32_t)ce->data,
                                       .peer = efa_peer_of_src(nic, src)};
        if (!nic->auth.on || efa_auth_accept(nic, src, "an immediate"))
            emit(nic, &e, out, n);
        /* FI_RX_CQ_DATA: the data consumed one of our receives; give it
         * back to the provider (now, or at a later poll if it is full):
         * the core never sees it. */
        struct efa_slot *s = nic->rx_cq_data ? efa_slot_of(nic, ce->op_context)
                                             : NULL;
        if (s && s->kind == TE_POP_RECV && s->state == EFA_SLOT_LIVE &&
            efa_recv_repost(nic, s) != 0) {
            s->repost = 1;
            nic->reposts_due++;
        }
        return;
    }
    if (efa_auth_owns(nic, ce->op_context)) {
        efa_auth_completion(nic, ce->op_context, src, ce->len, 0);
        return;
    }
    if (efa_bye_owns(nic, ce->op_context)) {
        efa_bye_completion(nic, ce->op_context, src, ce->len, 0);
        return;
    }
    struct efa_slot *s = efa_slot_of(nic, ce->op_context);
    if (!s) {
        efa_log(nic->ctx, 3, "%s: completion without an operation of ours "
                "(flags 0x%llx)", nic->name, (unsigned long long)ce->flags);
        return;
    }
    finish(nic, s, 0, ce->len, src, out, n);
}

static const char *kind_name(uint8_t kind)
{
    return kind == TE_POP_WRITE ? "WRITE" : kind == TE_POP_READ ? "READ"
           : kind == TE_POP_SEND ? "SEND" : "RECV";
}

static int on_error(efa_nic *nic, struct te_plugin_cq_entry *out, int *n)
{
    struct fi_cq_err_entry ee;
    memset(&ee, 0, sizeof(ee));
    ssize_t rc = fi_cq_readerr(nic->cq, &ee, 0);
    if (rc != 1)
        return -1;
    char pmsg[256] = "";
    const char *pm = fi_cq_strerror(nic->cq, ee.prov_errno, ee.err_data, pmsg,
                                    sizeof(pmsg));
    if (efa_auth_owns(nic, ee.op_context)) {
        efa_auth_completion(nic, ee.op_context, FI_ADDR_NOTAVAIL, 0,
                            ee.err ? ee.err : FI_EIO);
        return 0;
    }
    if (efa_bye_owns(nic, ee.op_context)) {
        efa_bye_completion(nic, ee.op_context, FI_ADDR_NOTAVAIL, 0,
                           ee.err ? ee.err : FI_EIO);
        return 0;
    }
    struct efa_slot *s = efa_slot_of(nic, ee.op_context);
    if (!s) {
        /* shm reports the ops of a dead peer this way (context NULL): say
         * it once, then count. */
        efa_log(nic->ctx, nic->unmatched_errors++ ? 3 : 1, "%s: error completion without an operation of "
                "ours (flags 0x%llx, context %p): %s (provider: %s)",
                nic->name, (unsigned long long)ee.flags, ee.op_context,
                fi_strerror(ee.err), pm ? pm : "");
        return 0;
    }
    if (s->state == EFA_SLOT_ORPHAN) {
        finish(nic, s, 0, 0, FI_ADDR_NOTAVAIL, out, n);
        return 0;
    }
    struct efa_peer *p = slot_peer(nic, s);
    efa_err(nic, "%s%s%llx failed: %s (provider %s: %s, prov_errno %d)",
            kind_name(s->kind), p ? " to peer 0x" : "",
            p ? (unsigned long long)p->handle : 0ull, fi_strerror(ee.err),
            nic->info->fabric_attr->prov_name, pm ? pm : "", ee.prov_errno);
    int status = efa_errno(ee.err);
    finish(nic, s, status, ee.len, FI_ADDR_NOTAVAIL, out, n);
    /* tcp;ofi_rxm reports a lost connection as FI_ECANCELED with the
     * socket's errno (ENOTCONN) in prov_errno (measured). */
    if (p && (conn_error(ee.err) ||
              (nic->prov_errno_is_errno && conn_error(ee.prov_errno)))) {
        char why[300];
        snprintf(why, sizeof(why), "%s (provider: %s)", fi_strerror(ee.err),
                 pm ? pm : "");
        efa_peer_down(nic, p, -ECONNRESET, why);
    }
    return 0;
}

/* ---------------------------------------------------------------- poll */

/* Manual data progress: a write without an immediate lands only while this
 * host polls, and gives it no CQ entry. The CQ's wait fd (an epoll set that
 * holds the provider's sockets) is readable while inbound bytes wait, so
 * the worker is told it has work and keeps polling instead of sleeping
 * (plugin ABI 1.2 host.progressed). */
static bool inbound_pending(efa_nic *nic)
{
    if (nic->progress_fd < 0)
        return false;
    /* fi_trywait clears the fd's own signal (else it stays readable and
     * the worker never sleeps); -FI_EAGAIN: something is to be read. */
    struct fid *cq = &nic->cq->fid;
    int rc = fi_trywait(nic->fabric, &cq, 1);
    if (rc == -FI_EAGAIN)
        return true;
    if (rc)
        return false;
    struct pollfd p = {.fd = nic->progress_fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

/* ------------------------------------------------- wait object (ABI 1.3) */

/* How long after a held-back post the NIC keeps its worker polling. The
 * core retries held posts every turn, refreshing the mark, so this only
 * bounds a mark left by posts the core stopped retrying (their peer went
 * down). 1 ms was too short: a slow host (qemu-user) could spend longer
 * than that between the provider's connect steps and block through one
 * (test_idle_wait_efa failed 1 run in 4 under qemu-aarch64). */
#define EFA_HELD_SPIN_NS 1000000000ull

/* The CQ's wait fd, where the provider has one and the target's polls move
 * the data (efa_wants_progress_fd: tcp;ofi_rxm). shm has none to offer:
 * its peers copy into our memory and signal no fd; our doorbell stands in
 * (efa_shm_bell.h), and without one the worker naps between polls
 * (engine.idle_sleep_us). */
int efa_wait_fd(te_plugin_nic *nic)
{
    if (nic->bell)
        return efa_bell_fd(nic->bell);
    return nic->progress_fd >= 0 ? nic->progress_fd : -EOPNOTSUPP;
}

/* Arm the doorbell: announce the sleep, then progress the provider once
 * (a zero-count fi_cq_read progresses and says whether completions are
 * queued): a command a peer queued before it could see the announcement
 * is found here, one after it rings. */
static int bell_arm(efa_nic *nic)
{
    /* Our own operations complete through the peers' progress, which
     * rings nothing: the worker polls (naps) until they are done. */
    if (nic->tx_out)
        return -EAGAIN;
    uint32_t tokens[16];
    int n = efa_bell_exits(nic->bell, tokens, 16);
    for (int i = 0; i < n; i++)
        if (tokens[i] <= nic->npeers)
            efa_peer_exit_seen(nic, &nic->peers[tokens[i] - 1]);
    if (nic->exits_seen)
        return -EAGAIN;
    /* Authentication's deadlines (exited and idle remotes, messages
     * unanswered) are looked at by polls a blocked worker does not make:
     * due now, here; later, the bell's timer wakes it (set after the
     * sleep's drain, which reads an expiry the timer had). */
    uint64_t due = nic->auth.on ? efa_auth_next_due_ns(nic) : 0;
    if (due && tpc_now_ns() >= due) {
        efa_auth_housekeeping(nic, true);
        return -EAGAIN;
    }
    efa_bell_sleep(nic->bell);
    efa_bell_timer(nic->bell, due);
    struct fi_cq_data_entry ce;
    if (fi_cq_read(nic->cq, &ce, 0) != -FI_EAGAIN) {
        efa_bell_awake(nic->bell);
        return -EAGAIN;
    }
    nic->bell_armed = true;
    return 0;
}

int efa_wait_arm(te_plugin_nic *nic)
{
    if (nic->progress_fd < 0 && !nic->bell)
        return -EOPNOTSUPP;
    int rc = 0;
    pthread_mutex_lock(&nic->lock);
    /* A post held back recently: the provider may need polls to get on
     * (tcp;ofi_rxm connects a new peer on the writability of a socket its
     * CQ wait fd does not watch). The core retries it every turn, so the
     * mark stays fresh while it lasts. */
    if (nic->cq_fifo.count || nic->pending || nic->reposts_due ||
        nic->auth.busy || nic->auth.due || nic->auth.msgs.recv_due ||
        nic->bye.msgs.recv_due || nic->exits_seen ||
        (nic->held_ns && tpc_now_ns() - nic->held_ns < EFA_HELD_SPIN_NS)) {
        rc = -EAGAIN;
    } else if (nic->bell) {
        rc = bell_arm(nic);
    } else {
        /* Safe to block only when libfabric says so: it clears the fd's
         * signal and reports what is already queued (-FI_EAGAIN). */
        struct fid *cq = &nic->cq->fid;
        int t = fi_trywait(nic->fabric, &cq, 1);
        rc = t == 0 ? 0 : -EAGAIN;
    }
    pthread_mutex_unlock(&nic->lock);
    return rc;
}

TPC_HOT
int efa_poll(te_plugin_nic *nic, struct te_plugin_cq_entry *out, int max)
{
    if (!out || max < 0)
        return -EINVAL;
    int n = 0;
    pthread_mutex_lock(&nic->lock);
    if (nic->bell_armed) {
        nic->bell_armed = false;
        efa_bell_awake(nic->bell);
    }
    nic->down_said = false;
    fifo_drain(nic, out, max, &n);
    /* After a PEER_DOWN nothing else may set this poll's error (an op's
     * failure read next would replace the peer's words): the rest waits
     * for the next poll. */
    if (n == max || nic->down_said)
        goto out;
    if (nic->pending)
        efa_peers_resolve(nic);
    if (nic->auth.due || nic->auth.msgs.recv_due)
        efa_auth_housekeeping(nic, false); /* messages waiting for room */
    if (nic->bye.msgs.recv_due)
        efa_bye_housekeeping(nic);
    for (uint32_t i = 0; nic->reposts_due && i < nic->nslots; i++) {
        struct efa_slot *s = &nic->slots[i];
        if (s->repost && s->state == EFA_SLOT_LIVE &&
            efa_recv_repost(nic, s) == 0) {
            s->repost = 0;
            nic->reposts_due--;
        }
    }
    /* Liveness costs a syscall: look at most every EFA_HK_INTERVAL_NS,
     * reading the clock every 256 polls. */
    if ((++nic->hk_polls & 255) == 0) {
        uint64_t now = tpc_now_ns();
        if (now >= nic->hk_next_ns) {
            nic->hk_next_ns = now + EFA_HK_INTERVAL_NS;
            efa_peers_housekeeping(nic);
            if (nic->auth.on)
                efa_auth_housekeeping(nic, true);
            fifo_drain(nic, out, max, &n);
            if (nic->down_said)
                goto out;
        }
    }
    struct fi_cq_data_entry ce[EFA_POLL_BATCH];
    fi_addr_t src[EFA_POLL_BATCH];
    bool cq_empty = false;
    while (n < max) {
        size_t want = (size_t)(max - n) < EFA_POLL_BATCH ? (size_t)(max - n)
                                                         : EFA_POLL_BATCH;
        ssize_t got = nic->source ? fi_cq_readfrom(nic->cq, ce, want, src)
                                  : fi_cq_read(nic->cq, ce, want);
        if (got > 0) {
            for (ssize_t i = 0; i < got; i++)
                on_entry(nic, &ce[i], nic->source ? src[i] : FI_ADDR_NOTAVAIL,
                         out, &n);
            /* Entries that went to the fifo (peer down, reposts). */
            fifo_drain(nic, out, max, &n);
            cq_empty = (size_t)got < want;
            if (cq_empty || nic->down_said)
                break;
        } else if (got == -FI_EAVAIL) {
            if (on_error(nic, out, &n) < 0)
                break;
            fifo_drain(nic, out, max, &n);
            if (nic->down_said)
                break;
        } else {
            if (got != -FI_EAGAIN)
                efa_log(nic->ctx, 0, "%s: fi_cq_read: %s", nic->name,
                        fi_strerror((int)-got));
            cq_empty = true;
            break;
        }
    }
    if (nic->down_said)
        goto out;
    /* Our operations in flight may need the peers' progress more than
     * once (shm's segmented protocol without CMA): a peer that went to
     * sleep meanwhile is rung again (a scan of the peers: every poll for
     * a few, every 16th for many). */
    if (cq_empty && nic->tx_out && nic->bell_peers &&
        (nic->bell_peers <= 32 || (++nic->bell_polls & 15) == 0))
        efa_bell_ring_busy(nic);
    /* Exits seen by the housekeeping above, now that a goodbye sent
     * before the exit has been read (it says the close was orderly); a CQ
     * that never runs dry (a busy NIC) holds them back a bounded time. */
    if (nic->exits_seen &&
        (cq_empty || tpc_now_ns() - nic->exits_since_ns >= EFA_EXIT_HOLD_NS))
        efa_peers_exited(nic);
    /* A handshake in progress waits for the other side's next message
     * within microseconds: a worker without a wait object (shm) would
     * otherwise nap through each of its hops (efa_auth.c). */
    if (n == 0 && (nic->auth.busy || inbound_pending(nic)) &&
        nic->ctx->host.progressed)
        nic->ctx->host.progressed(nic->ctx->host.host_ctx);
    if (nic->auth.owed)
        efa_auth_answer_owed(nic); /* the completions above may free it */
out:
    pthread_mutex_unlock(&nic->lock);
    return n;
}
