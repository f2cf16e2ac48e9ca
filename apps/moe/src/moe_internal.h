/* Internals of libte-moe. */
#ifndef TE_MOE_INTERNAL_H
#define TE_MOE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "te/moe.h"

int moe_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int moe_check_routing(const te_moe_config *c, uint32_t tokens,
                      const uint16_t *experts, const float *weights);

/* A dispatch row: this meta, then hidden elements of the token. */
struct moe_row_meta {
    uint32_t token;
    uint32_t nexp;
    uint16_t experts[TE_MOE_MAX_TOPK];
    float weights[TE_MOE_MAX_TOPK];
    uint8_t slots[TE_MOE_MAX_TOPK]; /* top-k position of each expert */
};
_Static_assert(sizeof(struct moe_row_meta) == 64, "row meta is 64 bytes");

/* The head of a source's region at a receiver (dispatch and combine
 * slots). status != 0: the writer failed or refused the batch, `why`
 * says why (rows is then 0): the receiver fails the batch at once. A
 * failure head's text runs on past the head for MOE_WHY_MAX bytes in all
 * (a slot holds at least one row: 48 bytes or more, hidden >= 8). */
struct moe_head {
    uint32_t rows;
    int32_t status;
    uint64_t batch;
    char why[48];
};
_Static_assert(sizeof(struct moe_head) == 64, "head is 64 bytes");
#define MOE_WHY_MAX 96
/* In a dispatch head's rows: the rows' tokens came in one write straight
 * from the source's registered input (te_moe_rank_input): the slot holds
 * the metas alone, then at moe_span_off() the source's tokens in token
 * order (docs/moe.md "In-place input"). */
#define MOE_ROWS_SPAN 0x80000000u

/* A peer rank: its engine peer and the descriptor of its registration. */
struct moe_peer {
    int connected;
    te_peer peer;
    te_mr_desc desc;
};

/* Where a batch is between the split calls. */
enum moe_state { MOE_IDLE, MOE_DISPATCHING, MOE_DISPATCHED, MOE_COMBINING };

/* One batch in progress. Every phase (dispatch; experts and combine; local
 * completions) has its own deadline, timeout_ms from its start. */
struct moe_batch {
    enum moe_state state;
    uint64_t batch, phase_ns, t0, t_dispatched, post_ns, pack_ns;
    uint32_t tokens, writes, capacity;
    uint32_t n[TE_MOE_MAX_RANKS];   /* rows we send to each rank */
    uint32_t got[TE_MOE_MAX_RANKS]; /* rows each rank sent us */
    uint64_t combined; /* peers whose combine write of this batch is in */
    uint64_t headed;   /* peers our dispatch head of this batch went to */
    uint8_t span[TE_MOE_MAX_RANKS]; /* sources whose rows came as a span */
    /* In place: our own rows' metas are staged alone and their tokens read
     * from the caller's registered x (unchanged until the batch ends). */
    const uint8_t *self_x;
};

/* Lists handed to the memory backend (moe_mem.c): entries accumulate
 * until the backend's sync (the arrays must not change under it before
 * then); `handed` entries were given to it already. */
struct moe_copies {
    void **dst;
    const void **src;
    uint32_t n, handed, cap;
};
struct moe_wsums {
    float **dst;
    uint32_t *first; /* cap + 1 */
    const void **src; /* fp32 or bf16 rows: the flush says which */
    float *w;
    uint32_t n, handed, cap;  /* rows */
    uint32_t terms, tcap;     /* terms */
};

/* A rank (moe_rank.c: setup; moe_dispatch.c, moe_combine.c: the batch;
 * moe_write.c: writes and their completions). Its registration holds four
 * areas of one slot per peer:
 *   off_sd  send_dispatch[d]  head + max_tokens rows      staged by us
 *   off_rd  recv_dispatch[s]  head + max_tokens rows      written by s
 *   off_sc  send_combine[s]   head + max_tokens c-rows    staged by us
 *   off_rc  recv_combine[d]   head + max_tokens c-rows    written by d
 * Our own slots of recv_dispatch / recv_combine are filled in place. */
struct te_moe_rank {
    te_engine *e;
    te_moe_config c;
    uint32_t rank, nics, local; /* local: experts per rank (L) */
    size_t row_bytes, crow_bytes, dslot, cslot;
    uint8_t *mem;
    size_t mem_len;
    size_t off_sd, off_rd, off_sc, off_rc;
    te_mr *mr;
    /* The caller's input registered by te_moe_rank_input (or NULL). */
    te_mr *in_mr;
    const uint8_t *in_base;
    size_t in_bytes;
    te_imm_space *space;
    struct moe_peer peers[TE_MOE_MAX_RANKS];
    te_moe_stats st;
    struct moe_batch b;
    /* Peers whose combine write of batch owed_batch had not arrived when
     * that batch ended here (it failed early). Every rank writes one per
     * peer per batch, also when it fails (a head saying so), and only once
     * it is done reading that peer's rows: the next dispatch waits for them
     * before writing into the slots they may still be reading. */
    uint64_t owed, owed_batch;
    /* [source][row][meta slot] -> the row's index among its local
     * expert's rows in the caller's te_moe_recv (combine reads y there). */
    uint32_t *pos;
    /* Local completions arrive through each write's own callback (never
     * the engine-wide queue, which other users of the engine own). The
     * callback thread counts them under mu; the batch waits on cv. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t serial;   /* the current batch */
    uint32_t completed, failed; /* of this serial's writes */
    uint64_t inflight; /* writes of any serial whose callback has not run */
    char failed_why[96];
    /* Who touches the caller's tensors (te_moe_rank_mem_ops; the
     * built-in host copies unless set), whether it is attached to mem. */
    te_moe_mem_ops ops;
    int attached;
    struct moe_copies cp;
    struct moe_wsums ws;
    /* Set when a batch's writes could not be confirmed: their bytes may
     * still land, so no batch restages the buffers until inflight is 0. */
    int unconfirmed;
};

