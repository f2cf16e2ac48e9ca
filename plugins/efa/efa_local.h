/*
 * Endpoints of this process, for peers that are another NIC of this same
 * process (two engines in one process, e.g. ranks of a test or a tool).
 *
 * libfabric's shm reaches such a peer through memory that belongs to that
 * peer's endpoint: once the endpoint is closed (its engine destroyed), a
 * post to it touches freed memory (measured with libfabric 1.17: SIGSEGV in
 * the shm peer lock, e.g. from a heartbeat). The pidfd watch cannot see it
 * (the process lives on). So every open endpoint is listed here; a peer
 * whose address names one holds a reference, posts to it run under the
 * entry's read lock, and closing the endpoint takes the write lock, so a
 * post either completes before the close or finds the peer gone.
 */
#ifndef TE_EFA_LOCAL_H
#define TE_EFA_LOCAL_H

#include <stddef.h>
#include <stdint.h>

struct efa_local;

/* List an endpoint just opened (provider name + its fi_getname bytes).
 * NULL when out of memory (the endpoint then works, unlisted). */
struct efa_local *efa_local_open(const char *prov, const uint8_t *raw,
                                 size_t len);

/* The endpoint is about to close: waits for posts in progress to it, marks
 * it closed, drops the list's reference. */
void efa_local_close(struct efa_local *l);

/* A reference to the open endpoint of this process named by (prov, raw),
 * or NULL when none is open (closed already, or not ours). */
struct efa_local *efa_local_find(const char *prov, const uint8_t *raw,
                                 size_t len);

/* Drop a reference taken by efa_local_find. */
void efa_local_put(struct efa_local *l);

/* Around a post to a peer that is a local endpoint: 1 = it is open and
 * stays open until efa_local_leave(); 0 = closed (nothing to leave). */
int efa_local_enter(struct efa_local *l);
void efa_local_leave(struct efa_local *l);

#endif
