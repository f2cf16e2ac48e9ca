/*
 * The decoder side of te-kv. One service thread runs every state change;
 * the engine's callbacks (messages, ImmCounter) only queue events, so a
 * slow user callback never stalls the network and fencing (te_mr_revoke,
 * which blocks until nothing can land) runs off the engine's threads.
 *
 * Request life: SENT (REQUEST sent, waiting for ACCEPT) -> ARMED (expecting
 * the ACCEPTed count on the request's immediate) -> DONE (every write
 * landed; pages USED until te_kv_decoder_release). CANCEL from SENT or
 * ARMED -> CANCELLING (pages FENCING) -> CANCELLED from the prefiller: pages
 * FREE, cb(-ECANCELED). Any deadline passing, a REJECT, or the prefiller's
 * peer going down -> the prefiller is fenced: its registration of the pool
 * is revoked (te_mr_revoke returns only when no write with the old key can
 * land), every request of it fails, their pages go back. An engine cache
 * of several allocations has one registration per allocation per
 * prefiller: a fence revokes every one of them before any page goes back.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "kv_internal.h"

#define MAX_PREFILLERS 64
/* Deadline of our messages, explicit: engine.request_timeout_ms may be 0
 * (none), and free() must be able to wait them out. */
#define SEND_TIMEOUT_MS 30000

enum rstate { R_FREE = 0, R_SENT, R_ARMED, R_DONE, R_CANCELLING };

/* Immediate values per request slot, used in turn: a slot's next request
 * gets the next one, so an ImmCounter callback of an earlier request of
 * the slot that is still queued on the engine's callback thread (e.g. a
 * request whose count was met just as it was cancelled) finds no request
 * with its value instead of completing the slot's new request. Found by
 * kvcache_soak_faults (a completed request whose pages still held the
 * poison). */
#define IMMS_PER_SLOT 16u

struct kv_req {
    enum rstate state;
    uint64_t id;
    uint32_t pf;
    uint32_t imm;
    uint32_t uses;          /* requests this slot has carried */
    int quarantined;        /* its hidden slot may still be written: unused */
    uint32_t npages;
    uint32_t *pages;
    uint64_t deadline_ns;   /* whole request */
    uint64_t phase_ns;      /* accept / cancel confirmation */
    te_kv_done_fn cb;
    void *arg;
};

struct prefiller {
    int live;
    int quarantined;        /* a revoke failed: old keys may still work */
    te_peer peer;
    te_mr **mr;             /* per allocation (d->nallocs), registered for
                               this prefiller */
    te_mr_desc *desc;       /* their descriptors */
};

enum ev_kind { EV_MSG = 1, EV_IMM = 2, EV_SEND_FAILED = 3 };

struct ev {
    struct ev *next;
    enum ev_kind kind;
    te_peer from;
    uint32_t imm;
    uint32_t pf;            /* EV_SEND_FAILED: the prefiller */
    int status;
    te_kv_msg *m;
    char why[160];          /* EV_SEND_FAILED */
};

struct te_kv_decoder {
    te_engine *e;
    uint64_t token; /* names us in every message (HELLO introduces it) */
    te_kv_decoder_opts o;
    uint64_t page_bytes, layer_stride, hidden_bytes, region;
    uint8_t *mem;           /* the pool's memory (NULL for a cache) */
    te_kv_cache *cache;     /* the engine's cache (te_kv_decoder_new_cache) */
    const te_kv_alloc *allocs; /* what is registered per prefiller: the
                                  pool, or the cache's allocations */
    uint32_t nallocs;
    te_kv_alloc pool_alloc; /* the pool as allocs[0] */
    te_kv_layer_fn layer_fn; /* per-layer arrival (te_kv_decoder_on_layer) */
    void *layer_arg;
    te_kv_pool *pool;
    te_imm_space *space;
    struct prefiller pf[MAX_PREFILLERS];
    uint32_t npf;
    struct kv_req *req;     /* max_requests slots; slot i uses imm value i */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct ev *head, *tail;
    int stopping;
    pthread_t thread;
    uint64_t late_writes;   /* poison_freed: free memory found written */
    atomic_int sends;       /* messages whose completion has not run yet */
    atomic_int imm_cbs;     /* expectations whose on_imm may still run */
};

/* ------------------------------------------------------------- events */

static void push(te_kv_decoder *d, struct ev *v)
{
    v->next = NULL;
    pthread_mutex_lock(&d->lock);
    if (d->tail)
        d->tail->next = v;
    else
        d->head = v;
    d->tail = v;
    pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->lock);
}

static void on_msg(int group, te_peer from, const void *data, size_t len,
                   void *arg)
{
    te_kv_decoder *d = arg;
    (void)group;
    struct ev *v = calloc(1, sizeof(*v));
    te_kv_msg *m = malloc(sizeof(*m));
    if (!v || !m || te_kv_msg_parse(data, len, m)) {
        if (v && m)
            te_log_printf(TE_LOG_WARN, "te-kv",
                    "decoder: dropped a message from peer %u: "
                    "%s", from, te_kv_last_error());
        free(v);
        free(m);
        return;
    }
    v->kind = EV_MSG;
    v->from = from;
    v->m = m;
    push(d, v);
}

static struct kv_req *by_imm(te_kv_decoder *d, uint32_t imm);

static void on_imm(uint32_t imm, int status, void *arg)
{
    te_kv_decoder *d = arg;
    if (status == 0) {
        /* The count is met: every write landed. Tell the user from this
         * (the engine's callback) thread rather than waking the service
         * thread first: one thread hop less between the last write and
         * the notification. Nothing here blocks; failures (which fence
         * with te_mr_revoke(), a blocking call) still go to the service
         * thread. An ARMED request's ACCEPT was handled already (arming
         * happens there), so no queued event can precede this one. */
        pthread_mutex_lock(&d->lock);
        struct kv_req *q = by_imm(d, imm);
        if (q && q->state == R_ARMED) {
            q->state = R_DONE; /* pages stay USED until released */
            te_kv_done_fn cb = q->cb;
            void *cb_arg = q->arg;
            uint64_t id = q->id;
            pthread_mutex_unlock(&d->lock);
            if (cb)
                cb(id, 0, "", cb_arg);
            atomic_fetch_sub(&d->imm_cbs, 1);
            return;
        }
        pthread_mutex_unlock(&d->lock);
        atomic_fetch_sub(&d->imm_cbs, 1);
        return; /* cancelled meanwhile: the cancel path ends it */
    }
    struct ev *v = calloc(1, sizeof(*v));
    if (!v) {
        /* check_deadlines() still fails it at the request's deadline. */
        te_log_printf(TE_LOG_ERROR, "te-kv",
                "decoder: imm %u ended (%s) with no memory to "
                "queue it", imm, te_strerror(status));
    } else {
        v->kind = EV_IMM;
        v->imm = imm;
        v->status = status;
        push(d, v);
    }
    atomic_fetch_sub(&d->imm_cbs, 1); /* d is not touched after this */
}

