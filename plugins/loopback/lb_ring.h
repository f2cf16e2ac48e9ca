/*
 * Single-producer single-consumer ring of fixed 64-byte entries.
 *
 * The ring lives in shared memory (possibly mapped by another, untrusted
 * process). An entry says itself that it is ready: bytes 2-3 of every
 * entry are its lap stamp, which the producer stores (release) after the
 * rest of the entry, and which names the lap of the ring the entry was
 * written in. The consumer reads the stamp of its next slot (acquire) and
 * finds the entry there in the same cache line: one line moves from the
 * producer's core to the consumer's per entry, where a shared tail index
 * cost a second one, read before the entry and so in series with it
 * (about 0.2 us per line between the cores of the test machine).
 *
 * The consumer's index (head) is shared, for the producer's test of a
 * full ring; the producer reads it only when its cached copy runs out.
 * Indices are free-running 64-bit counters; slots are index & mask, so a
 * corrupt entry or index can confuse a channel but never reach outside it.
 */
#ifndef LB_RING_H
#define LB_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define LB_RING_ENTRY 64
/* Where an entry keeps its lap stamp (a uint16_t of the entry's type,
 * written and read by this file only). */
#define LB_RING_LAP_OFF 2

struct lb_ring_ctl {
    _Alignas(64) _Atomic uint64_t head; /* written by the consumer */
};

struct lb_ring {
    struct lb_ring_ctl *ctl;
    unsigned char *slots;
    uint64_t mask;
    uint32_t shift; /* log2 of the capacity: index >> shift is the lap */
    uint64_t pos;   /* producer: next index to write; consumer: next to read */
    uint64_t limit; /* producer: cached head + cap; consumer: ready up to */
};

/* The stamp of an entry written at index i: never 0 (the stamp of an
 * entry never written), and consecutive laps differ, so the entry of the
 * previous lap in the same slot never passes for the one awaited. */
static inline uint16_t lb_ring_lap(const struct lb_ring *r, uint64_t i)
{
    return (uint16_t)((i >> r->shift) % 65535u + 1u);
}

static inline uint16_t *lb_ring_lap_at(const struct lb_ring *r, uint64_t i)
{
    return (uint16_t *)(r->slots + (i & r->mask) * LB_RING_ENTRY +
                        LB_RING_LAP_OFF);
}

/* cap: a power of two; the ring must be empty (a new channel). */
static inline void lb_ring_view(struct lb_ring *r, struct lb_ring_ctl *ctl,
                                unsigned char *slots, uint32_t cap,
                                int producer)
{
    r->ctl = ctl;
    r->slots = slots;
    r->mask = cap - 1;
    r->shift = (uint32_t)__builtin_ctz(cap);
    r->pos = atomic_load_explicit(&ctl->head, memory_order_acquire);
    r->limit = producer ? r->pos + cap : r->pos;
}

/* Producer: free entries, at least `want` of them if the consumer has
 * made that room (reads its index only when the cached count is short). */
static inline uint64_t lb_ring_prod_free(struct lb_ring *r, uint64_t want)
{
    if (r->limit - r->pos < want) {
        uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
        r->limit = head + r->mask + 1;
        /* A consumer index ahead of ours is corrupt: treat as full. */
        if (r->limit - r->pos > r->mask + 1)
            r->limit = r->pos;
    }
    return r->limit - r->pos;
}

/* Producer: room for one more entry? (0 when full) */
static inline int lb_ring_prod_room(struct lb_ring *r)
{
    return lb_ring_prod_free(r, 1) != 0;
}

/* Producer: the slot the next push writes (to prefetch). */
static inline const void *lb_ring_prod_next(const struct lb_ring *r)
{
    return r->slots + (r->pos & r->mask) * LB_RING_ENTRY;
}

/* Producer (after lb_ring_prod_room): write the first len bytes of entry
 * (len >= LB_RING_LAP_OFF + 2; the rest of the slot keeps old bytes) and
 * make it visible. The lap bytes of `entry` are ignored: the slot's are
 * never written plainly, since the consumer may be reading them. */
