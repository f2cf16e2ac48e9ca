/* The engine's own KV cache (te/kv.h, te_kv_cache_*): its description is
 * checked once, here, so that the decoder and the source can trust every
 * page id they are given that is below `pages`: each page of each region,
 * and each hidden slot, lies inside its allocation and overlaps no other
 * (a write for one layer's K can never land in another's V), whether the
 * cache is one allocation or one per layer. */
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
    uint64_t start, end; /* [start, end): addresses */
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

/* Where offset `off` of allocation a lies (an address: allocations are
 * compared with each other). */
static uint64_t at(const te_kv_cache *c, uint32_t a, uint64_t off)
{
    return (uint64_t)(uintptr_t)c->allocs[a].base + off;
}

/* Every page of every region and every hidden slot, sorted by address:
 * neighbours must not overlap. A region whose stride is at least a page
 * cannot overlap itself, but K and V pages may interleave (FlashInfer's
 * [page][kv] layout), so the check is per page, not per region span. By
 * address rather than offset, so that pages of two allocations are
 * compared too (disjoint allocations make that moot, but it costs
 * nothing and does not depend on that check). */
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
            v[k] = (struct span){at(c, c->regions[r].alloc,
                                    c->regions[r].offset +
                                    p * c->regions[r].page_stride), 0, r, p};
    for (uint32_t h = 0; h < d->hidden_slots; h++, k++)
        v[k] = (struct span){at(c, d->hidden_alloc, d->hidden_offset +
                                                        h * d->hidden_stride),
                             0, TE_KV_MAX_REGIONS, h};
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

/* The allocations of d into allocs[] (base/len as allocs[0]): the form
 * is one or the other, never both. */
static int take_allocs(const te_kv_cache_desc *d, te_kv_alloc *allocs,
                       uint32_t *n)
{
    if (!d->nallocs) {
        if (d->allocs || d->hidden_alloc)
            return kv_fail(-EINVAL, "te_kv_cache_new: nallocs 0 (base/len) "
                           "but allocs or hidden_alloc set");
        if (!d->base || !d->len)
            return kv_fail(-EINVAL, "te_kv_cache_new: base/len: no memory "
                           "(or give allocs and nallocs)");
        allocs[0] = (te_kv_alloc){d->base, d->len};
        *n = 1;
        return 0;
    }
    if (d->base || d->len)
        return kv_fail(-EINVAL, "te_kv_cache_new: base/len and allocs both "
                       "set: give one form");
    if (!d->allocs || d->nallocs > TE_KV_MAX_ALLOCS)
        return kv_fail(-EINVAL, "te_kv_cache_new: allocs: %s (nallocs %u, "
                       "1..%d)", d->allocs ? "too many" : "NULL",
                       d->nallocs, TE_KV_MAX_ALLOCS);
    for (uint32_t a = 0; a < d->nallocs; a++) {
        const te_kv_alloc *x = &d->allocs[a];
        if (!x->base || !x->len ||
            (uint64_t)(uintptr_t)x->base + x->len < x->len)
            return kv_fail(-EINVAL, "te_kv_cache_new: allocs[%u]: no memory "
                           "(base %p, len %" PRIu64 ")", a, x->base, x->len);
        allocs[a] = *x;
    }
    *n = d->nallocs;
    return 0;
}

static int by_base(const void *a, const void *b)
{
    const te_kv_alloc *x = *(const te_kv_alloc *const *)a,
                      *y = *(const te_kv_alloc *const *)b;
    return x->base < y->base ? -1 : x->base > y->base;
}

/* Allocations pairwise disjoint (each is registered on its own) and each
 * holding something (a registration nobody writes is a mistake). */
static int check_allocs(const te_kv_cache *c)
{
    const te_kv_alloc *sorted[TE_KV_MAX_ALLOCS];
    uint8_t used[TE_KV_MAX_ALLOCS] = {0};
    for (uint32_t a = 0; a < c->nallocs; a++)
        sorted[a] = &c->allocs[a];
    qsort(sorted, c->nallocs, sizeof(sorted[0]), by_base);
    for (uint32_t a = 1; a < c->nallocs; a++)
        if ((uintptr_t)sorted[a]->base <
            (uintptr_t)sorted[a - 1]->base + sorted[a - 1]->len)
            return kv_fail(-EINVAL, "te_kv_cache_new: allocs[%u] overlaps "
                           "allocs[%u] (allocations must be disjoint)",
                           (uint32_t)(sorted[a] - c->allocs),
                           (uint32_t)(sorted[a - 1] - c->allocs));
    uint32_t nreg = c->d.shape.layers * c->d.shape.kv_factor;
    for (uint32_t r = 0; r < nreg; r++)
        used[c->regions[r].alloc] = 1;
    if (c->d.hidden_slots)
        used[c->d.hidden_alloc] = 1;
    for (uint32_t a = 0; a < c->nallocs; a++)
        if (!used[a])
            return kv_fail(-EINVAL, "te_kv_cache_new: allocs[%u]: no region "
                           "or hidden slot lies in it", a);
    return 0;
}