/* Take q's expectation away, if armed: its on_imm then never runs. One met
 * or timed out just before still runs (imm_cbs keeps counting it). */
static void disarm(te_kv_decoder *d, struct kv_req *q)
{
    if (te_imm_disarm(d->e, q->imm, NULL) == 1)
        atomic_fetch_sub(&d->imm_cbs, 1);
}

/* ---------------------------------------------------------- helpers */

/* A message that did not reach its prefiller (completion with an error):
 * a lost REQUEST leaves us waiting for an ACCEPT that never comes, a lost
 * CANCEL for a CANCELLED, a lost HELLO makes it drop all we send. Fence it
 * now rather than at those deadlines. Every message has this callback, so
 * completions never go to the engine-wide queue, which nothing here reads
 * (it would grow without bound and mix into other users' completions). */
static void on_send_done(const te_completion *c, void *arg)
{
    te_kv_decoder *d = arg;
    if (c->status) {
        struct ev *v = calloc(1, sizeof(*v));
        if (v) {
            v->kind = EV_SEND_FAILED;
            v->pf = (uint32_t)c->user_data;
            v->status = c->status;
            snprintf(v->why, sizeof(v->why), "a message to it failed: %s",
                     c->reason);
            push(d, v);
        } else {
            /* The deadlines (accept, cancel, request) still fence it. */
            te_log_printf(TE_LOG_ERROR, "te-kv",
                    "decoder: message to prefiller %u failed "
                    "(%s) and no memory to handle it now",
                    (uint32_t)c->user_data, c->reason);
        }
    }
    atomic_fetch_sub(&d->sends, 1);
}

static int send_to(te_kv_decoder *d, te_peer peer, uint32_t pf,
                   const te_kv_msg *m)
{
    static __thread uint8_t buf[TE_KV_MSG_MAX];
    ((te_kv_msg *)m)->sender = d->token;
    int n = te_kv_msg_encode(m, buf, sizeof(buf));
    if (n < 0)
        return n;
    te_request r;
    te_request_init(&r, TE_OP_SEND);
    r.group = d->o.group;
    r.timeout_ms = SEND_TIMEOUT_MS;
    r.user_data = pf;
    r.done = on_send_done;
    r.done_arg = d;
    r.u.send.peer = peer;
    r.u.send.buf = buf;
    r.u.send.len = (uint32_t)n;
    atomic_fetch_add(&d->sends, 1);
    for (int i = 0; i < 2000; i++) {
        int64_t id = te_submit(d->e, &r);
        if (id > 0)
            return 0;
        if (id != -EAGAIN) {
            atomic_fetch_sub(&d->sends, 1);
            return kv_fail((int)id, "send to prefiller %u: %s", pf,
                           te_last_error());
        }
        usleep(100);
    }
    atomic_fetch_sub(&d->sends, 1);
    return kv_fail(-EAGAIN, "send to prefiller %u: queue full", pf);
}

static int send_msg(te_kv_decoder *d, uint32_t pf, const te_kv_msg *m)
{
    pthread_mutex_lock(&d->lock);
    te_peer peer = d->pf[pf].peer;
    pthread_mutex_unlock(&d->lock);
    return send_to(d, peer, pf, m);
}

static struct kv_req *find(te_kv_decoder *d, uint64_t id)
{
    for (uint32_t i = 0; i < d->o.max_requests; i++)
        if (d->req[i].state != R_FREE && d->req[i].id == id)
            return &d->req[i];
    return NULL;
}

static struct kv_req *by_imm(te_kv_decoder *d, uint32_t imm)
{
    for (uint32_t i = 0; i < d->o.max_requests; i++)
        if (d->req[i].state != R_FREE && d->req[i].imm == imm)
            return &d->req[i];
    return NULL;
}

/* Where request slot q's hidden state lands (after the page area). */
static uint64_t hidden_offset(const te_kv_decoder *d, const struct kv_req *q)
{
    return d->o.shape.layers * d->layer_stride +
           (uint64_t)(q - d->req) * d->hidden_bytes;
}

/* Poisoning (opts.poison_freed): the request's pages in every layer and
 * its hidden slot get TE_KV_POISON as they return to the pool... */
static void poison_request(te_kv_decoder *d, const struct kv_req *q)
{
    if (!d->o.poison_freed)
        return;
    for (uint32_t l = 0; l < d->o.shape.layers; l++)
        for (uint32_t k = 0; k < q->npages; k++)
            memset(d->mem + l * d->layer_stride +
                   (uint64_t)q->pages[k] * d->page_bytes, TE_KV_POISON,
                   d->page_bytes);
    memset(d->mem + hidden_offset(d, q), TE_KV_POISON, d->hidden_bytes);
}

static int still_poison(const uint8_t *b, uint64_t len)
{
    for (uint64_t i = 0; i < len; i++)
        if (b[i] != TE_KV_POISON)
            return 0;
    return 1;
}

/* ... and must still hold only that byte when handed out again: anything
 * else is a write that landed after the proof said none could. */
static void count_late_writes(te_kv_decoder *d, const struct kv_req *q)
{
    if (!d->o.poison_freed)
        return;
    for (uint32_t l = 0; l < d->o.shape.layers; l++)
        for (uint32_t k = 0; k < q->npages; k++)
            d->late_writes += !still_poison(
                d->mem + l * d->layer_stride +
                    (uint64_t)q->pages[k] * d->page_bytes, d->page_bytes);
    d->late_writes += !still_poison(d->mem + hidden_offset(d, q),
                                    d->hidden_bytes);
}

/* End a request and tell the user. Its pages go back to the pool only when
 * `safe` (no write to them can land any more); otherwise they stay FENCING
 * for good: quarantined, never handed out again. Called with the lock
 * held; drops it around the callback. */
