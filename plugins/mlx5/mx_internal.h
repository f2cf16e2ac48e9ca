/*
 * mlx5 transport (rdma-core ibverbs): shared declarations of the plugin's
 * modules. See docs/mlx5.md for the design.
 *
 * Per opened NIC (struct te_plugin_nic):
 *  - one PD; a send CQ shared by every RC QP; a receive CQ fed by one SRQ
 *    whose buffers serve both immediates and SEND messages; a UD QP with its
 *    own small CQ for the connection handshake (mx_oob.c);
 *  - one RC QP per remote NIC ("conn"), shared by both directions and
 *    created lazily by peer_add() or by the remote's first handshake
 *    datagram (mx_conn.c, state machine in mx_hs.c);
 *  - a table of send slots: every posted WRITE/READ/SEND holds one until its
 *    LOCAL completion, which is what makes "exactly one completion per op"
 *    checkable (mx_post.c).
 * Threading: everything but mr_reg()/mr_dereg() runs on the NIC's worker;
 * registrations touch only their own MR and a mutex-protected list.
 */
#ifndef MX_INTERNAL_H
#define MX_INTERNAL_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "te/plugin.h"
#include "tpc_clock.h"
#include "tpc_entry.h"
#include "tpc_fifo.h"
#include "tpc_host.h"
#include "tpc_log.h"
#include "tpc_ops.h"
#include "tpc_rng.h"
#include "mx_hs.h"
#include "mx_wire.h"

#define MX_NAME "mlx5"
#define MX_VERSION "0.1.0"

#define MX_MAX_DEVICES 64
/* Work completions fetched per ibv_poll_cq() call. */
#define MX_POLL_BATCH 32
/* Work requests chained into one ibv_post_send() call. */
#define MX_POST_CHAIN 32
/* Handshake datagrams: receive buffers kept posted, sends in flight. */
#define MX_UD_RECVS 64
#define MX_UD_SENDS 64
#define MX_GRH_LEN 40
#define MX_QKEY 0x54450001u
/* Housekeeping (handshake timers) runs at most this often. */
#define MX_HK_INTERVAL_NS 1000000ull
/* A ring entry that is not the last work request of its op. */
#define MX_FILLER 0x80000000u

/* --------------------------------------------------------- u64 -> ptr map */

/* Open addressing, linear probing, backward-shift deletion; keys != 0. */
struct mx_map {
    uint64_t *keys;
    void **vals;
    uint32_t cap; /* power of two */
    uint32_t count;
};

int mx_map_put(struct mx_map *m, uint64_t key, void *val);
void *mx_map_get(const struct mx_map *m, uint64_t key);
void mx_map_del(struct mx_map *m, uint64_t key);
void mx_map_free(struct mx_map *m);

/* ------------------------------------------------------------------ config */

struct mx_cfg {
    char devices[512];   /* comma-separated names, "" = all */
    uint32_t port;       /* 0 = first active port */
    int32_t gid_index;   /* -1 = automatic */
    uint32_t queue_depth;
    uint32_t qp_depth;
    uint32_t srq_depth;
    uint32_t msg_size;
    uint32_t max_inline;
    uint32_t signal_every;
    uint64_t connect_timeout_ms;
    uint64_t connect_retry_ms;
    uint32_t ack_timeout;
    uint32_t retry_cnt;
    uint32_t rnr_timer;
    uint32_t traffic_class;
    uint32_t service_level;
    bool relaxed_ordering;
    bool cuda_dmabuf;
};

struct te_plugin_ctx {
    struct te_plugin_host host;
    struct mx_cfg cfg;
    int ndev;
    char dev[MX_MAX_DEVICES][64]; /* verbs device names, in device order */
};
typedef struct te_plugin_ctx mx_ctx;

/* ---------------------------------------------------------------- objects */

struct te_plugin_mr {
    struct te_plugin_nic *nic;
    struct ibv_mr *mr;
    unsigned char *addr;
    uint64_t len;
    uint32_t access; /* TE_PMR_* */
    struct te_plugin_mr *prev, *next; /* nic->mrs, for nic_close */
};
typedef struct te_plugin_mr mx_mr;

/* A posted WRITE/READ/SEND waiting for its LOCAL completion. */
struct mx_slot {
    uint64_t context;
    struct mx_conn *conn;
    uint32_t gen;
    uint32_t next_free;
    uint8_t used;
    uint8_t kind;
};

