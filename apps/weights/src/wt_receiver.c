/*
 * The inference side of an update, into the engine's own parameters: one
 * or two destination sets (one destination per param slice of the rank).
 * With two, version v is written into the set not serving; the receiver
 * counts each slice's immediates (the count each write produces is
 * te_expected_imms() of that write) and names that set live only when
 * every slice is complete (the engine flips its pointer). On a deadline the
 * live set stays, the standby set's keys are revoked (te_mr_revoke: no late
 * write of a slow or half-dead trainer can land in it afterwards) and the
 * missing tensors are named. So a version is served whole or not at all.
 * With one set (in place) the same counting decides whether the version
 * is complete, but a failed one has overwritten part of the parameters.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wt_dests.h"
#include "wt_runtime.h"

struct te_wt_receiver {
    te_engine *e;
    const te_wt_model *m;
    const te_wt_sharding *sh;
    const te_wt_schedule *s;
    uint32_t rank;
    uint32_t sets;            /* 2: double-buffered, 1: in place */
    wt_entries dst[2];        /* [set]: one entry per local slice */
    uint8_t *own[2];          /* te_wt_receiver_create()'s buffers */
    int live;                 /* -1: none yet */
    uint32_t live_version;
    uint64_t *slices;         /* this rank's slice indices */
    uint32_t nslices;
    uint64_t *expected;       /* imms per slice */
    uint8_t *complete;
    te_imm_space *space;      /* one value per slice; one life per version */
    /* Left over from an earlier update (0: none): the version whose life
     * was not retired, and per buffer the abandoned version whose keys a
     * failed te_mr_revoke left valid. Settled before the next publish. */
    uint32_t unretired;
    uint32_t unrevoked[2];
};

/* Every destination set checked first: nothing is registered for a bad one. */
static int map_sets(te_wt_receiver *r, const te_wt_dest *set[2], uint32_t n,
                    uint32_t *slot[2])
{
    int rc = 0;
    for (uint32_t b = 0; b < r->sets && !rc; b++) {
        slot[b] = malloc(((uint64_t)n + 1) * sizeof(uint32_t));
        rc = slot[b] ? wt_dests_check(r->m, r->sh, r->rank, b ? "set 1" : "set 0",
                                      set[b], n, slot[b])
                     : wt_fail(-ENOMEM, "out of memory");
    }
    return rc;
}

int te_wt_receiver_create_into(te_engine *e, const te_wt_model *m,
                               const te_wt_sharding *sh, const te_wt_schedule *s,
                               uint32_t rank, const te_wt_dest *set0,
                               const te_wt_dest *set1, uint32_t n,
                               te_wt_receiver **out)
{
    wt_error_clear();
    if (rank >= sh->layout.ranks)
        return wt_fail(-EINVAL, "inference rank %u of %u", rank, sh->layout.ranks);
    te_wt_receiver *r = calloc(1, sizeof(*r));
    if (!r)
        return wt_fail(-ENOMEM, "out of memory");
    *r = (te_wt_receiver){.e = e, .m = m, .sh = sh, .s = s, .rank = rank, .live = -1,
                          .sets = set1 ? 2 : 1};
    for (uint64_t k = 0; k < sh->nslices; k++)
        r->nslices += sh->slices[k].rank == rank;
    if (r->nslices > TE_WT_MAX_RANK_SLICES) {
        uint32_t held = r->nslices;
        free(r);
        return wt_fail(-E2BIG, "inference rank %u holds %u slices, the immediate "
                       "has room for %u", rank, held, TE_WT_MAX_RANK_SLICES);
    }
    const te_wt_dest *set[2] = {set0, set1};
    uint32_t *slot[2] = {NULL, NULL};
    int rc = map_sets(r, set, n, slot);
    r->slices = malloc((r->nslices + 1) * sizeof(uint64_t));
    r->expected = malloc((r->nslices + 1) * sizeof(uint64_t));
    r->complete = calloc(r->nslices + 1, 1);
    if (!rc && (!r->slices || !r->expected || !r->complete))
        rc = wt_fail(-ENOMEM, "out of memory");
    uint32_t nl = 0;
    for (uint64_t k = 0; k < sh->nslices && !rc; k++) {
        if (sh->slices[k].rank != rank)
            continue;
        te_request rq;
        wt_slice_request(s, &sh->slices[k], 0, &rq);
        /* The sender's count rule on the sender's NIC count (the schedule's). */
        int64_t c = te_expected_imms(e, &rq, 0);
        if (c <= 0)
            rc = wt_fail(c < 0 ? (int)c : -EINVAL, "te_expected_imms: %s",
                         te_last_error());
        r->expected[nl] = (uint64_t)c;
        r->slices[nl++] = k;
    }
    if (!rc && (rc = te_imm_space_create(e, "weights", r->nslices ? r->nslices : 1,
                                         64, 0, 0, &r->space)))
        rc = wt_fail(rc, "immediate space: %s", te_last_error());
    /* Writers get base + index: the values of one life must be consecutive
     * (docs/imm-counter.md: raw = base + life * size + index). */
    uint32_t raw0 = 0, raw;
    for (uint32_t i = 0; i < r->nslices && !rc; i++)
        if (te_imm_space_value(r->space, i, &raw) || (i ? raw != raw0 + i : (raw0 = raw, 0)))
            rc = wt_fail(-EPROTO, "immediate space values are not consecutive");
    for (uint32_t b = 0; b < r->sets && !rc; b++) {
        if ((rc = wt_entries_init(&r->dst[b], e, r->nslices, TE_MR_REMOTE_WRITE)))
            break;
        for (uint32_t k = 0; k < n && !rc; k++) {
            const te_wt_slice *sl = &sh->slices[r->slices[slot[b][k]]];
            rc = wt_entries_set(&r->dst[b], slot[b][k], set[b][k].addr, sl->bytes,
                                set[b][k].mem, set[b][k].name);
        }
    }
    free(slot[0]);
    free(slot[1]);
    if (rc) {
        te_wt_receiver_destroy(r);
        return rc;
    }
    *out = r;
    return 0;
}

