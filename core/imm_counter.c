/*
 * ImmCounter table (see imm_counter.h and docs/imm-counter.md).
 *
 * Layout: open addressing with linear probing over a power-of-two array of
 * cache-line sized slots. A slot's key is 0 while empty and imm + 1 once
 * claimed (so imm 0 and 0xffffffff are ordinary keys); keys are installed
 * with a CAS and never removed, so a lookup is a lock-free probe and a slot
 * pointer, once found, stays valid and keyed to the same imm forever.
 *
 * Per-slot state:
 *   value  (atomic int64)  V = banked - (armed ? count : 0)
 *   armed  (atomic u32)    1 from the moment expect() arms until the party
 *                          that ends the arming has finished reading cb/arg
 *   lock   (atomic u32)    spinlock serialising the RARE paths only
 *                          (expect, remove, try_take slow path, poll of an
 *                          armed slot); arrivals never touch it
 *   count, cb, arg         the armed expectation; written by expect() under
 *                          the lock before it publishes the arming
 *
 * An "epoch" is one armed expectation. expect() (holding the lock, armed
 * == 0) writes count/cb/arg, sets armed = 1 and does old = V.fetch_sub(count)
 * (acq_rel). Exactly one party ends the epoch:
 *   - expect itself, if old >= count (enough banked): it consumed `count`
 *     by the subtraction, clears armed and fires;
 *   - else V went negative, and either
 *       - the arrival whose fetch_add(n) moves V from < 0 to >= 0 (there is
 *         exactly one such transition per epoch since V only grows until the
 *         epoch ends; the surplus new V stays banked). It reads cb/arg,
 *         clears armed (release) and then fires; or
 *       - remove(), which CASes V from a negative value to 0 (so no arrival
 *         can cross zero any more) and returns V + count as the surplus.
 *
 * Invariants:
 *   I1  V < 0  <=>  an expectation is armed and not yet met (abstract
 *       "armed"). V < 0 is only created by expect's fetch_sub.
 *   I2  Only lock holders ever decrease V (expect, try_take, remove), and
 *       only while armed == 0, except remove's CAS of a negative V to 0.
 *       Hence with the lock held and armed == 0, V >= 0 and V never drops.
 *   I3  armed == 1 && V >= 0, seen by a lock holder, means an arrival has
 *       met the expectation and is handing it off; it clears armed within a
 *       few instructions (before calling fire). Lock holders wait for that
 *       ("settle") before touching count/cb/arg or V, so an expectation that
 *       was met is never also disarmed by remove, and re-arming never gets a
 *       spurious -EBUSY.
 *   I4  Conservation: every arrival is counted once in V; a met expectation
 *       consumes exactly count (the zero crossing or expect's subtraction);
 *       try_take consumes by fetch_sub; remove moves V (+ count when armed)
 *       out as surplus with one atomic RMW. So arrivals == consumed +
 *       surplus returned + banked, always.
 *
 * Memory ordering (payload visibility): a worker calls arrive() only after
 * the transport reported the immediate, which the NIC delivers after placing
 * the payload (the provider's poll_cq supplies the DMA/CPU barrier). Every
 * arrival is an acq_rel RMW of V; RMWs extend release sequences, so the RMW
 * that ends an epoch (the crossing fetch_add, expect's fetch_sub, try_take's
 * fetch_sub) acquires every earlier arrival of that imm. The crossing
 * arrival also acquires expect's release fetch_sub, so it reads the cb/arg
 * published by that expect. fire() hands the event on through the sink
 * (a release/acquire queue), so the callback thread sees the payload.
 * cb/arg are reused only after the ending party's release store armed = 0
 * is acquired by the next expect (under the lock).
 */
#include "imm_counter.h"

#include <errno.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "te_clock.h"
#include "te_error.h"
#include "te_hot.h"

/* Largest count accepted by expect() (keeps banked - count in int64). */
#define IMM_COUNT_MAX (UINT64_C(1) << 62)
/* Largest capacity accepted by te_imm_table_new(). */
#define IMM_CAPACITY_MAX (UINT32_C(1) << 30)

struct imm_slot {
    alignas(64) _Atomic uint64_t key; /* 0 empty, else imm + 1 */
    _Atomic int64_t value;            /* banked - armed count */
    _Atomic uint32_t armed;
    _Atomic uint32_t lock;
    uint64_t count; /* armed expectation (lock holders / epoch owner) */
    te_imm_fn cb;
    void *arg;
    uint64_t epoch; /* arming sequence number (lock holders) */
};
_Static_assert(sizeof(struct imm_slot) == 64, "one slot per cache line");
/* Slots start as zero bytes (slots_map), which is an initialised value
 * only for lock-free atomics (no hidden lock word). */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "imm slots need lock-free 32- and 64-bit atomics");

