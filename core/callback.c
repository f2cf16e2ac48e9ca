/* Callback thread, event FIFO and completion queue (see callback.h). */
#define _GNU_SOURCE /* pthread_setaffinity_np */
#include "callback.h"
#include "te_clock.h"
#include "thread_setup.h"

#include <sched.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "te_hot.h"

static int fifo_init(struct te_fifo *f, size_t item_size, size_t cap)
{
    memset(f, 0, sizeof(*f));
    f->item_size = item_size;
    f->cap = cap < 16 ? 16 : cap;
    f->items = calloc(f->cap, item_size);
    if (!f->items)
        return -ENOMEM;
    /* Adaptive (spins briefly before sleeping): the callback thread and a
     * polling application read count without the lock and then lock; they
     * often arrive while the worker's push still holds it (count is
     * stored inside), and a plain mutex would put them to sleep in futex
     * for a critical section of a few dozen nanoseconds. */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(&f->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    int rc = te_cond_init_monotonic(&f->cond);
    if (rc) {
        pthread_mutex_destroy(&f->lock);
        free(f->items);
        f->items = NULL;
        return -rc;
    }
    return 0;
}

static void fifo_destroy(struct te_fifo *f)
{
    free(f->items);
    f->items = NULL;
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
}

/* Caller holds the lock. Doubling keeps pushes amortised O(1); the queue
 * grows rather than dropping, because a lost completion is a hang. */
static int fifo_push_locked(struct te_fifo *f, const void *src, size_t n)
{
    if (f->count + n > f->cap) {
        size_t ncap = f->cap;
        while (f->count + n > ncap)
            ncap *= 2;
        char *nitems = malloc(ncap * f->item_size);
        if (!nitems)
            return -ENOMEM;
        for (size_t i = 0; i < f->count; i++)
            memcpy(nitems + i * f->item_size,
                   (char *)f->items + ((f->head + i) % f->cap) * f->item_size,
                   f->item_size);
        free(f->items);
        f->items = nitems;
        f->cap = ncap;
        f->head = 0;
    }
    for (size_t i = 0; i < n; i++) {
        size_t slot = (f->head + f->count) % f->cap;
        memcpy((char *)f->items + slot * f->item_size,
               (const char *)src + i * f->item_size, f->item_size);
        /* Atomic store: callback_main polls count without the lock. */
        __atomic_store_n(&f->count, f->count + 1, __ATOMIC_RELAXED);
    }
    return 0;
}

static size_t fifo_pop_locked(struct te_fifo *f, void *dst, size_t max)
{
    size_t n = 0;
    while (n < max && f->count > 0) {
        memcpy((char *)dst + n * f->item_size,
               (char *)f->items + f->head * f->item_size, f->item_size);
        f->head = (f->head + 1) % f->cap;
        __atomic_store_n(&f->count, f->count - 1, __ATOMIC_RELAXED);
        n++;
    }
    return n;
}

static int fifo_push(struct te_fifo *f, const void *src, size_t n)
{
    pthread_mutex_lock(&f->lock);
    int rc = fifo_push_locked(f, src, n);
    if (rc == 0 && f->waiters)
        pthread_cond_signal(&f->cond);
    pthread_mutex_unlock(&f->lock);
    return rc;
}

static void run_event(struct te_cb_event *ev)
{
    switch (ev->kind) {
    case TE_CB_DONE:
        ev->u.done.fn(&ev->u.done.c, ev->u.done.arg);
        break;
    case TE_CB_IMM:
        ev->u.imm.fn(ev->u.imm.imm, ev->u.imm.status, ev->u.imm.arg);
        break;
    case TE_CB_RECV:
        te_recv_slot_deliver(ev->u.recv.slot, ev->u.recv.group,
                             ev->u.recv.from, ev->u.recv.data,
                             ev->u.recv.len);
        free(ev->u.recv.data);
        break;
    }
}

int te_recv_slot_init(struct te_recv_slot *s)
{
    int rc = pthread_mutex_init(&s->lock, NULL);
    if (rc)
        return rc;
    if ((rc = pthread_cond_init(&s->ended, NULL))) {
        pthread_mutex_destroy(&s->lock);
        return rc;
    }
    s->fn = NULL;
    s->arg = NULL;
    s->gen = 0;
    s->running = NULL;
    atomic_init(&s->set, 0);
    return 0;
}

void te_recv_slot_destroy(struct te_recv_slot *s)
{
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->ended);
}