/* One RC QP towards one remote NIC, used in both directions. */
struct mx_conn {
    uint64_t rid;          /* remote NIC id (key of nic->by_rid) */
    struct mx_addr ra;     /* remote address; secret valid iff has_secret */
    bool has_secret;
    struct ibv_ah *ah;     /* to the remote's handshake UD QP */
    struct mx_hs hs;
    struct ibv_qp *qp;
    uint8_t path_mtu;      /* enum ibv_mtu */
    /* Work requests in posting order: slot index, | MX_FILLER for all but
     * the last request of an op. Its length is the SQ occupancy. */
    uint32_t *ring;
    uint32_t ring_mask, ring_head, ring_tail;
    uint32_t unsig;        /* WRs since the last signalled one */
    uint32_t refs;         /* core peer handles pointing here */
    te_plugin_peer handle; /* newest such handle: IMM/RECV attribution */
    uint32_t index;        /* in nic->conns */
    bool counted;          /* included in nic->connecting */
    bool broken;           /* on nic->broken: our QP is in the error state */
    bool qp_failed;        /* an error completion came: nothing later on
                              this QP succeeded */
    struct mx_conn *next_broken;
    bool down_reported;    /* TE_PCQ_PEER_DOWN sent for this failure */
    int down_status;       /* what later posts complete with */
    const char *down_why;
};

/* A core peer handle: (seq << 32) | (index + 1). */
struct mx_handle {
    struct mx_conn *conn;
    uint32_t seq;
};

/* A receive buffer the core posted (TE_POP_RECV). */
struct mx_recv {
    uint64_t context;
    unsigned char *addr;
    uint64_t len;
    uint8_t local_ok;
};

/* A SEND that arrived before a RECV was posted: its SRQ buffer waits. */
struct mx_pending {
    uint32_t buf;
    uint32_t len;
    te_plugin_peer peer;
};

/* Completions polled by wait_arm, returned first by mx_cq_poll. */
#define MX_STASH 16
struct mx_stash {
    struct ibv_wc wc[MX_STASH];
    int head, count;
};

struct te_plugin_nic {
    mx_ctx *ctx;
    int index;
    char name[64];
    struct ibv_context *vctx;
    struct ibv_pd *pd;
    struct ibv_cq *scq;  /* RC send completions */
    struct ibv_cq *rcq;  /* SRQ completions: immediates and messages */
    struct ibv_cq *ucq;  /* handshake UD QP, both directions */
    struct ibv_comp_channel *chan; /* the three CQs' events (mx_wait.c) */
    struct mx_stash stash[3];      /* scq, rcq, ucq */
    struct ibv_srq *srq;
    struct ibv_qp *ud;
    /* port and addressing */
    uint8_t port;
    int gid_index;
    union ibv_gid gid;
    uint16_t lid;
    uint8_t link_layer; /* MX_LL_* */
    uint8_t mtu;        /* active MTU, enum ibv_mtu */
    uint64_t max_msg;   /* port max_msg_sz */
    uint32_t max_inline;
    uint8_t rd_atom, dest_rd_atom;
    struct mx_addr addr;
    uint8_t addr_bytes[MX_ADDR_LEN];
    uint32_t epoch;     /* NIC-wide QP incarnation counter */
    struct mx_hs_params hsp;
    uint32_t qp_depth;
    uint32_t signal_every;

    /* send slots */
    struct mx_slot *slots;
    uint32_t qd;
    uint32_t free_slot; /* qd = none */
    uint32_t outstanding;
    /* Work requests on all QPs (an op longer than max_msg takes several):
     * at most qd, so the send CQ (2 * qd + 64) can hold the completions of
     * the live QPs plus the flushes of a replaced one. */
    uint32_t wr_inflight;

    /* connections and handles */
    struct mx_conn **conns;
    uint32_t nconns, conns_cap;
    struct mx_map by_rid; /* remote NIC id -> conn */
    struct mx_map by_qpn; /* current QP number -> conn */
    struct mx_handle *handles;
    uint32_t nhandles, handles_cap, handle_seq;
    uint32_t connecting; /* conns in MX_HS_CONNECTING */
    struct mx_conn *broken; /* conns whose QP must be replaced */

    /* SRQ buffer pool */
    unsigned char *rbuf;
    struct ibv_mr *rbuf_mr;
    uint32_t msg_size;
    uint32_t nrbuf;
    uint32_t *rfree;
    uint32_t nrfree;
    uint32_t srq_depth;
    uint32_t srq_posted;
    uint32_t srq_batch;
    struct tpc_fifo recvq;   /* struct mx_recv */
    uint32_t recv_cap;
    struct tpc_fifo pending; /* struct mx_pending */

