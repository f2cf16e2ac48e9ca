/*
 * Loopback transport: a software NIC. Shared declarations of the plugin's
 * modules (see docs/loopback.md for the mechanism).
 *
 * Roles: every NIC is an initiator (post() pushes requests into the request
 * ring of a channel it owns, poll() turns responses into LOCAL completions)
 * and a target (poll() executes the requests of its inbound channels, like
 * the remote NIC would, and reports IMM/RECV completions).
 */
#ifndef LB_INTERNAL_H
#define LB_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "te/plugin.h"
#include "lb_copy_pool.h"
#include "lb_ring.h"
#include "tpc_clock.h"
#include "tpc_entry.h"
#include "tpc_fifo.h"
#include "tpc_hot.h"
#include "tpc_host.h"
#include "tpc_log.h"
#include "tpc_ops.h"
#include "tpc_rng.h"

#define LB_NAME "loopback"
#define LB_VERSION "0.1.0"

#define LB_ADDR_MAGIC 0x424c4554u  /* "TELB" */
#define LB_ADDR_VERSION 1u
#define LB_HELLO_MAGIC 0x4c484c54u /* "TLHL" */
#define LB_SHM_MAGIC 0x4d484c54u   /* "TLHM" */
#define LB_SHM_VERSION 3u /* 2: entries carry lap stamps, no tail index;
                              3: inline SENDs continue in further entries */

#define LB_MAX_DEVICES 256
#define LB_MAX_QUEUE_DEPTH (1u << 16)
#define LB_MAX_MSG_SIZE (1ull << 40)
#define LB_SOCK_NAME_LEN 40
/* Most requests a target executes per poll(); bounds the poll's latency. */
#define LB_BATCH 256
/*
 * A poll stops taking requests once they carry this many payload bytes (it
 * always takes one). Responses are published at the end of a poll, so
 * without a byte bound a poll that copies 16 x 1 MiB made the initiator
 * wait for all of them and left the pipeline empty meanwhile (measured:
 * target idle 19% of the time at 1 MiB writes, 16 in flight).
 */
#define LB_BATCH_BYTES (1u << 20)
/* Ops of one post() whose ring lines are prefetched before posting. */
#define LB_PREFETCH_OPS 64
/* Housekeeping (sockets, peer liveness) runs at most this often. */
#define LB_HK_INTERVAL_NS 1000000ull
/* hk_polls: the next poll reads the clock (after a wake-up, or when
 * housekeeping is owed at once). */
#define LB_HK_NOW 0x80000000u

/* ------------------------------------------------------------ wire formats */

/* A NIC address as published by nic_address(); fixed size, host order. */
struct lb_addr {
    uint32_t magic;
    uint16_t version;
    uint16_t size;      /* sizeof(struct lb_addr) when written */
    uint32_t pid;
    uint32_t nic_index;
    uint64_t nic_id;
    char sock_name[LB_SOCK_NAME_LEN]; /* abstract name without leading NUL */
};

/* Sent once by the initiator on a fresh connection, with the memfd. */
struct lb_hello {
    uint32_t magic;
    uint32_t version;
    uint32_t pid;
    uint32_t nic_index;
    uint64_t nic_id;        /* initiator NIC */
    uint64_t target_nic_id; /* the NIC it wants to reach */
    uint64_t shm_size;
    /* Authentication (lb_auth.c): 1 when the initiator has the job key,
     * then nonce is its fresh challenge to the target. */
    uint32_t auth;
    uint32_t reserved;
    uint8_t nonce[16];
};

/* LB_ST_REFUSED: the side refused the other's authentication (lb_auth.c);
 * the other side reads it to report why the channel closed. */
enum lb_state { LB_ST_OK = 0, LB_ST_CLOSED = 1, LB_ST_DEAD = 2,
                LB_ST_REFUSED = 3 };

/*
 * Channel memory shared by initiator and target (malloc in-process, memfd
 * across processes): a header, then the request ring entries, then the
 * response ring entries.
 */
