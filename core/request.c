/*
 * te_submit(): validate a request completely on the caller's thread (so a
 * bad request fails at once, naming the cause, with nothing sent), copy it
 * with everything it points to into one allocation, expand it into op
 * cursors and hand it to the group's worker.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "request_abi.h"
#include "shard.h"
#include "te_error.h"
#include "wait.h"
#include "te_hot.h"

static const char *op_name(uint32_t op)
{
    switch (op) {
    case TE_OP_WRITE: return "write";
    case TE_OP_PAGED: return "paged write";
    case TE_OP_SCATTER: return "scatter";
    case TE_OP_BARRIER: return "barrier";
    case TE_OP_READ: return "read";
    case TE_OP_SEND: return "send";
    default: return "request";
    }
}

/* a + b <= limit without overflow. */
static int range_ok(uint64_t a, uint64_t b, uint64_t limit)
{
    return a <= limit && b <= limit - a;
}

TE_HOT
static int check_peer(struct te_group *g, te_peer p, const char *what,
                      struct te_peer_entry **out)
{
    struct te_peer_entry *pe = te_group_peer(g, p);
    if (!pe)
        return te_fail(-ENOENT, "%s: peer %u is not a peer of group %d", what,
                       p, g->index);
    int st = atomic_load_explicit(&pe->state, memory_order_acquire);
    if (st == TE_PEER_DOWN) /* down_why is written before the state */
        return te_fail(-ECONNRESET, "%s: peer %u of group %d is down: %s",
                       what, p, g->index, pe->down_why);
    *out = pe;
    return 0;
}

TE_HOT
static int check_local(struct te_group *g, const te_mr *mr, uint64_t off,
                       uint64_t len, const char *what)
{
    if (!mr)
        return te_fail(-EINVAL, "%s: local registration is NULL", what);
    if (mr->g != g)
        return te_fail(-EINVAL,
                       "%s: local registration belongs to group %d, request "
                       "is on group %d", what, mr->g->index, g->index);
    if (!range_ok(off, len, mr->len))
        return te_fail(-ERANGE,
                       "%s: local range +%" PRIu64 " len %" PRIu64
                       " exceeds registration of %zu bytes", what, off, len,
                       mr->len);
    return 0;
}

TE_HOT
static int check_remote(const struct te_peer_entry *pe, const te_mr_desc *d,
                        uint64_t off, uint64_t len, uint32_t need,
                        const char *what)
{
    if (!d)
        return te_fail(-EINVAL, "%s: remote descriptor is NULL", what);
    if (d->nic_count != pe->remote_nics)
        return te_fail(-EINVAL,
                       "%s: descriptor has %u NIC entries but peer %u has %u "
                       "NICs (descriptor of another group?)", what,
                       d->nic_count, pe->id, pe->remote_nics);
    if (!range_ok(off, len, d->len))
        return te_fail(-ERANGE,
                       "%s: remote range +%" PRIu64 " len %" PRIu64
                       " exceeds remote region of %" PRIu64 " bytes", what,
                       off, len, d->len);
    if (need && !(d->access & need))
        return te_fail(-EACCES, "%s: remote region is not registered for "
                       "remote %s", what,
                       need == TE_MR_REMOTE_WRITE ? "write" : "read");
    return 0;
}

/* Everything one request needs, sized before the single allocation. */
struct req_layout {
    uint32_t ncursors, ndescs;
    size_t extra; /* copied arrays / message */
};

