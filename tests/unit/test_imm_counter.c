/* Unit tests for the ImmCounter table (core/imm_counter.c). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "imm_counter.h"
#include "te_test.h"

/* ------------------------------------------------------------ helpers */

/* The sink used by the tests: deliver the fire directly to the callback. */
static void direct_fire(void *sink, uint32_t imm, te_imm_fn cb, void *arg)
{
    if (sink)
        atomic_fetch_add((_Atomic uint64_t *)sink, 1);
    cb(imm, 0, arg);
}

struct rec {
    _Atomic int calls;
    _Atomic uint32_t last_imm;
    _Atomic int bad_status;
};

/* May run on any thread: no ck_assert here (Check is not thread-safe). */
static void rec_cb(uint32_t imm, int status, void *arg)
{
    struct rec *r = arg;
    if (status != 0)
        atomic_fetch_add(&r->bad_status, 1);
    atomic_store(&r->last_imm, imm);
    atomic_fetch_add(&r->calls, 1);
}

static uint64_t banked_of(struct te_imm_table *t, uint32_t imm, int *armed)
{
    uint64_t b = 12345;
    int a = -1;
    ck_assert_int_eq(te_imm_table_poll(t, imm, &b, &a), 0);
    if (armed)
        *armed = a;
    return b;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* xorshift64* */
static uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

/* ------------------------------------------------------------ basics */

START_TEST(test_banked_fire_at_once)
{
    _Atomic uint64_t fires = 0;
    struct te_imm_table *t = te_imm_table_new(16, direct_fire, (void *)&fires);
    ck_assert_ptr_nonnull(t);
    struct rec r = {0};
    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(te_imm_table_arrive(t, 7, 1), 0);
    int armed;
    ck_assert_uint_eq(banked_of(t, 7, &armed), 5);
    ck_assert_int_eq(armed, 0);
    /* 5 banked, expect 3: fires from the expecting thread, 2 stay banked. */
    ck_assert_int_eq(te_imm_table_expect(t, 7, 3, rec_cb, &r), 0);
    ck_assert_int_eq(atomic_load(&r.calls), 1);
    ck_assert_uint_eq(atomic_load(&r.last_imm), 7);
    ck_assert_uint_eq(banked_of(t, 7, &armed), 2);
    ck_assert_int_eq(armed, 0);
    ck_assert_uint_eq(atomic_load(&fires), 1);
    te_imm_table_free(t);
}
END_TEST

START_TEST(test_exact_count_and_surplus)
{
    struct te_imm_table *t = te_imm_table_new(16, direct_fire, NULL);
    struct rec r = {0};
    int armed;
    ck_assert_int_eq(te_imm_table_expect(t, 1, 4, rec_cb, &r), 0);
    ck_assert_uint_eq(banked_of(t, 1, &armed), 0);
    ck_assert_int_eq(armed, 1);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(te_imm_table_arrive(t, 1, 1), 0);
        ck_assert_int_eq(atomic_load(&r.calls), 0);
        ck_assert_uint_eq(banked_of(t, 1, &armed), (uint64_t)i + 1);
        ck_assert_int_eq(armed, 1);
    }
    ck_assert_int_eq(te_imm_table_arrive(t, 1, 1), 0); /* the 4th */
    ck_assert_int_eq(atomic_load(&r.calls), 1);
    ck_assert_uint_eq(banked_of(t, 1, &armed), 0);
    ck_assert_int_eq(armed, 0);
    /* Later arrivals are surplus and stay banked; no second fire. */
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(te_imm_table_arrive(t, 1, 1), 0);
    ck_assert_int_eq(atomic_load(&r.calls), 1);
    ck_assert_uint_eq(banked_of(t, 1, &armed), 6);
    ck_assert_int_eq(armed, 0);
    te_imm_table_free(t);
}
END_TEST

