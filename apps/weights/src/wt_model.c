/*
 * Errors, dtypes and the model container of libte-weights.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wt_internal.h"

static _Thread_local char wt_error[512];

const char *te_wt_last_error(void) { return wt_error; }

void wt_error_clear(void) { wt_error[0] = 0; }

int wt_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(wt_error, sizeof(wt_error), fmt, ap);
    va_end(ap);
    return err;
}

static const struct {
    const char *name;
    unsigned size;
} dtypes[TE_WT_DTYPE_COUNT] = {
    [TE_WT_BOOL] = {"BOOL", 1},       [TE_WT_U8] = {"U8", 1},
    [TE_WT_I8] = {"I8", 1},           [TE_WT_F8_E4M3] = {"F8_E4M3", 1},
    [TE_WT_F8_E5M2] = {"F8_E5M2", 1}, [TE_WT_I16] = {"I16", 2},
    [TE_WT_U16] = {"U16", 2},         [TE_WT_F16] = {"F16", 2},
    [TE_WT_BF16] = {"BF16", 2},       [TE_WT_I32] = {"I32", 4},
    [TE_WT_U32] = {"U32", 4},         [TE_WT_F32] = {"F32", 4},
    [TE_WT_I64] = {"I64", 8},         [TE_WT_U64] = {"U64", 8},
    [TE_WT_F64] = {"F64", 8},
};

unsigned te_wt_dtype_size(te_wt_dtype d)
{
    return (unsigned)d < TE_WT_DTYPE_COUNT ? dtypes[d].size : 0;
}

const char *te_wt_dtype_name(te_wt_dtype d)
{
    return (unsigned)d < TE_WT_DTYPE_COUNT ? dtypes[d].name : "?";
}

int te_wt_dtype_parse(const char *name, te_wt_dtype *out)
{
    for (int i = 0; i < TE_WT_DTYPE_COUNT; i++)
        if (!strcmp(name, dtypes[i].name)) {
            *out = (te_wt_dtype)i;
            return 0;
        }
    return -EINVAL;
}

uint64_t wt_elements(const te_wt_tensor *t)
{
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

int wt_model_push(te_wt_model *m, uint32_t *cap, const char *name,
                  te_wt_dtype dt, uint32_t ndim, const uint64_t *shape)
{
    if (m->count == *cap) {
        uint32_t ncap = *cap ? *cap * 2 : 256;
        te_wt_tensor *t = realloc(m->tensors, ncap * sizeof(*t));
        if (!t)
            return wt_fail(-ENOMEM, "out of memory for %u tensors", ncap);
        m->tensors = t;
        *cap = ncap;
    }
    te_wt_tensor *t = &m->tensors[m->count];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    if (!t->name)
        return wt_fail(-ENOMEM, "out of memory");
    t->dtype = dt;
    t->ndim = ndim;
    memcpy(t->shape, shape, ndim * sizeof(uint64_t));
    t->nbytes = wt_elements(t) * te_wt_dtype_size(dt);
    t->offset = m->data_bytes;
    m->data_bytes += t->nbytes;
    m->count++;
    return 0;
}

uint64_t te_wt_model_params(const te_wt_model *m)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < m->count; i++)
        n += wt_elements(&m->tensors[i]);
    return n;
}

int64_t te_wt_model_find(const te_wt_model *m, const char *name)
{
    for (uint32_t i = 0; i < m->count; i++)
        if (!strcmp(m->tensors[i].name, name))
            return i;
    return wt_fail(-ENOENT, "no tensor '%s' in model %s", name, m->name);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

uint64_t te_wt_model_fingerprint(const te_wt_model *m)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < m->count; i++) {
        const te_wt_tensor *t = &m->tensors[i];
        h = fnv(h, t->name, strlen(t->name) + 1);
        uint32_t dt = t->dtype;
        h = fnv(h, &dt, sizeof(dt));
        h = fnv(h, &t->ndim, sizeof(t->ndim));
        h = fnv(h, t->shape, t->ndim * sizeof(uint64_t));
    }
    return h;
}

void te_wt_model_free(te_wt_model *m)
{
    if (!m)
        return;
    for (uint32_t i = 0; i < m->count; i++)
        free(m->tensors[i].name);
    free(m->tensors);
    free(m->name);
    free(m->metadata_json);
    free(m);
}

int te_wt_model_new(const char *name, const te_wt_tensor *tensors, uint32_t count,
                    te_wt_model **out)
{
    wt_error_clear();
    te_wt_model *m = calloc(1, sizeof(*m));
    uint32_t cap = 0;
    int rc = m && (m->name = strdup(name ? name : "model")) ? 0
                                                         : wt_fail(-ENOMEM, "out of memory");
    for (uint32_t i = 0; i < count && !rc; i++) {
        const te_wt_tensor *t = &tensors[i];
        if (!t->name || !t->name[0])
            rc = wt_fail(-EINVAL, "tensor %u: empty name", i);
        else if (t->ndim > TE_WT_MAX_DIMS || (unsigned)t->dtype >= TE_WT_DTYPE_COUNT)
            rc = wt_fail(-EINVAL, "tensor '%s': %u dims (at most %u), dtype %d",
                         t->name, t->ndim, TE_WT_MAX_DIMS, (int)t->dtype);
        else if (te_wt_model_find(m, t->name) >= 0)
            rc = wt_fail(-EINVAL, "tensor '%s' appears twice", t->name);
        else
            rc = wt_model_push(m, &cap, t->name, t->dtype, t->ndim, t->shape);
    }
    if (rc) {
        te_wt_model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}
