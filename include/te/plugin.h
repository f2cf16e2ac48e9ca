/*
 * TransferEngine transport plugin ABI.
 *
 * This is the only header a transport plugin includes. A plugin is a shared
 * object that exports one function, TE_PLUGIN_ENTRY_SYMBOL, with the type
 * te_plugin_entry_fn. The core calls it with the ABI version it speaks; the
 * plugin returns a table of operations headed by its own ABI version and the
 * size of the table it filled in.
 *
 * Versioning rules (see docs/plugin-guide.md):
 *  - abi_major changes break compatibility. The core refuses a plugin whose
 *    major differs from its own, with a message naming both versions.
 *  - abi_minor changes only APPEND fields to the structs that carry a
 *    struct_size: te_plugin_ops, te_plugin_host, te_plugin_device_info,
 *    te_plugin_nic_attr and te_plugin_config_param (whose struct_size is
 *    also the stride of its array). An old plugin keeps working with a
 *    newer core: the core reads a field only when struct_size says the
 *    plugin's table contains it, and fills in its own structs' struct_size
 *    so a newer plugin reads only what an older core provides.
 *  - The structs without a struct_size are fixed for the whole major
 *    version, byte for byte (tests/unit/test_abi.c pins their layout):
 *    te_plugin_op, te_plugin_cq_entry, te_plugin_mr_info, te_plugin_path
 *    and the 1.0 te_plugin_config_key. They travel in arrays on the hot
 *    path (post, poll), where a per-element size check would cost; what
 *    they cannot say waits for a new major version.
 *  - A table shorter than the 1.0 layout is refused.
 *
 * Division of labour: the plugin owns a transport only (devices, NICs,
 * registration, addresses, peers, posting and polling). Sharding, counters,
 * queues, callbacks, topology and configuration live in the core.
 *
 * Threading contract:
 *  - post(), poll(), peer_add(), peer_remove() on one NIC are called by one
 *    thread at a time (the NIC's worker). They must not block for long.
 *  - mr_reg() and mr_dereg() may be called from any thread, concurrently with
 *    post()/poll() on the same NIC. mr_dereg() must not return while a remote
 *    write into the region can still land (quiescence).
 *  - init()/fini()/nic_open()/nic_close() are called with no other call on
 *    the affected objects in flight.
 *
 * Error convention: functions return 0 or a positive count on success and a
 * negative errno value on failure. A failing function should describe the
 * cause through the host's set_error() (e.g. "rkey 0x12 not registered on
 * NIC lo1"), so the core can show it to the user.
 */
#ifndef TE_PLUGIN_H
#define TE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** ABI major version spoken by this header. */
#define TE_PLUGIN_ABI_MAJOR 1
/** ABI minor version spoken by this header. */
#define TE_PLUGIN_ABI_MINOR 4

/** Name of the single symbol every plugin exports. */
#define TE_PLUGIN_ENTRY_SYMBOL "te_plugin_entry"

/** Largest NIC address a plugin may produce, in bytes. */
#define TE_PLUGIN_MAX_ADDR_LEN 128

/** Opaque plugin-owned objects. */
typedef struct te_plugin_ctx te_plugin_ctx; /**< one per engine */
typedef struct te_plugin_nic te_plugin_nic; /**< one per opened NIC */
typedef struct te_plugin_mr te_plugin_mr;   /**< one per registration per NIC */

/** Peer handle returned by peer_add(); meaningful to the plugin only. */
typedef uint64_t te_plugin_peer;

