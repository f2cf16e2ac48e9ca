/*
 * Target-side execution, the part a real NIC does in hardware: pop requests
 * of the inbound channels, check rkey, access and bounds against this NIC's
 * registrations, copy, report IMM/RECV here and respond to the initiator.
 *
 * Copies touching the initiator's memory happen only inside a "busy"
 * window per channel (see lb_chan_quiesce) so that peer_remove/nic_close on
 * the initiator can wait them out; copies touching our regions happen under
 * exec_lock so that mr_dereg can.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>

#include "lb_internal.h"

/* Copy len bytes from the initiator's address src into dst. */
int lb_copy_from(struct lb_inbound *in, void *dst, uint64_t src,
                        uint64_t len)
{
    return lb_copy_xfer(in->local, (pid_t)in->pid, false, dst, src, len);
}

/* Copy len bytes from src into the initiator's address dst. */
int lb_copy_to(struct lb_inbound *in, uint64_t dst, const void *src,
                      uint64_t len)
{
    return lb_copy_xfer(in->local, (pid_t)in->pid, true, (void *)src, dst,
                        len);
}

static void lb_fail(struct lb_resp *resp, int status, uint32_t reason,
                    uint64_t a, uint64_t b, uint64_t c)
{
    resp->status = status;
    resp->reason = (uint16_t)reason;
    resp->a = a;
    resp->b = b;
    resp->c = c;
}

/* The region the request addresses, or NULL with resp filled in. */
/* Inlined: it runs for every request (the per-op cost bounds the rate). */
static inline __attribute__((always_inline)) lb_mr *
lb_check(lb_nic *nic, const struct lb_req *r, uint32_t need,
                       struct lb_resp *resp, uint64_t *off)
{
    lb_mr *mr = lb_mr_lookup(nic, r->rkey);
    if (!mr) {
        lb_fail(resp, -EACCES, LB_R_RKEY, r->rkey, 0, 0);
        return NULL;
    }
    if (!(mr->access & need)) {
        lb_fail(resp, -EACCES, LB_R_ACCESS, r->rkey, need, 0);
        return NULL;
    }
    uint64_t o = r->remote_addr - (uint64_t)(uintptr_t)mr->addr;
    if (r->remote_addr < (uint64_t)(uintptr_t)mr->addr || o > mr->len ||
        r->len > mr->len - o) {
        lb_fail(resp, -EACCES, LB_R_BOUNDS, r->len, o, mr->len);
        return NULL;
    }
    *off = o;
    return mr;
}

static inline __attribute__((always_inline)) void
lb_respond(lb_nic *nic, struct lb_inbound *in, const struct lb_resp *resp)
{
    if (!lb_ring_prod_room(&in->resp)) {
        /* Cannot happen with an honest initiator (ring >= its queue depth). */
        lb_log(nic->ctx, 0, "%s: response ring of lo%u (pid %u) overflows; "
               "dropping the channel", nic->name, in->nic_index, in->pid);
        in->gone = true;
        return;
    }
    /* a, b, c (and the rest) are read only for a failure: a success
     * writes the 16-byte head of the entry, not all 64 bytes. The
     * initiator may take it at once (lap stamp, lb_ring.h). */
    lb_ring_prod_push(&in->resp, resp, resp->status || resp->reason
                                           ? sizeof(*resp)
                                           : offsetof(struct lb_resp, a));
    in->dirty = true;
}

