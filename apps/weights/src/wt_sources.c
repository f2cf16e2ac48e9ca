/*
 * A trainer's tensors: where the training framework holds this rank's FSDP
 * part of each tensor. The push gathers, fuses and quantises from there;
 * nothing is copied into a buffer of the library's first. Every source is
 * checked against the model before any registration changes, so a bad one
 * leaves the trainer as it was.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wt_runtime.h"

static uint64_t part_bytes(const te_wt_trainer *t, uint32_t i)
{
    uint64_t b, e;
    te_wt_fsdp_range(&t->m->tensors[i], t->s->trainers, t->rank, &b, &e);
    return e - b;
}

static int same_shape(const te_wt_tensor *m, const te_wt_source *x)
{
    if (x->ndim != m->ndim)
        return 0;
    for (uint32_t d = 0; d < m->ndim; d++)
        if (x->shape[d] != m->shape[d])
            return 0;
    return 1;
}

static void shape_text(char *buf, size_t n, uint32_t ndim, const uint64_t *shape)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (uint32_t d = 0; d < ndim && d < TE_WT_MAX_DIMS && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, "%s%llu", d ? ", " : "",
                                 (unsigned long long)shape[d]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
}

/* Which model tensor each source is, all checked; -EINVAL naming the first
 * bad one. */
static int check_sources(const te_wt_trainer *t, const te_wt_source *src, uint32_t n,
                         uint32_t *which)
{
    const te_wt_model *m = t->m;
    uint8_t *seen = calloc(m->count + 1, 1);
    int rc = seen ? 0 : wt_fail(-ENOMEM, "out of memory");
    for (uint32_t k = 0; k < n && !rc; k++) {
        const te_wt_source *x = &src[k];
        int64_t i = x->name ? te_wt_model_find(m, x->name) : -ENOENT;
        char want[160], got[160];
        if (i < 0) {
            rc = wt_fail(-EINVAL, "trainer %u: source %u: tensor '%s' is not in "
                         "model %s", t->rank, k, x->name ? x->name : "(null)", m->name);
            break;
        }
        const te_wt_tensor *mt = &m->tensors[i];
        shape_text(want, sizeof(want), mt->ndim, mt->shape);
        shape_text(got, sizeof(got), x->ndim, x->shape);
        if (seen[i])
            rc = wt_fail(-EINVAL, "trainer %u: tensor '%s' given twice", t->rank,
                         mt->name);
        else if (x->dtype != mt->dtype || !same_shape(mt, x))
            rc = wt_fail(-EINVAL, "trainer %u: tensor '%s': %s %s, the schedule's "
                         "model has %s %s", t->rank, mt->name,
                         te_wt_dtype_name(x->dtype), got, te_wt_dtype_name(mt->dtype),
                         want);
        else if (x->bytes < part_bytes(t, (uint32_t)i))
            rc = wt_fail(-EINVAL, "trainer %u: tensor '%s': %llu bytes at %p, its "
                         "part of %u trainers needs %llu", t->rank, mt->name,
                         (unsigned long long)x->bytes, x->addr, t->s->trainers,
                         (unsigned long long)part_bytes(t, (uint32_t)i));
        else if (x->mem != TE_MEM_HOST && x->mem != TE_MEM_CUDA)
            rc = wt_fail(-EINVAL, "trainer %u: tensor '%s': mem %u is neither "
                         "TE_MEM_HOST nor TE_MEM_CUDA", t->rank, mt->name, x->mem);
        else if (!x->addr && part_bytes(t, (uint32_t)i))
            rc = wt_fail(-EINVAL, "trainer %u: tensor '%s': NULL address", t->rank,
                         mt->name);
        seen[i] = 1;
        which[k] = (uint32_t)i;
    }
    for (uint32_t i = 0; i < m->count && !rc; i++)
        if (!seen[i])
            rc = wt_fail(-EINVAL, "trainer %u: tensor '%s' has no source (%u "
                         "given, the model has %u)", t->rank, m->tensors[i].name, n,
                         m->count);
    free(seen);
    return rc;
}

