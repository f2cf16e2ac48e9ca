"""cffi (API mode) build of transferengine._te_kv, the binding of libte-kv's
engine-owned way (apps/kvcache/include/te/kv.h, docs/kvcache.md): te_kv_cache,
te_kv_source, te_kv_decoder_new_cache / _submit_pages. Compiled against
te/kv.h so the C compiler checks every layout declared here. Built like the
core module (_build.py): ``python3 python/transferengine/_kv_build.py OUTDIR``
(CMake target python-kv-binding), finding headers and libraries through
TE_INCLUDE_DIR / TE_KV_INCLUDE_DIR / TE_LIBRARY_DIR / TE_KV_LIBRARY_DIR, else
the source tree and ./build. The engine comes from the core module as an
address (te_engine * has no type shared between the two modules).

Completion callbacks run on the engine's threads; rather than call into
Python there, a small C queue (kvpy_box) collects them and Python waits on
it with the GIL released (cffi releases it around every call).
"""
from _app_build import app_builder, main

CDEF = r"""
#define TE_KV_MSG_MAX ...
#define TE_KV_MAX_REGIONS ...
#define TE_KV_MAX_PAGES ...
typedef struct te_engine te_engine;
typedef struct te_kv_shape {
    char name[48];
    uint32_t layers, kv_heads, head_dim, elem_bytes, kv_factor,
             tokens_per_page, hidden, reserved;
} te_kv_shape;
#define TE_KV_MAX_ALLOCS ...
typedef struct te_kv_region {
    uint64_t offset, page_stride;
    uint32_t alloc, reserved;
} te_kv_region;
typedef struct te_kv_alloc { void *base; uint64_t len; } te_kv_alloc;
typedef struct te_kv_cache_desc {
    te_kv_shape shape;
    void *base;
    uint64_t len;
    int32_t mem;
    uint32_t pages;
    const te_kv_region *regions;
    uint64_t hidden_offset, hidden_stride;
    uint32_t hidden_slots, nallocs;
    const te_kv_alloc *allocs;
    uint32_t hidden_alloc, reserved;
} te_kv_cache_desc;
typedef struct te_kv_cache te_kv_cache;
typedef struct te_kv_source te_kv_source;
typedef struct te_kv_decoder te_kv_decoder;
typedef void (*te_kv_done_fn)(uint64_t, int, const char *, void *);
typedef void (*te_kv_layer_fn)(uint64_t, uint32_t, void *);
typedef struct te_kv_decoder_opts {
    te_kv_shape shape;
    uint32_t pool_pages, max_requests;
    int32_t group, accept_timeout_ms, cancel_timeout_ms, poison_freed;
} te_kv_decoder_opts;

int te_kv_shape_custom(uint32_t layers, uint32_t kv_heads, uint32_t head_dim,
                       uint32_t elem_bytes, uint32_t kv_factor, uint32_t hidden,
                       uint32_t page_bytes, te_kv_shape *out);
uint32_t te_kv_pages_for(const te_kv_shape *s, uint32_t tokens);
const char *te_kv_last_error(void);
int te_kv_cache_new(const te_kv_cache_desc *d, te_kv_cache **out);
int te_kv_cache_free(te_kv_cache *c);
int te_kv_source_new(te_engine *e, int group, te_kv_cache *c, int timeout_ms,
                     te_kv_source **out);
int te_kv_source_begin(te_kv_source *s, uint64_t id, uint32_t tokens,
                       const uint32_t *src_pages, uint32_t n,
                       uint32_t hidden_slot);
int te_kv_source_layer_done(te_kv_source *s, uint64_t id, uint32_t layer);
int te_kv_source_hidden_done(te_kv_source *s, uint64_t id);
int te_kv_source_wait(te_kv_source *s, uint64_t id, int timeout_ms);
void te_kv_source_free(te_kv_source *s);
int te_kv_decoder_new_cache(te_engine *e, const te_kv_decoder_opts *o,
                            te_kv_cache *c, te_kv_decoder **out);
int te_kv_decoder_add_prefiller(te_kv_decoder *d, const void *addr,
                                size_t len, uint32_t *id);
int te_kv_decoder_submit_pages(te_kv_decoder *d, uint32_t pf, uint64_t id,
                               uint32_t tokens, const uint32_t *pages,
                               uint32_t n, uint32_t hidden_slot,
                               int timeout_ms, te_kv_done_fn cb, void *arg);
int te_kv_decoder_on_layer(te_kv_decoder *d, te_kv_layer_fn fn, void *arg);
int te_kv_decoder_cancel(te_kv_decoder *d, uint64_t id);
int te_kv_decoder_release(te_kv_decoder *d, uint64_t id);
void te_kv_decoder_free(te_kv_decoder *d);

typedef struct kvpy_box kvpy_box;
kvpy_box *kvpy_box_new(void);
void kvpy_box_free(kvpy_box *b);
te_kv_done_fn kvpy_done_fn(void);
te_kv_layer_fn kvpy_layer_fn(void);
int kvpy_box_wait(kvpy_box *b, int timeout_ms, uint64_t *id, int *status,
                  int *layer, char *why, size_t why_len);
"""