struct te_imm_table {
    struct imm_slot *slots;
    size_t map_len; /* bytes mapped for slots (slots_map) */
    size_t mask;   /* nslots - 1 */
    uint64_t limit; /* most keys inserted (75% load) */
    te_imm_fire_fn fire;
    void *sink;
    alignas(64) _Atomic uint64_t used;     /* keys inserted or reserved */
    alignas(64) _Atomic uint64_t overflow; /* arrivals that found no slot */
};

static inline void backoff(unsigned *spins)
{
    if (++*spins < 64)
        te_cpu_relax();
    else
        sched_yield();
}

static inline void slot_lock(struct imm_slot *s)
{
    unsigned spins = 0;
    while (atomic_exchange_explicit(&s->lock, 1, memory_order_acquire)) {
        while (atomic_load_explicit(&s->lock, memory_order_relaxed))
            backoff(&spins);
    }
}

static inline void slot_unlock(struct imm_slot *s)
{
    atomic_store_explicit(&s->lock, 0, memory_order_release);
}

/*
 * With the lock held: wait out a hand-off in progress (I3). Returns 1 if an
 * unmet expectation is armed (V < 0 seen), 0 if none is armed.
 */
static int slot_settle(struct imm_slot *s)
{
    unsigned spins = 0;
    for (;;) {
        if (!atomic_load_explicit(&s->armed, memory_order_acquire))
            return 0;
        if (atomic_load_explicit(&s->value, memory_order_acquire) < 0)
            return 1;
        backoff(&spins);
    }
}

/* lowbias32: a cheap full-avalanche 32-bit mix. */
static inline uint32_t imm_hash(uint32_t x)
{
    x ^= x >> 16;
    x *= UINT32_C(0x7feb352d);
    x ^= x >> 15;
    x *= UINT32_C(0x846ca68b);
    x ^= x >> 16;
    return x;
}

static int reserve_key(struct te_imm_table *t)
{
    uint64_t u = atomic_load_explicit(&t->used, memory_order_relaxed);
    do {
        if (u >= t->limit)
            return 0;
    } while (!atomic_compare_exchange_weak_explicit(
        &t->used, &u, u + 1, memory_order_relaxed, memory_order_relaxed));
    return 1;
}

/*
 * Find imm's slot; with insert, claim one if it has none. NULL: not present
 * (insert == 0) or the table is full (insert != 0).
 */
TE_HOT
static struct imm_slot *slot_find(struct te_imm_table *t, uint32_t imm,
                                  int insert)
{
    const uint64_t want = (uint64_t)imm + 1;
    size_t i = imm_hash(imm) & t->mask;
    int reserved = 0;

    for (size_t probes = 0; probes <= t->mask; probes++, i = (i + 1) & t->mask) {
        struct imm_slot *s = &t->slots[i];
        uint64_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == want)
            goto found;
        if (k != 0)
            continue;
        /* Empty: imm is not in the table (no deletions, linear probing). */
        if (!insert)
            return NULL;
        if (!reserved) {
            if (!reserve_key(t))
                return NULL;
            reserved = 1;
        }
        if (atomic_compare_exchange_strong_explicit(&s->key, &k, want,
                                                    memory_order_acq_rel,
                                                    memory_order_acquire))
            return s; /* keeps the reservation */
        if (k == want) /* someone inserted the same imm first */
            goto found;
        /* another key took it: keep probing (and the reservation) */
        continue;
    found:
        if (reserved)
            atomic_fetch_sub_explicit(&t->used, 1, memory_order_relaxed);
        return s;
    }
    if (reserved)
        atomic_fetch_sub_explicit(&t->used, 1, memory_order_relaxed);
    return NULL;
}

/* 2 MiB: the huge page of x86-64 and of arm64 with 4 KiB pages. */
#define IMM_HUGE_PAGE ((size_t)2 << 20)

/*
 * The slots: anonymous memory (zero, so every slot starts empty without a
 * memset touching it all at engine creation), in transparent huge pages
 * where the kernel offers them. An arrival hashes to a random slot of a
 * table of 8 MiB by default: with 4 KiB pages nearly every arrival of a
 * cold imm missed the TLB, and in a virtual machine that page walk (two
 * dimensions) cost 0.3-0.7 us per immediate (te-bench immlat, two
 * processes). *len receives the length to unmap.
 */