START_TEST(test_rearm_after_fire)
{
    struct te_imm_table *t = te_imm_table_new(16, direct_fire, NULL);
    struct rec r1 = {0}, r2 = {0}, r3 = {0};
    ck_assert_int_eq(te_imm_table_expect(t, 9, 2, rec_cb, &r1), 0);
    ck_assert_int_eq(te_imm_table_arrive(t, 9, 3), 0); /* 1 surplus */
    ck_assert_int_eq(atomic_load(&r1.calls), 1);
    /* Re-arm: 1 banked + 1 more arrival meets 2. */
    ck_assert_int_eq(te_imm_table_expect(t, 9, 2, rec_cb, &r2), 0);
    ck_assert_int_eq(atomic_load(&r2.calls), 0);
    ck_assert_int_eq(te_imm_table_arrive(t, 9, 1), 0);
    ck_assert_int_eq(atomic_load(&r2.calls), 1);
    ck_assert_int_eq(atomic_load(&r1.calls), 1);
    /* And again, NULL callback: nothing fired, counts consumed. */
    ck_assert_int_eq(te_imm_table_expect(t, 9, 1, NULL, NULL), 0);
    int armed;
    ck_assert_uint_eq(banked_of(t, 9, &armed), 0);
    ck_assert_int_eq(armed, 1);
    ck_assert_int_eq(te_imm_table_arrive(t, 9, 1), 0);
    ck_assert_uint_eq(banked_of(t, 9, &armed), 0);
    ck_assert_int_eq(armed, 0);
    ck_assert_int_eq(te_imm_table_expect(t, 9, 1, rec_cb, &r3), 0);
    ck_assert_int_eq(te_imm_table_arrive(t, 9, 1), 0);
    ck_assert_int_eq(atomic_load(&r3.calls), 1);
    te_imm_table_free(t);
}
END_TEST

/* Cancel by epoch: disarms only the unmet arming it names, keeps banked
 * arrivals, never touches a met or a newer arming. */
START_TEST(test_cancel_epoch)
{
    struct te_imm_table *t = te_imm_table_new(16, direct_fire, NULL);
    struct rec r1 = {0}, r2 = {0};
    uint64_t e1 = 0, e2 = 0;
    int fired = -1;
    ck_assert_int_eq(te_imm_table_arrive(t, 4, 1), 0);
    ck_assert_int_eq(te_imm_table_expect_ex(t, 4, 3, rec_cb, &r1, &e1, &fired),
                     0);
    ck_assert_int_eq(fired, 0);
    ck_assert_int_eq(te_imm_table_arrive(t, 4, 1), 0);
    ck_assert_int_eq(te_imm_table_cancel(t, 4, e1), 1);
    int armed = 1;
    ck_assert_uint_eq(banked_of(t, 4, &armed), 2); /* both arrivals kept */
    ck_assert_int_eq(armed, 0);
    ck_assert_int_eq(te_imm_table_arrive(t, 4, 5), 0);
    ck_assert_int_eq(atomic_load(&r1.calls), 0); /* cancelled: never fires */
    ck_assert_int_eq(te_imm_table_cancel(t, 4, e1), 0); /* twice: no-op */
    /* Met at once from the bank: fired = 1, a cancel afterwards is a no-op. */
    ck_assert_int_eq(te_imm_table_expect_ex(t, 4, 7, rec_cb, &r2, &e2, &fired),
                     0);
    ck_assert_int_eq(fired, 1);
    ck_assert_int_eq(atomic_load(&r2.calls), 1);
    ck_assert_int_eq(te_imm_table_cancel(t, 4, e2), 0);
    /* A stale epoch does not disarm a newer arming. */
    uint64_t e3 = 0;
    ck_assert_int_eq(te_imm_table_expect_ex(t, 4, 1, rec_cb, &r2, &e3, &fired),
                     0);
    ck_assert_uint_ne(e3, e1);
    ck_assert_int_eq(te_imm_table_cancel(t, 4, e1), 0);
    banked_of(t, 4, &armed);
    ck_assert_int_eq(armed, 1);
    ck_assert_int_eq(te_imm_table_arrive(t, 4, 1), 0);
    ck_assert_int_eq(atomic_load(&r2.calls), 2);
    ck_assert_int_eq(te_imm_table_cancel(t, 99, 1), 0); /* unknown imm */
    te_imm_table_free(t);
}
END_TEST

