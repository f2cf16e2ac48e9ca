/*
 * One batch of te/moe.h on a rank set up by moe_rank.c.
 *
 * Dispatch is pipelined per destination: the rows for destination d are
 * staged (token order) and its write is submitted as soon as they are, so
 * the transfer to d overlaps the staging for the next destination; the
 * first write (head + the first P rows, into d's private buffer for us)
 * leaves before the rest is staged. Our own rows are staged last, straight
 * into our receive slot (no network, no second copy). Combine is pipelined
 * the same way: a source's partial results leave once its rows are done.
 *
 * Every write is pinned to one NIC (chosen by destination), so it carries
 * exactly one immediate (te_expected_imms = 1), whatever the NIC count or
 * engine.shard_min_bytes: the receiver's count never depends on the
 * sender's configuration.
 */
#include <errno.h>
#include <inttypes.h>
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

static int64_t put(te_moe_rank *r, uint32_t d, size_t loff, size_t roff,
                   size_t len, uint32_t imm, uint64_t deadline)
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
    q.u.xfer.local = r->mr;
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
        wait_cv(r, moe_now_ns() + 1000000);
        pthread_mutex_unlock(&r->mu);
    }
}

static int wait_imm(te_moe_rank *r, uint32_t imm, uint64_t count,
                    uint64_t deadline, const char *what, uint32_t peer)
{
    uint64_t now = moe_now_ns();
    int ms = now < deadline ? (int)((deadline - now) / 1000000) : 0;
    int rc = te_imm_wait(r->e, imm, count, ms > 0 ? ms : 1);
    if (rc)
        return moe_fail(rc == -ETIMEDOUT ? -ETIMEDOUT : rc, "rank %u: %s of "
                        "rank %u incomplete after %d ms (%s)", r->rank, what,
                        peer, r->c.timeout_ms, te_last_error());
    return 0;
}