int te_wt_receiver_create(te_engine *e, const te_wt_model *m,
                          const te_wt_sharding *sh, const te_wt_schedule *s,
                          uint32_t rank, te_wt_receiver **out)
{
    wt_error_clear();
    int64_t n = te_wt_rank_params(m, sh, rank, NULL, 0);
    if (n < 0)
        return (int)n;
    uint64_t len = (sh->rank_bytes[rank] + 4095) & ~4095ull;
    te_wt_rank_param *p = calloc((uint64_t)n + 1, sizeof(*p));
    te_wt_dest *d = calloc(2 * ((uint64_t)n + 1), sizeof(*d));
    uint8_t *buf[2] = {aligned_alloc(4096, len ? len : 4096),
                       aligned_alloc(4096, len ? len : 4096)};
    int rc = p && d && buf[0] && buf[1] ? 0 : wt_fail(-ENOMEM, "out of memory for "
                                                      "%llu bytes", (unsigned long long)len);
    if (!rc) {
        te_wt_rank_params(m, sh, rank, p, (uint64_t)n);
        memset(buf[0], 0, len);
        memset(buf[1], 0, len);
    }
    for (int64_t i = 0, k = 0; i < n && !rc; i++) {
        while (sh->slices[k].rank != rank) /* the rank's slices, in order */
            k++;
        for (int b = 0; b < 2; b++)
            d[b * (n + 1) + i] = (te_wt_dest){p[i].name, buf[b] + sh->slices[k].dst_off,
                                              p[i].bytes, TE_MEM_HOST};
        k++;
    }
    if (!rc)
        rc = te_wt_receiver_create_into(e, m, sh, s, rank, d, d + n + 1, (uint32_t)n, out);
    free(p);
    free(d);
    if (rc) {
        free(buf[0]);
        free(buf[1]);
        return rc;
    }
    (*out)->own[0] = buf[0];
    (*out)->own[1] = buf[1];
    return 0;
}

static void name_missing(te_wt_receiver *r, uint32_t i, te_wt_update_report *rep)
{
    const te_wt_param *p = &r->sh->params[r->sh->slices[r->slices[i]].param];
    const char *name = r->m->tensors[r->sh->members[p->first_member]].name;
    size_t used = strlen(rep->missing_names);
    if (used + strlen(name) + 3 < sizeof(rep->missing_names))
        snprintf(rep->missing_names + used, sizeof(rep->missing_names) - used, "%s%s",
                 used ? ", " : "", name);
}

/* A buffer still open to late writes of an abandoned version, or a life
 * not retired, must not be handed out for the next version: its writes
 * could land in it, or count for it, before the new version goes live. */
static int settle(te_wt_receiver *r, int standby, uint32_t version)
{
    if (r->unretired) {
        int rc = te_imm_space_retire(r->space);
        if (rc)
            return wt_fail(rc, "rank %u: refusing version %u: the immediate "
                           "space's life of version %u cannot be retired (%s)",
                           r->rank, version, r->unretired, te_last_error());
        r->unretired = 0;
    }
    if (r->unrevoked[standby]) {
        char why[256];
        int rc = wt_entries_revoke(&r->dst[standby], why, sizeof(why));
        if (rc)
            return wt_fail(rc, "rank %u: refusing version %u: the standby buffer "
                           "still accepts writes of abandoned version %u (revoking "
                           "its keys failed again: %s)", r->rank, version,
                           r->unrevoked[standby], why);
        r->unrevoked[standby] = 0;
    }
    return 0;
}

