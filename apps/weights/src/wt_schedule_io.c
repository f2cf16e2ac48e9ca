/*
 * Schedule files: versioned, length-checked, checksummed little-endian
 * bytes. The parser treats its input as hostile (it is fuzzed): every count
 * is checked against the length before anything is allocated, and, given
 * the model, every index and range against the model's sharding.
 *
 *   0  "TEWSCHED"        8  u32 version   12 u32 header bytes (72)
 *   16 u64 model fingerprint
 *   24 u32 trainers  28 u32 nics  32 u32 ranks  36 u32 tp  40 u32 ep
 *   44 u32 fp8       48 u64 staging bytes
 *   56 u32 params    60 u32 reserved (0)   64 u64 writes
 *   72 per write: u64 slice, u64 staging offset, u32 trainer, u32 seq;
 *      then u64 FNV-1a of everything before.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "wt_internal.h"

#define HDR 72u
#define WRITE_BYTES 24u
static const char magic[8] = {'T', 'E', 'W', 'S', 'C', 'H', 'E', 'D'};

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p)
{
    return get32(p) | (uint64_t)get32(p + 4) << 32;
}

static uint64_t fnv(const uint8_t *b, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

int te_wt_schedule_serialize(const te_wt_schedule *s, void **buf, size_t *len)
{
    wt_error_clear();
    uint32_t nparams = s->nparams;
    size_t n = HDR + WRITE_BYTES * s->nwrites + 8;
    uint8_t *b = malloc(n);
    if (!b)
        return wt_fail(-ENOMEM, "out of memory for a %zu-byte schedule", n);
    memcpy(b, magic, 8);
    put32(b + 8, TE_WT_SCHEDULE_VERSION);
    put32(b + 12, HDR);
    put64(b + 16, s->fingerprint);
    put32(b + 24, s->trainers);
    put32(b + 28, s->nics);
    put32(b + 32, s->layout.ranks);
    put32(b + 36, s->layout.tp);
    put32(b + 40, s->layout.ep);
    put32(b + 44, s->layout.fp8);
    put64(b + 48, s->staging_bytes);
    put32(b + 56, nparams);
    put32(b + 60, 0);
    put64(b + 64, s->nwrites);
    uint8_t *p = b + HDR;
    for (uint64_t w = 0; w < s->nwrites; w++, p += WRITE_BYTES) {
        put64(p, s->writes[w].slice);
        put64(p + 8, s->writes[w].staging_off);
        put32(p + 16, s->writes[w].trainer);
        put32(p + 20, s->writes[w].seq);
    }
    put64(p, fnv(b, n - 8));
    *buf = b;
    *len = n;
    return 0;
}

static int check_against_model(const te_wt_schedule *s, uint32_t nparams,
                               const te_wt_model *m, const te_wt_sharding *sh)
{
    uint64_t fp = te_wt_model_fingerprint(m);
    if (s->fingerprint != fp)
        return wt_fail(-EINVAL, "schedule: field fingerprint: the schedule is of "
                       "model fingerprint 0x%016llx, model %s is 0x%016llx",
                       (unsigned long long)s->fingerprint, m->name,
                       (unsigned long long)fp);
    const te_wt_infer_layout *l = &sh->layout;
    if (s->layout.ranks != l->ranks || s->layout.tp != l->tp ||
        s->layout.ep != l->ep || s->layout.fp8 != l->fp8)
        return wt_fail(-EINVAL, "schedule: field layout: ranks %u tp %u ep %u "
                       "fp8 %u, the sharding has ranks %u tp %u ep %u fp8 %u",
                       s->layout.ranks, s->layout.tp, s->layout.ep,
                       s->layout.fp8, l->ranks, l->tp, l->ep, l->fp8);
    if (nparams != sh->nparams || s->nwrites != sh->nslices)
        return wt_fail(-EINVAL, "schedule: fields params/writes: %u/%llu, the "
                       "sharding has %u/%llu", nparams,
                       (unsigned long long)s->nwrites, sh->nparams,
                       (unsigned long long)sh->nslices);
    uint8_t *seen = calloc(s->nwrites + 1, 1);
    if (!seen)
        return wt_fail(-ENOMEM, "out of memory");
    int rc = 0;
    for (uint64_t w = 0; w < s->nwrites && !rc; w++) {
        const te_wt_write *x = &s->writes[w];
        if (x->slice >= sh->nslices)
            rc = wt_fail(-ERANGE, "schedule: write %llu: field slice %llu out of "
                         "range (%llu)", (unsigned long long)w,
                         (unsigned long long)x->slice,
                         (unsigned long long)sh->nslices);
        else if (seen[x->slice]++)
            rc = wt_fail(-EINVAL, "schedule: write %llu: field slice %llu appears "
                         "twice", (unsigned long long)w, (unsigned long long)x->slice);
        else if (x->staging_off > s->staging_bytes ||
                 sh->slices[x->slice].bytes > s->staging_bytes - x->staging_off)
            rc = wt_fail(-ERANGE, "schedule: write %llu: field staging_off %llu + "
                         "%llu bytes exceeds the staging size %llu",
                         (unsigned long long)w, (unsigned long long)x->staging_off,
                         (unsigned long long)sh->slices[x->slice].bytes,
                         (unsigned long long)s->staging_bytes);
    }
    free(seen);
    return rc;
}

int te_wt_schedule_parse(const void *buf, size_t len, const te_wt_model *m,
                         const te_wt_sharding *sh, te_wt_schedule **out)
{
    wt_error_clear();
    const uint8_t *b = buf;
    if (len < HDR + 8)
        return wt_fail(-EBADMSG, "schedule truncated: %zu bytes, the header "
                       "alone needs %u", len, HDR + 8);
    if (memcmp(b, magic, 8))
        return wt_fail(-EBADMSG, "schedule: field magic: not a schedule file");
    if (get32(b + 8) != TE_WT_SCHEDULE_VERSION)
        return wt_fail(-EPROTO, "schedule: field version %u, this library reads %u",
                       get32(b + 8), TE_WT_SCHEDULE_VERSION);
    if (get32(b + 12) != HDR)
        return wt_fail(-EBADMSG, "schedule: field header_bytes %u, expected %u",
                       get32(b + 12), HDR);
    uint32_t nparams = get32(b + 56);
    uint64_t nwrites = get64(b + 64);
    if (nwrites != (len - HDR - 8) / WRITE_BYTES ||
        (len - HDR - 8) % WRITE_BYTES)
        return wt_fail(-EBADMSG, "schedule: fields params %u / writes %llu do not "
                       "match the length %zu", nparams,
                       (unsigned long long)nwrites, len);
    if (get64(b + len - 8) != fnv(b, len - 8))
        return wt_fail(-EBADMSG, "schedule: field checksum does not match");
    te_wt_schedule *s = calloc(1, sizeof(*s));
    if (!s)
        return wt_fail(-ENOMEM, "out of memory");
    s->fingerprint = get64(b + 16);
    s->trainers = get32(b + 24);
    s->nics = get32(b + 28);
    s->layout = (te_wt_infer_layout){get32(b + 32), get32(b + 36), get32(b + 40),
                                     get32(b + 44)};
    s->staging_bytes = get64(b + 48);
    s->nparams = nparams;
    s->nwrites = nwrites;
    int rc = 0;
    if (!s->trainers || !s->nics || s->trainers > (1u << 20) || get32(b + 60)) {
        rc = wt_fail(-EINVAL, "schedule: fields trainers %u / nics %u / reserved "
                     "%u out of range", s->trainers, s->nics, get32(b + 60));
        goto done;
    }
    s->writes = malloc(nwrites * sizeof(te_wt_write) + 1);
    s->trainer_first = calloc(s->trainers + 1, sizeof(uint64_t));
    if (!s->writes || !s->trainer_first) {
        rc = wt_fail(-ENOMEM, "out of memory");
        goto done;
    }
    const uint8_t *p = b + HDR;
    for (uint64_t w = 0; w < nwrites && !rc; w++, p += WRITE_BYTES) {
        te_wt_write *x = &s->writes[w];
        *x = (te_wt_write){get64(p), get64(p + 8), get32(p + 16), get32(p + 20)};
        uint32_t prev = w ? s->writes[w - 1].trainer : 0;
        if (x->trainer >= s->trainers || x->trainer < prev)
            rc = wt_fail(-EINVAL, "schedule: write %llu: field trainer %u out of "
                         "range or out of order", (unsigned long long)w, x->trainer);
        if (!rc) {
            /* trainer_first[t + 1] counts writes until the prefix pass. */
            if (x->trainer != prev || w == 0)
                for (uint32_t t = prev + 1; t <= x->trainer; t++)
                    s->trainer_first[t] = w;
            if (x->seq != w - s->trainer_first[x->trainer])
                rc = wt_fail(-EINVAL, "schedule: write %llu: field seq %u, expected "
                             "%llu", (unsigned long long)w, x->seq,
                             (unsigned long long)(w - s->trainer_first[x->trainer]));
        }
    }
    if (!rc) {
        uint32_t last = nwrites ? s->writes[nwrites - 1].trainer : 0;
        for (uint32_t t = last + 1; t <= s->trainers; t++)
            s->trainer_first[t] = nwrites;
    }
    if (!rc && m && sh)
        rc = check_against_model(s, nparams, m, sh);
done:
    if (rc) {
        te_wt_schedule_free(s);
        return rc;
    }
    *out = s;
    return 0;
}
