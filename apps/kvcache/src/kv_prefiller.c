/*
 * The prefiller side of te-kv: receives HELLO/REQUEST/CANCEL messages on
 * its engine's receive handler (callback thread: only queued there), and a
 * worker thread serves requests one at a time: ACCEPT with the exact count
 * of immediates, then per layer a simulated compute and one paged write,
 * then the hidden state as a single write. A CANCEL stops it between
 * layers; CANCELLED is sent only once every submitted write has completed
 * locally, i.e. nothing more can land in the decoder's pages.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv_internal.h"

#define MAX_DECODERS 64
/* Most te_kv_prefiller_opts.timeout_ms: the writes' deadline, which also
 * bounds how long free() waits for them. */
#define KV_MAX_TIMEOUT_MS 120000

struct job {
    struct job *next;
    te_peer from;
    te_kv_msg m; /* a REQUEST */
};

/* Decoders that said HELLO: their token and our peer handle of them. */
#define TOMBS 1024
#define MAX_PARKED 64

struct decoder_ref {
    uint64_t token;
    te_peer peer;
};

struct te_kv_prefiller {
    te_engine *e;
    struct decoder_ref dec[MAX_DECODERS];
    uint32_t ndec;
    te_kv_prefiller_opts o;
    uint64_t page_bytes, layer_span, hidden_bytes;
    uint8_t *src;
    te_mr *mr;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct job *head, *tail;
    uint64_t current;          /* request id being served, 0 = none */
    te_peer current_from;
    int cancel_current;
    int stopping;
    te_kv_prefiller_stats st;
    struct { uint64_t id, t; } last[256]; /* te_kv_prefiller_last_layer_ns */
    /* Cancels of requests not seen here (yet): two-sided messages may be
     * reordered (the loopback's fault_reorder, EFA's SRD), so a CANCEL can
     * overtake its REQUEST. The CANCELLED(ENOENT) answer lets the decoder
     * free the pages, so the REQUEST, if it arrives later, must be
     * dropped: it is matched against these. A ring: the oldest goes when
     * it is full (a REQUEST overtaken by TOMBS later cancels is beyond
     * any transport's reordering window). */
    struct { uint64_t sender, id; } tomb[TOMBS]; /* sender: HELLO token */
    struct job *parked;        /* messages of decoders not yet HELLOed */
    int nparked;
    uint32_t tomb_next, tomb_count;
    /* writes of the current request still outstanding */
    atomic_int outstanding;
    atomic_int write_failed;
};

/* How long a write or message of ours may take (te_request.timeout_ms). */
static int op_timeout_ms(const te_kv_prefiller *p)
{
    return p->o.timeout_ms ? p->o.timeout_ms : 30000;
}

/* Every request we submit has a callback: completions never go to the
 * engine-wide queue, which nothing here reads (it would grow without bound
 * and mix into the completions of other users of the engine). Each is
 * counted in `outstanding`, so that wait_quiet() covers it and free()
 * never frees what a callback still uses. */
static void on_reply_done(const te_completion *c, void *arg)
{
    te_kv_prefiller *p = arg;
    if (c->status)
        te_log_printf(TE_LOG_WARN, "te-kv",
                "prefiller: reply about request %" PRIu64
                " failed: %s (the decoder fences us by its deadline)",
                c->user_data, c->reason);
    atomic_fetch_sub(&p->outstanding, 1);
}

/* An ACCEPT that did not arrive: the decoder fails the request (no count to
 * arm), so it must not be counted completed here either. */
static void on_accept_done(const te_completion *c, void *arg)
{
    te_kv_prefiller *p = arg;
    if (c->status) {
        atomic_store(&p->write_failed, c->status);
        te_log_printf(TE_LOG_WARN, "te-kv",
                "prefiller: ACCEPT of request %" PRIu64
                " failed: %s", c->user_data, c->reason);
    }
    atomic_fetch_sub(&p->outstanding, 1);
}

