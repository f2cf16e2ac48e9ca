/*
 * safetensors headers: 8-byte little-endian header length, a JSON object
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
 * {string: string}}, then the data section. Parsed from untrusted bytes
 * with jansson; every check names the tensor and the field, because a
 * checkpoint that lies must never lead to a write out of bounds later.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stddef.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wt_internal.h"

/* Longest tensor name accepted (real ones are < 128 bytes). */
#define WT_MAX_NAME 1024

static int parse_tensor(const char *name, json_t *v, te_wt_model *m,
                        uint32_t *cap)
{
    if (strlen(name) == 0 || strlen(name) > WT_MAX_NAME)
        return wt_fail(-EINVAL, "tensor name of %zu bytes (1..%d allowed)",
                       strlen(name), WT_MAX_NAME);
    if (!json_is_object(v))
        return wt_fail(-EINVAL, "tensor '%s': entry is not an object", name);
    json_t *dt = json_object_get(v, "dtype");
    json_t *sh = json_object_get(v, "shape");
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return wt_fail(-EINVAL, "tensor '%s': field dtype missing or not a string",
                       name);
    te_wt_dtype dtype;
    if (te_wt_dtype_parse(json_string_value(dt), &dtype))
        return wt_fail(-EINVAL, "tensor '%s': field dtype: unknown dtype '%.32s'",
                       name, json_string_value(dt));
    if (!json_is_array(sh))
        return wt_fail(-EINVAL, "tensor '%s': field shape missing or not an array",
                       name);
    size_t ndim = json_array_size(sh);
    if (ndim > TE_WT_MAX_DIMS)
        return wt_fail(-EINVAL, "tensor '%s': field shape has %zu dims (at most %d)",
                       name, ndim, TE_WT_MAX_DIMS);
    uint64_t shape[TE_WT_MAX_DIMS], bytes = te_wt_dtype_size(dtype);
    for (size_t d = 0; d < ndim; d++) {
        json_t *x = json_array_get(sh, d);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return wt_fail(-EINVAL, "tensor '%s': field shape[%zu] is not a "
                           "non-negative integer", name, d);
        shape[d] = (uint64_t)json_integer_value(x);
        if (wt_mul_ok(bytes, shape[d], &bytes))
            return wt_fail(-ERANGE, "tensor '%s': field shape overflows 64 bits",
                           name);
    }
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        !json_is_integer(json_array_get(off, 0)) ||
        !json_is_integer(json_array_get(off, 1)))
        return wt_fail(-EINVAL, "tensor '%s': field data_offsets is not "
                       "[begin, end]", name);
    json_int_t b = json_integer_value(json_array_get(off, 0));
    json_int_t e = json_integer_value(json_array_get(off, 1));
    if (b < 0 || e < b)
        return wt_fail(-EINVAL, "tensor '%s': field data_offsets [%lld, %lld] "
                       "is not 0 <= begin <= end", name, (long long)b, (long long)e);
    if ((uint64_t)(e - b) != bytes)
        return wt_fail(-EINVAL, "tensor '%s': field data_offsets [%lld, %lld) "
                       "holds %llu bytes but shape x %s needs %llu", name,
                       (long long)b, (long long)e, (unsigned long long)(e - b),
                       te_wt_dtype_name(dtype), (unsigned long long)bytes);
    int rc = wt_model_push(m, cap, name, dtype, (uint32_t)ndim, shape);
    if (rc)
        return rc;
    m->tensors[m->count - 1].offset = (uint64_t)b;
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const te_wt_tensor *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int parse_metadata(json_t *v, te_wt_model *m)
{
    if (!json_is_object(v))
        return wt_fail(-EINVAL, "__metadata__ is not an object");
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (!json_is_string(x))
            return wt_fail(-EINVAL, "__metadata__ field '%.64s' is not a string", k);
    }
    /* Architecture numbers, when the writer recorded them (te-weights gen
     * does; Hugging Face files keep them in config.json instead). */
    static const struct { const char *key; size_t off; } arch[] = {
        {"num_hidden_layers", offsetof(te_wt_model, layers)},
        {"hidden_size", offsetof(te_wt_model, hidden)},
        {"num_attention_heads", offsetof(te_wt_model, heads)},
        {"num_key_value_heads", offsetof(te_wt_model, kv_heads)},
        {"head_dim", offsetof(te_wt_model, head_dim)},
        {"n_routed_experts", offsetof(te_wt_model, experts)},
        {"num_experts_per_tok", offsetof(te_wt_model, top_k)},
        {"moe_intermediate_size", offsetof(te_wt_model, moe_inter)},
        {"intermediate_size", offsetof(te_wt_model, dense_inter)},
        {"vocab_size", offsetof(te_wt_model, vocab)},
    };
    for (size_t i = 0; i < sizeof(arch) / sizeof(arch[0]); i++) {
        json_t *val = json_object_get(v, arch[i].key);
        char *end = NULL;
        unsigned long n = val ? strtoul(json_string_value(val), &end, 10) : 0;
        if (val && (*end || n > UINT32_MAX))
            return wt_fail(-EINVAL, "__metadata__ field '%s' = '%.32s' is not a "
                           "32-bit count", arch[i].key, json_string_value(val));
        *(uint32_t *)((char *)m + arch[i].off) = (uint32_t)n;
    }
    m->metadata_json = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT);
    return m->metadata_json ? 0 : wt_fail(-ENOMEM, "out of memory");
}

