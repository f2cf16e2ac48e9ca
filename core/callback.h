/*
 * The callback thread and the completion queue. Workers never run user code:
 * they hand events here in batches, and one callback thread runs them, so a
 * slow callback delays other callbacks but never the network.
 */
#ifndef TE_CORE_CALLBACK_H
#define TE_CORE_CALLBACK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "te/te.h"
#include "spin_window.h"

enum te_cb_kind { TE_CB_DONE = 1, TE_CB_IMM = 2, TE_CB_RECV = 3 };

/* One call of a receive handler in progress (on its caller's stack). */
struct te_recv_call {
    struct te_recv_call *next;
    pthread_t thread;
    uint64_t gen;           /* the slot's generation when it started */
    int swapping;           /* inside te_recv_slot_set (not waited for) */
};

/**
 * A group's receive handler. Queued messages name the slot, not the
 * handler: whoever delivers reads fn/arg then, so a swap takes effect for
 * every message not yet delivered, and te_recv_slot_set() then waits for
 * every call of an older handler still running on another thread, so that
 * its arg can be freed once it returns. There may be several: with
 * engine.progress = caller, threads that progress the engine at once each
 * run callbacks (one `calling` flag lost track of all but the last, and a
 * swap returned while an earlier call still used the old arg). No lock is
 * held during a call.
 */
struct te_recv_slot {
    pthread_mutex_t lock;
    pthread_cond_t ended;   /* a call returned */
    te_recv_fn fn;
    void *arg;
    uint64_t gen;           /* bumped by every swap */
    struct te_recv_call *running; /* calls in progress */
    atomic_int set;         /* hint for workers: copy messages only when set */
};

/** Init/destroy a slot (no handler); init returns a pthread error or 0. */
int te_recv_slot_init(struct te_recv_slot *s);
void te_recv_slot_destroy(struct te_recv_slot *s);
/** Swap the handler; waits for every call of an older one in progress on
 *  another thread (not for one on the calling thread: a handler may swap
 *  its own group's handler; nor for a call that is itself swapping, so two
 *  handlers swapping at once do not wait for each other). */
void te_recv_slot_set(struct te_recv_slot *s, te_recv_fn fn, void *arg);
/** Deliver one message to the slot's current handler (callback thread). */
void te_recv_slot_deliver(struct te_recv_slot *s, int group, te_peer from,
                          const void *data, size_t len);

struct te_cb_event {
    uint32_t kind;
    union {
        struct {
            te_done_fn fn;
            void *arg;
            te_completion c;
        } done;
        struct {
            te_imm_fn fn;
            void *arg;
            uint32_t imm;
            int status;
        } imm;
        struct {
            struct te_recv_slot *slot;
            int group;
            te_peer from;
            uint32_t len;
            uint8_t *data; /* malloc'd copy, freed after the call */
        } recv;
    } u;
};

/** A growable FIFO guarded by a mutex, with a condition for waiters. */
struct te_fifo {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    void *items;
    size_t item_size, cap, head, count;
    int waiters;
};

/** A one-shot timer run on the callback thread (fn(arg, 0)), or at stop
 * with fn(arg, 1) if it has not expired by then. */
struct te_timer {
    struct te_timer *next;
    uint64_t deadline_ns; /* CLOCK_MONOTONIC */
    void (*fn)(void *arg, int at_stop);
    void *arg;
};

struct te_callbacks {
    struct te_timer *timers;   /* sorted by deadline, under events.lock */
    size_t ntimers;            /* their number, stored atomically */
    struct te_fifo events;     /* struct te_cb_event */
    struct te_fifo cq;         /* te_completion */
    pthread_t thread;
    int started;
    int stop;                  /* under events.lock */
    struct te_spin_window spin; /* the callback thread's only */
    pthread_t thread_id;       /* to detect calls from a callback */
    int pin_error;             /* errno of pinning to the asked CPU, or 0 */
    int inline_only;           /* no thread: te_callbacks_run() runs them */
    /* inline_only: called after an event or a timer is queued, so that a
     * thread blocked in te_progress_wait (or on te_progress_fd) wakes to
     * run it (te_callbacks_set_ring). */
    void (*ring)(void *arg);
    void *ring_arg;
};

/** Caller-driven progress: ring(arg) after every push and timer. */
void te_callbacks_set_ring(struct te_callbacks *cb, void (*ring)(void *arg),
                           void *arg);

/** Start the callback thread, spinning spin_us before it blocks, adapted
 *  up to spin_max_us (spin_window.h); cpu >= 0 pins it there (the engine logs
 *  and goes on unpinned where the CPU cannot be used). threaded = 0: no
 *  thread (engine.progress = caller); te_callbacks_run() runs the events
 *  on the application's thread inside te_progress(). */
int te_callbacks_start(struct te_callbacks *cb, uint32_t spin_us,
                       uint32_t spin_max_us, int cpu,
                       uint32_t cq_initial, int threaded);
/** Run every queued event, then stop the thread and free the queues (with
 *  no thread: run them and the pending timers on the calling thread). */
void te_callbacks_stop(struct te_callbacks *cb);
/** Without a thread: run up to budget queued events and due timers (0 =
 *  all) on the calling thread; returns how many ran. */
int te_callbacks_run(struct te_callbacks *cb, int budget);
/** Deadline of the earliest timer (monotonic ns), 0 when none. */
uint64_t te_callbacks_next_timer(struct te_callbacks *cb);
/** Events queued and not yet run (a hint: racy). */
size_t te_callbacks_queued(const struct te_callbacks *cb);
/** Events a te_progress() call raises on its own thread, kept out of the
 *  shared queue (caller-driven progress). */
#define TE_CB_LOCAL_MAX 16
struct te_cb_local {
    const struct te_callbacks *cb;
    struct te_cb_local *outer; /* a te_progress of another engine, nesting */
    size_t n;
    int spilled; /* it filled up: the call's later events go to the queue */
    struct te_cb_event ev[TE_CB_LOCAL_MAX];
};

/** Open l on this thread for cb: until te_callbacks_local_run(), events
 *  pushed to cb on this thread while cb's shared queue is empty are kept
 *  in l, in order, with no lock taken and nobody rung (this thread runs
 *  them: it is awake). */
void te_callbacks_local_open(struct te_callbacks *cb, struct te_cb_local *l);
/** Close l and run up to budget (0 = all) of its events on this thread;
 *  the rest go to the shared queue, in order. Returns how many ran. */
int te_callbacks_local_run(struct te_callbacks *cb, struct te_cb_local *l,
                           int budget);

/** Without a thread: run the timers due by now (all of them, counted as
 *  one, as te_callbacks_run counts them); 1 if any ran. */
int te_callbacks_run_timers(struct te_callbacks *cb);

/** Queue n events (any thread). -ENOMEM only if the queue cannot grow. */
int te_callbacks_push(struct te_callbacks *cb, const struct te_cb_event *ev,
                      size_t n);
/** Queue completions for te_poll_completions(). */
int te_cq_push(struct te_callbacks *cb, const te_completion *c, size_t n);
/** Pop up to max completions, waiting up to timeout_ms for the first. */
int te_cq_pop(struct te_callbacks *cb, te_completion *out, int max,
              int timeout_ms);
/** Run fn(arg, 0) on the callback thread at deadline_ns (monotonic). */
int te_callbacks_add_timer(struct te_callbacks *cb, uint64_t deadline_ns,
                           void (*fn)(void *arg, int at_stop), void *arg);
/** True when called from the callback thread, or from a callback that
 *  te_callbacks_run() is running on this thread. */
int te_callbacks_on_thread(const struct te_callbacks *cb);

#endif
