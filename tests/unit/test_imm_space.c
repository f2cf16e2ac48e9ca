/* Immediate spaces (te.h, docs/imm-counter.md "Spaces"): two subsystems
 * using the same indexes never alias, retired lives are counted as stale
 * and never credited, and every misuse names its cause. A loopback engine
 * that is its own peer sends the immediates. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "te/te.h"
#include "te_test.h"

/* The engine (its own peer, fx.peer) and buf, registered and described. */
static te_test_self fx;
static uint8_t buf[4096];

static void setup(void)
{
    te_test_self_open(&fx, NULL, buf, sizeof(buf));
}

static void teardown(void)
{
    te_test_self_close(&fx);
}

/* Send `n` immediates `raw` to ourselves (one barrier each) and wait for
 * their local completions, so that they have been delivered. */
static void send_imms(uint32_t raw, int n)
{
    te_barrier_dst d = {.peer = fx.peer, .dst = &fx.desc};
    for (int i = 0; i < n; i++) {
        te_request r;
        te_request_init(&r, TE_OP_BARRIER);
        r.imm = raw;
        r.u.barrier.count = 1;
        r.u.barrier.dsts = &d;
        int64_t id;
        while ((id = te_submit(fx.e, &r)) == -EAGAIN) {
            te_completion c[64];
            te_poll_completions(fx.e, c, 64, 1);
        }
        ck_assert_msg(id > 0, "%s", te_last_error());
    }
}

static void drain_completions(int n)
{
    te_completion c[64];
    while (n > 0) {
        int got = te_poll_completions(fx.e, c, n < 64 ? n : 64, 5000);
        ck_assert_int_gt(got, 0);
        for (int i = 0; i < got; i++)
            ck_assert_int_eq(c[i].status, 0);
        n -= got;
    }
}

static uint32_t value(te_imm_space *s, uint32_t idx)
{
    uint32_t raw = 0;
    ck_assert_int_eq(te_imm_space_value(s, idx, &raw), 0);
    return raw;
}

START_TEST(two_spaces_same_indexes_never_alias)
{
    te_imm_space *kv, *moe;
    ck_assert_int_eq(te_imm_space_create(fx.e, "kv", 64, 0, 0, 0, &kv), 0);
    ck_assert_int_eq(te_imm_space_create(fx.e, "moe", 64, 0, 0, 0, &moe), 0);
    for (uint32_t i = 0; i < 64; i++)
        ck_assert_uint_ne(value(kv, i), value(moe, i));
    /* Same index 7, different counts: each space sees exactly its own. */
    send_imms(value(kv, 7), 3);
    send_imms(value(moe, 7), 5);
    drain_completions(8);
    ck_assert_int_eq(te_imm_wait(fx.e, value(kv, 7), 3, 5000), 0);
    ck_assert_int_eq(te_imm_wait(fx.e, value(moe, 7), 5, 5000), 0);
    uint64_t banked = 1;
    ck_assert_int_eq(te_imm_poll(fx.e, value(kv, 7), &banked, NULL), 0);
    ck_assert_uint_eq(banked, 0);
    ck_assert_int_eq(te_imm_poll(fx.e, value(moe, 7), &banked, NULL), 0);
    ck_assert_uint_eq(banked, 0);
    const char *name = NULL;
    uint32_t idx = 0, life = 9;
    ck_assert_int_eq(te_imm_space_lookup(fx.e, value(moe, 7), &name, &idx, &life), 1);
    ck_assert_str_eq(name, "moe");
    ck_assert_uint_eq(idx, 7);
    ck_assert_uint_eq(life, 0);
    ck_assert_int_eq(te_imm_space_lookup(fx.e, 5, NULL, NULL, NULL), 0);
    ck_assert_uint_lt(5, TE_IMM_SPACE_REGION_START);
    ck_assert_uint_ge(value(kv, 0), TE_IMM_SPACE_REGION_START);
}
END_TEST

START_TEST(retired_life_is_stale_never_credited)
{
    te_imm_space *s;
    ck_assert_int_eq(te_imm_space_create(fx.e, "kv", 16, 4, 0, 0, &s), 0);
    uint32_t old = value(s, 3);
    send_imms(old, 2);
    drain_completions(2);
    ck_assert_int_eq(te_imm_space_retire(s), 0);
    uint32_t now = value(s, 3);
    ck_assert_uint_ne(now, old);
    /* Late arrivals of the retired life. */
    send_imms(old, 4);
    send_imms(now, 1);
    drain_completions(5);
    ck_assert_int_eq(te_imm_wait(fx.e, now, 1, 5000), 0);
    uint64_t banked = 9;
    ck_assert_int_eq(te_imm_poll(fx.e, old, &banked, NULL), 0);
    ck_assert_uint_eq(banked, 0);
    ck_assert_int_eq(te_imm_poll(fx.e, now, &banked, NULL), 0);
    ck_assert_uint_eq(banked, 0);
    te_imm_space_stats st;
    ck_assert_int_eq(te_imm_space_stats_get(s, &st), 0);
    ck_assert_uint_eq(st.stale_arrivals, 4);
    ck_assert_uint_eq(st.retired_surplus, 2);
    ck_assert_uint_eq(st.epoch, 1);
    ck_assert_uint_eq(st.life, 1);
    ck_assert_uint_eq(st.size, 16);
    ck_assert_uint_eq(st.lives, 4);
    /* Expecting a retired value is refused, naming space and life. */
    ck_assert_int_eq(te_imm_expect(fx.e, old, 1, NULL, NULL), -ESTALE);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "'kv'"));
    ck_assert_ptr_nonnull(strstr(te_last_error(), "life 0"));
    ck_assert_int_eq(te_imm_wait(fx.e, old, 1, 10), -ESTALE);
    /* Four lives: the fourth retirement comes back to life 0's values. */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(te_imm_space_retire(s), 0);
    ck_assert_uint_eq(value(s, 3), old);
    ck_assert_int_eq(te_imm_poll(fx.e, old, &banked, NULL), 0);
    ck_assert_uint_eq(banked, 0);
}
END_TEST

