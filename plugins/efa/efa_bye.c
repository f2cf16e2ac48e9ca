/*
 * Orderly close (efa_bye.h): goodbyes sent by a closing NIC to its live
 * peers, and received ones turned into PEER_DOWN with -ESHUTDOWN. The
 * messages are tagged sends from a small registered pool of their own
 * (efa_msgpool.h); received ones come through poll() like every completion
 * (efa_cq.c hands them here), the sent ones are reaped here while the NIC
 * closes (the core reads nothing from a NIC it is closing: plugin.h).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "efa_internal.h"

/* This NIC's endpoint name: the raw part of its address. */
static const uint8_t *own_raw(const efa_nic *nic)
{
    return ((const struct efa_wire_addr *)nic->addr)->raw;
}

int efa_bye_open(efa_nic *nic)
{
    if (!(nic->info->caps & FI_TAGGED) || !nic->ctx->cfg.bye_wait_ms)
        return 0; /* closes without goodbyes; receives none either */
    int rc = efa_msgpool_open(nic, &nic->bye.msgs, EFA_BYE_TAG,
                              sizeof(struct efa_bye_msg), EFA_BYE_NRECV,
                              EFA_BYE_NSEND, "goodbye");
    nic->bye.on = rc == 0;
    return rc;
}

void efa_bye_close(efa_nic *nic)
{
    efa_msgpool_close(&nic->bye.msgs);
    memset(&nic->bye, 0, sizeof(nic->bye));
}

bool efa_bye_owns(efa_nic *nic, void *op_context)
{
    return nic->bye.on && efa_msgpool_index(&nic->bye.msgs, op_context) >= 0;
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
    if (!n) /* a remote that wrote to us without being our peer, or one
             * already down: nothing to do, nothing suspicious */
        efa_log(nic->ctx, 3, "%s: a goodbye from no live peer of ours",
                nic->name);
}

void efa_bye_completion(efa_nic *nic, void *op_context, fi_addr_t src,
                        uint64_t len, int err)
{
    struct efa_msgpool *mp = &nic->bye.msgs;
    uint32_t i = (uint32_t)efa_msgpool_index(mp, op_context);
    if (i >= mp->nrecv) {
        /* A send's completion outside a close: cannot happen (goodbyes
         * are sent only while closing); give the slot back anyway. */
        efa_msgpool_send_done(mp, i);
        return;
    }
    if (!err)
        on_message(nic, efa_msgpool_buf(mp, i), len, src);
    else if (err != FI_ECANCELED)
        efa_log(nic->ctx, 2, "%s: goodbye receive: %s", nic->name,
                fi_strerror(err));
    efa_msgpool_recv_done(nic, mp, i);
}

void efa_bye_housekeeping(efa_nic *nic)
{
    efa_msgpool_repost(nic, &nic->bye.msgs);
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
    struct efa_msgpool *mp = &nic->bye.msgs;
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
            int i = efa_msgpool_index(mp, ctx[k]);
            if (i < (int)mp->nrecv)
                continue; /* not ours, or a goodbye to us: we leave too */
            efa_msgpool_send_done(mp, (uint32_t)i);
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
    return p->exit_seen || efa_pidfd_exited(p->pidfd);
}

/* Send one goodbye to fa (an endpoint of this process: local), with the
 * MAC mac (NULL: unkeyed), waiting until the deadline for a free slot
 * and for the provider to take it. */
static int say_bye(efa_nic *nic, fi_addr_t fa, struct efa_local *local,
                   const uint8_t *mac, struct closing *c)
{
    struct efa_msgpool *mp = &nic->bye.msgs;
    while (mp->send_free >= mp->nops) {
        reap(nic, c);
        if (mp->send_free < mp->nops || tpc_now_ns() >= c->deadline_ns)
            break;
    }
    if (mp->send_free >= mp->nops) {
        c->failed++;
        return 0;
    }
    uint32_t i = mp->send_free;
    struct efa_bye_msg *m = (struct efa_bye_msg *)efa_msgpool_buf(mp, i);
    if (efa_bye_msg_build(m, own_raw(nic), nic->raw_len, mac != NULL))
        return 0;
    if (mac)
        memcpy(m->mac, mac, sizeof(m->mac));
    for (;;) {
        if (local && !efa_local_enter(local))
            return 0; /* its endpoint in this process closed first */
        ssize_t s = efa_msgpool_send(nic, mp, i, fa);
        if (local)
            efa_local_leave(local);
        if (s == 0) {
            c->out++;
            c->sent++;
            return 0;
        }
        if (s != -FI_EAGAIN || tpc_now_ns() >= c->deadline_ns) {
            c->failed++;
            return 0;
        }
        reap(nic, c); /* the provider needs progress to take more */
    }
}

static int say_bye_keyed(efa_nic *nic, fi_addr_t fa, struct efa_local *local,
                         const uint8_t *mac, void *arg)
{
    return say_bye(nic, fa, local, mac, arg);
}

void efa_bye_send_all(efa_nic *nic)
{
    if (!nic->bye.on || !nic->ep)
        return;
    struct closing c = {
        .deadline_ns = tpc_now_ns() +
                       (uint64_t)nic->ctx->cfg.bye_wait_ms * 1000000ull};
    pthread_mutex_lock(&nic->lock);
    if (nic->auth.on) {
        /* Every authenticated remote, our peer or one that only wrote to
         * us: its peers of us learn that their target closed. */
        efa_auth_bye_targets(nic, say_bye_keyed, &c);
    } else {
        /* Unkeyed, a remote that only wrote to us is unknown here (no
         * address of it): our live peers. */
        for (uint32_t i = 0; i < nic->npeers; i++) {
            struct efa_peer *p = &nic->peers[i];
            if (p->state != EFA_PEER_LIVE || p->fi_addr == FI_ADDR_NOTAVAIL ||
                (p->raw_len == nic->raw_len &&
                 !memcmp(p->raw, own_raw(nic), nic->raw_len)) ||
                said_already(nic, i) || exited(p))
                continue; /* unreachable, ourselves, told, or gone */
            say_bye(nic, p->fi_addr, p->local, NULL, &c);
        }
    }
    while (c.out && tpc_now_ns() < c.deadline_ns)
        reap(nic, &c);
    pthread_mutex_unlock(&nic->lock);
    if (c.failed || c.out)
        efa_log(nic->ctx, 1, "%s: closing: goodbyes to %u remote addresses "
                "sent, %u not sent, %u unconfirmed within efa.bye_wait_ms = "
                "%u (those remotes learn of the close otherwise: "
                "docs/efa.md)", nic->name, c.sent, c.failed, c.out,
                nic->ctx->cfg.bye_wait_ms);
    else if (c.sent)
        efa_log(nic->ctx, 3, "%s: closing: goodbyes to %u remote addresses "
                "sent", nic->name, c.sent);
}
