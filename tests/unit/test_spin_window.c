/* Unit tests for the adaptive spin window (core/spin_window.c): how long an
 * idle worker or callback thread spins, learnt from the gaps it saw. */
#include <stddef.h>
#include <stdint.h>

#include "spin_window.h"
#include "te_test.h"

#define US 1000ull

/* One gap the thread saw (us) and the window it must spin next (us). */
struct step {
    uint64_t gap_us, want_us;
};

static void run_steps(uint32_t floor_us, uint32_t max_us,
                      const struct step *s, size_t n)
{
    struct te_spin_window w;
    te_spin_window_init(&w, floor_us, max_us);
    ck_assert_uint_eq(w.cur_ns, floor_us * US);
    for (size_t i = 0; i < n; i++) {
        te_spin_window_learn(&w, s[i].gap_us * US);
        ck_assert_msg(w.cur_ns == s[i].want_us * US,
                      "floor %u max %u, step %zu (gap %llu us): window %llu "
                      "ns, want %llu us", floor_us, max_us, i,
                      (unsigned long long)s[i].gap_us,
                      (unsigned long long)w.cur_ns,
                      (unsigned long long)s[i].want_us);
    }
}

/* A ceiling at or below the floor: the window never moves (what
 * engine.idle_spin_max_us = 0 asks for, and a floor above the default
 * ceiling, as te-bench's post test spins its worker for 10 s). */
START_TEST(fixed_when_ceiling_not_above_floor)
{
    static const struct step zero_max[] = {{60, 50}, {10, 50}, {1000, 50}};
    run_steps(50, 0, zero_max, 3);
    static const struct step high_floor[] = {{20000000, 10000000},
                                             {100, 10000000}};
    run_steps(10000000, 250, high_floor, 2);
}
END_TEST

/* Work after the window, within the ceiling: twice the gap, capped; the
 * next of a steady stream is caught while spinning (unchanged). */
START_TEST(short_gap_widens_to_twice_it)
{
    static const struct step s[] = {
        {80, 160}, {90, 160}, {160, 160}, {200, 250}, {250, 250}, {3, 250}};
    run_steps(50, 250, s, sizeof(s) / sizeof(s[0]));
}
END_TEST

/* A gap past the ceiling puts the window back at the floor: an engine
 * that went idle stops spinning long from its next heartbeat. */
START_TEST(long_gap_returns_to_floor)
{
    static const struct step s[] = {{300, 400}, {1000000, 50}, {401, 50},
                                    {120, 240}, {500, 50}};
    run_steps(50, 400, s, sizeof(s) / sizeof(s[0]));
}
END_TEST

/* A floor of 0 (never spin unless taught): the window still learns, and
 * drops back to 0 once the gaps grow. */
START_TEST(zero_floor_learns_and_returns)
{
    static const struct step s[] = {{0, 0}, {32, 64}, {5000, 0}, {1, 2}};
    run_steps(0, 250, s, sizeof(s) / sizeof(s[0]));
}
END_TEST

TE_TEST_MAIN("spin_window",
             TE_TCASE("learn", fixed_when_ceiling_not_above_floor,
                      short_gap_widens_to_twice_it, long_gap_returns_to_floor,
                      zero_floor_learns_and_returns))
