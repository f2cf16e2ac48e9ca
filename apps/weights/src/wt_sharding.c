/*
 * Inference-side cut of a model (TP / EP / fused params / fp8) and the
 * training side's FSDP rule. Roles come from the Hugging Face tensor names
 * that DeepSeek-V3, Kimi-K2 and Qwen3 share; a tensor whose name matches no
 * rule is replicated (correct, if not the cheapest).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "wt_internal.h"

#define ALIGN 64u

/* Name -> tensor index (open addressing), to find fusion partners. */
struct name_map {
    uint32_t cap;
    int64_t *slot;
    const te_wt_model *m;
};

static uint64_t hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    while (*s)
        h = (h ^ (uint8_t)*s++) * 0x100000001b3ull;
    return h;
}

static int map_init(struct name_map *nm, const te_wt_model *m)
{
    nm->m = m;
    nm->cap = 64;
    while (nm->cap < 2u * m->count + 1)
        nm->cap *= 2;
    nm->slot = malloc(nm->cap * sizeof(int64_t));
    if (!nm->slot)
        return wt_fail(-ENOMEM, "out of memory");
    memset(nm->slot, 0xff, nm->cap * sizeof(int64_t));
    for (uint32_t i = 0; i < m->count; i++) {
        uint64_t h = hash(m->tensors[i].name) & (nm->cap - 1);
        while (nm->slot[h] >= 0)
            h = (h + 1) & (nm->cap - 1);
        nm->slot[h] = i;
    }
    return 0;
}

