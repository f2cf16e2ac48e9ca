/*
 * A MoE rank: its engine, one registration holding four areas, and the
 * protocol of te/moe.h.
 *
 *   area                      per peer slot                  written by
 *   send_dispatch[d]          head + max_tokens rows          us (staging)
 *   recv_dispatch[s]          head + max_tokens rows          source s
 *   send_combine[s]           max_tokens combine rows         us (staging)
 *   recv_combine[d]           max_tokens combine rows         rank d
 *
 * Every write is pinned to one NIC (chosen by destination), so it carries
 * exactly one immediate (te_expected_imms = 1), whatever the NIC count or
 * engine.shard_min_bytes: the receiver's count never depends on the
 * sender's configuration.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "moe_internal.h"

#define BLOB_MAGIC 0x454f4d54u /* "TMOE" */
#define SPACE_BASE (TE_IMM_SPACE_REGION_START + 0x01000000u)
#define SPACE_LIVES 16u

static __thread char moe_msg[256];

int moe_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(moe_msg, sizeof(moe_msg), fmt, ap);
    va_end(ap);
    return err;
}

const char *te_moe_last_error(void) { return moe_msg; }

struct peer {
    int connected;
    te_peer peer;
    te_mr_desc desc;
};

struct te_moe_rank {
    te_engine *e;
    te_moe_config c;
    uint32_t rank, nics;
    moe_weights W;
    size_t row_bytes, crow_bytes, dslot, cslot;
    uint8_t *mem;
    size_t mem_len;
    size_t off_sd, off_rd, off_sc, off_rc; /* the four areas */
    te_mr *mr;
    te_imm_space *space;
    uint32_t generation;                    /* lives used: failed batches */
    struct peer peers[TE_MOE_MAX_RANKS];
    te_moe_stats st;
    float *xt, *acc;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t space_size(const te_moe_config *c) { return 2 * c->ranks * 3; }

/* The raw immediate of (batch, source, phase) at any rank of this job. */
static uint32_t imm_of(const te_moe_rank *r, uint64_t batch, uint32_t src,
                       uint32_t phase)
{
    uint32_t idx = ((uint32_t)(batch & 1) * r->c.ranks + src) * 3 + phase;
    return SPACE_BASE + (r->generation % SPACE_LIVES) * space_size(&r->c) + idx;
}

static int check_config(const te_moe_config *c)
{
    if (!c->ranks || c->ranks > TE_MOE_MAX_RANKS || !c->experts ||
        c->experts > TE_MOE_MAX_EXPERTS || c->experts % c->ranks ||
        !c->topk || c->topk > TE_MOE_MAX_TOPK || c->topk > c->experts ||
        !c->hidden || c->hidden % 8 || c->hidden > (1u << 20) ||
        (c->dtype != TE_MOE_FP32 && c->dtype != TE_MOE_BF16) ||
        !c->max_tokens || c->max_tokens > 65536 ||
        c->private_rows > c->max_tokens)
        return moe_fail(-EINVAL, "te-moe config: ranks %u (1..%d), experts %u "
                        "(a multiple of ranks, <= %d), topk %u (1..%d), "
                        "hidden %u (a multiple of 8), dtype %u, max_tokens "
                        "%u, private_rows %u (<= max_tokens)", c->ranks,
                        TE_MOE_MAX_RANKS, c->experts, TE_MOE_MAX_EXPERTS,
                        c->topk, TE_MOE_MAX_TOPK, c->hidden, c->dtype,
                        c->max_tokens, c->private_rows);
    return 0;
}

int te_moe_rank_new(te_engine *e, const te_moe_config *c, uint32_t rank,
                    te_moe_rank **out)
{
    int rc = check_config(c);
    if (rc)
        return rc;
    if (rank >= c->ranks)
        return moe_fail(-EINVAL, "te-moe: rank %u of %u", rank, c->ranks);
    te_moe_rank *r = calloc(1, sizeof(*r));
    if (!r)
        return moe_fail(-ENOMEM, "te-moe: out of memory");
    r->e = e;
    r->c = *c;
    if (!r->c.timeout_ms)
        r->c.timeout_ms = 5000;
    r->rank = rank;
    r->nics = (uint32_t)te_engine_nic_count(e, 0);
    size_t elem = c->dtype == TE_MOE_BF16 ? 2 : 4;
    r->row_bytes = sizeof(struct moe_row_meta) + c->hidden * elem;
    r->crow_bytes = 16 + (size_t)c->hidden * 4;
    r->dslot = sizeof(struct moe_head) + c->max_tokens * r->row_bytes;
    r->cslot = c->max_tokens * r->crow_bytes;
    r->off_sd = 0;
    r->off_rd = r->off_sd + c->ranks * r->dslot;
    r->off_sc = r->off_rd + c->ranks * r->dslot;
    r->off_rc = r->off_sc + c->ranks * r->cslot;
    r->mem_len = r->off_rc + c->ranks * r->cslot;
    r->mem = aligned_alloc(4096, (r->mem_len + 4095) & ~(size_t)4095);
    r->xt = malloc(c->hidden * sizeof(float));
    r->acc = malloc(c->hidden * sizeof(float));
    if (!r->mem || !r->xt || !r->acc || moe_weights_init(c, &r->W)) {
        rc = moe_fail(-ENOMEM, "te-moe: %zu bytes of buffers", r->mem_len);
        goto fail;
    }
    memset(r->mem, 0, r->mem_len);
    if ((rc = te_mr_reg(e, 0, r->mem, r->mem_len, TE_MR_REMOTE_WRITE,
                        TE_MEM_HOST, &r->mr))) {
        rc = moe_fail(rc, "te-moe: registration: %s", te_last_error());
        goto fail;
    }
    /* The same fixed range on every rank, so senders compute receivers'
     * immediates (imm_of). */
    if ((rc = te_imm_space_create(e, "te-moe", space_size(c), SPACE_LIVES,
                                  TE_IMM_SPACE_FIXED, SPACE_BASE, &r->space))) {
        rc = moe_fail(rc, "te-moe: immediate space: %s", te_last_error());
        goto fail;
    }
    *out = r;
    return 0;
fail:
    if (r->mr)
        te_mr_dereg(e, r->mr);
    free(r->mem);
    free(r->xt);
    free(r->acc);
    free(r);
    return rc;
}

/* blob: magic, version, rank, the config fields that must agree, nics,
 * addr_len, desc_len, addr, desc. */
struct blob_head {
    uint32_t magic, version, rank, ranks, experts, topk, hidden, dtype;
    uint32_t max_tokens, private_rows, naive, nics, addr_len, desc_len;
};

int te_moe_rank_blob(te_moe_rank *r, void *buf, size_t *len)
{
    struct blob_head h = {BLOB_MAGIC, 1, r->rank, r->c.ranks, r->c.experts,
                          r->c.topk, r->c.hidden, r->c.dtype, r->c.max_tokens,
                          r->c.private_rows, r->c.naive, r->nics, 0, 0};
    uint8_t addr[TE_ADDR_MAX], desc[TE_DESC_MAX];
    size_t al = sizeof(addr), dl = sizeof(desc);
    te_mr_desc d;
    if (te_engine_address(r->e, 0, addr, &al) || te_mr_describe(r->mr, &d) ||
        te_desc_serialize(&d, desc, &dl))
        return moe_fail(-EIO, "te-moe blob: %s", te_last_error());
    h.addr_len = (uint32_t)al;
    h.desc_len = (uint32_t)dl;
    size_t need = sizeof(h) + al + dl;
    if (*len < need) {
        *len = need;
        return moe_fail(-ENOSPC, "te-moe blob: %zu bytes needed", need);
    }
    memcpy(buf, &h, sizeof(h));
    memcpy((uint8_t *)buf + sizeof(h), addr, al);
    memcpy((uint8_t *)buf + sizeof(h) + al, desc, dl);
    *len = need;
    return 0;
}

int te_moe_rank_connect(te_moe_rank *r, uint32_t peer, const void *blob,
                        size_t len)
{
    struct blob_head h;
    if (len < sizeof(h))
        return moe_fail(-EBADMSG, "te-moe: blob of rank %u truncated (%zu "
                        "bytes)", peer, len);
    memcpy(&h, blob, sizeof(h));
    if (h.magic != BLOB_MAGIC || h.version != 1)
        return moe_fail(-EPROTO, "te-moe: blob of rank %u: bad magic/version",
                        peer);
    if (len != sizeof(h) + h.addr_len + h.desc_len || h.rank != peer ||
        peer >= r->c.ranks || peer == r->rank)
        return moe_fail(-EBADMSG, "te-moe: blob of rank %u: lengths or rank "
                        "(%u) wrong", peer, h.rank);
#define SAME(f, name)                                                          \
    if (h.f != r->c.f)                                                          \
        return moe_fail(-EINVAL, "te-moe: rank %u has " name " %u, rank %u "   \
                        "has %u", peer, h.f, r->rank, r->c.f)
    SAME(ranks, "ranks");
    SAME(experts, "experts");
    SAME(topk, "topk");
    SAME(hidden, "hidden size");
    SAME(dtype, "dtype");
    SAME(max_tokens, "max_tokens");
    SAME(private_rows, "private_rows");
    SAME(naive, "protocol (naive)");
#undef SAME
    if (h.nics != r->nics)
        return moe_fail(-EINVAL, "te-moe: rank %u has %u NICs, rank %u has %u",
                        peer, h.nics, r->rank, r->nics);
    const uint8_t *p = (const uint8_t *)blob + sizeof(h);
    struct peer *q = &r->peers[peer];
    int rc = te_peer_add(r->e, 0, p, h.addr_len, &q->peer);
    if (!rc)
        rc = te_desc_parse(p + h.addr_len, h.desc_len, &q->desc);
    if (rc)
        return moe_fail(rc, "te-moe: rank %u: %s", peer, te_last_error());
    if (q->desc.len != r->mem_len)
        return moe_fail(-EINVAL, "te-moe: rank %u registered %" PRIu64
                        " bytes, %zu expected", peer, q->desc.len, r->mem_len);
    q->connected = 1;
    return 0;
}

void te_moe_rank_stats(te_moe_rank *r, te_moe_stats *out) { *out = r->st; }

void te_moe_rank_free(te_moe_rank *r)
{
    if (!r)
        return;
    te_imm_space_destroy(r->space);
    te_mr_dereg(r->e, r->mr);
    moe_weights_free(&r->W);
    free(r->mem);
    free(r->xt);
    free(r->acc);
    free(r);
}

/* ---------------------------------------------------------------- batch */

static int64_t put(te_moe_rank *r, uint32_t d, size_t loff, size_t roff,
                   size_t len, uint32_t imm, uint64_t deadline)
{
    te_request q;
    te_request_init(&q, TE_OP_WRITE);
    q.flags = TE_F_IMM;
    q.imm = imm;
    q.route.kind = TE_ROUTE_PIN;
    q.route.nic = d % r->nics;
    q.timeout_ms = r->c.timeout_ms;
    q.u.xfer.peer = r->peers[d].peer;
    q.u.xfer.local = r->mr;
    q.u.xfer.local_off = loff;
    q.u.xfer.remote = &r->peers[d].desc;
    q.u.xfer.remote_off = roff;
    q.u.xfer.len = len;
    for (;;) {
        int64_t id = te_submit(r->e, &q);
        if (id != -EAGAIN || now_ns() > deadline)
            return id;
        te_completion c[64];
        te_poll_completions(r->e, c, 64, 1);
    }
}

static int wait_imm(te_moe_rank *r, uint32_t imm, uint64_t count,
                    uint64_t deadline, const char *what, uint32_t peer)
{
    uint64_t now = now_ns();
    int ms = now < deadline ? (int)((deadline - now) / 1000000) : 0;
    int rc = te_imm_wait(r->e, imm, count, ms > 0 ? ms : 1);
    if (rc)
        return moe_fail(rc == -ETIMEDOUT ? -ETIMEDOUT : rc, "rank %u: %s of "
                        "rank %u incomplete after %d ms (%s)", r->rank, what,
                        peer, r->c.timeout_ms, te_last_error());
    return 0;
}

/* Local completions of every write of the batch (so buffers may be reused
 * and failures seen). */
static int drain(te_moe_rank *r, uint32_t n, uint64_t deadline)
{
    te_completion c[64];
    int failed = 0;
    char why[96] = "";
    while (n > 0) {
        uint64_t now = now_ns();
        if (now > deadline)
            return moe_fail(-ETIMEDOUT, "rank %u: %u writes not completed",
                            r->rank, n);
        int got = te_poll_completions(r->e, c, n < 64 ? (int)n : 64,
                                      (int)((deadline - now) / 1000000) + 1);
        for (int i = 0; i < got; i++)
            if (c[i].status && !failed++)
                snprintf(why, sizeof(why), "%s", c[i].reason);
        n -= got > 0 ? (uint32_t)got : 0;
    }
    return failed ? moe_fail(-ECONNRESET, "rank %u: %d writes failed: %s",
                             r->rank, failed, why) : 0;
}

static int fail_batch(te_moe_rank *r, int rc)
{
    /* Late writes of this batch must never count in a later one. */
    te_imm_space_retire(r->space);
    r->generation++;
    return rc;
}

int te_moe_batch(te_moe_rank *r, uint64_t batch, uint32_t tokens,
                 const void *x, const uint16_t *experts, const float *weights,
                 float *out)
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
    memset(r->st.dispatch_writes, 0, sizeof(r->st.dispatch_writes));
    memset(r->st.combine_writes, 0, sizeof(r->st.combine_writes));
    r->st.rows_sent = r->st.rows_received = 0;
    uint64_t t0 = now_ns();
    uint64_t deadline = t0 + (uint64_t)c->timeout_ms * 1000000ull;
    uint32_t per = c->experts / c->ranks, writes = 0;
    size_t elem = c->dtype == TE_MOE_BF16 ? 2 : 4;
    uint32_t P = c->naive ? 0 : c->private_rows;

