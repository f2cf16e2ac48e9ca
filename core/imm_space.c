/* Immediate spaces: see imm_space.h and te.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "imm_counter.h"
#include "imm_space.h"
#include "te_error.h"

#define SIZE_MAX_VALUES (1u << 24)
#define LIVES_MAX 256u

void te_imm_spaces_init(struct te_imm_spaces *sp, struct te_imm_table *imms,
                        void (*cancel)(void *, uint32_t, te_imm_fn, void *, int),
                        void *sink)
{
    memset(sp, 0, sizeof(*sp));
    pthread_mutex_init(&sp->lock, NULL);
    sp->imms = imms;
    sp->cancel = cancel;
    sp->sink = sink;
}

void te_imm_spaces_fini(struct te_imm_spaces *sp)
{
    uint32_t n = atomic_load(&sp->count);
    for (uint32_t i = 0; i < n; i++)
        free(atomic_load(&sp->tab[i]));
    while (sp->graveyard) {
        struct te_imm_space *s = sp->graveyard;
        sp->graveyard = s->grave_next;
        free(s);
    }
    atomic_store(&sp->count, 0);
    pthread_mutex_destroy(&sp->lock);
}

/* The entry whose range holds imm, or NULL. Lock-free (see the header). */
static struct te_imm_space *find(struct te_imm_spaces *sp, uint32_t imm)
{
    uint32_t n = atomic_load_explicit(&sp->count, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        struct te_imm_space *s =
            atomic_load_explicit(&sp->tab[i], memory_order_acquire);
        if (imm >= s->base && (uint64_t)imm - s->base < s->span)
            return s;
    }
    return NULL;
}

static uint32_t current_life(const struct te_imm_space *s)
{
    return (uint32_t)(atomic_load_explicit(&((struct te_imm_space *)s)->epoch,
                                           memory_order_acquire) % s->lives);
}

int te_imm_spaces_stale_slow(struct te_imm_spaces *sp, uint32_t imm)
{
    struct te_imm_space *s = find(sp, imm);
    if (!s)
        return 0;
    uint32_t life = (imm - s->base) / s->size;
    if (!atomic_load_explicit(&s->dead, memory_order_acquire) &&
        life == current_life(s))
        return 0;
    atomic_fetch_add_explicit(&s->stale, 1, memory_order_relaxed);
    return 1;
}

int te_imm_spaces_check(struct te_imm_spaces *sp, uint32_t imm, const char *fn)
{
    struct te_imm_space *s = find(sp, imm);
    if (!s)
        return 0;
    uint32_t life = (imm - s->base) / s->size;
    if (atomic_load_explicit(&s->dead, memory_order_acquire))
        return te_fail(-ESTALE, "%s: imm %u belongs to immediate space '%s', "
                       "which was destroyed", fn, imm, s->name);
    uint32_t cur = current_life(s);
    if (life != cur)
        return te_fail(-ESTALE, "%s: imm %u is value %u of life %u of "
                       "immediate space '%s', retired (current life %u: "
                       "take values from te_imm_space_value())", fn, imm,
                       (imm - s->base) % s->size, life, s->name, cur);
    return 0;
}

/* ----------------------------------------------------------- placement */

static int overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
    return a < b + blen && b < a + alen;
}

/* Move entry i out of the table (into the graveyard). Readers see the
 * table before or after: the last entry is copied into slot i before the
 * count shrinks, so no live entry is ever missed. Under the lock. */
static void evict(struct te_imm_spaces *sp, uint32_t i)
{
    uint32_t n = atomic_load_explicit(&sp->count, memory_order_relaxed);
    struct te_imm_space *s = atomic_load_explicit(&sp->tab[i], memory_order_relaxed);
    struct te_imm_space *last =
        atomic_load_explicit(&sp->tab[n - 1], memory_order_relaxed);
    atomic_store_explicit(&sp->tab[i], last, memory_order_release);
    atomic_store_explicit(&sp->count, n - 1, memory_order_release);
    s->grave_next = sp->graveyard;
    sp->graveyard = s;
}

/* First free base at or above start for span values, treating destroyed
 * entries as free when use_dead; 0 with *base, or -ENOSPC. Under the lock. */
static int first_fit(struct te_imm_spaces *sp, uint64_t span, int use_dead,
                     uint32_t *base)
{
    uint64_t at = TE_IMM_SPACE_REGION_START;
    uint32_t n = atomic_load_explicit(&sp->count, memory_order_relaxed);
    for (int moved = 1; moved;) {
        moved = 0;
        for (uint32_t i = 0; i < n; i++) {
            struct te_imm_space *s = sp->tab[i];
            if (use_dead && atomic_load(&s->dead))
                continue;
            if (overlaps(at, span, s->base, s->span)) {
                at = (uint64_t)s->base + s->span;
                moved = 1;
            }
        }
        if (at + span > (1ull << 32))
            return -ENOSPC;
    }
    *base = (uint32_t)at;
    return 0;
}

