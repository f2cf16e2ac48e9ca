/*
 * Setup of a te-moe rank: sizes, buffers registered once, the setup header
 * every rank exchanges (shape, dtype, address, descriptors) and its checks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_internal.h"

static __thread char moe_err[320];

void moe_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(moe_err, sizeof(moe_err), fmt, ap);
    va_end(ap);
}

const char *te_moe_last_error(void) { return moe_err; }

/* Immediate of (phase, batch) at every receiver: imm_base + phase * 256 +
 * batch mod 256. A write of batch b is counted under b's value only, so a
 * late write can never complete batch b+1; the slot of batch b-128 is
 * cleared at the start of batch b (see te_moe_dispatch), so arrivals older
 * than 128 batches never reach a reused value either. */
uint32_t moe_imm(const te_moe *m, uint32_t phase, uint32_t batch)
{
    return m->p.imm_base + phase * MOE_SLOTS + batch % MOE_SLOTS;
}

/* What each rank publishes once. Shape fields are compared across ranks. */
struct moe_setup {
    uint32_t magic, version, rank, ranks, experts, top_k, hidden, dtype;
    uint32_t max_tokens, private_tokens, overflow_tokens, mode, imm_base;
    uint32_t addr_len, priv_len, ovf_len, comb_len, pad;
    uint8_t addr[TE_ADDR_MAX];
    uint8_t priv[TE_DESC_MAX], ovf[TE_DESC_MAX], comb[TE_DESC_MAX];
};

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static int alloc_region(te_moe *m, size_t len, uint32_t access, uint8_t **buf, te_mr **mr,
                        size_t *out_len, const char *what)
{
    len = round_up(len ? len : 64, 4096);
    *buf = aligned_alloc(4096, len);
    if (!*buf) {
        moe_set_error("te-moe: out of memory for the %s buffer (%zu bytes)", what, len);
        return -ENOMEM;
    }
    memset(*buf, 0, len);
    *out_len = len;
    int rc = te_mr_reg(m->e, 0, *buf, len, access, TE_MEM_HOST, mr);
    if (rc)
        moe_set_error("te-moe: registering the %s buffer: %s", what, te_last_error());
    return rc;
}

static int check_params(te_moe_params *p)
{
    if (p->ranks == 0 || p->ranks > 256 || p->rank >= p->ranks)
        return moe_set_error("te-moe: rank %u of %u ranks (need 1..256 ranks)", p->rank, p->ranks), -EINVAL;
    if (p->experts == 0 || p->experts % p->ranks)
        return moe_set_error("te-moe: %u experts do not divide over %u ranks", p->experts, p->ranks), -EINVAL;
    if (p->top_k == 0 || p->top_k > p->experts)
        return moe_set_error("te-moe: top_k %u not in 1..%u", p->top_k, p->experts), -EINVAL;
    if (p->hidden == 0 || p->hidden % MOE_BLOCK)
        return moe_set_error("te-moe: hidden %u is not a positive multiple of %u", p->hidden, MOE_BLOCK), -EINVAL;
    if (p->dtype > TE_MOE_BF16 || p->mode > TE_MOE_NAIVE)
        return moe_set_error("te-moe: unknown dtype %u or mode %u", p->dtype, p->mode), -EINVAL;
    if (p->max_tokens == 0 || (uint64_t)p->max_tokens * p->top_k > (1u << 24))
        return moe_set_error("te-moe: max_tokens %u x top_k %u out of range", p->max_tokens, p->top_k), -EINVAL;
    for (int i = 0; i < 4; i++)
        if (p->reserved[i])
            return moe_set_error("te-moe: params.reserved[%d] must be zero", i), -EINVAL;
    uint32_t tk = p->max_tokens * p->top_k;
    if (p->private_tokens == 0)
        p->private_tokens = (tk + p->ranks - 1) / p->ranks;
    if (p->mode == TE_MOE_NAIVE)
        p->private_tokens = 0; /* counts first, then every record by itself */
    if (p->overflow_tokens == 0)
        p->overflow_tokens = 2 * tk;
    if (p->imm_base == 0)
        p->imm_base = 0x4d000000u;
    if (p->timeout_ms <= 0)
        p->timeout_ms = 10000;
    return 0;
}