struct lb_shm {
    uint32_t magic;
    uint32_t version;
    uint32_t cap; /* entries per ring, power of two */
    uint32_t reserved;
    uint64_t size;
    _Atomic uint32_t init_state; /* enum lb_state, written by initiator */
    _Atomic uint32_t tgt_state;  /* enum lb_state, written by target */
    _Atomic int refs;            /* in-process only: owners of the memory */
    uint32_t init_pid;           /* initiator, as it claims (see hello) */
    uint32_t init_nic_index;
    uint64_t init_nic_id;
    /* Target is executing a batch of this channel (see lb_chan_quiesce). */
    _Alignas(64) _Atomic uint32_t tgt_busy;
    /* Doorbells (lb_wait.c): a side about to block sets its flag; the other
     * side, after publishing work for it, clears the flag and rings. */
    _Alignas(64) _Atomic uint32_t tgt_armed;
    _Atomic uint32_t init_armed;
    int32_t bell_tgt;  /* in-process channels only: their two eventfds */
    int32_t bell_init;
    _Alignas(64) struct lb_ring_ctl req;
    struct lb_ring_ctl resp;
};

/* Entries per ring of a channel opened by a NIC of queue depth qd: the
 * queue depth rounded up to a power of two. (Twice that, room for every
 * inline SEND's continuations, measured 3 % slower WriteImms end to end:
 * twice the pages to cycle through. lb_inline_room rations them instead.) */
uint32_t lb_ring_cap(uint32_t qd);
size_t lb_shm_size(uint32_t cap);
void lb_shm_init(struct lb_shm *shm, uint32_t cap, size_t size);
/*
 * Checks an untrusted mapping; 0 or -EPROTO. The other process can rewrite
 * the header at any time, so the capacity is read once and returned in *cap:
 * use that value, never shm->cap again.
 */
int lb_shm_check(const struct lb_shm *shm, size_t size, uint32_t *cap);
/* cap: the capacity this side chose or validated (not re-read from shm).
 * producer: 1 for the side that pushes into that ring. */
void lb_shm_req_ring(struct lb_shm *shm, uint32_t cap, struct lb_ring *r,
                     int producer);
void lb_shm_resp_ring(struct lb_shm *shm, uint32_t cap, struct lb_ring *r,
                      int producer);

/* Request ring entry (initiator -> target). */
struct lb_req {
    uint8_t kind;  /* enum te_plugin_op_kind */
    uint8_t flags; /* TE_POP_F_* */
    uint16_t lap;  /* the ring's (lb_ring.h) */
    uint32_t imm;
    uint32_t slot; /* initiator's op slot, echoed in the response */
    uint32_t gen;
    uint64_t local_addr;
    uint64_t len;
    uint64_t remote_addr;
    uint64_t rkey;
    uint64_t not_before_ns; /* fault_delay_us: earliest execution, or 0 */
    uint32_t pid;           /* initiator process */
    uint32_t mem;           /* LB_MEM_*: what local_addr points to */
};
_Static_assert(sizeof(struct lb_req) == LB_RING_ENTRY, "request entry size");
_Static_assert(offsetof(struct lb_req, lap) == LB_RING_LAP_OFF, "lap stamp");

/* lb_req.mem: the initiator's buffer is CUDA device memory. */
#define LB_MEM_LOCAL_DEVICE 0x1u
/* lb_req.mem: a SEND's payload (len <= LB_INLINE_MAX bytes) travels in the
 * ring: its first LB_INLINE_HEAD bytes in the entry itself, in remote_addr
 * and rkey (unused by SENDs), the rest in continuation entries right
 * behind it (lb_ring.h). The target copies it from the ring instead of
 * from the initiator's memory, a process_vm_readv saved per small message
 * across processes. */
#define LB_MEM_INLINE 0x2u
#define LB_INLINE_HEAD 16u
#define LB_INLINE_MAX_CONT 2u
#define LB_INLINE_MAX (LB_INLINE_HEAD + LB_INLINE_MAX_CONT * LB_RING_CONT_BYTES)
_Static_assert(offsetof(struct lb_req, rkey) ==
                   offsetof(struct lb_req, remote_addr) + 8,
               "inline payload: remote_addr and rkey are contiguous");

/* Continuation entries behind an inline SEND of len bytes. */
static inline uint32_t lb_inline_conts(uint64_t len)
{
    return len <= LB_INLINE_HEAD ? 0
           : (uint32_t)((len - LB_INLINE_HEAD + LB_RING_CONT_BYTES - 1) /
                        LB_RING_CONT_BYTES);
}

/* Continuation entries behind request r as the target reads it: none
 * unless r is an inline SEND of a valid length (a longer one is refused,
 * lb_deliver, and its successors are requests of their own). */
static inline uint32_t lb_req_conts(const struct lb_req *r)
{
    return r->kind == TE_POP_SEND && (r->mem & LB_MEM_INLINE) &&
                   r->len <= LB_INLINE_MAX
               ? lb_inline_conts(r->len)
               : 0;
}

