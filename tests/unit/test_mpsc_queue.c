/* Unit tests for the bounded MPSC queue (core/mpsc_queue.c). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mpsc_queue.h"
#include "te_test.h"

#define ITEM(x) ((void *)(uintptr_t)(x))
#define VAL(p) ((uintptr_t)(p))

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

START_TEST(test_fifo_single_producer)
{
    struct te_mpsc *q = te_mpsc_new(64);
    ck_assert_ptr_nonnull(q);
    void *out[64];
    ck_assert_uint_eq(te_mpsc_pop(q, out, 64), 0); /* empty */
    ck_assert_uint_eq(te_mpsc_size(q), 0);
    for (uintptr_t i = 1; i <= 50; i++)
        ck_assert_int_eq(te_mpsc_push(q, ITEM(i)), 0);
    ck_assert_uint_eq(te_mpsc_size(q), 50);
    /* pop respects max and order */
    ck_assert_uint_eq(te_mpsc_pop(q, out, 7), 7);
    for (uintptr_t i = 0; i < 7; i++)
        ck_assert_uint_eq(VAL(out[i]), i + 1);
    ck_assert_uint_eq(te_mpsc_pop(q, out, 0), 0);
    ck_assert_uint_eq(te_mpsc_size(q), 43);
    ck_assert_uint_eq(te_mpsc_pop(q, out, 64), 43);
    for (uintptr_t i = 0; i < 43; i++)
        ck_assert_uint_eq(VAL(out[i]), i + 8);
    ck_assert_uint_eq(te_mpsc_pop(q, out, 64), 0);
    ck_assert_uint_eq(te_mpsc_size(q), 0);
    /* NULL items are ordinary items */
    ck_assert_int_eq(te_mpsc_push(q, NULL), 0);
    ck_assert_uint_eq(te_mpsc_pop(q, out, 1), 1);
    ck_assert_ptr_null(out[0]);
    te_mpsc_free(q);
    te_mpsc_free(NULL);
}
END_TEST

START_TEST(test_full_eagain)
{
    struct te_mpsc *q = te_mpsc_new(16);
    void *out[32];
    for (uintptr_t i = 0; i < 16; i++)
        ck_assert_int_eq(te_mpsc_push(q, ITEM(i)), 0);
    ck_assert_int_eq(te_mpsc_push(q, ITEM(99)), -EAGAIN);
    ck_assert_int_eq(te_mpsc_push(q, ITEM(99)), -EAGAIN);
    ck_assert_uint_eq(te_mpsc_size(q), 16);
    /* Freeing one cell admits exactly one more. */
    ck_assert_uint_eq(te_mpsc_pop(q, out, 1), 1);
    ck_assert_uint_eq(VAL(out[0]), 0);
    ck_assert_int_eq(te_mpsc_push(q, ITEM(16)), 0);
    ck_assert_int_eq(te_mpsc_push(q, ITEM(17)), -EAGAIN);
    ck_assert_uint_eq(te_mpsc_pop(q, out, 32), 16);
    for (uintptr_t i = 0; i < 16; i++)
        ck_assert_uint_eq(VAL(out[i]), i + 1);
    te_mpsc_free(q);
}
END_TEST

static size_t usable(size_t requested)
{
    struct te_mpsc *q = te_mpsc_new(requested);
    ck_assert_ptr_nonnull(q);
    size_t n = 0;
    while (n < 100000 && te_mpsc_push(q, ITEM(n)) == 0)
        n++;
    te_mpsc_free(q);
    return n;
}

START_TEST(test_capacity_rounding)
{
    ck_assert_uint_eq(usable(0), 2);
    ck_assert_uint_eq(usable(1), 2);
    ck_assert_uint_eq(usable(2), 2);
    ck_assert_uint_eq(usable(3), 4);
    ck_assert_uint_eq(usable(5), 8);
    ck_assert_uint_eq(usable(8), 8);
    ck_assert_uint_eq(usable(1000), 1024);
    ck_assert_uint_eq(usable(1025), 2048);
    errno = 0;
    ck_assert_ptr_null(te_mpsc_new(SIZE_MAX));
    ck_assert_int_ne(errno, 0);
}
END_TEST

