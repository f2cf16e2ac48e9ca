/*
 * The inference side of an update: two weight buffers, one live and one
 * standby. Version v is written into the standby buffer; the receiver
 * counts each slice's immediates (the count each write produces is
 * te_expected_imms() of that write) and swaps the standby buffer live only
 * when every slice is complete. On a deadline the live buffer stays, the
 * standby buffer's keys are revoked (te_mr_revoke: no late write of a slow
 * or half-dead trainer can land in it afterwards) and the missing tensors
 * are named. So a version is served whole or not at all.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wt_runtime.h"

struct te_wt_receiver {
    te_engine *e;
    const te_wt_model *m;
    const te_wt_sharding *sh;
    const te_wt_schedule *s;
    uint32_t rank;
    uint8_t *buf[2];
    te_mr *mr[2];
    uint64_t len;
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

int te_wt_receiver_create(te_engine *e, const te_wt_model *m,
                          const te_wt_sharding *sh, const te_wt_schedule *s,
                          uint32_t rank, te_wt_receiver **out)
{
    wt_error_clear();
    if (rank >= sh->layout.ranks)
        return wt_fail(-EINVAL, "inference rank %u of %u", rank, sh->layout.ranks);
    te_wt_receiver *r = calloc(1, sizeof(*r));
    if (!r)
        return wt_fail(-ENOMEM, "out of memory");
    *r = (te_wt_receiver){.e = e, .m = m, .sh = sh, .s = s, .rank = rank, .live = -1};
    r->len = (sh->rank_bytes[rank] + 4095) & ~4095ull;
    if (!r->len)
        r->len = 4096;
    for (uint64_t k = 0; k < sh->nslices; k++)
        r->nslices += sh->slices[k].rank == rank;
    if (r->nslices > TE_WT_MAX_RANK_SLICES) {
        uint32_t n = r->nslices;
        free(r);
        return wt_fail(-E2BIG, "inference rank %u holds %u slices, the immediate "
                       "has room for %u", rank, n, TE_WT_MAX_RANK_SLICES);
    }
    r->slices = malloc((r->nslices + 1) * sizeof(uint64_t));
    r->expected = malloc((r->nslices + 1) * sizeof(uint64_t));
    r->complete = calloc(r->nslices + 1, 1);
    int rc = 0;
    if (!r->slices || !r->expected || !r->complete)
        rc = wt_fail(-ENOMEM, "out of memory");
    uint32_t n = 0;
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
        r->expected[n] = (uint64_t)c;
        r->slices[n++] = k;
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
    for (int b = 0; b < 2 && !rc; b++) {
        r->buf[b] = aligned_alloc(4096, r->len);
        if (!r->buf[b]) {
            rc = wt_fail(-ENOMEM, "out of memory for %llu bytes",
                         (unsigned long long)r->len);
            break;
        }
        memset(r->buf[b], 0, r->len);
        if ((rc = te_mr_reg(e, 0, r->buf[b], r->len, TE_MR_REMOTE_WRITE,
                            TE_MEM_HOST, &r->mr[b])))
            rc = wt_fail(rc, "register weight buffer: %s", te_last_error());
    }
    if (rc) {
        te_wt_receiver_destroy(r);
        return rc;
    }
    *out = r;
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
        int rc = te_mr_revoke(r->e, r->mr[standby], NULL);
        if (rc)
            return wt_fail(rc, "rank %u: refusing version %u: the standby buffer "
                           "still accepts writes of abandoned version %u (revoking "
                           "its keys failed again: %s)", r->rank, version,
                           r->unrevoked[standby], te_last_error());
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
    int standby = r->live < 0 ? 0 : !r->live;
    uint32_t base = 0;
    int rc = settle(r, standby, version);
    if (rc)
        return rc;
    if ((rc = te_imm_space_value(r->space, 0, &base)))
        return wt_fail(rc, "immediate space: %s", te_last_error());
    if ((rc = wt_publish(dir, "infer", r->rank, version, base, r->e, r->mr[standby])))
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
        if (left == before)
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
        return 0;
    }
    rep->missing = left;
    rep->live_version = r->live_version;
    for (uint32_t i = 0; i < r->nslices; i++)
        if (!r->complete[i])
            name_missing(r, i, rep);
    /* No late write of this version may land once we give up on it. */
    char why[160] = "";
    if (te_mr_revoke(r->e, r->mr[standby], NULL)) {
        r->unrevoked[standby] = version;
        snprintf(why, sizeof(why), " (revoking the standby buffer failed: %s; "
                 "the next update retries before publishing it)", te_last_error());
    }
    /* The verdict first: the list of names may be cut at the buffer's end. */
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
        int rc = wt_lookup(dir, "train", t, 2 * version, left > 0 ? left : 1, &ep);
        if (rc)
            return rc;
    }
    return 0;
}

const uint8_t *te_wt_receiver_live(const te_wt_receiver *r, uint32_t *version)
{
    if (version)
        *version = r->live_version;
    return r->live < 0 ? NULL : r->buf[r->live];
}

void te_wt_receiver_destroy(te_wt_receiver *r)
{
    if (!r)
        return;
    for (int b = 0; b < 2; b++) {
        /* Deregistration is quiescent: no remote write lands afterwards. */
        if (r->mr[b] && te_mr_dereg(r->e, r->mr[b]) == -EBUSY)
            continue;
        free(r->buf[b]);
    }
    if (r->space)
        te_imm_space_destroy(r->space);
    free(r->slices);
    free(r->expected);
    free(r->complete);
    free(r);
}
