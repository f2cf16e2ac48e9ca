/*
 * Combine (te/moe.h): te_moe_combine_start weights the caller's expert
 * outputs per received row and writes one block back to each source,
 * te_moe_combine_wait sums every rank's partial results per token.
 *
 * Pipelined like dispatch: a source's partial results leave as soon as its
 * rows are weighted (a head alone when it sent none). The sum goes in rank
 * order and, per rank, over the token's top-k slots in order: a dense
 * reference that sums in the same order gets the same fp32 bits.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "moe_internal.h"

static int check_outputs(te_moe_rank *r, const te_moe_expert_out *y)
{
    if (!y)
        return moe_fail(-EINVAL, "rank %u: no expert outputs", r->rank);
    if ((y->dtype != TE_MOE_FP32 && y->dtype != TE_MOE_BF16) ||
        y->experts != r->local || y->rows != r->b.capacity ||
        y->hidden != r->c.hidden)
        return moe_fail(-EINVAL, "rank %u: expert outputs are dtype %u "
                        "[%u][%u][%u], combine needs fp32 (%u) or bf16 (%u) "
                        "[%u][%u][%u]", r->rank, y->dtype, y->experts, y->rows,
                        y->hidden, TE_MOE_FP32, TE_MOE_BF16, r->local,
                        r->b.capacity, r->c.hidden);
    if (y->dtype == TE_MOE_BF16 && r->ops.version < 2)
        return moe_fail(-ENOTSUP, "rank %u: bf16 expert outputs need a memory "
                        "backend of version 2 (this one is version %u: fp32 "
                        "only)", r->rank, r->ops.version);
    if (!y->y && r->b.capacity)
        return moe_fail(-EINVAL, "rank %u: expert outputs are NULL", r->rank);
    return 0;
}

/* Per row of source s: its token (ours to write), then the sum over the
 * row's local experts (top-k order) of weight * y's row for it (the
 * memory backend's: y may be where the CPU does not reach). */
static int weigh_rows(te_moe_rank *r, const te_moe_expert_out *y, uint32_t s,
                      uint8_t *crow)
{
    const te_moe_config *c = &r->c;
    uint32_t base = r->rank * r->local;
    size_t esz = y->dtype == TE_MOE_BF16 ? 2 : 4;
    int rc = moe_wsum_room(r, r->b.got[s], r->b.got[s] * c->topk);
    for (uint32_t k = 0; !rc && k < r->b.got[s]; k++, crow += r->crow_bytes) {
        const struct moe_row_meta *m = moe_row_meta_at(r, s, k);
        const uint32_t *pos = r->pos + ((size_t)s * c->max_tokens + k) * c->topk;
        memcpy(crow, &m->token, 4);
        moe_wsum_row(r, (float *)(crow + 16));
        for (uint32_t j = 0; j < m->nexp; j++)
            moe_wsum_term(r, (const uint8_t *)y->y +
                                 ((size_t)(m->experts[j] - base) *
                                      r->b.capacity + pos[j]) * c->hidden * esz,
                          m->weights[j]);
    }
    if (!rc)
        rc = moe_wsum_flush(r, y->dtype);
    return rc ? rc : moe_mem_sync(r); /* the write reads them next */
}

/* Refusals with no batch of ours pending here: nobody waits for us. */
static int check_state(te_moe_rank *r, uint64_t batch)
{
    if (r->b.state == MOE_COMBINING && batch == r->b.batch)
        return moe_fail(-EALREADY, "rank %u: batch %" PRIu64 " combined "
                        "already", r->rank, batch);
    if (r->b.state == MOE_IDLE || r->b.state == MOE_COMBINING)
        return moe_fail(-EALREADY, "rank %u: batch %" PRIu64 " was not "
                        "dispatched (or is over)", r->rank, batch);
    return 0;
}

int te_moe_combine_start(te_moe_rank *r, uint64_t batch,
                         const te_moe_expert_out *y)
{
    const te_moe_config *c = &r->c;
    int rc = check_state(r, batch);
    if (rc)
        return rc;
    r->st.experts_us = (double)(moe_now_ns() - r->b.t_dispatched) / 1e3;
    /* Batch b is pending here and its sources wait for our results: a
     * refusal now fails it, and they are told. */
    if (r->b.state != MOE_DISPATCHED || batch != r->b.batch)
        rc = moe_fail(-EALREADY, "rank %u: combine of batch %" PRIu64 " while "
                      "batch %" PRIu64 " is %s", r->rank, batch, r->b.batch,
                      r->b.state == MOE_DISPATCHING ? "still dispatching"
                                                    : "dispatched");
    if (!rc)
        rc = check_outputs(r, y);
    if (rc) {
        /* The pending batch cannot end well here: tell its sources. */
        moe_tell_peers(r, rc, 1);
        return moe_end_batch(r, rc);
    }
    uint64_t deadline = moe_now_ns() + r->b.phase_ns;
    for (uint32_t i = 1; i <= c->ranks; i++) {
        uint32_t s = (r->rank + i) % c->ranks;
        int mine = s == r->rank;
        size_t stage = mine ? r->off_rc + r->rank * r->cslot
                            : r->off_sc + s * r->cslot;
        struct moe_head *h = (struct moe_head *)(r->mem + stage);
        memset(h, 0, sizeof(*h));
        h->rows = r->b.got[s];
        h->batch = batch;
        if ((rc = weigh_rows(r, y, s, r->mem + stage + sizeof(*h)))) {
            moe_tell_peers(r, rc, 1);
            return moe_end_batch(r, rc);
        }
        if (!mine && (rc = moe_put(r, s, stage,
                                   r->off_rc + r->rank * r->cslot,
                                   sizeof(*h) + r->b.got[s] * r->crow_bytes,
                                   MOE_PH_COMBINE, deadline, 1)))
            return moe_end_batch(r, rc);
    }
    r->b.state = MOE_COMBINING;
    return 0;
}

