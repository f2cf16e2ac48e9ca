/*
 * Dispatch (te/moe.h): te_moe_dispatch_start stages and writes our rows,
 * te_moe_dispatch_wait receives every source's rows and lays them out per
 * local expert in the caller's te_moe_recv.
 *
 * Pipelined per destination: the rows for destination d are staged (token
 * order) and its write is submitted as soon as they are, so the transfer
 * to d overlaps the staging for the next destination; the first write
 * (head + the first P rows, into d's private buffer for us) leaves before
 * the rest is staged. Our own rows are staged last, straight into our
 * receive slot (no network, no second copy).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "moe_internal.h"

/* The inputs of a batch. */
struct batch_in {
    const void *x;
    const uint16_t *experts;
    const float *weights;
    uint32_t tokens;
    size_t elem;
    int inplace; /* x is the registered input (te_moe_rank_input) */
};

size_t moe_span_off(const te_moe_rank *r)
{
    return sizeof(struct moe_head) +
           (size_t)r->c.max_tokens * sizeof(struct moe_row_meta);
}

/* Stage `count` rows for destination d at `row`, continuing the scan of
 * the tokens at *cursor (rows go in token order). stride: bytes per row
 * (row_bytes: meta then token; a meta's 64 alone: metas of a span). The
 * metas are ours to write; the tokens are copied by the memory backend
 * (handed over here; synced before a write sends them). */
static int stage_rows(te_moe_rank *r, const struct batch_in *in, uint32_t d,
                      uint32_t *cursor, uint32_t count, uint8_t *row,
                      size_t stride)
{
    const te_moe_config *c = &r->c;
    size_t tok = c->hidden * in->elem;
    int copies = stride > sizeof(struct moe_row_meta);
    uint64_t t0 = moe_now_ns();
    int rc = copies ? moe_copy_room(r, count) : 0;
    while (!rc && count && *cursor < in->tokens) {
        uint32_t t = (*cursor)++;
        const uint16_t *ex = in->experts + (size_t)t * c->topk;
        struct moe_row_meta m = {.token = t};
        for (uint32_t j = 0; j < c->topk; j++)
            if (ex[j] / r->local == d) {
                m.experts[m.nexp] = ex[j];
                m.slots[m.nexp] = (uint8_t)j;
                m.weights[m.nexp++] = in->weights[(size_t)t * c->topk + j];
            }
        if (!m.nexp)
            continue;
        memcpy(row, &m, sizeof(m));
        if (copies)
            moe_copy_add(r, row + sizeof(m), (const uint8_t *)in->x + t * tok,
                         tok);
        row += stride;
        count--;
    }
    if (!rc && copies)
        rc = moe_copy_flush(r, tok);
    r->b.pack_ns += moe_now_ns() - t0;
    return rc;
}

/* Stage rows for a write: they are complete (the backend synced) when it
 * returns 0. */
static int stage_for_write(te_moe_rank *r, const struct batch_in *in,
                           uint32_t d, uint32_t *cursor, uint32_t count,
                           uint8_t *row)
{
    int rc = stage_rows(r, in, d, cursor, count, row, r->row_bytes);
    uint64_t t0 = moe_now_ns();
    if (!rc)
        rc = moe_mem_sync(r);
    r->b.pack_ns += moe_now_ns() - t0;
    return rc;
}

/* A span's first write to d: the head (rows | MOE_ROWS_SPAN) and the rows'
 * metas, staged into our staging slot for d. */
static int span_head_to(te_moe_rank *r, const struct batch_in *in, uint32_t d,
                        uint64_t deadline)
{
    uint32_t rows = r->b.n[d], cursor = 0;
    size_t src = r->off_sd + d * r->dslot;
    size_t H = sizeof(struct moe_head);
    struct moe_head *h = (struct moe_head *)(r->mem + src);
    memset(h, 0, H);
    h->rows = rows | MOE_ROWS_SPAN;
    h->batch = r->b.batch;
    int rc = stage_rows(r, in, d, &cursor, rows, r->mem + src + H,
                        sizeof(struct moe_row_meta));
    if (!rc && !(rc = moe_put(r, d, src, r->off_rd + r->rank * r->dslot,
                              H + rows * sizeof(struct moe_row_meta),
                              MOE_PH_HEAD, deadline, 0)))
        r->b.headed |= 1ull << d;
    r->st.rows_sent += rows;
    return rc;
}

