/*
 * Single-producer single-consumer ring of fixed 64-byte entries.
 *
 * The control words live in shared memory (possibly mapped by another,
 * untrusted process); each side keeps a private view with a cached copy of
 * the other side's index, so the shared cache lines are touched only when
 * the cached value runs out, and indices are published once per batch.
 * Indices are free-running 64-bit counters; slots are index & mask, so a
 * corrupt index can confuse a channel but never reach outside it.
 */
#ifndef LB_RING_H
#define LB_RING_H

#include <stdatomic.h>
#include <stdint.h>

#define LB_RING_ENTRY 64

struct lb_ring_ctl {
    _Alignas(64) _Atomic uint64_t head; /* written by the consumer */
    _Alignas(64) _Atomic uint64_t tail; /* written by the producer */
};

struct lb_ring {
    struct lb_ring_ctl *ctl;
    unsigned char *slots;
    uint64_t mask;
    uint64_t pos;   /* producer: next tail; consumer: next head */
    uint64_t limit; /* producer: cached head + cap; consumer: cached tail */
};

static inline void lb_ring_view(struct lb_ring *r, struct lb_ring_ctl *ctl,
                                unsigned char *slots, uint32_t cap,
                                int producer)
{
    r->ctl = ctl;
    r->slots = slots;
    r->mask = cap - 1;
    if (producer) {
        r->pos = atomic_load_explicit(&ctl->tail, memory_order_relaxed);
        r->limit = atomic_load_explicit(&ctl->head, memory_order_acquire) + cap;
    } else {
        r->pos = atomic_load_explicit(&ctl->head, memory_order_relaxed);
        r->limit = atomic_load_explicit(&ctl->tail, memory_order_acquire);
    }
}

/* Producer: the next free entry, or NULL when full. */
static inline void *lb_ring_prod_slot(struct lb_ring *r)
{
    if (r->pos == r->limit) {
        uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
        r->limit = head + r->mask + 1;
        /* A consumer index ahead of ours is corrupt: treat as full. */
        if (r->limit - r->pos > r->mask + 1 || r->pos == r->limit) {
            r->limit = r->pos;
            return 0;
        }
    }
    return r->slots + (r->pos & r->mask) * LB_RING_ENTRY;
}

static inline void lb_ring_prod_push(struct lb_ring *r) { r->pos++; }

static inline void lb_ring_prod_publish(struct lb_ring *r)
{
    atomic_store_explicit(&r->ctl->tail, r->pos, memory_order_release);
}

/* Consumer: entries ready to read (0 if none). */
static inline uint64_t lb_ring_cons_avail(struct lb_ring *r)
{
    uint64_t n = r->limit - r->pos;
    if (n == 0) {
        r->limit = atomic_load_explicit(&r->ctl->tail, memory_order_acquire);
        n = r->limit - r->pos;
        if (n > r->mask + 1) { /* corrupt producer index */
            r->limit = r->pos;
            n = 0;
        }
    }
    return n;
}

static inline const void *lb_ring_cons_slot(const struct lb_ring *r, uint64_t i)
{
    return r->slots + ((r->pos + i) & r->mask) * LB_RING_ENTRY;
}

static inline void lb_ring_cons_advance(struct lb_ring *r, uint64_t n)
{
    r->pos += n;
    atomic_store_explicit(&r->ctl->head, r->pos, memory_order_release);
}

#endif