void te_recv_slot_deliver(struct te_recv_slot *s, int group, te_peer from,
                          const void *data, size_t len)
{
    pthread_mutex_lock(&s->lock);
    te_recv_fn fn = s->fn;
    void *arg = s->arg;
    if (!fn) {
        pthread_mutex_unlock(&s->lock);
        return;
    }
    struct te_recv_call me = {s->running, pthread_self(), s->gen, 0};
    s->running = &me;
    pthread_mutex_unlock(&s->lock);
    fn(group, from, data, len, arg);
    pthread_mutex_lock(&s->lock);
    struct te_recv_call **pp = &s->running;
    while (*pp != &me)
        pp = &(*pp)->next;
    *pp = me.next;
    pthread_cond_broadcast(&s->ended);
    pthread_mutex_unlock(&s->lock);
}

/* A call of a handler older than generation gen, on another thread and
 * not itself swapping. */
static int older_call_running(const struct te_recv_slot *s, uint64_t gen)
{
    for (const struct te_recv_call *c = s->running; c; c = c->next)
        if (c->gen < gen && !c->swapping &&
            !pthread_equal(c->thread, pthread_self()))
            return 1;
    return 0;
}

void te_recv_slot_set(struct te_recv_slot *s, te_recv_fn fn, void *arg)
{
    pthread_mutex_lock(&s->lock);
    s->fn = fn;
    s->arg = arg;
    uint64_t gen = ++s->gen;
    atomic_store_explicit(&s->set, fn != NULL, memory_order_release);
    /* Our own call, if a handler is swapping: not waited for by us, nor
     * by another handler swapping meanwhile (each would wait for the
     * other). */
    struct te_recv_call *mine = s->running;
    while (mine && !pthread_equal(mine->thread, pthread_self()))
        mine = mine->next;
    if (mine) {
        mine->swapping = 1;
        pthread_cond_broadcast(&s->ended);
    }
    /* Wait for every call that started before the swap (the next ones
     * see the new handler). */
    while (older_call_running(s, gen))
        pthread_cond_wait(&s->ended, &s->lock);
    if (mine)
        mine->swapping = 0;
    pthread_mutex_unlock(&s->lock);
}

#define TE_CB_BATCH 64

/* The callbacks whose events this thread is running (caller-driven
 * progress: te_callbacks_run), to refuse re-entry from a callback. */
static _Thread_local const struct te_callbacks *running_here;

/* Detach the timers due by now (all of them when `all`); lock held. */
static struct te_timer *take_due(struct te_callbacks *cb, uint64_t now, int all)
{
    struct te_timer *due = NULL, **tail = &due;
    while (cb->timers && (all || cb->timers->deadline_ns <= now)) {
        struct te_timer *tm = cb->timers;
        cb->timers = tm->next;
        __atomic_store_n(&cb->ntimers, cb->ntimers - 1, __ATOMIC_RELAXED);
        tm->next = NULL;
        *tail = tm;
        tail = &tm->next;
    }
    return due;
}

static void run_timers(struct te_timer *due, int at_stop)
{
    while (due) {
        struct te_timer *tm = due;
        due = tm->next;
        tm->fn(tm->arg, at_stop);
        free(tm);
    }
}

/* How long the thread may sleep: until the next timer; UINT64_MAX with
 * none (an idle engine's callback thread then sleeps until something is
 * queued: every push, timer and stop signals the condition under the lock
 * the sleeper checked under, so nothing is missed and nothing needs a
 * periodic look; it woke ten times a second before). */
static uint64_t wait_ns(const struct te_callbacks *cb, uint64_t now)
{
    if (!cb->timers)
        return UINT64_MAX;
    uint64_t d = cb->timers->deadline_ns;
    return d <= now ? 0 : d - now;
}

/* What one pass took from the queues: due timers first, then events. */
TE_HOT
static void run_batch(struct te_timer *due, struct te_cb_event *batch,
                      size_t n)
{
    run_timers(due, 0);
    for (size_t i = 0; i < n; i++)
        run_event(&batch[i]);
}