/* Immediate phases. */
enum { MOE_PH_HEAD, MOE_PH_REST, MOE_PH_COMBINE };

uint64_t moe_now_ns(void);
/* The raw immediate of (batch, source, phase) at any rank of this job. */
uint32_t moe_imm_of(const te_moe_rank *r, uint64_t batch, uint32_t src,
                    uint32_t phase);
/* Forget what is banked for batch `batch` (clear it before anyone can
 * write it: two batches ahead). */
void moe_clear_batch_imms(te_moe_rank *r, uint64_t batch);

/* moe_mem.c: the memory backend. The host copies (the default). */
extern const te_moe_mem_ops moe_host_ops;
/* Room for `rows` more copies (syncing first when the arrays must grow);
 * 0 or -errno (te_moe_last_error() set). */
int moe_copy_room(te_moe_rank *r, uint32_t rows);
static inline void moe_copy_add(te_moe_rank *r, void *dst, const void *src,
                                size_t bytes)
{
    if (r->ops.copy == moe_host_ops.copy) {
        /* The built-in backend copies at once: the row's meta was just
         * written beside it (10-15 % off the staging at the decode shape
         * against a list copied after the loop). */
        memcpy(dst, src, bytes);
        return;
    }
    r->cp.dst[r->cp.n] = dst;
    r->cp.src[r->cp.n++] = src;
}
/* Hand the copies added since the last hand-over to the backend. */
int moe_copy_flush(te_moe_rank *r, size_t bytes);
/* Room for `rows` more weighted sums of `terms` terms in all. */
int moe_wsum_room(te_moe_rank *r, uint32_t rows, uint32_t terms);
/* Begin a weighted sum into dst; its terms follow (moe_wsum_term). */
static inline void moe_wsum_row(te_moe_rank *r, float *dst)
{
    r->ws.dst[r->ws.n++] = dst;
    r->ws.first[r->ws.n] = r->ws.terms;
}
static inline void moe_wsum_term(te_moe_rank *r, const void *src, float w)
{
    r->ws.src[r->ws.terms] = src;
    r->ws.w[r->ws.terms++] = w;
    r->ws.first[r->ws.n] = r->ws.terms;
}
/* Hand the sums added since the last hand-over to the backend; their
 * terms' rows hold src_dtype values (TE_MOE_FP32 or TE_MOE_BF16). */
int moe_wsum_flush(te_moe_rank *r, uint32_t src_dtype);
/* The backend's sync: what was handed over is done; the lists restart. */
int moe_mem_sync(te_moe_rank *r);
/* Free the lists and detach the backend (te_moe_rank_free). */
void moe_mem_free(te_moe_rank *r);

/* moe_write.c */
/* Wait until every write submitted by this rank has called back, at most
 * until deadline; 0 or -ETIMEDOUT, and what is left in *left (or NULL). */
int moe_wait_inflight(te_moe_rank *r, uint64_t deadline, uint64_t *left);
/* A write of the batch to peer d (one immediate, pinned to one NIC),
 * counted in the stats; retried while the submit queue is full. */
int moe_put(te_moe_rank *r, uint32_t d, size_t loff, size_t roff, size_t len,
            uint32_t phase, uint64_t deadline, int combine);
/* The same from another local registration (the caller's input). */
int moe_put_mr(te_moe_rank *r, te_mr *local, uint32_t d, size_t loff,
               size_t roff, size_t len, uint32_t phase, uint64_t deadline,
               int combine);
/* Offset in a dispatch slot where a span's tokens start. */
size_t moe_span_off(const te_moe_rank *r);
/* Row k of source s in our receive slot: its meta (rows, or the metas of
 * a span: r->b.span[s]). */
const struct moe_row_meta *moe_row_meta_at(const te_moe_rank *r, uint32_t s,
                                           uint32_t k);
/* Wait for `count` arrivals of (batch, peer, phase). */
int moe_wait_imm(te_moe_rank *r, uint32_t peer, uint32_t phase,
                 uint64_t count, uint64_t deadline, const char *what);
/* Refuse a batch while writes of an earlier one may still land (-EBUSY). */
int moe_check_usable(te_moe_rank *r);
/* Start batch `batch`: stats, serial, immediates two batches ahead. */
void moe_begin_batch(te_moe_rank *r, uint64_t batch);
/* Wait (bounded) until every peer is done with the previous batch (owed). */
int moe_settle_owed(te_moe_rank *r);
/* End the batch (rc: its result so far): wait for its writes, then IDLE. */
int moe_end_batch(te_moe_rank *r, int rc);
/* Write a failure head (status rc, the current te_moe_last_error()) to
 * every peer, as our dispatch head (combine = 0: to the peers our head has
 * not gone to yet) or our combine head, so they fail the batch at once
 * instead of waiting for us. */
void moe_tell_peers(te_moe_rank *r, int rc, int combine);
/* Check a head that arrived from s; 0 or -EPROTO naming s and its reason. */
int moe_check_head(te_moe_rank *r, const struct moe_head *h, uint32_t s,
                   uint32_t max_rows, const char *what);

#endif
