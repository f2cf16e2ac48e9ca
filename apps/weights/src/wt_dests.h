/* Destinations of an inference rank (wt_dests.c). Not installed. */
#ifndef TE_WT_DESTS_H
#define TE_WT_DESTS_H

#include "wt_internal.h"

/* Check n destinations of `set` ("set 0") against the params rank holds:
 * each names one of them once, none is missing, each range is large
 * enough. slot[k]: the local slice index of d[k]. -EINVAL naming the param. */
int wt_dests_check(const te_wt_model *m, const te_wt_sharding *sh, uint32_t rank,
                   const char *set, const te_wt_dest *d, uint32_t n, uint32_t *slot);
#endif
