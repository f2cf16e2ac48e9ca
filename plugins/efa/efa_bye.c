/*
 * Orderly close (efa_bye.h): goodbyes sent by a closing NIC to its live
 * peers, and received ones turned into PEER_DOWN with -ESHUTDOWN. The
 * messages are tagged sends from a small registered pool of their own;
 * received ones come through poll() like every completion (efa_cq.c hands
 * them here), the sent ones are reaped here while the NIC closes (the core
 * reads nothing from a NIC it is closing: plugin.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_tagged.h>

#include "efa_internal.h"

#define NOPS (EFA_BYE_NRECV + EFA_BYE_NSEND)
#define MSG_LEN sizeof(struct efa_bye_msg)

static uint8_t *msg_buf(efa_nic *nic, uint32_t i)
{
    return nic->bye.buf + (size_t)i * MSG_LEN;
}

static int post_recv(efa_nic *nic, uint32_t i)
{
    struct iovec iov = {.iov_base = msg_buf(nic, i), .iov_len = MSG_LEN};
    void *desc = nic->bye.desc;
    struct fi_msg_tagged m = {.msg_iov = &iov, .desc = &desc, .iov_count = 1,
                              .addr = FI_ADDR_UNSPEC, .tag = EFA_BYE_TAG,
                              .ignore = 0, .context = &nic->bye.ops[i].fctx};
    return (int)fi_trecvmsg(nic->ep, &m, 0);
}

/* This NIC's endpoint name: the raw part of its address. */
static const uint8_t *own_raw(const efa_nic *nic)
{
    return ((const struct efa_wire_addr *)nic->addr)->raw;
}

int efa_bye_open(efa_nic *nic)
{
    struct efa_bye *b = &nic->bye;
    if (!(nic->info->caps & FI_TAGGED) || !nic->ctx->cfg.bye_wait_ms)
        return 0; /* closes without goodbyes; receives none either */
    if (posix_memalign((void **)&b->buf, 64, NOPS * MSG_LEN)) {
        efa_err(nic, "out of memory for goodbye messages");
        return -ENOMEM;
    }
    memset(b->buf, 0, NOPS * MSG_LEN);
    for (uint32_t i = EFA_BYE_NRECV; i < NOPS; i++)
        b->ops[i].next_free = i + 1;
    b->send_free = EFA_BYE_NRECV;
    uint64_t key;
    pthread_mutex_lock(&nic->lock);
    int rc = efa_mr_register_locked(nic, b->buf, NOPS * MSG_LEN,
                                    FI_SEND | FI_RECV, TE_PMEM_HOST, 0,
                                    &b->mr, &key);
    if (!rc) {
        b->desc = fi_mr_desc(b->mr);
        for (uint32_t i = 0; i < EFA_BYE_NRECV && !rc; i++)
            rc = post_recv(nic, i);
        if (rc) {
            efa_err(nic, "fi_trecvmsg (goodbyes): %s", fi_strerror(-rc));
            rc = efa_errno(rc);
        }
    }
    pthread_mutex_unlock(&nic->lock);
    b->on = rc == 0;
    return rc;
}

void efa_bye_close(efa_nic *nic)
{
    struct efa_bye *b = &nic->bye;
    if (b->mr)
        fi_close(&b->mr->fid);
    free(b->buf);
    memset(b, 0, sizeof(*b));
}

bool efa_bye_owns(efa_nic *nic, void *op_context)
{
    uintptr_t p = (uintptr_t)op_context, base = (uintptr_t)nic->bye.ops;
    return nic->bye.on && p >= base && p < base + sizeof(nic->bye.ops) &&
           (p - base) % sizeof(struct efa_bye_op) == 0;
}

/* ---------------------------------------------------------- receiving */

static void dropped(efa_nic *nic, const char *why)
{
    uint64_t n = ++nic->bye.dropped;
    if ((n & (n - 1)) == 0) /* the 1st, 2nd, 4th, 8th, ... */
        efa_log(nic->ctx, 1, "%s: goodbye dropped: %s (%llu dropped so "
                "far)", nic->name, why, (unsigned long long)n);
}