static void end_req(te_kv_decoder *d, struct kv_req *q, int status,
                    const char *why, int safe)
{
    if (q->state != R_CANCELLING)
        te_kv_pool_fence(d->pool, q->npages, q->pages);
    if (safe) {
        poison_request(d, q);
        te_kv_pool_release(d->pool, q->npages, q->pages);
    } else {
        q->quarantined = 1;
    }
    disarm(d, q); /* and drop partial arrivals of this life */
    te_kv_done_fn cb = q->cb;
    void *arg = q->arg;
    uint64_t id = q->id;
    q->state = R_FREE;
    pthread_mutex_unlock(&d->lock);
    if (cb)
        cb(id, status, why, arg);
    pthread_mutex_lock(&d->lock);
}

/* End a request whose writes can no longer land. */
static void finish(te_kv_decoder *d, struct kv_req *q, int status,
                   const char *why)
{
    end_req(d, q, status, why, 1);
}

/* The prefiller is dead, silent or misbehaving: revoke its keys (returns
 * when nothing with them can land), then fail each of its requests. Lock
 * held; dropped around the revocation. If the revocation fails, its old
 * keys may still work: a late write could land in any page it was ever
 * given, so its requests' pages are never reused. */
static void fence_prefiller(te_kv_decoder *d, uint32_t pf, int status,
                            const char *why)
{
    struct prefiller *p = &d->pf[pf];
    if (!p->live)
        return;
    p->live = 0;
    for (uint32_t i = 0; i < d->o.max_requests; i++) {
        struct kv_req *q = &d->req[i];
        if (q->state != R_FREE && q->pf == pf && q->state != R_DONE &&
            q->state != R_CANCELLING) {
            te_kv_pool_fence(d->pool, q->npages, q->pages);
            q->state = R_CANCELLING;
        }
    }
    pthread_mutex_unlock(&d->lock);
    /* Every allocation's registration: a write through any old key could
     * land in a page about to be handed back. The fresh descriptors are
     * kept but never sent (a fenced prefiller stays dead). */
    int rc = 0;
    for (uint32_t a = 0; a < d->nallocs; a++) {
        int r = te_mr_revoke(d->e, p->mr[a], &p->desc[a]);
        rc = rc ? rc : r;
    }
    char msg[400];
    if (rc) {
        snprintf(msg, sizeof(msg), "prefiller %u fenced (%s) but revoking "
                 "its keys failed (%s): its requests' pages are quarantined "
                 "(never reused)", pf, why, te_last_error());
        te_log_printf(TE_LOG_ERROR, "te-kv", "decoder: %s", msg);
    } else {
        snprintf(msg, sizeof(msg), "prefiller %u fenced (%s): its keys "
                 "revoked, no write can land", pf, why);
    }
    pthread_mutex_lock(&d->lock);
    if (rc)
        p->quarantined = 1;
    for (uint32_t i = 0; i < d->o.max_requests; i++) {
        struct kv_req *q = &d->req[i];
        if (q->state == R_CANCELLING && q->pf == pf)
            end_req(d, q, status, msg, rc == 0);
    }
}

/* A source's LAYER note: the layer's bytes are in the engine's pages.
 * One for a request that ended meanwhile (released, failed) is dropped:
 * completion already said every layer landed. Lock held; dropped around
 * the callback. */
static void handle_layer(te_kv_decoder *d, struct kv_req *q,
                         const te_kv_msg *m)
{
    te_kv_layer_fn fn = d->layer_fn;
    void *arg = d->layer_arg;
    if (!q || !fn || (q->state != R_ARMED && q->state != R_DONE) ||
        m->status >= d->o.shape.layers)
        return;
    pthread_mutex_unlock(&d->lock);
    fn(m->request_id, m->status, arg);
    pthread_mutex_lock(&d->lock);
}

static void handle_msg(te_kv_decoder *d, te_peer from, const te_kv_msg *m)
{
    struct kv_req *q = find(d, m->request_id);
    (void)from; /* request ids are unique among our requests in flight */
    if (m->type == TE_KV_MSG_LAYER) {
        handle_layer(d, q, m);
        return;
    }
    if (!q) {
        te_log_printf(TE_LOG_WARN, "te-kv",
                "decoder: message type %u for unknown request "
                "%" PRIu64 ": ignored", m->type, m->request_id);
        return;
    }
    char why[160];
    switch (m->type) {
    case TE_KV_MSG_ACCEPT:
        if (q->state != R_SENT)
            return;
        if (!m->expected_imms) {
            fence_prefiller(d, q->pf, -EPROTO, "accepted with 0 immediates");
            return;
        }
        uint64_t now = kv_now_ns();
        if (now >= q->deadline_ns) {
            /* The ACCEPT came after the request's deadline: its writes
             * may be under way, so fence rather than just fail. */
            fence_prefiller(d, q->pf, -ETIMEDOUT, "ACCEPT after the "
                            "request's deadline");
            return;
        }
        uint64_t left_ms = (q->deadline_ns - now) / 1000000;
        int left = left_ms > INT32_MAX ? INT32_MAX : (int)left_ms;
        atomic_fetch_add(&d->imm_cbs, 1);
        int rc = te_imm_expect_timeout(d->e, q->imm, m->expected_imms,
                                       left > 1 ? left : 1, on_imm, d);
        if (rc) {
            atomic_fetch_sub(&d->imm_cbs, 1);
            snprintf(why, sizeof(why), "arming imm %u: %s", q->imm,
                     te_last_error());
            fence_prefiller(d, q->pf, rc, why);
            return;
        }
        q->state = R_ARMED;
        return;
    case TE_KV_MSG_REJECT:
        /* Nothing was written: the prefiller refused before any write. */
        /* The REJECT carries only an errno; EINVAL is the prefiller's
         * shape check (its log names the field), the usual user error. */
        snprintf(why, sizeof(why), "rejected by prefiller %u: %s%s", q->pf,
                 strerror((int)m->status), m->status == EINVAL ?
                 " (the request does not fit its model: layers, page size "
                 "or pages per token differ; its log names which)" : "");
        if (q->state == R_SENT)
            finish(d, q, -(int)(m->status ? m->status : EPROTO), why);
        return;
    case TE_KV_MSG_CANCELLED:
        if (q->state != R_CANCELLING)
            return;
        if (m->status == ENOENT) {
            /* The prefiller did not have it: finished or never started.
             * Its writes, if any, all completed before that answer. */
        }
        finish(d, q, -ECANCELED, "cancelled; the prefiller confirmed that no "
               "write can land");
        return;
    default:
        return;
    }
}

