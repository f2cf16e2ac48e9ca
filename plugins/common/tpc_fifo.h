/*
 * An unbounded FIFO of fixed-size elements, for a plugin's rare paths:
 * completions that did not fit in poll()'s array, posted receive buffers,
 * messages waiting for one. It doubles when full (a malloc, rare by
 * construction) and never shrinks. Not thread-safe: one NIC's worker.
 */
#ifndef TPC_FIFO_H
#define TPC_FIFO_H

#include <stddef.h>
#include <stdint.h>

struct tpc_fifo {
    unsigned char *buf;
    uint32_t esize; /* bytes per element */
    uint32_t cap;   /* elements, a power of two */
    uint32_t head;  /* index of the oldest element */
    uint32_t count; /* elements queued */
};

/* Room for at least cap (and 16) elements of esize bytes; 0 or -ENOMEM. */
int tpc_fifo_init(struct tpc_fifo *f, uint32_t esize, uint32_t cap);
/* Release the buffer; f is empty (and may be freed again). */
void tpc_fifo_free(struct tpc_fifo *f);
/* Copy *e to the back, growing when full; 0 or -ENOMEM (f unchanged). */
int tpc_fifo_push(struct tpc_fifo *f, const void *e);

/* The i-th oldest element (i < count). */
static inline void *tpc_fifo_at(const struct tpc_fifo *f, uint32_t i)
{
    return f->buf + (size_t)((f->head + i) & (f->cap - 1)) * f->esize;
}

/* Drop the oldest element (count > 0). */
static inline void tpc_fifo_pop(struct tpc_fifo *f)
{
    f->head = (f->head + 1) & (f->cap - 1);
    f->count--;
}

#endif
