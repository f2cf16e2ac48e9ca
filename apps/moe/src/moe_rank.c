/*
 * A MoE rank: its engine, one registration holding four areas (the batch
 * itself is in moe_dispatch.c and moe_combine.c).
 *
 *   area                      per peer slot                  written by
 *   send_dispatch[d]          head + max_tokens rows          us (staging)
 *   recv_dispatch[s]          head + max_tokens rows          source s
 *   send_combine[s]           head + max_tokens combine rows  us (staging)
 *   recv_combine[d]           head + max_tokens combine rows  rank d
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
/* 2: combine slots start with a head (a rank's failure reaches its peers). */
#define BLOB_VERSION 2u
#define SPACE_BASE (TE_IMM_SPACE_REGION_START + 0x01000000u)
/* Batches whose immediates are distinct: the slot of batch b is b mod
 * this, the same at every rank whatever failed where. */
#define BATCH_SLOTS 16u
/* Only life 0 is used (never retired: retirement is local to one rank,
 * and ranks that disagree on the life never count each other's writes). */
#define SPACE_LIVES 2u

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

uint64_t moe_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint32_t space_size(const te_moe_config *c)
{
    return BATCH_SLOTS * c->ranks * 3;
}

uint32_t moe_imm_of(const te_moe_rank *r, uint64_t batch, uint32_t src,
                    uint32_t phase)
{
    uint32_t slot = (uint32_t)(batch % BATCH_SLOTS);
    return SPACE_BASE + (slot * r->c.ranks + src) * 3 + phase;
}

/* A rank is at most one batch ahead of any other (it cannot finish batch
 * b without everyone's combine of b, sent after their dispatch of b was
 * all in), so nobody writes batch + 2 yet: what is banked there is left
 * over from a failed batch BATCH_SLOTS earlier. */