START_TEST(test_busy_and_einval)
{
    struct te_imm_table *t = te_imm_table_new(16, direct_fire, NULL);
    struct rec r = {0}, r2 = {0};
    ck_assert_int_eq(te_imm_table_expect(t, 3, 0, rec_cb, &r), -EINVAL);
    ck_assert_int_eq(te_imm_table_expect(t, 3, 2, rec_cb, &r), 0);
    ck_assert_int_eq(te_imm_table_expect(t, 3, 2, rec_cb, &r2), -EBUSY);
    ck_assert_int_eq(te_imm_table_expect(t, 3, 1, NULL, NULL), -EBUSY);
    ck_assert_int_eq(te_imm_table_arrive(t, 3, 2), 0);
    ck_assert_int_eq(atomic_load(&r.calls), 1);
    ck_assert_int_eq(atomic_load(&r2.calls), 0);
    /* Met: no longer busy. */
    ck_assert_int_eq(te_imm_table_expect(t, 3, 1, rec_cb, &r2), 0);
    te_imm_table_free(t);
}
END_TEST

START_TEST(test_remove)
{
    struct te_imm_table *t = te_imm_table_new(16, direct_fire, NULL);
    struct rec r = {0};
    uint64_t surplus = 99;
    int armed;
    /* Unknown imm. */
    ck_assert_int_eq(te_imm_table_remove(t, 42, &surplus), 0);
    ck_assert_uint_eq(surplus, 0);
    ck_assert_uint_eq(banked_of(t, 42, &armed), 0);
    ck_assert_int_eq(armed, 0);
    ck_assert_int_eq(te_imm_table_remove(t, 42, NULL), 0);
    /* Banked, not armed. */
    ck_assert_int_eq(te_imm_table_arrive(t, 5, 4), 0);
    ck_assert_int_eq(te_imm_table_remove(t, 5, &surplus), 0);
    ck_assert_uint_eq(surplus, 4);
    ck_assert_uint_eq(banked_of(t, 5, &armed), 0);
    /* Armed with 3 of 10: remove returns 3 and disarms. */
    ck_assert_int_eq(te_imm_table_arrive(t, 5, 3), 0);
    ck_assert_int_eq(te_imm_table_expect(t, 5, 10, rec_cb, &r), 0);
    ck_assert_uint_eq(banked_of(t, 5, &armed), 3);
    ck_assert_int_eq(armed, 1);
    ck_assert_int_eq(te_imm_table_remove(t, 5, &surplus), 0);
    ck_assert_uint_eq(surplus, 3);
    ck_assert_uint_eq(banked_of(t, 5, &armed), 0);
    ck_assert_int_eq(armed, 0);
    /* Later arrivals start fresh and never call the removed callback. */
    for (int i = 0; i < 25; i++)
        ck_assert_int_eq(te_imm_table_arrive(t, 5, 1), 0);
    ck_assert_int_eq(atomic_load(&r.calls), 0);
    ck_assert_uint_eq(banked_of(t, 5, &armed), 25);
    ck_assert_int_eq(armed, 0);
    /* Can arm again after remove. */
    ck_assert_int_eq(te_imm_table_expect(t, 5, 25, rec_cb, &r), 0);
    ck_assert_int_eq(atomic_load(&r.calls), 1);
    /* Armed with nothing banked: surplus 0, then arrivals don't fire. */
    ck_assert_int_eq(te_imm_table_expect(t, 5, 1, rec_cb, &r), 0);
    ck_assert_int_eq(te_imm_table_remove(t, 5, &surplus), 0);
    ck_assert_uint_eq(surplus, 0);
    ck_assert_int_eq(te_imm_table_arrive(t, 5, 1), 0);
    ck_assert_int_eq(atomic_load(&r.calls), 1);
    ck_assert_uint_eq(banked_of(t, 5, NULL), 1);
    te_imm_table_free(t);
}
END_TEST