    /* handshake UD buffers: MX_UD_RECVS receive slots then MX_UD_SENDS */
    unsigned char *ubuf;
    struct ibv_mr *ubuf_mr;
    uint32_t ud_free[MX_UD_SENDS];
    uint32_t nud_free;
    uint64_t hs_rejected; /* datagrams dropped (auth, format) */
    struct ibv_ah **dead_ah; /* of gone conns, until their sends completed */
    uint32_t ndead_ah, dead_ah_cap;
    struct mx_hs_auth auth;  /* the job secret's MAC (hsp.auth when set) */
    bool closing;         /* nic_close(): serve no more datagrams */

    /* completions that did not fit in poll()'s array */
    struct tpc_fifo cq; /* struct te_plugin_cq_entry */

    uint64_t hk_next_ns;
    uint32_t hk_polls;
    bool recv_first; /* poll(): which CQ goes first this time */

    pthread_mutex_t mr_lock; /* guards mrs */
    mx_mr *mrs;
};
typedef struct te_plugin_nic mx_nic;

/* ------------------------------------------------------------ mx_plugin.c */

/* Errors of a NIC ("mlx5 rxe0: ...") and of the context ("mlx5: ...")
 * for the engine's last error, and log lines (plugins/common/tpc_log.h).
 * mx_err evaluates nic twice. */
#define mx_err(nic, ...) \
    tpc_err(&(nic)->ctx->host, MX_NAME, (nic)->name, __VA_ARGS__)
#define mx_ctx_err(ctx, ...) tpc_err(&(ctx)->host, MX_NAME, NULL, __VA_ARGS__)
#define mx_log(ctx, level, ...) \
    tpc_log(&(ctx)->host, MX_NAME, level, __VA_ARGS__)
/* poll() did work that produced no entry but may let the core act (e.g.
 * post what post() refused): the core polls again instead of sleeping
 * (host ABI 1.2 progressed; a no-op outside poll()). */
static inline void mx_progressed(mx_nic *nic)
{
    if (nic->ctx->host.progressed)
        nic->ctx->host.progressed(nic->ctx->host.host_ctx);
}
/* Queue a completion poll() will return later. */
void mx_cq_push(mx_nic *nic, const struct te_plugin_cq_entry *e);
/* Put e into out[*n] if room, else into the overflow FIFO. */
static inline void mx_emit(mx_nic *nic, struct te_plugin_cq_entry *out,
                           int *n, int max, const struct te_plugin_cq_entry *e)
{
    if (*n < max)
        out[(*n)++] = *e;
    else
        mx_cq_push(nic, e);
}

/* ------------------------------------------------------------ mx_config.c */

extern const struct te_plugin_config_param mx_config_params[];
int mx_config_parse(mx_ctx *ctx);

/* ------------------------------------------------------------ mx_device.c */

int mx_devices_scan(mx_ctx *ctx);
int mx_query_device(te_plugin_ctx *ctx, int idx,
                    struct te_plugin_device_info *info);
/* Choose port and GID on an open device (config or automatic). */
int mx_select_port_gid(mx_nic *nic);

/* --------------------------------------------------------------- mx_nic.c */

int mx_nic_open(te_plugin_ctx *ctx, int idx,
                const struct te_plugin_nic_attr *attr, te_plugin_nic **out);
void mx_nic_close(te_plugin_nic *nic);
int mx_nic_address(te_plugin_nic *nic, void *buf, size_t *len);

/* ---------------------------------------------------------------- mx_mr.c */

int mx_mr_reg(te_plugin_nic *nic, void *addr, size_t len, uint32_t access,
              uint32_t mem_type, int device_id, te_plugin_mr **mr,
              struct te_plugin_mr_info *info);
int mx_mr_dereg(te_plugin_nic *nic, te_plugin_mr *mr);
void mx_mr_free_all(mx_nic *nic);

/* ---------------------------------------------------------------- mx_qp.c */

/* Create an RC QP in INIT on the NIC's CQs and SRQ. */
struct ibv_qp *mx_qp_create(mx_nic *nic);
/* RTR then RTS towards the conn's remote QP (hs.r_qpn/r_psn). */
int mx_qp_connect(mx_nic *nic, struct mx_conn *c);
/* Address handle to the remote's handshake UD QP. */
struct ibv_ah *mx_ah_create(mx_nic *nic, const struct mx_addr *ra);
uint32_t mx_psn_random(void);
/* A fresh authentication nonce (getrandom): 0, or -EIO (logged). */
int mx_nonce(mx_nic *nic, uint8_t out[MX_NONCE_LEN]);
const char *mx_wc_status(enum ibv_wc_status s);
int mx_wc_errno(enum ibv_wc_status s);

