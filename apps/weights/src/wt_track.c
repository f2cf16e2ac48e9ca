/*
 * The trainer's completion tracker. Every request of a trainer carries a
 * done callback (te_request.done) into this tracker, so the library never
 * reads the engine-wide completion queue: an engine shared with other
 * subsystems keeps their completions, and theirs never count as ours.
 * Callbacks run on the engine's callback thread and the pushing thread
 * sleeps on the condition variable; in caller mode they run inside
 * progress calls, which the sleeping thread then makes itself (or another
 * thread that is progressing the engine does). Each request's user_data carries the serial
 * of its push, so a late completion of an earlier push (one that returned
 * at its deadline) is counted only in `outstanding`, never against the
 * current push's writes or reads.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wt_runtime.h"

#define UD_READ (1ull << 63)
#define UD_SERIAL_SHIFT 40
#define UD_SERIAL_MASK ((1ull << 23) - 1)
#define UD_INDEX_MASK ((1ull << UD_SERIAL_SHIFT) - 1)

wt_track *wt_track_new(uint64_t nwrites, const uint64_t *bytes, te_engine *e)
{
    wt_track *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->done = calloc(nwrites + 1, 1);
    k->bytes = malloc((nwrites + 1) * sizeof(uint64_t));
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* wt_now()'s clock */
    int bad = !k->done || !k->bytes || pthread_cond_init(&k->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (bad) {
        free(k->done);
        free(k->bytes);
        free(k);
        return NULL;
    }
    pthread_mutex_init(&k->mu, NULL);
    memcpy(k->bytes, bytes, nwrites * sizeof(uint64_t));
    k->nwrites = nwrites;
    k->e = e;
    return k;
}

void wt_track_free(wt_track *k)
{
    if (!k)
        return;
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    free(k->done);
    free(k->bytes);
    free(k);
}

uint64_t wt_track_user_data(const wt_track *k, int read, uint64_t index)
{
    return (read ? UD_READ : 0) | (k->serial & UD_SERIAL_MASK) << UD_SERIAL_SHIFT |
           (index & UD_INDEX_MASK);
}

/* Under k->mu: a completion of the current push. */
static void track_apply(wt_track *k, const te_completion *c)
{
    uint64_t idx = c->user_data & UD_INDEX_MASK;
    int read = (c->user_data & UD_READ) != 0;
    if (c->status && !k->failed) {
        k->failed = c->status;
        snprintf(k->reason, sizeof(k->reason), "%s %s: %s",
                 read ? "gather read" : "write", te_strerror(c->status), c->reason);
    }
    if (read) {
        if (idx < WT_GATHER_DEPTH && k->pending_reads[idx])
            k->pending_reads[idx]--;
    } else if (idx < k->nwrites && !k->done[idx]) {
        k->done[idx] = 1;
        k->inflight -= k->inflight < k->bytes[idx] ? k->inflight : k->bytes[idx];
    }
}

void wt_track_done(const te_completion *c, void *arg)
{
    wt_track *k = arg;
    pthread_mutex_lock(&k->mu);
    uint64_t serial = c->user_data >> UD_SERIAL_SHIFT & UD_SERIAL_MASK;
    if (serial == (k->serial & UD_SERIAL_MASK))
        track_apply(k, c);
    if (k->outstanding)
        k->outstanding--;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

int wt_progress_caller(te_engine *e, int ms)
{
    if (!e || te_engine_progress_mode(e) != TE_PROGRESS_CALLER)
        return 0;
    int rc = te_progress_wait(e, -1, ms);
    return rc != -EBUSY && rc != -EDEADLK;
}

void wt_track_sleep(wt_track *k, double until)
{
    if (te_engine_progress_mode(k->e) == TE_PROGRESS_CALLER) {
        double left = until - wt_now();
        int ms = left <= 0 ? 0 : left >= 0.010 ? 10 : (int)(left * 1000) + 1;
        pthread_mutex_unlock(&k->mu);
        int progressed = wt_progress_caller(k->e, ms);
        pthread_mutex_lock(&k->mu);
        if (progressed)
            return;
        /* Another thread progresses it (or we are inside one of its
         * callbacks): its callbacks signal cv; wait a slice for them. */
        double slice = wt_now() + 0.001;
        until = slice < until ? slice : until;
    }
    struct timespec ts;
    double s = until > 0 ? until : 0;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&k->cv, &k->mu, &ts);
}

int wt_track_quiesce(wt_track *k, double deadline)
{
    pthread_mutex_lock(&k->mu);
    while (k->outstanding && wt_now() < deadline)
        wt_track_sleep(k, deadline);
    int left = k->outstanding != 0;
    pthread_mutex_unlock(&k->mu);
    return left;
}

void wt_track_begin(wt_track *k)
{
    pthread_mutex_lock(&k->mu);
    k->serial++;
    memset(k->done, 0, k->nwrites);
    memset(k->pending_reads, 0, sizeof(k->pending_reads));
    k->inflight = 0;
    k->failed = 0;
    k->reason[0] = 0;
    pthread_mutex_unlock(&k->mu);
}
