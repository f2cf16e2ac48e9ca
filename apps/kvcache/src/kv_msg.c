/*
 * The request protocol's wire format (docs/kvcache.md): little-endian,
 *   header: magic "TEKV" u32, version u8 (1 or 2), type u8, reserved u16 (0),
 *           total length u32, sender u64 (the decoder's token, which
 *           its HELLO introduced), request id u64                 28 bytes
 *   REQUEST:   tokens u32, layers u32, page_bytes u64, layer_stride u64,
 *              imm u32, npages u32, hidden_off u64, hidden_bytes u32,
 *              desc_len u32, desc[desc_len], pages u32[npages]
 *   ACCEPT:    expected_imms u64
 *   REJECT, CANCELLED: status u32
 *   CANCEL:    (nothing)
 *   HELLO:     addr_len u32, addr[addr_len]
 *   CACHE_REQUEST: the REQUEST's fields, then kv_factor u32, elem_bytes
 *              u32, tokens_per_page u32, flags u32, nregions u32, then per region
 *              offset u64, page_stride u64 (the decoder's cache)
 *   LAYER:     layer u32 (in the status field)
 * Version 2 (only these two types; every other message stays version 1,
 * its layout unchanged, so peers of either version understand it):
 *   CACHE_REQUEST: as version 1 but desc_len 0 (no descriptor: the
 *              decoder's CACHE_DESCS carried them), each region also
 *              alloc u32, then layout u32, nallocs u32, hidden_alloc u32
 *   CACHE_DESCS: layout u32, nallocs u32, first u32, ndescs u32, then per
 *              descriptor len u32, bytes[len]
 * Parsing untrusted bytes never reads past the buffer and names the field
 * that is wrong.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "kv_internal.h"

#define MAGIC 0x564b4554u /* "TEKV" */
#define VERSION 1u  /* every message but the two below */
#define VERSION2 2u /* CACHE_REQUEST with nallocs > 0, CACHE_DESCS */

_Static_assert(28 + 16 + TE_KV_DESCS_PER_MSG * (4 + TE_DESC_MAX) <=
                   TE_KV_MSG_MAX, "a full CACHE_DESCS fits TE_KV_MSG_MAX");

static int is_v2(const te_kv_msg *m)
{
    return m->type == TE_KV_MSG_CACHE_DESCS ||
           (m->type == TE_KV_MSG_CACHE_REQUEST && m->nallocs);
}

struct wr {
    uint8_t *p;
    size_t at, cap;
    int over;
};

static void put(struct wr *w, const void *src, size_t n)
{
    if (w->over || n > w->cap - w->at) {
        w->over = 1;
        return;
    }
    memcpy(w->p + w->at, src, n);
    w->at += n;
}
static void put32(struct wr *w, uint32_t v) { put(w, &v, 4); }
static void put64(struct wr *w, uint64_t v) { put(w, &v, 8); }