static int64_t map_find(const struct name_map *nm, const char *name)
{
    uint64_t h = hash(name) & (nm->cap - 1);
    for (; nm->slot[h] >= 0; h = (h + 1) & (nm->cap - 1))
        if (!strcmp(nm->m->tensors[nm->slot[h]].name, name))
            return nm->slot[h];
    return -1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Partner of `name` with `from` replaced by `to` (same prefix), or -1. */
static int64_t partner(const struct name_map *nm, const char *name,
                       const char *from, const char *to)
{
    char buf[1200];
    size_t n = strlen(name), k = strlen(from);
    if (n < k || n - k + strlen(to) + 1 > sizeof(buf))
        return -1;
    memcpy(buf, name, n - k);
    strcpy(buf + n - k, to);
    return map_find(nm, buf);
}

/* Expert id of "...experts.<E>...." or -1. */
static int64_t expert_of(const char *name)
{
    const char *p = strstr(name, ".experts.");
    if (!p)
        return -1;
    char *end;
    long e = strtol(p + 9, &end, 10);
    return end != p + 9 && *end == '.' && e >= 0 ? e : -1;
}

struct builder {
    te_wt_sharding *s;
    uint32_t cap_params, cap_members;
};

static int add_param(struct builder *b, const uint32_t *members, uint32_t n,
                     uint32_t split, uint32_t expert, uint32_t fp8, uint32_t unit)
{
    te_wt_sharding *s = b->s;
    if (s->nparams == b->cap_params) {
        b->cap_params = b->cap_params ? b->cap_params * 2 : 1024;
        void *p = realloc(s->params, b->cap_params * sizeof(*s->params));
        if (!p)
            return wt_fail(-ENOMEM, "out of memory");
        s->params = p;
    }
    uint32_t used = s->nparams ? s->params[s->nparams - 1].first_member +
                                     s->params[s->nparams - 1].members : 0;
    if (used + n > b->cap_members) {
        b->cap_members = b->cap_members ? b->cap_members * 2 : 2048;
        void *p = realloc(s->members, b->cap_members * sizeof(uint32_t));
        if (!p)
            return wt_fail(-ENOMEM, "out of memory");
        s->members = p;
    }
    memcpy(s->members + used, members, n * sizeof(uint32_t));
    s->params[s->nparams++] = (te_wt_param){used, n, split, expert, fp8, unit};
    return 0;
}

static uint64_t rows_of(const te_wt_tensor *t) { return t->ndim ? t->shape[0] : 1; }

static uint64_t cols_of(const te_wt_tensor *t)
{
    uint64_t c = 1;
    for (uint32_t d = 1; d < t->ndim; d++)
        c *= t->shape[d];
    return c;
}

/* COLUMN split of `rows` in units of `unit` over tp: first row and count
 * for TP index j, or an error naming the tensor. Fewer units than tp
 * ranks (GQA kv heads) replicate each unit over tp / units ranks. */
static int column_part(const te_wt_tensor *t, uint64_t unit, uint32_t tp,
                       uint32_t j, uint64_t *row0, uint64_t *nrows)
{
    uint64_t rows = rows_of(t);
    if (unit == 0 || rows % unit)
        return wt_fail(-EINVAL, "tensor '%s': dim 0 = %llu is not a multiple of "
                       "the unit %llu", t->name, (unsigned long long)rows,
                       (unsigned long long)unit);
    uint64_t units = rows / unit;
    if (units % tp == 0) {
        *nrows = units / tp * unit;
        *row0 = j * *nrows;
    } else if (units && tp % units == 0) {
        *nrows = unit;
        *row0 = (j / (tp / units)) * unit;
    } else {
        return wt_fail(-EINVAL, "tensor '%s': dim 0 = %llu (%llu units of %llu) "
                       "does not split over tp %u", t->name,
                       (unsigned long long)rows, (unsigned long long)units,
                       (unsigned long long)unit, tp);
    }
    return 0;
}

void te_wt_slice_geometry(const te_wt_model *m, const te_wt_sharding *s,
                          uint32_t param, uint32_t rank, uint64_t *rows,
                          uint64_t *cols, uint64_t *col0, uint64_t *mrow0,
                          uint64_t *mrows)
{
    const te_wt_param *p = &s->params[param];
    uint32_t tp = s->layout.tp, j = rank % tp;
    *rows = 0;
    *col0 = 0;
    for (uint32_t i = 0; i < p->members; i++) {
        const te_wt_tensor *t = &m->tensors[s->members[p->first_member + i]];
        uint64_t r0 = 0, nr = rows_of(t), c = cols_of(t);
        if (p->split == TE_WT_COLUMN)
            column_part(t, p->unit_rows, tp, j, &r0, &nr);
        if (p->split == TE_WT_ROW) {
            c = cols_of(t) / tp;
            *col0 = j * c;
        }
        mrow0[i] = r0;
        mrows[i] = nr;
        *rows += nr;
        *cols = c;
    }
}

static uint64_t slice_bytes(const te_wt_model *m, const te_wt_param *p,
                            uint64_t rows, uint64_t cols, const te_wt_sharding *s)
{
    const te_wt_tensor *t = &m->tensors[s->members[p->first_member]];
    if (p->fp8)
        return ((rows * cols + 3) & ~3ull) + 4 * te_wt_fp8_scale_count(rows, cols);
    return rows * cols * te_wt_dtype_size(t->dtype);
}

/* Which rule a tensor follows; fills members (fusion) and returns 0, or 1
 * when the tensor is a fusion partner consumed by another param. */
static int classify(const struct name_map *nm, uint32_t i, uint32_t *members,
                    uint32_t *n, uint32_t *split, uint32_t *unit, int *quant)
{
    const te_wt_model *m = nm->m;
    const te_wt_tensor *t = &m->tensors[i];
    const char *name = t->name;
    *n = 1;
    members[0] = i;
    *unit = 1;
    *quant = t->ndim == 2;
    *split = TE_WT_REPLICATE;
    if (ends_with(name, ".k_proj.weight") || ends_with(name, ".v_proj.weight") ||
        ends_with(name, ".up_proj.weight")) {
        const char *lead = ends_with(name, ".up_proj.weight") ? "gate_proj.weight"
                                                              : "q_proj.weight";
        const char *me = strrchr(name, '.');
        while (me > name && me[-1] != '.')
            me--;
        if (partner(nm, name, me, lead) >= 0)
            return 1; /* fused into the param of its lead */
    }
    int expert = expert_of(name) >= 0;
    if (ends_with(name, ".q_proj.weight")) {
        int64_t k = partner(nm, name, "q_proj.weight", "k_proj.weight");
        int64_t v = partner(nm, name, "q_proj.weight", "v_proj.weight");
        if (k >= 0 && v >= 0) {
            members[1] = (uint32_t)k;
            members[2] = (uint32_t)v;
            *n = 3;
        }
        *split = TE_WT_COLUMN;
        *unit = m->head_dim ? m->head_dim : 1;
    } else if (ends_with(name, ".gate_proj.weight")) {
        int64_t u = partner(nm, name, "gate_proj.weight", "up_proj.weight");
        if (u >= 0) {
            members[1] = (uint32_t)u;
            *n = 2;
        }
        *split = expert ? TE_WT_EXPERT : TE_WT_COLUMN;
    } else if (ends_with(name, ".down_proj.weight")) {
        *split = expert ? TE_WT_EXPERT : TE_WT_ROW;
    } else if (ends_with(name, ".o_proj.weight")) {
        *split = TE_WT_ROW;
    } else if (ends_with(name, ".q_b_proj.weight") || ends_with(name, ".kv_b_proj.weight")) {
        *split = TE_WT_COLUMN;
        *unit = m->heads ? rows_of(t) / m->heads : 1;
    } else if (ends_with(name, "embed_tokens.weight") || ends_with(name, "lm_head.weight")) {
        *split = TE_WT_COLUMN;
        *quant = 0;
    } else if (ends_with(name, ".gate.weight") || strstr(name, "norm") ||
               strstr(name, "bias")) {
        *quant = 0; /* router and norms stay in full precision */
    }
    return 0;
}

int te_wt_sharding_build(const te_wt_model *m, const te_wt_infer_layout *l,
                         te_wt_sharding **out)
{
    wt_error_clear();
    uint32_t ep = l->ep ? l->ep : l->ranks;
    if (!l->ranks || !l->tp || l->ranks % l->tp || l->ranks % ep)
        return wt_fail(-EINVAL, "inference layout: ranks %u must be a multiple "
                       "of tp %u and ep %u (both > 0)", l->ranks, l->tp, ep);
    struct name_map nm;
    int rc = map_init(&nm, m);
    if (rc)
        return rc;
    te_wt_sharding *s = calloc(1, sizeof(*s));
    struct builder b = {s, 0, 0};
    s->layout = *l;
    s->layout.ep = ep;
    s->rank_bytes = calloc(l->ranks, sizeof(uint64_t));
    uint32_t experts_per_rank = 0, experts = m->experts;
    if (!experts) /* no config: the highest expert id in the names */
        for (uint32_t i = 0; i < m->count; i++) {
            int64_t e = expert_of(m->tensors[i].name);
            if (e >= 0 && (uint64_t)e + 1 > experts)
                experts = e + 1 > UINT32_MAX ? UINT32_MAX : (uint32_t)(e + 1);
        }
    for (uint32_t i = 0; i < m->count && !rc; i++) {
        uint32_t members[3], n, split, unit;
        int quant;
        if (classify(&nm, i, members, &n, &split, &unit, &quant))
            continue;
        uint32_t expert = 0;
        if (split == TE_WT_EXPERT) {
            int64_t e = expert_of(m->tensors[i].name);
            uint32_t ne = experts;
            if ((uint64_t)e >= ne || ne % ep) {
                rc = wt_fail(-EINVAL, "tensor '%s': expert %lld of %u does not "
                             "split over ep %u", m->tensors[i].name, (long long)e,
                             ne, ep);
                break;
            }
            expert = (uint32_t)e;
            experts_per_rank = ne / ep;
        }
        /* Validate the split for every member now: errors name the tensor. */
        for (uint32_t k = 0; k < n && !rc; k++) {
            const te_wt_tensor *t = &m->tensors[members[k]];
            uint64_t r0, nr;
            if (split == TE_WT_COLUMN)
                rc = column_part(t, unit, l->tp, 0, &r0, &nr);
            else if (split == TE_WT_ROW && cols_of(t) % l->tp)
                rc = wt_fail(-EINVAL, "tensor '%s': dim 1 = %llu does not split "
                             "over tp %u", t->name,
                             (unsigned long long)cols_of(t), l->tp);
            if (k && cols_of(t) != cols_of(&m->tensors[members[0]]))
                rc = wt_fail(-EINVAL, "tensor '%s': dim 1 differs from its fusion "
                             "partner '%s'", t->name, m->tensors[members[0]].name);
            if (t->dtype != m->tensors[members[0]].dtype)
                rc = wt_fail(-EINVAL, "tensor '%s': dtype differs from its fusion "
                             "partner", t->name);
        }
        if (!rc)
            rc = add_param(&b, members, n, split, expert,
                           l->fp8 && quant && m->tensors[i].dtype == TE_WT_BF16, unit);
    }
    free(nm.slot);
    /* Slices: every rank holding a part of param p. */
    uint64_t cap = 0;
    s->slice_of_param = rc ? NULL : calloc(s->nparams + 1, sizeof(uint64_t));
    if (!rc && !s->slice_of_param)
        rc = wt_fail(-ENOMEM, "out of memory");
    for (uint32_t p = 0; p < s->nparams && !rc; p++) {
        s->slice_of_param[p] = s->nslices;
        const te_wt_param *pp = &s->params[p];
        for (uint32_t r = 0; r < l->ranks; r++) {
            if (pp->split == TE_WT_EXPERT &&
                r % ep != pp->expert / experts_per_rank)
                continue;
            uint64_t rows, cols, col0, mr0[3], mrows[3];
            te_wt_slice_geometry(m, s, p, r, &rows, &cols, &col0, mr0, mrows);
            if (s->nslices == cap) {
                cap = cap ? cap * 2 : 4096;
                void *q = realloc(s->slices, cap * sizeof(*s->slices));
                if (!q) {
                    rc = wt_fail(-ENOMEM, "out of memory for %llu slices",
                                 (unsigned long long)cap);
                    break;
                }
                s->slices = q;
            }
            uint64_t bytes = slice_bytes(m, pp, rows, cols, s);
            s->slices[s->nslices++] = (te_wt_slice){p, r, s->rank_bytes[r], bytes};
            s->rank_bytes[r] += (bytes + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
        }
    }
    if (rc) {
        te_wt_sharding_free(s);
        return rc;
    }
    s->slice_of_param[s->nparams] = s->nslices;
    *out = s;
    return 0;
}

void te_wt_sharding_free(te_wt_sharding *s)
{
    if (!s)
        return;
    free(s->params);
    free(s->members);
    free(s->slices);
    free(s->slice_of_param);
    free(s->rank_bytes);
    free(s);
}

int te_wt_slice_produce(const te_wt_model *m, const te_wt_sharding *s,
                        const te_wt_slice *sl, te_wt_tensor_data_fn data,
                        void *arg, void *out)
{
    const te_wt_param *p = &s->params[sl->param];
    uint64_t rows, cols, col0, mr0[3], mrows[3];
    te_wt_slice_geometry(m, s, sl->param, sl->rank, &rows, &cols, &col0, mr0, mrows);
    unsigned es = te_wt_dtype_size(m->tensors[s->members[p->first_member]].dtype);
    uint8_t *dst = p->fp8 ? malloc(rows * cols * es) : out;
    if (!dst)
        return wt_fail(-ENOMEM, "out of memory for a %llu-byte slice",
                       (unsigned long long)(rows * cols * es));
    uint8_t *w = dst;
    for (uint32_t i = 0; i < p->members; i++) {
        uint32_t ti = s->members[p->first_member + i];
        const uint8_t *src = data(ti, arg);
        uint64_t full_cols = cols_of(&m->tensors[ti]);
        for (uint64_t r = mr0[i]; r < mr0[i] + mrows[i]; r++) {
            memcpy(w, src + (r * full_cols + col0) * es, cols * es);
            w += cols * es;
        }
    }
    if (p->fp8) {
        uint8_t *o = out;
        te_wt_fp8_quantise_bf16((const uint16_t *)dst, rows, cols, o,
                                (float *)(o + ((rows * cols + 3) & ~3ull)));
        free(dst);
    }
    return 0;
}

void te_wt_fsdp_range(const te_wt_tensor *t, uint32_t trainers, uint32_t rank,
                      uint64_t *begin, uint64_t *end)
{
    uint64_t n = wt_elements(t), c = (n + trainers - 1) / trainers;
    uint64_t es = te_wt_dtype_size(t->dtype);
    uint64_t b = (uint64_t)rank * c < n ? (uint64_t)rank * c : n;
    uint64_t e = b + c < n ? b + c : n;
    *begin = b * es;
    *end = e * es;
}

uint64_t te_wt_fsdp_offset(const te_wt_model *m, uint32_t trainers,
                           uint32_t rank, uint32_t tensor)
{
    uint64_t off = 0, b, e;
    for (uint32_t i = 0; i < tensor; i++) {
        te_wt_fsdp_range(&m->tensors[i], trainers, rank, &b, &e);
        off += e - b;
    }
    return off;
}

uint64_t te_wt_fsdp_bytes(const te_wt_model *m, uint32_t trainers, uint32_t rank)
{
    return te_wt_fsdp_offset(m, trainers, rank, m->count);
}
