/*
 * Adaptive spin window: how long an idle engine thread (a worker, the
 * callback thread) busy-polls before it blocks.
 *
 * A fixed window loses either way. Short, and work that recurs a little
 * after it (a request every 100 us) always finds the thread blocked: the
 * wake-up then crosses CPUs, which cost 16-40 us per hand-off on this
 * project's 2-vCPU machines against 1.4 us on one CPU (docs/progress.md,
 * "Adaptive spinning"). Long, and an engine that serves a request now and
 * then burns a core for nothing. So the window learns from the gaps the
 * thread actually saw, as the kernel's guest halt-polling does: work that
 * came after the window but within engine.idle_spin_max_us widens it to
 * twice that gap (the next one is caught while spinning); a gap longer
 * than the ceiling puts it back at the configured floor. An engine gone
 * idle so spins long once, and at its floor from its next heartbeat.
 *
 * Pure arithmetic on the caller's clock readings: no clock, no lock (each
 * window belongs to one thread).
 */
#ifndef TE_SPIN_WINDOW_H
#define TE_SPIN_WINDOW_H

#include <stdint.h>

struct te_spin_window {
    uint64_t floor_ns; /* never below: engine.idle_spin_us / callback_spin_us */
    uint64_t max_ns;   /* never above: engine.idle_spin_max_us */
    uint64_t cur_ns;   /* spin this long before blocking */
};

/* floor_us: the configured spin; max_us: the ceiling (<= floor_us: the
 * window stays at floor_us, as before adaptive spinning). */
void te_spin_window_init(struct te_spin_window *w, uint32_t floor_us,
                         uint32_t max_us);

/* Work arrived idle_ns after the thread found none: adapt the window. */
void te_spin_window_learn(struct te_spin_window *w, uint64_t idle_ns);

#endif