/* -------------------------------------------------------------- mx_conn.c */

int mx_peer_add(te_plugin_nic *nic, const void *addr, size_t len,
                te_plugin_peer *out);
int mx_peer_remove(te_plugin_nic *nic, te_plugin_peer peer);
static inline struct mx_conn *mx_handle_conn(mx_nic *nic, te_plugin_peer h)
{
    uint32_t idx = (uint32_t)h;
    if (idx == 0 || idx > nic->nhandles)
        return NULL;
    struct mx_handle *e = &nic->handles[idx - 1];
    return e->conn && e->seq == (uint32_t)(h >> 32) ? e->conn : NULL;
}
/* c's down words as the NIC's error (set_error): when it goes down, and
 * again by the poll that hands its PEER_DOWN to the core (mx_plugin.c). */
void mx_conn_say_down(mx_nic *nic, const struct mx_conn *c, int status,
                      const char *why);
/* A handshake datagram from the remote NIC (authenticated by mx_oob.c). */
void mx_conn_on_datagram(mx_nic *nic, struct mx_conn *c,
                         const struct mx_hs_wire *m);
/* Create a conn for an unknown remote that contacted us. */
struct mx_conn *mx_conn_passive(mx_nic *nic, const struct mx_hs_wire *m);
/* Our QP of c is in the error state (error completion): queue it for
 * replacement by mx_conn_fix_broken() (never from inside a CQ poll loop). */
void mx_conn_mark_broken(mx_nic *nic, struct mx_conn *c);
void mx_conn_fix_broken(mx_nic *nic);
/* Handshake timers of every connecting conn. */
void mx_conn_timers(mx_nic *nic);
/* nic_close: say bye, destroy every conn. */
void mx_conns_free_all(mx_nic *nic);

/* --------------------------------------------------------------- mx_oob.c */

int mx_oob_init(mx_nic *nic);
void mx_oob_fini(mx_nic *nic);
/* Sign and send a datagram to c's remote; fills the sender fields. */
int mx_oob_send(mx_nic *nic, struct mx_conn *c, struct mx_hs_wire *m);
/* A gone conn's address handle: destroyed once no send may use it. */
void mx_oob_ah_release(mx_nic *nic, struct ibv_ah *ah);
/* Poll the UD CQ: sends done, datagrams in. */
void mx_oob_progress(mx_nic *nic);

/* -------------------------------------------------------------- mx_post.c */

int mx_post(te_plugin_nic *nic, const struct te_plugin_op *ops, size_t n);
int mx_slots_init(mx_nic *nic);
/* Poll the send CQ: LOCAL completions into out[n..max), then overflow.
 * all: drain the CQ completely (before a QP is destroyed). */
int mx_send_progress(mx_nic *nic, struct te_plugin_cq_entry *out, int n,
                     int max, bool all);
/* Fail every op still on c's QP (it was destroyed) with status. */
void mx_conn_fail_ops(mx_nic *nic, struct mx_conn *c, int status);

/* -------------------------------------------------------------- mx_recv.c */

int mx_recv_init(mx_nic *nic);
void mx_recv_fini(mx_nic *nic);
/* Refill the SRQ in batches. */
void mx_srq_refill(mx_nic *nic);
/* Poll the receive CQ and hand messages to posted RECVs. */
int mx_recv_progress(mx_nic *nic, struct te_plugin_cq_entry *out, int n,
                     int max);
/* Accept a core RECV (post()); 0, or -ENOSPC when the FIFO is full. */
int mx_recv_post(mx_nic *nic, const struct te_plugin_op *op);

/* mx_paths.c: plugin ABI 1.1 describe_paths. */
int mx_describe_paths(te_plugin_nic *nic, struct te_plugin_path *out, int max);

/* ---------------------------------------------------------------- mx_wait.c */
/* Wait objects (plugin ABI 1.3): the NIC's completion channel. */
int mx_wait_open(mx_nic *nic);
void mx_wait_close(mx_nic *nic);
int mx_wait_fd(te_plugin_nic *nic);
int mx_wait_arm(te_plugin_nic *nic);
/* ibv_poll_cq, first returning what wait_arm stashed for this CQ. */
int mx_cq_poll(mx_nic *nic, struct ibv_cq *cq, int n, struct ibv_wc *wc);

#endif
