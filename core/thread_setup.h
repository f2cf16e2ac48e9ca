/*
 * How the engine's own threads present themselves to the system: a name
 * that top -H, perf and gdb show, a timer slack that lets a worker's
 * short idle sleeps last about as long as asked, and how they busy-poll
 * without keeping the CPU from the threads they wait for.
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

/* One step of an engine thread's idle busy-poll (a worker's
 * engine.idle_spin_us, the callback thread's engine.callback_spin_us):
 * gives the CPU to any other runnable thread on it, returns at once when
 * there is none. The spinning thread waits for work that other threads
 * make: the peer's worker it just rang, the callback thread it just
 * handed events, the application. With a pause instruction instead, a
 * woken thread placed on a spinner's CPU waited for the whole spin: on
 * this 2-core machine an in-process WriteImm's submit -> imm callback
 * took 117-170 us, most of it a target worker and a callback thread
 * queued behind spinning engine threads (perf sched: 65 us of scheduling
 * delay for one wake-up), against ~20-35 us with the CPU given away. */
void te_thread_spin_pause(void);

#endif