/* Why a request failed at the target; the initiator formats the message. */
enum lb_reason {
    LB_R_NONE = 0,
    LB_R_RKEY,      /* a = rkey */
    LB_R_ACCESS,    /* a = rkey, b = access the region lacks */
    LB_R_BOUNDS,    /* a = len, b = offset, c = region size */
    LB_R_COPY,      /* a = errno of process_vm_*, b = initiator pid */
    LB_R_MSGSIZE,   /* a = message len, b = receive buffer len */
    LB_R_KIND,      /* a = kind */
    LB_R_DEVICE,    /* a = errno of a device copy (lb_device.c), b = pid */
};

/* Response ring entry (target -> initiator). */
struct lb_resp {
    uint16_t reason; /* enum lb_reason */
    uint16_t lap;    /* the ring's (lb_ring.h) */
    int32_t status;
    uint32_t slot;
    uint32_t gen;
    uint64_t a, b, c;
    uint64_t reserved[3];
};
_Static_assert(sizeof(struct lb_resp) == LB_RING_ENTRY, "response entry size");
_Static_assert(offsetof(struct lb_resp, lap) == LB_RING_LAP_OFF, "lap stamp");

/* ------------------------------------------------------------------ objects */

/* Most entries of loopback.link_gbps (NIC i uses entry i mod count). */
#define LB_MAX_LINK_SPEEDS 64

struct lb_cfg {
    uint32_t devices;
    uint32_t queue_depth;
    uint64_t link_gbps;      /* the first entry of link_gbps_list */
    uint64_t link_gbps_list[LB_MAX_LINK_SPEEDS]; /* NIC i: entry i mod n */
    uint32_t n_link_gbps;
    uint64_t fault_seed;
    bool fault_reorder;
    uint64_t fault_delay_us;
    uint64_t fault_fail_every;
    uint64_t fault_kill_after;
    bool ptracer_any;
    uint32_t copy_threads; /* threads copying a target's writes, >= 1 */
};

struct te_plugin_ctx {
    struct te_plugin_host host;
    struct lb_cfg cfg;
    /* Copy engines (lb_copy_pool.h), shared by the NICs of this context;
     * NULL when copy_threads is 1. */
    struct lb_copy_pool *copy_pool;
};
typedef struct te_plugin_ctx lb_ctx;

struct te_plugin_mr {
    struct te_plugin_nic *nic;
    unsigned char *addr;
    uint64_t len;
    uint32_t access;
    uint32_t index; /* in the NIC's table */
    uint64_t rkey;
    bool device;    /* CUDA device memory (TE_PMEM_CUDA), see lb_device.c */
};
typedef struct te_plugin_mr lb_mr;

/* An initiator's op waiting for its response. */
struct lb_slot {
    uint64_t context;
    te_plugin_peer peer;
    uint32_t gen;
    uint32_t next_free;
    uint8_t used;
    uint8_t kind;
};

/* A channel this NIC owns towards a target NIC (the peer handle's object). */
struct lb_peer {
    te_plugin_peer handle;
    uint64_t nic_id; /* remote NIC */
    uint32_t pid;
    uint32_t nic_index;
    struct lb_shm *shm; /* NULL once detached */
    uint32_t cap;       /* ring capacity we chose (shm->cap is not trusted) */
    size_t map_len;     /* cross-process mapping, 0 in-process */
    int fd;             /* cross-process socket, -1 in-process */
    int pidfd;          /* cross-process: readable once the target exits */
    struct lb_ring req;  /* producer view */
    struct lb_ring resp; /* consumer view */
    uint32_t outstanding;
    bool dead;
    char down_why[256]; /* once dead: said by the poll that hands out its
                         * PEER_DOWN (lb_plugin.c taking) */
    int bell; /* rung after publishing requests (eventfd or the socket) */
    int wait; /* in our epoll set: rung when responses are published */
};

/* A channel some initiator opened to this NIC. */
struct lb_inbound {
    struct lb_shm *shm;
    size_t map_len; /* cross-process mapping, 0 in-process */
    int fd;         /* cross-process connection, -1 in-process */
    uint32_t pid;
    uint32_t nic_index;
    uint64_t nic_id;
    bool local;     /* initiator lives in this process: plain memcpy */
    bool gone;
    bool dirty;     /* response tail not yet published */
    bool in_batch;  /* busy window open in this poll */
    struct lb_ring req;  /* consumer view */
    struct lb_ring resp; /* producer view */
    te_plugin_peer peer; /* our handle for the initiator, see peer_gen */
    uint32_t peer_gen;
    int bell; /* rung after publishing responses (eventfd or the socket) */
    int wait; /* in our epoll set: rung when requests are published */
};