/* In place (te_moe_rank_input): d gets at least 3/4 of the tokens, so
 * all of them go in one write straight from x (the others ride along
 * unread) and only the metas are staged: head + metas in the first write,
 * the tokens in the second, at moe_span_off() of our slot at d. */
static int span_to(te_moe_rank *r, const struct batch_in *in, uint32_t d,
                   uint64_t deadline)
{
    size_t dst = r->off_rd + r->rank * r->dslot;
    size_t tok = r->c.hidden * in->elem;
    int rc = moe_put_mr(r, r->in_mr, d, 0, dst + moe_span_off(r),
                        (size_t)in->tokens * tok, MOE_PH_REST, deadline, 0);
    return rc ? rc : span_head_to(r, in, d, deadline);
}

/* The naive exchange from a registered x (the baseline without staging):
 * the head with every row's meta first (the counts before the rows, as
 * naive), then one write per row of its token straight from x into the
 * span area (the receiver's layout of a span). */
static int naive_span_to(te_moe_rank *r, const struct batch_in *in, uint32_t d,
                         uint64_t deadline)
{
    size_t dst = r->off_rd + r->rank * r->dslot;
    size_t tok = r->c.hidden * in->elem;
    int rc = span_head_to(r, in, d, deadline);
    const struct moe_row_meta *m =
        (const struct moe_row_meta *)(r->mem + r->off_sd + d * r->dslot +
                                      sizeof(struct moe_head));
    for (uint32_t k = 0; !rc && k < r->b.n[d]; k++)
        rc = moe_put_mr(r, r->in_mr, d, m[k].token * tok,
                        dst + moe_span_off(r) + m[k].token * tok, tok,
                        MOE_PH_REST, deadline, 0);
    return rc;
}

/* Dispatch to remote d: head + the first P rows into our private buffer at
 * d, then the rest in one write (naive: the head alone, then one write per
 * row; from a registered x, naive_span_to). */
static int dispatch_to(te_moe_rank *r, const struct batch_in *in, uint32_t d,
                       uint64_t deadline)
{
    const te_moe_config *c = &r->c;
    uint32_t rows = r->b.n[d];
    if (in->inplace && rows && c->naive)
        return naive_span_to(r, in, d, deadline);
    if (in->inplace && rows && (uint64_t)rows * 4 >= (uint64_t)in->tokens * 3)
        return span_to(r, in, d, deadline);
    uint32_t P = c->naive ? 0 : c->private_rows;
    size_t src = r->off_sd + d * r->dslot;
    size_t dst = r->off_rd + r->rank * r->dslot; /* our slot at d */
    size_t H = sizeof(struct moe_head);
    struct moe_head *h = (struct moe_head *)(r->mem + src);
    memset(h, 0, H);
    h->rows = rows;
    h->batch = r->b.batch;
    uint32_t cursor = 0, first = rows < P ? rows : P;
    int rc = stage_for_write(r, in, d, &cursor, first, r->mem + src + H);
    if (!rc && !(rc = moe_put(r, d, src, dst, H + first * r->row_bytes,
                              MOE_PH_HEAD, deadline, 0)))
        r->b.headed |= 1ull << d;
    uint32_t step = c->naive ? 1 : rows - first;
    for (uint32_t at = first; !rc && at < rows; at += step) {
        size_t off = H + at * r->row_bytes;
        rc = stage_for_write(r, in, d, &cursor, step, r->mem + src + off);
        if (!rc)
            rc = moe_put(r, d, src + off, dst + off, step * r->row_bytes,
                         MOE_PH_REST, deadline, 0);
    }
    r->st.rows_sent += rows;
    return rc;
}

/* Rows per destination (the heads need them before any staging), then
 * dispatch destination by destination; our own rows last. */
