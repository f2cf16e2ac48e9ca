/*
 * Copy engines of the loopback target (loopback.copy_threads).
 *
 * A real NIC moves a write's bytes with DMA engines of its own; loopback
 * moves them with the CPU of the thread that polls the target. One core
 * copies at about half of what two copy at once on the machines measured
 * (docs/loopback.md "Copy engines"), so the target can hand parts of the
 * copies of a poll to helper threads: the copies are cut into chunks,
 * the polling thread and every helper claim chunks from one counter until
 * none is left, and the polling thread returns when all are done.
 *
 * Nothing waits for a helper: one that sleeps (no copies for a while) or
 * is busy with another NIC's copies leaves the chunks to the polling
 * thread, which is then exactly as fast as without helpers. Helpers sleep
 * on a futex after LB_COPY_SPIN_NS without work: an idle engine costs
 * nothing.
 *
 * This file knows nothing of the plugin beyond what a copy needs (pid,
 * addresses), so a unit test drives it alone (tests/unit/test_lb_copy_pool.c).
 */
#ifndef LB_COPY_POOL_H
#define LB_COPY_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Most helper threads of a pool (copy_threads - 1). */
#define LB_COPY_MAX_HELPERS 15
/* Bytes per chunk: large enough that a process_vm_readv per chunk costs
 * little against its copy (~20 us), small enough to share a 1 MiB write. */
#define LB_COPY_CHUNK (256u << 10)
/* A helper without work spins (yielding its CPU) this long, then sleeps. */
#define LB_COPY_SPIN_NS 200000ull

/* One copy of len bytes between here (this process) and the address
 * there of process pid (of this process when local): from there to here,
 * or from here to there when out is set. status: 0, or the -errno of the
 * first chunk that failed. */
struct lb_copy {
    void *here;
    uint64_t there;
    uint64_t len;
    pid_t pid;
    bool local;
    bool out;
    _Atomic int status;
    uint32_t first_chunk; /* (lb_copy_run's) */
};

struct lb_copy_pool;

/* Copy len bytes between here and the address there of process pid
 * (local: of this process, with memcpy), from there to here, or from here
 * to there when out: 0 or -errno (-EFAULT for a short copy). */
int lb_copy_xfer(bool local, pid_t pid, bool out, void *here, uint64_t there,
                 uint64_t len);

/* A pool of `helpers` threads (1..LB_COPY_MAX_HELPERS), started by the
 * first job of more than one chunk: 0 and *out, or -errno. */
int lb_copy_pool_new(uint32_t helpers, struct lb_copy_pool **out);

/* Stops and joins the helpers, frees p (NULL: nothing); none may be
 * inside lb_copy_run. */
void lb_copy_pool_free(struct lb_copy_pool *p);

/* Execute every copy of c[0..n) (statuses in c[i].status), with the
 * pool's helpers when it has idle ones (p may be NULL: alone). Returns
 * when all are done: 0, or -errno once, from the job whose helpers could
 * not start (that job and the later ones copy alone). Threads may call it
 * at once: one job runs at a time with helpers; the others copy alone
 * meanwhile. */
int lb_copy_run(struct lb_copy_pool *p, struct lb_copy *c, uint32_t n);

/* Chunks copied by helpers since the pool started (tests, stats). */
uint64_t lb_copy_pool_helped(const struct lb_copy_pool *p);

#endif