/* Hand a SEND to the oldest posted receive buffer. */
static void lb_deliver(lb_nic *nic, struct lb_inbound *in,
                       const struct lb_req *r, const unsigned char *inl,
                       struct lb_resp *resp, struct te_plugin_cq_entry *e)
{
    struct lb_recv *rv = tpc_fifo_at(&nic->recvq, 0);
    *e = (struct te_plugin_cq_entry){.kind = TE_PCQ_RECV,
                                     .context = rv->context,
                                     .peer = lb_inbound_peer_fast(nic, in)};
    if (r->len > rv->len ||
        ((r->mem & LB_MEM_INLINE) && r->len > LB_INLINE_MAX)) {
        lb_fail(resp, -EMSGSIZE, LB_R_MSGSIZE, r->len,
                r->mem & LB_MEM_INLINE ? LB_INLINE_MAX : rv->len, 0);
        e->status = -EMSGSIZE;
        lb_err(nic, "message of %llu bytes from lo%u (pid %u) exceeds the "
                    "posted receive buffer of %llu bytes",
               (unsigned long long)r->len, in->nic_index, in->pid,
               (unsigned long long)rv->len);
    } else {
        if (r->mem & LB_MEM_INLINE) /* the bytes came in the ring */
            memcpy(rv->addr, inl, r->len);
        int rc = !r->len || (r->mem & LB_MEM_INLINE) ? 0
                 : r->mem & LB_MEM_LOCAL_DEVICE
                     ? lb_dev_copy_from(nic, in, rv->addr, false, r->local_addr,
                                        true, r->len)
                     : lb_copy_from(in, rv->addr, r->local_addr, r->len);
        if (rc < 0) {
            lb_fail(resp, rc,
                    r->mem & LB_MEM_LOCAL_DEVICE ? LB_R_DEVICE : LB_R_COPY,
                    (uint64_t)-rc, in->pid, 0);
            e->status = rc;
        } else {
            e->len = r->len;
        }
    }
    tpc_fifo_pop(&nic->recvq);
}

/* The end of a WRITE whose copy returned rc: its failure in resp, or its
 * immediate in *e (returns 1). */
static int lb_write_done(lb_nic *nic, const struct lb_work *w, int rc,
                         bool device, struct lb_resp *resp,
                         struct te_plugin_cq_entry *e)
{
    if (rc < 0) {
        lb_fail(resp, rc, device ? LB_R_DEVICE : LB_R_COPY, (uint64_t)-rc,
                w->in->pid, 0);
        return 0;
    }
    if (!(w->req.flags & TE_POP_F_IMM))
        return 0;
    *e = (struct te_plugin_cq_entry){.kind = TE_PCQ_IMM, .imm = w->req.imm,
                                     .peer = lb_inbound_peer_fast(nic, w->in)};
    return 1;
}

/* Execute one request; returns 1 if it produced a completion in *e. */
TPC_HOT
static int lb_exec(lb_nic *nic, const struct lb_work *w,
                   struct te_plugin_cq_entry *e)
{
    struct lb_inbound *in = w->in;
    const struct lb_req *r = &w->req;
    struct lb_resp resp = {.slot = r->slot, .gen = r->gen};
    uint64_t off = 0;
    lb_mr *mr;
    int rc, out = 0;

    switch (r->kind) {
    case TE_POP_WRITE:
        /* An imm-only write may carry no key at all. */
        if (r->len || r->rkey) {
            if (!(mr = lb_check(nic, r, TE_PMR_REMOTE_WRITE, &resp, &off)))
                break;
            bool src_dev = r->mem & LB_MEM_LOCAL_DEVICE;
            rc = !r->len ? 0
                 : mr->device || src_dev
                     ? lb_dev_copy_from(nic, in, mr->addr + off, mr->device,
                                        r->local_addr, src_dev, r->len)
                     : lb_copy_from(in, mr->addr + off, r->local_addr, r->len);
            out = lb_write_done(nic, w, rc, mr->device || src_dev, &resp, e);
            break;
        }
        out = lb_write_done(nic, w, 0, false, &resp, e);
        break;
    case TE_POP_READ:
        if (!(mr = lb_check(nic, r, TE_PMR_REMOTE_READ, &resp, &off)))
            break;
        bool dst_dev = r->mem & LB_MEM_LOCAL_DEVICE;
        if (r->len &&
            (rc = mr->device || dst_dev
                      ? lb_dev_copy_to(nic, in, r->local_addr, dst_dev,
                                       mr->addr + off, mr->device, r->len)
                      : lb_copy_to(in, r->local_addr, mr->addr + off,
                                   r->len)) < 0)
            lb_fail(&resp, rc, mr->device || dst_dev ? LB_R_DEVICE : LB_R_COPY,
                    (uint64_t)-rc, in->pid, 0);
        break;
    case TE_POP_SEND:
        if (nic->pending.count || !nic->recvq.count) {
            /* Receiver not ready: keep it, in arrival order, for later. */
            struct lb_pending p = {.in = in, .req = *r};
            if (r->mem & LB_MEM_INLINE)
                memcpy(p.inl, w->inl, sizeof(p.inl));
            if (tpc_fifo_push(&nic->pending, &p) == 0)
                return 0;
            lb_fail(&resp, -ENOMEM, LB_R_NONE, 0, 0, 0);
            break;
        }
        lb_deliver(nic, in, r, w->inl, &resp, e);
        out = 1;
        break;
    default:
        lb_fail(&resp, -EINVAL, LB_R_KIND, r->kind, 0, 0);
        break;
    }
    lb_respond(nic, in, &resp);
    return out;
}

