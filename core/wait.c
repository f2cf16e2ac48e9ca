#define _GNU_SOURCE /* ppoll */
/* Blocking an idle worker on its NICs' wait objects (see wait.h). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "te_error.h"
#include "wait.h"
#include "worker.h"
#include "te_hot.h"

/* No wait objects to block on: the worker naps between polls, on a wake
 * eventfd of its own (te_group_nap_idle), so that a submission, a control
 * operation or the engine's end still ends a nap at once. */
static int nap_only(struct te_engine *e, struct te_group *g, const char *why)
{
    g->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (g->wake_fd < 0)
        return te_fail(-errno, "group %d: cannot create its wake eventfd: %s",
                       g->index, strerror(errno));
    te_log(e, 2, "group %d: no wait objects (%s): its worker naps between "
           "polls when idle, %u us growing to %u us", g->index, why,
           e->s.idle_sleep_us, e->s.idle_sleep_max_us);
    return 0;
}

int te_group_wait_open(struct te_engine *e, struct te_group *g)
{
    const struct te_plugin_ops *P = e->plugin.ops;
    g->epfd = g->wake_fd = -1;
    atomic_init(&g->sleeping, 0);
    if (!e->s.idle_block)
        return 0;
    if (!TE_PLUGIN_HAS(P, wait_arm) || !P->wait_fd || !P->wait_arm)
        return nap_only(e, g, "the plugin offers none");
    int fds[TE_MAX_NICS];
    for (uint32_t i = 0; i < g->nic_count; i++) {
        fds[i] = P->wait_fd(g->nics[i].pn);
        if (fds[i] < 0) {
            te_log(e, 2, "group %d: NIC %s has no wait object (%s)",
                   g->index, g->nics[i].info.name, te_strerror(fds[i]));
            return nap_only(e, g, "a NIC has none");
        }
    }
    g->epfd = epoll_create1(EPOLL_CLOEXEC);
    g->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (g->epfd < 0 || g->wake_fd < 0) {
        int err = errno;
        te_group_wait_close(g);
        return te_fail(-err, "group %d: cannot create its wait set: %s",
                       g->index, strerror(err));
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = g->wake_fd};
    if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->wake_fd, &ev) < 0)
        goto fail;
    for (uint32_t i = 0; i < g->nic_count; i++) {
        ev.data.fd = fds[i];
        /* Two NICs may share one object (EEXIST): fine. */
        if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, fds[i], &ev) < 0 &&
            errno != EEXIST)
            goto fail;
    }
    g->can_block = 1;
    return 0;
fail:;
    int err = errno;
    te_group_wait_close(g);
    return te_fail(-err, "group %d: cannot add a wait object to its epoll "
                   "set: %s", g->index, strerror(err));
}

void te_group_wait_close(struct te_group *g)
{
    if (g->epfd >= 0)
        close(g->epfd);
    if (g->wake_fd >= 0)
        close(g->wake_fd);
    g->epfd = g->wake_fd = -1;
    g->can_block = 0;
}

TE_HOT
void te_group_wake(struct te_group *g)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (!atomic_load_explicit(&g->sleeping, memory_order_relaxed) ||
        !atomic_exchange(&g->sleeping, 0))
        return;
    uint64_t one = 1;
    /* Fails only when the counter would overflow: then it is readable. */
    ssize_t rc = write(g->wake_fd, &one, sizeof(one));
    (void)rc;
}

/* Until the next deadline scan when a request has a deadline or a peer's
 * silence is timed, the next heartbeat scan when peers are probed, and at
 * most engine.idle_block_max_ms (a safety net for plugins, also what
 * looks at a loopback peer that has no pidfd); -1 = no limit. */