/* The first field that differs between rank 0's header and rank i's. */
static const char *mismatch(const struct moe_setup *a, const struct moe_setup *b,
                            uint32_t *va, uint32_t *vb)
{
#define CMP(f) if (a->f != b->f) { *va = a->f; *vb = b->f; return #f; }
    CMP(magic) CMP(version) CMP(ranks) CMP(experts) CMP(top_k) CMP(hidden) CMP(dtype)
    CMP(max_tokens) CMP(private_tokens) CMP(overflow_tokens) CMP(mode) CMP(imm_base)
#undef CMP
    return NULL;
}

static int exchange(te_moe *m, te_moe_allgather_fn ag, void *arg)
{
    struct moe_setup *mine = calloc(1, sizeof(*mine));
    struct moe_setup *all = calloc(m->R, sizeof(*all));
    int rc = mine && all ? 0 : -ENOMEM;
    if (rc)
        goto out;
    const te_moe_params *p = &m->p;
    *mine = (struct moe_setup){MOE_MAGIC, 1, p->rank, p->ranks, p->experts, p->top_k,
                               p->hidden, p->dtype, p->max_tokens, p->private_tokens,
                               p->overflow_tokens, p->mode, p->imm_base, 0, 0, 0, 0, 0, {0}, {0}, {0}, {0}};
    size_t len = sizeof(mine->addr);
    te_mr_desc d;
    if ((rc = te_engine_address(m->e, 0, mine->addr, &len)))
        goto out;
    mine->addr_len = (uint32_t)len;
    te_mr *mrs[3] = {m->priv_mr, m->ovf_mr, m->comb_mr};
    uint8_t *dst[3] = {mine->priv, mine->ovf, mine->comb};
    uint32_t *lens[3] = {&mine->priv_len, &mine->ovf_len, &mine->comb_len};
    for (int i = 0; i < 3; i++) {
        size_t dl = TE_DESC_MAX;
        if ((rc = te_mr_describe(mrs[i], &d)) || (rc = te_desc_serialize(&d, dst[i], &dl)))
            goto out;
        *lens[i] = (uint32_t)dl;
    }
    if ((rc = ag(mine, sizeof(*mine), all, arg))) {
        moe_set_error("te-moe: setup exchange failed: %s", strerror(-rc));
        goto out;
    }
    for (uint32_t i = 0; i < m->R; i++) {
        uint32_t va = 0, vb = 0;
        const char *f = mismatch(mine, &all[i], &va, &vb);
        if (!f && all[i].rank != i) {
            f = "rank";
            va = i;
            vb = all[i].rank;
        }
        if (f) {
            moe_set_error("te-moe: setup mismatch: rank %u has %s %u, rank %u has %s %u",
                          m->me, f, va, i, f, vb);
            rc = -EINVAL;
            goto out;
        }
    }
    for (uint32_t i = 0; i < m->R; i++) {
        if (i == m->me)
            continue;
        struct moe_remote *r = &m->rem[i];
        if ((rc = te_peer_add(m->e, 0, all[i].addr, all[i].addr_len, &r->peer)) ||
            (rc = te_desc_parse(all[i].priv, all[i].priv_len, &r->priv)) ||
            (rc = te_desc_parse(all[i].ovf, all[i].ovf_len, &r->ovf)) ||
            (rc = te_desc_parse(all[i].comb, all[i].comb_len, &r->comb))) {
            moe_set_error("te-moe: adding rank %u: %s", i, te_last_error());
            goto out;
        }
    }
out:
    free(mine);
    free(all);
    return rc;
}