static void handle_imm(te_kv_decoder *d, uint32_t imm, int status)
{
    struct kv_req *q = by_imm(d, imm);
    if (!q || q->state != R_ARMED)
        return;
    if (status == 0) {
        q->state = R_DONE; /* pages stay USED until released */
        te_kv_done_fn cb = q->cb;
        void *arg = q->arg;
        uint64_t id = q->id;
        pthread_mutex_unlock(&d->lock);
        if (cb)
            cb(id, 0, "", arg);
        pthread_mutex_lock(&d->lock);
        return;
    }
    fence_prefiller(d, q->pf, status, status == -ETIMEDOUT
                    ? "the request's deadline passed before every write "
                      "was counted" : "expectation ended");
}

/* A request with a deadline and a prefiller to watch (sent, armed or
 * cancelling). */
static int watched(const struct kv_req *q)
{
    return q->state == R_SENT || q->state == R_ARMED || q->state == R_CANCELLING;
}

/* A prefiller the engine declared down (transport error, its process
 * exited, silence past engine.peer_timeout_ms) is fenced now rather than
 * at its requests' deadlines: the decoder only receives from it, so no
 * failed write of its own would tell. */
static void check_peers(te_kv_decoder *d)
{
    for (uint32_t pf = 0; pf < d->npf; pf++) {
        if (!d->pf[pf].live)
            continue;
        int busy = 0;
        for (uint32_t i = 0; i < d->o.max_requests && !busy; i++)
            busy = d->req[i].pf == pf && watched(&d->req[i]);
        if (busy && te_peer_status(d->e, d->o.group, d->pf[pf].peer) ==
                        -ECONNRESET)
            fence_prefiller(d, pf, -ECONNRESET,
                            "the engine declared its peer down");
    }
}

/* A prefiller serves its requests one at a time and ACCEPTs a request
 * only when it starts serving it, so a REQUEST queued behind one of ours
 * that it is serving (ARMED) or cancelling cannot be ACCEPTed yet: its
 * ACCEPT clock restarts until that one ends. That one's own deadline
 * bounds the wait (it fences the prefiller). Without this, 8 requests
 * submitted at once to one prefiller of a loaded machine were fenced at
 * the 5 s ACCEPT deadline while the prefiller was working through the
 * queue ahead of them. */
static void hold_queued_accepts(te_kv_decoder *d, uint64_t now)
{
    uint8_t serving[MAX_PREFILLERS] = {0}; /* two passes: linear per turn */
    for (uint32_t i = 0; i < d->o.max_requests; i++)
        if ((d->req[i].state == R_ARMED || d->req[i].state == R_CANCELLING) &&
            d->req[i].pf < MAX_PREFILLERS)
            serving[d->req[i].pf] = 1;
    for (uint32_t k = 0; k < d->o.max_requests; k++)
        if (d->req[k].state == R_SENT && d->req[k].pf < MAX_PREFILLERS &&
            serving[d->req[k].pf])
            d->req[k].phase_ns = now + (uint64_t)d->o.accept_timeout_ms *
                                           1000000ull;
}

static void check_deadlines(te_kv_decoder *d)
{
    check_peers(d);
    uint64_t now = kv_now_ns();
    hold_queued_accepts(d, now);
    for (uint32_t i = 0; i < d->o.max_requests; i++) {
        struct kv_req *q = &d->req[i];
        /* ARMED: the ImmCounter's own deadline normally ends it first;
         * this holds if its event was lost (no memory to queue it). */
        if (q->state == R_ARMED && now > q->deadline_ns)
            fence_prefiller(d, q->pf, -ETIMEDOUT, "the request's deadline "
                            "passed before every write was counted");
        else if ((q->state == R_SENT || q->state == R_CANCELLING) &&
            now > q->phase_ns)
            fence_prefiller(d, q->pf, q->state == R_SENT ? -ETIMEDOUT
                                                         : -ECANCELED,
                            q->state == R_SENT ? "no ACCEPT in time"
                                               : "no CANCELLED in time");
    }
}

/* Whether any request is watched: the service thread then looks every
 * 5 ms. */
static int watching(const te_kv_decoder *d)
{
    for (uint32_t i = 0; i < d->o.max_requests; i++)
        if (watched(&d->req[i]))
            return 1;
    return 0;
}

static void *service(void *arg)
{
    te_kv_decoder *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->stopping || d->head) {
        if (!d->head) {
            /* Idle (no request to watch): once a second, as a safety net;
             * a new request signals d->cond (submit_req). Was 200 looks
             * a second for ever (docs/kvcache.md, "An idle decoder"). */
            long wait_ns = watching(d) ? 5000000L : 1000000000L;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts); /* d->cond's clock */
            ts.tv_nsec += wait_ns;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&d->cond, &d->lock, &ts);
        }
        while (d->head) {
            struct ev *v = d->head;
            d->head = v->next;
            if (!d->head)
                d->tail = NULL;
            if (v->kind == EV_MSG)
                handle_msg(d, v->from, v->m);
            else if (v->kind == EV_SEND_FAILED)
                fence_prefiller(d, v->pf, v->status, v->why);
            else
                handle_imm(d, v->imm, v->status);
            free(v->m);
            free(v);
        }
        check_deadlines(d);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

/* --------------------------------------------------------------- API */

