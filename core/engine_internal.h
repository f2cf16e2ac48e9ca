/*
 * Engine internals shared by the core's modules: groups, NICs, peers,
 * registrations, requests and the op cursors that turn a request into
 * plugin operations.
 */
#ifndef TE_CORE_ENGINE_INTERNAL_H
#define TE_CORE_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include "te/te.h"
#include "te/plugin.h"
#include "config.h"
#include "loader.h"
#include "plugin_config.h"
#include "wire.h"
#include "imm_counter.h"
#include "req_pool.h"
#include "op_table.h"
#include "imm_space.h"
#include "mpsc_queue.h"
#include "callback.h"

struct te_group;
struct te_req;

/** Intrusive list link; the first member of struct te_req. */
struct te_link {
    struct te_link *prev, *next;
};

/** Settings read from [engine] once at create. */
/** True when the plugin's table (struct_size) contains `field`. */
#define TE_PLUGIN_HAS(P, field)                                                \
    ((P)->struct_size >=                                                       \
     offsetof(struct te_plugin_ops, field) + sizeof((P)->field))

struct te_settings {
    char plugin[4096];
    char plugin_path[4096];
    uint32_t groups;
    uint32_t nics_per_group;
    int group_nics[64][TE_MAX_NICS]; /* device index per group/NIC */
    uint32_t group_nic_count[64];
    int worker_cpu[64];              /* -1 = not pinned */
    uint32_t submit_queue_depth;
    uint32_t completion_queue_depth;
    uint32_t nic_queue_depth;
    uint32_t recv_depth;
    uint32_t max_msg_size;
    uint32_t imm_table_size;
    uint32_t idle_spin_us;
    uint32_t idle_spin_max_us;       /* adaptive spin ceiling (spin_window.h) */
    uint32_t idle_sleep_us;
    uint32_t idle_sleep_max_us;      /* longest nap without wait objects */
    int idle_block;                  /* engine.idle_wait = block */
    int busy_nap;                    /* engine.busy_wait = nap */
    int caller_progress;             /* engine.progress = caller */
    int waiter_progress;             /* engine.waiter_progress */
    uint32_t idle_block_max_ms;      /* longest block without a deadline */
    uint32_t request_timeout_ms;
    uint32_t peer_timeout_ms;
    uint32_t callback_spin_us;
    int callback_cpu;                /* -1 = not pinned */
    uint64_t shard_min_bytes;        /* smaller WRITE/READ: one NIC */
    uint32_t heartbeat_ms;           /* probe idle peers; 0 = never */
    int heartbeat_keyless;           /* probe peers never written to too */
    int shard_by_speed;              /* weight shards by NIC link speed */
    uint32_t require_caps;           /* engine.require: TE_CAP_* */
    int log_level;
};

/** An op waiting to be posted: generates plugin ops one at a time. */
struct te_cursor {
    struct te_cursor *next;    /* FIFO link in the peer's pending list */
    struct te_req *req;
    uint32_t kind;             /* TE_POP_* */
    uint32_t flags;            /* TE_POP_F_* */
    uint32_t imm;
    uint32_t nic;              /* local NIC index */
    uint32_t remaining;        /* ops still to generate */
    uint32_t inflight;         /* ops posted, completion not yet seen */
    uint32_t index;            /* PAGED: next page index */
    uint32_t step;             /* PAGED: page index stride (NIC count) */
    uint32_t paged;            /* 1: generate pages from req->r.u.paged */
    uint32_t remote_nic;       /* descriptor entry used on the peer */
    te_mr *lmr;                /* local registration (NULL if none) */
    const te_mr_desc *rdesc;   /* PAGED: remote descriptor */
    te_plugin_peer pp;         /* plugin peer handle on this NIC */
    struct te_peer_entry *peer;
    te_peer peer_id;           /* the handle submitted: the slot may be
                                * reused by another peer before posting */
    /* single op (WRITE shard, READ shard, SEND, BARRIER, SCATTER dst) */
    uint8_t *local_addr;
    uint64_t len;
    uint64_t remote_addr;
    uint64_t rkey;
};