/** Core services handed to the plugin at init(). */
struct te_plugin_host {
    /** sizeof(struct te_plugin_host) as known to the core. */
    uint32_t struct_size;
    /** Opaque pointer passed back to every callback below. */
    void *host_ctx;
    /**
     * Look up a configuration value of the plugin's own INI section (e.g.
     * key "devices" of section [loopback]); when unset, the key's declared
     * default (a core of ABI >= 1.4), else NULL. Environment overrides are
     * already applied. The string lives as long as the ctx.
     */
    const char *(*config_get)(void *host_ctx, const char *key);
    /**
     * Record a readable error message for the engine's last error. printf
     * semantics. Safe to call from any thread.
     */
    void (*set_error)(void *host_ctx, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
    /** Log a message at the given level (0 error .. 3 debug): filtered by
     *  engine.log_level and te_set_log_level(), handed to the application's
     *  sink (te_set_log_fn) with the plugin's name as origin (a leading
     *  "<name>: " is dropped there). Safe to call from any thread. */
    void (*log)(void *host_ctx, int level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
    /*
     * Appended after ABI 1.0 (present when struct_size covers them; NULL
     * where the core was built without CUDA). For transports that copy
     * with the CPU (loopback), so that they need no CUDA of their own.
     */
    /**
     * Copy len bytes from src to dst in this process, either or both CUDA
     * device memory (unified addresses), with cuMemcpyAsync on the stream
     * in *stream (created on first use: keep one per NIC, NULL at first),
     * and return once the copy has completed. 0 or -errno, with the cause
     * recorded through set_error. Thread-safe for distinct streams.
     */
    int (*device_copy)(void *host_ctx, void **stream, void *dst,
                       const void *src, size_t len);
    /** Destroy a stream device_copy created (NULL is ignored). */
    void (*device_stream_free)(void *host_ctx, void *stream);
    /**
     * Appended in ABI 1.2 (present when struct_size covers it). Call from
     * poll() when the NIC did work that produced no completion entry: a
     * manual-progress transport executing a remote initiator's write
     * without an immediate, say. The core then treats the loop turn as
     * busy and polls again at once instead of counting the NIC idle and
     * letting its worker sleep (engine.idle_spin_us / idle_sleep_us), which
     * would hold the remote initiator's next operations for the sleep.
     */
    void (*progressed)(void *host_ctx);

    /* ---- ABI 1.4: typed configuration (docs/plugin-guide.md, "Configuration") ---- */
    /**
     * Effective value of a key the plugin declared in config_params with
     * type TE_PCFG_U64 (environment > INI or te_config_set > the declared
     * default), already checked against the declared range when the engine
     * was created. 0, -ENOENT when no such key of that type was declared,
     * -EINVAL (with the cause recorded) for a bad value. Any thread.
     */
    int (*config_u64)(void *host_ctx, const char *key, uint64_t *out);
    /** The same for TE_PCFG_BOOL (*out 0 or 1). */
    int (*config_bool)(void *host_ctx, const char *key, int *out);
    /** The same for TE_PCFG_DOUBLE. */
    int (*config_double)(void *host_ctx, const char *key, double *out);
    /** The same for TE_PCFG_ENUM: *out is the index of the value among the
     *  declared choices ("auto|on|off": auto 0, on 1, off 2). */
    int (*config_enum)(void *host_ctx, const char *key, int *out);

    /* ---- ABI 1.4: job authentication (docs/security.md) ---- */
    /**
     * 1 when the job has a shared secret (engine.auth_key or
     * engine.auth_key_file): the plugin must then prove it at connection
     * set-up with a challenge-response (both sides' fresh nonces and
     * addresses MACed with auth_mac, checked with auth_verify) and refuse a
     * peer that does not, with a reason (set_error / a PEER_DOWN). 0 when
     * there is no secret: no authentication, as before ABI 1.4.
     */
    int (*auth_required)(void *host_ctx);
    /** HMAC-SHA256 of msg under the job secret, TE_PLUGIN_AUTH_MAC_LEN
     *  bytes into mac. 0, or -ENOKEY without a secret. Any thread. */
    int (*auth_mac)(void *host_ctx, const void *msg, size_t len,
                    uint8_t *mac);
    /** Constant-time check that mac (TE_PLUGIN_AUTH_MAC_LEN bytes) is the
     *  HMAC of msg: 0 if it is, -EACCES if not, -ENOKEY without a secret. */
    int (*auth_verify)(void *host_ctx, const void *msg, size_t len,
                       const uint8_t *mac);
};

/** Bytes of an authentication MAC (HMAC-SHA256). */
#define TE_PLUGIN_AUTH_MAC_LEN 32

/**
 * Static description of one configuration key a plugin accepts (ABI 1.0:
 * untyped, the plugin parses config_get()'s text itself). Fixed layout.
 */

struct te_plugin_config_key {
    const char *name;          /**< key name inside the plugin's section */
    const char *default_value; /**< shown by te-info; NULL = no default */
    const char *doc;           /**< one-line description */
};

/** Types of a declared configuration key (ABI 1.4). */
enum te_plugin_config_type {
    TE_PCFG_STRING = 1, /**< any text; the plugin reads it with config_get */
    TE_PCFG_U64 = 2,    /**< integer in [min_u64, max_u64]: decimal, 0x hex,
                             suffixes k/K m/M g/G (powers of 1024) */
    TE_PCFG_BOOL = 3,   /**< true/false, yes/no, on/off, 1/0 */
    TE_PCFG_DOUBLE = 4, /**< real number in [min_double, max_double] */
    TE_PCFG_ENUM = 5,   /**< one of the '|'-separated words of choices,
                             case-insensitive */
};

/**
 * A typed configuration key (ABI 1.4), the model being libfabric's
 * fi_param_define. The core validates every declared key of the plugin's
 * section when an engine is created (range, type; unknown keys refused
 * with the known ones named), shows the table in te-info --show-config,
 * and serves the values through the host's config_* getters, so the plugin
 * parses nothing. The array ends with an entry whose name is NULL (its
 * struct_size still set); the core reads entries struct_size apart.
 * A malformed table (duplicate or invalid name, unknown type, a typed key
 * without a default or with a default outside its range, min > max, an
 * enum without choices, more than 256 keys) makes the plugin unusable,
 * with a message naming the key.
 */
struct te_plugin_config_param {
    uint32_t struct_size; /**< sizeof(struct te_plugin_config_param) */
    uint32_t type;        /**< enum te_plugin_config_type */
    const char *name;     /**< key name inside the plugin's section */
    /** Text of the default, validated like a set value; required for
     *  typed keys, NULL allowed for TE_PCFG_STRING (then unset = NULL). */
    const char *default_value;
    const char *doc;      /**< one-line description */
    uint64_t min_u64, max_u64;      /**< TE_PCFG_U64 bounds, inclusive */
    double min_double, max_double;  /**< TE_PCFG_DOUBLE bounds, inclusive */
    const char *choices;  /**< TE_PCFG_ENUM: "auto|on|off" */
};

/** Initialisers for te_plugin_config_param tables. */
#define TE_PCFG_STRING_KEY(name_, def_, doc_)                                  \
    {sizeof(struct te_plugin_config_param), TE_PCFG_STRING, name_, def_, doc_, \
     0, 0, 0, 0, NULL}
#define TE_PCFG_U64_KEY(name_, def_, min_, max_, doc_)                         \
    {sizeof(struct te_plugin_config_param), TE_PCFG_U64, name_, def_, doc_,    \
     min_, max_, 0, 0, NULL}
#define TE_PCFG_BOOL_KEY(name_, def_, doc_)                                    \
    {sizeof(struct te_plugin_config_param), TE_PCFG_BOOL, name_, def_, doc_,   \
     0, 0, 0, 0, NULL}
#define TE_PCFG_DOUBLE_KEY(name_, def_, min_, max_, doc_)                      \
    {sizeof(struct te_plugin_config_param), TE_PCFG_DOUBLE, name_, def_, doc_, \
     0, 0, min_, max_, NULL}
#define TE_PCFG_ENUM_KEY(name_, def_, choices_, doc_)                          \
    {sizeof(struct te_plugin_config_param), TE_PCFG_ENUM, name_, def_, doc_,   \
     0, 0, 0, 0, choices_}
#define TE_PCFG_END                                                            \
    {sizeof(struct te_plugin_config_param), 0, NULL, NULL, NULL, 0, 0, 0, 0,   \
     NULL}


/** Device (physical or virtual NIC) description, filled by query_device(). */
struct te_plugin_device_info {
    uint32_t struct_size;   /**< set by the core: sizeof as it knows it */
    char name[64];          /**< e.g. "rdmap16s27", "lo0" */
    char pci_path[64];      /**< sysfs PCI bus id ("0000:16:00.0") or "" */
    int32_t numa_node;      /**< -1 if unknown */
    uint64_t link_gbps;     /**< link speed in Gbit/s, 0 if unknown */
    uint32_t max_inline;    /**< bytes the NIC can send inline, 0 if none */
    uint32_t queue_depth;   /**< send operations that may be outstanding */
    uint64_t max_msg_size;  /**< largest single operation in bytes */
};

/** Operation kinds the core posts. */
enum te_plugin_op_kind {
    TE_POP_WRITE = 1, /**< RDMA write, optional immediate (TE_POP_F_IMM) */
    TE_POP_READ = 2,  /**< RDMA read from remote into local */
    TE_POP_SEND = 3,  /**< two-sided send of a small message */
    TE_POP_RECV = 4,  /**< post a receive buffer */
};

/** Operation flags. */
#define TE_POP_F_IMM 0x1u /**< WRITE carries imm; target reports TE_PCQ_IMM */

/**
 * One operation to post. Lengths may be zero (a zero-length WRITE with
 * TE_POP_F_IMM is an immediate-only write and must still be delivered; one
 * without TE_POP_F_IMM and with mr == NULL is the core's heartbeat, see
 * docs/plugin-guide.md). A non-empty local buffer is always inside a region
 * registered on THIS NIC (mr). remote_addr/rkey come from the remote NIC's
 * mr_reg() outputs.
 */
struct te_plugin_op {
    uint32_t kind;           /**< enum te_plugin_op_kind */
    uint32_t flags;          /**< TE_POP_F_* */
    te_plugin_peer peer;     /**< target (ignored for RECV) */
    te_plugin_mr *mr;        /**< local registration on this NIC */
    void *local_addr;        /**< local buffer start */
    uint64_t len;            /**< bytes */
    uint64_t remote_addr;    /**< WRITE/READ: address in the remote key space */
    uint64_t rkey;           /**< WRITE/READ: remote key */
    uint32_t imm;            /**< WRITE with TE_POP_F_IMM: the immediate */
    uint32_t reserved;
    uint64_t context;        /**< returned in the completion, untouched */
};

/** Completion kinds returned by poll(). */
enum te_plugin_cq_kind {
    TE_PCQ_LOCAL = 1, /**< a posted op finished (status 0 or -errno) */
    TE_PCQ_IMM = 2,   /**< a remote write with immediate landed here */
    TE_PCQ_RECV = 3,  /**< a posted RECV received a message */
    TE_PCQ_PEER_DOWN = 4, /**< peer unreachable; its ops were failed */
};

/** One completion. */
struct te_plugin_cq_entry {
    uint32_t kind;       /**< enum te_plugin_cq_kind */
    /** 0 or negative errno (LOCAL, RECV). PEER_DOWN: -ESHUTDOWN when the
     *  peer closed its NIC in order (the core then logs it at info level
     *  unless requests to it were still running), anything else a failure
     *  (0 from plugins older than this rule). */
    int32_t status;
    uint64_t context;    /**< LOCAL/RECV: the op's context */
    uint64_t len;        /**< RECV: bytes received */
    uint32_t imm;        /**< IMM: the immediate value */
    uint32_t reserved;
    te_plugin_peer peer; /**< IMM/RECV/PEER_DOWN: source peer if known, else 0 */
};

/** Attributes the core passes to nic_open(). */
struct te_plugin_nic_attr {
    uint32_t struct_size;  /**< sizeof as known to the core */
    uint32_t queue_depth;  /**< wanted send queue depth (0 = plugin default) */
    uint32_t recv_depth;   /**< receive buffers the core intends to post */
    uint32_t reserved;
};

/** Memory access flags for mr_reg(). */
#define TE_PMR_LOCAL_WRITE 0x1u  /**< local reads write into it */
#define TE_PMR_REMOTE_WRITE 0x2u /**< peers may write into it */
#define TE_PMR_REMOTE_READ 0x4u  /**< peers may read from it */

/** Memory types for mr_reg(). */
#define TE_PMEM_HOST 0u /**< ordinary host memory */
#define TE_PMEM_CUDA 1u /**< CUDA device memory (device_id = CUDA ordinal) */

/** Result of mr_reg(): what a remote peer needs to address the region. */
struct te_plugin_mr_info {
    uint64_t rkey;        /**< remote key */
    uint64_t remote_base; /**< value a peer uses as remote_addr of byte 0 */
};

/* ------------------------------------------------------- paths (ABI 1.1) */

/** What a path is used for (te_plugin_path.kind). */
enum te_plugin_path_kind {
    TE_PPATH_WRITE = 1,     /**< one-sided write without immediate */
    TE_PPATH_WRITE_IMM = 2, /**< write with immediate (and zero-length imm) */
    TE_PPATH_READ = 3,      /**< one-sided read */
    TE_PPATH_SEND = 4,      /**< two-sided message */
    TE_PPATH_MEM_HOST = 5,  /**< registration of host memory */
    TE_PPATH_MEM_CUDA = 6,  /**< registration of CUDA device memory */
};

/** Capabilities of a path (same values as te.h's TE_CAP_*). */
#define TE_PCAP_ZERO_COPY 0x1u     /**< no bounce through a staging buffer */
#define TE_PCAP_NATIVE_IMM 0x2u    /**< imm carried by the transport itself */
#define TE_PCAP_NATIVE_RMA 0x4u    /**< one-sided: no target software per op */
#define TE_PCAP_DEVICE_DIRECT 0x8u /**< the NIC reaches device memory itself */
#define TE_PCAP_HARDWARE 0x10u     /**< an RDMA NIC, not a software transport */
#define TE_PCAP_AUTO_PROGRESS 0x20u /**< data moves without the target polling */

/**
 * How one kind of operation or registration is carried out on a NIC: the
 * capabilities that apply to it (`relevant`), those it has (`caps`, a
 * subset), and one line saying how ("fi_writemsg + FI_REMOTE_CQ_DATA,
 * provider shm", "process_vm_writev"). A relevant capability missing from
 * caps is a degradation the core reports and, under engine.require,
 * refuses. Kinds the NIC cannot do at all are not listed.
 */
struct te_plugin_path {
    uint32_t kind;     /**< enum te_plugin_path_kind */
    uint32_t caps;     /**< TE_PCAP_* the path has */
    uint32_t relevant; /**< TE_PCAP_* that mean something for this kind */
    uint32_t reserved; /**< zero */
    char text[192];    /**< how, for te-info --paths and logs */
};

/** Most paths a NIC describes. */
#define TE_PLUGIN_MAX_PATHS 8

/**
 * The operations table. Fields up to and including poll form ABI 1.0;
 * describe_paths was appended in 1.1, wait_fd and wait_arm in 1.3,
 * config_params in 1.4. Append-only within a major version:
 * the core reads a field only when struct_size covers it.
 */
struct te_plugin_ops {
    uint32_t abi_major;   /**< TE_PLUGIN_ABI_MAJOR the plugin was built with */
    uint32_t abi_minor;   /**< TE_PLUGIN_ABI_MINOR the plugin was built with */
    uint32_t struct_size; /**< sizeof(struct te_plugin_ops) as built */
    uint32_t reserved;
    const char *name;     /**< short transport name, e.g. "loopback" */
    const char *version;  /**< plugin's own version string */
    const char *description; /**< one line for te-info */
    /** Keys of the plugin's INI section, terminated by {NULL}. May be NULL. */
    const struct te_plugin_config_key *config_keys;

    /** Create the plugin context. host outlives the context. */
    int (*init)(const struct te_plugin_host *host, te_plugin_ctx **out);
    /** Destroy the context; every NIC has been closed before. */
    void (*fini)(te_plugin_ctx *ctx);

    /** Number of devices (NICs) this plugin can open; >= 0 or -errno. */
    int (*device_count)(te_plugin_ctx *ctx);
    /** Describe device idx. */
    int (*query_device)(te_plugin_ctx *ctx, int idx,
                        struct te_plugin_device_info *info);

    /** Open device idx for use. */
    int (*nic_open)(te_plugin_ctx *ctx, int idx,
                    const struct te_plugin_nic_attr *attr,
                    te_plugin_nic **out);
    /**
     * Close a NIC; all its registrations and peers are gone afterwards.
     * Completions of operations still outstanding are discarded, posted
     * RECVs included (the core has already failed their requests itself
     * and never polls again).
     */
    void (*nic_close)(te_plugin_nic *nic);

    /**
     * Write the NIC's address (opaque, at most TE_PLUGIN_MAX_ADDR_LEN bytes)
     * to buf; *len is the buffer size in and the address size out.
     */
    int (*nic_address)(te_plugin_nic *nic, void *buf, size_t *len);

    /**
     * Register [addr, addr+len) with access flags TE_PMR_* and memory type
     * TE_PMEM_* (device_id: e.g. the CUDA device ordinal).
     */
    int (*mr_reg)(te_plugin_nic *nic, void *addr, size_t len, uint32_t access,
                  uint32_t mem_type, int device_id, te_plugin_mr **mr,
                  struct te_plugin_mr_info *info);
    /** Deregister; returns only when no remote access can still land. */
    int (*mr_dereg)(te_plugin_nic *nic, te_plugin_mr *mr);

    /**
     * Resolve a remote NIC address into a peer handle. Handles are never 0:
     * 0 means "unknown sender" in IMM/RECV completions. Must not block for
     * long (it runs on the worker): start a handshake and finish it in
     * poll(), queueing or refusing posts to the peer until then.
     */
    int (*peer_add)(te_plugin_nic *nic, const void *addr, size_t len,
                    te_plugin_peer *out);
    /** Forget a peer; its outstanding ops complete with an error first. */
    int (*peer_remove)(te_plugin_nic *nic, te_plugin_peer peer);

    /**
     * Post up to n operations in order. Returns the number posted (>= 0);
     * fewer than n means the send queue (or the peer's queue) is full:
     * retry the rest later. Returns -errno only for an invalid first op;
     * an op that fails later is reported as a LOCAL completion with status.
     * An invalid op at position i > 0: return i (the core posts again from
     * it and gets the -errno), or accept it and complete it with an error;
     * never -errno after part of the batch was posted. Every posted
     * WRITE/READ/SEND/RECV produces exactly one LOCAL (or RECV) completion.
     * A SEND that finds no RECV posted waits at the target until one is;
     * one longer than the oldest RECV completes that RECV with -EMSGSIZE
     * (docs/plugin-guide.md, section 4). The core checks the count: more than n, or below -4095,
     * fails the NIC (docs/plugin-guide.md, "What the core checks"). The
     * context is opaque (not a pointer of the core's); echo it unchanged.
     */
    int (*post)(te_plugin_nic *nic, const struct te_plugin_op *ops, size_t n);

    /**
     * Fetch up to max completions; returns the count (>= 0) or -errno.
     * The core checks each entry before acting on it. Any of these fails
     * the NIC: its requests fail with -EPROTO and it is not posted to
     * again (docs/plugin-guide.md, "What the core checks"). A count above
     * max or below -4095; an unknown kind; a positive status; a second
     * completion for one operation, or a context that was never posted; a
     * RECV longer than its buffer. A set_error() text given during the
     * poll() that reports a PEER_DOWN becomes part of the peer's down
     * reason.
     */
    int (*poll)(te_plugin_nic *nic, struct te_plugin_cq_entry *out, int max);

    /* ---- ABI 1.1 ---- */
    /**
     * Describe the NIC's paths (at most max, TE_PLUGIN_MAX_PATHS suffice;
     * which capabilities are relevant per kind: docs/plugin-guide.md):
     * returns the number written or -errno. Called once after nic_open(),
     * from the thread that opened the NIC. May be NULL (then the core says
     * the plugin does not describe its paths, and a policy that requires a
     * capability refuses it).
     */
    int (*describe_paths)(te_plugin_nic *nic, struct te_plugin_path *out,
                          int max);

    /* ---- ABI 1.3: wait objects (docs/plugin-guide.md, "Waiting") ---- */
    /**
     * The NIC's wait object: a file descriptor that the core adds to an
     * epoll set (EPOLLIN, level-triggered) and blocks on when the NIC is
     * idle, instead of sleep-polling. Once wait_arm() has returned 0, the
     * fd must become readable when poll() would have something to do: a
     * completion, a remote operation to execute (manual progress), a peer
     * going down, a new connection. Spurious readiness costs a wasted poll,
     * missing readiness a hang until the core's next timed look (100 ms).
     * Called once after nic_open() from the thread that opened the NIC;
     * the fd stays valid until nic_close() (which may close it). NULL, or
     * a negative errno (-EOPNOTSUPP), means none: the core then spins and
     * sleeps (engine.idle_spin_us / idle_sleep_us) as with ABI < 1.3.
     * Several NICs may return the same fd.
     */
    int (*wait_fd)(te_plugin_nic *nic);
    /**
     * Prepare to block (the worker, after a poll() that returned nothing):
     * clear readiness left over from events already handled, then return 0
     * if every later event will make wait_fd readable, or -EAGAIN if poll()
     * has work now (then the core polls instead of blocking). Must not
     * block. The armed state ends with the next poll(); an event between
     * wait_arm() and the core's epoll_wait() must leave the fd readable
     * (check for work after arming, like fi_trywait() or
     * ibv_req_notify_cq() followed by one more poll).
     */
    int (*wait_arm)(te_plugin_nic *nic);

    /* ---- ABI 1.4 ---- */
    /**
     * Typed keys of the plugin's INI section (see te_plugin_config_param),
     * ending with TE_PCFG_END; NULL = none. When set, config_keys above is
     * ignored (a 1.4 plugin may leave it NULL).
     */
    const struct te_plugin_config_param *config_params;
};

/**
 * The entry point. core_major/core_minor: the ABI the core speaks. The plugin
 * returns its table (static storage, never freed) or NULL, writing a reason
 * into err (errlen bytes) when it cannot serve that core.
 */
typedef const struct te_plugin_ops *(*te_plugin_entry_fn)(
    uint32_t core_major, uint32_t core_minor, char *err, size_t errlen);

/** Marks the entry point exported from a plugin built with hidden symbols. */
#if defined(__GNUC__)
#define TE_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define TE_PLUGIN_EXPORT
#endif

/**
 * The entry point every plugin defines (declared here so a wrong signature
 * fails to compile): `TE_PLUGIN_EXPORT const struct te_plugin_ops *
 * te_plugin_entry(uint32_t, uint32_t, char *, size_t) { ... }`.
 */
TE_PLUGIN_EXPORT const struct te_plugin_ops *te_plugin_entry(
    uint32_t core_major, uint32_t core_minor, char *err, size_t errlen);

/** Smallest struct_size a 1.x table may have (everything up to poll). */
#define TE_PLUGIN_OPS_MIN_SIZE_1_0                                             \
    (offsetof(struct te_plugin_ops, poll) + sizeof(void *))

#ifdef __cplusplus
}
#endif
#endif /* TE_PLUGIN_H */