/*
 * Copies of host-to-host WRITEs and READs of at least this many bytes go
 * to the copy engines (loopback.copy_threads > 1) together with the others
 * of their poll. Smaller ones are executed one by one as
 * before: their copy costs less than sharing it would.
 */
#define LB_PAR_MIN_LEN (16u << 10)

/* The bytes a copy stores to (store) or loads from: in this process
 * (space 0) or in the initiator's (space = its pid). */
struct lb_span {
    pid_t space;
    uint64_t at, len;
};

static bool lb_spans_meet(struct lb_span a, struct lb_span b)
{
    return a.space == b.space && a.at < b.at + b.len && b.at < a.at + a.len;
}

/* Would copying a and b at once race: one stores to a byte the other
 * loads from or stores to? */
static bool lb_copies_collide(const struct lb_copy *a, const struct lb_copy *b)
{
    struct lb_span sp[2][2]; /* [copy][0 store, 1 load] */
    const struct lb_copy *x[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        struct lb_span here = {0, (uint64_t)(uintptr_t)x[i]->here, x[i]->len};
        struct lb_span there = {x[i]->local ? 0 : x[i]->pid, x[i]->there,
                                x[i]->len};
        sp[i][0] = x[i]->out ? there : here;
        sp[i][1] = x[i]->out ? here : there;
    }
    return lb_spans_meet(sp[0][0], sp[1][0]) ||
           lb_spans_meet(sp[0][0], sp[1][1]) ||
           lb_spans_meet(sp[0][1], sp[1][0]);
}

/* May w join the run c[0..m) of copies made at once: a host-to-host WRITE
 * or READ of LB_PAR_MIN_LEN bytes or more whose checks pass, and that
 * collides with no earlier member (lb_copies_collide)? Its copy in c[m] if
 * so. The plugin ABI orders nothing among them (docs/plugin-guide.md, rule
 * 3: only a write's payload before its immediate), but two threads storing
 * to bytes that a third loads or stores at once is a data race
 * (ThreadSanitizer reported it for a test that rewrites one buffer): such
 * a copy starts the next run instead, after this one, as it came. */
static bool lb_run_member(lb_nic *nic, const struct lb_work *w,
                          struct lb_copy *c, uint32_t m)
{
    const struct lb_req *r = &w->req;
    bool out = r->kind == TE_POP_READ;
    if ((r->kind != TE_POP_WRITE && !out) || r->len < LB_PAR_MIN_LEN ||
        w->in->gone || (r->mem & LB_MEM_LOCAL_DEVICE))
        return false;
    struct lb_resp resp;
    uint64_t off;
    lb_mr *mr = lb_check(nic, r, out ? TE_PMR_REMOTE_READ : TE_PMR_REMOTE_WRITE,
                         &resp, &off);
    if (!mr || mr->device)
        return false; /* lb_exec fails it, or copies it to the device */
    struct lb_copy x = {.here = mr->addr + off, .there = r->local_addr,
                        .len = r->len, .pid = (pid_t)w->in->pid,
                        .local = w->in->local, .out = out};
    for (uint32_t j = 0; j < m; j++)
        if (lb_copies_collide(&c[j], &x))
            return false;
    c[m] = x;
    return true;
}

/* Execute batch[i..) up to the first request that cannot join a run
 * (lb_run_member), their copies at once on the copy engines, then the
 * immediates and responses, in order. Returns how many it executed (0:
 * batch[i] cannot join); completions from out[*n]. */
