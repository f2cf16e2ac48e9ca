/* Internal state of a te-moe rank (not installed). */
#ifndef TE_MOE_INTERNAL_H
#define TE_MOE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "te/moe.h"

#define MOE_BLOCK 8            /* expert matmul block (hidden % 8 == 0) */
#define MOE_MAGIC 0x314d4f45u  /* "EOM1": headers and the setup blob */
#define MOE_SLOTS 256u         /* batch values in the immediate encoding */
#define MOE_PHASES 3u
enum { MOE_PH_COUNTS = 0, MOE_PH_OVERFLOW = 1, MOE_PH_COMBINE = 2 };

/* Header of a dispatch block: what a source tells a destination in the
 * first write; counts[] is the source's whole row (tokens per expert, all
 * E experts), so after the first writes every rank knows the full count
 * matrix and can place overflow writes without another round trip. */
struct moe_hdr {
    uint32_t magic, batch, src;
    int32_t status;      /* 0, or the source's -errno for this batch */
    uint32_t total;      /* records for this destination */
    uint32_t pad[3];
    char reason[96];     /* the source's error message when status < 0 */
    uint32_t counts[];   /* [experts] */
};

/* Header of a combine block (destination -> source). */
struct moe_chdr {
    uint32_t magic, batch, src, total;
    int32_t status;
    uint32_t pad[11];
};

/* One dispatched token-expert pair: this header then `hidden` elements. */
struct moe_rec {
    uint32_t token, expert, k, batch;
};

struct moe_remote {
    te_peer peer;
    te_mr_desc priv, ovf, comb;
};

struct te_moe {
    te_engine *e;
    te_moe_params p;
    uint32_t R, me, E, K, H, T, P, C, epr;
    size_t elt, row, rec, orec, hdr, chdr, slot;
    uint8_t *send, *priv, *ovf, *out, *comb;
    size_t send_len, priv_len, ovf_len, out_len, comb_len;
    te_mr *send_mr, *priv_mr, *ovf_mr, *out_mr, *comb_mr;
    struct moe_remote *rem;
    uint32_t *matrix;   /* [R][E] counts of the batch */
    uint32_t *nsd;      /* [R][R] records from s to d */
    uint32_t *pair_pos, *pair_dest; /* [T*K] */
    uint32_t *cursor;   /* [E] */
    size_t *blk_off;    /* [R] dest block offsets in send */
    float *ta, *tb;     /* scratch of hidden floats */
    /* batch */
    uint32_t batch, ntokens, stage;
    const uint32_t *ids;
    int failed;
    char fail_msg[256];
    /* writes in flight and the imm waiter */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t inflight;
    int wr_status;
    char wr_reason[160];
    int w_done, w_status;
    uint32_t *wd, *wc;  /* writes per peer this batch: dispatch, combine */
    te_moe_batch_stats st;
};

void moe_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void moe_load_f32(uint32_t dtype, uint32_t hidden, const void *src, float *dst);
void moe_store(uint32_t dtype, uint32_t hidden, const float *src, void *dst);
void moe_expert_record(uint32_t dtype, uint32_t expert, uint32_t hidden,
                       const void *x, void *y, float *tmp_in, float *tmp_out);
void moe_accumulate(uint32_t dtype, uint32_t hidden, float weight, const void *y,
                    float *acc, float *tmp);
uint32_t moe_imm(const te_moe *m, uint32_t phase, uint32_t batch);

/* moe_batch.c: writes, waits and failure shared by both phases */
int moe_batch_wait_imm(te_moe *m, uint32_t phase, uint64_t count);
int moe_batch_wait_writes(te_moe *m, const char *phase);
int moe_batch_write(te_moe *m, uint32_t to, te_mr *src, size_t src_off,
                    const te_mr_desc *dst, size_t dst_off, size_t len, uint32_t imm,
                    uint32_t *counter);
int moe_batch_fail(te_moe *m, int rc);
void moe_batch_missing(te_moe *m, int combine, char *buf, size_t len);

#endif