/* A posted receive buffer. */
struct lb_recv {
    uint64_t context;
    unsigned char *addr;
    uint64_t len;
};

/* A SEND waiting for a receive buffer (receiver not ready). */
struct lb_pending {
    struct lb_inbound *in;
    struct lb_req req;
    unsigned char inl[LB_INLINE_MAX]; /* an inline SEND's payload */
};

/* A request popped from a ring, waiting for execution in this poll. */
struct lb_work {
    struct lb_inbound *in;
    struct lb_req req;
    unsigned char inl[LB_INLINE_MAX]; /* an inline SEND's payload, gathered */
};

struct te_plugin_nic {
    lb_ctx *ctx;
    uint32_t index;
    uint64_t id;
    char name[16];
    struct lb_addr addr;
    uint32_t qd;
    uint32_t recv_cap;
    _Atomic bool dead; /* fault_kill_after fired */
    struct te_plugin_nic *reg_next; /* process registry */

    /* ---- initiator */
    struct lb_slot *slots;
    uint32_t free_slot; /* head of the free list, qd = none */
    uint32_t outstanding; /* posted WRITE/READ/SEND without LOCAL yet */
    struct lb_peer **peers;
    uint32_t npeers; /* used entries of peers[] (some NULL) */
    uint32_t peers_cap;
    uint32_t peers_gen;
    uint32_t peer_seq;
    uint64_t wrs_posted; /* WRITE/READ/SEND accepted, for faults */

    /* ---- target */
    pthread_mutex_t exec_lock; /* MR table; held while executing */
    _Atomic uint32_t mr_waiting; /* mr_reg/dereg callers queued on exec_lock */
    lb_mr **mrs;
    uint32_t nmrs, mrs_cap, mr_free; /* free list through index, UINT32_MAX */
    uint32_t *mr_next_free;
    uint64_t rkey_seq;
    struct lb_inbound **in;
    uint32_t nin, in_cap;
    pthread_mutex_t in_lock; /* guards in_new */
    _Atomic uint32_t in_gen;
    uint32_t in_seen;
    struct lb_shm **in_new;
    uint32_t nin_new, in_new_cap;
    struct tpc_fifo recvq;   /* struct lb_recv */
    struct tpc_fifo pending; /* struct lb_pending */
    struct lb_work *batch;
    struct lb_copy *copies; /* LB_BATCH: a run's copies (lb_exec_run) */
    void *cuda_stream;      /* device copies of this NIC (lb_device.c) */
    unsigned char *bounce;  /* staging for cross-process device copies */

    /* ---- completions that did not fit in poll()'s array */
    struct tpc_fifo cq; /* struct te_plugin_cq_entry */
    bool resp_first;

    /* ---- sockets */
    int listen_fd;
    int *hello_fds;
    uint32_t nhello, hello_cap;
    /* hellos answered with a challenge, awaiting the proof (lb_auth.c) */
    struct lb_auth_pend *auth_pend;
    uint32_t nauth_pend, auth_pend_cap;
    void *pfds; /* struct pollfd scratch */
    uint32_t pfds_cap;
    uint64_t hk_next_ns;
    uint32_t hk_polls; /* polls counted, LB_HK_NOW */
    bool hk_idle;      /* the last poll found nothing */

    /* ---- wait object (lb_wait.c) */
    int epfd;   /* every fd whose readiness means poll() has work */
    int bell;   /* eventfd: an in-process channel to this NIC was added */
    bool armed; /* wait_arm() set the channels' armed flags */

    /* ---- faults */
    uint64_t link_gbps; /* this NIC's cap (loopback.link_gbps), 0 = none */
    bool faults;        /* fault_fail_every or fault_kill_after set: the
                           per-op fault checks run only then */
    uint64_t delay_ns;  /* fault_delay_us in ns, 0 = none */
    uint64_t rng;
    int64_t tokens;
    uint64_t tok_last_ns;
};
typedef struct te_plugin_nic lb_nic;

/* ------------------------------------------------------------- lb_plugin.c */

/* Errors of a NIC ("loopback lo0: ...") and of the context ("loopback:
 * ...") for the engine's last error, and log lines (plugins/common/
 * tpc_log.h). lb_err evaluates nic twice. */
