/*
 * ImmCounter table: counts arrivals of 32-bit immediates and fires an armed
 * expectation exactly once when its count is reached.
 *
 * Concurrency: te_imm_table_arrive() may be called by several worker threads
 * at once, concurrently with expect/poll/wait/remove from application
 * threads. Lock-free on the arrival path (acquire/release atomics); an
 * arrival and an arming can never both miss the completion, nor both fire.
 * Slots are never freed (remove resets them), so lookups need no locks.
 */
#ifndef TE_CORE_IMM_COUNTER_H
#define TE_CORE_IMM_COUNTER_H

#include <stdint.h>
#include "te/te.h"

struct te_imm_table;

/** Called (by whoever completes the expectation) to hand a fire event on. */
typedef void (*te_imm_fire_fn)(void *sink, uint32_t imm, te_imm_fn cb,
                               void *cb_arg);

/**
 * Create a table with room for `capacity` distinct imm values (rounded up to
 * a power of two, at least 2x for open addressing load). fire(sink, ...) is
 * called once per met expectation that has a callback; the caller routes it
 * to the callback thread.
 */
struct te_imm_table *te_imm_table_new(uint32_t capacity, te_imm_fire_fn fire,
                                      void *sink);
void te_imm_table_free(struct te_imm_table *t);

/**
 * Count n arrivals of imm (worker threads). -ENOSPC (and the arrival is
 * counted in the table's overflow counter) when the table is full.
 */
int te_imm_table_arrive(struct te_imm_table *t, uint32_t imm, uint32_t n);

/** See te_imm_expect() in te.h (count > 0, -EBUSY if armed). */
int te_imm_table_expect(struct te_imm_table *t, uint32_t imm, uint64_t count,
                        te_imm_fn cb, void *arg);
/**
 * expect() that also returns the arming's epoch (for te_imm_table_cancel)
 * and whether it was met at once from banked arrivals (*fired = 1).
 * epoch and fired may be NULL.
 */
int te_imm_table_expect_ex(struct te_imm_table *t, uint32_t imm,
                           uint64_t count, te_imm_fn cb, void *arg,
                           uint64_t *epoch, int *fired);
/**
 * Disarm the expectation armed as `epoch` if it is still unmet; arrivals so
 * far stay banked. Returns 1 if it disarmed it (its cb will never fire),
 * 0 if it was met, removed or replaced meanwhile.
 */
int te_imm_table_cancel(struct te_imm_table *t, uint32_t imm, uint64_t epoch);
/** See te_imm_poll(). Unknown imm: banked 0, not armed, returns 0. */
int te_imm_table_poll(struct te_imm_table *t, uint32_t imm, uint64_t *banked,
                      int *armed);
/**
 * Consume `count` banked arrivals if that many are banked and no callback
 * expectation is armed: returns 1 consumed, 0 not yet, -EBUSY if armed.
 */
int te_imm_table_try_take(struct te_imm_table *t, uint32_t imm, uint64_t count);
/** See te_imm_remove(). */
int te_imm_table_remove(struct te_imm_table *t, uint32_t imm, uint64_t *surplus);
/**
 * te_imm_table_remove() that also hands back the disarmed expectation:
 * returns 1 and *cb / *arg (either may be NULL) when it disarmed an unmet
 * one (its cb has not run and never will by itself), else 0.
 */
int te_imm_table_remove_ex(struct te_imm_table *t, uint32_t imm,
                           uint64_t *surplus, te_imm_fn *cb, void **arg);
/** Arrivals that found no slot (table full) since creation. */
uint64_t te_imm_table_overflow(const struct te_imm_table *t);

#endif
