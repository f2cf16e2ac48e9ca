/*
 * One batch of the protocol: dispatch (counts + private buffer, then the
 * overflow), the experts, combine. docs/moe.md has the picture.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "moe_internal.h"

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* ------------------------------------------------------------ writes */

static void on_write(const te_completion *c, void *arg)
{
    te_moe *m = arg;
    pthread_mutex_lock(&m->mu);
    if (c->status < 0 && m->wr_status == 0) {
        m->wr_status = c->status;
        snprintf(m->wr_reason, sizeof(m->wr_reason), "write to rank %llu failed: %s (%s)",
                 (unsigned long long)c->user_data, te_strerror(c->status), c->reason);
    }
    m->inflight--;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

/* Every write of the protocol goes through here, so the per-peer write
 * counts the tests assert are counted where the writes are made. */
int moe_batch_write(te_moe *m, uint32_t to, te_mr *src, size_t src_off,
                        const te_mr_desc *dst, size_t dst_off, size_t len,
                        uint32_t imm, uint32_t *counter)
{
    te_request r;
    te_request_init(&r, TE_OP_WRITE);
    r.flags = TE_F_IMM;
    r.imm = imm;
    r.route.kind = TE_ROUTE_PIN;
    r.timeout_ms = m->p.timeout_ms;
    r.user_data = to;
    r.done = on_write;
    r.done_arg = m;
    r.u.xfer.peer = m->rem[to].peer;
    r.u.xfer.local = src;
    r.u.xfer.local_off = src_off;
    r.u.xfer.remote = dst;
    r.u.xfer.remote_off = dst_off;
    r.u.xfer.len = len;
    pthread_mutex_lock(&m->mu);
    m->inflight++;
    pthread_mutex_unlock(&m->mu);
    int64_t id;
    /* -EAGAIN means the submission queue is full: bounded retries. */
    for (int tries = 0; (id = te_submit(m->e, &r)) == -EAGAIN && tries < 100000; tries++)
        usleep(10);
    if (id < 0) {
        pthread_mutex_lock(&m->mu);
        m->inflight--;
        pthread_mutex_unlock(&m->mu);
        moe_set_error("te-moe: batch %u: submitting a write to rank %u: %s", m->batch, to,
                      te_last_error());
        return (int)id;
    }
    (*counter)++;
    return 0;
}

/* Wait (bounded) until every write of ours has completed. */
int moe_batch_wait_writes(te_moe *m, const char *phase)
{
    struct timespec ts;
    deadline_in(&ts, m->p.timeout_ms + 2000);
    pthread_mutex_lock(&m->mu);
    int rc = 0;
    while (m->inflight && rc == 0)
        rc = pthread_cond_timedwait(&m->cv, &m->mu, &ts);
    int st = m->wr_status;
    pthread_mutex_unlock(&m->mu);
    if (st) {
        moe_set_error("te-moe: batch %u %s: %s", m->batch, phase, m->wr_reason);
        return st;
    }
    if (rc) {
        moe_set_error("te-moe: batch %u %s: writes not completed after %d ms", m->batch,
                      phase, m->p.timeout_ms + 2000);
        return -ETIMEDOUT;
    }
    return 0;
}

/* ------------------------------------------------------------ ImmCounter */

static void on_imm(uint32_t imm, int status, void *arg)
{
    (void)imm;
    te_moe *m = arg;
    pthread_mutex_lock(&m->mu);
    m->w_done = 1;
    m->w_status = status;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

/* Wait for `count` arrivals of the phase's immediate of this batch. A
 * write failure of ours seen meanwhile ends the wait early (a dead peer). */
int moe_batch_wait_imm(te_moe *m, uint32_t phase, uint64_t count)
{
    if (count == 0)
        return 0;
    uint32_t imm = moe_imm(m, phase, m->batch);
    m->w_done = 0;
    int rc = te_imm_expect_timeout(m->e, imm, count, m->p.timeout_ms, on_imm, m);
    if (rc) {
        moe_set_error("te-moe: batch %u: arming imm 0x%x: %s", m->batch, imm, te_last_error());
        return rc;
    }
    struct timespec ts;
    deadline_in(&ts, m->p.timeout_ms + 5000);
    pthread_mutex_lock(&m->mu);
    int trc = 0;
    while (!m->w_done && !m->wr_status && trc == 0)
        trc = pthread_cond_timedwait(&m->cv, &m->mu, &ts);
    int done = m->w_done, st = m->w_status, wst = m->wr_status;
    pthread_mutex_unlock(&m->mu);
    if (!done) {
        te_imm_remove(m->e, imm, NULL); /* disarm: on_imm must not run later */
        pthread_mutex_lock(&m->mu);     /* unless it was already running */
        done = m->w_done;
        pthread_mutex_unlock(&m->mu);
        if (wst) {
            moe_set_error("te-moe: batch %u: %s", m->batch, m->wr_reason);
            return wst;
        }
        moe_set_error("te-moe: batch %u: phase %u not complete (callback lost)", m->batch, phase);
        return -ETIMEDOUT;
    }
    return st;
}

int moe_batch_fail(te_moe *m, int rc)
{
    m->failed = 1;
    snprintf(m->fail_msg, sizeof(m->fail_msg), "%s", te_moe_last_error());
    return rc;
}

/* Name the ranks whose block of this batch has not arrived (for errors). */
void moe_batch_missing(te_moe *m, int combine, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (uint32_t s = 0; s < m->R && n + 8 < len; s++) {
        if (s == m->me)
            continue;
        uint32_t b;
        if (combine) {
            size_t off = s * m->chdr;
            for (uint32_t d = 0; d < s; d++)
                off += m->nsd[m->me * m->R + d] * m->orec;
            b = ((struct moe_chdr *)(m->comb + off))->batch;
        } else {
            b = ((struct moe_hdr *)(m->priv + s * m->slot))->batch;
        }
        if (b != m->batch)
            n += (size_t)snprintf(buf + n, len - n, "%s%u", n ? "," : "", s);
    }
}

/* ------------------------------------------------------------ dispatch */

static size_t overflow_of(const te_moe *m, uint32_t s, uint32_t d)
{
    uint32_t n = m->nsd[s * m->R + d];
    return n > m->P ? n - m->P : 0;
}

/* Records from s before ours in d's overflow buffer (sources in rank order). */
static size_t overflow_offset(const te_moe *m, uint32_t s, uint32_t d)
{
    size_t off = 0;
    for (uint32_t i = 0; i < s; i++)
        if (i != d)
            off += overflow_of(m, i, d);
    return off;
}

/* Route: validate ids, sort the pairs by destination then expert, pack the
 * records and the headers. Returns 0 or the bad-input error (reason set). */
static int pack(te_moe *m, uint32_t ntokens, const void *x, const uint32_t *ids, char *reason,
                size_t rlen)
{
    uint32_t R = m->R, E = m->E, K = m->K;
    memset(m->cursor, 0, 4u * E);
    if (ntokens > m->T) {
        snprintf(reason, rlen, "%u tokens exceed max_tokens %u", ntokens, m->T);
        return -EOVERFLOW;
    }
    for (size_t i = 0; i < (size_t)ntokens * K; i++) {
        if (ids[i] >= E) {
            snprintf(reason, rlen, "token %zu slot %zu: expert id %u out of range (experts %u)",
                     i / K, i % K, ids[i], E);
            memset(m->cursor, 0, 4u * E);
            return -EINVAL;
        }
        m->cursor[ids[i]]++;
    }
    uint32_t *row = &m->matrix[(size_t)m->me * E];
    memcpy(row, m->cursor, 4u * E);
    /* cursor[e] becomes the position of expert e's next record within its
     * destination's block; blk_off[d] the block's offset in send. */
    size_t off = 0;
    for (uint32_t d = 0; d < R; d++) {
        m->blk_off[d] = off;
        uint32_t pos = 0;
        for (uint32_t e = d * m->epr; e < (d + 1) * m->epr; e++) {
            uint32_t c = m->cursor[e];
            m->cursor[e] = pos;
            pos += c;
        }
        m->nsd[m->me * R + d] = pos;
        off += m->hdr + (size_t)pos * m->rec;
    }
    for (uint32_t t = 0; t < ntokens; t++)
        for (uint32_t k = 0; k < K; k++) {
            uint32_t e = ids[(size_t)t * K + k], d = e / m->epr, pos = m->cursor[e]++;
            m->pair_pos[(size_t)t * K + k] = pos;
            m->pair_dest[(size_t)t * K + k] = d;
            uint8_t *r = m->send + m->blk_off[d] + m->hdr + (size_t)pos * m->rec;
            struct moe_rec h = {t, e, k, m->batch};
            memcpy(r, &h, sizeof(h));
            memcpy(r + sizeof(h), (const uint8_t *)x + (size_t)t * m->row, m->row);
        }
    return 0;
}

static void fill_headers(te_moe *m, int status, const char *reason)
{
    for (uint32_t d = 0; d < m->R; d++) {
        struct moe_hdr *h = (struct moe_hdr *)(m->send + m->blk_off[d]);
        memset(h, 0, m->hdr);
        h->magic = MOE_MAGIC;
        h->batch = m->batch;
        h->src = m->me;
        h->status = status;
        h->total = status ? 0 : m->nsd[m->me * m->R + d];
        snprintf(h->reason, sizeof(h->reason), "%s", reason);
        if (!status)
            memcpy(h->counts, &m->matrix[(size_t)m->me * m->E], 4u * m->E);
    }
}

/* After the first writes of every rank: read their headers into the count
 * matrix; the first bad one names the batch's error on every rank. */
static int read_headers(te_moe *m, int *agreed)
{
    for (uint32_t s = 0; s < m->R; s++) {
        if (s == m->me)
            continue;
        const struct moe_hdr *h = (const struct moe_hdr *)(m->priv + s * m->slot);
        if (h->magic != MOE_MAGIC || h->batch != m->batch || h->src != s) {
            moe_set_error("te-moe: batch %u: header from rank %u is corrupt (batch %u src %u)",
                          m->batch, s, h->batch, h->src);
            return -EPROTO;
        }
        if (h->status) {
            *agreed = 1;
            moe_set_error("te-moe: batch %u failed on rank %u: %.96s", m->batch, s, h->reason);
            return h->status;
        }
        memcpy(&m->matrix[(size_t)s * m->E], h->counts, 4u * m->E);
        uint32_t sum = 0;
        for (uint32_t d = 0; d < m->R; d++) {
            uint32_t n = 0;
            for (uint32_t e = d * m->epr; e < (d + 1) * m->epr; e++)
                n += h->counts[e];
            m->nsd[s * m->R + d] = n;
            sum += n;
        }
        if (sum > m->T * m->K || h->total != m->nsd[s * m->R + m->me]) {
            moe_set_error("te-moe: batch %u: rank %u sent inconsistent counts", m->batch, s);
            return -EPROTO;
        }
    }
    /* Every rank checks every destination: an overflow is caught before
     * any write that could exceed a buffer, on all ranks alike. */
    for (uint32_t d = 0; d < m->R; d++) {
        size_t need = overflow_offset(m, m->R, d);
        if (need > m->C) {
            *agreed = 1;
            moe_set_error("te-moe: batch %u: rank %u would receive %zu records beyond its "
                          "private buffers (%u per source), overflow capacity is %u",
                          m->batch, d, need, m->P, m->C);
            return -ENOSPC;
        }
    }
    return 0;
}

int te_moe_dispatch(te_moe *m, uint32_t ntokens, const void *x, const uint32_t *ids)
{
    if (m->failed) {
        moe_set_error("te-moe: rank failed earlier (%s); create it again", m->fail_msg);
        return -EPIPE;
    }
    if (!x && ntokens)
        return moe_set_error("te-moe: NULL tokens"), -EINVAL;
    uint32_t R = m->R, me = m->me;
    memset(&m->st, 0, sizeof(m->st));
    memset(m->wd, 0, 4u * R);
    memset(m->wc, 0, 4u * R);
    m->st.batch = m->batch;
    m->wr_status = 0;
    m->stage = 0;
    /* Arrivals of batch b-128 still banked (none in a healthy run) must not
     * meet batch b+128, which reuses their values. */
    for (uint32_t ph = 0; ph < MOE_PHASES; ph++)
        te_imm_remove(m->e, moe_imm(m, ph, m->batch + MOE_SLOTS / 2), NULL);
    char reason[96] = "";
    int bad = pack(m, ntokens, x, ids, reason, sizeof(reason));
    fill_headers(m, bad, reason);
    /* Write 1 to every peer, at once: counts + the first P records. */
    int rc = 0;
    for (uint32_t i = 1; i < R && !rc; i++) {
        uint32_t d = (me + i) % R;
        size_t n = bad ? 0 : m->nsd[me * R + d];
        size_t first = n < m->P ? n : m->P;
        size_t len = m->hdr + first * m->rec;
        rc = moe_batch_write(m, d, m->send_mr, m->blk_off[d], &m->rem[d].priv,
                          (size_t)me * m->slot, len, moe_imm(m, MOE_PH_COUNTS, m->batch),
                          &m->wd[d]);
        m->st.dispatch_bytes += len;
    }
    if (rc)
        return moe_batch_fail(m, rc);
    if (!rc)
        rc = moe_batch_wait_imm(m, MOE_PH_COUNTS, R - 1);
    int agreed = 0;
    if (rc) {
        char who[128];
        moe_batch_missing(m, 0, who, sizeof(who));
        if (rc == -ETIMEDOUT && who[0])
            moe_set_error("te-moe: batch %u dispatch: no counts from rank(s) %s within %d ms",
                          m->batch, who, m->p.timeout_ms);
        moe_batch_wait_writes(m, "dispatch");
        return moe_batch_fail(m, rc);
    }
    if (bad) {
        /* Our peers read our status from the header and fail too. */
        moe_set_error("te-moe: batch %u: bad input on rank %u: %s", m->batch, me, reason);
        rc = moe_batch_wait_writes(m, "dispatch");
        m->batch++;
        return rc ? moe_batch_fail(m, rc) : bad;
    }
    rc = read_headers(m, &agreed);
    if (rc) {
        char msg[320];
        snprintf(msg, sizeof(msg), "%s", te_moe_last_error());
        int wrc = moe_batch_wait_writes(m, "dispatch");
        moe_set_error("%s", msg);
        if (agreed && !wrc) {
            m->batch++; /* every rank failed this batch alike: next one is fine */
            return rc;
        }
        return moe_batch_fail(m, rc);
    }
    /* Write 2, only where the private buffer was too small (naive mode:
     * every record by itself, as the reference exchange). */
    uint32_t expect2 = 0;
    for (uint32_t i = 1; i < R && !rc; i++) {
        uint32_t d = (me + i) % R, s = d;
        size_t over = overflow_of(m, me, d), base = overflow_offset(m, me, d);
        size_t src = m->blk_off[d] + m->hdr + (size_t)m->P * m->rec;
        uint32_t imm = moe_imm(m, MOE_PH_OVERFLOW, m->batch);
        if (over && m->p.mode == TE_MOE_SPECULATIVE) {
            rc = moe_batch_write(m, d, m->send_mr, src, &m->rem[d].ovf, base * m->rec,
                              over * m->rec, imm, &m->wd[d]);
            m->st.overflow_peers++;
        }
        for (size_t j = 0; m->p.mode == TE_MOE_NAIVE && j < over && !rc; j++)
            rc = moe_batch_write(m, d, m->send_mr, src + j * m->rec, &m->rem[d].ovf,
                              (base + j) * m->rec, m->rec, imm, &m->wd[d]);
        m->st.dispatch_bytes += over * m->rec;
        size_t in = overflow_of(m, s, me);
        expect2 += m->p.mode == TE_MOE_NAIVE ? (uint32_t)in : in > 0;
    }
    if (rc)
        return moe_batch_fail(m, rc);
    rc = moe_batch_wait_imm(m, MOE_PH_OVERFLOW, expect2);
    if (!rc)
        rc = moe_batch_wait_writes(m, "dispatch");
    if (rc)
        return moe_batch_fail(m, rc);
    for (uint32_t d = 0; d < R; d++)
        if (d != me && m->wd[d] > m->st.max_dispatch_writes)
            m->st.max_dispatch_writes = m->wd[d];
    m->ntokens = ntokens;
    m->ids = ids;
    m->stage = 1;
    return 0;
}
