/*
 * efa transport plugin: TransferEngine over libfabric FI_EP_RDM endpoints.
 * Shared declarations of the plugin's modules (docs/efa.md describes the
 * mechanism, the measured provider quirks and every configuration key).
 *
 * One NIC = one fabric, domain, address vector, completion queue and RDM
 * endpoint. Writes carry the immediate as remote CQ data; the target's CQ
 * reports it and poll() turns it into TE_PCQ_IMM. Every libfabric object of
 * a NIC is touched under the NIC's mutex (the domain runs with
 * FI_THREAD_DOMAIN), which is also what makes mr_dereg() wait for a
 * progress call that may be copying into the region (see efa_mr.c).
 */
#ifndef EFA_INTERNAL_H
#define EFA_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>

#include "te/plugin.h"
#include "tpc_clock.h"
#include "tpc_entry.h"
#include "tpc_fifo.h"
#include "tpc_host.h"
#include "tpc_hot.h"
#include "tpc_log.h"
#include "tpc_ops.h"
#include "tpc_rng.h"
#include "efa_auth.h"
#include "efa_bye.h"
#include "efa_local.h"
#include "efa_proc.h"
#include "efa_shm_name.h"
#include "efa_shm_guard.h"
#include "efa_shm_bell.h"
#include "efa_probe.h"

#define EFA_NAME "efa"
#define EFA_VERSION "0.1.0"

/* The libfabric API we ask for: the one of the headers we were built with,
 * so a build never uses more than the installed library offers. */
#define EFA_FI_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)

#define EFA_MAX_DEVICES 64
#define EFA_PROV_LEN 16       /* provider name carried in an address */
#define EFA_RAW_MAX 56        /* endpoint name bytes that fit an address */
#define EFA_LANDING_LEN 64    /* target of imm-only writes without a key */
#define EFA_POLL_BATCH 64     /* CQ entries read per fi_cq_read call */
#define EFA_HK_INTERVAL_NS 2000000ull /* peer liveness checks */
/* How long a peer's exit seen by its pidfd waits for poll() to read the
 * CQ dry (a goodbye sent before the exit goes first: efa_cq.c). */
#define EFA_EXIT_HOLD_NS 20000000ull
/* A same-host peer's pidfd is read before posting to it at most this
 * often (a poll(2) costs ~0.3 us here, per post() call; the kernel itself
 * makes a SIGKILLed peer's pidfd readable only 2-50 ms after the kill,
 * measured, so 50 us adds little to the window the check cannot cover). */
#define EFA_POST_CHECK_NS 50000ull

enum efa_tristate { EFA_AUTO = 0, EFA_ON = 1, EFA_OFF = 2 };
enum efa_av_mode { EFA_AV_FIRST_USE = 0, EFA_AV_AT_ADD = 1 };

/* ------------------------------------------------------------ config */

struct efa_cfg {
    char provider[64];
    char node[256];
    char domain[64];
    uint32_t devices;        /* 0 = one per distinct fi_info domain */
    uint32_t queue_depth;    /* 0 = the provider's tx_attr->size */
    bool require_native_rma;
    int inject;              /* enum efa_tristate */
    int completion;          /* enum efa_completion (efa_probe.h) */
    int av_insert;           /* enum efa_av_mode */
    int hmem;                /* enum efa_tristate */
    bool watch_peers;        /* pidfd liveness of same-host peers */
    bool shm_lock_repair;    /* efa_shm_guard.h */
    bool shm_bell;           /* efa_shm_bell.h */
    uint32_t stall_timeout_ms; /* EAGAIN streak that declares a peer down */
    uint32_t probe_timeout_ms;
    uint64_t auth_forget_idle_ms; /* efa_auth.c forget_idle; 0 = never */
    uint32_t bye_wait_ms;    /* efa_bye.c; 0 = no goodbyes */
};

/* ------------------------------------------------------------ context */

/* What the plugin decided for this provider, shown by te-info and logs. */
struct efa_paths {
    bool native_rma;          /* RMA executed by the provider, not messages */
    char rma[256];            /* why native_rma is what it is */
    uint64_t write_flags;     /* completion flag of writes */
    bool inject;              /* small writes use fi_inject_write[data] */
    size_t inject_max;
    bool inject_zero;         /* imm-only writes too (probe: inject_zero) */
    bool inject_send;         /* small SENDs use fi_inject (probe) */
    bool key_check;           /* keys carry a check the initiator verifies */
    bool remote_cq_data_cap;  /* FI_REMOTE_CQ_DATA accepted as a capability */
    bool source;              /* FI_SOURCE: completions name the sender */
    bool hmem;                /* FI_HMEM: CUDA registrations */
    char summary[512];        /* one line, key=value, for logs and te-bench */
};