/* The pool's decoder (cache NULL) or the engine cache's. */
static int decoder_make(te_engine *e, const te_kv_decoder_opts *o,
                        te_kv_cache *cache, te_kv_decoder **out)
{
    if (!e || !o || !out || !o->pool_pages || !o->max_requests ||
        o->max_requests > 65536 || !o->shape.layers)
        return kv_fail(-EINVAL, "te_kv_decoder_new: bad arguments");
    te_kv_decoder *d = calloc(1, sizeof(*d));
    if (!d)
        return kv_fail(-ENOMEM, "te_kv_decoder_new: out of memory");
    d->e = e;
    d->o = *o;
    d->cache = cache;
    if (getrandom(&d->token, sizeof(d->token), 0) != sizeof(d->token))
        d->token = kv_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)d;
    if (!d->o.accept_timeout_ms)
        d->o.accept_timeout_ms = 5000;
    if (!d->o.cancel_timeout_ms)
        d->o.cancel_timeout_ms = 5000;
    d->page_bytes = te_kv_page_bytes(&o->shape);
    d->layer_stride = (uint64_t)o->pool_pages * d->page_bytes;
    d->hidden_bytes = (uint64_t)o->shape.hidden * o->shape.elem_bytes;
    d->region = o->shape.layers * d->layer_stride +
                o->max_requests * d->hidden_bytes;
    int rc;
    d->req = calloc(o->max_requests, sizeof(*d->req));
    if (!cache)
        d->mem = aligned_alloc(4096, (d->region + 4095) & ~(uint64_t)4095);
    /* The engine's memory is registered, never written here. */
    d->pool_alloc = (te_kv_alloc){d->mem, d->region};
    d->allocs = cache ? cache->allocs : &d->pool_alloc;
    d->nallocs = cache ? cache->nallocs : 1;
    if (!d->req || (!cache && !d->mem)) {
        rc = kv_fail(-ENOMEM, "te_kv_decoder_new: %" PRIu64 " bytes",
                     d->region);
        goto fail;
    }
    if (!cache)
        memset(d->mem, o->poison_freed ? TE_KV_POISON : 0, d->region);
    for (uint32_t i = 0; i < o->max_requests; i++)
        if (!(d->req[i].pages = calloc(TE_KV_MAX_PAGES, sizeof(uint32_t)))) {
            rc = kv_fail(-ENOMEM, "te_kv_decoder_new: out of memory");
            goto fail;
        }
    if ((rc = te_kv_pool_new(o->pool_pages, &d->pool)))
        goto fail;
    /* The decoder's own immediates: no other subsystem can alias them. */
    if ((rc = te_imm_space_create(e, "te-kv",
                                  o->max_requests * IMMS_PER_SLOT, 0, 0, 0,
                                  &d->space))) {
        rc = kv_fail(rc, "te_kv_decoder_new: immediate space: %s",
                     te_last_error());
        goto fail;
    }
    for (uint32_t i = 0; i < o->max_requests; i++)
        te_imm_space_value(d->space, i * IMMS_PER_SLOT, &d->req[i].imm);
    pthread_mutex_init(&d->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cond, &ca);
    pthread_condattr_destroy(&ca);
    if ((rc = te_set_recv_handler(e, o->group, on_msg, d))) {
        rc = kv_fail(rc, "te_kv_decoder_new: %s", te_last_error());
        goto fail;
    }
    if (pthread_create(&d->thread, NULL, service, d)) {
        te_set_recv_handler(e, o->group, NULL, NULL);
        rc = kv_fail(-EAGAIN, "te_kv_decoder_new: no thread");
        goto fail;
    }
    *out = d;
    return 0;
fail:
    if (d->space)
        te_imm_space_destroy(d->space);
    te_kv_pool_free(d->pool);
    if (d->req)
        for (uint32_t i = 0; i < o->max_requests; i++)
            free(d->req[i].pages);
    free(d->req);
    if (!cache)
        free(d->mem);
    free(d);
    return rc;
}

int te_kv_decoder_new(te_engine *e, const te_kv_decoder_opts *o,
                      te_kv_decoder **out)
{
    kv_clear();
    return decoder_make(e, o, NULL, out);
}

int te_kv_decoder_new_cache(te_engine *e, const te_kv_decoder_opts *o,
                            te_kv_cache *c, te_kv_decoder **out)
{
    kv_clear();
    if (!c || !o)
        return kv_fail(-EINVAL, "te_kv_decoder_new_cache: NULL argument");
    if (o->poison_freed)
        return kv_fail(-EINVAL, "te_kv_decoder_new_cache: poison_freed must "
                       "be 0 (it would write into the engine's cache)");
    const te_kv_shape *a = &o->shape, *b = &c->d.shape;
    const char *field = a->layers != b->layers ? "layers"
        : a->kv_heads != b->kv_heads ? "kv_heads"
        : a->head_dim != b->head_dim ? "head_dim"
        : a->elem_bytes != b->elem_bytes ? "elem_bytes"
        : a->kv_factor != b->kv_factor ? "kv_factor"
        : a->tokens_per_page != b->tokens_per_page ? "tokens_per_page"
        : a->hidden != b->hidden ? "hidden" : NULL;
    if (field)
        return kv_fail(-EINVAL, "te_kv_decoder_new_cache: opts.shape.%s "
                       "differs from the cache's", field);
    te_kv_decoder_opts co = *o;
    co.pool_pages = c->d.pages; /* the pool tracks the engine's page ids */
    int rc = decoder_make(e, &co, c, out);
    if (!rc)
        kv_cache_hold(c);
    return rc;
}

/* Deregister what is registered of p: 0, or -EIO if one could not be. */
static int prefiller_dereg(te_kv_decoder *d, struct prefiller *p)
{
    int rc = 0;
    for (uint32_t a = 0; p->mr && a < d->nallocs; a++)
        if (p->mr[a] && te_mr_dereg(d->e, p->mr[a]))
            rc = -EIO;
        else
            p->mr[a] = NULL;
    return rc;
}

/* Register every allocation for one prefiller (p). */
static int prefiller_reg(te_kv_decoder *d, struct prefiller *p)
{
    p->mr = calloc(d->nallocs, sizeof(*p->mr));
    p->desc = calloc(d->nallocs, sizeof(*p->desc));
    if (!p->mr || !p->desc)
        return kv_fail(-ENOMEM, "decoder: out of memory");
    uint32_t mem = d->cache ? (uint32_t)d->cache->d.mem : TE_MEM_HOST;
    for (uint32_t a = 0; a < d->nallocs; a++) {
        int rc = te_mr_reg(d->e, d->o.group, d->allocs[a].base,
                           d->allocs[a].len, TE_MR_REMOTE_WRITE, mem,
                           &p->mr[a]);
        if (rc)
            return kv_fail(rc, "decoder: registering %s %u: %s", d->cache ?
                           "cache allocation" : "the pool", a,
                           te_last_error());
        te_mr_describe(p->mr[a], &p->desc[a]);
    }
    return 0;
}

/* An engine cache's descriptors, TE_KV_DESCS_PER_MSG per CACHE_DESCS, as
 * set `i` (the prefiller's index: a later registration of the same
 * source has a higher one). Sent once per registration, so a request
 * carries none (docs/kvcache.md, protocol). */
static int send_descs(te_kv_decoder *d, uint32_t i, const struct prefiller *p)
{
    static __thread te_kv_msg m;
    for (uint32_t a = 0; a < d->nallocs; a += TE_KV_DESCS_PER_MSG) {
        memset(&m, 0, offsetof(te_kv_msg, desc));
        m.type = TE_KV_MSG_CACHE_DESCS;
        m.layout = i;
        m.nallocs = d->nallocs;
        m.first = a;
        m.ndescs = d->nallocs - a < TE_KV_DESCS_PER_MSG ? d->nallocs - a
                                                        : TE_KV_DESCS_PER_MSG;
        for (uint32_t k = 0; k < m.ndescs; k++) {
            size_t n = TE_DESC_MAX;
            te_desc_serialize(&p->desc[a + k], m.descs[k], &n);
            m.desc_lens[k] = (uint32_t)n;
        }
        int rc = send_to(d, p->peer, i, &m);
        if (rc)
            return rc;
    }
    return 0;
}

