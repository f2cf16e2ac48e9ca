/* A MoE job of R ranks as engines in this process, each batch run by R
 * threads (used by te-moe and the tests). */
#ifndef TE_MOE_JOB_H
#define TE_MOE_JOB_H

#include <te/moe.h>

#include "moe_ref.h"

struct moe_job {
    te_moe_config c;
    te_engine *e[TE_MOE_MAX_RANKS];
    te_moe_rank *r[TE_MOE_MAX_RANKS];
    uint32_t tokens[TE_MOE_MAX_RANKS];
    void *x[TE_MOE_MAX_RANKS];
    uint16_t *experts[TE_MOE_MAX_RANKS];
    float *weights[TE_MOE_MAX_RANKS];
    float *out[TE_MOE_MAX_RANKS];
    /* Receive buffers and expert outputs per rank, and the rows per local
     * expert they are given: the most any expert gets in this batch (the
     * job sees every rank's routing; ranks * max_tokens, which cannot
     * overflow, would be 1 GB per rank at the decode shape). */
    struct moe_ref_bufs bufs[TE_MOE_MAX_RANKS];
    uint32_t capacity;
    int index; /* te_moe_recv index mode: the experts read rows in place */
    /* In-place input (te_moe_rank_input): set before the first
     * moe_job_inputs; every rank's x is then one buffer of max_tokens
     * tokens, registered once and refilled per batch. */
    int inplace;
    int rc[TE_MOE_MAX_RANKS];
    char why[TE_MOE_MAX_RANKS][256];
};

/* Engines (extra "section.key=value" settings, NULL-terminated), ranks,
 * blobs exchanged. 0 or -errno (message on stderr); after a failure,
 * moe_job_close() frees what was made. */
int moe_job_open(struct moe_job *j, const te_moe_config *c,
                 const char *const *settings);
/* Tokens and routing of every rank for a batch (skew: see
 * te_moe_route_random), deterministic in seed; sets capacity. */
void moe_job_inputs(struct moe_job *j, const uint32_t *tokens, uint64_t seed,
                    uint32_t skew);
/* Run batch b on every rank at once (dispatch, the reference experts,
 * combine: moe_ref_batch); 0 if every rank returned 0. */
int moe_job_batch(struct moe_job *j, uint64_t b);
/* Compare every rank's out with the dense reference: count of differing
 * floats (exact comparison). */
uint64_t moe_job_check(struct moe_job *j);
void moe_job_close(struct moe_job *j);
/* "plugin NAME, N NIC(s): name,name" of rank 0's engine (every rank has
 * the same settings), for the tool's output. */
void moe_job_describe(const struct moe_job *j, char *buf, size_t len);

#endif