static int check_desc(const te_kv_cache_desc *d, const te_kv_alloc *allocs,
                      uint32_t nallocs, uint64_t page_bytes,
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
    if (d->mem != TE_MEM_HOST && d->mem != TE_MEM_CUDA)
        return kv_fail(-EINVAL, "te_kv_cache_new: mem %d: TE_MEM_HOST or "
                       "TE_MEM_CUDA", d->mem);
    if (!d->pages || d->pages > (1u << 26))
        return kv_fail(-EINVAL, "te_kv_cache_new: pages %u (1..2^26)",
                       d->pages);
    if (!d->regions)
        return kv_fail(-EINVAL, "te_kv_cache_new: regions: NULL");
    if (d->reserved)
        return kv_fail(-EINVAL, "te_kv_cache_new: reserved: must be 0");
    for (uint32_t r = 0; r < nreg; r++) {
        const te_kv_region *g = &d->regions[r];
        if (g->alloc >= nallocs || g->reserved)
            return kv_fail(-EINVAL, "te_kv_cache_new: regions[%u].alloc %u: "
                           "%u allocation(s)%s", r, g->alloc, nallocs,
                           g->reserved ? " (and reserved must be 0)" : "");
        if (g->page_stride < page_bytes)
            return kv_fail(-EINVAL, "te_kv_cache_new: regions[%u].page_stride"
                           " %" PRIu64 " < a page (%" PRIu64 " bytes)", r,
                           g->page_stride, page_bytes);
        if (!inside(g->offset, g->page_stride, d->pages, page_bytes,
                    allocs[g->alloc].len))
            return kv_fail(-EINVAL, "te_kv_cache_new: regions[%u]: %u pages "
                           "from offset %" PRIu64 " every %" PRIu64 " bytes "
                           "end past len %" PRIu64 " of allocation %u", r,
                           d->pages, g->offset, g->page_stride,
                           allocs[g->alloc].len, g->alloc);
    }
    if (d->hidden_slots && d->hidden_alloc >= nallocs)
        return kv_fail(-EINVAL, "te_kv_cache_new: hidden_alloc %u: %u "
                       "allocation(s)", d->hidden_alloc, nallocs);
    if (d->hidden_slots &&
        (d->hidden_stride < hidden_bytes ||
         !inside(d->hidden_offset, d->hidden_stride, d->hidden_slots,
                 hidden_bytes, allocs[d->hidden_alloc].len)))
        return kv_fail(-EINVAL, "te_kv_cache_new: hidden: %u slots of %"
                       PRIu64 " bytes every %" PRIu64 " from %" PRIu64
                       " do not fit len %" PRIu64 " (stride at least a slot)",
                       d->hidden_slots, hidden_bytes, d->hidden_stride,
                       d->hidden_offset, allocs[d->hidden_alloc].len);
    return 0;
}

int te_kv_cache_new(const te_kv_cache_desc *d, te_kv_cache **out)
{
    kv_clear();
    if (!d || !out)
        return kv_fail(-EINVAL, "te_kv_cache_new: NULL argument");
    uint64_t page_bytes = te_kv_region_page_bytes(&d->shape);
    uint64_t hidden_bytes = (uint64_t)d->shape.hidden * d->shape.elem_bytes;
    te_kv_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return kv_fail(-ENOMEM, "te_kv_cache_new: out of memory");
    int rc = take_allocs(d, c->allocs, &c->nallocs);
    if (!rc)
        rc = check_desc(d, c->allocs, c->nallocs, page_bytes, hidden_bytes);
    if (rc) {
        free(c);
        return rc;
    }
    c->d = *d;
    c->d.allocs = c->allocs;
    memcpy(c->regions, d->regions, (size_t)d->shape.layers *
                                       d->shape.kv_factor * sizeof(te_kv_region));
    c->d.regions = c->regions;
    c->page_bytes = page_bytes;
    c->hidden_bytes = hidden_bytes;
    if ((rc = check_allocs(c)) || (rc = check_overlap(c))) {
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