/** Per (local NIC, peer) queue of cursors; linked into the NIC's ring. */
struct te_peer_queue {
    struct te_cursor *head, *tail;
    struct te_peer_queue *next_active; /* ring of peers with work */
    int active;
};

#define TE_PEER_FREE 0
#define TE_PEER_LIVE 1
#define TE_PEER_DOWN 2

/* A te_peer is (generation << TE_PEER_SLOT_BITS | slot): a removed peer's
 * slot is reused with the next generation, so a stale handle never aliases
 * the new peer and a group can see any number of peers come and go. The
 * generation wraps below 2^22 - 1 so no handle equals TE_PEER_UNKNOWN. */
#define TE_PEER_SLOT_BITS 10u
#define TE_PEER_SLOT_MASK ((1u << TE_PEER_SLOT_BITS) - 1u)
#define TE_PEER_GEN_LIMIT ((1u << (32u - TE_PEER_SLOT_BITS)) - 1u)

/** A remote group known to a local group. */
struct te_peer_entry {
    _Atomic int state;          /* TE_PEER_*; published with release */
    _Atomic te_peer id;         /* the live handle (see TE_PEER_SLOT_BITS) */
    uint32_t gen;               /* worker only: generation of the slot */
    uint32_t remote_nics;
    uint64_t engine_id;
    uint32_t remote_group;
    te_plugin_peer pp[TE_MAX_NICS];    /* per local NIC */
    struct te_peer_queue q[TE_MAX_NICS];
    /* liveness (worker only): ops posted and not completed per NIC, and
     * when the peer last made progress on that NIC */
    uint32_t outstanding[TE_MAX_NICS];
    uint64_t last_progress_ns[TE_MAX_NICS];
    /* heartbeat (worker only): where an idle peer is probed with a
     * zero-length write on each local NIC: where the last WRITE went
     * (TE_HB_PLACE), nowhere in particular (TE_HB_KEYLESS: address and key
     * 0, for a peer not written to there) or not at all (TE_HB_NONE);
     * hb_keyless_refused: the peer's NIC refused a keyless one */
    uint64_t hb_addr[TE_MAX_NICS];
    uint64_t hb_rkey[TE_MAX_NICS];
    uint8_t hb_known[TE_MAX_NICS];
    uint8_t hb_inflight[TE_MAX_NICS];
    uint8_t hb_keyless_refused[TE_MAX_NICS];
    /* Why it went down (the transport's own words included), written by
     * the worker before state turns TE_PEER_DOWN; for te_peer_status. */
    char down_why[192];
};

/** Tagged operation context (low 2 bits): a cursor, a send or a recv slot. */
#define TE_CTX_CURSOR 0u
#define TE_CTX_SEND 1u
#define TE_CTX_RECV 2u
#define TE_CTX_HEARTBEAT 3u /* payload: (peer slot << 9 | keyless << 8 |
                               local NIC) << 2 */

/** te_peer_entry.hb_known. */
enum { TE_HB_NONE = 0, TE_HB_PLACE = 1, TE_HB_KEYLESS = 2 };
#define TE_CTX_TAG(c) ((uint32_t)((c) & 3u))
#define TE_CTX_PTR(c) ((void *)(uintptr_t)((c) & ~(uint64_t)3u))

/** A slot of the per-NIC send or receive slab. */
struct te_msg_slot {
    struct te_msg_slot *next_free;
    struct te_cursor *cursor; /* SEND: the cursor that posted it */
    uint8_t *buf;
    uint32_t nic;
};

struct te_nic {
    te_plugin_nic *pn;
    int device;
    struct te_plugin_device_info info;
    uint8_t addr[TE_PLUGIN_MAX_ADDR_LEN];
    size_t addr_len;
    /* posting */
    struct te_peer_queue *active;      /* FIFO of peers with pending cursors */
    struct te_peer_queue *active_tail;
    uint64_t pending_cursors;
    /* message slabs */
    uint8_t *send_slab, *recv_slab;
    te_plugin_mr *send_mr, *recv_mr;
    struct te_msg_slot *send_slots, *recv_slots;
    struct te_msg_slot *send_free;
    uint32_t recv_to_post;             /* recv slots waiting to be reposted */
    int recv_broken;                   /* receive path failed: stop reposting */
    struct te_msg_slot **recv_repost;
    /* paths the plugin described (paths.c) */
    struct te_plugin_path paths[TE_PLUGIN_MAX_PATHS];
    int npaths;
    /* plugin contract guard (nic_guard.c, worker only) */
    struct te_op_table posted;         /* contexts of the ops it holds */
    int failed;                        /* the plugin broke the contract */
    int swept;                         /* its requests were failed */
    char failed_why[80];               /* the cause, for requests' reasons */
};