#define lb_err(nic, ...) \
    tpc_err(&(nic)->ctx->host, LB_NAME, (nic)->name, __VA_ARGS__)
#define lb_ctx_err(ctx, ...) tpc_err(&(ctx)->host, LB_NAME, NULL, __VA_ARGS__)
#define lb_log(ctx, level, ...) \
    tpc_log(&(ctx)->host, LB_NAME, level, __VA_ARGS__)
/* Queue a completion poll() will return later; never fails silently. */
void lb_cq_push(lb_nic *nic, const struct te_plugin_cq_entry *e);

/* ---------------------------------------------------------------- lb_mr.c */

/*
 * exec_lock for mr_reg/dereg. The target re-locks it every poll and glibc
 * mutexes are not fair, so a registering thread announces itself and the
 * target stays off the lock until it is served.
 */
static inline void lb_mr_lock(te_plugin_nic *nic)
{
    atomic_fetch_add(&nic->mr_waiting, 1);
    pthread_mutex_lock(&nic->exec_lock);
}
static inline void lb_mr_unlock(te_plugin_nic *nic)
{
    pthread_mutex_unlock(&nic->exec_lock);
    atomic_fetch_sub(&nic->mr_waiting, 1);
}

int lb_mr_reg(te_plugin_nic *nic, void *addr, size_t len, uint32_t access,
              uint32_t mem_type, int device_id, te_plugin_mr **mr,
              struct te_plugin_mr_info *info);
int lb_mr_dereg(te_plugin_nic *nic, te_plugin_mr *mr);
void lb_mr_free_all(lb_nic *nic);
/* Caller holds exec_lock. */
static inline lb_mr *lb_mr_lookup(lb_nic *nic, uint64_t rkey)
{
    uint32_t idx = (uint32_t)rkey;
    if (idx == 0 || idx > nic->nmrs)
        return NULL;
    lb_mr *mr = nic->mrs[idx - 1];
    return mr && mr->rkey == rkey ? mr : NULL;
}

/* ----------------------------------------------------------- lb_channel.c */

int lb_registry_add(lb_nic *nic);
void lb_registry_remove(lb_nic *nic);
int lb_listen(lb_nic *nic);
int lb_addr_parse(lb_nic *nic, const void *buf, size_t len, struct lb_addr *out);
int lb_peer_add(te_plugin_nic *nic, const void *addr, size_t len,
                te_plugin_peer *out);
int lb_peer_remove(te_plugin_nic *nic, te_plugin_peer peer);
static inline struct lb_peer *lb_peer_get(lb_nic *nic, te_plugin_peer h)
{
    uint32_t idx = (uint32_t)h;
    if (idx == 0 || idx > nic->npeers)
        return NULL;
    struct lb_peer *p = nic->peers[idx - 1];
    return p && p->handle == h ? p : NULL;
}
/* Stop the target from touching the channel, then release our side. */
void lb_peer_detach(lb_nic *nic, struct lb_peer *p);
/* Cross-process target's socket or process is gone (one poll syscall). */
bool lb_peer_hung_up(const struct lb_peer *p);
/* The target is gone: ops fail with -ECONNRESET, one PEER_DOWN. */
/* orderly: the target closed its NIC in order (reported as -ESHUTDOWN, logged
 * at info level); else it failed or vanished (a warning). */
/* lb_paths.c: plugin ABI 1.1 describe_paths */
int lb_describe_paths(te_plugin_nic *nic, struct te_plugin_path *out, int max);

void lb_peer_down(lb_nic *nic, struct lb_peer *p, const char *why, bool orderly);
/* This NIC died (fault_kill_after): ops to p fail with -ENETDOWN. */
void lb_peer_kill(lb_nic *nic, struct lb_peer *p);
void lb_peers_free_all(lb_nic *nic);
/* Adopt channels handed over by in-process initiators. */
void lb_inbound_refresh(lb_nic *nic);
void lb_inbound_drop(lb_nic *nic, struct lb_inbound *in);
void lb_inbound_free_all(lb_nic *nic, uint32_t state);
/* Accept connections and hellos, detect dead peers. */
void lb_housekeeping(lb_nic *nic);
te_plugin_peer lb_inbound_peer(lb_nic *nic, struct lb_inbound *in);
/* The cached answer while no peer was added or removed (the common case). */
static inline te_plugin_peer lb_inbound_peer_fast(lb_nic *nic,
                                                  struct lb_inbound *in)
{
    return in->peer_gen == nic->peers_gen ? in->peer
                                          : lb_inbound_peer(nic, in);
}