static int send_rows(te_moe_rank *r, const struct batch_in *in)
{
    const te_moe_config *c = &r->c;
    uint64_t deadline = r->b.t0 + r->b.phase_ns;
    for (uint32_t t = 0; t < in->tokens; t++) {
        uint64_t dests = 0;
        for (uint32_t j = 0; j < c->topk; j++)
            dests |= 1ull << (in->experts[(size_t)t * c->topk + j] / r->local);
        for (uint32_t d = 0; d < c->ranks; d++)
            r->b.n[d] += (uint32_t)(dests >> d & 1);
    }
    for (uint32_t i = 1; i < c->ranks; i++) {
        int rc = dispatch_to(r, in, (r->rank + i) % c->ranks, deadline);
        if (rc)
            return rc;
    }
    uint8_t *self = r->mem + r->off_rd + r->rank * r->dslot;
    struct moe_head *sh = (struct moe_head *)self;
    memset(sh, 0, sizeof(*sh));
    sh->rows = r->b.n[r->rank];
    sh->batch = r->b.batch;
    uint32_t cursor = 0;
    if (in->inplace)
        r->b.self_x = in->x; /* tokens read in place: metas alone */
    /* Synced before returning: the caller may reuse a staged x then. */
    int rc = stage_rows(r, in, r->rank, &cursor, r->b.n[r->rank],
                        self + sizeof(struct moe_head),
                        in->inplace ? sizeof(struct moe_row_meta) : r->row_bytes);
    return rc ? rc : moe_mem_sync(r);
}

/* Problems with the rank itself (not this batch's input): refused without
 * telling anyone, the batch was never started here. */
static int check_rank(te_moe_rank *r)
{
    if (r->b.state != MOE_IDLE)
        return moe_fail(-EALREADY, "rank %u: batch %" PRIu64 " still in "
                        "progress (dispatch_wait or combine not done)",
                        r->rank, r->b.batch);
    for (uint32_t d = 0; d < r->c.ranks; d++)
        if (d != r->rank && !r->peers[d].connected)
            return moe_fail(-ENOTCONN, "rank %u: rank %u not connected",
                            r->rank, d);
    int rc = moe_check_usable(r);
    return rc ? rc : moe_settle_owed(r);
}

static int check_input(te_moe_rank *r, uint32_t tokens, const void *x,
                       const uint16_t *experts, const float *weights)
{
    const te_moe_config *c = &r->c;
    if (tokens > c->max_tokens)
        return moe_fail(-E2BIG, "rank %u: %u tokens, buffers hold %u",
                        r->rank, tokens, c->max_tokens);
    if (tokens && (!x || !experts || !weights))
        return moe_fail(-EINVAL, "rank %u: NULL input", r->rank);
    return moe_check_routing(c, tokens, experts, weights);
}

int te_moe_dispatch_start(te_moe_rank *r, uint64_t batch, uint32_t tokens,
                          const void *x, const uint16_t *experts,
                          const float *weights)
{
    int rc = check_rank(r);
    if (rc)
        return rc;
    moe_begin_batch(r, batch);
    r->b.tokens = tokens;
    if ((rc = check_input(r, tokens, x, experts, weights))) {
        /* We read nobody's rows either: both heads say so at once. */
        moe_tell_peers(r, rc, 0);
        moe_tell_peers(r, rc, 1);
        return moe_end_batch(r, rc);
    }
    size_t elem = r->c.dtype == TE_MOE_BF16 ? 2 : 4;
    struct batch_in in = {x, experts, weights, tokens, elem,
                          r->in_mr && x == r->in_base &&
                              (size_t)tokens * r->c.hidden * elem <= r->in_bytes};
    if ((rc = send_rows(r, &in))) {
        moe_tell_peers(r, rc, 0); /* the peers our head has not reached */
        moe_tell_peers(r, rc, 1);
        return moe_end_batch(r, rc);
    }
    r->b.state = MOE_DISPATCHING;
    return 0;
}

/* How long a wait for a source's rest runs before looking whether the
 * source gave up on the batch instead. */
#define REST_LOOK_MS 20

/* Wait for the `count` rest writes of source s. A source that fails after
 * its head went (staging the rest: its memory backend) cannot take the
 * head back, so it says so in its combine head: seeing that one arrive,
 * fail at once with its reason instead of waiting for the deadline. */
