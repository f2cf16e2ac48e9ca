/*
 * Caller-driven progress (engine.progress = caller): no worker and no
 * callback thread; the application's te_progress() runs a group's loop
 * turn (the worker's code, under the group's progress_lock) and then the
 * queued callbacks, on its own thread. Blocking calls of the API
 * (te_poll_completions with a timeout, te_imm_wait) progress the engine
 * themselves while they wait. See te.h, "Caller-driven progress".
 */
#define _GNU_SOURCE /* ppoll */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "te_clock.h"
#include "te_error.h"
#include "wait.h"
#include "worker.h"
#include "te_hot.h"

/* A callback or timer queued outside a group's turn (an expectation met
 * by arrivals already banked, a deadline armed, a space retired, the GPU
 * watcher): wake whoever waits on the groups' wait sets (cheap when
 * nobody does: a fence and a load per group). */
static void ring_all(void *arg)
{
    struct te_engine *e = arg;
    for (uint32_t i = 0; i < e->ngroups; i++)
        if (e->groups[i].wake_fd >= 0)
            te_group_wake(&e->groups[i]);
}

int te_progress_open(struct te_engine *e)
{
    e->epfd_all = -1;
    if (!e->s.caller_progress)
        return 0;
    te_callbacks_set_ring(&e->cb, ring_all, e);
    for (uint32_t i = 0; i < e->ngroups; i++)
        if (!e->groups[i].can_block)
            return 0; /* te_progress_wait polls; te_progress_fd refuses */
    e->epfd_all = epoll_create1(EPOLL_CLOEXEC);
    if (e->epfd_all < 0)
        return te_fail(-errno, "cannot create the engine's wait set: %s",
                       strerror(errno));
    for (uint32_t i = 0; i < e->ngroups; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
        if (epoll_ctl(e->epfd_all, EPOLL_CTL_ADD, e->groups[i].epfd, &ev)) {
            int err = errno;
            te_progress_close(e);
            return te_fail(-err, "cannot build the engine's wait set: %s",
                           strerror(err));
        }
    }
    return 0;
}

void te_progress_close(struct te_engine *e)
{
    te_callbacks_set_ring(&e->cb, NULL, NULL);
    if (e->epfd_all >= 0)
        close(e->epfd_all);
    e->epfd_all = -1;
}

/* Take a group's turn for progressing: -EBUSY only when another thread is
 * progressing it. te_submit (posting) and peer add/remove also hold the
 * lock, briefly; then wait for them instead of reporting a busy group. */
static int progress_lock(struct te_group *g)
{
    if (pthread_mutex_trylock(&g->progress_lock)) {
        if (atomic_load_explicit(&g->progressor, memory_order_acquire))
            return -EBUSY;
        pthread_mutex_lock(&g->progress_lock);
    }
    atomic_store_explicit(&g->progressor, 1, memory_order_release);
    return 0;
}

static void progress_unlock(struct te_group *g)
{
    atomic_store_explicit(&g->progressor, 0, memory_order_release);
    pthread_mutex_unlock(&g->progress_lock);
}

/* Which groups a call names: [*lo, *hi). */
TE_HOT
static int groups_of(te_engine *e, int group, const char *fn, uint32_t *lo,
                     uint32_t *hi)
{
    if (!e)
        return te_fail(-EINVAL, "%s: engine is NULL", fn);
    if (!e->s.caller_progress)
        return te_fail(-EINVAL, "%s: engine.progress = thread: the engine's "
                       "own threads progress it (set engine.progress = "
                       "caller to drive it from the application)", fn);
    if (group == -1) {
        *lo = 0;
        *hi = e->ngroups;
        return 0;
    }
    if (group < 0 || (uint32_t)group >= e->ngroups)
        return te_fail(-EINVAL, "%s: group %d out of range (0..%u, or -1 "
                       "for all)", fn, group, e->ngroups - 1);
    *lo = (uint32_t)group;
    *hi = *lo + 1;
    return 0;
}

/* The wait set a call on `group` blocks on (group -1: every group's), or
 * -1 where the plugin offers no wait objects. */
static int wait_set_of(const te_engine *e, int group, uint32_t lo)
{
    return group == -1 ? e->epfd_all : e->groups[lo].epfd;
}

static void nap_us(uint32_t us)
{
    struct timespec ts = te_timespec_ns(us * 1000ull);
    nanosleep(&ts, NULL);
}