int te_kv_msg_encode(const te_kv_msg *m, void *buf, size_t cap)
{
    kv_clear();
    struct wr w = {buf, 0, cap, 0};
    int v2 = is_v2(m);
    uint8_t vt[4] = {v2 ? VERSION2 : VERSION, (uint8_t)m->type, 0, 0};
    put32(&w, MAGIC);
    put(&w, vt, 4);
    put32(&w, 0); /* length, patched below */
    put64(&w, m->sender);
    put64(&w, m->request_id);
    switch (m->type) {
    case TE_KV_MSG_REQUEST:
    case TE_KV_MSG_CACHE_REQUEST:
        if (m->npages > TE_KV_MAX_PAGES || m->desc_len > TE_DESC_MAX ||
            (v2 && m->desc_len))
            return kv_fail(-EINVAL, "kv message: %u pages (max %d) or "
                           "descriptor of %u bytes (none in version 2)",
                           m->npages, TE_KV_MAX_PAGES, m->desc_len);
        put32(&w, m->tokens);
        put32(&w, m->layers);
        put64(&w, m->page_bytes);
        put64(&w, m->layer_stride);
        put32(&w, m->imm);
        put32(&w, m->npages);
        put64(&w, m->hidden_off);
        put32(&w, m->hidden_bytes);
        put32(&w, m->desc_len);
        put(&w, m->desc, m->desc_len);
        put(&w, m->pages, (size_t)m->npages * 4);
        if (m->type == TE_KV_MSG_CACHE_REQUEST) {
            if (m->nregions > TE_KV_MAX_REGIONS)
                return kv_fail(-EINVAL, "kv message: %u regions (max %d)",
                               m->nregions, TE_KV_MAX_REGIONS);
            put32(&w, m->kv_factor);
            put32(&w, m->elem_bytes);
            put32(&w, m->tokens_per_page);
            put32(&w, m->flags);
            put32(&w, m->nregions);
            for (uint32_t i = 0; i < m->nregions; i++) {
                put64(&w, m->regions[i].offset);
                put64(&w, m->regions[i].page_stride);
                if (v2)
                    put32(&w, m->regions[i].alloc);
            }
            if (v2) {
                put32(&w, m->layout);
                put32(&w, m->nallocs);
                put32(&w, m->hidden_alloc);
            }
        }
        break;
    case TE_KV_MSG_CACHE_DESCS:
        if (!m->ndescs || m->ndescs > TE_KV_DESCS_PER_MSG)
            return kv_fail(-EINVAL, "kv message: %u descriptors (1..%d)",
                           m->ndescs, TE_KV_DESCS_PER_MSG);
        put32(&w, m->layout);
        put32(&w, m->nallocs);
        put32(&w, m->first);
        put32(&w, m->ndescs);
        for (uint32_t i = 0; i < m->ndescs; i++) {
            if (m->desc_lens[i] > TE_DESC_MAX)
                return kv_fail(-EINVAL, "kv message: descriptor %u of %u "
                               "bytes", i, m->desc_lens[i]);
            put32(&w, m->desc_lens[i]);
            put(&w, m->descs[i], m->desc_lens[i]);
        }
        break;
    case TE_KV_MSG_ACCEPT:
        put64(&w, m->expected_imms);
        break;
    case TE_KV_MSG_REJECT:
    case TE_KV_MSG_CANCELLED:
    case TE_KV_MSG_LAYER:
        put32(&w, m->status);
        break;
    case TE_KV_MSG_CANCEL:
        break;
    case TE_KV_MSG_HELLO:
        if (m->addr_len > TE_ADDR_MAX)
            return kv_fail(-EINVAL, "kv message: address of %u bytes",
                           m->addr_len);
        put32(&w, m->addr_len);
        put(&w, m->addr, m->addr_len);
        break;
    default:
        return kv_fail(-EINVAL, "kv message: unknown type %u", m->type);
    }
    if (w.over)
        return kv_fail(-ENOSPC, "kv message: needs more than %zu bytes", cap);
    uint32_t len = (uint32_t)w.at;
    memcpy((uint8_t *)buf + 8, &len, 4);
    return (int)len;
}

struct rd {
    const uint8_t *p;
    size_t at, len;
    const char *field; /* the first field that did not fit */
};

static int get(struct rd *r, void *dst, size_t n, const char *field)
{
    if (r->field)
        return -1;
    if (n > r->len - r->at) {
        r->field = field;
        return -1;
    }
    memcpy(dst, r->p + r->at, n);
    r->at += n;
    return 0;
}
#define GET32(r, v, f) get(r, &(v), 4, f)
#define GET64(r, v, f) get(r, &(v), 8, f)

/* The CACHE_REQUEST's shape and region table (with, in version 2, each
 * region's allocation and the allocation count): 0, or -EBADMSG naming
 * the bad field. One that does not fit is left in r->field (0 returned). */