int te_moe_create(te_engine *e, const te_moe_params *params, te_moe_allgather_fn ag,
                  void *ag_arg, te_moe **out)
{
    if (!e || !params || !ag || !out)
        return moe_set_error("te-moe: NULL argument to te_moe_create"), -EINVAL;
    te_moe_params p = *params;
    int rc = check_params(&p);
    if (rc)
        return rc;
    te_moe *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    m->e = e;
    m->p = p;
    m->R = p.ranks, m->me = p.rank, m->E = p.experts, m->K = p.top_k, m->H = p.hidden;
    m->T = p.max_tokens, m->P = p.private_tokens, m->C = p.overflow_tokens;
    m->epr = m->E / m->R;
    m->elt = p.dtype == TE_MOE_F32 ? 4 : 2;
    m->row = (size_t)m->H * m->elt;
    m->rec = round_up(sizeof(struct moe_rec) + m->row, 16);
    m->orec = round_up(m->row, 16);
    m->hdr = round_up(sizeof(struct moe_hdr) + 4u * m->E, 64);
    m->chdr = sizeof(struct moe_chdr);
    m->slot = m->hdr + (size_t)m->P * m->rec;
    size_t tk = (size_t)m->T * m->K;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    m->rem = calloc(m->R, sizeof(*m->rem));
    m->matrix = calloc((size_t)m->R * m->E, 4);
    m->nsd = calloc((size_t)m->R * m->R, 4);
    m->pair_pos = calloc(tk, 4);
    m->pair_dest = calloc(tk, 4);
    m->cursor = calloc(m->E, 4);
    m->blk_off = calloc(m->R, sizeof(size_t));
    m->ta = malloc((size_t)m->H * 4);
    m->tb = malloc((size_t)m->H * 4);
    m->wd = calloc(m->R, 4);
    m->wc = calloc(m->R, 4);
    if (!m->rem || !m->matrix || !m->nsd || !m->pair_pos || !m->pair_dest || !m->cursor ||
        !m->blk_off || !m->ta || !m->tb || !m->wd || !m->wc) {
        rc = -ENOMEM;
        moe_set_error("te-moe: out of memory");
        goto fail;
    }
    if ((rc = alloc_region(m, m->R * m->hdr + tk * m->rec, TE_MR_LOCAL, &m->send, &m->send_mr,
                           &m->send_len, "dispatch send")) ||
        (rc = alloc_region(m, m->R * m->slot, TE_MR_REMOTE_WRITE, &m->priv, &m->priv_mr,
                           &m->priv_len, "private receive")) ||
        (rc = alloc_region(m, (size_t)m->C * m->rec, TE_MR_REMOTE_WRITE, &m->ovf, &m->ovf_mr,
                           &m->ovf_len, "overflow receive")) ||
        (rc = alloc_region(m, m->R * m->chdr + ((size_t)m->R * m->P + m->C) * m->orec,
                           TE_MR_LOCAL, &m->out, &m->out_mr, &m->out_len, "expert output")) ||
        (rc = alloc_region(m, m->R * m->chdr + tk * m->orec, TE_MR_REMOTE_WRITE, &m->comb,
                           &m->comb_mr, &m->comb_len, "combine receive")))
        goto fail;
    if ((rc = exchange(m, ag, ag_arg)))
        goto fail;
    /* Every write is pinned to NIC 0, so it counts exactly one immediate at
     * its receiver; check that the engine agrees rather than assume it. */
    if (m->R > 1) {
        uint32_t peer = (m->me + 1) % m->R;
        te_request r;
        te_request_init(&r, TE_OP_WRITE);
        r.flags = TE_F_IMM;
        r.route.kind = TE_ROUTE_PIN;
        r.u.xfer.peer = m->rem[peer].peer;
        r.u.xfer.local = m->send_mr;
        r.u.xfer.remote = &m->rem[peer].comb;
        r.u.xfer.len = m->send_len < m->comb_len ? m->send_len : m->comb_len;
        int64_t n = te_expected_imms(e, &r, 0);
        if (n != 1) {
            moe_set_error("te-moe: a pinned write counts %lld immediates, the protocol needs 1",
                          (long long)n);
            rc = -ENOTSUP;
            goto fail;
        }
    }
    *out = m;
    return 0;
fail:
    te_moe_destroy(m);
    return rc;
}

static void free_region(te_moe *m, uint8_t *buf, te_mr *mr)
{
    /* A registration still used by a request that outlived our deadline
     * cannot be freed: leak it rather than let the transport write freed
     * memory (te_engine_destroy cancels the request). */
    if (mr && te_mr_dereg(m->e, mr) != 0)
        return;
    free(buf);
}

void te_moe_destroy(te_moe *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += m->p.timeout_ms / 1000 + 1;
    while (m->inflight && pthread_cond_timedwait(&m->cv, &m->mu, &ts) == 0) {}
    pthread_mutex_unlock(&m->mu);
    for (uint32_t ph = 0; ph < MOE_PHASES; ph++)
        for (uint32_t b = 0; b < MOE_SLOTS; b++)
            te_imm_remove(m->e, moe_imm(m, ph, b), NULL);
    free_region(m, m->send, m->send_mr);
    free_region(m, m->priv, m->priv_mr);
    free_region(m, m->ovf, m->ovf_mr);
    free_region(m, m->out, m->out_mr);
    free_region(m, m->comb, m->comb_mr);
    free(m->rem), free(m->matrix), free(m->nsd), free(m->pair_pos), free(m->pair_dest);
    free(m->cursor), free(m->blk_off), free(m->ta), free(m->tb), free(m->wd), free(m->wc);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void te_moe_stats(const te_moe *m, te_moe_batch_stats *out) { *out = m->st; }