struct te_plugin_ctx {
    struct te_plugin_host host;
    struct efa_cfg cfg;
    struct fi_info *infos;               /* fi_getinfo result, owned */
    struct fi_info *dev[EFA_MAX_DEVICES]; /* distinct domains, into infos */
    uint32_t ndomains;
    uint32_t ndev;                       /* devices exposed */
    struct efa_probe_result probe;
    struct efa_paths paths;
    uint64_t host_id;                    /* same-host detection */
    uint64_t start_time;                 /* this process, /proc/self/stat */
};
typedef struct te_plugin_ctx efa_ctx;

/* ------------------------------------------------------------ wire */

#define EFA_ADDR_MAGIC 0x41464554u /* "TEFA" */
#define EFA_ADDR_VERSION 1u
#define EFA_AF_KEYCHECK 0x1u       /* rkeys of this NIC carry a check */
#define EFA_AF_AUTH 0x2u           /* its engine has a secret: authenticate
                                    * (efa_auth.h); key_secret is then 0 */
#define EFA_AF_BELL 0x4u           /* its shm NIC has a doorbell to ring
                                    * after posting to it (efa_shm_bell.h) */

/* A NIC address as published by nic_address(): this header, then the
 * endpoint name from fi_getname(). Host byte order (same-architecture
 * peers; the core's wire format already refuses foreign engines). */
struct efa_wire_addr {
    uint32_t magic;
    uint8_t version;
    uint8_t raw_len;
    uint8_t flags;       /* EFA_AF_* */
    uint8_t reserved;
    uint64_t landing_key;  /* key of the NIC's imm-only landing region */
    uint64_t landing_addr; /* remote address of that region */
    uint64_t key_secret;   /* input of the rkey check (not a secret) */
    uint64_t host_id;      /* boot id hash: same host? */
    uint32_t pid;          /* owner process, for same-host liveness */
    uint32_t reserved2;
    uint64_t start_time;   /* owner's start time: guards pid reuse */
    char prov[EFA_PROV_LEN];
    uint8_t raw[];
};
_Static_assert(sizeof(struct efa_wire_addr) + EFA_RAW_MAX <=
                   TE_PLUGIN_MAX_ADDR_LEN, "address fits the ABI limit");

/* ------------------------------------------------------------ objects */

enum efa_slot_state { EFA_SLOT_FREE = 0, EFA_SLOT_LIVE, EFA_SLOT_ORPHAN };

/* One operation handed to libfabric; its address is the op context. */
struct efa_slot {
    struct fi_context2 fctx; /* first: providers with FI_CONTEXT use it */
    uint64_t context;        /* the core's */
    uint32_t peer;           /* peer index + 1; 0 for RECV */
    uint32_t next_free;
    uint8_t kind;            /* enum te_plugin_op_kind */
    uint8_t state;           /* enum efa_slot_state */
    uint8_t repost;          /* RECV waiting to be posted again */
    uint8_t reserved;
    void *buf;               /* RECV: buffer, for a repost (FI_RX_CQ_DATA) */
    uint64_t len;
    void *desc;
};

enum efa_peer_state {
    EFA_PEER_FREE = 0,
    EFA_PEER_PENDING, /* added, not yet in the address vector */
    EFA_PEER_LIVE,
    EFA_PEER_DOWN,    /* unreachable: posts fail at once */
    EFA_PEER_REMOVED, /* gone; entry kept while provider ops drain */
};