static struct imm_slot *slots_map(size_t bytes, size_t *len)
{
    if (bytes < IMM_HUGE_PAGE) {
        *len = bytes;
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    /* Map one huge page more and trim to a 2 MiB-aligned range: only
     * aligned ranges can be backed by huge pages. */
    size_t want = (bytes + IMM_HUGE_PAGE - 1) & ~(IMM_HUGE_PAGE - 1);
    size_t span = want + IMM_HUGE_PAGE;
    char *p = mmap(NULL, span, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    char *a = (char *)(((uintptr_t)p + IMM_HUGE_PAGE - 1) &
                       ~(uintptr_t)(IMM_HUGE_PAGE - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    if (a + want < p + span)
        munmap(a + want, (size_t)(p + span - (a + want)));
#ifdef MADV_HUGEPAGE
    /* A hint: without THP (or with it set to never) the table works the
     * same, in small pages. */
    madvise(a, want, MADV_HUGEPAGE);
#endif
    *len = want;
    return (struct imm_slot *)a;
}

struct te_imm_table *te_imm_table_new(uint32_t capacity, te_imm_fire_fn fire,
                                      void *sink)
{
    if (capacity == 0)
        capacity = 1;
    if (capacity > IMM_CAPACITY_MAX) {
        errno = EINVAL;
        return NULL;
    }
    size_t nslots = 2;
    while (nslots < (size_t)capacity * 2)
        nslots <<= 1;

    struct te_imm_table *t = aligned_alloc(64, sizeof(*t));
    if (!t) {
        errno = ENOMEM;
        return NULL;
    }
    memset(t, 0, sizeof(*t));
    /* Zero-filled by the kernel: all-zero bytes are a valid empty slot
     * (key 0, value 0, not armed, unlocked) for these lock-free atomics. */
    t->slots = slots_map(nslots * sizeof(struct imm_slot), &t->map_len);
    if (!t->slots) {
        free(t);
        errno = ENOMEM;
        return NULL;
    }
    t->mask = nslots - 1;
    t->limit = nslots - nslots / 4;
    t->fire = fire;
    t->sink = sink;
    atomic_init(&t->used, 0);
    atomic_init(&t->overflow, 0);
    return t;
}

void te_imm_table_free(struct te_imm_table *t)
{
    if (!t)
        return;
    munmap(t->slots, t->map_len);
    free(t);
}

TE_HOT
int te_imm_table_arrive(struct te_imm_table *t, uint32_t imm, uint32_t n)
{
    if (n == 0)
        return 0;
    struct imm_slot *s = slot_find(t, imm, 1);
    if (!s) {
        atomic_fetch_add_explicit(&t->overflow, n, memory_order_relaxed);
        return -ENOSPC;
    }
    int64_t old = atomic_fetch_add_explicit(&s->value, (int64_t)n,
                                            memory_order_acq_rel);
    if (old < 0 && old + (int64_t)n >= 0) {
        /* We met the armed expectation: we own this epoch's fire (I1-I3). */
        te_imm_fn cb = s->cb;
        void *arg = s->arg;
        atomic_store_explicit(&s->armed, 0, memory_order_release);
        if (cb && t->fire)
            t->fire(t->sink, imm, cb, arg);
    }
    return 0;
}

int te_imm_table_expect(struct te_imm_table *t, uint32_t imm, uint64_t count,
                        te_imm_fn cb, void *arg)
{
    return te_imm_table_expect_ex(t, imm, count, cb, arg, NULL, NULL);
}

int te_imm_table_expect_ex(struct te_imm_table *t, uint32_t imm,
                           uint64_t count, te_imm_fn cb, void *arg,
                           uint64_t *epoch, int *fired)
{
    if (fired)
        *fired = 0;
    if (count == 0)
        return te_fail(-EINVAL, "imm expect: count must be > 0 (imm %u)", imm);
    if (count > IMM_COUNT_MAX)
        return te_fail(-EINVAL, "imm expect: count %llu too large (imm %u)",
                       (unsigned long long)count, imm);
    struct imm_slot *s = slot_find(t, imm, 1);
    if (!s)
        return te_fail(-ENOSPC, "imm expect: counter table full (imm %u)", imm);

    slot_lock(s);
    if (slot_settle(s)) {
        slot_unlock(s);
        return te_fail(-EBUSY, "imm expect: an expectation is already armed "
                               "on imm %u", imm);
    }
    s->count = count;
    s->cb = cb;
    s->arg = arg;
    s->epoch++;
    if (epoch)
        *epoch = s->epoch;
    atomic_store_explicit(&s->armed, 1, memory_order_relaxed);
    int64_t old = atomic_fetch_sub_explicit(&s->value, (int64_t)count,
                                            memory_order_acq_rel);
    if (old >= (int64_t)count) {
        /* Enough banked: consumed by the subtraction; we fire. */
        atomic_store_explicit(&s->armed, 0, memory_order_release);
        slot_unlock(s);
        if (fired)
            *fired = 1;
        if (cb && t->fire)
            t->fire(t->sink, imm, cb, arg);
        return 0;
    }
    slot_unlock(s);
    return 0;
}

int te_imm_table_poll(struct te_imm_table *t, uint32_t imm, uint64_t *banked,
                      int *armed)
{
    uint64_t b = 0;
    int a = 0;
    struct imm_slot *s = slot_find(t, imm, 0);
    if (s) {
        int64_t v = atomic_load_explicit(&s->value, memory_order_acquire);
        if (v >= 0) {
            b = (uint64_t)v; /* nothing armed (I1) */
        } else {
            /* Armed: count is stable only under the lock. */
            slot_lock(s);
            v = atomic_load_explicit(&s->value, memory_order_acquire);
            if (v < 0) {
                a = 1;
                b = (uint64_t)(v + (int64_t)s->count);
            } else {
                b = (uint64_t)v;
            }
            slot_unlock(s);
        }
    }
    if (banked)
        *banked = b;
    if (armed)
        *armed = a;
    return 0;
}

int te_imm_table_try_take(struct te_imm_table *t, uint32_t imm, uint64_t count)
{
    if (count == 0)
        return te_fail(-EINVAL, "imm wait: count must be > 0 (imm %u)", imm);
    struct imm_slot *s = slot_find(t, imm, 0);
    if (!s)
        return 0;
    /* Lock-free fast path for the spinning waiter. */
    int64_t v = atomic_load_explicit(&s->value, memory_order_acquire);
    if (v < 0)
        return -EBUSY;
    if ((uint64_t)v < count)
        return 0;

    int rc;
    slot_lock(s);
    if (slot_settle(s)) {
        rc = -EBUSY;
    } else {
        /* armed == 0 and we hold the lock: V >= 0 and only grows (I2). */
        v = atomic_load_explicit(&s->value, memory_order_acquire);
        if ((uint64_t)v < count) {
            rc = 0;
        } else {
            atomic_fetch_sub_explicit(&s->value, (int64_t)count,
                                      memory_order_acq_rel);
            rc = 1;
        }
    }
    slot_unlock(s);
    return rc;
}

int te_imm_table_remove(struct te_imm_table *t, uint32_t imm, uint64_t *surplus)
{
    te_imm_table_remove_ex(t, imm, surplus, NULL, NULL);
    return 0;
}

int te_imm_table_remove_ex(struct te_imm_table *t, uint32_t imm,
                           uint64_t *surplus, te_imm_fn *cb, void **arg)
{
    uint64_t out = 0;
    int disarmed = 0;
    struct imm_slot *s = slot_find(t, imm, 0);
    if (s) {
        unsigned spins = 0;
        slot_lock(s);
        for (;;) {
            if (atomic_load_explicit(&s->armed, memory_order_acquire)) {
                int64_t v = atomic_load_explicit(&s->value, memory_order_acquire);
                if (v >= 0) { /* met: hand-off in progress (I3) */
                    backoff(&spins);
                    continue;
                }
                /* Disarm: after V = 0 no arrival can cross zero. */
                if (atomic_compare_exchange_weak_explicit(
                        &s->value, &v, 0, memory_order_acq_rel,
                        memory_order_acquire)) {
                    out = (uint64_t)(v + (int64_t)s->count);
                    if (cb)
                        *cb = s->cb;
                    if (arg)
                        *arg = s->arg;
                    disarmed = 1;
                    atomic_store_explicit(&s->armed, 0, memory_order_release);
                    break;
                }
                continue;
            }
            int64_t old = atomic_exchange_explicit(&s->value, 0,
                                                   memory_order_acq_rel);
            out = (uint64_t)old; /* >= 0 (I2) */
            break;
        }
        slot_unlock(s);
    }
    if (surplus)
        *surplus = out;
    return disarmed;
}

uint64_t te_imm_table_overflow(const struct te_imm_table *t)
{
    return atomic_load_explicit(&((struct te_imm_table *)t)->overflow,
                                memory_order_relaxed);
}

int te_imm_table_cancel(struct te_imm_table *t, uint32_t imm, uint64_t epoch)
{
    struct imm_slot *s = slot_find(t, imm, 0);
    if (!s)
        return 0;
    int disarmed = 0;
    unsigned spins = 0;
    slot_lock(s);
    for (;;) {
        if (!atomic_load_explicit(&s->armed, memory_order_acquire) ||
            s->epoch != epoch)
            break; /* met (and maybe re-armed) or removed already */
        int64_t v = atomic_load_explicit(&s->value, memory_order_acquire);
        if (v >= 0) { /* met: hand-off in progress (I3) */
            backoff(&spins);
            continue;
        }
        /* Give the expectation's count back: arrivals stay banked, and after
         * this no arrival can cross zero for the cancelled epoch. */
        if (atomic_compare_exchange_weak_explicit(
                &s->value, &v, v + (int64_t)s->count, memory_order_acq_rel,
                memory_order_acquire)) {
            atomic_store_explicit(&s->armed, 0, memory_order_release);
            disarmed = 1;
            break;
        }
    }
    slot_unlock(s);
    return disarmed;
}