/* Parse hdr[0..hlen) as the JSON header; data_size = UINT64_MAX if unknown. */
static int parse_json(const char *hdr, size_t hlen, uint64_t data_size,
                      te_wt_model **out)
{
    json_error_t jerr;
    json_t *root = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return wt_fail(-EBADMSG, "safetensors header: JSON error at byte %d: %s",
                       jerr.position, jerr.text);
    te_wt_model *m = calloc(1, sizeof(*m));
    int rc = 0;
    if (!m) {
        json_decref(root);
        return wt_fail(-ENOMEM, "out of memory");
    }
    if (!json_is_object(root)) {
        rc = wt_fail(-EINVAL, "safetensors header is not a JSON object");
        goto done;
    }
    uint32_t cap = 0;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        rc = !strcmp(k, "__metadata__") ? parse_metadata(v, m)
                                        : parse_tensor(k, v, m, &cap);
        if (rc)
            goto done;
    }
    qsort(m->tensors, m->count, sizeof(*m->tensors), by_offset);
    uint64_t end = 0;
    for (uint32_t i = 0; i < m->count; i++) {
        te_wt_tensor *t = &m->tensors[i];
        if (t->offset < end) {
            rc = wt_fail(-EINVAL, "tensor '%s': field data_offsets [%llu, %llu) "
                         "overlaps tensor '%s' (ends at %llu)", t->name,
                         (unsigned long long)t->offset,
                         (unsigned long long)(t->offset + t->nbytes),
                         m->tensors[i - 1].name, (unsigned long long)end);
            goto done;
        }
        if (t->offset > end) {
            rc = wt_fail(-EINVAL, "tensor '%s': field data_offsets begins at %llu, "
                         "leaving a gap after byte %llu", t->name,
                         (unsigned long long)t->offset, (unsigned long long)end);
            goto done;
        }
        end = t->offset + t->nbytes;
        if (data_size != UINT64_MAX && end > data_size) {
            rc = wt_fail(-ERANGE, "tensor '%s': field data_offsets end %llu is "
                         "beyond the data section of %llu bytes", t->name,
                         (unsigned long long)end, (unsigned long long)data_size);
            goto done;
        }
    }
    if (data_size != UINT64_MAX && end != data_size) {
        rc = wt_fail(-EINVAL, "tensors cover %llu bytes of a data section of %llu",
                     (unsigned long long)end, (unsigned long long)data_size);
        goto done;
    }
    m->data_bytes = end;
