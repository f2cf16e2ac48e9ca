/*
 * The experts and the combine phase: one write per peer carrying the
 * outputs of all its tokens, in the order it sent them, so the source
 * finds output (t, k) at the position it packed (t, k) at.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "moe_internal.h"

/* Offset of destination d's block in source s's combine buffer. */
static size_t comb_off(const te_moe *m, uint32_t s, uint32_t d)
{
    size_t off = d * m->chdr;
    for (uint32_t i = 0; i < d; i++)
        off += (size_t)m->nsd[s * m->R + i] * m->orec;
    return off;
}

/* Offset of source s's block in our expert output buffer. */
static size_t out_off(const te_moe *m, uint32_t s)
{
    size_t off = s * m->chdr;
    for (uint32_t i = 0; i < s; i++)
        if (i != m->me)
            off += (size_t)m->nsd[i * m->R + m->me] * m->orec;
    return off;
}

/* Where record i from source s lies in our receive buffers. */
static const uint8_t *record_at(const te_moe *m, uint32_t s, uint32_t i)
{
    if (s == m->me)
        return m->send + m->blk_off[s] + m->hdr + (size_t)i * m->rec;
    if (i < m->P)
        return m->priv + s * m->slot + m->hdr + (size_t)i * m->rec;
    size_t base = 0;
    for (uint32_t j = 0; j < s; j++)
        if (j != m->me) {
            uint32_t n = m->nsd[j * m->R + m->me];
            base += n > m->P ? n - m->P : 0;
        }
    return m->ovf + (base + i - m->P) * m->rec;
}

int te_moe_compute(te_moe *m)
{
    if (m->failed || m->stage != 1) {
        moe_set_error("te-moe: compute without a completed dispatch%s%s",
                      m->failed ? ": " : "", m->failed ? m->fail_msg : "");
        return -EPIPE;
    }
    for (uint32_t s = 0; s < m->R; s++) {
        uint32_t n = m->nsd[s * m->R + m->me];
        uint8_t *dst = s == m->me ? m->comb + comb_off(m, s, s) : m->out + out_off(m, s);
        struct moe_chdr h = {MOE_MAGIC, m->batch, m->me, n, 0, {0}};
        memcpy(dst, &h, sizeof(h));
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *r = record_at(m, s, i);
            struct moe_rec rh;
            memcpy(&rh, r, sizeof(rh));
            /* A record for another rank's expert or batch would mean a
             * placement bug or a stray write: refuse rather than compute. */
            if (rh.expert / m->epr != m->me || rh.batch != m->batch) {
                moe_set_error("te-moe: batch %u: record %u from rank %u is for expert %u "
                              "batch %u", m->batch, i, s, rh.expert, rh.batch);
                return moe_batch_fail(m, -EPROTO);
            }
            moe_expert_record(m->p.dtype, rh.expert, m->H, r + sizeof(rh),
                              dst + m->chdr + (size_t)i * m->orec, m->ta, m->tb);
        }
        m->st.received_tokens += n;
    }
    m->stage = 2;
    return 0;
}

int te_moe_combine(te_moe *m, const float *weights, void *out)
{
    if (m->failed || m->stage != 2) {
        moe_set_error("te-moe: combine without compute%s%s", m->failed ? ": " : "",
                      m->failed ? m->fail_msg : "");
        return -EPIPE;
    }
    uint32_t R = m->R, me = m->me;
    int rc = 0;
    for (uint32_t i = 1; i < R && !rc; i++) {
        uint32_t s = (me + i) % R;
        size_t len = m->chdr + (size_t)m->nsd[s * R + me] * m->orec;
        rc = moe_batch_write(m, s, m->out_mr, out_off(m, s), &m->rem[s].comb,
                             comb_off(m, s, me), len, moe_imm(m, MOE_PH_COMBINE, m->batch),
                             &m->wc[s]);
        m->st.combine_bytes += len;
    }
    if (rc)
        return moe_batch_fail(m, rc);
    rc = moe_batch_wait_imm(m, MOE_PH_COMBINE, R - 1);
    if (rc) {
        char who[128];
        moe_batch_missing(m, 1, who, sizeof(who));
        if (rc == -ETIMEDOUT && who[0])
            moe_set_error("te-moe: batch %u combine: no outputs from rank(s) %s within %d ms",
                          m->batch, who, m->p.timeout_ms);
        char msg[320];
        snprintf(msg, sizeof(msg), "%s", te_moe_last_error());
        moe_batch_wait_writes(m, "combine");
        moe_set_error("%s", msg);
        return moe_batch_fail(m, rc);
    }
    if ((rc = moe_batch_wait_writes(m, "combine")))
        return moe_batch_fail(m, rc);
    for (uint32_t d = 0; d < R; d++) {
        const struct moe_chdr *h = (const struct moe_chdr *)(m->comb + comb_off(m, me, d));
        if (h->magic != MOE_MAGIC || h->batch != m->batch || h->src != d ||
            h->total != m->nsd[me * R + d]) {
            moe_set_error("te-moe: batch %u: combine block from rank %u is corrupt", m->batch, d);
            return moe_batch_fail(m, -EPROTO);
        }
    }
    float *acc = m->ta, *tmp = m->tb;
    for (uint32_t t = 0; t < m->ntokens; t++) {
        memset(acc, 0, (size_t)m->H * 4);
        for (uint32_t k = 0; k < m->K; k++) {
            size_t pk = (size_t)t * m->K + k;
            uint32_t d = m->pair_dest[pk];
            const uint8_t *y = m->comb + comb_off(m, me, d) + m->chdr +
                               (size_t)m->pair_pos[pk] * m->orec;
            moe_accumulate(m->p.dtype, m->H, weights[pk], y, acc, tmp);
        }
        moe_store(m->p.dtype, m->H, acc, (uint8_t *)out + (size_t)t * m->row);
    }
    m->st.min_combine_writes = R > 1 ? UINT32_MAX : 0;
    for (uint32_t d = 0; d < R; d++) {
        if (d == me)
            continue;
        if (m->wc[d] > m->st.max_combine_writes)
            m->st.max_combine_writes = m->wc[d];
        if (m->wc[d] < m->st.min_combine_writes)
            m->st.min_combine_writes = m->wc[d];
    }
    m->stage = 0;
    m->batch++;
    return 0;
}

int te_moe_forward(te_moe *m, uint32_t ntokens, const void *x, const uint32_t *ids,
                   const float *weights, void *out)
{
    int rc = te_moe_dispatch(m, ntokens, x, ids);
    if (!rc)
        rc = te_moe_compute(m);
    if (!rc)
        rc = te_moe_combine(m, weights, out);
    return rc;
}