static int send_msg(te_kv_prefiller *p, te_peer to, const te_kv_msg *m,
                    te_done_fn done)
{
    uint8_t buf[64];
    int n = te_kv_msg_encode(m, buf, sizeof(buf));
    if (n < 0)
        return n;
    te_request r;
    te_request_init(&r, TE_OP_SEND);
    r.group = p->o.group;
    r.timeout_ms = op_timeout_ms(p);
    r.user_data = m->request_id;
    r.done = done;
    r.done_arg = p;
    r.u.send.peer = to;
    r.u.send.buf = buf;
    r.u.send.len = (uint32_t)n;
    atomic_fetch_add(&p->outstanding, 1);
    int64_t id = -EAGAIN;
    for (int i = 0; i < 1000 && id == -EAGAIN; i++)
        if ((id = te_submit(p->e, &r)) == -EAGAIN)
            usleep(100);
    if (id > 0)
        return 0;
    atomic_fetch_sub(&p->outstanding, 1);
    te_log_printf(TE_LOG_WARN, "te-kv",
            "prefiller: message type %u about request %" PRIu64
            " to peer %u: %s", m->type, m->request_id, to,
            id == -EAGAIN ? "submission queue full for 100 ms"
                          : te_last_error());
    return (int)id;
}

static void reply(te_kv_prefiller *p, te_peer to, uint32_t type, uint64_t id,
                  uint32_t status)
{
    te_kv_msg m;
    memset(&m, 0, offsetof(te_kv_msg, desc));
    m.type = type;
    m.request_id = id;
    m.status = status;
    send_msg(p, to, &m, on_reply_done);
}

/* Receive handler (engine callback thread): queue, never block long. */
static void dispatch(te_kv_prefiller *p, struct job *j, te_peer from);

static void on_msg(int group, te_peer from, const void *data, size_t len,
                   void *arg)
{
    te_kv_prefiller *p = arg;
    (void)group;
    struct job *j = malloc(sizeof(*j));
    if (!j)
        return;
    if (te_kv_msg_parse(data, len, &j->m)) {
        te_log_printf(TE_LOG_WARN, "te-kv",
                "prefiller: dropped a message from peer %u: "
                "%s", from, te_kv_last_error());
        free(j);
        return;
    }
    (void)from; /* senders are named by their HELLO token, not the transport */
    if (j->m.type == TE_KV_MSG_HELLO) {
        te_peer peer;
        if (te_peer_add(p->e, p->o.group, j->m.addr, j->m.addr_len, &peer)) {
            te_log_printf(TE_LOG_WARN, "te-kv",
                    "prefiller: hello: %s", te_last_error());
        } else {
            pthread_mutex_lock(&p->lock);
            uint32_t i = 0;
            while (i < p->ndec && p->dec[i].token != j->m.sender)
                i++;
            if (i < MAX_DECODERS) {
                p->dec[i].token = j->m.sender;
                p->dec[i].peer = peer;
                if (i == p->ndec)
                    p->ndec++;
            }
            /* Messages of this decoder that overtook its HELLO. */
            struct job *mine = NULL;
            for (struct job **pp = &p->parked; *pp;) {
                struct job *q = *pp;
                if (q->m.sender == j->m.sender) {
                    *pp = q->next;
                    p->nparked--;
                    q->next = mine;
                    mine = q;
                } else {
                    pp = &q->next;
                }
            }
            pthread_mutex_unlock(&p->lock);
            /* mine is newest first: reverse to arrival order. */
            struct job *ordered = NULL;
            while (mine) {
                struct job *q = mine;
                mine = q->next;
                q->next = ordered;
                ordered = q;
            }
            while (ordered) {
                struct job *q = ordered;
                ordered = q->next;
                dispatch(p, q, peer);
            }
        }
        free(j);
        return;
    }
    pthread_mutex_lock(&p->lock);
    uint32_t di = 0;
    while (di < p->ndec && p->dec[di].token != j->m.sender)
        di++;
    int known = di < p->ndec;
    te_peer dpeer = known ? p->dec[di].peer : 0;
    pthread_mutex_unlock(&p->lock);
    if (!known) {
        /* Its HELLO may still be on the way (two-sided messages can be
         * reordered): park it, bounded, until the HELLO comes. */
        pthread_mutex_lock(&p->lock);
        if (p->nparked < MAX_PARKED) {
            j->next = p->parked;
            p->parked = j;
            p->nparked++;
            pthread_mutex_unlock(&p->lock);
            return;
        }
        pthread_mutex_unlock(&p->lock);
        te_log_printf(TE_LOG_WARN, "te-kv",
                "prefiller: message from unknown decoder %016llx "
                "(no HELLO, %d already waiting for theirs): dropped",
                (unsigned long long)j->m.sender, MAX_PARKED);
        free(j);
        return;
    }
    dispatch(p, j, dpeer);
}

