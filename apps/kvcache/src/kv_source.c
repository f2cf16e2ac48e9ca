/*
 * The prefill side over the engine's own cache (te_kv_source_*): no thread
 * of its own. The engine's calls (begin, layer_done, hidden_done) and the
 * engine's callback thread (the decoder's messages, write completions) meet
 * in one table of requests under one lock. A request starts when both the
 * engine's begin() and the decoder's CACHE_REQUEST are here (either order):
 * it is checked against the cache, ACCEPTed with the exact count, and every
 * layer already reported is written; later layers are written by
 * layer_done() itself, on the engine's thread, so a layer leaves the moment
 * the engine says it is computed (no thread hop).
 *
 * A CANCEL stops further writes; CANCELLED is sent only once every write
 * submitted for the request has completed locally (nothing more can land
 * at the decoder), as in kv_prefiller.c.
 *
 * A decoder whose cache is several allocations sends their descriptors
 * once per registration (CACHE_DESCS, after its HELLO) and names that set
 * (`layout`) in each CACHE_REQUEST; a request waits for its set like it
 * waits for the HELLO, and is refused if the decoder has registered anew
 * since (the old set was fenced: its keys are dead anyway).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kv_internal.h"

#define SRC_SLOTS 256     /* requests in progress at once */
#define SRC_DECODERS 64   /* decoders that said HELLO */
#define SRC_TOMBS 1024    /* cancels of requests not (yet) seen */
#define SRC_MAX_TIMEOUT_MS 120000

struct sreq {
    int used, begun, accepted, cancelled, ended, failed;
    int status;               /* when ended: 0, -ECANCELED, an error */
    char why[256];
    uint64_t id;
    uint32_t tokens, npages, hidden_slot;
    uint32_t *src_pages;      /* the engine's, npages */
    uint8_t *layer;           /* per layer: 0, 1 reported, 2 written */
    uint32_t *left;           /* per layer: its writes not completed */
    int hidden_reported, hidden_written;
    te_kv_msg *m;             /* the decoder's CACHE_REQUEST, or NULL */
    te_mr_desc *dst;          /* per allocation of the decoder's cache */
    int outstanding;          /* writes and messages not completed */
};

/* A decoder's descriptors of one registration set (CACHE_DESCS). */
struct dlayout {
    uint32_t id, nallocs, have;
    int bad;                  /* a descriptor did not parse, or nallocs
                                 changed within the set */
    uint8_t *got;             /* per allocation: its descriptor came */
    te_mr_desc *desc;         /* nallocs */
};

struct te_kv_source {
    te_engine *e;
    int group, timeout_ms;
    te_kv_cache *c;
    te_mr **mr;               /* per allocation of c */
    pthread_mutex_t lock;
    pthread_cond_t cond;      /* a request ended, or outstanding fell */
    struct sreq req[SRC_SLOTS];
    struct {
        uint64_t token;
        te_peer peer;
        int has_peer;         /* its HELLO came (descriptors may precede) */
        struct dlayout *lay;  /* its newest descriptor set, or NULL */
    } dec[SRC_DECODERS];
    uint32_t ndec;
    struct { uint64_t sender, id; } tomb[SRC_TOMBS];
    uint32_t tomb_next;
    int replies;              /* replies outside any slot in flight */
    int stopping;
};

static struct sreq *find(te_kv_source *s, uint64_t id)
{
    for (int i = 0; i < SRC_SLOTS; i++)
        if (s->req[i].used && s->req[i].id == id)
            return &s->req[i];
    return NULL;
}

static struct sreq *slot_new(te_kv_source *s, uint64_t id)
{
    for (int i = 0; i < SRC_SLOTS; i++)
        if (!s->req[i].used) {
            struct sreq *q = &s->req[i];
            memset(q, 0, sizeof(*q));
            q->used = 1;
            q->id = id;
            q->hidden_slot = UINT32_MAX;
            return q;
        }
    return NULL;
}

static void slot_free(struct sreq *q)
{
    free(q->dst);
    free(q->src_pages);
    free(q->layer);
    free(q->left);
    free(q->m);
    memset(q, 0, sizeof(*q));
}

/* The decoder `token`'s entry, made if `add` and there is room (NULL
 * otherwise). */
static int dec_index(te_kv_source *s, uint64_t token, int add)
{
    for (uint32_t i = 0; i < s->ndec; i++)
        if (s->dec[i].token == token)
            return (int)i;
    if (!add || s->ndec == SRC_DECODERS)
        return -1;
    memset(&s->dec[s->ndec], 0, sizeof(s->dec[0]));
    s->dec[s->ndec].token = token;
    return (int)s->ndec++;
}