static _Atomic int cancelled_status = 1;

static void on_imm(uint32_t imm, int status, void *arg)
{
    (void)imm;
    (void)arg;
    atomic_store(&cancelled_status, status);
}

START_TEST(retire_cancels_armed_expectations)
{
    te_imm_space *s;
    ck_assert_int_eq(te_imm_space_create(fx.e, "kv", 8, 0, 0, 0, &s), 0);
    ck_assert_int_eq(te_imm_expect(fx.e, value(s, 1), 10, on_imm, NULL), 0);
    ck_assert_int_eq(te_imm_space_retire(s), 0);
    struct timespec ts = {0, 1000000};
    for (int i = 0; i < 5000 && atomic_load(&cancelled_status) == 1; i++)
        nanosleep(&ts, NULL);
    ck_assert_int_eq(atomic_load(&cancelled_status), -ECANCELED);
    /* The new life's value can be armed at once. */
    ck_assert_int_eq(te_imm_expect(fx.e, value(s, 1), 1, NULL, NULL), 0);
}
END_TEST

START_TEST(bad_input_names_the_cause)
{
    te_imm_space *a, *b;
    ck_assert_int_eq(te_imm_space_create(fx.e, "a", 0, 0, 0, 0, &a), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "size 0"));
    ck_assert_int_eq(te_imm_space_create(fx.e, "a", 1u << 25, 0, 0, 0, &a), -EINVAL);
    ck_assert_int_eq(te_imm_space_create(fx.e, "a", 8, 3, 0, 0, &a), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "power of two"));
    ck_assert_int_eq(te_imm_space_create(fx.e, "", 8, 0, 0, 0, &a), -EINVAL);
    ck_assert_int_eq(te_imm_space_create(fx.e, "a", 8, 0, 0x10, 0, &a), -EINVAL);
    /* Overlap of fixed ranges names the other space. */
    ck_assert_int_eq(te_imm_space_create(fx.e, "first", 100, 2, TE_IMM_SPACE_FIXED,
                                         1000, &a), 0);
    ck_assert_int_eq(te_imm_space_create(fx.e, "second", 10, 2, TE_IMM_SPACE_FIXED,
                                         1150, &b), -EADDRINUSE);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "'first'"));
    ck_assert_int_eq(te_imm_space_create(fx.e, "second", 10, 2, TE_IMM_SPACE_FIXED,
                                         1200, &b), 0);
    ck_assert_int_eq(te_imm_space_create(fx.e, "end", 16, 2, TE_IMM_SPACE_FIXED,
                                         0xfffffff8u, &b), -EINVAL);
    /* An index outside the space. */
    uint32_t raw;
    ck_assert_int_eq(te_imm_space_value(a, 100, &raw), -ERANGE);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "index 100"));
    /* Exhaustion: the region above 2^31 holds 2^31 values. */
    te_imm_space *big[4];
    int made = 0;
    while (made < 4 && te_imm_space_create(fx.e, "big", 1u << 24, 32, 0, 0,
                                           &big[made]) == 0)
        made++;
    ck_assert_int_eq(made, 4);
    ck_assert_int_eq(te_imm_space_create(fx.e, "more", 1u << 24, 2, 0, 0, &b),
                     -ENOSPC);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "no free range"));
    /* Destroying one makes room again (its range is taken over). */
    ck_assert_int_eq(te_imm_space_destroy(big[1]), 0);
    ck_assert_int_eq(te_imm_space_create(fx.e, "more", 1u << 24, 2, 0, 0, &b), 0);
}
END_TEST