static void *callback_main(void *arg)
{
    struct te_callbacks *cb = arg;
    struct te_cb_event batch[TE_CB_BATCH];
    te_thread_name("te-callback");
    uint64_t idle_since = 0; /* when a look last found nothing */
    for (;;) {
        pthread_mutex_lock(&cb->events.lock);
        struct te_timer *due = cb->timers ? take_due(cb, te_clock_ns(), 0)
                                          : NULL; /* no clock read */
        size_t n = fifo_pop_locked(&cb->events, batch, TE_CB_BATCH);
        if (n == 0 && !due) {
            if (cb->stop) {
                due = take_due(cb, 0, 1);
                pthread_mutex_unlock(&cb->events.lock);
                run_timers(due, 1);
                break;
            }
            /* Spin briefly (lock released) before sleeping: a callback that
             * follows closely on the last one then costs no wake-up. */
            pthread_mutex_unlock(&cb->events.lock);
            if (!idle_since)
                idle_since = te_clock_ns();
            uint64_t until = idle_since + cb->spin.cur_ns;
            int got = 0;
            while (te_clock_ns() < until) {
                /* stop too: a long callback_spin_us must not delay
                 * te_engine_destroy() by that long. */
                if (__atomic_load_n(&cb->events.count, __ATOMIC_RELAXED) ||
                    __atomic_load_n(&cb->stop, __ATOMIC_RELAXED)) {
                    got = 1;
                    break;
                }
                te_thread_spin_pause(); /* the worker may need this CPU */
            }
            if (got)
                continue;
            pthread_mutex_lock(&cb->events.lock);
            uint64_t w = wait_ns(cb, te_clock_ns());
            if (cb->events.count == 0 && !cb->stop && w > 0) {
                cb->events.waiters++;
                if (w == UINT64_MAX) {
                    pthread_cond_wait(&cb->events.cond, &cb->events.lock);
                } else {
                    struct timespec ts = te_timespec_ns(te_clock_ns() + w);
                    pthread_cond_timedwait(&cb->events.cond, &cb->events.lock,
                                           &ts);
                }
                cb->events.waiters--;
            }
            pthread_mutex_unlock(&cb->events.lock);
            continue;
        }
        pthread_mutex_unlock(&cb->events.lock);
        if (idle_since && n) { /* timers alone teach nothing: they are due */
            te_spin_window_learn(&cb->spin, te_clock_ns() - idle_since);
            idle_since = 0;
        }
        run_batch(due, batch, n);
    }
    return NULL;
}

int te_callbacks_add_timer(struct te_callbacks *cb, uint64_t deadline_ns,
                           void (*fn)(void *arg, int at_stop), void *arg)
{
    struct te_timer *tm = calloc(1, sizeof(*tm));
    if (!tm)
        return -ENOMEM;
    tm->deadline_ns = deadline_ns;
    tm->fn = fn;
    tm->arg = arg;
    pthread_mutex_lock(&cb->events.lock);
    struct te_timer **p = &cb->timers;
    while (*p && (*p)->deadline_ns <= deadline_ns)
        p = &(*p)->next;
    tm->next = *p;
    *p = tm;
    __atomic_store_n(&cb->ntimers, cb->ntimers + 1, __ATOMIC_RELAXED);
    if (cb->events.waiters)
        pthread_cond_signal(&cb->events.cond);
    pthread_mutex_unlock(&cb->events.lock);
    if (cb->ring) /* a waiter re-reads the next deadline */
        cb->ring(cb->ring_arg);
    return 0;
}

int te_callbacks_start(struct te_callbacks *cb, uint32_t spin_us,
                       uint32_t spin_max_us, int cpu,
                       uint32_t cq_initial, int threaded)
{
    memset(cb, 0, sizeof(*cb));
    te_spin_window_init(&cb->spin, spin_us, spin_max_us);
    int rc = fifo_init(&cb->events, sizeof(struct te_cb_event), 1024);
    if (rc)
        return rc;
    rc = fifo_init(&cb->cq, sizeof(te_completion), cq_initial);
    if (rc) {
        fifo_destroy(&cb->events);
        return rc;
    }
    if (!threaded) {
        cb->inline_only = 1;
        return 0;
    }
    rc = pthread_create(&cb->thread, NULL, callback_main, cb);
    if (rc) {
        fifo_destroy(&cb->events);
        fifo_destroy(&cb->cq);
        return -rc;
    }
    cb->thread_id = cb->thread;
    cb->started = 1;
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        cb->pin_error = pthread_setaffinity_np(cb->thread, sizeof(set), &set);
    }
    return 0;
}