TE_HOT
TE_API int te_progress(te_engine *e, int group, int budget)
{
    te_error_clear();
    uint32_t lo = 0, hi = 0;
    int rc = groups_of(e, group, "te_progress", &lo, &hi);
    if (rc)
        return rc;
    if (budget < 0)
        return te_fail(-EINVAL, "te_progress: budget %d (0 = every queued "
                       "callback, > 0 = at most that many)", budget);
    if (te_callbacks_on_thread(&e->cb))
        return te_fail(-EDEADLK, "te_progress: called from one of the "
                       "engine's callbacks (which te_progress is running): "
                       "return from it instead");
    int did = 0, busy = 0;
    /* What the turns below raise on this thread (an expectation met by an
     * arrival they poll, a completion) is run by this call from its own
     * batch: no lock of the shared queue on the way to the callback. */
    struct te_cb_local mine;
    te_callbacks_local_open(&e->cb, &mine);
    for (uint32_t i = lo; i < hi; i++) {
        struct te_group *g = &e->groups[i];
        if (progress_lock(g)) {
            busy++;
            continue;
        }
        if (atomic_load_explicit(&g->sleeping, memory_order_relaxed))
            te_group_awake(g); /* after te_progress_arm */
        did += te_worker_turn(e, g, g->turn) != 0;
        progress_unlock(g);
    }
    if (busy == (int)(hi - lo)) {
        te_callbacks_local_run(&e->cb, &mine, 0); /* nothing was taken */
        return te_fail(-EBUSY, "te_progress: group %d is being progressed "
                       "by another thread (one thread at a time per group)",
                       group);
    }
    /* Outside the group locks: a callback may submit, add peers, or call
     * te_progress for another engine. */
    int ran = te_callbacks_local_run(&e->cb, &mine, budget);
    if (budget > 0 && ran >= budget) /* due timers still run, as before */
        return did + ran + te_callbacks_run_timers(&e->cb);
    return did + ran + te_callbacks_run(&e->cb, budget > 0 ? budget - ran : 0);
}

/* Sets every group's `sleeping` and, with nics, arms its NICs: 0 when the
 * caller may block on the wait sets (without nics: nap on the groups' wake
 * eventfds), -EAGAIN when something is to be done now, -EBUSY when a group
 * is progressed by another thread. The progress locks are held on return 0
 * (released by unlock_groups). */
static int arm_groups(te_engine *e, uint32_t lo, uint32_t hi, int nics)
{
    uint32_t i;
    int rc = 0;
    for (i = lo; i < hi; i++) {
        struct te_group *g = &e->groups[i];
        if (progress_lock(g)) {
            rc = -EBUSY;
            break;
        }
        int nic = 0;
        if (!(rc = te_group_announce_sleep(e, g)) && nics &&
            (rc = te_group_arm_nics(e, g, &nic)) != 0 && rc != -EAGAIN)
            te_fail(rc, "group %u: NIC %s: wait_arm failed: %s", i,
                    g->nics[nic].info.name, te_strerror(rc));
        if (rc) {
            progress_unlock(g);
            break;
        }
    }
    if (rc) { /* undo the groups armed before group i */
        for (uint32_t j = lo; j < i; j++) {
            atomic_store(&e->groups[j].sleeping, 0);
            progress_unlock(&e->groups[j]);
        }
    }
    return rc;
}

/* After the wait: awake again, the doorbell cleared (no lock needed). */
static void disarm_groups(te_engine *e, uint32_t lo, uint32_t hi)
{
    for (uint32_t i = lo; i < hi; i++)
        te_group_awake(&e->groups[i]);
}

static void unlock_groups(te_engine *e, uint32_t lo, uint32_t hi)
{
    for (uint32_t i = lo; i < hi; i++)
        progress_unlock(&e->groups[i]);
}

/* Milliseconds the wait may last: the caller's bound, the groups'
 * deadlines (wait.c), the earliest callback timer. */
