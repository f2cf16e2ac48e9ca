/*
 * A doorbell for shm NICs: the wait object libfabric's shm provider lacks.
 *
 * shm peers put their commands into our shared region and signal no file
 * descriptor, so an idle worker of a shm NIC could only nap between polls
 * (0.03 of a core per idle engine, and an arrival after a quiet spell
 * waited up to a nap: docs/progress.md). The bell gives such a NIC a wait
 * object:
 *
 *   /dev/shm/NAME.bell  one shared word, `sleeping`, set while the NIC's
 *                       worker is blocked (NAME = the endpoint's name,
 *                       efa_shm_name.h, so the files are reaped with the
 *                       region when the process is gone);
 *   /dev/shm/NAME.sock  a datagram socket (its fd in the NIC's epoll set,
 *                       the NIC's wait fd) that a peer rings.
 *
 * The protocol is the futex one, with a full fence on both sides:
 *   sleeper: sleeping = 1; fence; progress the provider once: anything
 *            there? then sleeping = 0 and poll instead of blocking.
 *   poster:  the provider's post (the command is in the sleeper's region);
 *            fence; sleeping? then exchange it to 0 and send one byte.
 * Either the poster sees the flag, or the sleeper's progress sees the
 * command. A poster rings after every provider call towards the peer, and
 * while its operations to the peer are in flight (the provider may need the
 * peer's polls several times, e.g. its segmented protocol without CMA).
 *
 * Ringing does not depend on our own configuration: a peer whose address
 * says it has a bell (EFA_AF_BELL) is rung by every poster.
 * The NIC's epoll set also holds the pidfds of its same-host peers, so a
 * peer's death wakes a blocked worker at once, and a timer for the
 * plugin's own deadlines (authentication).
 */
#ifndef TE_EFA_SHM_BELL_H
#define TE_EFA_SHM_BELL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A NIC's own bell: what its worker blocks on. */
struct efa_bell;
/* A peer's bell, as a poster holds it. */
struct efa_bell_remote;

/* Create the bell of the endpoint named raw (raw_len bytes; one of our shm
 * names). 0, or a negative errno with the cause in why (nothing left). */
int efa_bell_open(struct efa_bell **out, const uint8_t *raw, size_t raw_len,
                  char *why, size_t why_len);
/* Remove the files and close everything (NULL: nothing). */
void efa_bell_close(struct efa_bell *b);
/* The wait object: an epoll fd, readable when rung or when a watched pidfd
 * is. */
int efa_bell_fd(const struct efa_bell *b);

/* Watch a peer's pidfd in the epoll set (token != 0 names the peer in
 * efa_bell_exits); unwatch it once its exit is taken. */
int efa_bell_watch(struct efa_bell *b, int pidfd, uint32_t token);
void efa_bell_unwatch(struct efa_bell *b, int pidfd);
/* Tokens of watched pidfds that are readable now (at most max; a zero-
 * timeout epoll_wait). */
int efa_bell_exits(struct efa_bell *b, uint32_t *tokens, int max);

/* Make the wait object readable at due_ns (CLOCK_MONOTONIC; 0 = never):
 * the plugin's own deadlines while its worker blocks. Call it after
 * efa_bell_sleep, which consumes an expiry. */
void efa_bell_timer(struct efa_bell *b, uint64_t due_ns);

/* Before blocking: consume the rings already taken (their events were
 * polled), then announce the sleep. The caller then progresses once and,
 * if that found work, calls efa_bell_awake. */
void efa_bell_sleep(struct efa_bell *b);
/* The worker polls again: posters stop ringing. Cheap when not asleep
 * (a load of the NIC's own word). */
void efa_bell_awake(struct efa_bell *b);

/* Map a peer's bell (its endpoint name raw); NULL with *err set (-ENOENT:
 * its files are gone, its endpoint closed). */
struct efa_bell_remote *efa_bell_remote_open(const uint8_t *raw,
                                             size_t raw_len, int *err);
void efa_bell_remote_close(struct efa_bell_remote *r);
/* After a provider call towards the peer: ring it if it sleeps. *tx_fd is
 * the caller's sending socket, created on first use (-1 before). */
void efa_bell_ring(struct efa_bell_remote *r, int *tx_fd);
/* Ring without the fence: for a caller that rings several peers after one
 * efa_bell_fence(). */
void efa_bell_ring_fenced(struct efa_bell_remote *r, int *tx_fd);
void efa_bell_fence(void);

#endif