done:
    json_decref(root);
    if (rc) {
        te_wt_model_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

static int header_length(const uint8_t *b, size_t len, uint64_t *hlen)
{
    if (len < 8)
        return wt_fail(-EBADMSG, "safetensors: %zu bytes, the length field "
                       "alone needs 8", len);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | b[i];
    if (n == 0 || n > TE_WT_MAX_HEADER)
        return wt_fail(-E2BIG, "safetensors: header length %llu (1..%u allowed)",
                       (unsigned long long)n, TE_WT_MAX_HEADER);
    *hlen = n;
    return 0;
}

int te_wt_safetensors_parse(const void *buf, size_t len, int data_size_known,
                            te_wt_model **out)
{
    wt_error_clear();
    uint64_t hlen = 0;
    int rc = header_length(buf, len, &hlen);
    if (rc)
        return rc;
    if (hlen > len - 8)
        return wt_fail(-EBADMSG, "safetensors: header length %llu exceeds the "
                       "%zu bytes after the length field",
                       (unsigned long long)hlen, len - 8);
    rc = parse_json((const char *)buf + 8, hlen,
                    data_size_known ? len - 8 - hlen : UINT64_MAX, out);
    if (!rc && !(*out)->name)
        (*out)->name = strdup("safetensors");
    return rc;
}

int te_wt_safetensors_load(const char *path, te_wt_model **out)
{
    wt_error_clear();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return wt_fail(-errno, "%s: %s", path, strerror(errno));
    struct stat st;
    uint8_t lenb[8];
    uint64_t hlen = 0;
    char *hdr = NULL;
    int rc;
    if (fstat(fd, &st) || pread(fd, lenb, 8, 0) != 8) {
        rc = wt_fail(-EBADMSG, "%s: shorter than the 8-byte length field", path);
        goto done;
    }
    if ((rc = header_length(lenb, 8, &hlen)))
        goto done;
    if (hlen > (uint64_t)st.st_size - 8) {
        rc = wt_fail(-EBADMSG, "%s: header length %llu exceeds the %llu bytes "
                     "after the length field", path, (unsigned long long)hlen,
                     (unsigned long long)st.st_size - 8);
        goto done;
    }
    hdr = malloc(hlen);
    if (!hdr || pread(fd, hdr, hlen, 8) != (ssize_t)hlen) {
        rc = wt_fail(-EIO, "%s: cannot read the %llu-byte header", path,
                     (unsigned long long)hlen);
        goto done;
    }
    rc = parse_json(hdr, hlen, (uint64_t)st.st_size - 8 - hlen, out);
    if (!rc) {
        const char *base = strrchr(path, '/');
        (*out)->name = strdup(base ? base + 1 : path);
    }
done:
    free(hdr);
    close(fd);
    return rc;
}

int te_wt_safetensors_write(const char *path, const te_wt_model *m,
                            const void *data)
{
    json_t *root = json_object();
    for (uint32_t i = 0; i < m->count; i++) {
        const te_wt_tensor *t = &m->tensors[i];
        json_t *sh = json_array();
        for (uint32_t d = 0; d < t->ndim; d++)
            json_array_append_new(sh, json_integer((json_int_t)t->shape[d]));
        json_object_set_new(root, t->name,
            json_pack("{s:s, s:o, s:[I, I]}", "dtype", te_wt_dtype_name(t->dtype),
                      "shape", sh, "data_offsets", (json_int_t)t->offset,
                      (json_int_t)(t->offset + t->nbytes)));
    }
    if (m->metadata_json) {
        json_t *md = json_loads(m->metadata_json, 0, NULL);
        if (md)
            json_object_set_new(root, "__metadata__", md);
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(root);
    if (!text)
        return wt_fail(-ENOMEM, "out of memory");
    /* Pad with spaces to 8 bytes like the reference writer (alignment). */
    size_t n = strlen(text), padded = (n + 7) & ~(size_t)7;
    FILE *f = fopen(path, "wb");
    int rc = 0;
    if (!f) {
        rc = wt_fail(-errno, "%s: %s", path, strerror(errno));
    } else {
        uint8_t lenb[8];
        for (int i = 0; i < 8; i++)
            lenb[i] = (uint8_t)((uint64_t)padded >> (8 * i));
        if (fwrite(lenb, 8, 1, f) != 1 || fwrite(text, 1, n, f) != n ||
            fwrite("        ", 1, padded - n, f) != padded - n ||
            (m->data_bytes && fwrite(data, 1, m->data_bytes, f) != m->data_bytes))
            rc = wt_fail(-EIO, "%s: short write", path);
        if (fclose(f) && !rc)
            rc = wt_fail(-EIO, "%s: close failed", path);
    }
    free(text);
    return rc;
}