static int peer_of(te_kv_source *s, uint64_t token, te_peer *out)
{
    int i = dec_index(s, token, 0);
    if (i < 0 || !s->dec[i].has_peer)
        return 0;
    *out = s->dec[i].peer;
    return 1;
}

static void layout_free(struct dlayout *l)
{
    if (l) {
        free(l->got);
        free(l->desc);
        free(l);
    }
}

/* ------------------------------------------------------- completions */

static void maybe_end(te_kv_source *s, struct sreq *q);
static void send_msg(te_kv_source *s, struct sreq *q, te_peer to,
                     uint32_t type, uint64_t id, uint32_t status,
                     uint64_t expected);

/* A write of layer l completed: when it was the layer's last, and the
 * decoder asked for notes, tell it the layer is there (lock held). */
static void layer_landed(te_kv_source *s, struct sreq *q, uint32_t l)
{
    te_peer peer;
    if (--q->left[l] || !(q->m->flags & TE_KV_REQ_LAYER_NOTES) ||
        q->failed || q->cancelled || !peer_of(s, q->m->sender, &peer))
        return;
    send_msg(s, q, peer, TE_KV_MSG_LAYER, q->id, l, 0);
}

/* user_data: the slot index, and in its upper half 1 + the layer of a
 * layer's write (0 otherwise). A slot is reused only after its requests'
 * completions all ran (outstanding 0), so the index cannot be stale. */