TE_HOT
static int validate(te_engine *e, struct te_group *g, const te_request *r,
                    uint32_t k, struct req_layout *lay)
{
    const char *what = op_name(r->op);
    struct te_peer_entry *pe = NULL; /* set by check_peer before any use */
    int rc;
    memset(lay, 0, sizeof(*lay));
    switch (r->op) {
    case TE_OP_WRITE:
    case TE_OP_READ:
        if ((rc = check_peer(g, r->u.xfer.peer, what, &pe)))
            return rc;
        if ((rc = check_local(g, r->u.xfer.local, r->u.xfer.local_off,
                              r->u.xfer.len, what)))
            return rc;
        if ((rc = check_remote(pe, r->u.xfer.remote, r->u.xfer.remote_off,
                               r->u.xfer.len,
                               r->op == TE_OP_WRITE ? TE_MR_REMOTE_WRITE
                                                    : TE_MR_REMOTE_READ,
                               what)))
            return rc;
        if (r->op == TE_OP_READ && (r->flags & TE_F_IMM))
            return te_fail(-EINVAL, "read: TE_F_IMM is not supported on reads");
        lay->ncursors = k; /* the cursors hold the remote addresses and keys */
        return 0;
    case TE_OP_PAGED: {
        const typeof(r->u.paged) *p = &r->u.paged;
        if ((rc = check_peer(g, p->peer, what, &pe)))
            return rc;
        if (p->count && (!p->src_idx || !p->dst_idx))
            return te_fail(-EINVAL, "paged write: src_idx/dst_idx is NULL");
        if ((rc = check_local(g, p->src, 0, 0, what)))
            return rc;
        if ((rc = check_remote(pe, p->dst, 0, 0, TE_MR_REMOTE_WRITE, what)))
            return rc;
        for (uint32_t j = 0; j < p->count; j++) {
            unsigned __int128 so = (unsigned __int128)p->src_stride * p->src_idx[j] + p->src_off;
            unsigned __int128 dof = (unsigned __int128)p->dst_stride * p->dst_idx[j] + p->dst_off;
            if (so + p->page_len > p->src->len)
                return te_fail(-ERANGE,
                               "paged write: page %u (src index %u) ends past "
                               "the source registration of %zu bytes", j,
                               p->src_idx[j], p->src->len);
            if (dof + p->page_len > p->dst->len)
                return te_fail(-ERANGE,
                               "paged write: page %u (dst index %u) ends past "
                               "the remote region of %" PRIu64 " bytes", j,
                               p->dst_idx[j], p->dst->len);
        }
        lay->ncursors = k;
        lay->ndescs = 1;
        lay->extra = (size_t)p->count * 2 * sizeof(uint32_t);
        return 0;
    }
    case TE_OP_SCATTER: {
        const typeof(r->u.scatter) *s = &r->u.scatter;
        if (s->count && !s->dsts)
            return te_fail(-EINVAL, "scatter: dsts is NULL");
        if (s->split != TE_SCATTER_BY_PEER && s->split != TE_SCATTER_BY_BYTES)
            return te_fail(-EINVAL, "scatter: unknown split %u", s->split);
        if ((rc = check_local(g, s->src, 0, 0, what)))
            return rc;
        for (uint32_t i = 0; i < s->count; i++) {
            const te_scatter_dst *d = &s->dsts[i];
            if ((rc = te_scatter_dst_check(d, i, what)))
                return rc;
            if ((rc = check_peer(g, d->peer, what, &pe)))
                return rc;
            if ((rc = check_local(g, s->src, d->src_off, d->len, what)))
                return rc;
            if ((rc = check_remote(pe, d->dst, d->dst_off, d->len,
                                   TE_MR_REMOTE_WRITE, what)))
                return rc;
        }
        lay->ncursors = s->split == TE_SCATTER_BY_BYTES ? s->count * k
                                                         : s->count;
        return 0;
    }
    case TE_OP_BARRIER: {
        const typeof(r->u.barrier) *b = &r->u.barrier;
        if (b->count && !b->dsts)
            return te_fail(-EINVAL, "barrier: dsts is NULL");
        for (uint32_t i = 0; i < b->count; i++) {
            if ((rc = te_barrier_dst_check(&b->dsts[i], i, what)))
                return rc;
            if ((rc = check_peer(g, b->dsts[i].peer, what, &pe)))
                return rc;
            if (b->dsts[i].dst &&
                (rc = check_remote(pe, b->dsts[i].dst, 0, 0, 0, what)))
                return rc;
        }
        lay->ncursors = b->count;
        return 0;
    }
    case TE_OP_SEND:
        if ((rc = check_peer(g, r->u.send.peer, what, &pe)))
            return rc;
        if (r->u.send.len > e->s.max_msg_size)
            return te_fail(-EMSGSIZE,
                           "send: message of %u bytes exceeds "
                           "engine.max_msg_size %u", r->u.send.len,
                           e->s.max_msg_size);
        if (r->u.send.len && !r->u.send.buf)
            return te_fail(-EINVAL, "send: buf is NULL");
        if (r->flags & TE_F_IMM)
            return te_fail(-EINVAL, "send: TE_F_IMM is not supported on sends");
        lay->ncursors = 1;
        lay->extra = r->u.send.len;
        return 0;
    default:
        return te_fail(-EINVAL, "unknown request op %u", r->op);
    }
}

/* The cursor keeps the peer's slot and the handle submitted: if the peer
 * is removed (and its slot reused) before the worker takes the request,
 * the worker sees the handle no longer matches and fails the request
 * (post.c fail_if_peer_gone); it never dereferences a missing entry. */
