/* Public ImmCounter, completion-queue and receive-handler entry points. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "engine_internal.h"
#include "te_clock.h"
#include "wait.h"
#include "te_error.h"

/* The space check and the arming are not one step: a retirement (or
 * destruction) of imm's space in between sweeps before we arm, leaving the
 * expectation on a value whose arrivals are never banked again: it could
 * never be met. Check again once armed; take it back if so (1: taken back,
 * cb never runs; the caller answers -ESTALE). If it fired meanwhile (the
 * sweep cancelled it, or it was met), its cb runs: the arming stands. */
static int stale_after_arming(struct te_engine *e, uint32_t imm,
                              uint64_t epoch, const char *fn)
{
    if (!te_imm_spaces_check(&e->spaces, imm, fn))
        return 0;
    return te_imm_table_cancel(e->imms, imm, epoch);
}

TE_API int te_imm_expect(te_engine *e, uint32_t imm, uint64_t count,
                         te_imm_fn cb, void *arg)
{
    te_error_clear();
    if (!e)
        return te_fail(-EINVAL, "te_imm_expect: engine is NULL");
    if (count == 0)
        return te_fail(-EINVAL, "te_imm_expect: count must be > 0 (imm %u)",
                       imm);
    int sc = te_imm_spaces_check(&e->spaces, imm, "te_imm_expect");
    if (sc)
        return sc;
    uint64_t epoch = 0;
    int fired = 0;
    int rc = te_imm_table_expect_ex(e->imms, imm, count, cb, arg, &epoch,
                                    &fired);
    if (rc == -EBUSY)
        return te_fail(rc, "te_imm_expect: imm %u already has an armed "
                       "expectation", imm);
    if (rc == -ENOSPC)
        return te_fail(rc, "te_imm_expect: ImmCounter table full "
                       "(engine.imm_table_size)");
    if (!rc && !fired && stale_after_arming(e, imm, epoch, "te_imm_expect"))
        return -ESTALE; /* te_imm_spaces_check() set the message */
    return rc;
}

/* A pending deadline of an expectation armed by te_imm_expect_timeout. */
struct imm_deadline {
    struct te_engine *e;
    uint32_t imm;
    uint64_t epoch;
    te_imm_fn cb;
    void *arg;
};

static void imm_deadline_due(void *p, int at_stop)
{
    struct imm_deadline *d = p;
    /* Only the expectation of this epoch, and only if still unmet: a met
     * one has fired already, and a later arming is not ours to cancel. */
    if (te_imm_table_cancel(d->e->imms, d->imm, d->epoch))
        d->cb(d->imm, at_stop ? -ECANCELED : -ETIMEDOUT, d->arg);
    free(d);
}

TE_API int te_imm_expect_timeout(te_engine *e, uint32_t imm, uint64_t count,
                                 int timeout_ms, te_imm_fn cb, void *arg)
{
    te_error_clear();
    if (!e || !cb || timeout_ms <= 0 || count == 0)
        return te_fail(-EINVAL, "te_imm_expect_timeout: needs an engine, a "
                       "callback, count > 0 and timeout_ms > 0 (imm %u)", imm);
    int sc = te_imm_spaces_check(&e->spaces, imm, "te_imm_expect_timeout");
    if (sc)
        return sc;
    struct imm_deadline *d = calloc(1, sizeof(*d));
    if (!d)
        return te_fail(-ENOMEM, "te_imm_expect_timeout: out of memory");
    int fired = 0;
    int rc = te_imm_table_expect_ex(e->imms, imm, count, cb, arg, &d->epoch,
                                    &fired);
    if (rc || fired) {
        free(d);
        if (rc == -EBUSY)
            return te_fail(rc, "te_imm_expect_timeout: imm %u already has an "
                           "armed expectation", imm);
        return rc;
    }
    if (stale_after_arming(e, imm, d->epoch, "te_imm_expect_timeout")) {
        free(d);
        return -ESTALE;
    }
    d->e = e;
    d->imm = imm;
    d->cb = cb;
    d->arg = arg;
    uint64_t deadline = te_clock_ns() + (uint64_t)timeout_ms * 1000000ull;
    rc = te_callbacks_add_timer(&e->cb, deadline, imm_deadline_due, d);
    if (rc) {
        int cancelled = te_imm_table_cancel(e->imms, imm, d->epoch);
        free(d);
        /* Met meanwhile: its callback is queued, so the expectation stands
         * (an error here would let the caller free what cb uses). */
        if (!cancelled)
            return 0;
        return te_fail(rc, "te_imm_expect_timeout: out of memory");
    }
    return 0;
}

TE_API int te_imm_poll(te_engine *e, uint32_t imm, uint64_t *banked,
                       int *armed)
{
    te_error_clear();
    if (!e || !banked)
        return te_fail(-EINVAL, "te_imm_poll: NULL argument");
    int a = 0;
    int rc = te_imm_table_poll(e->imms, imm, banked, &a);
    if (armed)
        *armed = a;
    return rc;
}