static void on_done(const te_completion *c, void *arg)
{
    te_kv_source *s = arg;
    pthread_mutex_lock(&s->lock);
    struct sreq *q = &s->req[(uint32_t)c->user_data];
    uint32_t tag = (uint32_t)(c->user_data >> 32);
    q->outstanding--;
    if (tag && !c->status)
        layer_landed(s, q, tag - 1);
    if (c->status && !q->failed) {
        q->failed = c->status;
        snprintf(q->why, sizeof(q->why), "request %" PRIu64 ": a write to "
                 "the decoder failed: %s", q->id, c->reason);
        te_log_printf(TE_LOG_ERROR, "te-kv", "source: %s", q->why);
    }
    maybe_end(s, q);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static void on_reply_done(const te_completion *c, void *arg)
{
    te_kv_source *s = arg;
    if (c->status)
        te_log_printf(TE_LOG_WARN, "te-kv", "source: reply about request %"
                      PRIu64 " failed: %s (the decoder fences us by its "
                      "deadline)", c->user_data, c->reason);
    pthread_mutex_lock(&s->lock);
    s->replies--;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* Submit r for slot q (lock held). te_submit copies the request and does
 * not wait for the network; a full queue is retried briefly only. */
static int submit(te_kv_source *s, struct sreq *q, te_request *r,
                  uint32_t tag)
{
    r->group = s->group;
    r->timeout_ms = s->timeout_ms;
    r->user_data = (uint64_t)(q - s->req) | (uint64_t)tag << 32;
    r->done = on_done;
    r->done_arg = s;
    q->outstanding++;
    int64_t id = -EAGAIN;
    for (int i = 0; i < 2000 && id == -EAGAIN; i++)
        if ((id = te_submit(s->e, r)) == -EAGAIN)
            usleep(50);
    if (id > 0)
        return 0;
    q->outstanding--;
    if (!q->failed) {
        q->failed = (int)id;
        snprintf(q->why, sizeof(q->why), "request %" PRIu64 ": submit: %s",
                 q->id, id == -EAGAIN ? "queue full for 100 ms"
                                      : te_last_error());
    }
    return (int)id;
}

static void send_msg(te_kv_source *s, struct sreq *q, te_peer to,
                     uint32_t type, uint64_t id, uint32_t status,
                     uint64_t expected)
{
    te_kv_msg m;
    memset(&m, 0, offsetof(te_kv_msg, desc));
    m.type = type;
    m.request_id = id;
    m.status = status;
    m.expected_imms = expected;
    uint8_t buf[64];
    int n = te_kv_msg_encode(&m, buf, sizeof(buf));
    te_request r;
    te_request_init(&r, TE_OP_SEND);
    r.u.send.peer = to;
    r.u.send.buf = buf;
    r.u.send.len = (uint32_t)n;
    if (q) {
        submit(s, q, &r, 0);
        return;
    }
    /* A reply about no request in the table (CANCELLED of an ended or
     * unknown one, a REJECT of one we could not store): counted in
     * `replies` so free() waits for its callback. */
    r.group = s->group;
    r.timeout_ms = s->timeout_ms;
    r.user_data = id;
    r.done = on_reply_done;
    r.done_arg = s;
    s->replies++;
    if (te_submit(s->e, &r) < 0) {
        s->replies--;
        te_log_printf(TE_LOG_WARN, "te-kv", "source: reply about request %"
                      PRIu64 ": %s", id, te_last_error());
    }
}

/* Ends q when nothing of it is outstanding and it is delivered, cancelled
 * or failed (lock held). */
static void maybe_end(te_kv_source *s, struct sreq *q)
{
    if (q->ended || q->outstanding || !q->accepted)
        return;
    int all = q->hidden_written || !q->m->hidden_bytes;
    for (uint32_t l = 0; all && l < s->c->d.shape.layers; l++)
        all = q->layer[l] == 2;
    te_peer peer = 0;
    if (q->failed) {
        q->status = q->failed;
    } else if (q->cancelled) {
        q->status = -ECANCELED;
        snprintf(q->why, sizeof(q->why), "request %" PRIu64 ": cancelled by "
                 "the decoder", q->id);
        if (peer_of(s, q->m->sender, &peer))
            send_msg(s, NULL, peer, TE_KV_MSG_CANCELLED, q->id, 0, 0);
    } else if (all) {
        q->status = 0;
    } else {
        return;
    }
    q->ended = 1;
    pthread_cond_broadcast(&s->cond);
}

/* ------------------------------------------------------------ writes */

/* The paged write of region r (layer * kv_factor + kv) of request q. */
static void region_request(te_kv_source *s, struct sreq *q, uint32_t r,
                           te_peer peer, te_request *w)
{
    te_request_init(w, TE_OP_PAGED);
    w->flags = TE_F_IMM;
    w->imm = q->m->imm;
    w->group = s->group;
    w->u.paged.peer = peer;
    w->u.paged.src = s->mr[s->c->regions[r].alloc];
    w->u.paged.src_off = s->c->regions[r].offset;
    w->u.paged.src_stride = s->c->regions[r].page_stride;
    w->u.paged.src_idx = q->src_pages;
    w->u.paged.dst = &q->dst[q->m->regions[r].alloc];
    w->u.paged.dst_off = q->m->regions[r].offset;
    w->u.paged.dst_stride = q->m->regions[r].page_stride;
    w->u.paged.dst_idx = q->m->pages;
    w->u.paged.page_len = s->c->page_bytes;
    w->u.paged.count = q->npages;
}

static void hidden_request(te_kv_source *s, struct sreq *q, te_peer peer,
                           te_request *w)
{
    te_request_init(w, TE_OP_WRITE);
    w->flags = TE_F_IMM;
    w->imm = q->m->imm;
    w->group = s->group;
    w->u.xfer.peer = peer;
    w->u.xfer.local = s->mr[s->c->d.hidden_alloc];
    w->u.xfer.local_off = s->c->d.hidden_offset +
                          (uint64_t)q->hidden_slot * s->c->d.hidden_stride;
    w->u.xfer.remote = &q->dst[q->m->hidden_alloc];
    w->u.xfer.remote_off = q->m->hidden_off;
    w->u.xfer.len = s->c->hidden_bytes;
}

/* Write every reported, unwritten layer (and the hidden state) of an
 * accepted request (lock held). */
static void flush(te_kv_source *s, struct sreq *q)
{
    te_peer peer;
    if (!q->accepted || q->cancelled || q->failed || q->ended ||
        !peer_of(s, q->m->sender, &peer))
        return;
    uint32_t kvf = s->c->d.shape.kv_factor;
    te_request w;
    for (uint32_t l = 0; l < s->c->d.shape.layers && !q->failed; l++) {
        if (q->layer[l] != 1)
            continue;
        q->layer[l] = 2;
        q->left[l] = kvf;
        for (uint32_t k = 0; k < kvf && !q->failed; k++) {
            region_request(s, q, l * kvf + k, peer, &w);
            submit(s, q, &w, l + 1);
        }
    }
    if (q->hidden_reported && !q->hidden_written && !q->failed &&
        q->m->hidden_bytes) {
        q->hidden_written = 1;
        hidden_request(s, q, peer, &w);
        submit(s, q, &w, 0);
    }
    maybe_end(s, q);
}

/* ------------------------------------------------------------ starting */

/* The decoder's memory descriptors for q into q->dst: its version-1
 * request's inline one, or the set its CACHE_DESCS carried (lay, the
 * sender's newest). A positive errno with why set if they are unusable. */
static int take_descs(struct sreq *q, const struct dlayout *lay, char *why,
                      size_t n)
{
    const te_kv_msg *m = q->m;
    uint32_t na = m->nallocs ? m->nallocs : 1;
    if (m->nallocs && lay->id != m->layout) {
        snprintf(why, n, "layout %u: the decoder registered anew since "
                 "(layout %u): that registration was fenced", m->layout,
                 lay->id);
        return ESTALE;
    }
    if (m->nallocs && (lay->bad || lay->nallocs != m->nallocs)) {
        snprintf(why, n, "layout %u: its descriptors %s", m->layout,
                 lay->bad ? "did not parse (our log says why)"
                          : "are for another number of allocations");
        return EBADMSG;
    }
    free(q->dst);
    if (!(q->dst = calloc(na, sizeof(*q->dst)))) {
        snprintf(why, n, "out of memory for %u descriptors", na);
        return ENOMEM;
    }
    if (m->nallocs) {
        memcpy(q->dst, lay->desc, na * sizeof(*q->dst));
    } else if (te_desc_parse(m->desc, m->desc_len, &q->dst[0])) {
        snprintf(why, n, "descriptor: %s", te_last_error());
        return EBADMSG;
    }
    return 0;
}

/* Why the decoder's request m cannot be served from our cache, naming the
 * field (0 if it can). Nothing is written before this passed. */
static int check(te_kv_source *s, struct sreq *q, const struct dlayout *lay,
                 char *why, size_t n)
{
    const te_kv_msg *m = q->m;
    const te_kv_shape *sh = &s->c->d.shape;
    struct { const char *name; uint64_t theirs, ours; } f[] = {
        {"layers", m->layers, sh->layers},
        {"kv_factor", m->kv_factor, sh->kv_factor},
        {"elem_bytes (dtype)", m->elem_bytes, sh->elem_bytes},
        {"tokens_per_page", m->tokens_per_page, sh->tokens_per_page},
        {"page_bytes (heads x head_dim)", m->page_bytes, s->c->page_bytes},
        {"nregions", m->nregions, (uint64_t)sh->layers * sh->kv_factor},
        {"tokens", m->tokens, q->tokens},
        {"npages", m->npages, q->npages},
    };
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
        if (f[i].theirs != f[i].ours) {
            snprintf(why, n, "%s: the decoder's %" PRIu64 ", ours %" PRIu64,
                     f[i].name, f[i].theirs, f[i].ours);
            return EINVAL;
        }
    if (m->hidden_bytes && (m->hidden_bytes != s->c->hidden_bytes ||
                            q->hidden_slot == UINT32_MAX)) {
        snprintf(why, n, "hidden_bytes: the decoder wants %u, we have %" PRIu64
                 " (slot %s)", m->hidden_bytes, s->c->hidden_bytes,
                 q->hidden_slot == UINT32_MAX ? "not given to begin" : "given");
        return EINVAL;
    }
    int bad = take_descs(q, lay, why, n);
    if (bad)
        return bad;
    uint32_t top = 0;
    for (uint32_t k = 0; k < m->npages; k++)
        top = m->pages[k] > top ? m->pages[k] : top;
    for (uint32_t r = 0; r < m->nregions; r++) {
        const te_mr_desc *dst = &q->dst[m->regions[r].alloc];
        unsigned __int128 end = (unsigned __int128)m->regions[r].page_stride *
                                    top + m->regions[r].offset + s->c->page_bytes;
        if (m->regions[r].page_stride < s->c->page_bytes || end > dst->len) {
            snprintf(why, n, "regions[%u]: page %u ends past the decoder's "
                     "allocation %u of %" PRIu64 " bytes (or stride below a "
                     "page)", r, top, m->regions[r].alloc, dst->len);
            return ERANGE;
        }
    }
    const te_mr_desc *hd = &q->dst[m->hidden_alloc];
    if (m->hidden_bytes && (m->hidden_off > hd->len ||
                            m->hidden_bytes > hd->len - m->hidden_off)) {
        snprintf(why, n, "hidden_off %" PRIu64 " ends past the decoder's "
                 "allocation %u", m->hidden_off, m->hidden_alloc);
        return ERANGE;
    }
    return 0;
}

/* Sum of te_expected_imms over exactly the writes we will make. */
static int64_t count_imms(te_kv_source *s, struct sreq *q, te_peer peer)
{
    int64_t total = 0;
    te_request w;
    uint32_t nreg = q->m->nregions;
    for (uint32_t r = 0; r <= nreg; r++) {
        if (r == nreg && !q->m->hidden_bytes)
            break;
        if (r < nreg)
            region_request(s, q, r, peer, &w);
        else
            hidden_request(s, q, peer, &w);
        int64_t k = te_expected_imms(s->e, &w, 0);
        if (k < 0)
            return k;
        total += k;
    }
    return total;
}

/* The newest descriptor set of m's sender, or NULL. */
static const struct dlayout *layout_of(te_kv_source *s, const te_kv_msg *m)
{
    int i = dec_index(s, m->sender, 0);
    return i < 0 ? NULL : s->dec[i].lay;
}

/* Both halves are here (and the descriptors a version-2 request names):
 * check, ACCEPT, write what is done (lock held). */
static void try_start(te_kv_source *s, struct sreq *q)
{
    te_peer peer;
    if (!q->begun || !q->m || q->accepted || q->ended ||
        !peer_of(s, q->m->sender, &peer))
        return;
    const struct dlayout *lay = layout_of(s, q->m);
    if (q->m->nallocs &&
        (!lay || lay->id < q->m->layout ||
         (lay->id == q->m->layout && !lay->bad && lay->have < lay->nallocs)))
        return; /* its CACHE_DESCS are still on the way */
    char why[200];
    int bad = check(s, q, lay, why, sizeof(why));
    int64_t count = bad ? 0 : count_imms(s, q, peer);
    if (!bad && count <= 0) {
        snprintf(why, sizeof(why), "counting immediates: %s",
                 te_last_error());
        bad = EINVAL;
    }
    if (bad) {
        te_log_printf(TE_LOG_WARN, "te-kv", "source: request %" PRIu64
                      " rejected: %s", q->id, why);
        snprintf(q->why, sizeof(q->why), "request %" PRIu64 " rejected: %s",
                 q->id, why);
        send_msg(s, NULL, peer, TE_KV_MSG_REJECT, q->id, (uint32_t)bad, 0);
        q->status = -bad;
        q->ended = 1;
        pthread_cond_broadcast(&s->cond);
        return;
    }
    q->accepted = 1;
    send_msg(s, q, peer, TE_KV_MSG_ACCEPT, q->id, 0, (uint64_t)count);
    flush(s, q);
}

/* ------------------------------------------------------------ messages */

static int tombstoned(te_kv_source *s, uint64_t sender, uint64_t id)
{
    for (uint32_t t = 0; t < SRC_TOMBS; t++)
        if (s->tomb[t].id == id && s->tomb[t].sender == sender && id) {
            s->tomb[t].id = 0;
            return 1;
        }
    return 0;
}

static void on_cancel(te_kv_source *s, const te_kv_msg *m)
{
    struct sreq *q = find(s, m->request_id);
    te_peer peer;
    if (q && q->m && !q->ended) {
        q->cancelled = 1; /* no further write; CANCELLED once quiet */
        if (!q->accepted) {
            q->accepted = 1; /* nothing was written: end it now */
            q->layer = q->layer ? q->layer
                                : calloc(s->c->d.shape.layers, 1);
        }
        maybe_end(s, q);
        return;
    }
    /* Not here (yet), or ended: its writes all completed, if any. A
     * REQUEST that arrives after this one is dropped (tombstone). */
    if (!q || !q->m) {
        s->tomb[s->tomb_next].sender = m->sender;
        s->tomb[s->tomb_next].id = m->request_id;
        s->tomb_next = (s->tomb_next + 1) % SRC_TOMBS;
    }
    if (peer_of(s, m->sender, &peer))
        send_msg(s, NULL, peer, TE_KV_MSG_CANCELLED, m->request_id, ENOENT, 0);
}

static void on_request(te_kv_source *s, te_kv_msg *m, te_peer from)
{
    if (tombstoned(s, m->sender, m->request_id)) {
        free(m);
        return;
    }
    struct sreq *q = find(s, m->request_id);
    if (q && q->m) {
        free(m);
        return; /* a duplicate */
    }
    if (!q && !(q = slot_new(s, m->request_id))) {
        send_msg(s, NULL, from, TE_KV_MSG_REJECT, m->request_id, EBUSY, 0);
        free(m);
        return;
    }
    q->m = m;
    try_start(s, q);
}

/* Requests of decoder `sender` that waited for its HELLO or descriptors. */
static void retry_sender(te_kv_source *s, uint64_t sender)
{
    for (int i = 0; i < SRC_SLOTS; i++)
        if (s->req[i].used && s->req[i].m && s->req[i].m->sender == sender)
            try_start(s, &s->req[i]);
}

/* The set m->layout of the sender: its newest replaces an older one (the
 * decoder registers anew only after fencing us), an older one's late
 * chunks are dropped. Lock held. */
static struct dlayout *layout_for(te_kv_source *s, const te_kv_msg *m)
{
    int i = dec_index(s, m->sender, 1);
    if (i < 0) {
        te_log_printf(TE_LOG_WARN, "te-kv", "source: descriptors of decoder "
                      "%016llx dropped: %d decoders known already",
                      (unsigned long long)m->sender, SRC_DECODERS);
        return NULL;
    }
    struct dlayout *l = s->dec[i].lay;
    if (l && l->id > m->layout)
        return NULL;
    if (l && l->id == m->layout)
        return l;
    struct dlayout *n = calloc(1, sizeof(*n));
    if (n && (!(n->got = calloc(m->nallocs, 1)) ||
              !(n->desc = calloc(m->nallocs, sizeof(*n->desc))))) {
        layout_free(n);
        n = NULL;
    }
    if (!n) {
        te_log_printf(TE_LOG_ERROR, "te-kv", "source: no memory for %u "
                      "descriptors (its requests time out at the decoder)",
                      m->nallocs);
        return NULL;
    }
    n->id = m->layout;
    n->nallocs = m->nallocs;
    layout_free(l);
    s->dec[i].lay = n;
    return n;
}

/* A CACHE_DESCS: store and check its descriptors; once the set is whole,
 * start the sender's requests that waited for it. Lock held. */
static void on_descs(te_kv_source *s, const te_kv_msg *m)
{
    struct dlayout *l = layout_for(s, m);
    if (!l)
        return;
    if (l->nallocs != m->nallocs) {
        l->bad = 1;
        te_log_printf(TE_LOG_WARN, "te-kv", "source: decoder %016llx layout "
                      "%u: nallocs %u, earlier %u", (unsigned long long)
                      m->sender, m->layout, m->nallocs, l->nallocs);
    }
    for (uint32_t k = 0; k < m->ndescs && !l->bad; k++) {
        uint32_t a = m->first + k; /* < nallocs: the parser checked */
        if (l->got[a])
            continue; /* a duplicate */
        if (te_desc_parse(m->descs[k], m->desc_lens[k], &l->desc[a])) {
            l->bad = 1;
            te_log_printf(TE_LOG_WARN, "te-kv", "source: decoder %016llx "
                          "layout %u descriptor %u: %s", (unsigned long long)
                          m->sender, m->layout, a, te_last_error());
        }
        l->got[a] = 1;
        l->have++;
    }
    if (l->bad || l->have == l->nallocs)
        retry_sender(s, m->sender);
}

static void on_msg(int group, te_peer from, const void *data, size_t len,
                   void *arg)
{
    te_kv_source *s = arg;
    (void)group;
    te_kv_msg *m = malloc(sizeof(*m));
    if (!m)
        return;
    if (te_kv_msg_parse(data, len, m)) {
        te_log_printf(TE_LOG_WARN, "te-kv", "source: dropped a message from "
                      "peer %u: %s", from, te_kv_last_error());
        free(m);
        return;
    }
    pthread_mutex_lock(&s->lock);
    te_peer peer;
    if (m->type == TE_KV_MSG_HELLO) {
        int i = -1;
        if (te_peer_add(s->e, s->group, m->addr, m->addr_len, &peer))
            te_log_printf(TE_LOG_WARN, "te-kv", "source: hello: %s",
                          te_last_error());
        else if ((i = dec_index(s, m->sender, 1)) >= 0 &&
                 !s->dec[i].has_peer) {
            s->dec[i].peer = peer;
            s->dec[i].has_peer = 1;
        }
        retry_sender(s, m->sender); /* requests that overtook it */
        free(m);
    } else if (m->type == TE_KV_MSG_CACHE_DESCS) {
        on_descs(s, m);
        free(m);
    } else if (m->type == TE_KV_MSG_CACHE_REQUEST) {
        on_request(s, m, from);
    } else if (m->type == TE_KV_MSG_CANCEL) {
        on_cancel(s, m);
        free(m);
    } else {
        te_log_printf(TE_LOG_WARN, "te-kv", "source: message type %u about "
                      "request %" PRIu64 " dropped (a te_kv_source serves "
                      "only CACHE_REQUESTs: the decoder must use "
                      "te_kv_decoder_submit_pages)", m->type, m->request_id);
        if (m->type == TE_KV_MSG_REQUEST && peer_of(s, m->sender, &peer))
            send_msg(s, NULL, peer, TE_KV_MSG_REJECT, m->request_id,
                     EPROTO, 0);
        free(m);
    }
    pthread_mutex_unlock(&s->lock);
}


/* ------------------------------------------------------------------ API */

/* Deregister every allocation still registered: 0, or the first error
 * (-EBUSY for a while after writes completed: the transport may still
 * hold a completed op, so it is retried for up to a second). */
static int dereg_all(te_kv_source *s)
{
    int first = 0;
    for (uint32_t a = 0; a < s->c->nallocs; a++) {
        if (!s->mr[a])
            continue;
        int rc = te_mr_dereg(s->e, s->mr[a]);
        for (int i = 0; rc == -EBUSY && i < 1000; i++) {
            usleep(1000);
            rc = te_mr_dereg(s->e, s->mr[a]);
        }
        if (rc && !first)
            first = rc;
        if (!rc)
            s->mr[a] = NULL;
    }
    return first;
}

int te_kv_source_new(te_engine *e, int group, te_kv_cache *c, int timeout_ms,
                     te_kv_source **out)
{
    kv_clear();
    if (!e || !c || !out)
        return kv_fail(-EINVAL, "te_kv_source_new: NULL argument");
    if (timeout_ms < 0 || timeout_ms > SRC_MAX_TIMEOUT_MS)
        return kv_fail(-EINVAL, "te_kv_source_new: timeout_ms %d out of range "
                       "(0 = 30 s, or 1..%d)", timeout_ms, SRC_MAX_TIMEOUT_MS);
    te_kv_source *s = calloc(1, sizeof(*s));
    if (!s)
        return kv_fail(-ENOMEM, "te_kv_source_new: out of memory");
    s->e = e;
    s->group = group;
    s->timeout_ms = timeout_ms ? timeout_ms : 30000;
    s->c = c;
    int rc = 0;
    if (!(s->mr = calloc(c->nallocs, sizeof(*s->mr)))) {
        free(s);
        return kv_fail(-ENOMEM, "te_kv_source_new: out of memory");
    }
    for (uint32_t a = 0; a < c->nallocs && !rc; a++)
        if ((rc = te_mr_reg(e, group, c->allocs[a].base, c->allocs[a].len, 0,
                            (uint32_t)c->d.mem, &s->mr[a])))
            rc = kv_fail(rc, "te_kv_source_new: registering allocation %u "
                         "of the cache: %s", a, te_last_error());
    if (rc) {
        dereg_all(s);
        free(s->mr);
        free(s);
        return rc;
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    if ((rc = te_set_recv_handler(e, group, on_msg, s))) {
        rc = kv_fail(rc, "te_kv_source_new: %s", te_last_error());
        dereg_all(s);
        free(s->mr);
        free(s);
        return rc;
    }
    kv_cache_hold(c);
    *out = s;
    return 0;
}

static int check_pages(const te_kv_source *s, uint32_t tokens,
                       const uint32_t *pages, uint32_t n, uint32_t hidden)
{
    const te_kv_cache_desc *d = &s->c->d;
    uint32_t want = tokens ? te_kv_pages_for(&d->shape, tokens) : 0;
    if (!tokens || !pages || n != want || n > TE_KV_MAX_PAGES)
        return kv_fail(-EINVAL, "src_pages: %u page ids for %u tokens (want "
                       "%u, 1..%d)", n, tokens, want, TE_KV_MAX_PAGES);
    for (uint32_t k = 0; k < n; k++) {
        if (pages[k] >= d->pages)
            return kv_fail(-EINVAL, "src_pages[%u] = %u: out of range (the "
                           "cache has %u pages)", k, pages[k], d->pages);
        for (uint32_t j = 0; j < k; j++)
            if (pages[j] == pages[k])
                return kv_fail(-EINVAL, "src_pages[%u] = %u: listed twice "
                               "(also src_pages[%u])", k, pages[k], j);
    }
    if (hidden != UINT32_MAX && hidden >= d->hidden_slots)
        return kv_fail(-EINVAL, "hidden_slot %u: out of range (%u slots)",
                       hidden, d->hidden_slots);
    return 0;
}

int te_kv_source_begin(te_kv_source *s, uint64_t id, uint32_t tokens,
                       const uint32_t *src_pages, uint32_t n,
                       uint32_t hidden_slot)
{
    kv_clear();
    int rc = check_pages(s, tokens, src_pages, n, hidden_slot);
    if (rc)
        return rc;
    pthread_mutex_lock(&s->lock);
    struct sreq *q = find(s, id);
    if (q && (q->begun || q->ended)) {
        /* begun: twice; ended before begin: cancelled or refused */
        rc = q->begun ? kv_fail(-EEXIST, "request %" PRIu64 " is in progress",
                                id)
                      : kv_fail(q->status, "%s", q->why);
        if (!q->begun)
            slot_free(q);
        pthread_mutex_unlock(&s->lock);
        return rc;
    }
    if (!q && !(q = slot_new(s, id))) {
        pthread_mutex_unlock(&s->lock);
        return kv_fail(-EBUSY, "%d requests in progress already", SRC_SLOTS);
    }
    q->src_pages = malloc(n * sizeof(uint32_t));
    q->layer = calloc(s->c->d.shape.layers, 1);
    q->left = calloc(s->c->d.shape.layers, sizeof(uint32_t));
    if (!q->src_pages || !q->layer || !q->left) {
        int had_msg = q->m != NULL;
        free(q->src_pages);
        free(q->layer);
        free(q->left);
        q->src_pages = NULL;
        q->layer = NULL;
        q->left = NULL;
        if (!had_msg)
            slot_free(q);
        pthread_mutex_unlock(&s->lock);
        return kv_fail(-ENOMEM, "request %" PRIu64 ": out of memory", id);
    }
    memcpy(q->src_pages, src_pages, n * sizeof(uint32_t));
    q->tokens = tokens;
    q->npages = n;
    q->hidden_slot = hidden_slot;
    q->begun = 1;
    try_start(s, q);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* Mark layer (or the hidden state: layer == UINT32_MAX) reported and write
 * it if the request is accepted. */
static int report(te_kv_source *s, uint64_t id, uint32_t layer)
{
    kv_clear();
    pthread_mutex_lock(&s->lock);
    struct sreq *q = find(s, id);
    int rc = 0;
    if (!q || !q->begun)
        rc = kv_fail(-ENOENT, "request %" PRIu64 ": unknown (no "
                     "te_kv_source_begin)", id);
    else if (layer != UINT32_MAX && layer >= s->c->d.shape.layers)
        rc = kv_fail(-ERANGE, "layer %u: out of range (%u layers)", layer,
                     s->c->d.shape.layers);
    else if (layer == UINT32_MAX ? q->hidden_reported : q->layer[layer] != 0)
        rc = layer == UINT32_MAX
                 ? kv_fail(-EALREADY, "request %" PRIu64 ": hidden state "
                           "reported twice", id)
                 : kv_fail(-EALREADY, "request %" PRIu64 ": layer %u "
                           "reported twice", id, layer);
    if (!rc) {
        if (layer == UINT32_MAX)
            q->hidden_reported = 1;
        else
            q->layer[layer] = 1;
        flush(s, q);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int te_kv_source_layer_done(te_kv_source *s, uint64_t id, uint32_t layer)
{
    if (layer == UINT32_MAX)
        return kv_fail(-ERANGE, "layer %u: out of range", layer);
    return report(s, id, layer);
}

int te_kv_source_hidden_done(te_kv_source *s, uint64_t id)
{
    return report(s, id, UINT32_MAX);
}

int te_kv_source_wait(te_kv_source *s, uint64_t id, int timeout_ms)
{
    kv_clear();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(timeout_ms > 0 ?
                                                    timeout_ms : 0) * 1000000ull;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    pthread_mutex_lock(&s->lock);
    struct sreq *q = find(s, id);
    if (!q || !q->begun) {
        pthread_mutex_unlock(&s->lock);
        return kv_fail(-ENOENT, "request %" PRIu64 ": unknown", id);
    }
    while (!q->ended &&
           pthread_cond_timedwait(&s->cond, &s->lock, &ts) != ETIMEDOUT)
        ;
    int rc;
    if (!q->ended) {
        rc = kv_fail(-ETIMEDOUT, "request %" PRIu64 ": not ended within %d ms"
                     " (%s)", id, timeout_ms, !q->m ? "the decoder's request "
                     "has not arrived" : !q->accepted ? "waiting for the "
                     "decoder's HELLO" : "layers not all reported, or writes "
                     "in flight");
    } else {
        rc = q->status;
        if (rc)
            kv_fail(rc, "%s", q->why);
        slot_free(q);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void te_kv_source_free(te_kv_source *s)
{
    if (!s)
        return;
    te_set_recv_handler(s->e, s->group, NULL, NULL);
    /* Stop every request: no further write; wait for those in flight. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (s->timeout_ms + 10000) / 1000;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    int busy = 1, late = 0;
    while (busy && !late) {
        busy = s->replies > 0;
        for (int i = 0; i < SRC_SLOTS; i++) {
            s->req[i].failed = s->req[i].failed ? s->req[i].failed
                                                : -ECANCELED;
            busy |= s->req[i].outstanding > 0;
        }
        if (busy)
            late = pthread_cond_timedwait(&s->cond, &s->lock, &ts) ==
                   ETIMEDOUT;
    }
    pthread_mutex_unlock(&s->lock);
    int rc = late ? -ETIMEDOUT : dereg_all(s);
    if (rc) {
        te_log_printf(TE_LOG_ERROR, "te-kv", "source: free: %s: its state is "
                      "kept (leaked) and the cache stays in use",
                      late ? "writes still outstanding past their deadline"
                           : te_last_error());
        return;
    }
    kv_cache_put(s->c);
    for (int i = 0; i < SRC_SLOTS; i++)
        if (s->req[i].used)
            slot_free(&s->req[i]);
    for (uint32_t i = 0; i < s->ndec; i++)
        layout_free(s->dec[i].lay);
    free(s->mr);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}
