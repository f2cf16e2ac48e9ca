/*
 * An idle group's worker blocks instead of sleep-polling: in epoll on its
 * NICs' wait objects (plugin ABI 1.3 wait_fd/wait_arm) plus an eventfd that
 * te_submit(), control operations and engine shutdown ring. The ring costs
 * a fence and a load unless the worker is actually asleep, and then one
 * write: the worker announces `sleeping` before its last look at its queues
 * and the NICs (wait_arm), a producer publishes its work before it looks at
 * `sleeping` (both sequentially consistent), so one of them sees the other.
 * Groups whose plugin offers no wait object keep spin-then-sleep
 * (engine.idle_spin_us / idle_sleep_us).
 */
#ifndef TE_CORE_WAIT_H
#define TE_CORE_WAIT_H

#include <stdatomic.h>

struct te_engine;
struct te_group;
struct turn;

/** After the group's NICs are open: the epoll set and the wake eventfd.
 *  A plugin without wait objects (or engine.idle_wait = sleep) leaves the
 *  group sleep-polling; only a system error fails. */
int te_group_wait_open(struct te_engine *e, struct te_group *g);
/** Close what te_group_wait_open() made (NICs may be closed already). */
void te_group_wait_close(struct te_group *g);
/** Wake the group's worker if it is blocked (any thread, cheap if not). */
void te_group_wake(struct te_group *g);
/** Announce that the group's waiter (its worker, or a caller-mode thread
 *  holding progress_lock) is about to sleep, then look once more at what
 *  te_group_wake's callers publish: its submission and control queues,
 *  shutdown, and in caller mode the callback queue. 0 with `sleeping` set,
 *  or -EAGAIN with it cleared (work is queued). */
int te_group_announce_sleep(struct te_engine *e, struct te_group *g);
/** Then arm every NIC (wait_arm): 0 = the group may block on its wait
 *  set; -EAGAIN = a NIC has work; else a NIC's hard error (*nic names it).
 *  `sleeping` is cleared on any non-zero return. */
int te_group_arm_nics(struct te_engine *e, struct te_group *g, int *nic);
/** Awake again: `sleeping` cleared and the wake eventfd drained. */
void te_group_awake(struct te_group *g);
/** Worker, idle: block until a NIC, a submitter or a deadline needs it.
 *  Returns at once when some NIC or queue has work after all. Called with
 *  the group's progress_lock held (the NICs are armed under it); returns
 *  with it released: while the worker blocks, te_submit may take it and
 *  post itself (core/request.c). */
void te_group_block(struct te_engine *e, struct te_group *g, struct turn *t);
/** How long an idle worker (or te_progress_wait) without wait objects naps
 *  after idle_ns of idleness: engine.idle_sleep_us, growing to an eighth
 *  of idle_ns up to engine.idle_sleep_max_us while nothing is in flight
 *  (an event after a quiet spell then waits at most an eighth of it
 *  longer, and an idle engine polls about a thousand times a second, not
 *  fifty thousand). */
uint32_t te_idle_nap_us(const struct te_engine *e, uint64_t idle_ns,
                        int inflight);
/** Worker of a group without wait objects, idle for idle_ns, holding the
 *  progress lock: nap te_idle_nap_us() on the wake eventfd (announced, so a
 *  submission or control operation ends the nap); releases the lock. */
void te_group_nap_idle(struct te_engine *e, struct te_group *g,
                       uint64_t idle_ns);
/** engine.waiter_progress (thread mode): a thread waiting in an API call
 *  runs the group's loop turn itself when the group's worker is blocked
 *  and its wait set has an event, instead of waiting for the worker to
 *  wake; the worker is rung after, to re-arm. 1 if the turn did work, 0 if
 *  there was nothing to take or another thread holds the turn. Never from
 *  a callback (the caller checks). */
int te_group_help(struct te_engine *e, struct te_group *g);
/** te_group_help() on every group; how many did work. */
int te_engine_help(struct te_engine *e);
/** How long the group may block from now_ns: its deadlines that matter
 *  and engine.idle_block_max_ms; -1 = no limit. */
int te_group_block_timeout_ms(struct te_engine *e, struct te_group *g,
                              uint64_t now_ns);

/* progress.c (engine.progress = caller) */
/** After the groups opened: the engine-wide wait set (every group's). */
int te_progress_open(struct te_engine *e);
void te_progress_close(struct te_engine *e);
/** A blocking API call waiting in caller mode: progress every group once,
 *  and wait briefly (at most 1 ms, not past end_ns) if nothing happened. */
void te_progress_step(struct te_engine *e, uint64_t end_ns);

#endif