START_TEST(test_wraparound)
{
    struct te_mpsc *q = te_mpsc_new(4);
    void *out[4];
    uintptr_t next_in = 0, next_out = 0;
    for (int round = 0; round < 10000; round++) {
        size_t k = (size_t)(round % 4) + 1; /* 1..4 per round */
        for (size_t i = 0; i < k; i++)
            ck_assert_int_eq(te_mpsc_push(q, ITEM(next_in++)), 0);
        if (k == 4)
            ck_assert_int_eq(te_mpsc_push(q, ITEM(12345)), -EAGAIN);
        size_t got = 0;
        while (got < k) {
            size_t n = te_mpsc_pop(q, out, (size_t)(round % 3) + 1);
            ck_assert_uint_gt(n, 0);
            for (size_t i = 0; i < n; i++)
                ck_assert_uint_eq(VAL(out[i]), next_out++);
            got += n;
        }
        ck_assert_uint_eq(got, k);
        ck_assert_uint_eq(te_mpsc_size(q), 0);
    }
    ck_assert_uint_eq(next_in, next_out);
    te_mpsc_free(q);
}
END_TEST

/* N producers x M items; the consumer checks per-producer order. */
#define MP_PRODUCERS 4
#define MP_ITEMS 100000u
#define MP_SECONDS 20.0

struct mp {
    struct te_mpsc *q;
    int id;
    double deadline;
    _Atomic uint64_t *full_retries;
    _Atomic int *timed_out;
    _Atomic int *errors;
};

static void *mp_producer(void *p)
{
    struct mp *m = p;
    uint64_t retries = 0;
    for (uint32_t i = 0; i < MP_ITEMS; i++) {
        /* item = producer << 32 | seq + 1 (never NULL) */
        void *item = ITEM(((uint64_t)m->id << 32) | (uint64_t)(i + 1));
        int rc;
        /* (no ck_assert in threads: Check is not thread-safe) */
        while ((rc = te_mpsc_push(m->q, item)) == -EAGAIN) {
            retries++;
            if ((retries & 1023) == 0 && now_s() > m->deadline) {
                atomic_store(m->timed_out, 1);
                goto out;
            }
            sched_yield();
        }
        if (rc != 0) {
            atomic_fetch_add(m->errors, 1);
            break;
        }
    }
out:
    atomic_fetch_add(m->full_retries, retries);
    return NULL;
}

START_TEST(test_multi_producer)
{
    _Atomic uint64_t retries = 0;
    _Atomic int timed_out = 0, errors = 0;
    struct te_mpsc *q = te_mpsc_new(1024); /* small enough to hit -EAGAIN */
    struct mp m[MP_PRODUCERS];
    pthread_t th[MP_PRODUCERS];
    double deadline = now_s() + MP_SECONDS;
    for (int i = 0; i < MP_PRODUCERS; i++) {
        m[i] = (struct mp){q, i, deadline, &retries, &timed_out, &errors};
        ck_assert_int_eq(pthread_create(&th[i], NULL, mp_producer, &m[i]), 0);
    }
    uint64_t next[MP_PRODUCERS] = {0};
    uint64_t total = 0, want = (uint64_t)MP_PRODUCERS * MP_ITEMS, polls = 0;
    uint64_t bad = 0; /* counted, asserted once: per-item ck_assert is slow */
    void *out[64];
    while (total < want) {
        size_t n = te_mpsc_pop(q, out, 1 + (size_t)(polls++ % 64));
        if (n == 0) {
            if (now_s() > deadline + 1.0 || atomic_load(&timed_out))
                break;
            sched_yield();
            continue;
        }
        for (size_t i = 0; i < n; i++) {
            uint64_t v = VAL(out[i]);
            uint32_t id = (uint32_t)(v >> 32);
            uint64_t seq = v & 0xffffffffu;
            if (id >= MP_PRODUCERS || seq != next[id] + 1) {
                bad++; /* out of order, duplicate, lost or foreign */
                continue;
            }
            next[id] = seq;
        }
        total += n;
    }
    for (int i = 0; i < MP_PRODUCERS; i++)
        pthread_join(th[i], NULL);
    ck_assert_uint_eq(bad, 0);
    ck_assert_int_eq(atomic_load(&errors), 0);
    ck_assert_int_eq(atomic_load(&timed_out), 0);
    ck_assert_uint_eq(total, want);
    for (int i = 0; i < MP_PRODUCERS; i++)
        ck_assert_uint_eq(next[i], MP_ITEMS);
    ck_assert_uint_eq(te_mpsc_pop(q, out, 64), 0); /* nothing extra */
    fprintf(stderr, "mpsc: %llu items, %llu full retries\n",
            (unsigned long long)total, (unsigned long long)atomic_load(&retries));
    te_mpsc_free(q);
}
END_TEST

TE_TEST_MAIN("mpsc_queue",
             TE_TCASE("basic",
               test_fifo_single_producer, test_full_eagain,
               test_capacity_rounding, test_wraparound),
             TE_TCASE_FULL("concurrency", 120, NULL, NULL,
               test_multi_producer))