/* Row k of rank d's partial results in our combine receive slot, and the
 * token it names. */
static const uint8_t *crow_at(const te_moe_rank *r, uint32_t d, uint32_t k,
                              uint32_t *token)
{
    const uint8_t *crow = r->mem + r->off_rc + d * r->cslot +
                          sizeof(struct moe_head) + k * r->crow_bytes;
    memcpy(token, crow, 4);
    return crow;
}

/* Sum the partial results per token in rank order (the reference's
 * order), through the memory backend: out may be where the CPU does not
 * reach. The rows' tokens are checked first; then every token of the
 * batch is one weighted sum (weights 1) of its ranks' partials, gathered
 * in (rank, row) order. */
static int sum_rows(te_moe_rank *r, float *out)
{
    const te_moe_config *c = &r->c;
    uint32_t tokens = r->b.tokens, terms = 0;
    for (uint32_t d = 0; d < c->ranks; d++)
        terms += r->b.n[d];
    int rc = moe_wsum_room(r, tokens, terms);
    if (rc)
        return rc;
    struct moe_wsums *l = &r->ws;
    uint32_t *first = l->first + l->n; /* rows n .. n + tokens */
    memset(first, 0, ((size_t)tokens + 1) * sizeof(*first));
    for (uint32_t d = 0; d < c->ranks; d++)
        for (uint32_t k = 0; k < r->b.n[d]; k++) {
            uint32_t t;
            crow_at(r, d, k, &t);
            if (t >= tokens)
                return moe_fail(-EPROTO, "rank %u: combine row %u from rank "
                                "%u names token %u", r->rank, k, d, t);
            first[t + 1]++;
        }
    /* Terms per token -> where each token's terms start, then place them
     * (first[t] counts up as token t's terms arrive, in rank order). */
    first[0] = l->terms;
    for (uint32_t t = 0; t < tokens; t++)
        first[t + 1] += first[t];
    for (uint32_t d = 0; d < c->ranks; d++)
        for (uint32_t k = 0; k < r->b.n[d]; k++) {
            uint32_t t;
            const uint8_t *crow = crow_at(r, d, k, &t);
            uint32_t at = first[t]++;
            l->src[at] = crow + 16;
            l->w[at] = 1.0f;
        }
    /* first[t] now ends token t: shift back to starts. */
    for (uint32_t t = tokens; t > 0; t--)
        first[t] = first[t - 1];
    first[0] = l->terms;
    for (uint32_t t = 0; t < tokens; t++)
        l->dst[l->n + t] = out + (size_t)t * c->hidden;
    l->n += tokens;
    l->terms += terms;
    rc = moe_wsum_flush(r, TE_MOE_FP32);
    return rc ? rc : moe_mem_sync(r);
}

int te_moe_combine_wait(te_moe_rank *r, float *out)
{
    const te_moe_config *c = &r->c;
    if (r->b.state != MOE_COMBINING)
        return moe_fail(-EALREADY, "rank %u: no combine started", r->rank);
    int rc = 0;
    if (!out && r->b.tokens)
        rc = moe_fail(-EINVAL, "rank %u: NULL output", r->rank);
    uint64_t deadline = moe_now_ns() + r->b.phase_ns;
    for (uint32_t i = 1; !rc && i < c->ranks; i++) {
        uint32_t d = (r->rank + c->ranks - i) % c->ranks;
        const struct moe_head *h =
            (const struct moe_head *)(r->mem + r->off_rc + d * r->cslot);
        rc = moe_wait_imm(r, d, MOE_PH_COMBINE, 1, deadline, "combine");
        if (!rc)
            r->b.combined |= 1ull << d;
        if (!rc)
            rc = moe_check_head(r, h, d, r->b.n[d], "combine");
        if (!rc && h->rows != r->b.n[d])
            rc = moe_fail(-EPROTO, "rank %u: rank %u returned %u rows, %u "
                          "sent", r->rank, d, h->rows, r->b.n[d]);
    }
    if (!rc)
        rc = sum_rows(r, out);
    r->st.combine_us = (double)(moe_now_ns() - r->b.t_dispatched) / 1e3;
    return moe_end_batch(r, rc);
}

int te_moe_combine(te_moe_rank *r, uint64_t batch, const te_moe_expert_out *y,
                   float *out)
{
    int rc = te_moe_combine_start(r, batch, y);
    return rc ? rc : te_moe_combine_wait(r, out);
}