static int wait_rest(te_moe_rank *r, uint32_t s, uint64_t count,
                     uint64_t deadline)
{
    uint32_t rest = moe_imm_of(r, r->b.batch, s, MOE_PH_REST);
    uint32_t told = moe_imm_of(r, r->b.batch, s, MOE_PH_COMBINE);
    for (;;) {
        uint64_t now = moe_now_ns();
        if (now + REST_LOOK_MS * 1000000ull >= deadline)
            return moe_wait_imm(r, s, MOE_PH_REST, count, deadline,
                                "dispatch rest");
        int rc = te_imm_wait(r->e, rest, count, REST_LOOK_MS);
        if (rc != -ETIMEDOUT)
            return rc ? moe_wait_imm(r, s, MOE_PH_REST, count, deadline,
                                     "dispatch rest")
                      : 0;
        uint64_t banked = 0;
        const struct moe_head *h =
            (const struct moe_head *)(r->mem + r->off_rc + s * r->cslot);
        /* A good combine write may overtake the rest (no ordering between
         * writes is assumed): only a failure head ends the wait. */
        if (te_imm_poll(r->e, told, &banked, NULL) || !banked || !h->status)
            continue;
        r->b.combined |= 1ull << s; /* its combine write of the batch is in */
        return moe_check_head(r, h, s, r->b.n[s], "dispatch");
    }
}

/* The head of every source, then its rest if any. */
static int receive_rows(te_moe_rank *r)
{
    const te_moe_config *c = &r->c;
    uint64_t deadline = r->b.t0 + r->b.phase_ns;
    uint32_t P = c->naive ? 0 : c->private_rows;
    int rc;
    for (uint32_t i = 1; i < c->ranks; i++) {
        uint32_t s = (r->rank + c->ranks - i) % c->ranks;
        if ((rc = moe_wait_imm(r, s, MOE_PH_HEAD, 1, deadline, "dispatch")))
            return rc;
        const struct moe_head *h =
            (const struct moe_head *)(r->mem + r->off_rd + s * r->dslot);
        if ((rc = moe_check_head(r, h, s, c->max_tokens, "dispatch")))
            return rc;
        uint32_t rows = h->rows & ~MOE_ROWS_SPAN;
        r->b.span[s] = (h->rows & MOE_ROWS_SPAN) != 0;
        r->b.got[s] = rows;
        /* A span: its tokens in one write (naive: one per row). */
        uint32_t rest = r->b.span[s] ? (c->naive ? rows : 1)
                                     : rows > P ? rows - P : 0;
        if (rest && (rc = wait_rest(r, s, c->naive ? rest : 1, deadline)))
            return rc;
        r->st.rows_received += rows;
    }
    r->b.got[r->rank] = r->b.n[r->rank];
    r->b.span[r->rank] = r->b.self_x != NULL;
    return 0;
}

const struct moe_row_meta *moe_row_meta_at(const te_moe_rank *r, uint32_t s,
                                           uint32_t k)
{
    size_t stride = r->b.span[s] ? sizeof(struct moe_row_meta) : r->row_bytes;
    return (const struct moe_row_meta *)(r->mem + r->off_rd + s * r->dslot +
                                         sizeof(struct moe_head) + k * stride);
}

/* Its token: after the meta, or in the span at the token's index (checked
 * against max_tokens by count_rows: inside the slot); our own rows' in
 * place in x. */
static const uint8_t *row_token(const te_moe_rank *r, uint32_t s,
                                const struct moe_row_meta *m)
{
    if (!r->b.span[s])
        return (const uint8_t *)(m + 1);
    size_t tok = r->row_bytes - sizeof(struct moe_row_meta);
    if (s == r->rank)
        return r->b.self_x + (size_t)m->token * tok;
    return r->mem + r->off_rd + s * r->dslot + moe_span_off(r) +
           (size_t)m->token * tok;
}

/* Rows per local expert, checked against the capacity (and the metas
 * against the config) before anything is written to recv. */
static int count_rows(te_moe_rank *r, const te_moe_recv *recv)
{
    const te_moe_config *c = &r->c;
    uint32_t base = r->rank * r->local, count[TE_MOE_MAX_EXPERTS] = {0};
    for (uint32_t s = 0; s < c->ranks; s++)
        for (uint32_t k = 0; k < r->b.got[s]; k++) {
            const struct moe_row_meta *m = moe_row_meta_at(r, s, k);
            if (m->nexp > c->topk || m->token >= c->max_tokens)
                return moe_fail(-EPROTO, "rank %u: row %u from rank %u is "
                                "corrupt", r->rank, k, s);
            for (uint32_t j = 0; j < m->nexp; j++)
                if (m->experts[j] < base || m->experts[j] >= base + r->local)
                    return moe_fail(-EPROTO, "rank %u: row %u from rank %u "
                                    "names expert %u, not ours", r->rank, k,
                                    s, m->experts[j]);
                else
                    count[m->experts[j] - base]++;
        }
    for (uint32_t l = 0; l < r->local; l++)
        if (count[l] > recv->capacity)
            return moe_fail(-ENOSPC, "rank %u: expert %u gets %u rows, "
                            "capacity %u", r->rank, base + l, count[l],
                            recv->capacity);
    return 0;
}