/* Register the pool (every cache allocation) for a prefiller and greet it;
 * on failure no registration of it is left, unless one could not be
 * deregistered after descriptors were sent (then it stays, dead). */
static int greet_prefiller(te_kv_decoder *d, uint32_t i, const void *addr,
                           size_t len, struct prefiller *p)
{
    int rc = te_peer_add(d->e, d->o.group, addr, len, &p->peer);
    if (rc)
        return kv_fail(rc, "decoder: prefiller address: %s", te_last_error());
    rc = prefiller_reg(d, p);
    static __thread te_kv_msg m;
    memset(&m, 0, offsetof(te_kv_msg, desc));
    m.type = TE_KV_MSG_HELLO;
    size_t alen = sizeof(m.addr);
    if (!rc && (rc = te_engine_address(d->e, d->o.group, m.addr, &alen)))
        rc = kv_fail(rc, "decoder: our own address: %s", te_last_error());
    m.addr_len = (uint32_t)alen;
    if (!rc)
        rc = send_to(d, p->peer, i, &m);
    if (!rc && d->cache)
        rc = send_descs(d, i, p);
    if (!rc)
        return 0;
    /* A key may have left in a CACHE_DESCS already: revoke before the
     * registrations go (a refused dereg leaves them to free()). The peer
     * stays: te_peer_add() gives every adder of an address the same
     * handle, so removing it could cut off another user of it. */
    for (uint32_t a = 0; d->cache && p->mr && a < d->nallocs; a++)
        if (p->mr[a])
            te_mr_revoke(d->e, p->mr[a], NULL);
    if (prefiller_dereg(d, p) == 0) {
        free(p->mr);
        free(p->desc);
        p->mr = NULL;
        p->desc = NULL;
    }
    return rc;
}

int te_kv_decoder_add_prefiller(te_kv_decoder *d, const void *addr,
                                size_t len, uint32_t *id)
{
    kv_clear();
    /* The slot is taken under the lock (two callers never share one) and
     * stays dead (live 0, no registration) if greeting it fails. */
    pthread_mutex_lock(&d->lock);
    if (d->npf == MAX_PREFILLERS) {
        pthread_mutex_unlock(&d->lock);
        return kv_fail(-ENOSPC, "decoder: at most %d prefillers",
                       MAX_PREFILLERS);
    }
    uint32_t i = d->npf++;
    pthread_mutex_unlock(&d->lock);
    struct prefiller p = {0};
    int rc = greet_prefiller(d, i, addr, len, &p);
    p.live = rc == 0;
    pthread_mutex_lock(&d->lock);
    d->pf[i] = p; /* a dead one keeps what could not be deregistered */
    pthread_mutex_unlock(&d->lock);
    if (rc)
        return rc;
    *id = i;
    return 0;
}

/* The REQUEST (pool) or CACHE_REQUEST (engine cache) fields that differ:
 * the layout of the pages and where the hidden state goes. */
static void layout_fields(const te_kv_decoder *d, uint32_t slot,
                          uint32_t hidden_slot, te_kv_msg *m)
{
    if (!d->cache) {
        m->type = TE_KV_MSG_REQUEST;
        m->page_bytes = d->page_bytes;
        m->layer_stride = d->layer_stride;
        m->hidden_off = d->o.shape.layers * d->layer_stride +
                        slot * d->hidden_bytes;
        m->hidden_bytes = (uint32_t)d->hidden_bytes;
        return;
    }
    const te_kv_cache_desc *c = &d->cache->d;
    m->type = TE_KV_MSG_CACHE_REQUEST;
    m->page_bytes = d->cache->page_bytes;
    m->layer_stride = 0;
    m->kv_factor = c->shape.kv_factor;
    m->elem_bytes = c->shape.elem_bytes;
    m->tokens_per_page = c->shape.tokens_per_page;
    m->flags = d->layer_fn ? TE_KV_REQ_LAYER_NOTES : 0;
    m->nregions = c->shape.layers * c->shape.kv_factor;
    memcpy(m->regions, c->regions, m->nregions * sizeof(te_kv_region));
    m->nallocs = d->nallocs; /* version 2: descriptors by `layout` */
    m->hidden_alloc = c->hidden_alloc;
    m->hidden_off = hidden_slot == UINT32_MAX ? 0 :
                    c->hidden_offset + (uint64_t)hidden_slot * c->hidden_stride;
    m->hidden_bytes = hidden_slot == UINT32_MAX ? 0 :
                      (uint32_t)d->cache->hidden_bytes;
}

/* Submit a request: into pool pages it allocates (pages NULL) or into the
 * engine's own pages[0..npages) (claimed, checked by the caller). */
