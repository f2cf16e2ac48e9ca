/*
 * The lock of a dead same-host peer's shm region, released.
 *
 * libfabric 1.17's shm provider keeps a pthread spin lock in each
 * endpoint's shared region (offset 0x18 of region layout version 4). The
 * owner holds it while it progresses its commands; senders take it to queue
 * a command or to hand back SAR buffers. A process SIGKILLed while it held
 * its own lock leaves it held forever, and the next thread of ours to enter
 * the provider towards that peer (a post, or fi_cq_read handing back the
 * buffers of a response the peer wrote before it died) spins on it forever,
 * with the NIC's lock and the group's turn held: the engine freezes and
 * te_engine_destroy never returns. Measured here: conformance remote_killed
 * and peer_killed over shm froze the worker so in 5 of ~100 looped runs,
 * gdb showing it in pthread_spin_lock on the dead peer's region. Checking
 * the peer's pidfd before each post (efa_post.c) cannot close this: the
 * kernel makes the pidfd readable only 2-50 ms after the kill, and by then
 * the worker may already spin.
 *
 * The guard: one thread per process (only while some peer is watched),
 * blocked in poll(2) on the pidfds of the same-host shm peers. When a peer
 * dies, the guard reads its region's lock (through a mapping of its own of
 * the region's first page) every millisecond; held on every read for 10 ms
 * means held by the dead process (a live holder keeps it for
 * microseconds), and the guard releases it. The same peer may also have
 * died holding OUR region's lock (senders take the target's lock to queue
 * a command): efa_shm_guard_own. What the
 * lock protects belongs to the dead process alone; our own operations to
 * it fail (the peer is down). A region whose header does not read as
 * layout version 4 with the peer's pid is not touched (another libfabric:
 * the guard says once that it is off for it).
 */
#ifndef TE_EFA_SHM_GUARD_H
#define TE_EFA_SHM_GUARD_H

#include <stddef.h>
#include <stdint.h>

#include "tpc_log.h"

/* Watch the region /dev/shm/NAME (raw: the peer's endpoint name, raw_len
 * bytes, NUL included or not) of the process pid (pidfd: its pidfd, not
 * taken: the guard keeps a duplicate) for the NIC `owner`, whose endpoint
 * may touch it: until the process died and its lock is free, or until
 * efa_shm_guard_forget(owner), whichever comes first. A peer removed from
 * the NIC stays watched (its region stays in the provider's reach; with
 * authentication its address stays in the address vector). One watch per
 * owner and region. host and nic name the log lines. 0, or a negative
 * errno (-ENOTSUP: not a region layout the guard knows; nothing
 * watched). */
int efa_shm_guard_watch(const void *owner, const struct te_plugin_host *host,
                        const char *nic, const void *raw, size_t raw_len,
                        uint32_t pid, int pidfd);

/* How many watched processes the guard has seen die, ever: it polls their
 * pidfds, so this moves as soon as one becomes readable. A poster that
 * read a guarded peer's pidfd when this had some value need not read it
 * again (a system call) until the value moves (efa_post.c). */
uint64_t efa_shm_guard_deaths(void);

/* The NIC `owner`'s own region, named by its endpoint name raw: a peer killed while it
 * queued a command to us dies holding OUR lock, and our own progress then
 * spins. After a watched peer of `owner` died, the guard reads this lock
 * every millisecond for 500 ms, and releases it if it stays held on every
 * read for 100 ms (a live holder in another process may be preempted, so
 * the bar is higher than for a dead peer's region). 0 or a negative errno
 * (-ENOTSUP: layout not known). */
int efa_shm_guard_own(const void *owner, const struct te_plugin_host *host,
                      const char *nic, const void *raw, size_t raw_len);

/* The NIC `owner` closed (its endpoint, address vector and domain): its
 * watches end. The last one stops the guard's thread. */
void efa_shm_guard_forget(const void *owner);

#endif