START_TEST(test_try_take)
{
    struct te_imm_table *t = te_imm_table_new(16, direct_fire, NULL);
    struct rec r = {0};
    ck_assert_int_eq(te_imm_table_try_take(t, 11, 1), 0); /* unknown */
    ck_assert_int_eq(te_imm_table_try_take(t, 11, 0), -EINVAL);
    ck_assert_int_eq(te_imm_table_arrive(t, 11, 2), 0);
    ck_assert_int_eq(te_imm_table_try_take(t, 11, 3), 0);
    ck_assert_uint_eq(banked_of(t, 11, NULL), 2); /* nothing consumed */
    ck_assert_int_eq(te_imm_table_arrive(t, 11, 2), 0);
    ck_assert_int_eq(te_imm_table_try_take(t, 11, 3), 1);
    ck_assert_uint_eq(banked_of(t, 11, NULL), 1);
    ck_assert_int_eq(te_imm_table_try_take(t, 11, 1), 1);
    ck_assert_uint_eq(banked_of(t, 11, NULL), 0);
    ck_assert_int_eq(te_imm_table_try_take(t, 11, 1), 0);
    /* Armed (callback or not) -> -EBUSY, even with enough banked. */
    ck_assert_int_eq(te_imm_table_expect(t, 11, 5, rec_cb, &r), 0);
    ck_assert_int_eq(te_imm_table_try_take(t, 11, 1), -EBUSY);
    ck_assert_int_eq(te_imm_table_arrive(t, 11, 4), 0);
    ck_assert_int_eq(te_imm_table_try_take(t, 11, 1), -EBUSY);
    ck_assert_int_eq(te_imm_table_arrive(t, 11, 3), 0); /* meets 5, 2 surplus */
    ck_assert_int_eq(atomic_load(&r.calls), 1);
    ck_assert_int_eq(te_imm_table_try_take(t, 11, 2), 1);
    ck_assert_uint_eq(banked_of(t, 11, NULL), 0);
    te_imm_table_free(t);
}
END_TEST

START_TEST(test_arrive_n_crossing)
{
    struct te_imm_table *t = te_imm_table_new(16, direct_fire, NULL);
    struct rec r = {0};
    int armed;
    ck_assert_int_eq(te_imm_table_arrive(t, 0, 0), 0); /* n == 0: no-op */
    ck_assert_uint_eq(banked_of(t, 0, NULL), 0);
    ck_assert_int_eq(te_imm_table_expect(t, 0, 10, rec_cb, &r), 0);
    ck_assert_int_eq(te_imm_table_arrive(t, 0, 7), 0);
    ck_assert_int_eq(atomic_load(&r.calls), 0);
    ck_assert_uint_eq(banked_of(t, 0, &armed), 7);
    ck_assert_int_eq(armed, 1);
    ck_assert_int_eq(te_imm_table_arrive(t, 0, 100), 0); /* overshoots by 97 */
    ck_assert_int_eq(atomic_load(&r.calls), 1);
    ck_assert_uint_eq(atomic_load(&r.last_imm), 0);
    ck_assert_uint_eq(banked_of(t, 0, &armed), 97);
    ck_assert_int_eq(armed, 0);
    /* Exactly reaching the count with one big arrival. */
    ck_assert_int_eq(te_imm_table_expect(t, 0xffffffffu, 1000, rec_cb, &r), 0);
    ck_assert_int_eq(te_imm_table_arrive(t, 0xffffffffu, 1000), 0);
    ck_assert_int_eq(atomic_load(&r.calls), 2);
    ck_assert_uint_eq(atomic_load(&r.last_imm), 0xffffffffu);
    ck_assert_uint_eq(banked_of(t, 0xffffffffu, &armed), 0);
    ck_assert_int_eq(armed, 0);
    /* Large counts. */
    ck_assert_int_eq(te_imm_table_expect(t, 2, UINT64_C(1) << 40, NULL, NULL), 0);
    ck_assert_int_eq(te_imm_table_arrive(t, 2, 0xffffffffu), 0);
    ck_assert_uint_eq(banked_of(t, 2, &armed), 0xffffffffu);
    ck_assert_int_eq(armed, 1);
    ck_assert_int_eq(te_imm_table_expect(t, 3, UINT64_MAX, NULL, NULL), -EINVAL);
    te_imm_table_free(t);
}
END_TEST