    /* 1. Rows per destination, staged in send_dispatch[d]. */
    uint32_t n[TE_MOE_MAX_RANKS] = {0};
    for (uint32_t t = 0; t < tokens; t++) {
        const uint16_t *ex = experts + (size_t)t * c->topk;
        for (uint32_t d = 0; d < c->ranks; d++) {
            struct moe_row_meta m = {.token = t};
            for (uint32_t j = 0; j < c->topk; j++)
                if (ex[j] / per == d) {
                    m.experts[m.nexp] = ex[j];
                    m.weights[m.nexp++] = weights[(size_t)t * c->topk + j];
                }
            if (!m.nexp)
                continue;
            uint8_t *row = r->mem + r->off_sd + d * r->dslot +
                           sizeof(struct moe_head) + n[d]++ * r->row_bytes;
            memcpy(row, &m, sizeof(m));
            memcpy(row + sizeof(m), (const uint8_t *)x + (size_t)t * c->hidden * elem,
                   c->hidden * elem);
        }
    }
    /* 2. Dispatch: head + first P rows in one write; the rest in a second
     * (naive: the head alone, then one write per row). */
    for (uint32_t i = 1; i < c->ranks; i++) {
        uint32_t d = (r->rank + i) % c->ranks;
        struct moe_head *h = (struct moe_head *)(r->mem + r->off_sd + d * r->dslot);
        h->rows = n[d];
        h->batch = batch;
        size_t src = r->off_sd + d * r->dslot;
        size_t dst = r->off_rd + r->rank * r->dslot; /* our slot at d */
        uint32_t first = n[d] < P ? n[d] : P;
        int64_t id = put(r, d, src, dst, sizeof(*h) + first * r->row_bytes,
                         imm_of(r, batch, r->rank, 0), deadline);
        if (id < 0)
            return fail_batch(r, moe_fail((int)id, "rank %u: dispatch to rank "
                                          "%u: %s", r->rank, d, te_last_error()));
        writes++;
        r->st.dispatch_writes[d]++;
        if (n[d] > first) {
            uint32_t chunks = c->naive ? n[d] - first : 1;
            for (uint32_t k = 0; k < chunks; k++) {
                uint32_t at = first + k, cnt = c->naive ? 1 : n[d] - first;
                id = put(r, d, src + sizeof(*h) + at * r->row_bytes,
                         dst + sizeof(*h) + at * r->row_bytes,
                         cnt * r->row_bytes, imm_of(r, batch, r->rank, 1),
                         deadline);
                if (id < 0)
                    return fail_batch(r, moe_fail((int)id, "rank %u: dispatch "
                                                  "to rank %u: %s", r->rank, d,
                                                  te_last_error()));
                writes++;
                r->st.dispatch_writes[d]++;
            }
        }
        r->st.rows_sent += n[d];
    }
    /* Our own rows: no network. */
    memcpy(r->mem + r->off_rd + r->rank * r->dslot,
           r->mem + r->off_sd + r->rank * r->dslot,
           sizeof(struct moe_head) + n[r->rank] * r->row_bytes);
    ((struct moe_head *)(r->mem + r->off_rd + r->rank * r->dslot))->rows =
        n[r->rank];
    ((struct moe_head *)(r->mem + r->off_rd + r->rank * r->dslot))->batch = batch;

