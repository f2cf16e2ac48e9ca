/*
 * The writes of a batch and their local completions (te/moe.h).
 *
 * Every write is pinned to one NIC (chosen by destination), so it carries
 * exactly one immediate (te_expected_imms = 1), whatever the NIC count or
 * engine.shard_min_bytes: the receiver's count never depends on the
 * sender's configuration. Each write has its own `done` callback: the
 * library never reads the engine-wide completion queue, which other users
 * of the engine own.
 */
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "moe_internal.h"

/* A write's own callback (callback thread): counted for the batch whose
 * serial it carries; a write of an earlier, unconfirmed batch only
 * lowers inflight. */
static void on_write_done(const te_completion *c, void *arg)
{
    te_moe_rank *r = arg;
    pthread_mutex_lock(&r->mu);
    if (c->user_data == r->serial) {
        r->completed++;
        if (c->status && !r->failed++)
            snprintf(r->failed_why, sizeof(r->failed_why), "%s", c->reason);
    }
    r->inflight--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Wait on cv until deadline (absolute, CLOCK_MONOTONIC ns); mu held. */
static int wait_cv(te_moe_rank *r, uint64_t deadline)
{
    struct timespec ts = {(time_t)(deadline / 1000000000ull),
                          (long)(deadline % 1000000000ull)};
    return pthread_cond_timedwait(&r->cv, &r->mu, &ts);
}

/* Wait for a write's callback until deadline; mu held. In caller mode the
 * callbacks run only inside a progress call, so progress the engine
 * (blocking on its wait objects, in slices of at most 10 ms) unless
 * another thread is progressing it: then its callbacks signal cv.
 * ETIMEDOUT once the deadline has passed, like wait_cv. */
static int wait_done(te_moe_rank *r, uint64_t deadline)
{
    if (te_engine_progress_mode(r->e) != TE_PROGRESS_CALLER)
        return wait_cv(r, deadline);
    uint64_t now = moe_now_ns();
    /* A deadline already past still gets one look (moe_check_usable). */
    uint64_t left_ms = now < deadline ? (deadline - now + 999999) / 1000000
                                      : 0;
    pthread_mutex_unlock(&r->mu);
    int rc = te_progress_wait(r->e, -1, left_ms < 10 ? (int)left_ms : 10);
    pthread_mutex_lock(&r->mu);
    if (rc == -EBUSY || rc == -EDEADLK) {
        /* Another thread progresses it, or we are inside one of its
         * callbacks: wait for the callbacks that thread runs. */
        uint64_t slice = moe_now_ns() + 1000000;
        wait_cv(r, slice < deadline ? slice : deadline);
    }
    return moe_now_ns() >= deadline ? ETIMEDOUT : 0;
}

static int64_t submit_counted(te_moe_rank *r, const te_request *q)
{
    /* Counted before te_submit: the callback may run before it returns. */
    pthread_mutex_lock(&r->mu);
    r->inflight++;
    pthread_mutex_unlock(&r->mu);
    int64_t id = te_submit(r->e, q);
    if (id < 0) {
        pthread_mutex_lock(&r->mu);
        r->inflight--;
        pthread_mutex_unlock(&r->mu);
    }
    return id;
}

static int64_t put(te_moe_rank *r, te_mr *local, uint32_t d, size_t loff,
                   size_t roff, size_t len, uint32_t imm, uint64_t deadline)
{
    te_request q;
    te_request_init(&q, TE_OP_WRITE);
    q.flags = TE_F_IMM;
    q.imm = imm;
    q.route.kind = TE_ROUTE_PIN;
    q.route.nic = d % r->nics;
    /* No engine deadline: a write that timed out there could still be
     * held by the transport, so only its real end confirms that its
     * buffers are free; the batch bounds its own waits. */
    q.timeout_ms = -1;
    q.u.xfer.peer = r->peers[d].peer;
    q.u.xfer.local = local;
    q.u.xfer.local_off = loff;
    q.u.xfer.remote = &r->peers[d].desc;
    q.u.xfer.remote_off = roff;
    q.u.xfer.len = len;
    q.user_data = r->serial;
    q.done = on_write_done;
    q.done_arg = r;
    for (;;) {
        int64_t id = submit_counted(r, &q);
        if (id != -EAGAIN || moe_now_ns() > deadline)
            return id;
        /* Full: wait for a completion to make room (or 1 ms). */
        pthread_mutex_lock(&r->mu);
        wait_done(r, moe_now_ns() + 1000000);
        pthread_mutex_unlock(&r->mu);
    }
}

int moe_put(te_moe_rank *r, uint32_t d, size_t loff, size_t roff, size_t len,
            uint32_t phase, uint64_t deadline, int combine)
{
    return moe_put_mr(r, r->mr, d, loff, roff, len, phase, deadline, combine);
}

int moe_put_mr(te_moe_rank *r, te_mr *local, uint32_t d, size_t loff,
               size_t roff, size_t len, uint32_t phase, uint64_t deadline,
               int combine)
{
    uint64_t t0 = moe_now_ns();
    int64_t id = put(r, local, d, loff, roff, len,
                     moe_imm_of(r, r->b.batch, r->rank, phase), deadline);
    r->b.post_ns += moe_now_ns() - t0;
    if (id < 0)
        return moe_fail((int)id, "rank %u: %s to rank %u: %s", r->rank,
                        combine ? "combine" : "dispatch", d, te_last_error());
    r->b.writes++;
    if (combine) {
        r->st.combine_writes[d]++;
        r->st.combine_bytes[d] += len;
    } else {
        r->st.dispatch_writes[d]++;
        r->st.dispatch_bytes[d] += len;
    }
    return 0;
}

int moe_wait_imm(te_moe_rank *r, uint32_t peer, uint32_t phase,
                 uint64_t count, uint64_t deadline, const char *what)
{
    uint64_t now = moe_now_ns();
    int ms = now < deadline ? (int)((deadline - now) / 1000000) : 0;
    int rc = te_imm_wait(r->e, moe_imm_of(r, r->b.batch, peer, phase), count,
                         ms > 0 ? ms : 1);
    if (rc)
        return moe_fail(rc == -ETIMEDOUT ? -ETIMEDOUT : rc, "rank %u: %s of "
                        "rank %u incomplete after %d ms (%s)", r->rank, what,
                        peer, r->c.timeout_ms, te_last_error());
    return 0;
}

int moe_check_head(te_moe_rank *r, const struct moe_head *h, uint32_t s,
                   uint32_t max_rows, const char *what)
{
    if (h->batch != r->b.batch)
        return moe_fail(-EPROTO, "rank %u: %s head of rank %u is for batch %"
                        PRIu64 ", not %" PRIu64, r->rank, what, s, h->batch,
                        r->b.batch);
    if (h->status)
        return moe_fail(-EPROTO, "rank %u: rank %u failed batch %" PRIu64
                        " (%s): %.*s", r->rank, s, h->batch, what,
                        MOE_WHY_MAX,
                        (const char *)h + offsetof(struct moe_head, why));
    uint32_t rows = h->rows & ~MOE_ROWS_SPAN;
    if (rows > max_rows)
        return moe_fail(-EPROTO, "rank %u: rank %u sent %u %s rows (max %u)",
                        r->rank, s, rows, what, max_rows);
    return 0;
}

void moe_tell_peers(te_moe_rank *r, int rc, int combine)
{
    char why[MOE_WHY_MAX] = {0};
    const char *msg = te_moe_last_error();
    memcpy(why, msg, strnlen(msg, sizeof(why))); /* NUL-padded, not ended */
    size_t len = offsetof(struct moe_head, why) + sizeof(why);
    uint64_t deadline = moe_now_ns() + r->b.phase_ns;
    for (uint32_t i = 1; i < r->c.ranks; i++) {
        uint32_t d = (r->rank + i) % r->c.ranks;
        if (!combine && (r->b.headed >> d & 1))
            continue;
        size_t stage = combine ? r->off_sc + d * r->cslot
                               : r->off_sd + d * r->dslot;
        size_t dst = combine ? r->off_rc + r->rank * r->cslot
                             : r->off_rd + r->rank * r->dslot;
        struct moe_head *h = (struct moe_head *)(r->mem + stage);
        memset(h, 0, sizeof(*h));
        h->status = rc;
        h->batch = r->b.batch;
        memcpy((char *)h + offsetof(struct moe_head, why), why,
               sizeof(why)); /* on past the head */
        /* Best effort: a peer we cannot write to times out instead. The
         * caller's message stays the one of the failure itself. */
        char keep[256];
        snprintf(keep, sizeof(keep), "%s", te_moe_last_error());
        moe_put(r, d, stage, dst, len, combine ? MOE_PH_COMBINE : MOE_PH_HEAD,
                deadline, combine);
        moe_fail(rc, "%s", keep);
    }
}

int moe_wait_inflight(te_moe_rank *r, uint64_t deadline, uint64_t *left)
{
    int rc = 0;
    pthread_mutex_lock(&r->mu);
    while (r->inflight && !rc)
        if (wait_done(r, deadline) == ETIMEDOUT && r->inflight)
            rc = -ETIMEDOUT;
    if (left)
        *left = r->inflight;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void moe_begin_batch(te_moe_rank *r, uint64_t batch)
{
    memset(&r->st, 0, sizeof(r->st));
    memset(&r->b, 0, sizeof(r->b));
    pthread_mutex_lock(&r->mu);
    r->serial++;
    r->completed = r->failed = 0;
    pthread_mutex_unlock(&r->mu);
    moe_clear_batch_imms(r, batch + 2);
    r->b.batch = batch;
    r->b.phase_ns = (uint64_t)r->c.timeout_ms * 1000000ull;
    r->b.t0 = moe_now_ns();
}

/* Every write of the batch must have ended before its buffers are staged
 * again: a late one of batch b would land in a receiver's rows of batch
 * b + 1 after their head was counted. Waited for on failure too; if the
 * deadline passes, batches are refused until they have all ended. */
int moe_end_batch(te_moe_rank *r, int rc)
{
    uint64_t deadline = moe_now_ns() + r->b.phase_ns;
    uint64_t left;
    r->b.state = MOE_IDLE;
    r->owed_batch = r->b.batch;
    r->owed = 0;
    for (uint32_t d = 0; d < r->c.ranks; d++)
        if (d != r->rank && !(r->b.combined >> d & 1))
            r->owed |= 1ull << d;
    if (moe_wait_inflight(r, deadline, &left)) {
        char first[256];
        snprintf(first, sizeof(first), "%s", rc ? te_moe_last_error() : "");
        r->unconfirmed = 1;
        return moe_fail(rc ? rc : -ETIMEDOUT, "%s%srank %u: %" PRIu64 " of %u "
                        "writes not completed after %d ms: rank unusable until "
                        "they are", first, rc ? "; " : "", r->rank, left,
                        r->b.writes, r->c.timeout_ms);
    }
    if (!rc && r->failed)
        rc = moe_fail(-ECONNRESET, "rank %u: %u writes failed: %s", r->rank,
                      r->failed, r->failed_why);
    return rc;
}

int moe_settle_owed(te_moe_rank *r)
{
    uint64_t deadline = moe_now_ns() + (uint64_t)r->c.timeout_ms * 1000000ull;
    for (uint32_t d = 0; d < r->c.ranks; d++) {
        if (!(r->owed >> d & 1))
            continue;
        uint64_t now = moe_now_ns();
        int ms = now < deadline ? (int)((deadline - now) / 1000000) : 0;
        int rc = te_imm_wait(r->e, moe_imm_of(r, r->owed_batch, d,
                                              MOE_PH_COMBINE), 1,
                             ms > 0 ? ms : 1);
        if (rc)
            return moe_fail(rc, "rank %u: rank %u has not finished batch %"
                            PRIu64 " after %d ms (its slots here may still "
                            "be read): %s", r->rank, d, r->owed_batch,
                            r->c.timeout_ms, te_last_error());
        r->owed &= ~(1ull << d);
    }
    return 0;
}

int moe_check_usable(te_moe_rank *r)
{
    uint64_t left;
    if (r->unconfirmed && moe_wait_inflight(r, moe_now_ns(), &left))
        return moe_fail(-EBUSY, "rank %u: %" PRIu64 " writes of an earlier "
                        "failed batch not completed yet: its buffers cannot "
                        "be reused", r->rank, left);
    r->unconfirmed = 0;
    return 0;
}