START_TEST(test_many_imms)
{
    const uint32_t N = 50000;
    struct te_imm_table *t = te_imm_table_new(N, direct_fire, NULL);
    ck_assert_ptr_nonnull(t);
    /* 0, 0xffffffff and a spread of values (multiplicative, distinct). */
    uint32_t *imms = malloc(N * sizeof(*imms));
    imms[0] = 0;
    imms[1] = 0xffffffffu;
    for (uint32_t i = 2; i < N; i++)
        imms[i] = (i - 1) * 2654435761u; /* odd multiplier: a bijection */
    for (uint32_t i = 0; i < N; i++)
        ck_assert_int_eq(te_imm_table_arrive(t, imms[i], (i % 7) + 1), 0);
    for (uint32_t i = 0; i < N; i++)
        ck_assert_int_eq(te_imm_table_arrive(t, imms[i], 1), 0);
    for (uint32_t i = 0; i < N; i++) {
        int armed;
        ck_assert_uint_eq(banked_of(t, imms[i], &armed), (i % 7) + 2);
        ck_assert_int_eq(armed, 0);
    }
    ck_assert_uint_eq(te_imm_table_overflow(t), 0);
    /* Unknown values read as 0 and are not inserted by poll/remove. */
    uint32_t unknown = 12345;
    for (uint32_t i = 0; i < N; i++)
        if (imms[i] == unknown) {
            unknown++;
            i = 0;
        }
    int armed;
    ck_assert_uint_eq(banked_of(t, unknown, &armed), 0);
    ck_assert_int_eq(armed, 0);
    uint64_t s = 7;
    ck_assert_int_eq(te_imm_table_remove(t, unknown, &s), 0);
    ck_assert_uint_eq(s, 0);
    ck_assert_int_eq(te_imm_table_remove(t, imms[N - 1], &s), 0);
    ck_assert_uint_eq(s, ((N - 1) % 7) + 2);
    free(imms);
    te_imm_table_free(t);
}
END_TEST

START_TEST(test_table_full)
{
    struct te_imm_table *t = te_imm_table_new(4, direct_fire, NULL);
    ck_assert_ptr_nonnull(t);
    uint32_t inserted = 0, rejected = 0;
    uint64_t lost = 0;
    for (uint32_t imm = 100; imm < 200; imm++) {
        int rc = te_imm_table_arrive(t, imm, 3);
        if (rc == 0) {
            inserted++;
            ck_assert_uint_eq(rejected, 0); /* fills, then stays full */
        } else {
            ck_assert_int_eq(rc, -ENOSPC);
            rejected++;
            lost += 3;
        }
    }
    ck_assert_uint_ge(inserted, 4); /* at least the requested capacity */
    ck_assert_uint_gt(rejected, 0);
    ck_assert_uint_eq(te_imm_table_overflow(t), lost);
    /* Existing keys keep working; new ones are refused. */
    ck_assert_int_eq(te_imm_table_arrive(t, 100, 1), 0);
    ck_assert_uint_eq(banked_of(t, 100, NULL), 4);
    ck_assert_int_eq(te_imm_table_expect(t, 100, 4, NULL, NULL), 0);
    ck_assert_int_eq(te_imm_table_expect(t, 199, 1, NULL, NULL), -ENOSPC);
    ck_assert_int_eq(te_imm_table_arrive(t, 199, 2), -ENOSPC);
    ck_assert_uint_eq(te_imm_table_overflow(t), lost + 2);
    /* remove resets a slot but does not free it. */
    uint64_t s;
    ck_assert_int_eq(te_imm_table_remove(t, 101, &s), 0);
    ck_assert_uint_eq(s, 3);
    ck_assert_int_eq(te_imm_table_arrive(t, 199, 1), -ENOSPC);
    ck_assert_int_eq(te_imm_table_arrive(t, 101, 1), 0);
    /* poll/try_take/remove of unknown imms on a full table. */
    int armed;
    ck_assert_uint_eq(banked_of(t, 199, &armed), 0);
    ck_assert_int_eq(te_imm_table_try_take(t, 199, 1), 0);
    ck_assert_int_eq(te_imm_table_remove(t, 199, &s), 0);
    ck_assert_uint_eq(s, 0);
    te_imm_table_free(t);

    /* Capacity 1 still holds one value. */
    t = te_imm_table_new(1, NULL, NULL);
    ck_assert_int_eq(te_imm_table_arrive(t, 0, 1), 0);
    ck_assert_uint_eq(banked_of(t, 0, NULL), 1);
    te_imm_table_free(t);
}
END_TEST

/* ------------------------------------------------------------ concurrency */

