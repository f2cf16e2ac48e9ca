/* Adaptive spin window (spin_window.h). */
#include "spin_window.h"

void te_spin_window_init(struct te_spin_window *w, uint32_t floor_us,
                         uint32_t max_us)
{
    w->floor_ns = (uint64_t)floor_us * 1000u;
    w->max_ns = max_us > floor_us ? (uint64_t)max_us * 1000u : w->floor_ns;
    w->cur_ns = w->floor_ns;
}

void te_spin_window_learn(struct te_spin_window *w, uint64_t idle_ns)
{
    if (idle_ns <= w->cur_ns) /* caught while spinning: keep it */
        return;
    if (idle_ns <= w->max_ns) {
        /* Twice the gap: gaps of a steady stream vary (the peer's own
         * wake-ups, the scheduler); one at the edge would otherwise block
         * every other time. */
        uint64_t want = idle_ns * 2;
        w->cur_ns = want < w->max_ns ? want : w->max_ns;
        return;
    }
    /* A gap past the ceiling: the stream (if any) paused or ended. Back
     * to the floor at once, so that an engine gone idle spins no more
     * after its next heartbeat; a stream that resumes pays one wake-up
     * and teaches the window again. */
    w->cur_ns = w->floor_ns;
}
