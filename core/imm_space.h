/*
 * Immediate spaces (te.h, docs/imm-counter.md "Spaces"): named ranges of
 * immediate values, one per subsystem, with lives so that late arrivals of
 * a retired life are counted apart and never banked.
 *
 * Concurrency: create/retire/destroy take the engine's space lock; the
 * arrival path (worker threads) and the checks of te_imm_expect() and
 * friends read the published table without locks. Entries are never freed
 * before the engine, so a reader can never touch freed memory; a table
 * change is seen by a reader either before or after, never torn.
 */
#ifndef TE_CORE_IMM_SPACE_H
#define TE_CORE_IMM_SPACE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "te/te.h"

struct te_imm_table;

struct te_imm_space {
    struct te_imm_spaces *owner;
    char name[32];
    uint32_t base, size, lives; /* immutable once published */
    uint64_t span;              /* size * lives */
    _Atomic uint64_t epoch;     /* retirements so far; life = epoch % lives */
    _Atomic int dead;
    _Atomic uint64_t stale;
    uint64_t retired_surplus;   /* under the lock */
    struct te_imm_space *grave_next;
};

struct te_imm_spaces {
    pthread_mutex_t lock;
    _Atomic uint32_t count;
    struct te_imm_space *_Atomic tab[TE_IMM_SPACE_MAX];
    struct te_imm_space *graveyard; /* evicted entries, freed at the end */
    struct te_imm_table *imms;
    /* Runs an expectation's callback with a status (callback thread). */
    void (*cancel)(void *sink, uint32_t imm, te_imm_fn cb, void *arg,
                   int status);
    void *sink;
};

void te_imm_spaces_init(struct te_imm_spaces *sp, struct te_imm_table *imms,
                        void (*cancel)(void *, uint32_t, te_imm_fn, void *, int),
                        void *sink);
void te_imm_spaces_fini(struct te_imm_spaces *sp);

/**
 * Worker side: 1 if imm belongs to a retired life or a destroyed space
 * (then it is counted there and must not be banked), else 0.
 */
static inline int te_imm_spaces_stale(struct te_imm_spaces *sp, uint32_t imm);

/**
 * Application side: 0 if imm may be expected/waited on, else -ESTALE with
 * a message prefixed by fn naming the space and life.
 */
int te_imm_spaces_check(struct te_imm_spaces *sp, uint32_t imm, const char *fn);

int te_imm_spaces_stale_slow(struct te_imm_spaces *sp, uint32_t imm);

static inline int te_imm_spaces_stale(struct te_imm_spaces *sp, uint32_t imm)
{
    /* Most engines have no spaces: one load. */
    if (!atomic_load_explicit(&sp->count, memory_order_acquire))
        return 0;
    return te_imm_spaces_stale_slow(sp, imm);
}

#endif