#define CC_IMMS 6
#define CC_ARRIVERS 3
#define CC_SECONDS 2.0       /* normal run length */
#define CC_HARD_SECONDS 10.0 /* bound on everything, even under valgrind */
#define CC_MIN_EXPECTS 2000u /* keep going past CC_SECONDS until this many */
#define CC_MAX_ARRIVALS 50000000u
#define CC_MAX_EXPECTS 1000000u

struct cc_exp { /* one expectation */
    uint32_t imm;
    uint64_t count;
    _Atomic int fired;
};

struct cc {
    struct te_imm_table *t;
    uint32_t imms[CC_IMMS];
    _Atomic int stop;
    _Atomic uint64_t arrivals;
    _Atomic uint64_t arrive_errs;
    _Atomic uint64_t fired_count; /* sum of count over fired expectations */
    _Atomic uint64_t fires;
    _Atomic uint64_t double_fires;
    _Atomic uint64_t wrong_imm;
    struct cc_exp *exps;
    uint64_t nexps;
    uint64_t taken, removed, removes, busy, rearmed, errs;
    double deadline, hard_deadline;
};

/* Marker callback: cc_fire records the event and never calls it. */
static void cc_cb(uint32_t imm, int status, void *arg)
{
    (void)imm;
    (void)status;
    (void)arg;
    abort();
}

static void cc_fire(void *sink, uint32_t imm, te_imm_fn cb, void *arg)
{
    struct cc *c = sink;
    struct cc_exp *e = arg;
    if (cb != cc_cb || imm != e->imm)
        atomic_fetch_add(&c->wrong_imm, 1);
    atomic_fetch_add(&c->fired_count, e->count);
    atomic_fetch_add(&c->fires, 1);
    if (atomic_fetch_add(&e->fired, 1) != 0)
        atomic_fetch_add(&c->double_fires, 1);
}

static void *cc_arriver(void *p)
{
    struct cc *c = p;
    uint64_t seed = (uint64_t)(uintptr_t)&seed | 1, local = 0;
    for (uint32_t i = 0; i < CC_MAX_ARRIVALS; i++) {
        if ((i & 1023) == 0) {
            if (atomic_load(&c->stop) || now_s() > c->hard_deadline)
                break;
            sched_yield(); /* let the armer run (valgrind serialises) */
        }
        uint64_t r = rnd(&seed);
        uint32_t imm = c->imms[r % CC_IMMS];
        uint32_t n = (uint32_t)((r >> 32) % 4) + 1;
        if (te_imm_table_arrive(c->t, imm, n) != 0)
            atomic_fetch_add(&c->arrive_errs, 1);
        else
            local += n;
    }
    atomic_fetch_add(&c->arrivals, local);
    return NULL;
}

/*
 * The single arming thread: arms a new expectation once the previous one on
 * that imm has fired (must never be -EBUSY), sometimes tries to arm on top
 * of an unfired one (-EBUSY, or 0 if it was met concurrently), sometimes
 * try_takes, sometimes removes.
 */
static void cc_armer(struct cc *c)
{
    struct cc_exp *cur[CC_IMMS] = {0};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (uint64_t it = 0; c->nexps < CC_MAX_EXPECTS && it < 100000000u; it++) {
        if ((it & 255) == 0) {
            double t = now_s();
            if (t > c->hard_deadline ||
                (t > c->deadline && c->nexps >= CC_MIN_EXPECTS))
                break;
        }
        uint64_t r = rnd(&seed);
        int k = (int)(r % CC_IMMS);
        uint32_t imm = c->imms[k];
        unsigned op = (unsigned)((r >> 20) % 64);
        int armed_known = cur[k] && !atomic_load(&cur[k]->fired);

        if (op == 0 && (r >> 50) % 4 == 0) { /* remove: disarms if unmet */
            uint64_t s;
            te_imm_table_remove(c->t, imm, &s);
            c->removed += s;
            c->removes++;
            cur[k] = NULL;
            continue;
        }
        if (op < 8) { /* try_take */
            uint64_t want = (r >> 40) % 8 + 1;
            int rc = te_imm_table_try_take(c->t, imm, want);
            if (rc == 1)
                c->taken += want;
            else if (rc == -EBUSY ? !armed_known : rc != 0)
                c->errs++;
            continue;
        }
        if (armed_known && op >= 12)
            continue;
        struct cc_exp *e = &c->exps[c->nexps];
        e->imm = imm;
        e->count = armed_known ? 1 : (r >> 32) % 64 + 1;
        atomic_store(&e->fired, 0);
        int rc = te_imm_table_expect(c->t, imm, e->count, cc_cb, e);
        if (rc == 0) {
            c->nexps++;
            cur[k] = e;
            c->rearmed += armed_known;
        } else if (rc == -EBUSY && armed_known) {
            c->busy++;
        } else {
            c->errs++; /* -EBUSY after the previous one fired: a bug */
        }
    }
}