START_TEST(destroyed_space_is_refused_everywhere)
{
    te_imm_space *s;
    ck_assert_int_eq(te_imm_space_create(fx.e, "gone", 8, 0, 0, 0, &s), 0);
    uint32_t raw = value(s, 2);
    send_imms(raw, 1);
    drain_completions(1);
    ck_assert_int_eq(te_imm_space_destroy(s), 0);
    ck_assert_int_eq(te_imm_space_value(s, 2, &raw), -ESTALE);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "destroyed"));
    ck_assert_int_eq(te_imm_space_retire(s), -ESTALE);
    ck_assert_int_eq(te_imm_space_destroy(s), -ESTALE);
    ck_assert_int_eq(te_imm_expect(fx.e, raw, 1, NULL, NULL), -ESTALE);
    send_imms(raw, 2); /* quarantined: counted as stale, not banked */
    drain_completions(2);
    te_imm_space_stats st;
    ck_assert_int_eq(te_imm_space_stats_get(s, &st), -ESTALE);
    ck_assert_uint_eq(st.stale_arrivals, 2);
    ck_assert_uint_eq(st.retired_surplus, 1);
    uint64_t banked = 9;
    ck_assert_int_eq(te_imm_poll(fx.e, raw, &banked, NULL), 0);
    ck_assert_uint_eq(banked, 0);
}
END_TEST

START_TEST(values_banked_before_creation_are_dropped)
{
    /* Someone used a raw value before the space claimed it: life 0 must
     * not start with those arrivals credited. */
    send_imms(5000, 3);
    drain_completions(3);
    te_imm_space *s;
    ck_assert_int_eq(te_imm_space_create(fx.e, "late", 10, 2, TE_IMM_SPACE_FIXED,
                                         4995, &s), 0);
    uint64_t banked = 9;
    ck_assert_int_eq(te_imm_poll(fx.e, 5000, &banked, NULL), 0);
    ck_assert_uint_eq(banked, 0);
}
END_TEST

/* An expectation armed on a raw value that a new space then claims ends
 * with -ECANCELED: it used to be dropped without its callback, leaving its
 * owner waiting (a GPU flag spinning) forever. */
START_TEST(creation_cancels_expectations_armed_before)
{
    atomic_store(&cancelled_status, 1);
    ck_assert_int_eq(te_imm_expect(fx.e, 6003, 4, on_imm, NULL), 0);
    te_imm_space *s;
    ck_assert_int_eq(te_imm_space_create(fx.e, "claims", 10, 2,
                                         TE_IMM_SPACE_FIXED, 6000, &s), 0);
    struct timespec ts = {0, 1000000};
    for (int i = 0; i < 5000 && atomic_load(&cancelled_status) == 1; i++)
        nanosleep(&ts, NULL);
    ck_assert_int_eq(atomic_load(&cancelled_status), -ECANCELED);
    int armed = 1;
    uint64_t banked = 0;
    ck_assert_int_eq(te_imm_poll(fx.e, 6003, &banked, &armed), 0);
    ck_assert_int_eq(armed, 0);
}
END_TEST

static void *retire_all(void *p)
{
    te_imm_space *s = p;
    for (int i = 0; i < 255; i++) /* 256 lives: no value repeats */
        ck_assert_int_eq(te_imm_space_retire(s), 0);
    return NULL;
}

/* Arming races retirement: an expectation armed on a value whose life was
 * retired between the space check and the arming would never be met (a
 * retired life's arrivals are never banked). Each arming must end either
 * refused (-ESTALE), or cancelled by the retirement, or on the current
 * life: at the end, no value of a retired life is left armed. */
START_TEST(arming_racing_retirement_never_stays_on_a_retired_life)
{
    te_imm_space *s;
    ck_assert_int_eq(te_imm_space_create(fx.e, "race", 1, 256, 0, 0, &s), 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, retire_all, s), 0);
    te_imm_space_stats st;
    for (int i = 0; i < 200000; i++) {
        uint32_t v;
        ck_assert_int_eq(te_imm_space_value(s, 0, &v), 0);
        int rc = te_imm_expect(fx.e, v, 1, on_imm, NULL);
        ck_assert_msg(rc == 0 || rc == -EBUSY || rc == -ESTALE, "rc %d", rc);
        ck_assert_int_eq(te_imm_space_stats_get(s, &st), 0);
        if (st.life == 255)
            break;
    }
    pthread_join(t, NULL);
    ck_assert_int_eq(te_imm_space_stats_get(s, &st), 0);
    for (uint32_t life = 0; life < st.life; life++) {
        int armed = 0;
        uint64_t banked = 0;
        ck_assert_int_eq(te_imm_poll(fx.e, st.base + life * st.size, &banked,
                                     &armed), 0);
        ck_assert_msg(!armed, "value of retired life %u still armed", life);
    }
}
END_TEST

/* "spaces": bad_input_names_the_cause creates and destroys spaces of 2^24
 * values (O(size) each): 3 s here, 25 s under TSan alone, over 60 s with
 * the TSan suite running beside it. "race": well under 1 s here; bounded
 * like the rest for TSan under load. */
TE_TEST_MAIN("imm_space",
             TE_TCASE_FULL("spaces", 240, setup, teardown,
               two_spaces_same_indexes_never_alias,
               retired_life_is_stale_never_credited,
               retire_cancels_armed_expectations,
               creation_cancels_expectations_armed_before,
               bad_input_names_the_cause,
               destroyed_space_is_refused_everywhere,
               values_banked_before_creation_are_dropped),
             TE_TCASE_FULL("race", 240, setup, teardown,
               arming_racing_retirement_never_stays_on_a_retired_life))