void te_callbacks_stop(struct te_callbacks *cb)
{
    if (cb->inline_only) {
        /* Caller-driven: what is queued runs here, then the timers that
         * have not expired, told so (at_stop). */
        while (te_callbacks_run(cb, 0) > 0)
            ;
        pthread_mutex_lock(&cb->events.lock);
        struct te_timer *due = take_due(cb, 0, 1);
        pthread_mutex_unlock(&cb->events.lock);
        run_timers(due, 1);
        cb->inline_only = 0;
        fifo_destroy(&cb->events);
        fifo_destroy(&cb->cq);
        return;
    }
    if (!cb->started)
        return;
    pthread_mutex_lock(&cb->events.lock);
    /* Atomic store: the spinning callback_main reads stop without the lock. */
    __atomic_store_n(&cb->stop, 1, __ATOMIC_RELAXED);
    pthread_cond_signal(&cb->events.cond);
    pthread_mutex_unlock(&cb->events.lock);
    pthread_join(cb->thread, NULL);
    cb->started = 0;
    fifo_destroy(&cb->events);
    fifo_destroy(&cb->cq);
}

void te_callbacks_set_ring(struct te_callbacks *cb, void (*ring)(void *arg),
                           void *arg)
{
    cb->ring_arg = arg;
    cb->ring = ring;
}

/* The batch te_progress opened on this thread (te_callbacks_local_open). */
static _Thread_local struct te_cb_local *local_here;

TE_HOT
void te_callbacks_local_open(struct te_callbacks *cb, struct te_cb_local *l)
{
    l->cb = cb;
    l->n = 0;
    l->spilled = 0;
    l->outer = local_here;
    local_here = l;
}

/* Whether ev goes to this thread's open batch: only while the shared queue
 * is empty, so that nothing queued before it (by this thread or a budget
 * of an earlier call) runs after it. When the batch is full, or another
 * thread queued something meanwhile, the batch goes to the shared queue
 * ahead of ev, and the rest of this call's events follow it there: this
 * thread's callbacks keep their order whoever runs the queue. */
static int local_take(struct te_callbacks *cb, const struct te_cb_event *ev,
                      size_t n)
{
    struct te_cb_local *l = local_here;
    if (!l || l->cb != cb || l->spilled)
        return 0;
    if (n <= TE_CB_LOCAL_MAX - l->n &&
        !__atomic_load_n(&cb->events.count, __ATOMIC_ACQUIRE)) {
        memcpy(&l->ev[l->n], ev, n * sizeof(*ev));
        l->n += n;
        return 1;
    }
    if (l->n && fifo_push(&cb->events, l->ev, l->n) != 0)
        return 0; /* no room in the queue either: l runs them later */
    l->n = 0;
    l->spilled = 1;
    return 0;
}

TE_HOT
int te_callbacks_local_run(struct te_callbacks *cb, struct te_cb_local *l,
                           int budget)
{
    local_here = l->outer;
    size_t run = l->n;
    if (budget > 0 && (size_t)budget < run)
        run = (size_t)budget;
    /* l is closed: te_callbacks_push queues them (and rings). */
    if (run < l->n && te_callbacks_push(cb, &l->ev[run], l->n - run) != 0)
        run = l->n; /* no room to leave them: run them now, over budget */
    if (!run)
        return 0;
    const struct te_callbacks *outer = running_here;
    running_here = cb;
    run_batch(NULL, l->ev, run);
    running_here = outer;
    return (int)run;
}

TE_HOT
int te_callbacks_push(struct te_callbacks *cb, const struct te_cb_event *ev,
                      size_t n)
{
    if (n && local_take(cb, ev, n))
        return 0;
    int rc = n ? fifo_push(&cb->events, ev, n) : 0;
    if (n && !rc && cb->ring)
        cb->ring(cb->ring_arg);
    return rc;
}