/** Control operation executed on the worker (peer add/remove). */
struct te_control {
    struct te_control *next;
    int kind; /* 1 add, 2 remove */
    struct te_group_addr addr;
    te_peer peer;
    int result;
    char reason[256];
    int done;      /* under ctl_lock */
    int abandoned; /* waiter timed out: the worker frees it */
};
#define TE_CTL_ADD 1
#define TE_CTL_REMOVE 2

struct turn;

struct te_group {
    struct turn *turn;          /* the worker's loop state */
    struct te_engine *e;
    int index;
    uint32_t nic_count;
    struct te_nic nics[TE_MAX_NICS];
    /* Shard weights (NIC link speeds) when the NICs differ, else NULL. */
    const uint64_t *shard_weights;
    uint64_t shard_weight[TE_MAX_NICS];
    _Atomic uint32_t whole_rr;  /* NIC rotation of unsharded small requests */
    struct te_group_addr addr;
    pthread_t worker;
    int worker_started;
    int cpu;
    struct te_mpsc *subq;
    /* peers: fixed array, entries published with state */
    struct te_peer_entry *peers;
    uint32_t peer_cap;
    _Atomic uint32_t peer_count;
    /* control ops, protected by ctl_lock */
    pthread_mutex_t ctl_lock;
    pthread_cond_t ctl_cond;
    struct te_control *ctl_head;
    _Atomic int ctl_pending;
    /* registrations, released at destroy if the user did not */
    pthread_mutex_t mr_lock;
    struct te_link mrs;
    struct te_recv_slot recv;   /* receive handler */
    /* blocking when idle (wait.c) */
    int epfd;                   /* NICs' wait objects + wake_fd, or -1 */
    int wake_fd;                /* eventfd rung by te_group_wake() */
    int can_block;              /* every NIC has a wait object */
    _Atomic int sleeping;       /* worker is (about to be) in epoll_wait */
    _Atomic uint64_t waiter_turns; /* turns run by te_imm_wait (wait.c) */
    /* engine.progress = caller: held by the thread running the group's
     * turn (te_progress, control operations, shutdown) */
    pthread_mutex_t progress_lock;
    _Atomic int progressor;     /* its holder is te_progress/_wait/_arm */
    /* worker-only state */
    uint64_t inflight_reqs;
    uint64_t timed_reqs;        /* in flight with a deadline */
    struct te_link inflight;    /* list head of accepted, unfinished reqs */
};

struct te_mr {
    struct te_link link;     /* group's registration list (mr_lock) */
    struct te_engine *e;
    struct te_group *g;
    uint8_t *addr;
    size_t len;
    uint32_t access;
    uint32_t mem_kind;
    /* Requests in flight using it, plus TE_MR_CLAIMED while te_mr_dereg
     * or te_mr_revoke owns it (mr.c: te_mr_hold refuses then). */
    _Atomic int64_t users;
    te_plugin_mr *pmr[TE_MAX_NICS];
    struct te_plugin_mr_info info[TE_MAX_NICS];
};

/** A submitted request, owned by the worker after te_submit(). */
struct te_req {
    struct te_link link;      /* group's in-flight list (worker only) */
    te_request r;             /* copy; pointers re-aimed at copies below */
    int64_t id;
    struct te_group *g;
    uint64_t ops_total;
    uint64_t ops_done;
    uint64_t ops_skipped;
    uint64_t deadline_ns;     /* 0 = none */
    int delivered;            /* completion already handed out */
    int32_t status;
    char reason[96];
    te_mr *mrs[2];            /* registrations referenced (users held) */
    uint32_t ncursors;
    struct te_cursor *cursors;
    te_mr_desc *descs;        /* copies of remote descriptors */
    uint32_t ndescs;
    void *extra;              /* copied arrays / message bytes */
};