static int parse_cache_ext(struct rd *r, te_kv_msg *m, int v2)
{
    GET32(r, m->kv_factor, "kv_factor");
    GET32(r, m->elem_bytes, "elem_bytes");
    GET32(r, m->tokens_per_page, "tokens_per_page");
    GET32(r, m->flags, "flags");
    GET32(r, m->nregions, "nregions");
    if (r->field)
        return 0;
    if (m->nregions > TE_KV_MAX_REGIONS)
        return kv_fail(-EBADMSG, "kv cache request %llu: %u regions (max "
                       "%d)", (unsigned long long)m->request_id, m->nregions,
                       TE_KV_MAX_REGIONS);
    for (uint32_t i = 0; i < m->nregions; i++) {
        GET64(r, m->regions[i].offset, "region offset");
        GET64(r, m->regions[i].page_stride, "region page_stride");
        m->regions[i].alloc = 0;
        m->regions[i].reserved = 0;
        if (v2)
            GET32(r, m->regions[i].alloc, "region alloc");
    }
    if (!v2)
        return 0;
    GET32(r, m->layout, "layout");
    GET32(r, m->nallocs, "nallocs");
    GET32(r, m->hidden_alloc, "hidden_alloc");
    if (r->field)
        return 0;
    if (!m->nallocs || m->nallocs > TE_KV_MAX_ALLOCS)
        return kv_fail(-EBADMSG, "kv cache request %llu: nallocs %u (1..%d)",
                       (unsigned long long)m->request_id, m->nallocs,
                       TE_KV_MAX_ALLOCS);
    for (uint32_t i = 0; i < m->nregions; i++)
        if (m->regions[i].alloc >= m->nallocs)
            return kv_fail(-EBADMSG, "kv cache request %llu: regions[%u]."
                           "alloc %u (nallocs %u)",
                           (unsigned long long)m->request_id, i,
                           m->regions[i].alloc, m->nallocs);
    if (m->hidden_alloc >= m->nallocs)
        return kv_fail(-EBADMSG, "kv cache request %llu: hidden_alloc %u "
                       "(nallocs %u)", (unsigned long long)m->request_id,
                       m->hidden_alloc, m->nallocs);
    return 0;
}

/* A CACHE_DESCS: descriptors first .. first+ndescs-1 of nallocs, each of
 * 1..TE_DESC_MAX bytes. Same convention as parse_cache_ext. */
static int parse_descs(struct rd *r, te_kv_msg *m)
{
    GET32(r, m->layout, "layout");
    GET32(r, m->nallocs, "nallocs");
    GET32(r, m->first, "first");
    GET32(r, m->ndescs, "ndescs");
    if (r->field)
        return 0;
    if (!m->nallocs || m->nallocs > TE_KV_MAX_ALLOCS || !m->ndescs ||
        m->ndescs > TE_KV_DESCS_PER_MSG || m->first >= m->nallocs ||
        m->ndescs > m->nallocs - m->first)
        return kv_fail(-EBADMSG, "kv descriptors: %u from %u of nallocs %u "
                       "(1..%d per message, 1..%d allocations)", m->ndescs,
                       m->first, m->nallocs, TE_KV_DESCS_PER_MSG,
                       TE_KV_MAX_ALLOCS);
    for (uint32_t i = 0; i < m->ndescs && !r->field; i++) {
        GET32(r, m->desc_lens[i], "descriptor length");
        if (r->field)
            return 0;
        if (!m->desc_lens[i] || m->desc_lens[i] > TE_DESC_MAX)
            return kv_fail(-EBADMSG, "kv descriptors: descriptor %u of %u "
                           "bytes (1..%d)", m->first + i, m->desc_lens[i],
                           TE_DESC_MAX);
        get(r, m->descs[i], m->desc_lens[i], "descriptor");
    }
    return 0;
}