int te_group_block_timeout_ms(struct te_engine *e, struct te_group *g,
                              uint64_t now_ns)
{
    struct turn *t = g->turn;
    uint64_t until = UINT64_MAX;
    if (e->s.idle_block_max_ms)
        until = now_ns + (uint64_t)e->s.idle_block_max_ms * 1000000ull;
    if ((g->timed_reqs || (e->s.peer_timeout_ms && g->inflight_reqs)) &&
        t->next_check_ns < until)
        until = t->next_check_ns;
    if (e->s.heartbeat_ms && t->next_hb_ns < until)
        until = t->next_hb_ns;
    if (until == UINT64_MAX)
        return -1;
    uint64_t now = te_now_ns();
    if (until <= now)
        return 0;
    uint64_t ms = (until - now + 999999u) / 1000000u;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

int te_group_announce_sleep(struct te_engine *e, struct te_group *g)
{
    atomic_store(&g->sleeping, 1);
    atomic_thread_fence(memory_order_seq_cst);
    if (te_mpsc_size(g->subq) ||
        atomic_load_explicit(&g->ctl_pending, memory_order_relaxed) ||
        atomic_load_explicit(&e->stopping, memory_order_relaxed) ||
        (e->s.caller_progress && te_callbacks_queued(&e->cb))) {
        atomic_store_explicit(&g->sleeping, 0, memory_order_relaxed);
        return -EAGAIN;
    }
    return 0;
}

int te_group_arm_nics(struct te_engine *e, struct te_group *g, int *nic)
{
    const struct te_plugin_ops *P = e->plugin.ops;
    int rc = 0;
    for (uint32_t i = 0; i < g->nic_count && !rc; i++) {
        *nic = (int)i;
        if (g->nics[i].recv_to_post && !g->nics[i].recv_broken)
            rc = -EAGAIN;
        else
            rc = P->wait_arm(g->nics[i].pn);
    }
    if (rc)
        atomic_store_explicit(&g->sleeping, 0, memory_order_relaxed);
    return rc;
}

TE_HOT
void te_group_awake(struct te_group *g)
{
    atomic_store_explicit(&g->sleeping, 0, memory_order_relaxed);
    uint64_t v;
    ssize_t rc = read(g->wake_fd, &v, sizeof(v)); /* EAGAIN: not rung */
    (void)rc;
}

int te_group_help(struct te_engine *e, struct te_group *g)
{
    if (!g->can_block ||
        !atomic_load_explicit(&g->sleeping, memory_order_acquire) ||
        atomic_load_explicit(&e->stopping, memory_order_relaxed))
        return 0;
    /* Only when the worker is being woken anyway (an event in its wait
     * set): a turn on nothing would disarm the NICs for no gain. */
    struct pollfd p = {.fd = g->epfd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0 || pthread_mutex_trylock(&g->progress_lock))
        return 0;
    int did = 0;
    if (g->turn && atomic_load_explicit(&g->sleeping, memory_order_relaxed)) {
        did = te_worker_turn(e, g, g->turn) != 0;
        atomic_fetch_add_explicit(&g->waiter_turns, 1, memory_order_relaxed);
    }
    /* The turn's polls ended the NICs' armed state and may have taken the
     * event the worker was woken for (its epoll then sleeps on): ring it,
     * so that it takes what follows (completions, deadlines) and re-arms. */
    te_group_wake(g);
    pthread_mutex_unlock(&g->progress_lock);
    return did;
}

int te_engine_help(struct te_engine *e)
{
    int did = 0;
    for (uint32_t i = 0; i < e->ngroups; i++)
        did += te_group_help(e, &e->groups[i]);
    return did;
}

/* Sleep us on the wake eventfd alone (announced: a ring ends it). */
static void nap_on_wake_fd(struct te_group *g, uint64_t us)
{
    struct pollfd p = {.fd = g->wake_fd, .events = POLLIN};
    struct timespec ts = te_timespec_ns(us * 1000ull);
    if (ppoll(&p, 1, &ts, NULL) > 0)
        te_group_awake(g);
    else
        atomic_store_explicit(&g->sleeping, 0, memory_order_relaxed);
}

void te_group_nap_idle(struct te_engine *e, struct te_group *g, uint64_t idle_ns)
{
    uint32_t us = te_idle_nap_us(e, idle_ns, g->inflight_reqs != 0);
    if (te_group_announce_sleep(e, g)) { /* work came meanwhile */
        pthread_mutex_unlock(&g->progress_lock);
        return;
    }
    pthread_mutex_unlock(&g->progress_lock);
    nap_on_wake_fd(g, us);
}

/* Requests in flight (engine.busy_wait = nap): sleep idle_sleep_us, as a
 * sleep-polling worker does, but on the wake eventfd, so a submission still
 * ends it at once. The NICs are not armed: their completions are taken in
 * batches when the nap ends, and peers need not ring us. */
static void nap(struct te_engine *e, struct te_group *g)
{
    nap_on_wake_fd(g, e->s.idle_sleep_us);
}

uint32_t te_idle_nap_us(const struct te_engine *e, uint64_t idle_ns,
                        int inflight)
{
    uint64_t us = e->s.idle_sleep_us, top = e->s.idle_sleep_max_us;
    if (inflight || !us || top <= us)
        return (uint32_t)us;
    uint64_t grown = idle_ns / 8000u; /* an eighth of the idle time, in us */
    return (uint32_t)(grown < us ? us : grown > top ? top : grown);
}

void te_group_block(struct te_engine *e, struct te_group *g, struct turn *t)
{
    if (te_group_announce_sleep(e, g)) {
        pthread_mutex_unlock(&g->progress_lock);
        return;
    }
    if (g->inflight_reqs && e->s.busy_nap && e->s.idle_sleep_us) {
        pthread_mutex_unlock(&g->progress_lock);
        nap(e, g);
        return;
    }
    int nic = 0, rc = te_group_arm_nics(e, g, &nic);
    if (rc == -EAGAIN && t->arm_refused++ && e->s.idle_sleep_us) {
        /* A NIC that cannot block while the turns find nothing (work it
         * holds that no event will announce: a request held for later, a
         * provider that moves only when polled). The first refusal may be
         * an arrival racing the arm: poll again at once; from the second
         * in a row, poll every idle_sleep_us, napping on the wake eventfd
         * (a submission still ends the nap), instead of spinning a core. */
        te_group_nap_idle(e, g, 0); /* releases the lock */
        return;
    }
    if (rc != -EAGAIN)
        t->arm_refused = 0;
    if (rc && rc != -EAGAIN) {
        /* Once: this group sleep-polls from now on (not a busy loop
         * logging a line per turn). */
        te_log(e, 1, "group %d: NIC %s: wait_arm failed (%s): the worker "
               "sleep-polls from now on", g->index, g->nics[nic].info.name,
               te_strerror(rc));
        g->can_block = 0;
    }
    int timeout = rc ? 0 : te_group_block_timeout_ms(e, g, te_turn_now(t));
    /* Armed: from here a submitter may post without waiting for us (it
     * rings wake_fd after, as `sleeping` is set). */
    pthread_mutex_unlock(&g->progress_lock);
    if (rc)
        return;
    struct epoll_event ev[TE_MAX_NICS + 1];
    int n = timeout ? epoll_wait(g->epfd, ev, TE_MAX_NICS + 1, timeout) : 0;
    atomic_store_explicit(&g->sleeping, 0, memory_order_relaxed);
    for (int i = 0; i < n; i++)
        if (ev[i].data.fd == g->wake_fd)
            te_group_awake(g);
}