static inline void lb_ring_prod_push(struct lb_ring *r, const void *entry,
                                     size_t len)
{
    unsigned char *slot = r->slots + (r->pos & r->mask) * LB_RING_ENTRY;
    const unsigned char *src = entry;
    memcpy(slot, src, LB_RING_LAP_OFF);
    memcpy(slot + LB_RING_LAP_OFF + 2, src + LB_RING_LAP_OFF + 2,
           len - LB_RING_LAP_OFF - 2);
    __atomic_store_n(lb_ring_lap_at(r, r->pos), lb_ring_lap(r, r->pos),
                     __ATOMIC_RELEASE);
    r->pos++;
}

/*
 * Continuation entries: an entry may be followed by entries that carry
 * only bytes for it (a small payload, say), LB_RING_CONT_BYTES each from
 * LB_RING_CONT_OFF, past the lap stamp. Which entries have continuations,
 * and how many, is the entry type's business; the ring only makes them
 * visible together: they are stamped before the entry they follow, so a
 * consumer that sees that entry finds them ready.
 */
#define LB_RING_CONT_OFF 4
#define LB_RING_CONT_BYTES (LB_RING_ENTRY - LB_RING_CONT_OFF)

/* Producer (after lb_ring_prod_free said 1 + ceil(plen / CONT_BYTES)):
 * lb_ring_prod_push of `entry`, followed by plen bytes of payload in
 * continuation entries. */
static inline void lb_ring_prod_push_cont(struct lb_ring *r, const void *entry,
                                          size_t len, const void *payload,
                                          size_t plen)
{
    const unsigned char *p = payload;
    uint64_t i = r->pos + 1;
    for (size_t off = 0; off < plen; off += LB_RING_CONT_BYTES, i++) {
        size_t k = plen - off < LB_RING_CONT_BYTES ? plen - off
                                                   : LB_RING_CONT_BYTES;
        memcpy(r->slots + (i & r->mask) * LB_RING_ENTRY + LB_RING_CONT_OFF,
               p + off, k);
        __atomic_store_n(lb_ring_lap_at(r, i), lb_ring_lap(r, i),
                         __ATOMIC_RELEASE);
    }
    lb_ring_prod_push(r, entry, len);
    r->pos = i;
}

/* Consumer: entries ready to read, at least min(max, ready) of them when
 * any is ready (0 if none). Looks at no more than max new slots. */
static inline uint64_t lb_ring_cons_avail(struct lb_ring *r, uint64_t max)
{
    uint64_t n = r->limit - r->pos;
    if (n == 0) {
        if (max > r->mask + 1)
            max = r->mask + 1;
        while (n < max &&
               __atomic_load_n(lb_ring_lap_at(r, r->pos + n),
                               __ATOMIC_ACQUIRE) == lb_ring_lap(r, r->pos + n))
            n++;
        r->limit = r->pos + n;
    }
    return n;
}

/* Consumer: like lb_ring_cons_avail, but looks past the entries already
 * known ready, up to `want` in all (an entry's continuations). */
static inline uint64_t lb_ring_cons_extend(struct lb_ring *r, uint64_t want)
{
    uint64_t n = r->limit - r->pos;
    if (want > r->mask + 1)
        want = r->mask + 1;
    while (n < want &&
           __atomic_load_n(lb_ring_lap_at(r, r->pos + n), __ATOMIC_ACQUIRE) ==
               lb_ring_lap(r, r->pos + n))
        n++;
    r->limit = r->pos + n;
    return n;
}

/* Consumer: the bytes of the continuation entry i entries past the
 * consumer's position (see above). */
static inline const unsigned char *lb_ring_cons_cont(const struct lb_ring *r,
                                                     uint64_t i)
{
    return r->slots + ((r->pos + i) & r->mask) * LB_RING_ENTRY +
           LB_RING_CONT_OFF;
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
