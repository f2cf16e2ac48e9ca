/*
 * The inference side's destinations: which params a rank holds (what the
 * engine must give memory for) and the check of what it gave, before
 * anything is registered.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "wt_dests.h"

int64_t te_wt_rank_params(const te_wt_model *m, const te_wt_sharding *sh,
                          uint32_t rank, te_wt_rank_param *out, uint64_t cap)
{
    wt_error_clear();
    if (rank >= sh->layout.ranks)
        return wt_fail(-EINVAL, "inference rank %u of %u", rank, sh->layout.ranks);
    uint64_t n = 0;
    for (uint64_t k = 0; k < sh->nslices; k++) {
        const te_wt_slice *sl = &sh->slices[k];
        if (sl->rank != rank)
            continue;
        if (n < cap) {
            const te_wt_param *p = &sh->params[sl->param];
            const te_wt_tensor *t = &m->tensors[sh->members[p->first_member]];
            uint64_t rows, cols, col0, mrow0[3], mrows[3];
            te_wt_slice_geometry(m, sh, sl->param, rank, &rows, &cols, &col0, mrow0,
                                 mrows);
            out[n] = (te_wt_rank_param){t->name, sl->param, p->members, p->fp8,
                                        t->dtype, rows, cols, sl->bytes};
        }
        n++;
    }
    return (int64_t)n;
}

int wt_dests_check(const te_wt_model *m, const te_wt_sharding *sh, uint32_t rank,
                   const char *set, const te_wt_dest *d, uint32_t n, uint32_t *slot)
{
    int64_t count = te_wt_rank_params(m, sh, rank, NULL, 0);
    if (count < 0)
        return (int)count;
    te_wt_rank_param *want = calloc((uint64_t)count + 1, sizeof(*want));
    uint8_t *seen = calloc((uint64_t)count + 1, 1);
    int rc = want && seen ? 0 : wt_fail(-ENOMEM, "out of memory");
    if (!rc)
        te_wt_rank_params(m, sh, rank, want, (uint64_t)count);
    for (uint32_t k = 0; k < n && !rc; k++) {
        int64_t i = -1;
        for (int64_t j = 0; d[k].name && j < count && i < 0; j++)
            if (!strcmp(want[j].name, d[k].name))
                i = j;
        if (i < 0)
            rc = wt_fail(-EINVAL, "rank %u %s: destination %u: '%s' is not a param "
                         "of this rank", rank, set, k, d[k].name ? d[k].name : "(null)");
        else if (seen[i])
            rc = wt_fail(-EINVAL, "rank %u %s: param '%s' given twice", rank, set,
                         want[i].name);
        else if (d[k].bytes < want[i].bytes)
            rc = wt_fail(-EINVAL, "rank %u %s: param '%s': %llu bytes at %p, its "
                         "slice needs %llu", rank, set, want[i].name,
                         (unsigned long long)d[k].bytes, d[k].addr,
                         (unsigned long long)want[i].bytes);
        else if (!d[k].addr)
            rc = wt_fail(-EINVAL, "rank %u %s: param '%s': NULL address", rank, set,
                         want[i].name);
        else if (d[k].mem != TE_MEM_HOST && d[k].mem != TE_MEM_CUDA)
            rc = wt_fail(-EINVAL, "rank %u %s: param '%s': unknown memory kind %u",
                         rank, set, want[i].name, d[k].mem);
        if (!rc) {
            seen[i] = 1;
            slot[k] = (uint32_t)i;
        }
    }
    for (int64_t i = 0; i < count && !rc; i++)
        if (!seen[i])
            rc = wt_fail(-EINVAL, "rank %u %s: param '%s' has no destination (%u "
                         "given, the rank holds %lld)", rank, set, want[i].name, n,
                         (long long)count);
    free(want);
    free(seen);
    return rc;
}