struct efa_peer {
    uint64_t handle;
    uint8_t state;    /* enum efa_peer_state */
    uint8_t flags;    /* EFA_AF_* of its address */
    uint8_t raw_len;
    uint8_t monitored;
    fi_addr_t fi_addr;
    uint8_t raw[EFA_RAW_MAX];
    uint64_t landing_key, landing_addr, key_secret;
    uint32_t live_ops;   /* slots LIVE towards it */
    uint32_t orphans;    /* slots failed early, provider still holds them */
    int pidfd;           /* same-host liveness, -1 if not monitored */
    uint32_t pid;
    uint64_t stall_since_ns; /* first -FI_EAGAIN with nothing in flight */
    uint64_t pidfd_read_ns;  /* last pidfd check before a post */
    bool guarded;            /* its pidfd is watched by the shm guard */
    uint64_t deaths_seen;    /* efa_shm_guard_deaths() at that check */
    uint8_t exit_seen;       /* its pidfd fired: down after the CQ is read
                              * (efa_peers_exited) */
    struct efa_local *local; /* an endpoint of this process, or NULL */
    struct efa_bell_remote *bell; /* its doorbell (same host, shm), or NULL */
    uint32_t auth;           /* its efa_auth_rec index + 1, 0 without auth */
    int down_status;         /* why it is down (-EACCES: refused) */
    char down_why[160];      /* and in words, said when its PEER_DOWN is
                              * handed to the core (efa_cq.c) */
};

struct te_plugin_mr {
    struct fid_mr *mr;
    void *desc;
    uint8_t *addr;
    uint64_t len;
    uint64_t key;
    uint32_t access;
    struct te_plugin_mr *prev, *next; /* the NIC's registrations */
};
typedef struct te_plugin_mr efa_mr;

struct te_plugin_nic {
    efa_ctx *ctx;
    uint32_t index;
    char name[64];
    pthread_mutex_t lock;
    struct fi_info *info;   /* fi_dupinfo of the device's entry */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    uint8_t addr[TE_PLUGIN_MAX_ADDR_LEN];
    size_t addr_len;
    size_t raw_len;
    struct efa_local *local; /* this endpoint in the process's list */

    /* memory registration */
    bool virt_addr, mr_local, mr_endpoint, mr_rma_event, prov_key, hmem;
    bool mint_keys;          /* we choose requested keys (with a check) */
    uint64_t key_secret;
    uint32_t key_seq;
    efa_mr *mrs;             /* open registrations, closed by nic_close */
    uint8_t *landing;
    struct fid_mr *landing_mr;
    uint64_t landing_key;

    /* data path settings (copied from ctx->paths) */
    uint64_t write_flags;
    bool use_inject;
    size_t inject_max;
    bool inject_zero;        /* zero-length WriteImm as an inject */
    bool inject_send;        /* SENDs up to inject_max as fi_inject */
    bool rx_cq_data;
    bool source;
    bool prov_errno_is_errno; /* tcp family: prov_errno holds the cause */
    int progress_fd;          /* CQ wait fd: inbound bytes pending, or -1 */
    bool shm_regions;         /* shm, our own region seen in /dev/shm: a
                               * heartbeat checks its peer's (efa_post.c) */
    uint64_t held_ns;         /* last post() held an op back then, or 0 */
    struct efa_bell *bell;    /* shm: our doorbell, the wait object */
    bool bell_armed;          /* wait_arm announced the sleep */
    int bell_tx_fd;           /* socket that rings peers' bells, or -1 */
    uint32_t bell_peers;      /* peers with a bell */
    uint32_t bell_polls;
    struct efa_peer *ring_due; /* rung when this post() call is done */

    /* operation slots */
    struct efa_slot *slots;
    uint32_t nslots, free_slot; /* free list head; nslots = none */
    uint32_t qd, recv_cap;
    uint32_t tx_out;  /* WRITE/READ/SEND without LOCAL returned yet */
    struct efa_peer *post_checked; /* peer whose pidfd this post() call read */
    uint32_t rx_out;  /* RECVs without completion returned yet */

    /* peers */
    struct efa_peer *peers;
    uint32_t npeers, peers_cap, peer_gen;
    uint32_t pending;         /* peers waiting for fi_av_insert */
    uint32_t *av_map;         /* fi_addr -> peer index + 1 */
    size_t av_map_cap;

    /* completions poll() returns before reading the CQ */
    struct tpc_fifo cq_fifo; /* struct te_plugin_cq_entry */
    uint32_t hk_polls;
    bool down_said;          /* this poll handed out a PEER_DOWN (one per
                              * poll: the poll's error names that peer) */
    uint64_t hk_next_ns;
    uint32_t exits_seen;      /* peers with exit_seen set */
    uint64_t exits_since_ns;  /* when exits_seen left 0 */
    uint32_t reposts_due;     /* FI_RX_CQ_DATA receives to post again */
    uint64_t unmatched_errors; /* error entries with no op context */
    struct efa_auth auth;      /* job authentication (efa_auth.h) */
    struct efa_bye bye;        /* orderly close (efa_bye.h) */
};
typedef struct te_plugin_nic efa_nic;