struct te_topology;

/* Request pool: blocks cover a request with up to 5 cursors (one write
 * sharded over 5 NICs, a scatter to 5 peers) or a page list of ~40 pages;
 * larger requests and those beyond the pool use malloc. 256 KiB per
 * engine, touched only as far as requests are in flight at once. */
#define TE_REQ_POOL_BLOCKS 256
#define TE_REQ_POOL_BLOCK_SIZE 1024

struct te_engine {
    struct te_settings s;
    struct te_topology *topo;   /* discovery result (NULL if not run) */
    int topo_applied;           /* groups came from it */
    char topo_note[192];        /* what the layout is based on */
    te_config *cfg;
    struct te_loaded_plugin plugin;
    struct te_pcfg pcfg;        /* the plugin's declared keys */
    te_plugin_ctx *pctx;
    struct te_plugin_host host;
    struct te_auth *auth;       /* job secret (auth.c); NULL = none */
    uint64_t engine_id;
    uint32_t ngroups;
    struct te_group *groups;
    struct te_imm_table *imms;
    struct te_imm_spaces spaces; /* named ranges of imms (imm_space.c) */
    _Atomic int warned_mem_cuda; /* a degraded CUDA path was logged */
    struct te_callbacks cb;
    _Atomic int stopping;
    _Atomic int64_t next_req_id;
    /* Blocks of small requests, recycled between te_submit() and the
     * workers without malloc's arena lock (req_pool.h). */
    struct te_req_pool req_pool;
    /* engine.progress = caller: every group's wait set, for
     * te_progress_wait/te_progress_fd on all groups (-1 otherwise) */
    int epfd_all;
};

/* worker.c */
/* Starts the group's worker thread; with engine.progress = caller only
 * prepares its loop state (te_progress runs the turns). */
int te_worker_start(struct te_group *g);
/* One loop turn (the worker's, or te_progress's under progress_lock):
 * nonzero when it did work. */
int te_worker_turn(struct te_engine *e, struct te_group *g, struct turn *t);
/* Caller mode, from te_submit when no thread progresses the group: take
 * the queued submissions, then q (if not NULL: a request that skipped the
 * queue), and post them, without polling (the operation leaves at once
 * instead of at the next te_progress). */
void te_worker_post_now(struct te_engine *e, struct te_group *g,
                        struct turn *t, struct te_req *q);
/* Set by the plugin host's progressed() callback during a poll() on this
 * worker thread: the NIC did work that returned no entry. */
extern _Thread_local int te_worker_progress;
void te_worker_progressed(void *host_ctx);
void te_worker_stop(struct te_group *g);
/* Run one control op on the group's worker and wait for it (deadline). */
int te_group_control(struct te_group *g, struct te_control *c, int timeout_ms);

/* request.c */
void te_req_free(struct te_req *q);

/* mr.c: deregister on every NIC and free (already unlinked). */
int te_mr_release(struct te_mr *mr);
/* mr.c: a request's reference, taken before te_submit reads anything of
 * the registration but its immutable fields: 0, or -EBUSY (with message)
 * while te_mr_dereg/te_mr_revoke holds it. te_mr_unhold drops it. */
#define TE_MR_CLAIMED ((int64_t)1 << 62)
int te_mr_hold(struct te_mr *mr, const char *what);
void te_mr_unhold(struct te_mr *mr);

/* cuda_flag.c: whether an ImmCounter callback is one of the core's own
 * that may run on the worker that completes the expectation instead of the
 * callback thread (short, never blocks: the GPU flag's stores). */
bool te_imm_cb_runs_inline(te_imm_fn cb);

/* log.c: te_log formats a core message (origin "core") when level passes
 * the process threshold and, with an engine, its engine.log_level;
 * te_log_enabled is that test; te_log_emit hands a formatted message to
 * the sink (te_set_log_fn) or the default stderr output. */
void te_log(const struct te_engine *e, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int te_log_enabled(const struct te_engine *e, int level);
void te_log_emit(int level, const char *origin, const char *msg);

/* engine.c */
struct te_peer_entry *te_group_peer(struct te_group *g, te_peer p);

#endif