/* Copy every row's token to each of its local experts (sources in rank
 * order, rows in token order) through the memory backend, or point at it
 * (index mode), and remember where, for combine. */
static int lay_out(te_moe_rank *r, const te_moe_recv *recv)
{
    const te_moe_config *c = &r->c;
    size_t tok = r->row_bytes - sizeof(struct moe_row_meta);
    uint32_t base = r->rank * r->local, rows = 0;
    for (uint32_t s = 0; s < c->ranks; s++)
        rows += r->b.got[s] * c->topk;
    int rc = recv->x ? moe_copy_room(r, rows) : 0;
    if (rc)
        return rc;
    memset(recv->count, 0, r->local * sizeof(uint32_t));
    for (uint32_t s = 0; s < c->ranks; s++)
        for (uint32_t k = 0; k < r->b.got[s]; k++) {
            const struct moe_row_meta *m = moe_row_meta_at(r, s, k);
            uint32_t *pos = r->pos + ((size_t)s * c->max_tokens + k) * c->topk;
            for (uint32_t j = 0; j < m->nexp; j++) {
                uint32_t l = m->experts[j] - base, i = recv->count[l]++;
                size_t at = (size_t)l * recv->capacity + i;
                if (recv->x)
                    moe_copy_add(r, (uint8_t *)recv->x + at * tok,
                                 row_token(r, s, m), tok);
                else
                    recv->rows[at] = row_token(r, s, m); /* index mode: in place */
                if (recv->src)
                    recv->src[at] = (te_moe_src){s, m->token, m->slots[j],
                                                 m->weights[j]};
                pos[j] = i;
            }
        }
    if (recv->x && !(rc = moe_copy_flush(r, tok)))
        rc = moe_mem_sync(r);
    return rc;
}

int te_moe_dispatch_wait(te_moe_rank *r, const te_moe_recv *recv)
{
    if (r->b.state != MOE_DISPATCHING)
        return moe_fail(-EALREADY, "rank %u: no dispatch started", r->rank);
    int rc = 0;
    if (!recv || !(recv->x || recv->rows) || !recv->count || !recv->capacity)
        rc = moe_fail(-EINVAL, "rank %u: recv needs x (or rows), count and "
                      "a capacity", r->rank);
    if (!rc)
        rc = receive_rows(r);
    if (!rc)
        rc = count_rows(r, recv);
    uint64_t now = moe_now_ns();
    r->st.dispatch_us = (double)(now - r->b.t0) / 1e3;
    r->st.pack_us = (double)r->b.pack_ns / 1e3;
    r->st.post_us = (double)r->b.post_ns / 1e3;
    if (rc) {
        /* Nobody gets our partial results: say so instead. */
        moe_tell_peers(r, rc, 1);
        return moe_end_batch(r, rc);
    }
    if ((rc = lay_out(r, recv))) {
        moe_tell_peers(r, rc, 1);
        return moe_end_batch(r, rc);
    }
    r->b.capacity = recv->capacity;
    r->b.state = MOE_DISPATCHED;
    r->b.t_dispatched = moe_now_ns();
    r->st.layout_us = (double)(r->b.t_dispatched - now) / 1e3;
    r->st.dispatch_us = (double)(r->b.t_dispatched - r->b.t0) / 1e3;
    return 0;
}

int te_moe_dispatch(te_moe_rank *r, uint64_t batch, uint32_t tokens,
                    const void *x, const uint16_t *experts,
                    const float *weights, const te_moe_recv *recv)
{
    int rc = te_moe_dispatch_start(r, batch, tokens, x, experts, weights);
    return rc ? rc : te_moe_dispatch_wait(r, recv);
}