/* ------------------------------------------------------- efa_plugin.c */

/* Errors of a NIC ("efa shm:shm: ...") and of the context ("efa: ...")
 * for the engine's last error, and log lines (plugins/common/tpc_log.h).
 * efa_err evaluates nic twice. */
#define efa_err(nic, ...) \
    tpc_err(&(nic)->ctx->host, EFA_NAME, (nic)->name, __VA_ARGS__)
#define efa_ctx_err(ctx, ...) tpc_err(&(ctx)->host, EFA_NAME, NULL, __VA_ARGS__)
#define efa_log(ctx, level, ...) \
    tpc_log(&(ctx)->host, EFA_NAME, level, __VA_ARGS__)
/* A shm NIC whose peers' (and own) region locks the guard watches
 * (efa.shm_lock_repair, efa_shm_guard.h). */
static inline bool efa_shm_guarded(const efa_nic *nic)
{
    return nic->ctx->cfg.shm_lock_repair &&
           !strcmp(nic->info->fabric_attr->prov_name, "shm");
}
/* libfabric error (positive FI_ value) as a negative errno for the core. */
int efa_errno(int fi_err);

/* ------------------------------------------------------- efa_config.c */

extern const struct te_plugin_config_param efa_config_params[];
int efa_config_parse(efa_ctx *ctx);

/* ------------------------------------------------------- efa_fabric.c */

/* fi_getinfo with the plugin's hints; fills ctx->infos/dev/ndomains. */
int efa_discover(efa_ctx *ctx);
/* Decide the data paths from the probe; refuse what must be refused. */
int efa_decide_paths(efa_ctx *ctx);
/* Is `name` one of the ';'-separated components of a provider name? */
bool efa_prov_has(const char *prov, const char *name);
/* Should the NIC's CQ carry a wait fd that tells its poll() that inbound
 * bytes are pending (manual-progress providers where the target moves
 * them)? See efa_cq.c. */
bool efa_wants_progress_fd(const struct fi_info *i);
/* NIC name of device idx, e.g. "shm:shm#1" or "efa:rdmap16s27-rdm". */
void efa_device_name(efa_ctx *ctx, uint32_t idx, char *buf, size_t len);
int efa_query_device(te_plugin_ctx *ctx, int idx,
                     struct te_plugin_device_info *info);

/* ---------------------------------------------------------- efa_nic.c */

int efa_nic_open(te_plugin_ctx *ctx, int idx,
                 const struct te_plugin_nic_attr *attr, te_plugin_nic **out);
void efa_nic_close(te_plugin_nic *nic);
int efa_nic_address(te_plugin_nic *nic, void *buf, size_t *len);

/* ----------------------------------------------------------- efa_mr.c */

int efa_mr_reg(te_plugin_nic *nic, void *addr, size_t len, uint32_t access,
               uint32_t mem_type, int device_id, te_plugin_mr **mr,
               struct te_plugin_mr_info *info);
int efa_mr_dereg(te_plugin_nic *nic, te_plugin_mr *mr);
/* Register a region with the NIC's key policy; caller holds nic->lock. */
int efa_mr_register_locked(efa_nic *nic, void *addr, size_t len,
                           uint64_t fi_access, uint32_t mem_type,
                           int device_id, struct fid_mr **out, uint64_t *key);
/* The check half of a minted rkey (see docs/efa.md, "Keys"). */
static inline uint32_t efa_key_check(uint64_t secret, uint32_t seq)
{
    uint64_t z = secret ^ ((uint64_t)seq * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)(z ^ (z >> 31));
}
static inline bool efa_key_valid(uint64_t secret, uint64_t key)
{
    return (uint32_t)(key >> 32) != 0 &&
           efa_key_check(secret, (uint32_t)(key >> 32)) == (uint32_t)key;
}

/* --------------------------------------------------------- efa_peer.c */

int efa_peer_add(te_plugin_nic *nic, const void *addr, size_t len,
                 te_plugin_peer *out);