/* Evict destroyed entries that overlap [base, base+span). Under the lock. */
static void evict_dead_overlapping(struct te_imm_spaces *sp, uint64_t base,
                                   uint64_t span)
{
    for (uint32_t i = atomic_load(&sp->count); i-- > 0;) {
        struct te_imm_space *s = sp->tab[i];
        if (atomic_load(&s->dead) && overlaps(base, span, s->base, s->span))
            evict(sp, i);
    }
}

TE_API int te_imm_space_create(te_engine *e, const char *name, uint32_t size,
                               uint32_t lives, uint32_t flags, uint32_t base,
                               te_imm_space **out)
{
    te_error_clear();
    if (!e || !out)
        return te_fail(-EINVAL, "te_imm_space_create: engine or out is NULL");
    *out = NULL;
    if (!name || !name[0] || strlen(name) >= sizeof(((te_imm_space *)0)->name))
        return te_fail(-EINVAL, "te_imm_space_create: name must have 1..31 "
                       "characters");
    if (lives == 0)
        lives = TE_IMM_SPACE_DEFAULT_LIVES;
    if (size == 0 || size > SIZE_MAX_VALUES)
        return te_fail(-EINVAL, "te_imm_space_create '%s': size %u outside "
                       "1..%u", name, size, SIZE_MAX_VALUES);
    if (lives < 2 || lives > LIVES_MAX || (lives & (lives - 1)))
        return te_fail(-EINVAL, "te_imm_space_create '%s': lives %u must be a "
                       "power of two in 2..%u", name, lives, LIVES_MAX);
    if (flags & ~TE_IMM_SPACE_FIXED)
        return te_fail(-EINVAL, "te_imm_space_create '%s': unknown flags 0x%x",
                       name, flags & ~TE_IMM_SPACE_FIXED);
    uint64_t span = (uint64_t)size * lives;
    struct te_imm_spaces *sp = &e->spaces;
    pthread_mutex_lock(&sp->lock);
    int rc = 0;
    uint32_t n = atomic_load(&sp->count);
    if (flags & TE_IMM_SPACE_FIXED) {
        if ((uint64_t)base + span > (1ull << 32)) {
            rc = te_fail(-EINVAL, "te_imm_space_create '%s': base %u + %llu "
                         "values passes 2^32", name, base,
                         (unsigned long long)span);
            goto out;
        }
        for (uint32_t i = 0; i < n; i++) {
            struct te_imm_space *s = sp->tab[i];
            if (!atomic_load(&s->dead) && overlaps(base, span, s->base, s->span)) {
                rc = te_fail(-EADDRINUSE, "te_imm_space_create '%s': range "
                             "[%u, %llu) overlaps space '%s' [%u, %llu)", name,
                             base, (unsigned long long)(base + span), s->name,
                             s->base, (unsigned long long)(s->base + s->span));
                goto out;
            }
        }
    } else if (first_fit(sp, span, 0, &base) && first_fit(sp, span, 1, &base)) {
        rc = te_fail(-ENOSPC, "te_imm_space_create '%s': no free range of "
                     "%llu immediate values at or above 0x%x", name,
                     (unsigned long long)span, TE_IMM_SPACE_REGION_START);
        goto out;
    }
    evict_dead_overlapping(sp, base, span);
    n = atomic_load(&sp->count);
    if (n == TE_IMM_SPACE_MAX) {
        rc = te_fail(-ENOSPC, "te_imm_space_create '%s': the engine already "
                     "has %d spaces (TE_IMM_SPACE_MAX)", name, TE_IMM_SPACE_MAX);
        goto out;
    }
    struct te_imm_space *s = calloc(1, sizeof(*s));
    if (!s) {
        rc = te_fail(-ENOMEM, "te_imm_space_create '%s': out of memory", name);
        goto out;
    }
    s->owner = sp;
    strcpy(s->name, name);
    s->base = base;
    s->size = size;
    s->lives = lives;
    s->span = span;
    /* Arrivals banked on these raw values before the space existed
     * belong to nobody: drop them, so life 0 starts clean. An expectation
     * armed on one ends with -ECANCELED (through the callback thread, as a
     * retirement does), never silently: its owner may be waiting on it. */
    for (uint32_t v = 0; v < size; v++) {
        te_imm_fn cb = NULL;
        void *arg = NULL;
        if (te_imm_table_remove_ex(sp->imms, base + v, NULL, &cb, &arg) && cb)
            sp->cancel(sp->sink, base + v, cb, arg, -ECANCELED);
    }
    atomic_store_explicit(&sp->tab[n], s, memory_order_release);
    atomic_store_explicit(&sp->count, n + 1, memory_order_release);
    *out = s;
out:
    pthread_mutex_unlock(&sp->lock);
    return rc;
}