static int submit_req(te_kv_decoder *d, uint32_t pf, uint64_t id,
                      uint32_t tokens, const uint32_t *pages, uint32_t npages,
                      uint32_t hidden_slot, int timeout_ms, te_kv_done_fn cb,
                      void *arg)
{
    static __thread te_kv_msg m;
    pthread_mutex_lock(&d->lock);
    int rc = 0;
    struct kv_req *q = NULL;
    if (pf >= d->npf || !d->pf[pf].live)
        rc = kv_fail(-ENOENT, "decoder: prefiller %u is not live", pf);
    else if (find(d, id))
        rc = kv_fail(-EEXIST, "decoder: request %" PRIu64 " already in "
                     "flight", id);
    for (uint32_t i = 0; !rc && i < d->o.max_requests && !q; i++)
        if (d->req[i].state == R_FREE && !d->req[i].quarantined)
            q = &d->req[i];
    if (!rc && !q)
        rc = kv_fail(-EBUSY, "decoder: %u requests in flight already",
                     d->o.max_requests);
    if (!rc && pages) {
        rc = kv_pool_claim(d->pool, npages, pages);
        if (!rc)
            memcpy(q->pages, pages, npages * sizeof(uint32_t));
    } else if (!rc) {
        rc = te_kv_pool_alloc(d->pool, npages, q->pages);
    }
    if (rc) {
        pthread_mutex_unlock(&d->lock);
        return rc;
    }
    uint32_t slot = (uint32_t)(q - d->req);
    q->uses++;
    te_imm_space_value(d->space, slot * IMMS_PER_SLOT + q->uses % IMMS_PER_SLOT,
                       &q->imm);
    q->state = R_SENT;
    pthread_cond_signal(&d->cond); /* its deadlines are watched from now */
    q->id = id;
    q->pf = pf;
    q->npages = npages;
    count_late_writes(d, q);
    q->cb = cb;
    q->arg = arg;
    uint64_t now = kv_now_ns();
    q->deadline_ns = now + (uint64_t)(timeout_ms > 0 ? timeout_ms : 60000) *
                               1000000ull;
    q->phase_ns = now + (uint64_t)d->o.accept_timeout_ms * 1000000ull;
    memset(&m, 0, offsetof(te_kv_msg, pages));
    m.nallocs = 0;
    m.request_id = id;
    m.tokens = tokens;
    m.layers = d->o.shape.layers;
    m.imm = q->imm;
    m.npages = npages;
    m.layout = pf;
    layout_fields(d, slot, hidden_slot, &m);
    size_t dl = sizeof(m.desc);
    if (!d->cache) /* a pool: its one descriptor inline (version 1) */
        te_desc_serialize(&d->pf[pf].desc[0], m.desc, &dl);
    m.desc_len = d->cache ? 0 : (uint32_t)dl;
    memcpy(m.pages, q->pages, npages * sizeof(uint32_t));
    /* Sent with the lock held: until te_submit has answered, no other path
     * (a fence of this prefiller, a deadline) may end the request, or a
     * refused send would end it twice (a callback, and this error) and
     * put its pages back twice. te_submit does not wait for the network:
     * at most its bounded retries while the submission queue is full. */
    if ((rc = send_to(d, d->pf[pf].peer, pf, &m))) {
        /* Nothing sent: nothing can land. */
        te_kv_pool_fence(d->pool, q->npages, q->pages);
        poison_request(d, q);
        te_kv_pool_release(d->pool, q->npages, q->pages);
        q->state = R_FREE;
    }
    pthread_mutex_unlock(&d->lock);
    return rc;
}

int te_kv_decoder_submit(te_kv_decoder *d, uint32_t pf, uint64_t id,
                         uint32_t tokens, int timeout_ms, te_kv_done_fn cb,
                         void *arg)
{
    kv_clear();
    uint32_t npages = tokens ? te_kv_pages_for(&d->o.shape, tokens) : 0;
    if (!tokens || npages > TE_KV_MAX_PAGES)
        return kv_fail(-EINVAL, "decoder: %u tokens = %u pages (1..%d pages)",
                       tokens, npages, TE_KV_MAX_PAGES);
    if (d->cache)
        return kv_fail(-EINVAL, "decoder: its pages are the engine's cache: "
                       "use te_kv_decoder_submit_pages");
    return submit_req(d, pf, id, tokens, NULL, npages, 0, timeout_ms, cb,
                      arg);
}

int te_kv_decoder_submit_pages(te_kv_decoder *d, uint32_t pf, uint64_t id,
                               uint32_t tokens, const uint32_t *pages,
                               uint32_t n, uint32_t hidden_slot,
                               int timeout_ms, te_kv_done_fn cb, void *arg)
{
    kv_clear();
    if (!d->cache)
        return kv_fail(-EINVAL, "decoder: it owns a page pool: use "
                       "te_kv_decoder_submit (or te_kv_decoder_new_cache)");
    uint32_t want = tokens ? te_kv_pages_for(&d->o.shape, tokens) : 0;
    if (!tokens || !pages || n != want || n > TE_KV_MAX_PAGES)
        return kv_fail(-EINVAL, "pages: %u page ids for %u tokens (want %u, "
                       "1..%d)", n, tokens, want, TE_KV_MAX_PAGES);
    if (hidden_slot != UINT32_MAX && hidden_slot >= d->cache->d.hidden_slots)
        return kv_fail(-EINVAL, "hidden_slot %u: out of range (%u slots)",
                       hidden_slot, d->cache->d.hidden_slots);
    return submit_req(d, pf, id, tokens, pages, n, hidden_slot, timeout_ms,
                      cb, arg);
}

int te_kv_decoder_on_layer(te_kv_decoder *d, te_kv_layer_fn fn, void *arg)
{
    kv_clear();
    if (!d->cache)
        return kv_fail(-EINVAL, "decoder: per-layer notes need an engine "
                       "cache (te_kv_decoder_new_cache)");
    pthread_mutex_lock(&d->lock);
    d->layer_fn = fn;
    d->layer_arg = arg;
    pthread_mutex_unlock(&d->lock);
    return 0;
}

int te_kv_decoder_cancel(te_kv_decoder *d, uint64_t id)
{
    kv_clear();
    pthread_mutex_lock(&d->lock);
    struct kv_req *q = find(d, id);
    if (!q || q->state == R_DONE || q->state == R_CANCELLING) {
        pthread_mutex_unlock(&d->lock);
        return kv_fail(q ? -EALREADY : -ENOENT, "decoder: request %" PRIu64
                       " %s", id, q ? "cannot be cancelled now (done or "
                       "cancelling)" : "is not in flight");
    }
    if (q->state == R_ARMED) {
        /* Later arrivals stay banked until end_req drops them. */
        disarm(d, q);
    }
    te_kv_pool_fence(d->pool, q->npages, q->pages);
    q->state = R_CANCELLING;
    q->phase_ns = kv_now_ns() + (uint64_t)d->o.cancel_timeout_ms * 1000000ull;
    uint32_t pf = q->pf;
    pthread_mutex_unlock(&d->lock);
    te_kv_msg m;
    memset(&m, 0, offsetof(te_kv_msg, desc));
    m.type = TE_KV_MSG_CANCEL;
    m.request_id = id;
    int rc = send_msg(d, pf, &m);
    /* A failed send falls to the confirmation deadline (then a fence). */
    return rc == -ECONNRESET ? 0 : rc;
}

int te_kv_decoder_release(te_kv_decoder *d, uint64_t id)
{
    kv_clear();
    pthread_mutex_lock(&d->lock);
    struct kv_req *q = find(d, id);
    int rc = 0;
    if (!q)
        rc = kv_fail(-ENOENT, "decoder: request %" PRIu64 " unknown", id);
    else if (q->state != R_DONE)
        rc = kv_fail(-EBUSY, "decoder: request %" PRIu64 " still in flight",
                     id);
    else {
        poison_request(d, q);
        te_kv_pool_release(d->pool, q->npages, q->pages);
        q->state = R_FREE;
    }
    pthread_mutex_unlock(&d->lock);
    return rc;
}