void moe_clear_batch_imms(te_moe_rank *r, uint64_t batch)
{
    for (uint32_t s = 0; s < r->c.ranks; s++)
        for (uint32_t ph = 0; ph < 3; ph++)
            te_imm_remove(r->e, moe_imm_of(r, batch, s, ph), NULL);
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

/* The condition's clock is the one of every deadline (moe_now_ns). */
static int init_sync(te_moe_rank *r)
{
    pthread_condattr_t a;
    if (pthread_condattr_init(&a))
        return -1;
    int rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC) ||
             pthread_cond_init(&r->cv, &a);
    pthread_condattr_destroy(&a);
    if (!rc && pthread_mutex_init(&r->mu, NULL)) {
        pthread_cond_destroy(&r->cv);
        rc = -1;
    }
    return rc ? -1 : 0;
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
    r->ops = moe_host_ops;
    if (init_sync(r)) {
        free(r);
        return moe_fail(-ENOMEM, "te-moe: mutex/condition");
    }
    r->nics = (uint32_t)te_engine_nic_count(e, 0);
    size_t elem = c->dtype == TE_MOE_BF16 ? 2 : 4;
    r->row_bytes = sizeof(struct moe_row_meta) + c->hidden * elem;
    r->crow_bytes = 16 + (size_t)c->hidden * 4;
    r->dslot = sizeof(struct moe_head) + c->max_tokens * r->row_bytes;
    r->cslot = sizeof(struct moe_head) + c->max_tokens * r->crow_bytes;
    r->local = c->experts / c->ranks;
    r->off_sd = 0;
    r->off_rd = r->off_sd + c->ranks * r->dslot;
    r->off_sc = r->off_rd + c->ranks * r->dslot;
    r->off_rc = r->off_sc + c->ranks * r->cslot;
    r->mem_len = r->off_rc + c->ranks * r->cslot;
    r->mem = aligned_alloc(4096, (r->mem_len + 4095) & ~(size_t)4095);
    r->pos = malloc((size_t)c->ranks * c->max_tokens * c->topk *
                    sizeof(uint32_t));
    if (!r->mem || !r->pos) {
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
     * immediates (moe_imm_of). */
    if ((rc = te_imm_space_create(e, "te-moe", space_size(c), SPACE_LIVES,
                                  TE_IMM_SPACE_FIXED, SPACE_BASE, &r->space))) {
        rc = moe_fail(rc, "te-moe: immediate space: %s", te_last_error());
        goto fail;
    }
    *out = r;
    return 0;
fail:
    if (!r->mr || !te_mr_dereg(e, r->mr))
        free(r->mem);
    free(r->pos);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
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
    struct blob_head h = {BLOB_MAGIC, BLOB_VERSION, r->rank, r->c.ranks, r->c.experts,
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
    if (h.magic != BLOB_MAGIC || h.version != BLOB_VERSION)
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
    struct moe_peer *q = &r->peers[peer];
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

const te_moe_config *te_moe_rank_config(const te_moe_rank *r) { return &r->c; }

uint32_t te_moe_rank_index(const te_moe_rank *r) { return r->rank; }

int te_moe_rank_disconnect(te_moe_rank *r)
{
    int first = 0;
    for (uint32_t d = 0; d < r->c.ranks; d++) {
        struct moe_peer *q = &r->peers[d];
        if (!q->connected)
            continue;
        int rc = te_peer_remove(r->e, 0, q->peer);
        if (rc && !first)
            first = moe_fail(rc, "te-moe: rank %u: removing rank %u: %s",
                             r->rank, d, te_last_error());
        q->connected = 0;
    }
    return first;
}

int te_moe_rank_input(te_moe_rank *r, const void *x, size_t bytes)
{
    if (!r || (!x) != (bytes == 0))
        return moe_fail(-EINVAL, "te_moe_rank_input: %s", !r ? "rank is NULL"
                        : x ? "bytes is 0" : "x is NULL with bytes");
    if (r->b.state != MOE_IDLE)
        return moe_fail(-EBUSY, "rank %u: te_moe_rank_input during batch %"
                        PRIu64, r->rank, r->b.batch);
    /* Writes of an ended batch that could not be confirmed may still read
     * the old buffer: keep it registered until they have ended. */
    int rc = moe_check_usable(r);
    if (rc)
        return rc;
    te_mr *mr = NULL;
    if (x && (rc = te_mr_reg(r->e, 0, (void *)x, bytes, TE_MR_LOCAL,
                             r->ops.mem, &mr)))
        return moe_fail(rc, "rank %u: registering the input (%zu bytes): %s",
                        r->rank, bytes, te_last_error());
    if (r->in_mr && (rc = te_mr_dereg(r->e, r->in_mr))) {
        if (mr)
            te_mr_dereg(r->e, mr);
        return moe_fail(rc, "rank %u: deregistering the previous input: %s",
                        r->rank, te_last_error());
    }
    r->in_mr = mr;
    r->in_base = x;
    r->in_bytes = bytes;
    return 0;
}

void te_moe_rank_free(te_moe_rank *r)
{
    if (!r)
        return;
    /* The callbacks of writes still in flight use r and their bytes come
     * from r->mem: keep both if they do not all end within the deadline. */
    uint64_t left = 0;
    if (moe_wait_inflight(r, moe_now_ns() + (uint64_t)r->c.timeout_ms *
                                                1000000ull, &left)) {
        te_log_printf(TE_LOG_ERROR, "te-moe",
                "rank %u: %" PRIu64 " writes still in flight "
                "after %d ms: leaking the rank (%zu bytes) rather than "
                "freeing what they use", r->rank, left, r->c.timeout_ms,
                r->mem_len);
        return;
    }
    te_imm_space_destroy(r->space);
    moe_mem_free(r);
    if (r->in_mr)
        te_mr_dereg(r->e, r->in_mr); /* the caller's memory: nothing to free */
    int rc = te_mr_dereg(r->e, r->mr);
    if (rc)
        /* Still registered: a peer may still write into it. */
        te_log_printf(TE_LOG_ERROR, "te-moe",
                "rank %u: deregistration failed (%s: %s): "
                "leaking its %zu bytes", r->rank, te_strerror(rc),
                te_last_error(), r->mem_len);
    else
        free(r->mem);
    free(r->pos);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