int efa_peer_remove(te_plugin_nic *nic, te_plugin_peer peer);
static inline struct efa_peer *efa_peer_get(efa_nic *nic, te_plugin_peer h)
{
    uint32_t idx = (uint32_t)h;
    if (idx == 0 || idx > nic->npeers)
        return NULL;
    struct efa_peer *p = &nic->peers[idx - 1];
    return p->handle == h && p->state != EFA_PEER_FREE ? p : NULL;
}
/* map[fa] = v, growing the map (zero-filled) as needed: 0 or -ENOMEM,
 * -EINVAL for FI_ADDR_NOTAVAIL. */
int efa_addr_map_set(uint32_t **map, size_t *cap, fi_addr_t fa, uint32_t v);
/* The doorbell of a same-host remote whose address (header a, endpoint
 * name raw) carries one (EFA_AF_BELL), mapped; NULL with *err 0 when it
 * has none, with a negative errno when it cannot be opened. */
struct efa_bell_remote *efa_bell_of(efa_nic *nic,
                                    const struct efa_wire_addr *a,
                                    const uint8_t *raw, int *err);
/* Insert every pending peer into the address vector (one call). */
int efa_peers_resolve(efa_nic *nic);
/* The peer handle of a completion's source address, or 0. */
te_plugin_peer efa_peer_of_src(efa_nic *nic, fi_addr_t src);
/* An orphan's late provider completion arrived (efa_cq.c). */
void efa_peer_orphan_done(efa_nic *nic, uint32_t peer_idx);
/* Peer unreachable: fail its ops now, report TE_PCQ_PEER_DOWN once. */
void efa_peer_down(efa_nic *nic, struct efa_peer *p, int status,
                   const char *why);
/* Same-host peers whose process died (rate-limited, one poll(2)): marked
 * exit_seen; efa_peers_exited turns them down once poll() has read the CQ,
 * so a goodbye they sent before exiting is read first (efa_bye.h). */
void efa_peers_housekeeping(efa_nic *nic);
/* Marks p's process as exited (once), for efa_peers_exited to turn down
 * after the CQ is read: housekeeping's pidfd poll and the check before a
 * post both end here. */
void efa_peer_exit_seen(efa_nic *nic, struct efa_peer *p);
void efa_peers_exited(efa_nic *nic);
void efa_peers_free(efa_nic *nic);
/* This process's identity for same-host liveness. */

/* --------------------------------------------------------- efa_post.c */

/* Ring the doorbells of the peers our operations in flight go to, where
 * they sleep (efa_shm_bell.h). */
void efa_bell_ring_busy(efa_nic *nic);
/* Ring the doorbell of the peer at fi_addr, if it has one and sleeps:
 * after a provider call the plugin makes on its own (messages). */
void efa_bell_ring_addr(efa_nic *nic, fi_addr_t fa);

/* --------------------------------------------------------- efa_auth.c */

/* Does the engine have a secret (plugin ABI 1.4 auth_required)? */
bool efa_auth_required(const efa_ctx *ctx);
/* Post the message receives (the NIC's endpoint is enabled; auth.on). */
int efa_auth_open(efa_nic *nic);
/* Release what efa_auth_open made (after the endpoint is closed). */
void efa_auth_close(efa_nic *nic);
/* A core peer of address a (len bytes, parsed): share its address's
 * record, inserted into the AV now, and start the handshake if none is
 * done or running. Caller holds nic->lock. */
int efa_auth_peer_attach(efa_nic *nic, struct efa_peer *p, const void *a,
                         size_t len);
/* The peer is released; caller holds nic->lock. */
void efa_auth_peer_detach(efa_nic *nic, struct efa_peer *p);
/* The peer is down for good (process gone, connection lost): its address
 * must authenticate again. */
void efa_auth_peer_lost(efa_nic *nic, struct efa_peer *p);
/* May operations go to p? 1 yes, 0 not yet (hold them). */
int efa_auth_tx_ready(efa_nic *nic, const struct efa_peer *p);
/* The rkey-check secret of p's NIC (learnt in the handshake). */
uint64_t efa_auth_key_secret(efa_nic *nic, const struct efa_peer *p);
/* Is an immediate or SEND from src to be delivered? Counts and logs the
 * ones that are not. */
bool efa_auth_accept(efa_nic *nic, fi_addr_t src, const char *what);
/* Is op_context one of the handshake's messages? */
bool efa_auth_owns(efa_nic *nic, void *op_context);
/* A message's completion (err 0) or error completion (err > 0, FI_*). */
void efa_auth_completion(efa_nic *nic, void *op_context, fi_addr_t src,
                         uint64_t len, int err);