TE_API int te_imm_space_value(const te_imm_space *s, uint32_t index,
                              uint32_t *raw)
{
    te_error_clear();
    if (!s || !raw)
        return te_fail(-EINVAL, "te_imm_space_value: NULL argument");
    if (atomic_load_explicit(&((te_imm_space *)s)->dead, memory_order_acquire))
        return te_fail(-ESTALE, "te_imm_space_value: space '%s' was destroyed",
                       s->name);
    if (index >= s->size)
        return te_fail(-ERANGE, "te_imm_space_value: index %u outside space "
                       "'%s' of %u values", index, s->name, s->size);
    *raw = s->base + current_life(s) * s->size + index;
    return 0;
}

/* Clear every value of one life: drop banked arrivals (returned), and
 * cancel armed expectations through the callback thread. Under the lock. */
static uint64_t clear_life(struct te_imm_space *s, uint32_t life)
{
    struct te_imm_spaces *sp = s->owner;
    uint64_t dropped = 0;
    uint32_t first = s->base + life * s->size;
    for (uint32_t v = 0; v < s->size; v++) {
        uint64_t surplus = 0;
        te_imm_fn cb = NULL;
        void *arg = NULL;
        if (te_imm_table_remove_ex(sp->imms, first + v, &surplus, &cb, &arg) &&
            cb)
            sp->cancel(sp->sink, first + v, cb, arg, -ECANCELED);
        dropped += surplus;
    }
    return dropped;
}

static int retire_locked(struct te_imm_space *s)
{
    uint32_t old = current_life(s);
    /* New life first: from here arrivals for the old life count as stale. */
    atomic_fetch_add_explicit(&s->epoch, 1, memory_order_acq_rel);
    s->retired_surplus += clear_life(s, old);
    /* The new life's values last served `lives` retirements ago; an arrival
     * that raced that retirement could still sit there. */
    uint64_t leftover = clear_life(s, current_life(s));
    atomic_fetch_add_explicit(&s->stale, leftover, memory_order_relaxed);
    return 0;
}

TE_API int te_imm_space_retire(te_imm_space *s)
{
    te_error_clear();
    if (!s)
        return te_fail(-EINVAL, "te_imm_space_retire: space is NULL");
    pthread_mutex_lock(&s->owner->lock);
    int rc = 0;
    if (atomic_load(&s->dead))
        rc = te_fail(-ESTALE, "te_imm_space_retire: space '%s' was destroyed",
                     s->name);
    else
        retire_locked(s);
    pthread_mutex_unlock(&s->owner->lock);
    return rc;
}

TE_API int te_imm_space_destroy(te_imm_space *s)
{
    te_error_clear();
    if (!s)
        return te_fail(-EINVAL, "te_imm_space_destroy: space is NULL");
    pthread_mutex_lock(&s->owner->lock);
    int rc = 0;
    if (atomic_load(&s->dead)) {
        rc = te_fail(-ESTALE, "te_imm_space_destroy: space '%s' was already "
                     "destroyed", s->name);
    } else {
        atomic_store_explicit(&s->dead, 1, memory_order_release);
        s->retired_surplus += clear_life(s, current_life(s));
    }
    pthread_mutex_unlock(&s->owner->lock);
    return rc;
}

TE_API int te_imm_space_stats_get(const te_imm_space *s,
                                  te_imm_space_stats *out)
{
    te_error_clear();
    if (!s || !out)
        return te_fail(-EINVAL, "te_imm_space_stats_get: NULL argument");
    te_imm_space *m = (te_imm_space *)s;
    pthread_mutex_lock(&m->owner->lock);
    memset(out, 0, sizeof(*out));
    out->base = s->base;
    out->size = s->size;
    out->lives = s->lives;
    out->epoch = atomic_load(&m->epoch);
    out->life = (uint32_t)(out->epoch % s->lives);
    out->stale_arrivals = atomic_load(&m->stale);
    out->retired_surplus = s->retired_surplus;
    int dead = atomic_load(&m->dead);
    pthread_mutex_unlock(&m->owner->lock);
    return dead ? te_fail(-ESTALE, "te_imm_space_stats_get: space '%s' was "
                          "destroyed", s->name) : 0;
}

TE_API int te_imm_space_lookup(te_engine *e, uint32_t imm, const char **name,
                               uint32_t *index, uint32_t *life)
{
    te_error_clear();
    if (!e)
        return te_fail(-EINVAL, "te_imm_space_lookup: engine is NULL");
    struct te_imm_space *s = find(&e->spaces, imm);
    if (!s)
        return 0;
    if (name)
        *name = s->name;
    if (index)
        *index = (imm - s->base) % s->size;
    if (life)
        *life = (imm - s->base) / s->size;
    return 1;
}