    /* 3. Receive: the head of every source, then its rest if any. */
    uint32_t got[TE_MOE_MAX_RANKS];
    for (uint32_t i = 1; i < c->ranks; i++) {
        uint32_t s = (r->rank + c->ranks - i) % c->ranks;
        if ((rc = wait_imm(r, imm_of(r, batch, s, 0), 1, deadline,
                           "dispatch", s)))
            return fail_batch(r, rc);
        const struct moe_head *h =
            (const struct moe_head *)(r->mem + r->off_rd + s * r->dslot);
        if (h->rows > c->max_tokens || h->batch != batch)
            return fail_batch(r, moe_fail(-EPROTO, "rank %u: rank %u sent %u "
                                          "rows for batch %" PRIu64 " (max %u, "
                                          "batch %" PRIu64 ")", r->rank, s,
                                          h->rows, h->batch, c->max_tokens,
                                          batch));
        got[s] = h->rows;
        uint32_t rest = got[s] > P ? got[s] - P : 0;
        if (rest && (rc = wait_imm(r, imm_of(r, batch, s, 1),
                                   c->naive ? rest : 1, deadline, "dispatch "
                                   "rest", s)))
            return fail_batch(r, rc);
        r->st.rows_received += got[s];
    }
    got[r->rank] = n[r->rank];
    r->st.dispatch_us = (double)(now_ns() - t0) / 1e3;