/* ------------------------------------------------------------ lb_engine.c */

/* Target side: execute inbound requests, at most `room` completions. */
/* ---------------------------------------------------------- lb_device.c */
/* Host memory copies with the initiator (lb_engine.c). */
int lb_copy_from(struct lb_inbound *in, void *dst, uint64_t src, uint64_t len);
int lb_copy_to(struct lb_inbound *in, uint64_t dst, const void *src,
               uint64_t len);
/* Copies where our region (dst_dev / src_dev) or the initiator's buffer is
 * CUDA device memory; -ENOTSUP with a message where that cannot be done. */
int lb_dev_copy_from(lb_nic *nic, struct lb_inbound *in, void *dst,
                     bool dst_dev, uint64_t src, bool src_dev, uint64_t len);
int lb_dev_copy_to(lb_nic *nic, struct lb_inbound *in, uint64_t dst,
                   bool dst_dev, const void *src, bool src_dev, uint64_t len);
/* Whether the core offers device copies (built with CUDA). */
bool lb_dev_supported(const lb_nic *nic);
/* Release the NIC's stream and staging buffer. */
void lb_dev_free(lb_nic *nic);

int lb_target_progress(lb_nic *nic, struct te_plugin_cq_entry *out, int room);
void lb_pending_purge(lb_nic *nic, struct lb_inbound *in);

/* --------------------------------------------------------- lb_initiator.c */

int lb_post(te_plugin_nic *nic, const struct te_plugin_op *ops, size_t n);
/* Initiator side: turn responses into LOCAL completions. */
int lb_initiator_progress(lb_nic *nic, struct te_plugin_cq_entry *out, int room);
/* Fail every outstanding op of p with status; drains finished ones first. */
void lb_peer_fail(lb_nic *nic, struct lb_peer *p, int status, bool drain);
void lb_recvq_fail(lb_nic *nic, int status);
int lb_slots_init(lb_nic *nic);

/* ------------------------------------------------------------- lb_fault.c */

int lb_config_parse(lb_ctx *ctx);
extern const struct te_plugin_config_param lb_config_params[];
uint64_t lb_rand(lb_nic *nic);
void lb_shuffle(lb_nic *nic, void *base, size_t n, size_t esize);
/* fault_fail_every / fault_kill_after decisions for one posted op. */
bool lb_fault_fail_now(lb_nic *nic);
bool lb_fault_kill_now(lb_nic *nic);
/* Make the NIC behave as dead (fault_kill_after). */
void lb_nic_kill(lb_nic *nic);
/* link_gbps token bucket: may the target execute len more bytes now? */
bool lb_link_admit(lb_nic *nic, uint64_t len);
/* Link speed (and cap) of virtual NIC idx, Gbit/s; 0 = uncapped. */
uint64_t lb_link_gbps(const lb_ctx *ctx, int idx);

/* ---------------------------------------------------------------- lb_wait.c */

int lb_wait_open(lb_nic *nic);
void lb_wait_close(lb_nic *nic);
/* Add fd (ignored if < 0) to / remove it from the NIC's epoll set. */
int lb_wait_add(lb_nic *nic, int fd);
void lb_wait_del(lb_nic *nic, int fd);
int lb_wait_fd(te_plugin_nic *nic);
int lb_wait_arm(te_plugin_nic *nic);
/* poll() of an armed NIC: clear the flags wait_arm() set. */
void lb_wait_disarm(lb_nic *nic);
/* After requests were pushed to p: ring its target if it sleeps. */
void lb_peer_publish(struct lb_peer *p);
/* Responses of `in` were pushed: ring its initiator if it sleeps. */
void lb_bell_initiator(struct lb_inbound *in);
/* Ring an eventfd doorbell (a NIC's, or an in-process channel's: also when
 * its side leaves the channel, state already stored, so a sleeping other
 * side looks at once). */
void lb_bell_ring(int fd);
/* Close fd after removing it from the NIC's epoll set (a forked child
 * holding the same open file would otherwise keep it there, readable
 * forever); fd < 0 is ignored. */
void lb_fd_close(lb_nic *nic, int fd);
/* Read the doorbell bytes queued on a channel socket: 0, or -1 once the
 * other side closed it (or it failed). */
int lb_sock_drain(int fd);
/* In-process channel memory: its eventfds (-1 on failure, errno set), and
 * its release by the last of its two owners. */
int lb_shm_local_bells(struct lb_shm *shm);
void lb_shm_local_unref(struct lb_shm *shm);

#endif
