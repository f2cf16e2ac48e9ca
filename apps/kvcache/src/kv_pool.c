/* The decoder's page pool (te/kv.h): a page is never handed out again while
 * a remote write may still land in it. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "kv_internal.h"

enum { PAGE_FREE = 0, PAGE_USED = 1, PAGE_FENCING = 2 };

struct te_kv_pool {
    pthread_mutex_t lock;
    uint32_t pages;
    uint8_t *state;
    uint32_t *free_list; /* stack of free pages */
    uint32_t nfree, nused, nfencing;
    int claimed; /* kv_pool_claim used: the free list is stale */
};

int te_kv_pool_new(uint32_t pages, te_kv_pool **out)
{
    kv_clear();
    if (!pages || pages > (1u << 26) || !out)
        return kv_fail(-EINVAL, "te_kv_pool_new: %u pages (1..2^26)", pages);
    te_kv_pool *p = calloc(1, sizeof(*p));
    if (!p || !(p->state = calloc(pages, 1)) ||
        !(p->free_list = malloc(pages * sizeof(uint32_t)))) {
        if (p)
            free(p->state);
        free(p);
        return kv_fail(-ENOMEM, "te_kv_pool_new: out of memory");
    }
    pthread_mutex_init(&p->lock, NULL);
    p->pages = pages;
    for (uint32_t i = 0; i < pages; i++)
        p->free_list[i] = pages - 1 - i; /* page 0 on top */
    p->nfree = pages;
    *out = p;
    return 0;
}

void te_kv_pool_free(te_kv_pool *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->lock);
    free(p->state);
    free(p->free_list);
    free(p);
}

int te_kv_pool_alloc(te_kv_pool *p, uint32_t n, uint32_t *idx)
{
    pthread_mutex_lock(&p->lock);
    if (p->claimed) {
        pthread_mutex_unlock(&p->lock);
        return kv_fail(-EINVAL, "page pool: its pages are the engine's "
                       "(kv_pool_claim): nothing to allocate");
    }
    if (n > p->nfree) {
        uint32_t f = p->nfree, fe = p->nfencing;
        pthread_mutex_unlock(&p->lock);
        return kv_fail(-ENOSPC, "page pool: %u pages wanted, %u free (%u "
                       "waiting for a fence)", n, f, fe);
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t pg = p->free_list[--p->nfree];
        p->state[pg] = PAGE_USED;
        idx[i] = pg;
    }
    p->nused += n;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

static int check_pages(te_kv_pool *p, uint32_t n, const uint32_t *idx,
                       uint8_t want, const char *what)
{
    for (uint32_t i = 0; i < n; i++) {
        if (idx[i] >= p->pages)
            return kv_fail(-ERANGE, "page pool %s: page %u out of range "
                           "(%u pages)", what, idx[i], p->pages);
        if (want == PAGE_USED ? p->state[idx[i]] != PAGE_USED
                              : p->state[idx[i]] == PAGE_FREE)
            return kv_fail(-EINVAL, "page pool %s: page %u is %s", what,
                           idx[i], p->state[idx[i]] == PAGE_FREE ? "free"
                                                                 : "fencing");
    }
    return 0;
}

int te_kv_pool_fence(te_kv_pool *p, uint32_t n, const uint32_t *idx)
{
    pthread_mutex_lock(&p->lock);
    int rc = check_pages(p, n, idx, PAGE_USED, "fence");
    if (!rc) {
        for (uint32_t i = 0; i < n; i++)
            p->state[idx[i]] = PAGE_FENCING;
        p->nused -= n;
        p->nfencing += n;
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

int te_kv_pool_release(te_kv_pool *p, uint32_t n, const uint32_t *idx)
{
    pthread_mutex_lock(&p->lock);
    int rc = check_pages(p, n, idx, PAGE_FENCING, "release");
    if (!rc) {
        for (uint32_t i = 0; i < n; i++) {
            if (p->state[idx[i]] == PAGE_USED)
                p->nused--;
            else
                p->nfencing--;
            p->state[idx[i]] = PAGE_FREE;
            p->free_list[p->nfree++] = idx[i];
        }
    }
    pthread_mutex_unlock(&p->lock);
    return rc;
}

void te_kv_pool_counts(const te_kv_pool *p, uint32_t *free_pages,
                       uint32_t *used, uint32_t *fencing)
{
    te_kv_pool *m = (te_kv_pool *)p;
    pthread_mutex_lock(&m->lock);
    if (free_pages)
        *free_pages = p->nfree;
    if (used)
        *used = p->nused;
    if (fencing)
        *fencing = p->nfencing;
    pthread_mutex_unlock(&m->lock);
}

/* The engine names its own pages: they are checked FREE and marked USED
 * in place. The free list is then stale; te_kv_pool_alloc refuses such a
 * pool (claimed) rather than hand out from it. */
int kv_pool_claim(te_kv_pool *p, uint32_t n, const uint32_t *idx)
{
    pthread_mutex_lock(&p->lock);
    p->claimed = 1;
    for (uint32_t i = 0; i < n; i++) {
        if (idx[i] < p->pages && p->state[idx[i]] == PAGE_FREE) {
            p->state[idx[i]] = PAGE_USED;
            continue;
        }
        uint32_t bad = i, page = idx[i];
        int out = page >= p->pages;
        uint8_t st = out ? PAGE_FREE : p->state[page];
        while (i-- > 0) /* undo: nothing claimed */
            p->state[idx[i]] = PAGE_FREE;
        pthread_mutex_unlock(&p->lock);
        if (out)
            return kv_fail(-EINVAL, "pages[%u] = %u: out of range (%u "
                           "pages)", bad, page, p->pages);
        return kv_fail(-EBUSY, "pages[%u] = %u is %s", bad, page,
                       st == PAGE_USED ? "in use (by a request in flight, "
                       "or listed twice)" : "being fenced (a write of an "
                       "ended request may still land)");
    }
    p->nfree -= n;
    p->nused += n;
    pthread_mutex_unlock(&p->lock);
    return 0;
}