int moe_wait_inflight(te_moe_rank *r, uint64_t deadline, uint64_t *left)
{
    int rc = 0;
    pthread_mutex_lock(&r->mu);
    while (r->inflight && !rc)
        if (wait_cv(r, deadline) == ETIMEDOUT && r->inflight)
            rc = -ETIMEDOUT;
    if (left)
        *left = r->inflight;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* Every write of the batch must have ended before its buffers are staged
 * again: a late one of batch b would land in a receiver's rows of batch
 * b + 1 after their head was counted. Waited for on failure too; if the
 * deadline passes, batches are refused until they have all ended. */
static int end_batch(te_moe_rank *r, int rc, uint32_t writes)
{
    const te_moe_config *c = &r->c;
    uint64_t deadline = moe_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
    uint64_t left;
    if (moe_wait_inflight(r, deadline, &left)) {
        char first[256];
        snprintf(first, sizeof(first), "%s", rc ? te_moe_last_error() : "");
        r->unconfirmed = 1;
        return moe_fail(rc ? rc : -ETIMEDOUT, "%s%srank %u: %" PRIu64 " of %u "
                        "writes not completed after %d ms: rank unusable until "
                        "they are", first, rc ? "; " : "", r->rank, left,
                        writes, c->timeout_ms);
    }
    if (!rc && r->failed)
        rc = moe_fail(-ECONNRESET, "rank %u: %u writes failed: %s", r->rank,
                      r->failed, r->failed_why);
    return rc;
}

/* Refuse a batch while writes of an earlier one may still land. */
static int check_usable(te_moe_rank *r)
{
    uint64_t left;
    if (r->unconfirmed && moe_wait_inflight(r, moe_now_ns(), &left))
        return moe_fail(-EBUSY, "rank %u: %" PRIu64 " writes of an earlier "
                        "failed batch not completed yet: its buffers cannot "
                        "be reused", r->rank, left);
    r->unconfirmed = 0;
    return 0;
}

/* The inputs of a batch, and where staging time is counted. */
struct batch_in {
    const void *x;
    const uint16_t *experts;
    const float *weights;
    uint32_t tokens, per;
    size_t elem;
    uint64_t pack_ns;
};

/* Stage `count` rows for destination d at `row`, continuing the scan of
 * the tokens at *cursor (rows go in token order). */
static void stage_rows(te_moe_rank *r, struct batch_in *in, uint32_t d,
                       uint32_t *cursor, uint32_t count, uint8_t *row)
{
    const te_moe_config *c = &r->c;
    uint64_t t0 = moe_now_ns();
    while (count && *cursor < in->tokens) {
        uint32_t t = (*cursor)++;
        const uint16_t *ex = in->experts + (size_t)t * c->topk;
        struct moe_row_meta m = {.token = t};
        for (uint32_t j = 0; j < c->topk; j++)
            if (ex[j] / in->per == d) {
                m.experts[m.nexp] = ex[j];
                m.weights[m.nexp++] = in->weights[(size_t)t * c->topk + j];
            }
        if (!m.nexp)
            continue;
        memcpy(row, &m, sizeof(m));
        memcpy(row + sizeof(m),
               (const uint8_t *)in->x + (size_t)t * c->hidden * in->elem,
               c->hidden * in->elem);
        row += r->row_bytes;
        count--;
    }
    in->pack_ns += moe_now_ns() - t0;
}

/* A write of the batch to peer d, counted in the stats. */
static int put_counted(te_moe_rank *r, uint32_t d, size_t loff, size_t roff,
                       size_t len, uint32_t imm, uint64_t deadline,
                       int combine, uint32_t *writes, uint64_t *post_ns)
{
    uint64_t t0 = moe_now_ns();
    int64_t id = put(r, d, loff, roff, len, imm, deadline);
    *post_ns += moe_now_ns() - t0;
    if (id < 0)
        return moe_fail((int)id, "rank %u: %s to rank %u: %s", r->rank,
                        combine ? "combine" : "dispatch", d, te_last_error());
    (*writes)++;
    if (combine) {
        r->st.combine_writes[d]++;
        r->st.combine_bytes[d] += len;
    } else {
        r->st.dispatch_writes[d]++;
        r->st.dispatch_bytes[d] += len;
    }
    return 0;
}

/* Dispatch to remote d: head + the first P rows into our private buffer at
 * d, then the rest in one write (naive: the head alone, then one write per
 * row). */
static int dispatch_to(te_moe_rank *r, struct batch_in *in, uint64_t batch,
                       uint32_t d, uint32_t rows, uint64_t deadline,
                       uint32_t *writes, uint64_t *post_ns)
{
    const te_moe_config *c = &r->c;
    uint32_t P = c->naive ? 0 : c->private_rows;
    size_t src = r->off_sd + d * r->dslot;
    size_t dst = r->off_rd + r->rank * r->dslot; /* our slot at d */
    size_t H = sizeof(struct moe_head);
    struct moe_head *h = (struct moe_head *)(r->mem + src);
    h->rows = rows;
    h->batch = batch;
    uint32_t cursor = 0, first = rows < P ? rows : P;
    stage_rows(r, in, d, &cursor, first, r->mem + src + H);
    int rc = put_counted(r, d, src, dst, H + first * r->row_bytes,
                         moe_imm_of(r, batch, r->rank, 0), deadline, 0,
                         writes, post_ns);
    uint32_t step = c->naive ? 1 : rows - first;
    for (uint32_t at = first; !rc && at < rows; at += step) {
        size_t off = H + at * r->row_bytes;
        stage_rows(r, in, d, &cursor, step, r->mem + src + off);
        rc = put_counted(r, d, src + off, dst + off, step * r->row_bytes,
                         moe_imm_of(r, batch, r->rank, 1), deadline, 0,
                         writes, post_ns);
    }
    r->st.rows_sent += rows;
    return rc;
}

/* The local experts on the rows of source s, into its combine rows. */
static int run_experts(te_moe_rank *r, uint32_t s, uint32_t rows,
                       uint8_t *crow)
{
    const te_moe_config *c = &r->c;
    for (uint32_t k = 0; k < rows; k++, crow += r->crow_bytes) {
        const uint8_t *row = r->mem + r->off_rd + s * r->dslot +
                             sizeof(struct moe_head) + k * r->row_bytes;
        struct moe_row_meta m;
        memcpy(&m, row, sizeof(m));
        if (m.nexp > c->topk || m.token >= c->max_tokens)
            return moe_fail(-EPROTO, "rank %u: row %u from rank %u is corrupt",
                            r->rank, k, s);
        moe_token_f32(c, row + sizeof(m), 0, r->xt);
        moe_partial(c, &r->W, r->rank, m.nexp, m.experts, m.weights, r->xt,
                    r->acc);
        memcpy(crow, &m.token, 4);
        memcpy(crow + 16, r->acc, c->hidden * sizeof(float));
    }
    return 0;
}

/* One batch in progress. Every phase (dispatch; experts and combine; local
 * completions) has its own deadline, timeout_ms from its start: a long
 * expert phase does not eat the network's time. */
struct batch_run {
    struct batch_in in;
    uint64_t batch, phase_ns, t0, post_ns;
    uint32_t writes;
    uint32_t n[TE_MOE_MAX_RANKS];   /* rows we send to each rank */
    uint32_t got[TE_MOE_MAX_RANKS]; /* rows each rank sent us */
};

/* 1 and 2: rows per destination (the heads need them before any
 * staging), then dispatch destination by destination; our own rows last. */
static int dispatch_phase(te_moe_rank *r, struct batch_run *b)
{
    const te_moe_config *c = &r->c;
    uint64_t deadline = b->t0 + b->phase_ns;
    for (uint32_t t = 0; t < b->in.tokens; t++) {
        uint64_t dests = 0;
        for (uint32_t j = 0; j < c->topk; j++)
            dests |= 1ull << (b->in.experts[(size_t)t * c->topk + j] / b->in.per);
        for (uint32_t d = 0; d < c->ranks; d++)
            b->n[d] += (uint32_t)(dests >> d & 1);
    }
    for (uint32_t i = 1; i < c->ranks; i++) {
        uint32_t d = (r->rank + i) % c->ranks;
        int rc = dispatch_to(r, &b->in, b->batch, d, b->n[d], deadline,
                             &b->writes, &b->post_ns);
        if (rc)
            return rc;
    }
    uint8_t *self = r->mem + r->off_rd + r->rank * r->dslot;
    struct moe_head *sh = (struct moe_head *)self;
    sh->rows = b->n[r->rank];
    sh->batch = b->batch;
    uint32_t cursor = 0;
    stage_rows(r, &b->in, r->rank, &cursor, b->n[r->rank],
               self + sizeof(struct moe_head));
    return 0;
}

/* 3. Receive: the head of every source, then its rest if any. */
static int receive_phase(te_moe_rank *r, struct batch_run *b)
{
    const te_moe_config *c = &r->c;
    uint64_t deadline = b->t0 + b->phase_ns;
    uint32_t P = c->naive ? 0 : c->private_rows;
    int rc;
    for (uint32_t i = 1; i < c->ranks; i++) {
        uint32_t s = (r->rank + c->ranks - i) % c->ranks;
        if ((rc = wait_imm(r, moe_imm_of(r, b->batch, s, 0), 1, deadline,
                           "dispatch", s)))
            return rc;
        const struct moe_head *h =
            (const struct moe_head *)(r->mem + r->off_rd + s * r->dslot);
        if (h->rows > c->max_tokens || h->batch != b->batch)
            return moe_fail(-EPROTO, "rank %u: rank %u sent %u rows for batch "
                            "%" PRIu64 " (max %u, batch %" PRIu64 ")", r->rank,
                            s, h->rows, h->batch, c->max_tokens, b->batch);
        b->got[s] = h->rows;
        uint32_t rest = b->got[s] > P ? b->got[s] - P : 0;
        if (rest && (rc = wait_imm(r, moe_imm_of(r, b->batch, s, 1),
                                   c->naive ? rest : 1, deadline, "dispatch "
                                   "rest", s)))
            return rc;
        r->st.rows_received += b->got[s];
    }
    b->got[r->rank] = b->n[r->rank];
    return 0;
}

/* 4. Experts, and one combine write back to each source as soon as its
 * rows are done (zero-length if it sent none); ours in place. Then the
 * combine writes of every rank. */
static int combine_phase(te_moe_rank *r, struct batch_run *b)
{
    const te_moe_config *c = &r->c;
    uint64_t experts_ns = 0;
    int rc;
    for (uint32_t i = 1; i <= c->ranks; i++) {
        uint32_t s = (r->rank + i) % c->ranks;
        int mine = s == r->rank;
        size_t stage = mine ? r->off_rc + r->rank * r->cslot
                            : r->off_sc + s * r->cslot;
        uint64_t te = moe_now_ns();
        rc = run_experts(r, s, b->got[s], r->mem + stage);
        experts_ns += moe_now_ns() - te;
        if (!rc && !mine)
            rc = put_counted(r, s, stage, r->off_rc + r->rank * r->cslot,
                             b->got[s] * r->crow_bytes,
                             moe_imm_of(r, b->batch, r->rank, 2),
                             moe_now_ns() + b->phase_ns, 1, &b->writes,
                             &b->post_ns);
        if (rc)
            return rc;
    }
    r->st.experts_us = (double)experts_ns / 1e3;
    uint64_t deadline = moe_now_ns() + b->phase_ns;
    for (uint32_t i = 1; i < c->ranks; i++) {
        uint32_t d = (r->rank + c->ranks - i) % c->ranks;
        if ((rc = wait_imm(r, moe_imm_of(r, b->batch, d, 2), 1, deadline,
                           "combine", d)))
            return rc;
    }
    return 0;
}

/* 5. Sum the partial results in rank order (the reference's order). */
static int sum_phase(te_moe_rank *r, const struct batch_run *b, float *out)
{
    const te_moe_config *c = &r->c;
    memset(out, 0, (size_t)b->in.tokens * c->hidden * sizeof(float));
    for (uint32_t d = 0; d < c->ranks; d++)
        for (uint32_t k = 0; k < b->n[d]; k++) {
            const uint8_t *crow = r->mem + r->off_rc + d * r->cslot +
                                  k * r->crow_bytes;
            uint32_t t;
            memcpy(&t, crow, 4);
            if (t >= b->in.tokens)
                return moe_fail(-EPROTO, "rank %u: combine row %u from rank "
                                "%u names token %u", r->rank, k, d, t);
            const float *p = (const float *)(crow + 16);
            float *o = out + (size_t)t * c->hidden;
            for (uint32_t e = 0; e < c->hidden; e++)
                o[e] += p[e];
        }
    return 0;
}

static int run_batch(te_moe_rank *r, struct batch_run *b, float *out)
{
    int rc = dispatch_phase(r, b);
    if (!rc)
        rc = receive_phase(r, b);
    uint64_t tc = moe_now_ns();
    r->st.dispatch_us = (double)(tc - b->t0) / 1e3;
    r->st.pack_us = (double)b->in.pack_ns / 1e3;
    r->st.post_us = (double)b->post_ns / 1e3;
    if (!rc)
        rc = combine_phase(r, b);
    if (!rc)
        rc = sum_phase(r, b, out);
    r->st.combine_us = (double)(moe_now_ns() - tc) / 1e3;
    return rc;
}

static int check_batch(te_moe_rank *r, uint32_t tokens, const void *x,
                       const uint16_t *experts, const float *weights,
                       const float *out)
{
    const te_moe_config *c = &r->c;
    if (tokens > c->max_tokens)
        return moe_fail(-E2BIG, "rank %u: %u tokens, buffers hold %u",
                        r->rank, tokens, c->max_tokens);
    if (tokens && (!x || !experts || !weights || !out))
        return moe_fail(-EINVAL, "rank %u: NULL input", r->rank);
    int rc = moe_check_routing(c, tokens, experts, weights);
    if (rc)
        return rc;
    for (uint32_t d = 0; d < c->ranks; d++)
        if (d != r->rank && !r->peers[d].connected)
            return moe_fail(-ENOTCONN, "rank %u: rank %u not connected",
                            r->rank, d);
    return check_usable(r);
}

int te_moe_batch(te_moe_rank *r, uint64_t batch, uint32_t tokens,
                 const void *x, const uint16_t *experts, const float *weights,
                 float *out)
{
    const te_moe_config *c = &r->c;
    int rc = check_batch(r, tokens, x, experts, weights, out);
    if (rc)
        return rc;
    memset(&r->st, 0, sizeof(r->st));
    pthread_mutex_lock(&r->mu);
    r->serial++;
    r->completed = r->failed = 0;
    pthread_mutex_unlock(&r->mu);
    moe_clear_batch_imms(r, batch + 2);
    struct batch_run b = {
        .in = {x, experts, weights, tokens, c->experts / c->ranks,
               c->dtype == TE_MOE_BF16 ? 2 : 4, 0},
        .batch = batch, .phase_ns = (uint64_t)c->timeout_ms * 1000000ull,
        .t0 = moe_now_ns()};
    rc = run_batch(r, &b, out);
    return end_batch(r, rc, b.writes);
}
