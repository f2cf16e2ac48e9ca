/*
 * The contexts of the operations a NIC holds (worker only).
 *
 * Why: a completion names its operation by the 64-bit context the core
 * gave post(). If that context were the core's own pointer (a cursor, a
 * message slot), a plugin that reports an operation twice, or a context
 * it made up, would have the core follow a pointer into freed or foreign
 * memory. Instead the plugin sees (generation << 32 | slot index) of this
 * table, and the slot keeps the core's context: a completion is checked
 * with one bounds test and one compare (no hash lookup), and a context
 * that is not outstanding is told apart as a duplicate (a past life of
 * the slot) or unknown.
 *
 * A slot's generation is odd while its operation is outstanding and even
 * while it is free; each take and each completion bumps it, so a stale
 * context matches again only after 2^31 reuses of the same slot.
 */
#ifndef TE_CORE_OP_TABLE_H
#define TE_CORE_OP_TABLE_H

#include <stddef.h>
#include <stdint.h>

/** Most operations a NIC can hold at once through the core. */
#define TE_OP_TABLE_MAX (1u << 22)

struct te_op_slot {
    uint64_t ctx;  /* the core's own context (tagged pointer) */
    uint32_t gen;  /* odd: outstanding */
    uint32_t next; /* free list: index + 1 of the next free slot, 0 = end */
};

struct te_op_table {
    struct te_op_slot *slot;
    uint32_t cap;
    uint32_t free1; /* index + 1 of the first free slot, 0 = none */
    uint32_t used;  /* outstanding */
};

/** What te_op_table_complete() found. */
enum te_op_check {
    TE_OP_OK = 0,        /* outstanding: *ctx is the core's context */
    TE_OP_DUPLICATE = 1, /* this slot's operation completed before */
    TE_OP_UNKNOWN = 2,   /* never handed out by this table */
};

/**
 * Make room for `want` more outstanding operations (growing the table up
 * to TE_OP_TABLE_MAX); returns how many of them fit (may be fewer, 0 when
 * full or out of memory).
 */
uint32_t te_op_table_room(struct te_op_table *t, uint32_t want);

/** Release the table's memory (outstanding contexts are forgotten). */
void te_op_table_free(struct te_op_table *t);

/** Store ctx in a free slot (te_op_table_room said there is one); returns
 *  the context to give the plugin. */
static inline uint64_t te_op_table_take(struct te_op_table *t, uint64_t ctx)
{
    uint32_t i = t->free1 - 1;
    struct te_op_slot *s = &t->slot[i];
    t->free1 = s->next;
    s->ctx = ctx;
    s->gen++;
    t->used++;
    return (uint64_t)s->gen << 32 | i;
}

/** The slot of wire context w if its operation is outstanding, else NULL
 *  (nothing changes). */
static inline struct te_op_slot *te_op_table_peek(struct te_op_table *t,
                                                  uint64_t w)
{
    uint32_t i = (uint32_t)w, gen = (uint32_t)(w >> 32);
    if (i >= t->cap || !(gen & 1u) || t->slot[i].gen != gen)
        return NULL;
    return &t->slot[i];
}

/** Free slot s (te_op_table_peek found it); returns the core's context. */
static inline uint64_t te_op_table_release(struct te_op_table *t,
                                           struct te_op_slot *s)
{
    uint32_t i = (uint32_t)(s - t->slot);
    s->gen++;
    s->next = t->free1;
    t->free1 = i + 1;
    t->used--;
    return s->ctx;
}

/** A completion for wire context w: TE_OP_OK (slot freed, *ctx set) or
 *  why it is not one of ours. */
static inline enum te_op_check te_op_table_complete(struct te_op_table *t,
                                                    uint64_t w, uint64_t *ctx)
{
    struct te_op_slot *s = te_op_table_peek(t, w);
    if (s) {
        *ctx = te_op_table_release(t, s);
        return TE_OP_OK;
    }
    uint32_t i = (uint32_t)w, gen = (uint32_t)(w >> 32);
    if (i < t->cap && (gen & 1u) && gen < t->slot[i].gen)
        return TE_OP_DUPLICATE;
    return TE_OP_UNKNOWN;
}

#endif