int te_kv_msg_parse(const void *buf, size_t len, te_kv_msg *m)
{
    kv_clear();
    if (!buf || !m)
        return kv_fail(-EINVAL, "kv message: NULL argument");
    struct rd r = {buf, 0, len, NULL};
    uint32_t magic = 0, total = 0;
    uint8_t vt[4] = {0};
    int rc;
    memset(m, 0, offsetof(te_kv_msg, desc));
    m->expected_imms = 0;
    m->addr_len = 0;
    m->nregions = 0;
    m->flags = 0;
    m->layout = m->nallocs = m->hidden_alloc = m->first = m->ndescs = 0;
    GET32(&r, magic, "magic");
    get(&r, vt, 4, "version");
    GET32(&r, total, "length");
    GET64(&r, m->sender, "sender");
    GET64(&r, m->request_id, "request id");
    if (r.field)
        return kv_fail(-EBADMSG, "kv message truncated: %zu bytes, header "
                       "field '%s' incomplete", len, r.field);
    if (magic != MAGIC)
        return kv_fail(-EPROTO, "kv message: bad magic 0x%08x", magic);
    if (vt[0] != VERSION && vt[0] != VERSION2)
        return kv_fail(-EPROTO, "kv message: version %u, this library "
                       "speaks %u and %u", vt[0], VERSION, VERSION2);
    int v2 = vt[0] == VERSION2;
    if (v2 != (vt[1] == TE_KV_MSG_CACHE_DESCS ||
               (v2 && vt[1] == TE_KV_MSG_CACHE_REQUEST)))
        return kv_fail(-EPROTO, "kv message: type %u is not sent in "
                       "version %u", vt[1], vt[0]);
    if (vt[2] || vt[3])
        return kv_fail(-EPROTO, "kv message: reserved header bytes set");
    if (total != len)
        return kv_fail(-EBADMSG, "kv message: header says %u bytes, %zu "
                       "received", total, len);
    m->type = vt[1];
    switch (m->type) {
    case TE_KV_MSG_REQUEST:
    case TE_KV_MSG_CACHE_REQUEST:
        GET32(&r, m->tokens, "tokens");
        GET32(&r, m->layers, "layers");
        GET64(&r, m->page_bytes, "page_bytes");
        GET64(&r, m->layer_stride, "layer_stride");
        GET32(&r, m->imm, "imm");
        GET32(&r, m->npages, "npages");
        GET64(&r, m->hidden_off, "hidden_off");
        GET32(&r, m->hidden_bytes, "hidden_bytes");
        GET32(&r, m->desc_len, "desc_len");
        if (r.field)
            break;
        if (m->desc_len > (v2 ? 0 : TE_DESC_MAX))
            return kv_fail(-EBADMSG, "kv request %llu: descriptor of %u "
                           "bytes (max %d)", (unsigned long long)m->request_id,
                           m->desc_len, v2 ? 0 : TE_DESC_MAX);
        if (m->npages > TE_KV_MAX_PAGES)
            return kv_fail(-EBADMSG, "kv request %llu: %u pages (max %d)",
                           (unsigned long long)m->request_id, m->npages,
                           TE_KV_MAX_PAGES);
        get(&r, m->desc, m->desc_len, "descriptor");
        get(&r, m->pages, (size_t)m->npages * 4, "page indices");
        if (!r.field && (!m->layers || !m->page_bytes || !m->tokens))
            return kv_fail(-EBADMSG, "kv request %llu: layers %u, page_bytes "
                           "%llu, tokens %u must be > 0",
                           (unsigned long long)m->request_id, m->layers,
                           (unsigned long long)m->page_bytes, m->tokens);
        if (m->type == TE_KV_MSG_CACHE_REQUEST &&
            (rc = parse_cache_ext(&r, m, v2)))
            return rc;
        break;
    case TE_KV_MSG_CACHE_DESCS:
        if ((rc = parse_descs(&r, m)))
            return rc;
        break;
    case TE_KV_MSG_ACCEPT:
        GET64(&r, m->expected_imms, "expected_imms");
        break;
    case TE_KV_MSG_REJECT:
    case TE_KV_MSG_CANCELLED:
    case TE_KV_MSG_LAYER:
        GET32(&r, m->status, "status");
        break;
    case TE_KV_MSG_CANCEL:
        break;
    case TE_KV_MSG_HELLO:
        GET32(&r, m->addr_len, "addr_len");
        if (!r.field && (m->addr_len == 0 || m->addr_len > TE_ADDR_MAX))
            return kv_fail(-EBADMSG, "kv hello: address of %u bytes",
                           m->addr_len);
        get(&r, m->addr, m->addr_len, "address");
        break;
    default:
        return kv_fail(-EPROTO, "kv message: unknown type %u", m->type);
    }
    if (r.field)
        return kv_fail(-EBADMSG, "kv message truncated: field '%s' incomplete "
                       "(%zu bytes)", r.field, len);
    if (r.at != len)
        return kv_fail(-EBADMSG, "kv message: %zu trailing bytes", len - r.at);
    return 0;
}