/* A REQUEST or CANCEL of a known decoder (its peer handle `from`). */
static void dispatch(te_kv_prefiller *p, struct job *j, te_peer from)
{
    j->from = from;
    j->next = NULL;
    pthread_mutex_lock(&p->lock);
    if (j->m.type == TE_KV_MSG_CANCEL) {
        uint64_t id = j->m.request_id, sender = j->m.sender;
        free(j);
        if (p->current == id && p->current_from == from) {
            p->cancel_current = 1; /* the worker answers when quiet */
            pthread_mutex_unlock(&p->lock);
            return;
        }
        /* Not started yet: drop it from the queue, nothing was written. */
        int found = 0;
        for (struct job **pp = &p->head; *pp; pp = &(*pp)->next)
            if ((*pp)->m.request_id == id && (*pp)->from == from) {
                struct job *q = *pp;
                *pp = q->next;
                if (p->tail == q) {
                    p->tail = p->head;
                    while (p->tail && p->tail->next)
                        p->tail = p->tail->next;
                }
                free(q);
                found = 1;
                break;
            }
        if (found) {
            p->st.cancelled++;
        } else {
            p->tomb[p->tomb_next].sender = sender;
            p->tomb[p->tomb_next].id = id;
            p->tomb_next = (p->tomb_next + 1) % TOMBS;
            if (p->tomb_count < TOMBS)
                p->tomb_count++;
        }
        pthread_mutex_unlock(&p->lock);
        reply(p, from, TE_KV_MSG_CANCELLED, id, found ? 0 : ENOENT);
        return;
    }
    if (j->m.type != TE_KV_MSG_REQUEST) {
        pthread_mutex_unlock(&p->lock);
        free(j);
        return;
    }
    for (uint32_t t = 0; t < p->tomb_count; t++)
        if (p->tomb[t].id == j->m.request_id &&
            p->tomb[t].sender == j->m.sender) {
            /* Cancelled before it arrived: never served. */
            p->tomb[t].id = 0;
            p->tomb[t].sender = 0;
            p->st.cancelled++;
            pthread_mutex_unlock(&p->lock);
            free(j);
            return;
        }
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

static void on_write_done(const te_completion *c, void *arg)
{
    te_kv_prefiller *p = arg;
    /* Logged once per request: a fenced decoder fails every write in
     * flight (dozens of identical lines otherwise). */
    if (c->status && !atomic_exchange(&p->write_failed, c->status))
        te_log_printf(TE_LOG_ERROR, "te-kv",
                "prefiller: write failed (the rest of this request's "
                "writes are dropped): %s", c->reason);
    atomic_fetch_sub(&p->outstanding, 1);
}

static int stop_asked(te_kv_prefiller *p)
{
    pthread_mutex_lock(&p->lock);
    int stop = p->stopping || p->cancel_current;
    pthread_mutex_unlock(&p->lock);
    return stop;
}

/* A full submission queue is waited out, but not past the request's
 * deadline (-ETIMEDOUT) nor a cancel or free() (-ECANCELED: nothing of it
 * was sent): free() joins this thread. */
static int submit(te_kv_prefiller *p, te_request *r, uint64_t deadline_ns)
{
    r->done = on_write_done;
    r->done_arg = p;
    r->group = p->o.group;
    r->timeout_ms = op_timeout_ms(p);
    atomic_fetch_add(&p->outstanding, 1);
    for (;;) {
        int64_t id = te_submit(p->e, r);
        if (id > 0)
            return 0;
        if (id == -EAGAIN && kv_now_ns() >= deadline_ns)
            id = kv_fail(-ETIMEDOUT, "submission queue full up to the "
                         "request's deadline");
        else if (id == -EAGAIN && stop_asked(p))
            id = -ECANCELED;
        if (id != -EAGAIN) {
            atomic_fetch_sub(&p->outstanding, 1);
            return (int)id;
        }
        usleep(50);
    }
}

/* The paged write of one layer of request m (also used for the count). */
static void layer_request(te_kv_prefiller *p, const struct job *j,
                          const te_mr_desc *d, const uint32_t *src_idx,
                          uint32_t layer, te_request *r)
{
    te_request_init(r, TE_OP_PAGED);
    r->group = p->o.group;
    r->flags = TE_F_IMM;
    r->imm = j->m.imm;
    r->u.paged.peer = j->from;
    r->u.paged.src = p->mr;
    r->u.paged.src_off = layer * p->layer_span;
    r->u.paged.src_stride = p->page_bytes;
    r->u.paged.src_idx = src_idx;
    r->u.paged.dst = d;
    r->u.paged.dst_off = layer * j->m.layer_stride;
    r->u.paged.dst_stride = p->page_bytes;
    r->u.paged.dst_idx = j->m.pages;
    r->u.paged.page_len = p->page_bytes;
    r->u.paged.count = j->m.npages;
}

static void hidden_request(te_kv_prefiller *p, const struct job *j,
                           const te_mr_desc *d, te_request *r)
{
    te_request_init(r, TE_OP_WRITE);
    r->group = p->o.group;
    r->flags = TE_F_IMM;
    r->imm = j->m.imm;
    r->u.xfer.peer = j->from;
    r->u.xfer.local = p->mr;
    r->u.xfer.local_off = p->o.shape.layers * p->layer_span;
    r->u.xfer.remote = d;
    r->u.xfer.remote_off = j->m.hidden_off;
    r->u.xfer.len = p->hidden_bytes;
}

/* Why request m cannot be served, or 0. */
static int check_request(te_kv_prefiller *p, const struct job *j,
                         te_mr_desc *d, char *why, size_t wlen)
{
    const te_kv_msg *m = &j->m;
    if (te_desc_parse(m->desc, m->desc_len, d)) {
        snprintf(why, wlen, "descriptor: %s", te_last_error());
        return EBADMSG;
    }
    if (m->layers != p->o.shape.layers || m->page_bytes != p->page_bytes ||
        m->hidden_bytes != p->hidden_bytes) {
        snprintf(why, wlen, "model mismatch: %u layers, %" PRIu64 "-byte "
                 "pages, %u-byte hidden; this prefiller serves %s (%u, %"
                 PRIu64 ", %" PRIu64 ")", m->layers, m->page_bytes,
                 m->hidden_bytes, p->o.shape.name, p->o.shape.layers,
                 p->page_bytes, p->hidden_bytes);
        return EINVAL;
    }
    if (m->npages != te_kv_pages_for(&p->o.shape, m->tokens) ||
        m->npages > p->o.max_pages) {
        snprintf(why, wlen, "%u pages for %u tokens (want %u, at most %u)",
                 m->npages, m->tokens, te_kv_pages_for(&p->o.shape, m->tokens),
                 p->o.max_pages);
        return EINVAL;
    }
    /* Pages must stay inside their own layer: an index past the pool's
     * pages per layer would still be inside the region but would write
     * into the next layer's pages (another request's KV). */
    if (m->layer_stride < p->page_bytes || m->layer_stride % p->page_bytes) {
        snprintf(why, wlen, "layer stride %" PRIu64 " is not a whole number "
                 "of %" PRIu64 "-byte pages", m->layer_stride, p->page_bytes);
        return EINVAL;
    }
    uint64_t per_layer = m->layer_stride / p->page_bytes;
    for (uint32_t k = 0; k < m->npages; k++)
        if (m->pages[k] >= per_layer) {
            snprintf(why, wlen, "page %u: index %u out of range (the decoder's "
                     "pool has %" PRIu64 " pages per layer)", k, m->pages[k],
                     per_layer);
            return ERANGE;
        }
    uint64_t last_layer = (uint64_t)(m->layers - 1) * m->layer_stride;
    for (uint32_t k = 0; k < m->npages; k++) {
        unsigned __int128 end = (unsigned __int128)m->pages[k] * p->page_bytes +
                                last_layer + p->page_bytes;
        if (end > d->len) {
            snprintf(why, wlen, "page %u (index %u) ends past the decoder's "
                     "region of %" PRIu64 " bytes", k, m->pages[k], d->len);
            return ERANGE;
        }
    }
    if (m->hidden_off > d->len || p->hidden_bytes > d->len - m->hidden_off) {
        snprintf(why, wlen, "hidden state at %" PRIu64 " ends past the "
                 "region", m->hidden_off);
        return ERANGE;
    }
    return 0;
}

static void fill(te_kv_prefiller *p, uint64_t id, uint32_t layer,
                 uint32_t npages)
{
    for (uint32_t pg = 0; pg < npages; pg++) {
        uint8_t *b = p->src + layer * p->layer_span + pg * p->page_bytes;
        kv_pattern_fill(b, p->page_bytes, id, layer, pg);
    }
}

/* Until every write and message we submitted has completed: bounded by
 * their own deadline plus a margin (the engine completes each by then).
 * -ETIMEDOUT otherwise: something may still read our source or land at a
 * decoder, so the caller must not claim quiet nor free anything. */
static int wait_quiet(te_kv_prefiller *p)
{
    uint64_t deadline = kv_now_ns() +
                        (uint64_t)(op_timeout_ms(p) + 10000) * 1000000ull;
    while (atomic_load(&p->outstanding) > 0) {
        if (kv_now_ns() >= deadline)
            return -ETIMEDOUT;
        usleep(50);
    }
    return 0;
}

/* The worker counts while te_kv_prefiller_stats_get() may read from
 * another thread: under the lock that reader takes. */
static void stat_add(te_kv_prefiller *p, uint64_t *field, uint64_t n)
{
    pthread_mutex_lock(&p->lock);
    *field += n;
    pthread_mutex_unlock(&p->lock);
}

static void reject(te_kv_prefiller *p, const struct job *j, uint32_t err,
                   const char *why)
{
    te_log_printf(TE_LOG_WARN, "te-kv",
            "prefiller: request %" PRIu64 " rejected: %s",
            j->m.request_id, why);
    stat_add(p, &p->st.rejected, 1);
    reply(p, j->from, TE_KV_MSG_REJECT, j->m.request_id, err);
}

/* The count the decoder expects: te_expected_imms of exactly the writes we
 * will make. A negative answer would wrap into a huge count the decoder
 * could never meet: refused instead (and returned). */
static int64_t count_imms(te_kv_prefiller *p, const struct job *j,
                           const te_mr_desc *d, const uint32_t *src_idx)
{
    uint64_t expect = 0;
    te_request r;
    for (uint32_t l = 0; l <= j->m.layers; l++) {
        if (l < j->m.layers)
            layer_request(p, j, d, src_idx, l, &r);
        else
            hidden_request(p, j, d, &r);
        int64_t n = te_expected_imms(p->e, &r, 0);
        if (n < 0) {
            char why[200];
            snprintf(why, sizeof(why), "%s: %s", l < j->m.layers ?
                     "a layer's write" : "the hidden state's write",
                     te_last_error());
            reject(p, j, EINVAL, why);
            return n;
        }
        expect += (uint64_t)n;
    }
    return (int64_t)expect;
}

/* Compute and write every layer, then the hidden state, unless cancelled
 * or a write (or the ACCEPT) failed. Returns 1 if cancelled. */
static int push_layers(te_kv_prefiller *p, const struct job *j,
                       const te_mr_desc *d, const uint32_t *src_idx,
                       uint64_t deadline_ns)
{
    uint64_t compute_ns = (uint64_t)p->o.layer_us * 1000u *
                          j->m.tokens / (p->o.ref_tokens ? p->o.ref_tokens : 1);
    int cancelled = 0;
    te_request r;
    /* A failed write means the request cannot complete: the decoder died,
     * is unreachable, or fenced us (revoked keys). Drop the rest of the
     * work instead of computing layers nobody can receive; the decoder
     * fails the request by its deadline or fence. */
    for (uint32_t l = 0; l < j->m.layers && !cancelled &&
                         !atomic_load(&p->write_failed); l++) {
        uint64_t t0 = kv_now_ns();
        if (!p->o.no_fill)
            fill(p, j->m.request_id, l, j->m.npages); /* part of "compute" */
        while (kv_now_ns() - t0 < compute_ns)
            usleep(compute_ns > 200000 ? 100 : 10);
        pthread_mutex_lock(&p->lock);
        cancelled = p->cancel_current;
        pthread_mutex_unlock(&p->lock);
        if (cancelled)
            break;
        uint64_t t_submit = kv_now_ns(); /* this layer's compute is done */
        layer_request(p, j, d, src_idx, l, &r);
        int rc = submit(p, &r, deadline_ns);
        if (rc == -ECANCELED) {
            cancelled = 1;
            break;
        }
        if (rc) {
            te_log_printf(TE_LOG_ERROR, "te-kv",
                    "prefiller: layer %u of request %" PRIu64
                    ": %s", l, j->m.request_id, rc == -ETIMEDOUT ?
                    te_kv_last_error() : te_last_error());
            /* Refused at submission (the peer is already known down, or
             * the queue stayed full up to the deadline): as much a
             * failure as one reported by a completion. */
            atomic_store(&p->write_failed, 1);
            break;
        }
        stat_add(p, &p->st.layer_writes, 1);
        stat_add(p, &p->st.bytes, (uint64_t)j->m.npages * p->page_bytes);
        if (l + 1 == j->m.layers) {
            pthread_mutex_lock(&p->lock);
            p->last[j->m.request_id % 256].id = j->m.request_id;
            p->last[j->m.request_id % 256].t = t_submit;
            pthread_mutex_unlock(&p->lock);
        }
    }
    if (!cancelled && !atomic_load(&p->write_failed)) {
        uint8_t *h = p->src + p->o.shape.layers * p->layer_span;
        kv_pattern_fill(h, p->hidden_bytes, j->m.request_id, UINT32_MAX, 0);
        hidden_request(p, j, d, &r);
        int rc = submit(p, &r, deadline_ns);
        if (rc == 0)
            stat_add(p, &p->st.bytes, p->hidden_bytes);
        else if (rc == -ECANCELED)
            cancelled = 1;
        else
            atomic_store(&p->write_failed, 1);
    }
    return cancelled;
}

/* The request's writes are over: count it, and confirm a cancel only when
 * nothing of it can land any more. */
static void end_request(te_kv_prefiller *p, const struct job *j,
                        int cancelled)
{
    int quiet = wait_quiet(p);
    pthread_mutex_lock(&p->lock);
    cancelled |= p->cancel_current;
    p->current = 0;
    p->cancel_current = 0;
    pthread_mutex_unlock(&p->lock);
    if (quiet) {
        /* A write may still land: no CANCELLED (the decoder fences us by
         * its deadline, which holds even then). */
        te_log_printf(TE_LOG_ERROR, "te-kv",
                "prefiller: request %" PRIu64 ": writes still "
                "outstanding 10 s past their deadline: counted failed",
                j->m.request_id);
        stat_add(p, &p->st.failed, 1);
    } else if (atomic_load(&p->write_failed)) {
        /* A failed write (e.g. timed out) may still land, and a failed
         * ACCEPT left the decoder without a count: counted failed, and a
         * cancel is not confirmed (the decoder's fence covers it). */
        stat_add(p, &p->st.failed, 1);
    } else if (cancelled) {
        stat_add(p, &p->st.cancelled, 1);
        reply(p, j->from, TE_KV_MSG_CANCELLED, j->m.request_id, 0);
    } else {
        stat_add(p, &p->st.completed, 1);
    }
}

static void serve(te_kv_prefiller *p, struct job *j)
{
    te_mr_desc d;
    char why[200];
    uint64_t deadline_ns = kv_now_ns() +
                           (uint64_t)op_timeout_ms(p) * 1000000ull;
    int bad = check_request(p, j, &d, why, sizeof(why));
    if (bad) {
        reject(p, j, (uint32_t)bad, why);
        return;
    }
    static __thread uint32_t src_idx[TE_KV_MAX_PAGES];
    for (uint32_t k = 0; k < j->m.npages; k++)
        src_idx[k] = k;
    int64_t expect = count_imms(p, j, &d, src_idx);
    if (expect < 0)
        return;
    te_kv_msg acc;
    memset(&acc, 0, offsetof(te_kv_msg, desc));
    acc.type = TE_KV_MSG_ACCEPT;
    acc.request_id = j->m.request_id;
    acc.expected_imms = (uint64_t)expect;
    atomic_store(&p->write_failed, 0);
    if (send_msg(p, j->from, &acc, on_accept_done)) {
        /* The decoder has no count to wait for: writing would only land
         * in pages it is about to fence. */
        stat_add(p, &p->st.failed, 1);
        return;
    }
    stat_add(p, &p->st.accepted, 1);
    end_request(p, j, push_layers(p, j, &d, src_idx, deadline_ns));
}

static void *worker(void *arg)
{
    te_kv_prefiller *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->head && !p->stopping)
            pthread_cond_wait(&p->cond, &p->lock);
        if (p->stopping)
            break;
        struct job *j = p->head;
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        p->current = j->m.request_id;
        p->current_from = j->from;
        p->cancel_current = 0;
        pthread_mutex_unlock(&p->lock);
        serve(p, j);
        free(j);
        pthread_mutex_lock(&p->lock);
        /* Early returns (REJECT, a failed ACCEPT) leave no stale current
         * for a later CANCEL to match. */
        p->current = 0;
        p->cancel_current = 0;
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int te_kv_prefiller_new(te_engine *e, const te_kv_prefiller_opts *o,
                        te_kv_prefiller **out)
{
    kv_clear();
    if (!e || !o || !out || !o->max_pages || o->max_pages > TE_KV_MAX_PAGES ||
        !o->shape.layers || !o->shape.tokens_per_page)
        return kv_fail(-EINVAL, "te_kv_prefiller_new: bad arguments (max_pages "
                       "1..%d, a shape from te_kv_shape_*)", TE_KV_MAX_PAGES);
    /* Negative would mean "no deadline" to te_submit, and wait_quiet()
     * could then never tell a write that is slow from one that is lost. */
    if (o->timeout_ms < 0 || o->timeout_ms > KV_MAX_TIMEOUT_MS)
        return kv_fail(-EINVAL, "te_kv_prefiller_new: timeout_ms %d out of "
                       "range (0 = 30 s, or 1..%d ms)", o->timeout_ms,
                       KV_MAX_TIMEOUT_MS);
    te_kv_prefiller *p = calloc(1, sizeof(*p));
    if (!p)
        return kv_fail(-ENOMEM, "te_kv_prefiller_new: out of memory");
    p->e = e;
    p->o = *o;
    p->page_bytes = te_kv_page_bytes(&o->shape);
    p->layer_span = o->max_pages * p->page_bytes;
    p->hidden_bytes = (uint64_t)o->shape.hidden * o->shape.elem_bytes;
    size_t size = o->shape.layers * p->layer_span + p->hidden_bytes;
    p->src = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
    if (!p->src) {
        free(p);
        return kv_fail(-ENOMEM, "te_kv_prefiller_new: %zu bytes", size);
    }
    int rc = te_mr_reg(e, o->group, p->src, size, 0, TE_MEM_HOST, &p->mr);
    if (rc) {
        free(p->src);
        free(p);
        return kv_fail(rc, "te_kv_prefiller_new: registration: %s",
                       te_last_error());
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    if ((rc = te_set_recv_handler(e, o->group, on_msg, p)) ||
        pthread_create(&p->thread, NULL, worker, p)) {
        te_set_recv_handler(e, o->group, NULL, NULL);
        te_mr_dereg(e, p->mr);
        free(p->src);
        free(p);
        return kv_fail(rc ? rc : -EAGAIN, "te_kv_prefiller_new: cannot start");
    }
    *out = p;
    return 0;
}

void te_kv_prefiller_stats_get(te_kv_prefiller *p, te_kv_prefiller_stats *out)
{
    pthread_mutex_lock(&p->lock);
    *out = p->st;
    pthread_mutex_unlock(&p->lock);
}

uint64_t te_kv_prefiller_last_layer_ns(te_kv_prefiller *p, uint64_t id)
{
    pthread_mutex_lock(&p->lock);
    uint64_t t = p->last[id % 256].id == id ? p->last[id % 256].t : 0;
    pthread_mutex_unlock(&p->lock);
    return t;
}

/* te_mr_dereg() is -EBUSY while the transport still holds an operation of
 * a write that already completed by its deadline: wait for those too. */
static int dereg_quiet(te_kv_prefiller *p)
{
    uint64_t deadline = kv_now_ns() +
                        (uint64_t)(op_timeout_ms(p) + 10000) * 1000000ull;
    for (;;) {
        int rc = te_mr_dereg(p->e, p->mr);
        if (rc != -EBUSY || kv_now_ns() >= deadline)
            return rc;
        usleep(1000);
    }
}

void te_kv_prefiller_free(te_kv_prefiller *p)
{
    if (!p)
        return;
    te_set_recv_handler(p->e, p->o.group, NULL, NULL);
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    p->cancel_current = 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->thread, NULL);
    while (p->parked) {
        struct job *j = p->parked;
        p->parked = j->next;
        free(j);
    }
    while (p->head) {
        struct job *j = p->head;
        p->head = j->next;
        free(j);
    }
    int rc = wait_quiet(p);
    if (rc == 0)
        rc = dereg_quiet(p);
    if (rc) {
        /* A transfer may still read the source or run a callback with p:
         * keep both (leaked) rather than free what it touches. */
        te_log_printf(TE_LOG_ERROR, "te-kv",
                "prefiller: free: %s: its state and %" PRIu64
                " bytes of source memory are kept (leaked)",
                rc == -ETIMEDOUT ? "writes still outstanding past their "
                "deadline" : te_last_error(),
                p->o.shape.layers * p->layer_span + p->hidden_bytes);
        return;
    }
    free(p->src);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p);
}
