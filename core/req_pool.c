/* Request block pool (see req_pool.h for why and how). */
#include "req_pool.h"

#include <errno.h>
#include <stdlib.h>

#include "te_hot.h"

#if defined(__SANITIZE_ADDRESS__)
#define TE_POOL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TE_POOL_ASAN 1
#endif
#endif
#ifdef TE_POOL_ASAN
#include <sanitizer/asan_interface.h>
/* A free block is poisoned, so a use after te_req_free() is still caught. */
#define POISON(a, n) ASAN_POISON_MEMORY_REGION(a, n)
#define UNPOISON(a, n) ASAN_UNPOISON_MEMORY_REGION(a, n)
#else
#define POISON(a, n) ((void)(a), (void)(n))
#define UNPOISON(a, n) ((void)(a), (void)(n))
#endif

static inline uint64_t make_head(uint64_t old, uint32_t idx1)
{
    return (((old >> 32) + 1) << 32) | idx1;
}

int te_req_pool_init(struct te_req_pool *p, uint32_t count, size_t block_size)
{
    p->block_size = (block_size + 63) & ~(size_t)63;
    p->count = 0;
    p->blocks = NULL;
    p->next = NULL;
    atomic_init(&p->head, 0);
    if (!count)
        return 0;
    p->next = calloc(count, sizeof(*p->next));
    /* Aligned like malloc's largest alignment at least (a cache line). */
    p->blocks = aligned_alloc(64, (size_t)count * p->block_size);
    if (!p->next || !p->blocks) {
        free(p->next);
        free(p->blocks);
        p->next = NULL;
        p->blocks = NULL;
        return -ENOMEM;
    }
    p->count = count;
    for (uint32_t i = 0; i < count; i++)
        atomic_init(&p->next[i], i + 1 < count ? i + 2 : 0);
    atomic_init(&p->head, 1); /* block 0 first, tag 0 */
    POISON(p->blocks, (size_t)count * p->block_size);
    return 0;
}

void te_req_pool_destroy(struct te_req_pool *p)
{
    if (p->blocks)
        UNPOISON(p->blocks, (size_t)p->count * p->block_size);
    free(p->blocks);
    free(p->next);
    p->blocks = NULL;
    p->next = NULL;
    p->count = 0;
}

TE_HOT
void *te_req_pool_get(struct te_req_pool *p, size_t size)
{
    if (size > p->block_size || !p->count)
        return NULL;
    uint64_t h = atomic_load_explicit(&p->head, memory_order_acquire);
    for (;;) {
        uint32_t idx1 = (uint32_t)h;
        if (!idx1)
            return NULL;
        /* May be stale if another thread pops idx1 meanwhile: then the
         * tag moved and the exchange below fails. */
        uint32_t nx = atomic_load_explicit(&p->next[idx1 - 1],
                                           memory_order_relaxed);
        if (atomic_compare_exchange_weak_explicit(
                &p->head, &h, make_head(h, nx), memory_order_acquire,
                memory_order_acquire)) {
            void *b = p->blocks + (size_t)(idx1 - 1) * p->block_size;
            UNPOISON(b, p->block_size);
            return b;
        }
    }
}

TE_HOT
int te_req_pool_put(struct te_req_pool *p, void *ptr)
{
    uintptr_t a = (uintptr_t)ptr, base = (uintptr_t)p->blocks;
    if (!p->count || a < base ||
        a >= base + (uintptr_t)p->count * p->block_size)
        return 0;
    uint32_t idx = (uint32_t)((a - base) / p->block_size);
    POISON(ptr, p->block_size);
    uint64_t h = atomic_load_explicit(&p->head, memory_order_relaxed);
    do {
        atomic_store_explicit(&p->next[idx], (uint32_t)h,
                              memory_order_relaxed);
    } while (!atomic_compare_exchange_weak_explicit(
        &p->head, &h, make_head(h, idx + 1), memory_order_release,
        memory_order_relaxed));
    return 1;
}