int te_kv_decoder_pages(te_kv_decoder *d, uint64_t id, uint32_t *idx,
                        uint32_t *n)
{
    pthread_mutex_lock(&d->lock);
    struct kv_req *q = find(d, id);
    int rc = 0;
    if (!q || q->state != R_DONE)
        rc = kv_fail(-ENOENT, "decoder: request %" PRIu64 " not completed", id);
    else if (*n < q->npages)
        rc = kv_fail(-ENOSPC, "decoder: %u pages", q->npages);
    else {
        memcpy(idx, q->pages, q->npages * sizeof(uint32_t));
        *n = q->npages;
    }
    pthread_mutex_unlock(&d->lock);
    return rc;
}

int te_kv_decoder_verify(te_kv_decoder *d, uint64_t id)
{
    if (d->cache)
        return kv_fail(-EINVAL, "decoder: te_kv_decoder_verify checks the "
                       "pattern of te_kv_prefiller; the engine's cache holds "
                       "its own bytes");
    pthread_mutex_lock(&d->lock);
    struct kv_req *q = find(d, id);
    if (!q || q->state != R_DONE) {
        pthread_mutex_unlock(&d->lock);
        return kv_fail(-ENOENT, "decoder: request %" PRIu64 " not completed",
                       id);
    }
    uint32_t slot = (uint32_t)(q - d->req);
    int rc = 0;
    for (uint32_t l = 0; l < d->o.shape.layers && !rc; l++)
        for (uint32_t k = 0; k < q->npages && !rc; k++) {
            const uint8_t *b = d->mem + l * d->layer_stride +
                               (uint64_t)q->pages[k] * d->page_bytes;
            uint64_t off = kv_pattern_check(b, d->page_bytes, id, l, k);
            if (off < d->page_bytes)
                rc = kv_fail(-EIO, "request %" PRIu64 ": layer %u page %u "
                             "(pool page %u) byte %" PRIu64 " wrong", id, l,
                             k, q->pages[k], off);
        }
    const uint8_t *h = d->mem + d->o.shape.layers * d->layer_stride +
                       slot * d->hidden_bytes;
    uint64_t hoff = rc ? d->hidden_bytes
                       : kv_pattern_check(h, d->hidden_bytes, id, UINT32_MAX, 0);
    if (hoff < d->hidden_bytes)
        rc = kv_fail(-EIO, "request %" PRIu64 ": hidden state byte %" PRIu64
                     " wrong", id, hoff);
    pthread_mutex_unlock(&d->lock);
    return rc;
}

te_kv_pool *te_kv_decoder_pool(te_kv_decoder *d) { return d->pool; }

uint32_t te_kv_decoder_inflight(te_kv_decoder *d)
{
    uint32_t n = 0;
    pthread_mutex_lock(&d->lock);
    for (uint32_t i = 0; i < d->o.max_requests; i++)
        n += d->req[i].state != R_FREE && d->req[i].state != R_DONE;
    pthread_mutex_unlock(&d->lock);
    return n;
}

/* Until no message completion and no expectation callback can run any
 * more (each uses d), bounded by the messages' deadline plus a margin. */
static int wait_callbacks(te_kv_decoder *d)
{
    uint64_t deadline = kv_now_ns() +
                        (SEND_TIMEOUT_MS + 10000) * 1000000ull;
    while (atomic_load(&d->sends) > 0 || atomic_load(&d->imm_cbs) > 0) {
        if (kv_now_ns() >= deadline)
            return -ETIMEDOUT;
        usleep(100);
    }
    return 0;
}

/* Deregister every prefiller's registration of the pool: 0 when none can
 * be written any more (a failed revocation or deregistration: -EIO). */
static int dereg_all(te_kv_decoder *d)
{
    int rc = 0;
    for (uint32_t pf = 0; pf < d->npf; pf++) {
        if (!d->pf[pf].mr)
            continue;
        if (prefiller_dereg(d, &d->pf[pf]) || d->pf[pf].quarantined) {
            te_log_printf(TE_LOG_ERROR, "te-kv",
                    "decoder: free: prefiller %u's "
                    "registration: %s", pf, d->pf[pf].quarantined ?
                    "an old key was never revoked" : te_last_error());
            rc = -EIO;
        }
    }
    return rc;
}

void te_kv_decoder_free(te_kv_decoder *d)
{
    if (!d)
        return;
    /* Requests still in flight: fence their prefillers (nothing lands). */
    pthread_mutex_lock(&d->lock);
    for (uint32_t pf = 0; pf < d->npf; pf++) {
        int busy = 0;
        for (uint32_t i = 0; i < d->o.max_requests; i++)
            busy |= d->req[i].state != R_FREE && d->req[i].state != R_DONE &&
                    d->req[i].pf == pf;
        if (busy)
            fence_prefiller(d, pf, -ECANCELED, "decoder shutting down");
    }
    d->stopping = 1;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
    te_set_recv_handler(d->e, d->o.group, NULL, NULL); /* no on_msg after */
    /* Expectations still armed end with -ECANCELED (queued on_imm calls). */
    te_imm_space_destroy(d->space);
    if (wait_callbacks(d) || dereg_all(d)) {
        /* A remote write or a message callback may still reach them. */
        te_log_printf(TE_LOG_ERROR, "te-kv",
                "decoder: free: the decoder's state and its "
                "%" PRIu64 "-byte pool are kept (leaked)", d->region);
        return;
    }
    while (d->head) { /* events queued after the service thread quit */
        struct ev *v = d->head;
        d->head = v->next;
        free(v->m);
        free(v);
    }
    te_kv_pool_free(d->pool);
    for (uint32_t pf = 0; pf < d->npf; pf++) {
        free(d->pf[pf].mr);
        free(d->pf[pf].desc);
    }
    for (uint32_t i = 0; i < d->o.max_requests; i++)
        free(d->req[i].pages);
    free(d->req);
    if (d->cache)
        kv_cache_put(d->cache);
    else
        free(d->mem);
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->cond);
    free(d);
}

uint64_t te_kv_decoder_late_writes(te_kv_decoder *d)
{
    pthread_mutex_lock(&d->lock);
    uint64_t n = d->late_writes;
    pthread_mutex_unlock(&d->lock);
    return n;
}