/* Does p stand for the sender of m (src: the provider's name for it)? */
static bool is_sender(const efa_nic *nic, const struct efa_peer *p,
                      const struct efa_bye_msg *m, fi_addr_t src,
                      uint32_t auth_rec)
{
    if (p->state != EFA_PEER_LIVE && p->state != EFA_PEER_PENDING)
        return false;
    if (auth_rec)
        return p->auth == auth_rec; /* verified against that record */
    if (p->raw_len != m->raw_len || memcmp(p->raw, m->raw, m->raw_len))
        return false;
    /* A provider that names senders must name this one (a sender it
     * cannot name is at no address vector entry of ours: not a peer). */
    return !nic->source || (src != FI_ADDR_NOTAVAIL && p->fi_addr == src);
}

static void on_message(efa_nic *nic, const void *buf, uint64_t len,
                       fi_addr_t src)
{
    struct efa_bye_msg m;
    if (efa_bye_msg_parse(buf, len, &m)) {
        dropped(nic, "malformed");
        return;
    }
    if (m.keyed != nic->auth.on) {
        dropped(nic, m.keyed ? "keyed, and this engine has no secret"
                             : "not keyed, and this engine has a secret");
        return;
    }
    uint32_t rec = 0;
    if (m.keyed && efa_auth_bye_verify(nic, src, m.mac, &rec)) {
        dropped(nic, "its MAC does not verify for an authenticated sender");
        return;
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < nic->npeers; i++) {
        struct efa_peer *p = &nic->peers[i];
        if (!is_sender(nic, p, &m, src, rec))
            continue;
        efa_peer_down(nic, p, -ESHUTDOWN,
                      "it closed its NIC in order (its goodbye came)");
        n++;
    }
    if (n)
        nic->bye.received++;
    else
        /* A remote that wrote to us without being our peer, or one we
         * already know to be down: nothing to do, nothing suspicious. */
        efa_log(nic->ctx, 3, "%s: a goodbye from no live peer of ours",
                nic->name);
}

void efa_bye_completion(efa_nic *nic, void *op_context, fi_addr_t src,
                        uint64_t len, int err)
{
    struct efa_bye *b = &nic->bye;
    uint32_t i = (uint32_t)((struct efa_bye_op *)op_context - b->ops);
    if (i >= EFA_BYE_NRECV) {
        /* A send's completion outside a close: cannot happen (goodbyes
         * are sent only while closing); give the op back anyway. */
        b->ops[i].next_free = b->send_free;
        b->send_free = i;
        return;
    }
    if (!err)
        on_message(nic, msg_buf(nic, i), len, src);
    else if (err != FI_ECANCELED)
        efa_log(nic->ctx, 2, "%s: goodbye receive: %s", nic->name,
                fi_strerror(err));
    if (post_recv(nic, i))
        b->recv_due |= 1u << i;
}

void efa_bye_housekeeping(efa_nic *nic)
{
    struct efa_bye *b = &nic->bye;
    for (uint32_t i = 0; b->recv_due && i < EFA_BYE_NRECV; i++)
        if ((b->recv_due & (1u << i)) && post_recv(nic, i) == 0)
            b->recv_due &= ~(1u << i);
}

/* ---------------------------------------------------------- sending */

struct closing {
    uint64_t deadline_ns;
    uint32_t out;      /* goodbyes sent, completion not read yet */
    uint32_t sent, failed;
};

/* Read the CQ while closing: goodbyes' completions free their ops; every
 * other entry is dropped (the core reads nothing more from this NIC). */
static void reap(efa_nic *nic, struct closing *c)
{
    struct efa_bye *b = &nic->bye;
    struct fi_cq_data_entry ce[EFA_POLL_BATCH];
    for (;;) {
        ssize_t got = fi_cq_read(nic->cq, ce, EFA_POLL_BATCH);
        void *ctx[EFA_POLL_BATCH];
        int err = 0;
        if (got == -FI_EAVAIL) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof(ee));
            if (fi_cq_readerr(nic->cq, &ee, 0) != 1)
                return;
            ctx[0] = ee.op_context;
            err = ee.err ? ee.err : FI_EIO;
            got = 1;
        } else if (got <= 0) {
            return;
        } else {
            for (ssize_t k = 0; k < got; k++)
                ctx[k] = (ce[k].flags & FI_REMOTE_WRITE) ? NULL
                                                         : ce[k].op_context;
        }
        for (ssize_t k = 0; k < got; k++) {
            if (!efa_bye_owns(nic, ctx[k]))
                continue;
            uint32_t i = (uint32_t)((struct efa_bye_op *)ctx[k] - b->ops);
            if (i < EFA_BYE_NRECV)
                continue; /* a goodbye to us: we are leaving too */
            b->ops[i].next_free = b->send_free;
            b->send_free = i;
            c->out--;
            if (err)
                c->failed++;
        }
    }
}