TE_HOT
static void init_single(struct te_cursor *c, struct te_req *q, uint32_t kind,
                        uint32_t nic, te_peer peer, te_mr *lmr,
                        uint8_t *laddr, uint64_t len, const te_mr_desc *d,
                        uint64_t roff)
{
    struct te_peer_entry *pe = &q->g->peers[peer & TE_PEER_SLOT_MASK];
    /* Every field stored explicitly, no memset: for the 120-byte cursor
     * GCC emits `rep stos`, whose start-up cost was a third of te_submit()
     * for a 56-destination scatter (perf). No padding: all fields set. */
    uint32_t rn = te_shard_remote_nic(nic, pe->remote_nics);
    int imm = kind == TE_POP_WRITE && (q->r.flags & TE_F_IMM);
    c->next = NULL;
    c->req = q;
    c->kind = kind;
    c->flags = imm ? TE_POP_F_IMM : 0;
    c->imm = imm ? q->r.imm : 0;
    c->nic = nic;
    c->remaining = 1;
    c->inflight = 0;
    c->index = 0;
    c->step = 0;
    c->paged = 0;
    c->remote_nic = rn;
    c->lmr = lmr;
    c->rdesc = NULL;
    c->pp = pe->pp[nic];
    c->peer = pe;
    c->peer_id = peer;
    c->local_addr = laddr;
    c->len = len;
    c->remote_addr = d ? d->nic[rn].remote_base + roff : 0;
    c->rkey = d ? d->nic[rn].rkey : 0;
}

/* Split one contiguous transfer into k shard cursors starting at cur. */
TE_HOT
static uint32_t shard_cursors(struct te_req *q, struct te_cursor *cur,
                              uint32_t kind, uint32_t first, uint32_t k,
                              te_peer peer, te_mr *lmr,
                              uint64_t loff, const te_mr_desc *d,
                              uint64_t roff, uint64_t len)
{
    /* Weights are those of the NICs the shards go on (first..first+k-1);
     * a request pinned to one NIC (k = 1) needs none. */
    struct te_group *g = q->g;
    const uint64_t *w = k > 1 && g->shard_weights ? g->shard_weights + first
                                                  : NULL;
    for (uint32_t i = 0; i < k; i++) {
        uint64_t soff = 0, slen = len; /* k = 1: the whole (latency path) */
        if (k > 1)
            te_shard_range_weighted(len, w, k, i, &soff, &slen);
        init_single(&cur[i], q, kind, first + i, peer, lmr,
                    lmr->addr + loff + soff, slen, d, roff + soff);
    }
    return k;
}

/* Runs inside te_submit(): r is the caller's request, whose descriptors
 * and arrays are still valid; only PAGED keeps (copies of) them. */
TE_HOT
static void expand(te_engine *e, struct te_group *g, struct te_req *q,
                   const te_request *r, uint32_t first, uint32_t k)
{
    struct te_cursor *c = q->cursors;
    uint32_t n = 0;
    switch (r->op) {
    case TE_OP_WRITE:
    case TE_OP_READ:
        n = shard_cursors(q, c, r->op == TE_OP_WRITE ? TE_POP_WRITE
                                                      : TE_POP_READ,
                          first, k, r->u.xfer.peer,
                          r->u.xfer.local, r->u.xfer.local_off, r->u.xfer.remote,
                          r->u.xfer.remote_off, r->u.xfer.len);
        break;
    case TE_OP_PAGED: {
        for (uint32_t i = 0; i < k; i++) {
            init_single(&c[i], q, TE_POP_WRITE, first + i, r->u.paged.peer,
                        r->u.paged.src, NULL, r->u.paged.page_len,
                        &q->descs[0], 0);
            c[i].paged = 1;
            c[i].rdesc = &q->descs[0];
            if (k > 1 && g->shard_weights) {
                /* NICs of different speeds: a block of pages each, in
                 * proportion to the speeds (docs/sharding.md). */
                te_shard_pages_weighted(r->u.paged.count,
                                        g->shard_weights + first, k, i,
                                        &c[i].index, &c[i].remaining);
                c[i].step = 1;
            } else {
                c[i].index = i;
                c[i].step = k;
                c[i].remaining = r->u.paged.count > i
                                     ? (r->u.paged.count - i + k - 1) / k : 0;
            }
        }
        n = k;
        break;
    }
    case TE_OP_SCATTER: {
        const te_scatter_dst *d = r->u.scatter.dsts;
        for (uint32_t i = 0; i < r->u.scatter.count; i++) {
            if (r->u.scatter.split == TE_SCATTER_BY_BYTES) {
                n += shard_cursors(q, c + n, TE_POP_WRITE, first, k, d[i].peer,
                                   r->u.scatter.src, d[i].src_off,
                                   d[i].dst, d[i].dst_off, d[i].len);
            } else {
                init_single(&c[n++], q, TE_POP_WRITE, first + i % k,
                            d[i].peer, r->u.scatter.src,
                            r->u.scatter.src->addr + d[i].src_off, d[i].len,
                            d[i].dst, d[i].dst_off);
            }
        }
        break;
    }
    case TE_OP_BARRIER: {
        const te_barrier_dst *d = r->u.barrier.dsts;
        for (uint32_t i = 0; i < r->u.barrier.count; i++) {
            init_single(&c[n], q, TE_POP_WRITE, first + i % k, d[i].peer,
                        NULL, NULL,
                        0, d[i].dst, 0);
            c[n].flags = TE_POP_F_IMM;
            c[n].imm = r->imm;
            n++;
        }
        break;
    }
    case TE_OP_SEND:
        init_single(&c[0], q, TE_POP_SEND, first,
                    r->u.send.peer, NULL,
                    (uint8_t *)q->extra, r->u.send.len, NULL, 0);
        n = 1;
        break;
    }
    q->ncursors = n;
    q->ops_total = 0;
    for (uint32_t i = 0; i < n; i++)
        q->ops_total += c[i].remaining;
    (void)e;
}