static uint64_t now_ms(void)
{
    return te_clock_ns() / 1000000u;
}

TE_API int te_imm_wait(te_engine *e, uint32_t imm, uint64_t count,
                       int timeout_ms)
{
    te_error_clear();
    if (!e || count == 0)
        return te_fail(-EINVAL, "te_imm_wait: bad engine or count 0");
    int sc = te_imm_spaces_check(&e->spaces, imm, "te_imm_wait");
    if (sc)
        return sc;
    uint64_t deadline = now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    /* Thread mode: this thread is spinning anyway; it takes the turn of a
     * group whose worker sleeps through an event (engine.waiter_progress),
     * but never from a callback (the turn may wait for the callback
     * thread's queue). */
    int help = !e->s.caller_progress && e->s.waiter_progress &&
               !te_callbacks_on_thread(&e->cb);
    for (uint32_t spins = 0;; spins++) {
        int rc = te_imm_table_try_take(e->imms, imm, count);
        if (rc == 1)
            return 0;
        if (rc == -EBUSY)
            return te_fail(rc, "te_imm_wait: imm %u has a callback "
                           "expectation armed", imm);
        if (rc < 0)
            return te_fail(rc, "te_imm_wait: %s", te_strerror(rc));
        if (e->s.caller_progress && !te_callbacks_on_thread(&e->cb)) {
            /* Nobody else moves a caller-driven engine. */
            if (now_ms() < deadline)
                te_progress_step(e, deadline * 1000000u);
            spins = 0;
        } else if (help && te_engine_help(e)) {
            spins = 0; /* a turn ran here: keep looking, do not yield */
        }
        if ((spins & 255) == 0 && now_ms() >= deadline) {
            uint64_t banked = 0;
            te_imm_table_poll(e->imms, imm, &banked, NULL);
            return te_fail(-ETIMEDOUT, "te_imm_wait: imm %u: %llu of %llu "
                           "arrivals after %d ms", imm,
                           (unsigned long long)banked,
                           (unsigned long long)count, timeout_ms);
        }
        if (spins > 4096)
            sched_yield();
        else
            te_cpu_relax();
    }
}

TE_API int te_imm_remove(te_engine *e, uint32_t imm, uint64_t *surplus)
{
    te_error_clear();
    if (!e)
        return te_fail(-EINVAL, "te_imm_remove: engine is NULL");
    uint64_t s = 0;
    int rc = te_imm_table_remove(e->imms, imm, &s);
    if (surplus)
        *surplus = s;
    return rc;
}

TE_API int te_imm_disarm(te_engine *e, uint32_t imm, uint64_t *surplus)
{
    te_error_clear();
    if (!e)
        return te_fail(-EINVAL, "te_imm_disarm: engine is NULL");
    uint64_t s = 0;
    /* remove_ex reports a disarm only when it won the race against the
     * arrival that met the expectation and against its deadline timer
     * (te_imm_table_cancel): exactly the case where cb will not run. */
    int disarmed = te_imm_table_remove_ex(e->imms, imm, &s, NULL, NULL);
    if (surplus)
        *surplus = s;
    return disarmed;
}

TE_API int te_poll_completions(te_engine *e, te_completion *out, int max,
                               int timeout_ms)
{
    te_error_clear();
    if (!e || (!out && max > 0) || max < 0)
        return te_fail(-EINVAL, "te_poll_completions: bad arguments");
    if (!e->s.caller_progress)
        return te_cq_pop(&e->cb, out, max, timeout_ms);
    /* Caller-driven: nobody else moves the engine while we wait (but
     * never progress from inside one of its callbacks). */
    uint64_t end = te_clock_ns() +
                   (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
    if (te_callbacks_on_thread(&e->cb)) /* from a callback: only wait */
        return te_cq_pop(&e->cb, out, max, timeout_ms);
    for (int turn = 0;; turn++) {
        int n = te_cq_pop(&e->cb, out, max, 0);
        if (n || max == 0)
            return n;
        if (timeout_ms <= 0) {
            /* A non-blocking poll still moves the engine once: a loop of
             * them is the application's progress loop. */
            if (turn) {
                te_error_clear(); /* a busy group is not this call's error */
                return 0;
            }
            te_progress(e, -1, 0);
            continue;
        }
        if (te_clock_ns() >= end) {
            te_error_clear();
            return 0;
        }
        te_progress_step(e, end);
    }
}

TE_API int te_set_recv_handler(te_engine *e, int group, te_recv_fn fn,
                               void *arg)
{
    te_error_clear();
    if (!e || group < 0 || (uint32_t)group >= e->ngroups)
        return te_fail(-EINVAL, "te_set_recv_handler: bad engine or group %d",
                       group);
    te_recv_slot_set(&e->groups[group].recv, fn, arg);
    return 0;
}
