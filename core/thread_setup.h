/*
 * How the engine's own threads present themselves to the system: a name
 * that top -H, perf and gdb show, and a timer slack that lets a worker's
 * short idle sleeps last about as long as asked.
 */
#ifndef TE_THREAD_SETUP_H
#define TE_THREAD_SETUP_H

#include <stdint.h>

/* Name the calling thread (at most 15 characters kept); failures ignored:
 * a name is a convenience, never a reason to stop. */
void te_thread_name(const char *name);

/* Lower the calling thread's timer slack so that a sleep of sleep_us
 * overshoots by at most a tenth of it (at least 1 us). Linux's default
 * slack of 50 us more than tripled the worker's 20 us idle sleep (measured
 * 93 us per nanosleep(20 us) with it, 46 us with 1 us). Never raises the
 * slack. Returns the slack now in force, in ns (0 where unknown). */
uint64_t te_thread_tighten_slack(uint32_t sleep_us);

#endif