START_TEST(test_concurrent_conservation)
{
    struct cc *c = calloc(1, sizeof(*c));
    ck_assert_ptr_nonnull(c);
    c->t = te_imm_table_new(64, cc_fire, c);
    ck_assert_ptr_nonnull(c->t);
    for (int k = 0; k < CC_IMMS; k++)
        c->imms[k] = k == 0 ? 0 : k == 1 ? 0xffffffffu : (uint32_t)k * 1000003u;
    c->exps = calloc(CC_MAX_EXPECTS, sizeof(*c->exps));
    ck_assert_ptr_nonnull(c->exps);
    c->deadline = now_s() + CC_SECONDS;
    c->hard_deadline = c->deadline - CC_SECONDS + CC_HARD_SECONDS;

    pthread_t th[CC_ARRIVERS];
    for (int i = 0; i < CC_ARRIVERS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, cc_arriver, c), 0);
    cc_armer(c);
    atomic_store(&c->stop, 1);
    for (int i = 0; i < CC_ARRIVERS; i++)
        pthread_join(th[i], NULL);

    /* Count what is still armed, then drain: remove returns banked. */
    uint64_t final_banked = 0, still_armed = 0;
    for (int k = 0; k < CC_IMMS; k++) {
        uint64_t s;
        int armed;
        banked_of(c->t, c->imms[k], &armed);
        still_armed += armed;
        ck_assert_int_eq(te_imm_table_remove(c->t, c->imms[k], &s), 0);
        final_banked += s;
        ck_assert_uint_eq(banked_of(c->t, c->imms[k], &armed), 0);
        ck_assert_int_eq(armed, 0);
    }
    uint64_t unfired = 0;
    for (uint64_t i = 0; i < c->nexps; i++) {
        int f = atomic_load(&c->exps[i].fired);
        ck_assert_int_le(f, 1);
        unfired += f == 0;
    }
    uint64_t arrivals = atomic_load(&c->arrivals);
    uint64_t consumed = atomic_load(&c->fired_count);
    fprintf(stderr,
            "imm concurrency: %llu arrivals, %llu expectations (%llu armed on "
            "a just-met one), %llu fired, %llu unfired (%llu still armed), "
            "%llu busy, %llu taken, %llu removes returned %llu, final banked "
            "%llu\n",
            (unsigned long long)arrivals, (unsigned long long)c->nexps,
            (unsigned long long)c->rearmed,
            (unsigned long long)atomic_load(&c->fires),
            (unsigned long long)unfired, (unsigned long long)still_armed,
            (unsigned long long)c->busy, (unsigned long long)c->taken,
            (unsigned long long)c->removes, (unsigned long long)c->removed,
            (unsigned long long)final_banked);
    ck_assert_uint_eq(atomic_load(&c->arrive_errs), 0);
    ck_assert_uint_eq(atomic_load(&c->double_fires), 0);
    ck_assert_uint_eq(atomic_load(&c->wrong_imm), 0);
    ck_assert_uint_eq(c->errs, 0);
    ck_assert_uint_eq(atomic_load(&c->fires) + unfired, c->nexps);
    /* An expectation ends unfired only by a remove (or still being armed). */
    ck_assert_uint_le(unfired, c->removes + still_armed);
    /* Conservation: no arrival lost or counted twice. */
    ck_assert_uint_eq(arrivals, consumed + c->taken + c->removed + final_banked);
    ck_assert_uint_gt(atomic_load(&c->fires), 10);
    ck_assert_uint_eq(te_imm_table_overflow(c->t), 0);
    te_imm_table_free(c->t);
    free(c->exps);
    free(c);
}
END_TEST