static uint32_t lb_exec_run(lb_nic *nic, struct lb_work *batch, uint32_t i,
                            uint32_t nb, struct te_plugin_cq_entry *out,
                            int *n)
{
    struct lb_copy *c = nic->copies;
    uint32_t m = 0;
    while (i + m < nb && lb_run_member(nic, &batch[i + m], c, m))
        m++;
    if (!m)
        return 0;
    int started = lb_copy_run(nic->ctx->copy_pool, c, m);
    if (started < 0)
        lb_log(nic->ctx, 0, "cannot start %u copy threads: %s; the polling "
               "thread copies alone", nic->ctx->cfg.copy_threads - 1,
               strerror(-started));
    for (uint32_t k = 0; k < m; k++) {
        const struct lb_work *w = &batch[i + k];
        struct lb_resp resp = {.slot = w->req.slot, .gen = w->req.gen};
        int rc = atomic_load(&c[k].status);
        if (!c[k].out)
            *n += lb_write_done(nic, w, rc, false, &resp, &out[*n]);
        else if (rc < 0)
            lb_fail(&resp, rc, LB_R_COPY, (uint64_t)-rc, w->in->pid, 0);
        lb_respond(nic, w->in, &resp);
    }
    return m;
}

/* Open the busy window of a channel; false if its initiator is gone. */
static bool lb_busy_enter(struct lb_inbound *in)
{
    atomic_store(&in->shm->tgt_busy, 1);
    if (atomic_load(&in->shm->init_state) != LB_ST_OK) {
        atomic_store_explicit(&in->shm->tgt_busy, 0, memory_order_release);
        in->gone = true;
        return false;
    }
    return true;
}

/* Ring for the responses first: a quiescing initiator drains them right
 * after (they are visible since their push). */
static void lb_busy_leave(struct lb_inbound *in)
{
    if (in->dirty) {
        in->dirty = false;
        lb_bell_initiator(in);
    }
    atomic_store_explicit(&in->shm->tgt_busy, 0, memory_order_release);
}

/* SENDs that waited for receive buffers, oldest first. */
static int lb_pending_run(lb_nic *nic, struct te_plugin_cq_entry *out, int room)
{
    int n = 0;
    pthread_mutex_lock(&nic->exec_lock);
    while (nic->pending.count && nic->recvq.count && n < room) {
        struct lb_pending *p = tpc_fifo_at(&nic->pending, 0);
        struct lb_inbound *in = p->in;
        if (!in->gone && lb_busy_enter(in)) {
            struct lb_resp resp = {.slot = p->req.slot, .gen = p->req.gen};
            lb_deliver(nic, in, &p->req, p->inl, &resp, &out[n++]);
            lb_respond(nic, in, &resp);
            lb_busy_leave(in);
        }
        tpc_fifo_pop(&nic->pending);
    }
    pthread_mutex_unlock(&nic->exec_lock);
    return n;
}

void lb_pending_purge(lb_nic *nic, struct lb_inbound *in)
{
    struct tpc_fifo *f = &nic->pending;
    uint32_t keep = 0, count = f->count;
    for (uint32_t i = 0; i < count; i++) {
        struct lb_pending *p = tpc_fifo_at(f, i);
        if (p->in != in) {
            if (keep != i)
                memcpy(tpc_fifo_at(f, keep), p, sizeof(*p));
            keep++;
        }
    }
    f->count = keep;
}

/* Ring entries the request copied into w (found `take` entries past the
 * ring's position) occupies: 1, and for an inline SEND its continuations
 * (lb_req_conts), whose payload, with the 16 bytes of the request entry
 * itself, is gathered into w->inl. 0 if those continuations are not all
 * ready, which an honest initiator never lets happen (they are stamped
 * first: lb_ring_prod_push_cont). */
static uint64_t lb_take_entries(struct lb_ring *ring, uint64_t take,
                                struct lb_work *w)
{
    if (w->req.kind != TE_POP_SEND || !(w->req.mem & LB_MEM_INLINE))
        return 1;
    uint32_t conts = lb_req_conts(&w->req);
    if (lb_ring_cons_extend(ring, take + 1 + conts) < take + 1 + conts)
        return 0;
    memcpy(w->inl, &w->req.remote_addr, LB_INLINE_HEAD);
    uint64_t left = conts ? w->req.len - LB_INLINE_HEAD : 0;
    for (uint32_t j = 1; j <= conts; j++) {
        size_t k = left < LB_RING_CONT_BYTES ? left : LB_RING_CONT_BYTES;
        memcpy(w->inl + LB_INLINE_HEAD + (j - 1) * LB_RING_CONT_BYTES,
               lb_ring_cons_cont(ring, take + j), k);
        left -= k;
    }
    return 1 + conts;
}