/* Deadlines and messages waiting for a send buffer; from poll(). */
void efa_auth_housekeeping(efa_nic *nic, bool deadlines);
/* When the deadlines of efa_auth_housekeeping next need a look
 * (CLOCK_MONOTONIC ns), 0 = never: a worker blocked on the doorbell
 * wakes for it (efa_cq.c). */
uint64_t efa_auth_next_due_ns(const efa_nic *nic);
/* The doorbell of the authenticated remote at fa (one that wrote to us
 * and is not our peer too), opened on first use from its address; NULL if
 * it has none. Caller holds nic->lock. */
struct efa_bell_remote *efa_auth_bell(efa_nic *nic, fi_addr_t fa);
/* Answer the FORGETs whose remotes no longer have our operations in
 * flight (nic->auth.owed); from poll(), after the completions it read. */
void efa_auth_answer_owed(efa_nic *nic);

/* Whom a closing NIC says goodbye to with a secret (efa_bye.c): every
 * authenticated remote address, a peer of ours or one that only wrote to
 * us (not ourselves, not a same-host remote whose process is gone), each
 * with its goodbye's MAC; fn returning nonzero stops the walk. Caller
 * holds nic->lock. */
typedef int (*efa_auth_bye_fn)(efa_nic *nic, fi_addr_t fa,
                               struct efa_local *local, const uint8_t *mac,
                               void *arg);
void efa_auth_bye_targets(efa_nic *nic, efa_auth_bye_fn fn, void *arg);
/* A keyed goodbye from src: 0 when src is authenticated and mac verifies
 * (its record loses its acceptance, *rec = its index + 1 for the peers
 * that refer to it), else -EACCES. */
int efa_auth_bye_verify(efa_nic *nic, fi_addr_t src, const uint8_t *mac,
                        uint32_t *rec);

/* ---------------------------------------------------------- efa_bye.c */

/* Post the goodbye receives when the provider has tagged messages and
 * efa.bye_wait_ms is not 0 (else nothing: bye.on stays false). */
int efa_bye_open(efa_nic *nic);
/* Release what efa_bye_open made (after the endpoint is closed). */
void efa_bye_close(efa_nic *nic);
/* Say goodbye to every live peer address, waiting at most
 * efa.bye_wait_ms for the sends (before the endpoint closes). */
void efa_bye_send_all(efa_nic *nic);
/* Is op_context one of the goodbyes' messages? */
bool efa_bye_owns(efa_nic *nic, void *op_context);
/* A goodbye's completion (err 0) or error completion (err > 0, FI_*). */
void efa_bye_completion(efa_nic *nic, void *op_context, fi_addr_t src,
                        uint64_t len, int err);
/* Receives waiting to be posted again; from poll(). */
void efa_bye_housekeeping(efa_nic *nic);

/* --------------------------------------------------------- efa_post.c */

int efa_post(te_plugin_nic *nic, const struct te_plugin_op *ops, size_t n);
int efa_slots_init(efa_nic *nic);
struct efa_slot *efa_slot_alloc(efa_nic *nic);
void efa_slot_free(efa_nic *nic, struct efa_slot *s);
/* The slot behind a provider's op_context, or NULL if it is not one of
 * ours (shm reports garbage contexts on remote-write entries). */
struct efa_slot *efa_slot_of(efa_nic *nic, void *op_context);
/* Post a receive buffer again (FI_RX_CQ_DATA consumed it). */
int efa_recv_repost(efa_nic *nic, struct efa_slot *s);

/* ----------------------------------------------------------- efa_cq.c */

int efa_poll(te_plugin_nic *nic, struct te_plugin_cq_entry *out, int max);
/* Wait object (plugin ABI 1.3): the CQ's wait fd where there is one. */
int efa_wait_fd(te_plugin_nic *nic);
int efa_wait_arm(te_plugin_nic *nic);
/* efa_paths.c: plugin ABI 1.1 */
int efa_describe_paths(te_plugin_nic *nic, struct te_plugin_path *out, int max);
/* Queue a completion poll() will return before reading the CQ. */
void efa_cq_push(efa_nic *nic, const struct te_plugin_cq_entry *e);

#endif