    /* 4. Experts: per row, the weighted sum of the local experts. */
    uint64_t tc = now_ns();
    for (uint32_t s = 0; s < c->ranks; s++) {
        for (uint32_t k = 0; k < got[s]; k++) {
            const uint8_t *row = r->mem + r->off_rd + s * r->dslot +
                                 sizeof(struct moe_head) + k * r->row_bytes;
            struct moe_row_meta m;
            memcpy(&m, row, sizeof(m));
            if (m.nexp > c->topk || m.token >= c->max_tokens)
                return fail_batch(r, moe_fail(-EPROTO, "rank %u: row %u from "
                                              "rank %u is corrupt", r->rank,
                                              k, s));
            te_moe_config one = *c;
            one.hidden = c->hidden;
            moe_token_f32(&one, row + sizeof(m), 0, r->xt);
            moe_partial(c, &r->W, r->rank, m.nexp, m.experts, m.weights,
                        r->xt, r->acc);
            uint8_t *crow = r->mem + r->off_sc + s * r->cslot + k * r->crow_bytes;
            memcpy(crow, &m.token, 4);
            memcpy(crow + 16, r->acc, c->hidden * sizeof(float));
        }
    }
    /* 5. Combine: one write back to each source (zero-length if empty). */
    for (uint32_t i = 1; i < c->ranks; i++) {
        uint32_t s = (r->rank + i) % c->ranks;
        int64_t id = put(r, s, r->off_sc + s * r->cslot,
                         r->off_rc + r->rank * r->cslot,
                         got[s] * r->crow_bytes, imm_of(r, batch, r->rank, 2),
                         deadline);
        if (id < 0)
            return fail_batch(r, moe_fail((int)id, "rank %u: combine to rank "
                                          "%u: %s", r->rank, s, te_last_error()));
        writes++;
        r->st.combine_writes[s]++;
    }
    memcpy(r->mem + r->off_rc + r->rank * r->cslot,
           r->mem + r->off_sc + r->rank * r->cslot, got[r->rank] * r->crow_bytes);
    for (uint32_t i = 1; i < c->ranks; i++) {
        uint32_t d = (r->rank + c->ranks - i) % c->ranks;
        if ((rc = wait_imm(r, imm_of(r, batch, d, 2), 1, deadline, "combine",
                           d)))
            return fail_batch(r, rc);
    }
    /* 6. Sum the partial results in rank order (the reference's order). */
    memset(out, 0, (size_t)tokens * c->hidden * sizeof(float));
    for (uint32_t d = 0; d < c->ranks; d++)
        for (uint32_t k = 0; k < n[d]; k++) {
            const uint8_t *crow = r->mem + r->off_rc + d * r->cslot +
                                  k * r->crow_bytes;
            uint32_t t;
            memcpy(&t, crow, 4);
            if (t >= tokens)
                return fail_batch(r, moe_fail(-EPROTO, "rank %u: combine row "
                                              "%u from rank %u names token %u",
                                              r->rank, k, d, t));
            const float *p = (const float *)(crow + 16);
            float *o = out + (size_t)t * c->hidden;
            for (uint32_t e = 0; e < c->hidden; e++)
                o[e] += p[e];
        }
    r->st.combine_us = (double)(now_ns() - tc) / 1e3;
    if ((rc = drain(r, writes, deadline)))
        return fail_batch(r, rc);
    return 0;
}
