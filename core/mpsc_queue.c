/*
 * Bounded lock-free MPSC queue of pointers: Dmitry Vyukov's bounded MPMC
 * array queue with the dequeue side restricted to one consumer.
 *
 * Each cell carries a sequence number. For position pos (a free-running
 * counter; cell = pos & mask):
 *   seq == pos            the cell is free for the producer of pos
 *   seq == pos + 1        the cell holds the item of pos (published)
 *   seq == pos + cap      the consumer freed it for the producer of pos + cap
 * A producer reads enq, checks its cell's seq: equal -> claim pos with a CAS
 * on enq, write the item, publish seq = pos + 1 (release); smaller -> the
 * cell still holds the item from one lap ago, the queue is full (-EAGAIN);
 * larger -> another producer claimed pos, reload enq and retry. Producers
 * never wait for one another (lock-free; a CAS fails only because another
 * producer progressed).
 *
 * The single consumer owns deq: it pops while the cell's seq == pos + 1
 * (acquire, so the item is visible), then frees the cell with
 * seq = pos + cap (release, so the producer of the next lap sees the slot
 * empty only after the consumer read the item). Items are popped strictly in
 * position order; a producer that claimed a position but has not published
 * yet holds back the items after it (pop returns fewer) until it does.
 *
 * enq and deq live on separate cache lines.
 */
#include "mpsc_queue.h"

#include <errno.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "te_hot.h"

struct mpsc_cell {
    _Atomic size_t seq;
    void *item;
};

struct te_mpsc {
    alignas(64) _Atomic size_t enq; /* producers */
    alignas(64) _Atomic size_t deq; /* consumer (atomic only for size()) */
    alignas(64) size_t mask;        /* read-only after creation */
    struct mpsc_cell *cells;
};

struct te_mpsc *te_mpsc_new(size_t capacity)
{
    size_t cap = 2;
    if (capacity > ((size_t)1 << (sizeof(size_t) * 8 - 2))) {
        errno = EINVAL;
        return NULL;
    }
    while (cap < capacity)
        cap <<= 1;
    if (cap > SIZE_MAX / sizeof(struct mpsc_cell)) {
        errno = ENOMEM;
        return NULL;
    }

    struct te_mpsc *q = aligned_alloc(64, sizeof(*q));
    if (!q) {
        errno = ENOMEM;
        return NULL;
    }
    memset(q, 0, sizeof(*q));
    size_t bytes = cap * sizeof(struct mpsc_cell);
    bytes = (bytes + 63) & ~(size_t)63;
    q->cells = aligned_alloc(64, bytes);
    if (!q->cells) {
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    for (size_t i = 0; i < cap; i++) {
        atomic_init(&q->cells[i].seq, i);
        q->cells[i].item = NULL;
    }
    q->mask = cap - 1;
    atomic_init(&q->enq, 0);
    atomic_init(&q->deq, 0);
    return q;
}

void te_mpsc_free(struct te_mpsc *q)
{
    if (!q)
        return;
    free(q->cells);
    free(q);
}

TE_HOT
int te_mpsc_push(struct te_mpsc *q, void *item)
{
    size_t pos = atomic_load_explicit(&q->enq, memory_order_relaxed);
    struct mpsc_cell *c;
    for (;;) {
        c = &q->cells[pos & q->mask];
        size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        intptr_t diff = (intptr_t)seq - (intptr_t)pos;
        if (diff == 0) {
            if (atomic_compare_exchange_weak_explicit(&q->enq, &pos, pos + 1,
                                                      memory_order_relaxed,
                                                      memory_order_relaxed))
                break;
            /* pos reloaded by the failed CAS */
        } else if (diff < 0) {
            return -EAGAIN; /* cell still holds the item of pos - cap */
        } else {
            pos = atomic_load_explicit(&q->enq, memory_order_relaxed);
        }
    }
    c->item = item;
    atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
    return 0;
}

TE_HOT
size_t te_mpsc_pop(struct te_mpsc *q, void **out, size_t max)
{
    size_t pos = atomic_load_explicit(&q->deq, memory_order_relaxed);
    size_t n = 0;
    while (n < max) {
        struct mpsc_cell *c = &q->cells[pos & q->mask];
        size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        if (seq != pos + 1)
            break; /* empty, or the producer of pos has not published yet */
        out[n++] = c->item;
        atomic_store_explicit(&c->seq, pos + q->mask + 1, memory_order_release);
        pos++;
    }
    if (n)
        atomic_store_explicit(&q->deq, pos, memory_order_relaxed);
    return n;
}

size_t te_mpsc_size(const struct te_mpsc *q)
{
    struct te_mpsc *m = (struct te_mpsc *)q;
    size_t d = atomic_load_explicit(&m->deq, memory_order_relaxed);
    size_t e = atomic_load_explicit(&m->enq, memory_order_relaxed);
    if (e < d) /* racy snapshot */
        return 0;
    size_t n = e - d;
    return n > q->mask + 1 ? q->mask + 1 : n;
}
