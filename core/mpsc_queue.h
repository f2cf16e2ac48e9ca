/*
 * Bounded lock-free multi-producer single-consumer queue of pointers
 * (per-cell sequence numbers; producers claim with CAS, never block).
 */
#ifndef TE_CORE_MPSC_QUEUE_H
#define TE_CORE_MPSC_QUEUE_H

#include <stddef.h>
#include <stdint.h>

struct te_mpsc;

/** capacity is rounded up to a power of two (>= 2). NULL on ENOMEM. */
struct te_mpsc *te_mpsc_new(size_t capacity);
void te_mpsc_free(struct te_mpsc *q);
/** 0, or -EAGAIN when full. Any thread. */
int te_mpsc_push(struct te_mpsc *q, void *item);
/** Pop up to max items into out; returns the count. Consumer thread only. */
size_t te_mpsc_pop(struct te_mpsc *q, void **out, size_t max);
/** Approximate number of queued items. */
size_t te_mpsc_size(const struct te_mpsc *q);

#endif