int te_cq_push(struct te_callbacks *cb, const te_completion *c, size_t n)
{
    if (!n)
        return 0;
    pthread_mutex_lock(&cb->cq.lock);
    int rc = fifo_push_locked(&cb->cq, c, n);
    if (rc == 0 && cb->cq.waiters)
        pthread_cond_broadcast(&cb->cq.cond);
    pthread_mutex_unlock(&cb->cq.lock);
    return rc;
}

int te_cq_pop(struct te_callbacks *cb, te_completion *out, int max,
              int timeout_ms)
{
    if (max <= 0)
        return 0;
    /* A non-blocking poll of an empty queue does not take the lock: an
     * application polling in a loop would otherwise contend with the
     * worker's te_cq_push() and put it to sleep in futex (measured: the
     * worker's next post delayed by microseconds). count is stored
     * atomically under the lock; a push racing with this read is seen by
     * the next poll. */
    if (timeout_ms <= 0 &&
        __atomic_load_n(&cb->cq.count, __ATOMIC_ACQUIRE) == 0)
        return 0;
    pthread_mutex_lock(&cb->cq.lock);
    if (cb->cq.count == 0 && timeout_ms > 0) {
        struct timespec ts = te_deadline_ms(timeout_ms);
        cb->cq.waiters++;
        while (cb->cq.count == 0) {
            if (pthread_cond_timedwait(&cb->cq.cond, &cb->cq.lock, &ts) ==
                ETIMEDOUT)
                break;
        }
        cb->cq.waiters--;
    }
    size_t n = fifo_pop_locked(&cb->cq, out, (size_t)max);
    pthread_mutex_unlock(&cb->cq.lock);
    return (int)n;
}

TE_HOT
int te_callbacks_on_thread(const struct te_callbacks *cb)
{
    return running_here == cb ||
           (cb->started && pthread_equal(pthread_self(), cb->thread_id));
}

/* One pass of te_callbacks_run on this thread (running_here set): the
 * timers due by now and up to room queued events (room 0: timers only).
 * Returns how many ran (the due timers counting one), 0 when none. */
TE_HOT
static int run_pass(struct te_callbacks *cb, struct te_cb_event *batch,
                    size_t room)
{
    /* Unlocked peek: the common case is an empty queue. */
    if ((!room || !__atomic_load_n(&cb->events.count, __ATOMIC_ACQUIRE)) &&
        !__atomic_load_n(&cb->ntimers, __ATOMIC_RELAXED))
        return 0;
    pthread_mutex_lock(&cb->events.lock);
    struct te_timer *due = cb->timers ? take_due(cb, te_clock_ns(), 0)
                                      : NULL; /* no clock read */
    size_t n = room ? fifo_pop_locked(&cb->events, batch, room) : 0;
    pthread_mutex_unlock(&cb->events.lock);
    run_batch(due, batch, n);
    return (int)n + (due != NULL);
}

TE_HOT
int te_callbacks_run(struct te_callbacks *cb, int budget)
{
    struct te_cb_event batch[TE_CB_BATCH];
    const struct te_callbacks *outer = running_here;
    int ran = 0, got;
    running_here = cb;
    do {
        size_t room = TE_CB_BATCH;
        if (budget > 0 && (size_t)(budget - ran) < room)
            room = (size_t)(budget - ran);
        if (room == 0)
            break;
        got = run_pass(cb, batch, room);
        ran += got;
    } while (got);
    running_here = outer;
    return ran;
}

int te_callbacks_run_timers(struct te_callbacks *cb)
{
    const struct te_callbacks *outer = running_here;
    running_here = cb;
    int ran = run_pass(cb, NULL, 0);
    running_here = outer;
    return ran;
}

uint64_t te_callbacks_next_timer(struct te_callbacks *cb)
{
    pthread_mutex_lock(&cb->events.lock);
    uint64_t d = cb->timers ? cb->timers->deadline_ns : 0;
    pthread_mutex_unlock(&cb->events.lock);
    return d;
}

size_t te_callbacks_queued(const struct te_callbacks *cb)
{
    return __atomic_load_n(&cb->events.count, __ATOMIC_ACQUIRE);
}