int te_wt_trainer_bind(te_wt_trainer *t, const te_wt_source *src, uint32_t n)
{
    wt_error_clear();
    uint32_t *which = malloc(((uint64_t)n + 1) * sizeof(uint32_t));
    if (!which)
        return wt_fail(-ENOMEM, "out of memory");
    int rc = check_sources(t, src, n, which);
    if (rc) { /* nothing changed: a bound trainer stays bound */
        free(which);
        return rc;
    }
    uint64_t before = t->src.registrations;
    for (uint32_t k = 0; k < n && !rc; k++)
        rc = wt_entries_set(&t->src, which[k], (void *)src[k].addr,
                            part_bytes(t, which[k]), src[k].mem,
                            t->m->tensors[which[k]].name);
    free(which);
    /* A failed registration leaves some tensors unregistered: no push
     * until a bind succeeds. */
    t->bound = !rc;
    return rc ? rc : (int)(t->src.registrations - before);
}

void te_wt_trainer_set_source_fn(te_wt_trainer *t, te_wt_source_fn fn, void *arg)
{
    t->source_fn = fn;
    t->source_arg = arg;
}

uint64_t te_wt_trainer_registrations(const te_wt_trainer *t)
{
    return t->src.registrations;
}

int wt_sources_ready(te_wt_trainer *t)
{
    if (t->source_fn) {
        uint32_t n = t->m->count;
        te_wt_source *src = calloc((uint64_t)n + 1, sizeof(*src));
        int rc = src ? 0 : wt_fail(-ENOMEM, "out of memory");
        for (uint32_t i = 0; i < n && !rc; i++)
            if ((rc = t->source_fn(i, &src[i], t->source_arg)) != 0)
                rc = wt_fail(rc < 0 ? rc : -EINVAL, "trainer %u: the source callback "
                             "failed for tensor '%s' (%d)", t->rank,
                             t->m->tensors[i].name, rc);
        if (!rc)
            rc = te_wt_trainer_bind(t, src, n);
        free(src);
        if (rc < 0)
            return rc;
    }
    return t->bound ? 0 : wt_fail(-EINVAL, "trainer %u: no sources bound (call "
                                  "te_wt_trainer_bind or te_wt_trainer_load first)",
                                  t->rank);
}

int te_wt_trainer_load(te_wt_trainer *t, const char *checkpoint)
{
    wt_error_clear();
    const te_wt_model *m = t->m;
    te_wt_model *ck;
    int rc = te_wt_safetensors_load(checkpoint, &ck);
    if (rc)
        return rc;
    if (te_wt_model_fingerprint(ck) != te_wt_model_fingerprint(m)) {
        te_wt_model_free(ck);
        return wt_fail(-EINVAL, "%s is not a checkpoint of model %s (tensor "
                       "names, dtypes or shapes differ)", checkpoint, m->name);
    }
    uint64_t len = te_wt_fsdp_bytes(m, t->s->trainers, t->rank);
    if (!t->load_buf && !(t->load_buf = calloc(1, len + 1)))
        rc = wt_fail(-ENOMEM, "out of memory for %llu bytes", (unsigned long long)len);
    te_wt_source *src = calloc((uint64_t)m->count + 1, sizeof(*src));
    if (!src && !rc)
        rc = wt_fail(-ENOMEM, "out of memory");
    int fd = rc ? -1 : open(checkpoint, O_RDONLY | O_CLOEXEC);
    uint8_t lenb[8];
    uint64_t hlen = 0;
    if (!rc && (fd < 0 || pread(fd, lenb, 8, 0) != 8))
        rc = wt_fail(-EIO, "%s: cannot read", checkpoint);
    for (int i = 7; i >= 0 && !rc; i--)
        hlen = hlen << 8 | lenb[i];
    uint64_t at = 0; /* parts back to back, in tensor order */
    for (uint32_t i = 0; i < m->count && !rc; i++) {
        uint64_t b, e;
        te_wt_fsdp_range(&m->tensors[i], t->s->trainers, t->rank, &b, &e);
        uint8_t *dst = t->load_buf + at;
        at += e - b;
        uint64_t off = 8 + hlen + ck->tensors[i].offset + b;
        if (e > b && pread(fd, dst, e - b, (off_t)off) != (ssize_t)(e - b))
            rc = wt_fail(-EIO, "%s: short read of tensor '%s'", checkpoint,
                         m->tensors[i].name);
        src[i] = (te_wt_source){m->tensors[i].name, dst, e - b, m->tensors[i].dtype,
                                m->tensors[i].ndim, {0}, TE_MEM_HOST};
        memcpy(src[i].shape, m->tensors[i].shape, sizeof(src[i].shape));
    }
    if (fd >= 0)
        close(fd);
    if (!rc)
        rc = te_wt_trainer_bind(t, src, m->count);
    free(src);
    te_wt_model_free(ck);
    return rc < 0 ? rc : 0;
}