# The completion queue: one node per te_kv_done_fn call, taken in order.
SOURCE = r"""
#include <te/kv.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct kvpy_node { struct kvpy_node *next; uint64_t id; int status;
                   int layer; /* -1: the request ended */ char why[300]; };
typedef struct kvpy_box { pthread_mutex_t lock; pthread_cond_t cond;
                          struct kvpy_node *head, *tail; } kvpy_box;

static kvpy_box *kvpy_box_new(void)
{
    kvpy_box *b = calloc(1, sizeof(*b));
    if (b) {
        pthread_mutex_init(&b->lock, NULL);
        pthread_cond_init(&b->cond, NULL);
    }
    return b;
}

static void kvpy_box_free(kvpy_box *b)
{
    while (b && b->head) {
        struct kvpy_node *n = b->head;
        b->head = n->next;
        free(n);
    }
    free(b);
}

static void kvpy_push(kvpy_box *b, uint64_t id, int status, int layer,
                      const char *why)
{
    struct kvpy_node *n = calloc(1, sizeof(*n));
    if (!n)
        return; /* the request's future then times out in Python */
    n->id = id;
    n->status = status;
    n->layer = layer;
    snprintf(n->why, sizeof(n->why), "%s", why ? why : "");
    pthread_mutex_lock(&b->lock);
    if (b->tail)
        b->tail->next = n;
    else
        b->head = n;
    b->tail = n;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

static void kvpy_on_done(uint64_t id, int status, const char *why, void *arg)
{
    kvpy_push(arg, id, status, -1, why);
}

static void kvpy_on_layer(uint64_t id, uint32_t layer, void *arg)
{
    kvpy_push(arg, id, 0, (int)layer, "");
}

static te_kv_done_fn kvpy_done_fn(void) { return kvpy_on_done; }
static te_kv_layer_fn kvpy_layer_fn(void) { return kvpy_on_layer; }

/* 1 and the oldest completion, or 0 after timeout_ms with none. */
static int kvpy_box_wait(kvpy_box *b, int timeout_ms, uint64_t *id,
                         int *status, int *layer, char *why, size_t why_len)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&b->lock);
    while (!b->head &&
           pthread_cond_timedwait(&b->cond, &b->lock, &ts) != ETIMEDOUT)
        ;
    struct kvpy_node *n = b->head;
    if (n) {
        b->head = n->next;
        if (!b->head)
            b->tail = NULL;
    }
    pthread_mutex_unlock(&b->lock);
    if (!n)
        return 0;
    *id = n->id;
    *status = n->status;
    *layer = n->layer;
    snprintf(why, why_len, "%s", n->why);
    free(n);
    return 1;
}
"""


ffibuilder = app_builder("_te_kv", "kvcache", "KV", "te-kv", CDEF,
                         SOURCE, extra_libs=["pthread"])

if __name__ == "__main__":
    main(ffibuilder)
