/*
 * The memory backend (te/moe.h te_moe_rank_mem_ops): every access to the
 * bytes of the caller's tensors goes through it as lists of row copies and
 * of weighted row sums, so that those tensors may live where the CPU does
 * not reach them (CUDA device memory: te_moe_gpu_mem_ops_new). The built-in
 * backend does them on the CPU, at once.
 *
 * The lists grow until the backend's sync: an asynchronous backend may
 * still read an entry handed to it until then, so an array is only
 * reallocated after a sync.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "moe_internal.h"

static int host_copy(void *ctx, const te_moe_copy_list *l)
{
    (void)ctx;
    for (uint32_t i = 0; i < l->n; i++)
        memcpy(l->dst[i], l->src[i], l->bytes);
    return 0;
}

/* bf16 -> fp32 is exact: the 16 bits are the fp32's top half. */
static inline float bf16_widen(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int host_wsum(void *ctx, const te_moe_wsum_list *l)
{
    (void)ctx;
    int bf16 = l->src_dtype == TE_MOE_BF16;
    for (uint32_t i = 0; i < l->n; i++) {
        float *restrict d = l->dst[i]; /* never one of its terms */
        memset(d, 0, l->hidden * sizeof(float));
        for (uint32_t f = l->first[i]; f < l->first[i + 1]; f++) {
            float w = l->w[f];
            if (bf16) {
                const uint16_t *restrict s = l->src[f];
                for (uint32_t h = 0; h < l->hidden; h++)
                    d[h] += w * bf16_widen(s[h]);
            } else {
                const float *restrict s = l->src[f];
                for (uint32_t h = 0; h < l->hidden; h++)
                    d[h] += w * s[h];
            }
        }
    }
    return 0;
}

static int host_sync(void *ctx)
{
    (void)ctx;
    return 0;
}

const te_moe_mem_ops moe_host_ops = {
    .version = TE_MOE_MEM_OPS_VERSION, .mem = TE_MEM_HOST,
    .copy = host_copy, .wsum = host_wsum, .sync = host_sync};

static int backend_failed(te_moe_rank *r, int rc, const char *step)
{
    if (rc > 0 || rc == 0)
        rc = -EIO; /* a backend that says "failed" without an errno */
    const char *why = r->ops.why ? r->ops.why(r->ops.ctx) : NULL;
    return moe_fail(rc, "rank %u: memory backend: %s failed (%d)%s%s", r->rank,
                    step, rc, why && *why ? ": " : "", why && *why ? why : "");
}

int moe_mem_sync(te_moe_rank *r)
{
    int rc = r->ops.sync(r->ops.ctx);
    r->cp.n = r->cp.handed = 0;
    r->ws.n = r->ws.handed = r->ws.terms = 0;
    if (r->ws.first)
        r->ws.first[0] = 0; /* row 0 starts at term 0 */
    return rc ? backend_failed(r, rc, "sync") : 0;
}

/* Grow *arr (elem bytes each) to hold `want`; 0 or -ENOMEM. */
static int grow(void *arr, size_t elem, uint32_t want)
{
    void *p = realloc(*(void **)arr, (size_t)want * elem);
    if (!p)
        return -ENOMEM;
    *(void **)arr = p;
    return 0;
}

static uint32_t grown(uint32_t cap, uint32_t need)
{
    uint32_t c = cap ? cap : 64;
    while (c < need)
        c = c > UINT32_MAX / 2 ? need : c * 2;
    return c;
}

int moe_copy_room(te_moe_rank *r, uint32_t rows)
{
    struct moe_copies *l = &r->cp;
    if (l->n + (uint64_t)rows <= l->cap || r->ops.copy == host_copy)
        return 0; /* the built-in backend copies at once (moe_copy_add) */
    int rc = moe_mem_sync(r); /* nothing handed over may move */
    if (rc || rows <= l->cap)
        return rc;
    uint32_t cap = grown(l->cap, rows);
    if (grow(&l->dst, sizeof(*l->dst), cap) || grow(&l->src, sizeof(*l->src), cap))
        return moe_fail(-ENOMEM, "rank %u: out of memory (%u row copies)",
                        r->rank, cap);
    l->cap = cap;
    return 0;
}

int moe_copy_flush(te_moe_rank *r, size_t bytes)
{
    struct moe_copies *l = &r->cp;
    if (l->handed == l->n)
        return 0;
    te_moe_copy_list cl = {l->n - l->handed, bytes, l->dst + l->handed,
                           l->src + l->handed};
    l->handed = l->n;
    int rc = r->ops.copy(r->ops.ctx, &cl);
    return rc ? backend_failed(r, rc, "copy") : 0;
}

int moe_wsum_room(te_moe_rank *r, uint32_t rows, uint32_t terms)
{
    struct moe_wsums *l = &r->ws;
    if (l->first && l->n + (uint64_t)rows <= l->cap &&
        l->terms + (uint64_t)terms <= l->tcap)
        return 0;
    int rc = moe_mem_sync(r);
    if (rc)
        return rc;
    if (l->first && rows <= l->cap && terms <= l->tcap)
        return 0;
    uint32_t cap = grown(l->cap, rows), tcap = grown(l->tcap, terms);
    if (grow(&l->dst, sizeof(*l->dst), cap) ||
        grow(&l->first, sizeof(*l->first), cap + 1) ||
        grow(&l->src, sizeof(*l->src), tcap) || grow(&l->w, sizeof(*l->w), tcap))
        return moe_fail(-ENOMEM, "rank %u: out of memory (%u weighted sums)",
                        r->rank, cap);
    l->cap = cap;
    l->tcap = tcap;
    l->first[0] = 0;
    return 0;
}

int moe_wsum_flush(te_moe_rank *r, uint32_t src_dtype)
{
    struct moe_wsums *l = &r->ws;
    if (l->handed == l->n)
        return 0;
    te_moe_wsum_list wl = {l->n - l->handed, r->c.hidden,
                           l->dst + l->handed, l->first + l->handed,
                           l->src, l->w, src_dtype};
    l->handed = l->n;
    int rc = r->ops.wsum(r->ops.ctx, &wl);
    return rc ? backend_failed(r, rc, "wsum") : 0;
}

void moe_mem_free(te_moe_rank *r)
{
    if (r->attached && r->ops.detach)
        r->ops.detach(r->ops.ctx, r->mem, r->mem_len);
    r->attached = 0;
    free(r->cp.dst);
    free(r->cp.src);
    free(r->ws.dst);
    free(r->ws.first);
    free(r->ws.src);
    free(r->ws.w);
    memset(&r->cp, 0, sizeof(r->cp));
    memset(&r->ws, 0, sizeof(r->ws));
}

int te_moe_rank_mem_ops(te_moe_rank *r, const te_moe_mem_ops *ops)
{
    if (!r)
        return moe_fail(-EINVAL, "te_moe_rank_mem_ops: rank is NULL");
    if (ops && (ops->version < 1 || ops->version > TE_MOE_MEM_OPS_VERSION ||
                !ops->copy || !ops->wsum || !ops->sync ||
                (ops->mem != TE_MEM_HOST && ops->mem != TE_MEM_CUDA)))
        return moe_fail(-EINVAL, "rank %u: memory backend: version %u (want "
                        "1..%u), memory kind %u, and copy, wsum and sync are "
                        "required", r->rank, ops->version,
                        TE_MOE_MEM_OPS_VERSION, ops->mem);
    if (r->b.state != MOE_IDLE)
        return moe_fail(-EBUSY, "rank %u: memory backend changed during "
                        "batch %" PRIu64, r->rank, r->b.batch);
    if (r->in_mr)
        return moe_fail(-EBUSY, "rank %u: memory backend changed while an "
                        "input is registered (te_moe_rank_input(r, NULL, 0) "
                        "first)", r->rank);
    int rc = moe_check_usable(r); /* the old backend's writes may be live */
    if (rc)
        return rc;
    const te_moe_mem_ops *next = ops ? ops : &moe_host_ops;
    if (next->attach && (rc = next->attach(next->ctx, r->mem, r->mem_len))) {
        const char *why = next->why ? next->why(next->ctx) : NULL;
        return moe_fail(rc < 0 ? rc : -EIO, "rank %u: memory backend: "
                        "attaching the rank's %zu bytes failed (%d)%s%s",
                        r->rank, r->mem_len, rc, why && *why ? ": " : "",
                        why && *why ? why : "");
    }
    if (r->attached && r->ops.detach)
        r->ops.detach(r->ops.ctx, r->mem, r->mem_len);
    r->ops = *next;
    r->attached = next->attach != NULL;
    return 0;
}