int te_wt_receiver_update(te_wt_receiver *r, const char *dir, uint32_t version,
                          int timeout_ms, te_wt_update_report *rep)
{
    wt_error_clear();
    memset(rep, 0, sizeof(*rep));
    rep->version = version;
    rep->expected = r->nslices;
    int standby = r->sets == 1 || r->live < 0 ? 0 : !r->live;
    rep->live_set = r->live;
    uint32_t base = 0;
    int rc = settle(r, standby, version);
    if (rc)
        return rc;
    if ((rc = te_imm_space_value(r->space, 0, &base)))
        return wt_fail(rc, "immediate space: %s", te_last_error());
    /* The table first: a trainer that sees the record finds its table. */
    if ((rc = wt_table_publish(dir, "infer", r->rank, version, &r->dst[standby])) ||
        (rc = wt_publish(dir, "infer", r->rank, version, base, r->e, NULL)))
        return rc;
    memset(r->complete, 0, r->nslices);
    uint32_t left = r->nslices;
    double deadline = wt_now() + timeout_ms / 1000.0;
    while (left && wt_now() < deadline) {
        uint32_t before = left;
        for (uint32_t i = 0; i < r->nslices; i++) {
            if (r->complete[i])
                continue;
            uint64_t banked = 0;
            uint32_t imm = base + i;
            if (te_imm_poll(r->e, imm, &banked, NULL) == 0 && banked >= r->expected[i] &&
                te_imm_wait(r->e, imm, r->expected[i], 1) == 0) {
                r->complete[i] = 1;
                left--;
            }
        }
        /* Nothing new: in caller mode the immediates are counted only
         * inside progress calls, so make one (blocking at most 1 ms) unless
         * another thread is progressing the engine. */
        if (left == before && !wt_progress_caller(r->e, 1))
            usleep(200);
    }
    /* This version's life ends, complete or not: its counters go, and any
     * late arrival for it is counted as stale, never for the next version. */
    if (te_imm_space_retire(r->space))
        r->unretired = version;
    if (!left) {
        r->live = standby;
        r->live_version = version;
        rep->live_version = version;
        rep->live_set = standby;
        return 0;
    }
    rep->missing = left;
    rep->live_version = r->live_version;
    for (uint32_t i = 0; i < r->nslices; i++)
        if (!r->complete[i])
            name_missing(r, i, rep);
    /* No late write of this version may land once we give up on it. */
    char why[400] = "", cause[256];
    if (wt_entries_revoke(&r->dst[standby], cause, sizeof(cause))) {
        r->unrevoked[standby] = version;
        snprintf(why, sizeof(why), " (revoking the standby buffer failed: %s; "
                 "the next update retries before publishing it)", cause);
    }
    /* In place, the serving parameters took whatever arrived. */
    rep->clobbered = r->sets == 1;
    if (rep->clobbered) { /* no version is intact in the parameters */
        r->live = -1;
        r->live_version = 0;
        rep->live_set = -1;
        rep->live_version = 0;
    }
    /* The verdict first: the list of names may be cut at the buffer's end. */
    if (rep->clobbered)
        return wt_fail(-ETIMEDOUT, "rank %u: version %u incomplete at the deadline; "
                       "in place: the parameters hold a mix of versions, serve "
                       "nothing until a later version completes%s; %u of %u "
                       "tensors missing: %s", r->rank, version, why, left,
                       r->nslices, rep->missing_names);
    return wt_fail(-ETIMEDOUT, "rank %u: version %u incomplete at the deadline, "
                   "version %u stays live%s; %u of %u tensors missing: %s", r->rank,
                   version, r->live_version, why, left, r->nslices,
                   rep->missing_names);
}

int te_wt_receiver_wait_trainers(te_wt_receiver *r, const char *dir,
                                 uint32_t version, int timeout_ms)
{
    wt_error_clear();
    double deadline = wt_now() + timeout_ms / 1000.0;
    for (uint32_t t = 0; t < r->s->trainers; t++) {
        wt_endpoint ep;
        int left = (int)((deadline - wt_now()) * 1000);
        int rc = wt_lookup_progress(dir, "train", t, 2 * version, left > 0 ? left : 1,
                                    &ep, r->e);
        if (rc)
            return rc;
    }
    return 0;
}

const uint8_t *te_wt_receiver_live(const te_wt_receiver *r, uint32_t *version)
{
    if (version)
        *version = r->live_version;
    return r->live < 0 || !r->own[0] ? NULL : r->own[r->live];
}

int te_wt_receiver_live_set(const te_wt_receiver *r, uint32_t *version)
{
    if (version)
        *version = r->live_version;
    return r->live;
}

void te_wt_receiver_destroy(te_wt_receiver *r)
{
    if (!r)
        return;
    for (int b = 0; b < 2; b++) {
        /* Deregistration is quiescent: no remote write lands afterwards. A
         * buffer still registered (-EBUSY) is leaked, never reused. */
        if (wt_entries_release(&r->dst[b]) == -EBUSY)
            continue;
        free(r->own[b]);
    }
    if (r->space)
        te_imm_space_destroy(r->space);
    free(r->slices);
    free(r->expected);
    free(r->complete);
    free(r);
}