/* The local registration a request reads from or writes into (NULL for
 * barriers and sends, or when the caller left it out: validate says so). */
static te_mr *local_mr(const te_request *r)
{
    switch (r->op) {
    case TE_OP_WRITE:
    case TE_OP_READ:
        return r->u.xfer.local;
    case TE_OP_PAGED:
        return r->u.paged.src;
    case TE_OP_SCATTER:
        return r->u.scatter.src;
    default:
        return NULL;
    }
}

TE_HOT
void te_req_free(struct te_req *q)
{
    for (int i = 0; i < 2; i++)
        if (q->mrs[i])
            te_mr_unhold(q->mrs[i]);
    if (!te_req_pool_put(&q->g->e->req_pool, q))
        free(q);
}

TE_HOT
TE_API int64_t te_submit(te_engine *e, const te_request *r)
{
    te_error_clear();
    if (!e || !r)
        return te_fail(-EINVAL, "te_submit: engine or request is NULL");
    te_request tmp;
    int vrc = te_request_view(r, &tmp, &r, "te_submit");
    if (vrc)
        return vrc;
    if (atomic_load_explicit(&e->stopping, memory_order_relaxed))
        return te_fail(-ESHUTDOWN, "te_submit: engine is being destroyed");
    if (r->group < 0 || (uint32_t)r->group >= e->ngroups)
        return te_fail(-EINVAL, "te_submit: group %d out of range (engine has "
                       "%u)", r->group, e->ngroups);
    struct te_group *g = &e->groups[r->group];
    uint32_t first, k;
    if (te_route_check(&r->route, op_name(r->op)))
        return -EINVAL;
    if (te_shard_nics(&r->route, g->nic_count, &first, &k))
        return te_fail(-EINVAL, "%s: route names NIC %u but group %d has %u "
                       "NICs", op_name(r->op), r->route.nic, g->index,
                       g->nic_count);
    if (te_shard_keep_whole(r, e->s.shard_min_bytes, k)) {
        /* Whole on one NIC, rotating so that small requests still use
         * every NIC of the route. */
        first += atomic_fetch_add_explicit(&g->whole_rr, 1,
                                           memory_order_relaxed) % k;
        k = 1;
    }
    /* Held before anything of it is read, so that te_mr_dereg/revoke on
     * another thread either sees this request or makes it fail here. */
    te_mr *local = local_mr(r);
    int rc = local ? te_mr_hold(local, op_name(r->op)) : 0;
    if (rc)
        return rc;
    struct req_layout lay;
    if ((rc = validate(e, g, r, k, &lay))) {
        if (local)
            te_mr_unhold(local);
        return rc;
    }

    size_t size = sizeof(struct te_req) +
                  (size_t)lay.ncursors * sizeof(struct te_cursor) +
                  (size_t)lay.ndescs * sizeof(te_mr_desc) + lay.extra;
    /* Not calloc: every cursor is initialised by expand(), the rest is
     * copied; zeroing kilobytes per scatter showed in the posting time. */
    struct te_req *q = te_req_pool_get(&e->req_pool, size);
    if (!q)
        q = malloc(size);
    if (!q) {
        if (local)
            te_mr_unhold(local);
        return te_fail(-ENOMEM, "%s: cannot allocate %zu bytes",
                       op_name(r->op), size);
    }
    memset(q, 0, sizeof(*q));
    q->mrs[0] = local; /* the hold is the request's: te_req_free drops it */
    q->r = *r;
    q->g = g;
    q->cursors = (struct te_cursor *)(q + 1);
    q->descs = (te_mr_desc *)(q->cursors + lay.ncursors);
    q->ndescs = lay.ndescs;
    q->extra = q->descs + lay.ndescs;
    switch (r->op) {
    case TE_OP_WRITE:
    case TE_OP_READ:
        q->r.u.xfer.remote = NULL; /* in the cursors; not kept */
        break;
    case TE_OP_PAGED: {
        uint32_t *idx = q->extra;
        /* count 0 may come with NULL arrays: memcpy(.., NULL, 0) is UB. */
        if (r->u.paged.count) {
            memcpy(idx, r->u.paged.src_idx, r->u.paged.count * sizeof(uint32_t));
            memcpy(idx + r->u.paged.count, r->u.paged.dst_idx,
                   r->u.paged.count * sizeof(uint32_t));
        }
        q->r.u.paged.src_idx = idx;
        q->r.u.paged.dst_idx = idx + r->u.paged.count;
        /* Pages are generated on the worker: keep the descriptor, but
         * only its used NIC entries (validated: nic_count <= TE_MAX_NICS). */
        memcpy(&q->descs[0], r->u.paged.dst,
               offsetof(te_mr_desc, nic) +
                   r->u.paged.dst->nic_count * sizeof(r->u.paged.dst->nic[0]));
        q->r.u.paged.dst = &q->descs[0];
        break;
    }
    case TE_OP_SCATTER:
        /* Destinations live on in the cursors only (expand below). */
        q->r.u.scatter.dsts = NULL;
        break;
    case TE_OP_BARRIER:
        q->r.u.barrier.dsts = NULL;
        break;
    case TE_OP_SEND:
        if (r->u.send.len)
            memcpy(q->extra, r->u.send.buf, r->u.send.len);
        q->r.u.send.buf = q->extra;
        break;
    }
    expand(e, g, q, r, first, k);
    q->id = atomic_fetch_add_explicit(&e->next_req_id, 1,
                                      memory_order_relaxed);
    int64_t id = q->id;
    if (!atomic_load_explicit(&e->stopping, memory_order_acquire) &&
        pthread_mutex_trylock(&g->progress_lock) == 0) {
        /* No thread in the group's turn (caller mode), or the worker is
         * between turns or blocked: post it now, behind what waits in the
         * queue, without passing through the queue and without waiting
         * for a sleeping worker to wake (one thread wake-up off the
         * latency of a request to an idle engine; its cells are cache
         * lines a sleeping caller finds cold). Callbacks still run where
         * they run (te_progress, or the callback thread); the worker is
         * rung below to take over the request's completion. */
        te_worker_post_now(e, g, g->turn, q);
        pthread_mutex_unlock(&g->progress_lock);
    } else if (te_mpsc_push(g->subq, q) != 0) {
        /* (Otherwise the thread in the turn, or the worker, takes it.) */
        te_req_free(q);
        return te_fail(-EAGAIN, "%s: submission queue of group %d is full "
                       "(engine.submit_queue_depth = %u); retry later",
                       op_name(r->op), g->index, e->s.submit_queue_depth);
    }
    te_group_wake(g);
    return id;
}

TE_API int64_t te_expected_imms(te_engine *e, const te_request *r,
                                uint32_t target)
{
    te_error_clear();
    if (!e || !r)
        return te_fail(-EINVAL, "te_expected_imms: engine or request is NULL");
    te_request tmp;
    int vrc = te_request_view(r, &tmp, &r, "te_expected_imms");
    if (vrc)
        return vrc;
    if (te_route_check(&r->route, "te_expected_imms"))
        return -EINVAL;
    if (r->group < 0 || (uint32_t)r->group >= e->ngroups)
        return te_fail(-EINVAL, "te_expected_imms: group %d out of range",
                       r->group);
    int64_t n = te_shard_expected_imms(r, e->groups[r->group].nic_count,
                                       e->s.shard_min_bytes, target);
    if (n < 0)
        return te_fail((int)n, "te_expected_imms: bad route or target %u",
                       target);
    return n;
}