TPC_HOT
int lb_target_progress(lb_nic *nic, struct te_plugin_cq_entry *out, int room)
{
    int n = 0;
    /* Let a waiting mr_reg/dereg have exec_lock first (see lb_mr_lock). */
    if (room <= 0 || atomic_load_explicit(&nic->mr_waiting, memory_order_relaxed))
        return 0;
    if (nic->pending.count && nic->recvq.count)
        n = lb_pending_run(nic, out, room);

    /* Pop: at most one completion per request, so room bounds the batch. */
    uint32_t budget = (uint32_t)(room - n) < LB_BATCH ? (uint32_t)(room - n)
                                                      : LB_BATCH;
    uint32_t nb = 0, nin = nic->nin;
    uint64_t now = 0, bytes = 0;
    bool capped = nic->link_gbps != 0, link_full = false;
    struct lb_inbound *touched[LB_BATCH];
    uint32_t ntouched = 0;
    struct lb_work *batch = nic->batch;

    for (uint32_t k = 0; k < nin && nb < budget && !link_full &&
                         bytes < LB_BATCH_BYTES; k++) {
        struct lb_inbound *in = nic->in[k];
        if (in->gone)
            continue;
        uint64_t avail = lb_ring_cons_avail(&in->req, budget - nb), take = 0;
        while (take < avail && nb < budget && bytes < LB_BATCH_BYTES) {
            const struct lb_req *r = lb_ring_cons_slot(&in->req, take);
            if (r->not_before_ns) {
                if (!now)
                    now = tpc_now_ns();
                if (now < r->not_before_ns)
                    break; /* FIFO: everything behind it is younger */
            }
            if (capped && r->kind != TE_POP_RECV &&
                !lb_link_admit(nic, r->len)) {
                link_full = true;
                break;
            }
            struct lb_work *w = &batch[nb];
            w->in = in;
            memcpy(&w->req, r, sizeof(*r)); /* our copy: the ring may change */
            uint64_t used = lb_take_entries(&in->req, take, w);
            if (!used)
                break; /* not all there: a hostile initiator; retry later */
            bytes += w->req.len;
            nb++;
            take += used;
        }
        if (take) {
            lb_ring_cons_advance(&in->req, take);
            touched[ntouched++] = in;
            /* The first response slot is a line the initiator read last:
             * ask for it now, so that it is ours by the time the response
             * is written (the doorbell's fence waits for that write). */
            __builtin_prefetch(lb_ring_prod_next(&in->resp), 1);
        }
    }
    if (nb == 0)
        return n;
    if (nic->ctx->cfg.fault_reorder)
        lb_shuffle(nic, batch, nb, sizeof(*batch));

    for (uint32_t i = 0; i < ntouched; i++)
        touched[i]->in_batch = lb_busy_enter(touched[i]);
    bool runs = nic->ctx->cfg.copy_threads > 1;
    pthread_mutex_lock(&nic->exec_lock);
    for (uint32_t i = 0; i < nb;) {
        uint32_t done = runs ? lb_exec_run(nic, batch, i, nb, out, &n) : 0;
        if (done) {
            i += done;
            continue;
        }
        if (!batch[i].in->gone)
            n += lb_exec(nic, &batch[i], &out[n]);
        i++;
    }
    pthread_mutex_unlock(&nic->exec_lock);
    for (uint32_t i = 0; i < ntouched; i++) {
        if (touched[i]->in_batch)
            lb_busy_leave(touched[i]);
        touched[i]->in_batch = false;
    }
    /* Writes without an immediate produce no entry here, yet this worker
     * is what moves the initiator's data: keep the core from sleeping. */
    if (n == 0 && nic->ctx->host.progressed)
        nic->ctx->host.progressed(nic->ctx->host.host_ctx);
    return n;
}
