/*
 * Unit tests for the loopback plugin's ring (plugins/loopback/lb_ring.h):
 * entries announce themselves by their lap stamp. Checked: an entry is seen
 * exactly when pushed, in order, also across the wrap of the 16-bit stamp
 * (65535 laps), whatever the capacity; a full ring refuses a push until the
 * consumer advances; the stamp bytes of a pushed entry are the ring's, not
 * the caller's; a producer on another thread is seen in order with its
 * payload (release/acquire).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../plugins/loopback/lb_ring.h"
#include "te_test.h"

/* A ring's memory: the control word, then cap entries (zero: never
 * written, which no stamp matches). */
struct test_ring {
    struct lb_ring_ctl ctl;
    unsigned char *slots;
    struct lb_ring prod, cons;
};

static void ring_open(struct test_ring *t, uint32_t cap)
{
    memset(&t->ctl, 0, sizeof t->ctl);
    t->slots = aligned_alloc(64, (size_t)cap * LB_RING_ENTRY);
    ck_assert_ptr_nonnull(t->slots);
    memset(t->slots, 0, (size_t)cap * LB_RING_ENTRY);
    lb_ring_view(&t->prod, &t->ctl, t->slots, cap, 1);
    lb_ring_view(&t->cons, &t->ctl, t->slots, cap, 0);
}

/* An entry: 8 bytes of payload after the stamp's 4-byte head. */
struct entry {
    uint8_t a, b;
    uint16_t lap; /* LB_RING_LAP_OFF */
    uint32_t pad;
    uint64_t value;
    unsigned char rest[LB_RING_ENTRY - 16];
};

static void push(struct test_ring *t, uint64_t v)
{
    struct entry e;
    memset(&e, 0, sizeof e);
    e.a = (uint8_t)v;
    e.lap = 0xffff; /* ignored: the ring writes its own stamp */
    e.value = v;
    ck_assert(lb_ring_prod_room(&t->prod));
    lb_ring_prod_push(&t->prod, &e, offsetof(struct entry, rest));
}

static uint64_t take(struct test_ring *t)
{
    ck_assert_uint_ge(lb_ring_cons_avail(&t->cons, 1), 1);
    struct entry e;
    memcpy(&e, lb_ring_cons_slot(&t->cons, 0), sizeof e);
    ck_assert_uint_eq(e.a, (uint8_t)e.value);
    ck_assert_uint_ne(e.lap, 0);
    lb_ring_cons_advance(&t->cons, 1);
    return e.value;
}

/* Across the stamp's wrap (65535 laps) with capacities 1, 2 and 8: an
 * empty ring never shows an entry, a pushed one always. */
START_TEST(lap_wrap)
{
    static const uint32_t caps[] = {1, 2, 8};
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        struct test_ring t;
        ring_open(&t, caps[c]);
        uint64_t n = 65535ull * caps[c] * 2 + 3;
        for (uint64_t i = 0; i < n; i++) {
            ck_assert_uint_eq(lb_ring_cons_avail(&t.cons, UINT64_MAX), 0);
            push(&t, i);
            ck_assert_uint_eq(take(&t), i);
        }
        free(t.slots);
    }
}
END_TEST

/* Full: no room until the consumer advances; then every entry in order,
 * and cons_avail looks at no more than it is asked to. */
START_TEST(full_and_batches)
{
    struct test_ring t;
    ring_open(&t, 4);
    for (uint64_t lap = 0; lap < 3; lap++) {
        for (uint64_t i = 0; i < 4; i++)
            push(&t, lap * 4 + i);
        ck_assert(!lb_ring_prod_room(&t.prod));
        ck_assert_uint_eq(lb_ring_cons_avail(&t.cons, 2), 2);
        ck_assert_uint_eq(take(&t), lap * 4);
        ck_assert_uint_eq(take(&t), lap * 4 + 1);
        ck_assert_uint_eq(lb_ring_cons_avail(&t.cons, UINT64_MAX), 2);
        ck_assert_uint_eq(take(&t), lap * 4 + 2);
        ck_assert_uint_eq(take(&t), lap * 4 + 3);
        ck_assert_uint_eq(lb_ring_cons_avail(&t.cons, UINT64_MAX), 0);
        ck_assert(lb_ring_prod_room(&t.prod));
    }
    free(t.slots);
}
END_TEST

#define XT_ITEMS 200000u
/* Bounds of the waits (yields, not time: the machine may be loaded). */
#define XT_WAITS 100000000ull

static atomic_int producer_stuck;

static void *producer(void *arg)
{
    struct test_ring *t = arg;
    for (uint64_t i = 0; i < XT_ITEMS; i++) {
        uint64_t waits = 0;
        while (!lb_ring_prod_room(&t->prod)) {
            if (++waits == XT_WAITS) {
                atomic_store(&producer_stuck, 1);
                return NULL;
            }
            sched_yield();
        }
        struct entry e;
        memset(&e, 0, sizeof e);
        e.a = (uint8_t)i;
        e.value = i;
        lb_ring_prod_push(&t->prod, &e, sizeof e);
    }
    return NULL;
}

/* A producer thread: every entry seen once, in order, with its payload. */
START_TEST(cross_thread)
{
    struct test_ring t;
    ring_open(&t, 16);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, producer, &t), 0);
    uint64_t next = 0, idle = 0;
    while (next < XT_ITEMS && idle < XT_WAITS &&
           !atomic_load(&producer_stuck)) {
        uint64_t n = lb_ring_cons_avail(&t.cons, UINT64_MAX);
        if (!n) {
            idle++;
            sched_yield(); /* the producer may need this CPU */
            continue;
        }
        idle = 0;
        for (uint64_t k = 0; k < n; k++) {
            const struct entry *e = lb_ring_cons_slot(&t.cons, k);
            ck_assert_uint_eq(e->value, next);
            ck_assert_uint_eq(e->a, (uint8_t)next);
            next++;
        }
        lb_ring_cons_advance(&t.cons, n);
    }
    pthread_join(th, NULL);
    ck_assert_int_eq(atomic_load(&producer_stuck), 0);
    ck_assert_uint_eq(next, XT_ITEMS);
    free(t.slots);
}
END_TEST

TE_TEST_MAIN("lb_ring",
             TE_TCASE("ring", lap_wrap, full_and_batches, cross_thread))