static int wait_ms(te_engine *e, uint32_t lo, uint32_t hi, uint64_t end_ns)
{
    uint64_t now = te_clock_ns(), until = end_ns;
    for (uint32_t i = lo; i < hi; i++) {
        int ms = te_group_block_timeout_ms(e, &e->groups[i], now);
        if (ms >= 0 && now + (uint64_t)ms * 1000000ull < until)
            until = now + (uint64_t)ms * 1000000ull;
    }
    uint64_t tm = te_callbacks_next_timer(&e->cb);
    if (tm && tm < until)
        until = tm;
    if (until <= now)
        return 0;
    uint64_t ms = (until - now + 999999u) / 1000000u;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

TE_API int te_progress_arm(te_engine *e, int group)
{
    te_error_clear();
    uint32_t lo = 0, hi = 0;
    int rc = groups_of(e, group, "te_progress_arm", &lo, &hi);
    if (rc)
        return rc;
    if (wait_set_of(e, group, lo) < 0)
        return te_fail(-EOPNOTSUPP, "te_progress_arm: the plugin offers no "
                       "wait objects for these NICs: poll te_progress()");
    rc = arm_groups(e, lo, hi, 1);
    if (rc == -EBUSY)
        return te_fail(rc, "te_progress_arm: group being progressed by "
                       "another thread");
    if (rc)
        return rc; /* -EAGAIN: progress first; not an error to name */
    /* The locks go: another thread may progress while this one waits; a
     * submission meanwhile still rings (sleeping stays set). */
    unlock_groups(e, lo, hi);
    return 0;
}

TE_API int te_progress_fd(te_engine *e, int group)
{
    te_error_clear();
    uint32_t lo = 0, hi = 0;
    int rc = groups_of(e, group, "te_progress_fd", &lo, &hi);
    if (rc)
        return rc;
    int fd = wait_set_of(e, group, lo);
    if (fd < 0)
        return te_fail(-EOPNOTSUPP, "te_progress_fd: the plugin offers no "
                       "wait objects for these NICs: poll te_progress()");
    return fd;
}

/* te_progress_wait on groups without wait objects (efa over shm with
 * efa.shm_bell = false): nap as their worker would in thread mode (wait.c
 * te_group_nap_idle): on the groups' wake eventfds, announced, so a submission or control operation
 * of another thread ends the nap; engine.idle_sleep_us, growing with the
 * time this call has found nothing while no request is in flight; within
 * the call's bound and the groups' deadlines. */
static void nap_groups(te_engine *e, uint32_t lo, uint32_t hi,
                       uint64_t idle_since, uint64_t end_ns)
{
    int rc = e->s.idle_block ? arm_groups(e, lo, hi, 0) : -EBUSY;
    if (rc == -EAGAIN) /* work came meanwhile */
        return;
    if (rc) { /* engine.idle_wait = sleep, or progressed by another thread */
        nap_us(e->s.idle_sleep_us ? e->s.idle_sleep_us : 20);
        return;
    }
    struct pollfd p[64]; /* engine.groups <= 64 */
    nfds_t n = 0;
    int inflight = 0;
    for (uint32_t i = lo; i < hi; i++) {
        inflight |= e->groups[i].inflight_reqs != 0;
        p[n++] = (struct pollfd){.fd = e->groups[i].wake_fd, .events = POLLIN};
    }
    uint64_t us = te_idle_nap_us(e, te_clock_ns() - idle_since, inflight);
    uint64_t ms = (uint64_t)wait_ms(e, lo, hi, end_ns);
    if (us > ms * 1000u)
        us = ms * 1000u;
    unlock_groups(e, lo, hi);
    struct timespec ts = te_timespec_ns((us ? us : 20) * 1000ull);
    ppoll(p, n, &ts, NULL);
    disarm_groups(e, lo, hi);
}

TE_API int te_progress_wait(te_engine *e, int group, int timeout_ms)
{
    te_error_clear();
    uint32_t lo = 0, hi = 0;
    int rc = groups_of(e, group, "te_progress_wait", &lo, &hi);
    if (rc)
        return rc;
    uint64_t start = te_clock_ns();
    uint64_t end = start + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) *
                               1000000ull;
    int fd = wait_set_of(e, group, lo);
    uint32_t refused = 0; /* arms a NIC refused while nothing happened */
    for (;;) {
        rc = te_progress(e, group, 0);
        if (rc != 0 || te_clock_ns() >= end)
            return rc;
        if (fd < 0) { /* no wait objects: nap as such a worker does */
            nap_groups(e, lo, hi, start, end);
            continue;
        }
        rc = arm_groups(e, lo, hi, 1);
        if (rc == -EAGAIN) {
            /* As the worker (wait.c te_group_block): the first refusal may
             * race an arrival; the next ones poll every idle_sleep_us. */
            if (refused++)
                nap_groups(e, lo, hi, te_clock_ns(), end);
            continue;
        }
        if (rc == -EBUSY)
            return te_fail(rc, "te_progress_wait: group being progressed "
                           "by another thread");
        if (rc) { /* a NIC cannot arm (named by te_fail): nap */
            nap_us(20);
            continue;
        }
        int ms = wait_ms(e, lo, hi, end); /* reads the turns: locked */
        /* Not locked while blocked: peer adds and removals of other
         * threads run meanwhile (te_group_control takes the lock). */
        unlock_groups(e, lo, hi);
        struct epoll_event ev[8];
        if (ms)
            epoll_wait(fd, ev, 8, ms);
        disarm_groups(e, lo, hi);
    }
}

/* Used by the blocking calls of the API in caller mode: one progress step
 * of every group (busy ones skipped), then a short wait if nothing
 * happened. Never from a callback (the caller checks). */
void te_progress_step(te_engine *e, uint64_t end_ns)
{
    int rc = te_progress(e, -1, 0);
    if (rc > 0)
        return;
    if (rc == -EBUSY) { /* another thread progresses it: let it */
        nap_us(20);
        return;
    }
    uint64_t now = te_clock_ns();
    if (now >= end_ns)
        return;
    uint64_t left_ms = (end_ns - now) / 1000000u;
    te_progress_wait(e, -1, left_ms > 1 ? 1 : (int)left_ms + 1);
}
