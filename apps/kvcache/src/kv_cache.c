/* The engine's own KV cache (te/kv.h, te_kv_cache_*): its description is
 * checked once, here, so that the decoder and the source can trust every
 * page id they are given that is below `pages`: each page of each region,
 * and each hidden slot, lies inside the one allocation and overlaps no
 * other (a write for one layer's K can never land in another's V). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"

static pthread_mutex_t kv_cache_lock = PTHREAD_MUTEX_INITIALIZER;

uint64_t te_kv_region_page_bytes(const te_kv_shape *s)
{
    return s->kv_factor ? te_kv_page_bytes(s) / s->kv_factor : 0;
}

struct span {
    uint64_t start, end; /* [start, end) from base */
    uint32_t what;       /* region index, or TE_KV_MAX_REGIONS: hidden */
    uint32_t id;         /* page id or hidden slot */
};

static int by_start(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static void name_span(const struct span *s, const te_kv_shape *sh, char *b,
                      size_t n)
{
    if (s->what == TE_KV_MAX_REGIONS)
        snprintf(b, n, "hidden slot %u", s->id);
    else
        snprintf(b, n, "regions[%u] (layer %u %s) page %u", s->what,
                 s->what / sh->kv_factor, sh->kv_factor == 1 ? "latent" :
                 s->what % 2 ? "V" : "K", s->id);
}

/* Every page of every region and every hidden slot, sorted by address:
 * neighbours must not overlap. A region whose stride is at least a page
 * cannot overlap itself, but K and V pages may interleave (FlashInfer's
 * [page][kv] layout), so the check is per page, not per region span. */
static int check_overlap(const te_kv_cache *c)
{
    const te_kv_cache_desc *d = &c->d;
    uint32_t nreg = d->shape.layers * d->shape.kv_factor;
    uint64_t n = (uint64_t)nreg * d->pages + d->hidden_slots;
    struct span *v = malloc(n * sizeof(*v));
    if (!v)
        return kv_fail(-ENOMEM, "te_kv_cache_new: out of memory");
    uint64_t k = 0;
    for (uint32_t r = 0; r < nreg; r++)
        for (uint32_t p = 0; p < d->pages; p++, k++)
            v[k] = (struct span){c->regions[r].offset +
                                     p * c->regions[r].page_stride, 0, r, p};
    for (uint32_t h = 0; h < d->hidden_slots; h++, k++)
        v[k] = (struct span){d->hidden_offset + h * d->hidden_stride, 0,
                             TE_KV_MAX_REGIONS, h};
    for (k = 0; k < n; k++)
        v[k].end = v[k].start + (v[k].what == TE_KV_MAX_REGIONS ?
                                 c->hidden_bytes : c->page_bytes);
    qsort(v, n, sizeof(*v), by_start);
    int rc = 0;
    for (k = 1; k < n && !rc; k++)
        if (v[k].start < v[k - 1].end) {
            char a[80], b[80];
            name_span(&v[k - 1], &d->shape, a, sizeof(a));
            name_span(&v[k], &d->shape, b, sizeof(b));
            rc = kv_fail(-EINVAL, "te_kv_cache_new: %s overlaps %s", a, b);
        }
    free(v);
    return rc;
}

/* The last byte of `count` items of `size` bytes every `stride` from `off`
 * must be inside len (no overflow: 128-bit). */
static int inside(uint64_t off, uint64_t stride, uint64_t count,
                  uint64_t size, uint64_t len)
{
    return (unsigned __int128)off + (unsigned __int128)stride * (count - 1) +
               size <= len;
}

static int check_desc(const te_kv_cache_desc *d, uint64_t page_bytes,
                      uint64_t hidden_bytes)
{
    const te_kv_shape *s = &d->shape;
    uint64_t nreg = (uint64_t)s->layers * s->kv_factor;
    if (!s->layers || !s->tokens_per_page || !page_bytes)
        return kv_fail(-EINVAL, "te_kv_cache_new: shape: not a shape from "
                       "te_kv_shape_* (layers %u, tokens_per_page %u)",
                       s->layers, s->tokens_per_page);
    if (nreg > TE_KV_MAX_REGIONS)
        return kv_fail(-EINVAL, "te_kv_cache_new: shape: %u layers x %u "
                       "regions > %d", s->layers, s->kv_factor,
                       TE_KV_MAX_REGIONS);
    if (!d->base || !d->len)
        return kv_fail(-EINVAL, "te_kv_cache_new: base/len: no memory");
    if (d->mem != TE_MEM_HOST && d->mem != TE_MEM_CUDA)
        return kv_fail(-EINVAL, "te_kv_cache_new: mem %d: TE_MEM_HOST or "
                       "TE_MEM_CUDA", d->mem);
    if (!d->pages || d->pages > (1u << 26))
        return kv_fail(-EINVAL, "te_kv_cache_new: pages %u (1..2^26)",
                       d->pages);
    if (!d->regions)
        return kv_fail(-EINVAL, "te_kv_cache_new: regions: NULL");
    for (uint32_t r = 0; r < nreg; r++) {
        const te_kv_region *g = &d->regions[r];
        if (g->page_stride < page_bytes)
            return kv_fail(-EINVAL, "te_kv_cache_new: regions[%u].page_stride"
                           " %" PRIu64 " < a page (%" PRIu64 " bytes)", r,
                           g->page_stride, page_bytes);
        if (!inside(g->offset, g->page_stride, d->pages, page_bytes, d->len))
            return kv_fail(-EINVAL, "te_kv_cache_new: regions[%u]: %u pages "
                           "from offset %" PRIu64 " every %" PRIu64 " bytes "
                           "end past len %" PRIu64, r, d->pages, g->offset,
                           g->page_stride, d->len);
    }
    if (d->hidden_slots &&
        (d->hidden_stride < hidden_bytes ||
         !inside(d->hidden_offset, d->hidden_stride, d->hidden_slots,
                 hidden_bytes, d->len)))
        return kv_fail(-EINVAL, "te_kv_cache_new: hidden: %u slots of %"
                       PRIu64 " bytes every %" PRIu64 " from %" PRIu64
                       " do not fit len %" PRIu64 " (stride at least a slot)",
                       d->hidden_slots, hidden_bytes, d->hidden_stride,
                       d->hidden_offset, d->len);
    return 0;
}

int te_kv_cache_new(const te_kv_cache_desc *d, te_kv_cache **out)
{
    kv_clear();
    if (!d || !out)
        return kv_fail(-EINVAL, "te_kv_cache_new: NULL argument");
    uint64_t page_bytes = te_kv_region_page_bytes(&d->shape);
    uint64_t hidden_bytes = (uint64_t)d->shape.hidden * d->shape.elem_bytes;
    int rc = check_desc(d, page_bytes, hidden_bytes);
    if (rc)
        return rc;
    te_kv_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return kv_fail(-ENOMEM, "te_kv_cache_new: out of memory");
    c->d = *d;
    memcpy(c->regions, d->regions, (size_t)d->shape.layers *
                                       d->shape.kv_factor * sizeof(te_kv_region));
    c->d.regions = c->regions;
    c->page_bytes = page_bytes;
    c->hidden_bytes = hidden_bytes;
    if ((rc = check_overlap(c))) {
        free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void kv_cache_hold(te_kv_cache *c)
{
    pthread_mutex_lock(&kv_cache_lock);
    c->users++;
    pthread_mutex_unlock(&kv_cache_lock);
}

void kv_cache_put(te_kv_cache *c)
{
    pthread_mutex_lock(&kv_cache_lock);
    c->users--;
    pthread_mutex_unlock(&kv_cache_lock);
}

int te_kv_cache_free(te_kv_cache *c)
{
    kv_clear();
    if (!c)
        return 0;
    pthread_mutex_lock(&kv_cache_lock);
    int users = c->users;
    pthread_mutex_unlock(&kv_cache_lock);
    if (users)
        return kv_fail(-EBUSY, "te_kv_cache_free: %d decoder(s)/source(s) "
                       "still use it: free them first", users);
    free(c);
    return 0;
}
