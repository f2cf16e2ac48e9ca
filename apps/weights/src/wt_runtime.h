/* Internal pieces of the trainer / receiver runtime (not installed). */
#ifndef TE_WT_RUNTIME_H
#define TE_WT_RUNTIME_H

#include <pthread.h>

#include "te/te.h"
#include "wt_entries.h"
#include "wt_internal.h"

/* Params gathered ahead (gather buffers, each as large as the largest
 * param): deep enough that a large gather overlaps the writes of the small
 * params before it. */
#define WT_GATHER_DEPTH 4

/* A trainer's completion counts (wt_track.c); fields under mu. */
typedef struct wt_track {
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* CLOCK_MONOTONIC; broadcast per completion */
    uint64_t serial;               /* the push whose completions count */
    uint64_t outstanding;          /* submitted, not completed (any push) */
    uint64_t nwrites;              /* this trainer's writes per push */
    uint64_t *bytes;               /* [local write]: staging bytes */
    uint8_t *done;                 /* [local write]: completed in this push */
    uint32_t pending_reads[WT_GATHER_DEPTH];
    uint64_t inflight;             /* staging bytes of writes not yet done */
    int failed;
    char reason[256];
    te_engine *e;                  /* the trainer's */
} wt_track;

/* e: the trainer's engine; in caller mode (te_engine_progress_mode) its
 * callbacks run only inside progress calls, so wt_track_sleep makes them. */
wt_track *wt_track_new(uint64_t nwrites, const uint64_t *bytes, te_engine *e);
void wt_track_free(wt_track *k);
/* user_data of a request of the current push (index: local write or slot). */
uint64_t wt_track_user_data(const wt_track *k, int read, uint64_t index);
/* The te_done_fn of every trainer request (arg: the tracker). */
void wt_track_done(const te_completion *c, void *arg);
/* A caller-driven engine (engine.progress = caller) moves only in its
 * users' progress calls: 1 when e is one and this thread progressed it
 * for up to ms (te_progress_wait); 0 when e has its own threads, another
 * thread is progressing it, or this is one of its callbacks: then the
 * caller waits its own way. */
int wt_progress_caller(te_engine *e, int ms);
/* Under mu: sleep until a completion or `until` (wt_now() seconds); in
 * caller mode, progress the engine meanwhile (at most 10 ms), unless
 * another thread is progressing it. */
void wt_track_sleep(wt_track *k, double until);
/* Wait until nothing is outstanding or the deadline; 1 if some still is. */
int wt_track_quiesce(wt_track *k, double deadline);
/* Start a push: a new serial, counts cleared. */
void wt_track_begin(wt_track *k);

/* A training rank (wt_trainer.c: pipeline; wt_sources.c: its tensors). */
struct te_wt_trainer {
    te_engine *e;
    const te_wt_model *m;
    const te_wt_sharding *sh;
    const te_wt_schedule *s;
    uint32_t rank;
    uint8_t *staging, *gather[WT_GATHER_DEPTH];
    te_mr *staging_mr, *gather_mr[WT_GATHER_DEPTH];
    uint64_t gather_cap;
    wt_entries src;              /* the framework's parts, one per tensor */
    int bound;                   /* every tensor has a source */
    te_wt_source_fn source_fn;   /* asked at each push (optional) */
    void *source_arg;
    uint8_t *load_buf;           /* te_wt_trainer_load()'s parts */
    te_peer *peers;              /* other trainers */
    te_peer self;                /* this trainer, for its own device parts */
    int self_added;
    int own_via_engine;          /* TE_WT_LOCAL_READS=engine: host parts too */
    te_mr_desc *descs;           /* [trainer * count + tensor]: their parts */
    uint32_t *slice_index;
    wt_track *k;                 /* completions (push state) */
    te_wt_progress_fn progress;
    void *progress_arg;
};

/* At a push: ask the source callback (if any) and check every tensor has a
 * source. */
int wt_sources_ready(te_wt_trainer *t);

/* A parsed rendezvous record. */
typedef struct wt_endpoint {
    uint32_t ready_version;
    uint32_t imm_base;        /* receivers: raw imm of slice index 0 */
    uint32_t addr_len;
    uint8_t addr[TE_ADDR_MAX];
    te_mr_desc desc;
} wt_endpoint;

double wt_now(void);
/* Publish <dir>/<role>-<rank> with e's group-0 address and mr's descriptor. */
int wt_publish(const char *dir, const char *role, uint32_t rank,
               uint32_t ready_version, uint32_t imm_base, te_engine *e,
               const te_mr *mr);
/* Wait (<= timeout_ms) for a record with ready_version >= min_version. */
int wt_lookup(const char *dir, const char *role, uint32_t rank,
              uint32_t min_version, int timeout_ms, wt_endpoint *out);
/* The same, progressing e while it waits when e is caller-driven: other
 * ranks' reads of our memory, and our own writes, move only in our
 * progress calls (a trainer waiting for another trainer that reads from
 * it would otherwise wait for each other until the deadline). */
int wt_lookup_progress(const char *dir, const char *role, uint32_t rank,
                       uint32_t min_version, int timeout_ms, wt_endpoint *out,
                       te_engine *e);
/* index of each slice among its rank's slices (TE_WT_IMM's index). */
uint32_t *wt_slice_index(const te_wt_sharding *sh);
/* The WRITE request of slice k as a trainer submits it (for counts). */
void wt_slice_request(const te_wt_schedule *s, const te_wt_slice *sl,
                      uint32_t imm, te_request *r);

#endif