/* Has an earlier live peer (index < i) the same address vector entry? */
static bool said_already(const efa_nic *nic, uint32_t i)
{
    const struct efa_peer *p = &nic->peers[i];
    for (uint32_t j = 0; j < i; j++) {
        const struct efa_peer *q = &nic->peers[j];
        if (q->state == EFA_PEER_LIVE && q->fi_addr == p->fi_addr)
            return true;
    }
    return false;
}

/* A same-host peer whose process is gone: nobody to tell, and shm would
 * enter its region through a lock it may have died holding (efa_post.c
 * check_alive). */
static bool exited(const struct efa_peer *p)
{
    if (p->exit_seen)
        return true;
    struct pollfd pf = {.fd = p->pidfd, .events = POLLIN};
    return p->pidfd >= 0 && poll(&pf, 1, 0) > 0;
}

/* Send one goodbye to p, waiting (until the deadline) for a free op and
 * for the provider to take it. */
static void say_bye(efa_nic *nic, struct efa_peer *p, struct closing *c)
{
    struct efa_bye *b = &nic->bye;
    if (exited(p))
        return;
    while (b->send_free >= NOPS) {
        reap(nic, c);
        if (b->send_free < NOPS || tpc_now_ns() >= c->deadline_ns)
            break;
    }
    if (b->send_free >= NOPS) {
        c->failed++;
        return;
    }
    uint32_t i = b->send_free;
    struct efa_bye_msg *m = (struct efa_bye_msg *)msg_buf(nic, i);
    if (efa_bye_msg_build(m, own_raw(nic), nic->raw_len, nic->auth.on) ||
        (nic->auth.on && efa_auth_bye_mac(nic, p, m->mac)))
        return; /* not authenticated with it (nothing to tell), or no MAC */
    struct iovec iov = {.iov_base = m, .iov_len = MSG_LEN};
    void *desc = b->desc;
    struct fi_msg_tagged tm = {.msg_iov = &iov, .desc = &desc, .iov_count = 1,
                               .addr = p->fi_addr, .tag = EFA_BYE_TAG,
                               .context = &b->ops[i].fctx};
    for (;;) {
        if (p->local && !efa_local_enter(p->local))
            return; /* its endpoint in this process closed first */
        ssize_t s = fi_tsendmsg(nic->ep, &tm, FI_COMPLETION);
        if (p->local)
            efa_local_leave(p->local);
        if (s == 0) {
            b->send_free = b->ops[i].next_free;
            c->out++;
            c->sent++;
            return;
        }
        if (s != -FI_EAGAIN || tpc_now_ns() >= c->deadline_ns) {
            c->failed++;
            return;
        }
        reap(nic, c); /* the provider needs progress to take more */
    }
}

void efa_bye_send_all(efa_nic *nic)
{
    if (!nic->bye.on || !nic->ep)
        return;
    struct closing c = {
        .deadline_ns = tpc_now_ns() +
                       (uint64_t)nic->ctx->cfg.bye_wait_ms * 1000000ull};
    pthread_mutex_lock(&nic->lock);
    for (uint32_t i = 0; i < nic->npeers; i++) {
        struct efa_peer *p = &nic->peers[i];
        if (p->state != EFA_PEER_LIVE || p->fi_addr == FI_ADDR_NOTAVAIL ||
            (p->raw_len == nic->raw_len &&
             !memcmp(p->raw, own_raw(nic), nic->raw_len)) ||
            said_already(nic, i))
            continue; /* not reachable, ourselves, or told already */
        say_bye(nic, p, &c);
    }
    while (c.out && tpc_now_ns() < c.deadline_ns)
        reap(nic, &c);
    pthread_mutex_unlock(&nic->lock);
    if (c.failed || c.out)
        efa_log(nic->ctx, 1, "%s: closing: goodbyes to %u peer addresses "
                "sent, %u not sent, %u unconfirmed within efa.bye_wait_ms = "
                "%u (those peers learn of the close otherwise: docs/efa.md)",
                nic->name, c.sent, c.failed, c.out,
                nic->ctx->cfg.bye_wait_ms);
    else if (c.sent)
        efa_log(nic->ctx, 3, "%s: closing: goodbyes to %u peer addresses "
                "sent", nic->name, c.sent);
}
