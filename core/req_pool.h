/*
 * A fixed pool of equal-sized request blocks, recycled without locks.
 *
 * Why: a request is allocated by the application thread in te_submit() and
 * freed by the group's worker when it completes. With malloc/free that is a
 * cross-thread pair on every request, and glibc's arena lock then serialises
 * the two threads (both take it: the submitter's thread cache is always
 * empty, the worker's always full); measured on shm with te-bench --test
 * post: te_submit() -> post() 0.80 us p50 with malloc/free, 0.36 us when the
 * blocks are never freed, 2+ us when the completion of one request is freed
 * while the next is being submitted (futex sleeps on the arena lock).
 *
 * Lock-free LIFO (Treiber stack) of block indices; the head carries a
 * 32-bit tag bumped by every push and pop, so a pop that read a stale
 * `next` cannot succeed (no ABA). Blocks that do not fit or arrive when the
 * pool is empty fall back to malloc; te_req_pool_put() tells the caller
 * whether the block was the pool's.
 */
#ifndef TE_REQ_POOL_H
#define TE_REQ_POOL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct te_req_pool {
    _Atomic uint64_t head;    /* tag << 32 | (index + 1); low half 0 = empty */
    _Atomic uint32_t *next;   /* per block: index + 1 of the next free one */
    uint8_t *blocks;
    uint32_t count;
    size_t block_size;
};

/* count blocks of block_size bytes (rounded up to 64); 0 or -ENOMEM. A pool
 * of count 0 is valid and always empty. */
int te_req_pool_init(struct te_req_pool *p, uint32_t count, size_t block_size);
/* Every block must have been put back (or never taken). */
void te_req_pool_destroy(struct te_req_pool *p);
/* A free block of at least size bytes, or NULL (too large, pool empty). */
void *te_req_pool_get(struct te_req_pool *p, size_t size);
/* Returns 1 if ptr is a block of this pool (now free again), 0 if not (the
 * caller frees it). */
int te_req_pool_put(struct te_req_pool *p, void *ptr);

#endif