/* Several threads arrive on one imm armed with their exact total. */
#define ONE_THREADS 3
#define ONE_PER_THREAD 200000u

struct one {
    struct te_imm_table *t;
    _Atomic int errs;
};

static void *one_arriver(void *p)
{
    struct one *o = p;
    for (uint32_t i = 0; i < ONE_PER_THREAD; i++)
        if (te_imm_table_arrive(o->t, 77, 1) != 0)
            atomic_fetch_add(&o->errs, 1);
    return NULL;
}

START_TEST(test_concurrent_single_threshold)
{
    struct one o = {0};
    struct rec r = {0};
    o.t = te_imm_table_new(8, direct_fire, NULL);
    ck_assert_int_eq(te_imm_table_arrive(o.t, 77, 5), 0); /* banked first */
    ck_assert_int_eq(te_imm_table_expect(o.t, 77,
                                         (uint64_t)ONE_THREADS * ONE_PER_THREAD,
                                         rec_cb, &r), 0);
    pthread_t th[ONE_THREADS];
    for (int i = 0; i < ONE_THREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, one_arriver, &o), 0);
    for (int i = 0; i < ONE_THREADS; i++)
        pthread_join(th[i], NULL);
    ck_assert_int_eq(atomic_load(&o.errs), 0);
    ck_assert_int_eq(atomic_load(&r.calls), 1);
    ck_assert_int_eq(atomic_load(&r.bad_status), 0);
    int armed;
    ck_assert_uint_eq(banked_of(o.t, 77, &armed), 5);
    ck_assert_int_eq(armed, 0);
    te_imm_table_free(o.t);
}
END_TEST

/* Threads race to arm the same fresh imms: exactly one wins each. */
#define RACE_THREADS 3
#define RACE_IMMS 5000u

struct race {
    struct te_imm_table *t;
    _Atomic int wins[RACE_IMMS];
    _Atomic int other;
    struct rec r[RACE_IMMS];
};

static void *race_armer(void *p)
{
    struct race *x = p;
    for (uint32_t i = 0; i < RACE_IMMS; i++) {
        int rc = te_imm_table_expect(x->t, 1000000u + i, 2, rec_cb, &x->r[i]);
        if (rc == 0)
            atomic_fetch_add(&x->wins[i], 1);
        else if (rc != -EBUSY)
            atomic_fetch_add(&x->other, 1);
    }
    return NULL;
}

START_TEST(test_concurrent_expect_race)
{
    struct race *x = calloc(1, sizeof(*x));
    x->t = te_imm_table_new(RACE_IMMS, direct_fire, NULL);
    pthread_t th[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, race_armer, x), 0);
    for (int i = 0; i < RACE_THREADS; i++)
        pthread_join(th[i], NULL);
    ck_assert_int_eq(atomic_load(&x->other), 0);
    for (uint32_t i = 0; i < RACE_IMMS; i++) {
        ck_assert_int_eq(atomic_load(&x->wins[i]), 1);
        ck_assert_int_eq(te_imm_table_arrive(x->t, 1000000u + i, 3), 0);
        ck_assert_int_eq(atomic_load(&x->r[i].calls), 1);
        ck_assert_int_eq(atomic_load(&x->r[i].bad_status), 0);
        ck_assert_uint_eq(banked_of(x->t, 1000000u + i, NULL), 1);
    }
    ck_assert_uint_eq(te_imm_table_overflow(x->t), 0);
    te_imm_table_free(x->t);
    free(x);
}
END_TEST

/* ------------------------------------------------------------ main */

TE_TEST_MAIN("imm_counter",
             TE_TCASE("basic",
               test_banked_fire_at_once, test_exact_count_and_surplus,
               test_rearm_after_fire, test_busy_and_einval, test_cancel_epoch,
               test_remove, test_try_take, test_arrive_n_crossing,
               test_many_imms, test_table_full),
             TE_TCASE_FULL("concurrency", 120, NULL, NULL,
               test_concurrent_conservation, test_concurrent_single_threshold,
               test_concurrent_expect_race))
