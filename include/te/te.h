/*
 * TransferEngine: portable one-sided RDMA point-to-point transfers.
 *
 * The only header applications include. Conventions:
 *  - Functions return 0 (or a non-negative value) on success and a negative
 *    errno value on failure. te_strerror() names the code; te_last_error()
 *    gives the engine's message for the most recent failure on the calling
 *    thread (e.g. "descriptor truncated: 12 of 40 bytes").
 *  - Handles are opaque; requests and descriptors are plain structs.
 *  - Public structs can grow without breaking binaries built against an
 *    older header (the "growth rule", docs/abi.md):
 *      * te_request starts with `size`, which the caller sets to
 *        sizeof(te_request) (te_request_init() does). The library reads
 *        only the caller's `size` bytes and treats fields past them as
 *        zero, so an older binary keeps working; bytes past the library's
 *        own layout must be zero (-E2BIG naming the offset otherwise), so a
 *        newer binary that uses a field this library lacks is refused
 *        rather than misread (the rule of Linux's openat2/clone3 structs).
 *      * Structs passed in arrays or embedded in others (te_route,
 *        te_scatter_dst, te_barrier_dst) have reserved fields that must be
 *        zero (-EINVAL naming the field otherwise); a later minor version
 *        gives them a meaning in which zero keeps today's behaviour.
 *      * Structs the library fills (te_completion, te_nic_info) have
 *        reserved fields the library sets to zero; a later minor version
 *        may fill them. Read them only when te_version() says they exist.
 *    Zero-initialise every public struct (= {0}, memset, te_request_init())
 *    so that fields unknown to you are zero.
 *  - Nothing blocks forever: every wait takes a timeout.
 *
 * Model: an engine drives one or more NIC groups (typically one per GPU).
 * Each group has its own worker thread, its own NICs and its own address.
 * Memory is registered on a group and is valid on every NIC of it. A peer is
 * a remote group, added from the address bytes it published. Requests are
 * split into shards over the group's NICs by deterministic rules
 * (docs/sharding.md); te_expected_imms() tells how many immediates the
 * receiver will count for a request.
 */
#ifndef TE_TE_H
#define TE_TE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Marks the library's exported functions. */
#if defined(__GNUC__)
#define TE_API __attribute__((visibility("default")))
#else
#define TE_API
#endif

/** Library version. */
#define TE_VERSION_MAJOR 0
#define TE_VERSION_MINOR 2
#define TE_VERSION_PATCH 0

/** Most NICs in one group (and entries in a memory descriptor). */
#define TE_MAX_NICS 16
/** Largest serialized engine address, in bytes. */
#define TE_ADDR_MAX 2200
/** Largest serialized memory descriptor, in bytes. */
#define TE_DESC_MAX (32 + 16 * TE_MAX_NICS)

typedef struct te_engine te_engine; /**< an engine (opaque) */
typedef struct te_config te_config; /**< configuration being built (opaque) */
typedef struct te_mr te_mr;         /**< a local memory registration (opaque) */
typedef uint32_t te_peer;           /**< a remote group added to a local group */

/* ---------------------------------------------------------------- errors */

/** Readable name of a (negative or positive) errno value. Never NULL. */
TE_API const char *te_strerror(int err);

/**
 * The message describing the most recent failure of a te_* call made by the
 * calling thread ("" if none). Valid until the thread's next te_* call.
 */
TE_API const char *te_last_error(void);

/** Library version string, e.g. "0.1.0". */
TE_API const char *te_version(void);

/* --------------------------------------------------------------- logging
 * One process-wide sink and threshold for everything the libraries log:
 * the core, the transport plugins (through the plugin host table), and the
 * apps' libraries (libte-kv, libte-weights, libte-moe, through
 * te_log_printf). By default each message is one line on stderr:
 *     transferengine <level>: <message>             (origin "core")
 *     transferengine <level>: <origin>: <message>   (anyone else)
 * with <level> one of error, warning, info, debug. docs/logging.md.
 */

/** Message levels; lower is more severe (engine.log_level uses the same
 *  numbers: 0 errors .. 3 debug). */
enum te_log_level {
    TE_LOG_ERROR = 0,
    TE_LOG_WARN = 1,
    TE_LOG_INFO = 2,
    TE_LOG_DEBUG = 3,
};

/**
 * A log sink. `level` is a te_log_level (0..3); `origin` says who logs,
 * never NULL: "core" (the engine itself), the plugin's name ("loopback",
 * "efa", "mlx5"), "te-kv", "te-weights", "te-moe", or what the caller of
 * te_log_printf() passed ("" for NULL); `msg` is one line without a
 * trailing newline and without the origin (the default output adds it).
 * Both strings are valid only during the call. `arg` is te_set_log_fn()'s.
 *
 * Called on whatever thread logs: an engine's worker or callback thread,
 * an application thread inside a te_* call, possibly several at once, and
 * possibly while the engine holds internal locks. So the sink must be
 * thread-safe, return promptly, and must not call into the engine other
 * than te_log_printf(), te_set_log_level() and te_set_log_fn() (a message
 * the sink logs itself, on its own thread, goes to the default stderr
 * output instead of back into the sink). errno is preserved around it.
 */
typedef void (*te_log_fn)(int level, const char *origin, const char *msg,
                          void *arg);

/**
 * Route every message to fn(level, origin, msg, arg); NULL restores the
 * default stderr output (the same bytes as ever). Process-wide, any
 * thread, any time, engines existing or not. Guarantee: when this returns,
 * no thread is still inside the previous sink and none will call it again,
 * so its `arg` may be freed; the price is that it waits for sink calls in
 * flight on other threads (so do not call it while holding a lock your
 * sink takes). Called from inside the sink itself it cannot wait for
 * itself: the change is applied when that sink call returns, on the same
 * thread.
 */
TE_API void te_set_log_fn(te_log_fn fn, void *arg);

/**
 * Process-wide threshold: messages with a level above it are dropped
 * before they are formatted; -1 drops everything; default TE_LOG_DEBUG
 * (drop nothing). It combines with each engine's engine.log_level
 * (default 1, warnings) as two ceilings: a message of an engine (the core
 * and its plugin) is delivered when its level is <= both, a message with
 * no engine (te_log_printf) when it is <= this one. So to see an engine's
 * info and debug messages raise engine.log_level (TE_ENGINE_LOG_LEVEL=3);
 * to quiet every engine and app at once lower this.
 */
TE_API void te_set_log_level(int level);

/**
 * Log a message (printf format) through the sink, from `origin` (e.g.
 * "te-kv"; NULL is ""), subject to te_set_log_level(). For applications
 * and the apps' libraries, so their messages go where the engine's go.
 * Messages longer than 1023 bytes are truncated.
 */
TE_API void te_log_printf(int level, const char *origin, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---------------------------------------------------------------- config */

/** Create an empty configuration (defaults apply to unset keys). */
TE_API te_config *te_config_new(void);

/** Free a configuration. NULL is allowed. */
TE_API void te_config_free(te_config *cfg);

/**
 * Load an INI file into cfg. Later loads and te_config_set() override
 * earlier values. Unknown sections/keys of the core and of a loaded plugin
 * are reported by te_engine_create(); syntax errors here (-EINVAL, message
 * with file:line). Keys are documented in conf/transferengine.ini.
 */
TE_API int te_config_load_file(te_config *cfg, const char *path);

/** Same as te_config_load_file() for an INI text in memory. */
TE_API int te_config_load_string(te_config *cfg, const char *ini_text);

/** Set one key: section "engine", key "plugin", value "loopback". */
TE_API int te_config_set(te_config *cfg, const char *section, const char *key,
                  const char *value);

/**
 * Effective value of section.key after environment overrides, or NULL.
 * Environment: TE_<SECTION>_<KEY> (upper case) overrides any key, e.g.
 * TE_ENGINE_PLUGIN=loopback; TE_PLUGIN is a shorthand for engine.plugin.
 * TE_PLUGIN_PATH is the plugin loader's own search path (searched before
 * engine.plugin_path), not a configuration key.
 */
TE_API const char *te_config_get(const te_config *cfg, const char *section,
                          const char *key);

/* ---------------------------------------------------------------- engine */

/**
 * Create an engine. cfg may be NULL: then the file named by TE_CONFIG, if
 * set, is loaded, else defaults are used (loopback plugin, one group of one
 * NIC). cfg is not retained. Returns 0 and *out, or -errno with the reason
 * in te_last_error() (unknown key, plugin not found, ABI mismatch, ...).
 */
TE_API int te_engine_create(const te_config *cfg, te_engine **out);

/**
 * Stop the workers and free everything. Requests still in flight complete
 * with -ECANCELED before this returns; registrations are released. Not from
 * the engine's own callbacks: there it is refused (logged at error level)
 * and the engine stays alive, since it would have to join the very thread
 * it runs on.
 */
TE_API void te_engine_destroy(te_engine *e);

/** Number of NIC groups of the engine. */
TE_API int te_engine_group_count(const te_engine *e);

/** Number of NICs of group g (or -EINVAL). */
TE_API int te_engine_nic_count(const te_engine *e, int group);

/** Name of the transport plugin in use (e.g. "loopback"). */
TE_API const char *te_engine_plugin_name(const te_engine *e);

/** Who moves an engine (engine.progress; "caller-driven progress" below). */
enum te_progress_mode {
    TE_PROGRESS_THREAD = 0, /**< engine threads: worker and callback */
    TE_PROGRESS_CALLER = 1, /**< no engine threads: te_progress() */
};

/**
 * The engine's progress mode (enum te_progress_mode), or -EINVAL for NULL.
 * For libraries built on an engine they do not own: in caller mode their
 * callbacks run only inside the application's progress calls, so a
 * library that waits for one must progress the engine itself while it
 * waits, or refuse such an engine.
 */
TE_API int te_engine_progress_mode(const te_engine *e);

/** Description of one NIC of a group (te_engine_nic_info()). */
typedef struct te_nic_info {
    char name[64];      /**< transport's device name, e.g. "lo0" */
    char pci_path[64];  /**< PCI bus id or "" */
    int32_t numa_node;  /**< -1 if unknown */
    int32_t device;     /**< plugin device index */
    uint64_t link_gbps; /**< 0 if unknown / uncapped */
    uint32_t queue_depth; /**< send queue depth */
    uint32_t reserved[9]; /**< zero; growth rule (top of this header) */
} te_nic_info;

/** Describe NIC `nic` of group `group`. */
TE_API int te_engine_nic_info(const te_engine *e, int group, int nic,
                              te_nic_info *out);

/**
 * Serialize the address of group g into buf (at most TE_ADDR_MAX bytes).
 * *len: buffer size in, bytes written out. -ENOSPC if too small (*len then
 * holds the size needed).
 */
TE_API int te_engine_address(te_engine *e, int group, void *buf, size_t *len);

/* ----------------------------------------------------------------- paths */

/**
 * Paths: how each kind of operation or registration is carried out on a
 * NIC, so that nothing degrades silently (docs/paths.md). A path has the
 * capabilities below; one it should have but lacks (an emulated immediate,
 * RMA done by messages, device memory staged through the host, a software
 * transport where a NIC was expected) is a degradation: logged once at
 * warning level by default, refused under the configuration key
 * engine.require (te_engine_create() fails, or te_mr_reg() for a memory
 * kind), with an error naming the capability, the NIC and the path.
 */
#define TE_CAP_ZERO_COPY 0x1u     /**< no bounce through a staging buffer */
#define TE_CAP_NATIVE_IMM 0x2u    /**< immediate carried by the transport */
#define TE_CAP_NATIVE_RMA 0x4u    /**< one-sided: no target software per op */
#define TE_CAP_DEVICE_DIRECT 0x8u /**< the NIC reaches device memory itself */
#define TE_CAP_HARDWARE 0x10u     /**< an RDMA NIC, not a software transport */
#define TE_CAP_AUTO_PROGRESS 0x20u /**< data moves without the target polling */
/** engine.require = fast: the capabilities whose loss slows a path down. */
#define TE_CAP_FAST (TE_CAP_ZERO_COPY | TE_CAP_NATIVE_IMM | TE_CAP_NATIVE_RMA | \
                     TE_CAP_DEVICE_DIRECT)

/** Kinds of paths (te_path_info.kind). */
enum te_path_kind {
    TE_PATH_WRITE = 1,     /**< write without immediate */
    TE_PATH_WRITE_IMM = 2, /**< write with immediate, barrier */
    TE_PATH_READ = 3,      /**< read */
    TE_PATH_SEND = 4,      /**< send/receive */
    TE_PATH_MEM_HOST = 5,  /**< host memory registration */
    TE_PATH_MEM_CUDA = 6,  /**< CUDA memory registration */
};

/** One path of a NIC (te_engine_paths()). */
typedef struct te_path_info {
    uint32_t kind;        /**< enum te_path_kind */
    uint32_t caps;        /**< TE_CAP_* the path has */
    uint32_t missing;     /**< TE_CAP_* it should have and lacks */
    uint32_t refused;     /**< missing & engine.require: te_mr_reg refuses it */
    char text[192];       /**< how the plugin carries it out */
    uint64_t reserved[4]; /**< zero; growth rule */
} te_path_info;

/**
 * The paths of NIC `nic` of group `group`: up to max entries in out;
 * returns how many the NIC has (possibly more than max), or -errno. A
 * plugin that does not describe its paths (plugin ABI 1.0) has none.
 */
TE_API int te_engine_paths(const te_engine *e, int group, int nic,
                           te_path_info *out, int max);

/** Name of a path kind ("write", "mem_cuda", ...), "?" if unknown. */
TE_API const char *te_path_kind_name(uint32_t kind);

/**
 * Names of the TE_CAP_* bits of caps, comma-separated ("native_rma,
 * hardware"), into buf; returns buf ("" when caps is 0).
 */
TE_API const char *te_cap_names(uint32_t caps, char *buf, size_t len);

/* ----------------------------------------------------------------- peers */

/**
 * Add the remote group whose serialized address is addr[0..len) as a peer of
 * local group g. The bytes are validated (version, length, checksum,
 * transport name). Adding the same address twice returns the same peer.
 */
TE_API int te_peer_add(te_engine *e, int group, const void *addr, size_t len,
                te_peer *out);

/**
 * Remove a peer; its in-flight requests fail with -ECONNABORTED, also those
 * submitted but not yet posted. A group holds at most 1024 peers at a time,
 * live or down: removing one (a down one too) frees its slot for a later
 * te_peer_add(), which returns a new handle; the removed handle stays
 * invalid (-ENOENT) and never names the new peer.
 */
TE_API int te_peer_remove(te_engine *e, int group, te_peer peer);

/**
 * Whether a peer is usable, without sending anything: 0 while it is live,
 * -ECONNRESET once the engine has declared it down (the transport lost it,
 * its process exited, it closed the conversation, it was refused, or it
 * stayed silent past engine.peer_timeout_ms: te_last_error() and the log
 * name which, in the transport's own words when it gave any), -ENOENT for
 * a handle that is not a peer of the group. A down peer stays down;
 * te_peer_add() of its address again gives a fresh handle once it is back.
 * Lock-free; callable from any thread and from callbacks, e.g. by an
 * application that waits on messages or immediates from a peer it never
 * writes to, and so would otherwise learn of its death only at its own
 * deadline.
 */
TE_API int te_peer_status(te_engine *e, int group, te_peer peer);

/* ---------------------------------------------------------------- memory */

/** Registration access flags. */
#define TE_MR_REMOTE_WRITE 0x1u /**< peers may write into it */
#define TE_MR_REMOTE_READ 0x2u  /**< peers may read from it */
#define TE_MR_LOCAL 0x0u        /**< source/target of local ops only */

/** Memory kinds. */
#define TE_MEM_HOST 0u /**< host memory */
#define TE_MEM_CUDA 1u /**< CUDA device memory (needs TE_WITH_CUDA) */

/**
 * Register [addr, addr+len) on every NIC of group g. Registrations are keyed
 * by address range: overlapping registrations are allowed and distinct.
 * len must be > 0.
 */
TE_API int te_mr_reg(te_engine *e, int group, void *addr, size_t len,
              uint32_t access, uint32_t mem_kind, te_mr **out);

/**
 * Deregister on every NIC of the group. Returns only when no remote write
 * can still land in the region. -EBUSY while local requests still use it
 * (mr stays valid). Any other error comes from a NIC that refused to
 * deregister: mr is freed all the same (do not use it again), but that NIC
 * may still honour its key, so keep the memory out of reuse. The -EBUSY
 * decision is one atomic step against te_submit on other threads: either a
 * request took the registration first (this call: -EBUSY) or this call
 * did (that te_submit: -EBUSY, "being deregistered or revoked"); no
 * request ever runs on a registration being freed. But the handle is
 * freed when this call returns 0, like free(): a te_submit that may still
 * be handed mr must not run concurrently with a dereg that can succeed.
 */
TE_API int te_mr_dereg(te_engine *e, te_mr *mr);

/** Base address and length of a registration. */
TE_API void *te_mr_addr(const te_mr *mr);
TE_API size_t te_mr_len(const te_mr *mr);

/**
 * A parsed memory descriptor of a remote (or local) registration: the base
 * address, length and one (rkey, remote base) per NIC of its group. Plain
 * data: copy it freely.
 */
typedef struct te_mr_desc {
    uint64_t addr;      /**< base address at the owner */
    uint64_t len;       /**< length in bytes */
    uint32_t access;    /**< TE_MR_* */
    uint32_t nic_count; /**< entries used in nic[] */
    struct {
        uint64_t rkey;        /**< remote key on that NIC */
        uint64_t remote_base; /**< transport address of byte 0 */
    } nic[TE_MAX_NICS];
} te_mr_desc;

/** Fill a descriptor of a local registration. */
TE_API int te_mr_describe(const te_mr *mr, te_mr_desc *out);

/**
 * Revoke every remote access granted so far to a registration, without
 * unregistering it: the region gets new keys on every NIC (the old ones are
 * deregistered), so descriptors handed out before stop working, and this
 * returns only when no remote write or read made with an old key can still
 * land (the plugin's mr_dereg quiescence; docs/architecture.md). Use it to
 * reuse memory after cancelling a transfer whose writer may still be
 * sending (e.g. KV pages). Writes with an old descriptor then fail at the
 * writer with a remote access error. *new_desc (may be NULL) receives the
 * new descriptor. -EBUSY while local requests still use the registration.
 * If a new key cannot be made, nothing changes (the old keys stay valid).
 * If an old key's deregistration fails (-EIO and the like), the
 * registration already holds the new keys but that old key may still be
 * honoured: treat the memory as writable by old holders (quarantine it).
 * As with te_mr_dereg(), a te_submit on another thread that
 * uses mr either came first (this call: -EBUSY) or fails with -EBUSY while
 * the keys are being replaced; no request runs on half-replaced keys.
 */
TE_API int te_mr_revoke(te_engine *e, te_mr *mr, te_mr_desc *new_desc);

/**
 * Serialize a descriptor to buf (TE_DESC_MAX bytes suffice). *len: buffer
 * size in, bytes written out.
 */
TE_API int te_desc_serialize(const te_mr_desc *d, void *buf, size_t *len);

/**
 * Parse untrusted bytes into a descriptor. Never reads outside
 * buf[0..len); -EBADMSG/-EPROTO/-EINVAL with a message for truncated,
 * corrupt or wrong-version input.
 */
TE_API int te_desc_parse(const void *buf, size_t len, te_mr_desc *out);

/* -------------------------------------------------------------- requests */

/** Request kinds. */
enum te_op {
    TE_OP_WRITE = 1,   /**< single write, optional imm */
    TE_OP_PAGED = 2,   /**< paged writes */
    TE_OP_SCATTER = 3, /**< one source, many destinations */
    TE_OP_BARRIER = 4, /**< imm-only to many peers */
    TE_OP_READ = 5,    /**< one-sided read */
    TE_OP_SEND = 6,    /**< two-sided small message */
};

/** Request flags. */
#define TE_F_IMM 0x1u /**< carry req->imm (WRITE, PAGED, SCATTER) */

/**
 * NIC routing. TE_ROUTE_SHARD splits over up to `nics` NICs of the group
 * (0 = all). TE_ROUTE_PIN sends everything on NIC `nic`.
 */
enum te_route_kind { TE_ROUTE_SHARD = 0, TE_ROUTE_PIN = 1 };
typedef struct te_route {
    uint32_t kind;     /**< enum te_route_kind */
    uint32_t nics;     /**< SHARD: most NICs to use (0 = all) */
    uint32_t nic;      /**< PIN: the NIC index */
    uint32_t reserved; /**< must be zero (growth rule) */
} te_route;

/** Scatter split policy. */
enum te_scatter_split {
    TE_SCATTER_BY_PEER = 0, /**< destination i goes whole on NIC i mod k */
    TE_SCATTER_BY_BYTES = 1 /**< every destination is sharded like a write */
};

/** One destination of a scatter. */
typedef struct te_scatter_dst {
    te_peer peer;          /**< destination peer */
    uint32_t reserved0;    /**< must be zero (growth rule) */
    const te_mr_desc *dst; /**< destination region */
    uint64_t dst_off;      /**< offset into dst */
    uint64_t src_off;      /**< offset into the source registration */
    uint64_t len;          /**< bytes */
    uint64_t reserved[2];  /**< must be zero (growth rule) */
} te_scatter_dst;

/** One target of a barrier. */
typedef struct te_barrier_dst {
    te_peer peer;          /**< target */
    uint32_t reserved0;    /**< must be zero (growth rule) */
    const te_mr_desc *dst; /**< a region of the target (some NICs need a key) */
    uint64_t reserved;     /**< must be zero (growth rule) */
} te_barrier_dst;

/** Completion record (also delivered to callbacks). */
typedef struct te_completion {
    uint64_t user_data; /**< the request's user_data */
    uint64_t req_id;    /**< the id te_submit() returned */
    int32_t status;     /**< 0 or negative errno */
    uint32_t op;        /**< enum te_op */
    char reason[96];    /**< on failure: what went wrong, else "" */
    uint64_t reserved[4]; /**< zero; growth rule (top of this header) */
} te_completion;

/** Request completion callback; runs on the engine's callback thread. */
typedef void (*te_done_fn)(const te_completion *c, void *arg);

/**
 * A request. Arrays and descriptors it points to are copied by te_submit():
 * the caller may reuse them as soon as te_submit() returns. Local
 * registrations must stay registered until the request completes.
 */
typedef struct te_request {
    /** sizeof(te_request) as the caller was compiled (te_request_init()) */
    uint32_t size;
    uint32_t op;        /**< enum te_op */
    uint32_t flags;     /**< TE_F_* */
    uint32_t imm;       /**< immediate when TE_F_IMM (and always for BARRIER) */
    int32_t group;      /**< local group submitting */
    /**
     * Deadline in ms from submission: 0 = engine.request_timeout_ms,
     * < 0 = none. A request still unfinished then fails with -ETIMEDOUT.
     * Its local registration stays referenced (te_mr_dereg: -EBUSY) until
     * the transport has returned every operation it was given.
     */
    int32_t timeout_ms;
    te_route route;     /**< NIC routing */
    uint64_t user_data; /**< returned in the completion */
    te_done_fn done;    /**< callback, or NULL to use te_poll_completions() */
    void *done_arg;     /**< passed to done */
    union {
        struct { /* TE_OP_WRITE and TE_OP_READ */
            te_peer peer;
            te_mr *local;          /**< WRITE: source; READ: destination */
            uint64_t local_off;
            const te_mr_desc *remote; /**< WRITE: destination; READ: source */
            uint64_t remote_off;
            uint64_t len;
        } xfer;
        struct { /* TE_OP_PAGED: page k: src+src_stride*src_idx[k] ->
                    dst+dst_stride*dst_idx[k], page_len bytes each */
            te_peer peer;
            te_mr *src;
            uint64_t src_off;
            uint64_t src_stride;
            const uint32_t *src_idx;
            const te_mr_desc *dst;
            uint64_t dst_off;
            uint64_t dst_stride;
            const uint32_t *dst_idx;
            uint64_t page_len;
            uint32_t count; /**< number of pages */
        } paged;
        struct { /* TE_OP_SCATTER */
            te_mr *src;
            uint32_t split; /**< enum te_scatter_split */
            uint32_t count;
            const te_scatter_dst *dsts;
        } scatter;
        struct { /* TE_OP_BARRIER */
            uint32_t count;
            const te_barrier_dst *dsts;
        } barrier;
        struct { /* TE_OP_SEND */
            te_peer peer;
            const void *buf; /**< copied at submit */
            uint32_t len;    /**< at most engine.max_msg_size */
        } send;
    } u;
} te_request;

/**
 * Smallest te_request.size the library accepts: the layout of version 0.2,
 * the first with the growth rule. Later fields are appended after it.
 */
#define TE_REQUEST_SIZE_V0_2 152u

/**
 * Start a request: zero every field (so fields unknown to the caller are
 * zero) and set size and op. Equivalent to
 * `te_request r = {.size = sizeof(te_request), .op = op};`.
 */
static inline void te_request_init(te_request *r, uint32_t op)
{
    memset(r, 0, sizeof(*r));
    r->size = (uint32_t)sizeof(*r);
    r->op = op;
}

/**
 * Submit a request to its group's worker. Never blocks: -EAGAIN when the
 * submission queue is full. When no thread is in the group's turn (the
 * worker between turns or blocked idle; caller mode: nobody progressing),
 * the calling thread posts the request itself, so it leaves without
 * waiting for a sleeping worker to wake; otherwise it is queued. Returns
 * a request id (> 0) on success. Input is validated here (bounds, keys present, peer known, NIC count): a bad
 * request fails immediately with a message and nothing is sent.
 * Completion is reported exactly once, to req->done or to the queue.
 */
TE_API int64_t te_submit(te_engine *e, const te_request *req);

/**
 * Number of immediates the receiver of destination `target` (0 for
 * requests with a single peer; the scatter/barrier index otherwise) will
 * count for this request, or -errno. 0 when the request carries no imm.
 */
TE_API int64_t te_expected_imms(te_engine *e, const te_request *req, uint32_t target);

/**
 * Fetch up to max completions of requests submitted without a callback.
 * timeout_ms: 0 = do not wait, > 0 = wait at most that long for the first.
 * Returns the number fetched.
 */
TE_API int te_poll_completions(te_engine *e, te_completion *out, int max,
                        int timeout_ms);

/* ------------------------------------------------------------ ImmCounter */

/** Called when an expectation is met (count reached) or cancelled. */
typedef void (*te_imm_fn)(uint32_t imm, int status, void *arg);

/**
 * Expect `count` arrivals of immediate imm (count > 0). -ESTALE when imm is
 * a value of a retired life or a destroyed immediate space (see below).
 * Arrivals before this
 * call are banked and count towards it; if enough are banked, cb fires at
 * once (still on the callback thread). When met, `count` arrivals are
 * consumed and the expectation ends (re-arm with another call); surplus
 * arrivals stay banked. One expectation per imm at a time (-EBUSY).
 * cb may be NULL: te_imm_poll() then shows it met (armed turns 0; the
 * count is consumed). te_imm_wait() is the alternative to an expectation,
 * not a way to wait for one: it answers -EBUSY while one is armed.
 */
TE_API int te_imm_expect(te_engine *e, uint32_t imm, uint64_t count, te_imm_fn cb,
                  void *arg);

/**
 * te_imm_expect() with a deadline: if the expectation is still unmet after
 * timeout_ms, it is disarmed and cb(imm, -ETIMEDOUT, arg) runs instead
 * (arrivals so far stay banked; te_imm_poll() shows them). cb runs exactly
 * once either way; at te_engine_destroy() an unmet one gets -ECANCELED.
 * cb must not be NULL; timeout_ms > 0.
 */
TE_API int te_imm_expect_timeout(te_engine *e, uint32_t imm, uint64_t count,
                                 int timeout_ms, te_imm_fn cb, void *arg);

/**
 * Current banked arrivals of imm not yet consumed by a met expectation, and
 * whether an expectation is armed (*armed may be NULL).
 */
TE_API int te_imm_poll(te_engine *e, uint32_t imm, uint64_t *banked, int *armed);

/**
 * Wait (spinning, then yielding) until `count` arrivals of imm are banked,
 * then consume them. -ETIMEDOUT after timeout_ms (nothing consumed).
 * -EBUSY if a callback expectation is armed on imm.
 */
TE_API int te_imm_wait(te_engine *e, uint32_t imm, uint64_t count, int timeout_ms);

/**
 * Remove imm's counter: disarm any expectation (its cb is NOT called) and
 * return the banked arrivals in *surplus (may be NULL). Later arrivals
 * start a fresh count.
 */
TE_API int te_imm_remove(te_engine *e, uint32_t imm, uint64_t *surplus);

/**
 * te_imm_remove() that also says whether imm's callback can still run,
 * so that its arg can be freed safely: 1 if it took an armed, unmet
 * expectation away (its cb is never called); 0 if none was armed, which
 * includes one met or timed out just before: its cb is then queued or
 * running and runs exactly once, so arg must stay valid until it has.
 * Negative errno on bad arguments.
 */
TE_API int te_imm_disarm(te_engine *e, uint32_t imm, uint64_t *surplus);

/* ----------------------------------------------------- immediate spaces */

/**
 * An immediate space: a named range of immediate values reserved for one
 * subsystem of the process (KV-cache transfer, weight updates, MoE, ...),
 * so that two subsystems sharing an engine can never count each other's
 * arrivals (docs/imm-counter.md, "Spaces"). A space has `size` values
 * (indexes 0..size-1) in each of `lives` lives; te_imm_space_retire() starts
 * a new life, whose raw values differ from the previous ones, so late
 * arrivals of an earlier life are counted as stale (reported by
 * te_imm_space_stats()) and never credited to the current life. Spaces are
 * receiver-side: hand the raw values (te_imm_space_value()) to the writers.
 * Raw values outside every space keep working as before.
 */
typedef struct te_imm_space te_imm_space;

/** te_imm_space_create() flag: place the space at `base` exactly. */
#define TE_IMM_SPACE_FIXED 0x1u

/** Defaults of te_imm_space_create(): where spaces are placed. */
#define TE_IMM_SPACE_REGION_START 0x80000000u
/** Lives per space when `lives` is 0. */
#define TE_IMM_SPACE_DEFAULT_LIVES 16u
/** Most spaces an engine holds at once (live or destroyed-but-quarantined). */
#define TE_IMM_SPACE_MAX 64

/**
 * Reserve a space of `size` values (1..2^24) per life and `lives` lives
 * (0 = TE_IMM_SPACE_DEFAULT_LIVES; a power of two, 2..256): size * lives
 * consecutive raw values. name (1..31 characters) names it in errors and
 * logs. Without TE_IMM_SPACE_FIXED the range is chosen at or above
 * TE_IMM_SPACE_REGION_START (so raw values below 2^31 stay free for code
 * that does not use spaces) and `base` is ignored; with it the range starts
 * at `base` (e.g. the same base on every rank of a job). Errors: -EINVAL
 * (bad size, lives, name or flags), -EADDRINUSE (overlaps the named space),
 * -ENOSPC (no free range, or TE_IMM_SPACE_MAX spaces). Arrivals banked on
 * the range's raw values before are dropped; an expectation armed on one
 * ends with -ECANCELED (its callback runs once, on the callback thread).
 */
TE_API int te_imm_space_create(te_engine *e, const char *name, uint32_t size,
                               uint32_t lives, uint32_t flags, uint32_t base,
                               te_imm_space **out);

/**
 * The raw immediate of value `index` in the space's current life: use it in
 * te_request.imm (at the writer) and te_imm_expect()/te_imm_wait()/... (at
 * this receiver). -ERANGE if index >= size, -ESTALE if the space was
 * destroyed.
 */
TE_API int te_imm_space_value(const te_imm_space *s, uint32_t index,
                              uint32_t *raw);

/**
 * Start the next life: every value of the current life is removed from the
 * ImmCounter (banked arrivals are dropped and counted in
 * retired_surplus; armed expectations are disarmed and their callbacks
 * run with -ECANCELED), then the space's values move to the next life's
 * raw range. Arrivals for any earlier life from then on are counted in
 * stale_arrivals and never banked. After `lives` retirements the raw
 * values repeat: a write delayed across that many lives would be counted.
 * O(size). -ESTALE if destroyed.
 */
TE_API int te_imm_space_retire(te_imm_space *s);

/** Counters of a space (te_imm_space_stats()). */
typedef struct te_imm_space_stats {
    uint32_t base;            /**< first raw value of the whole range */
    uint32_t size;            /**< values per life */
    uint32_t lives;           /**< lives before raw values repeat */
    uint32_t life;            /**< current life index (0..lives-1) */
    uint64_t epoch;           /**< retirements so far */
    uint64_t stale_arrivals;  /**< arrivals for a retired life (not banked) */
    uint64_t retired_surplus; /**< banked arrivals dropped by retirements */
    uint64_t reserved[4];     /**< zero; growth rule */
} te_imm_space_stats;

/** Fill *out. -ESTALE (still filled) if destroyed. */
TE_API int te_imm_space_stats_get(const te_imm_space *s,
                                  te_imm_space_stats *out);

/**
 * The space, if any, that raw value imm belongs to, and the index and life
 * of imm in it: returns 1 and fills what is non-NULL, 0 when imm is in no
 * space. For logs and debugging of miscounts.
 */
TE_API int te_imm_space_lookup(te_engine *e, uint32_t imm, const char **name,
                               uint32_t *index, uint32_t *life);

/**
 * Remove the space: like te_imm_space_retire() for its current life, then
 * its range stays quarantined (arrivals counted as stale, expectations on
 * it refused with -ESTALE) until a later te_imm_space_create() needs the
 * room. The handle stays valid for te_imm_space_stats_get() until
 * te_engine_destroy(); every other use returns -ESTALE.
 */
TE_API int te_imm_space_destroy(te_imm_space *s);

/* --------------------------------------------------------------- messages */

/** Received-message callback; data valid only during the call. */
typedef void (*te_recv_fn)(int group, te_peer from, const void *data,
                           size_t len, void *arg);

/**
 * Install the receive callback of group g (NULL to drop messages). The
 * engine keeps engine.recv_depth buffers of engine.max_msg_size posted and
 * refills them in batches. `from` is the peer handle if the sender was
 * added as a peer of g, else TE_PEER_UNKNOWN. The swap is synchronous:
 * when it returns, the previous fn is not running and is never called
 * again, so its arg can be freed at once. Messages still queued for the
 * callback thread go to the handler installed when they are delivered (or
 * are dropped if it is NULL). It waits for every call of a previous fn in
 * progress on another thread (the callback thread; with engine.progress =
 * caller, each thread that progresses the engine at once): do not call it
 * holding a lock that the handler takes. A handler may call it for its own
 * group (it does not wait for itself, nor for another call that is
 * swapping the handler at the same time).
 */
TE_API int te_set_recv_handler(te_engine *e, int group, te_recv_fn fn, void *arg);

/** Value of `from` for a sender that is not a known peer. */
#define TE_PEER_UNKNOWN 0xffffffffu

/* ------------------------------------------------ caller-driven progress */

/*
 * Who moves the engine (engine.progress, docs/progress.md):
 *
 *  - `thread` (default): one worker thread per group posts, polls and runs
 *    deadlines; one callback thread runs every callback. An idle worker
 *    blocks on its NICs' wait objects (engine.idle_wait). Any thread may
 *    call any function.
 *  - `caller`: no engine threads at all. Nothing moves unless the
 *    application calls te_progress() (or a blocking call below), like
 *    libfabric's FI_PROGRESS_MANUAL or UCX's ucp_worker_progress(): for a
 *    latency-bound single thread (a decode loop, a MoE proxy) or a small
 *    machine, it saves the hand-offs between threads. Callbacks run inside
 *    te_progress(), on the calling thread. Requests, peers, registrations,
 *    expectations and messages behave as in thread mode; deadlines,
 *    heartbeats and peer liveness are checked only while the engine is
 *    progressed.
 *
 * te_submit() posts the request itself when no other thread is in the
 * group's turn (the operation leaves at once), in both modes; in caller
 * mode its completion and callbacks still wait for a progress call, in
 * thread mode the worker is rung to take them.
 *
 * Thread rules in caller mode: one thread at a time progresses a group
 * (another gets -EBUSY, never a deadlock); any thread may submit, add and
 * remove peers (run at once, waiting for a progress call of the group in
 * progress, never from inside that group's turn) or register memory.
 * te_poll_completions() and te_imm_wait() progress the engine themselves
 * (te_poll_completions with timeout 0: one te_progress of every group when
 * no completion is queued; with a timeout: until one comes); from inside a
 * callback they only wait. A callback may submit, arm expectations and add peers, but not
 * call te_progress() (-EDEADLK) or te_engine_destroy() (refused, logged).
 * With several threads progressing different groups, callbacks run on
 * those threads, concurrently.
 */

/**
 * Caller mode: one turn of group `group` (-1: every group): take queued
 * submissions, post, poll the NICs, handle completions and deadlines, then
 * run queued callbacks (all of them when budget is 0, else at most
 * budget). Never blocks. Returns > 0 when it did something (keep calling),
 * 0 when there was nothing to do, or -EINVAL (thread mode, bad group or
 * budget), -EBUSY (the group is being progressed by another thread),
 * -EDEADLK (called from one of this engine's callbacks).
 */
TE_API int te_progress(te_engine *e, int group, int budget);

/**
 * Caller mode: te_progress() until it does something, blocking in between
 * on the group's wait objects (a NIC's, or a submission from another
 * thread) for at most timeout_ms in all. Returns te_progress()'s result:
 * 0 when timeout_ms passed with nothing to do. Where the plugin offers no
 * wait objects it naps between tries: engine.idle_sleep_us, growing with
 * the time the call has found nothing (to an eighth of it, at most
 * engine.idle_sleep_max_us) while no request is in flight; where a NIC
 * cannot arm yet (work it holds), engine.idle_sleep_us. A submission from
 * another thread ends a nap.
 */
TE_API int te_progress_wait(te_engine *e, int group, int timeout_ms);

/**
 * Caller mode, for an application's own event loop: a file descriptor
 * (epoll; `group` -1: every group's) that becomes readable when the group
 * has work, once te_progress_arm() returned 0. Owned by the engine.
 * -EOPNOTSUPP where the plugin offers no wait objects (efa over shm with
 * efa.shm_bell = false): poll te_progress() instead.
 */
TE_API int te_progress_fd(te_engine *e, int group);

/**
 * Caller mode: prepare to block on te_progress_fd(): 0 when it is safe to
 * (every later event makes the fd readable; the next te_progress() ends
 * the armed state), -EAGAIN when there is work now (call te_progress()
 * first), -EBUSY when another thread is progressing the group. Like
 * ucp_worker_arm() or fi_trywait().
 */
TE_API int te_progress_arm(te_engine *e, int group);

/* ------------------------------------------------------------------ CUDA
 * GPU memory and GPU-visible completion (docs/cuda.md). The library loads
 * the CUDA driver (libcuda.so.1) at run time: every call below works in any
 * build and on any host, and fails with a reason (te_last_error()) where
 * CUDA is not usable: built with TE_WITH_CUDA=OFF, no driver, a stub driver,
 * no device. Device pointers are CUDA unified addresses (CUdeviceptr /
 * cudaMalloc results cast to void *).
 */

/**
 * 0 if CUDA memory can be used in this process; else a negative errno and,
 * if why is not NULL, the reason ("CUDA memory needs libcuda.so.1: not
 * found", the driver's own cuInit error, "built without CUDA") copied into
 * why[0..len). The first call loads the driver; later calls cost nothing.
 */
TE_API int te_cuda_status(char *why, size_t len);

#define TE_CUDA_PTR_HOST 0u         /**< host memory CUDA does not know */
#define TE_CUDA_PTR_HOST_PINNED 1u  /**< host memory pinned/mapped by CUDA */
#define TE_CUDA_PTR_DEVICE 2u       /**< device memory (cuMemAlloc, cudaMalloc) */
#define TE_CUDA_PTR_MANAGED 3u      /**< managed (unified) memory */

/** What the CUDA driver says about an address range (te_cuda_pointer_info). */
typedef struct te_cuda_ptr_info {
    uint32_t kind;        /**< TE_CUDA_PTR_* */
    int32_t device;       /**< CUDA ordinal owning it; -1 for host kinds */
    uint64_t alloc_base;  /**< start of the enclosing allocation (0 if host) */
    uint64_t alloc_len;   /**< its length (0 if host) */
    uint32_t dmabuf;      /**< 1: the device can export it as a dma-buf */
    uint32_t reserved;    /**< zero */
} te_cuda_ptr_info;

/**
 * Classify [ptr, ptr+len): host, pinned host, device (which ordinal) or
 * managed, and whether a dma-buf export is possible. This is the single
 * place the library decides it: te_mr_reg() uses it for TE_MEM_CUDA (and,
 * once CUDA is loaded, to refuse device memory registered as TE_MEM_HOST),
 * and te-info shows it. Errors: CUDA unusable (reason as te_cuda_status()),
 * -ERANGE when a device range runs past its allocation (len > 0).
 */
TE_API int te_cuda_pointer_info(const void *ptr, size_t len,
                                te_cuda_ptr_info *out);

/**
 * A 32-bit flag in GPU-visible memory that the library writes when an
 * ImmCounter expectation completes, so a running CUDA kernel can spin on it
 * (kernels/te_cuda_kernels.h: te_k_spin_flag). It lives in host-pinned
 * memory mapped into the device (cuMemHostAlloc DEVICEMAP): the completing
 * CPU thread stores the value with release order; no driver call and no
 * stream sit on the completion path (docs/cuda.md says why this over
 * cuStreamWriteValue32).
 */
typedef struct te_gpu_flag te_gpu_flag;

/** Value written into a flag whose expectation failed (timeout, cancel). */
#define TE_GPU_FLAG_FAILED 0xffffffffu

/** Allocate a flag (initially 0) visible to device `device`. */
TE_API int te_gpu_flag_create(int device, te_gpu_flag **out);

/** Free a flag; -EBUSY while an expectation is armed on it. */
TE_API int te_gpu_flag_destroy(te_gpu_flag *f);

/** The flag's address for kernels (a device pointer to uint32_t). */
TE_API void *te_gpu_flag_device_ptr(const te_gpu_flag *f);

/** The flag's current value, read by the CPU. */
TE_API uint32_t te_gpu_flag_read(const te_gpu_flag *f);

/** Store v into the flag (e.g. reset to 0 before re-arming). */
TE_API void te_gpu_flag_store(te_gpu_flag *f, uint32_t v);

/**
 * te_imm_expect_timeout() whose completion stores `value` (not 0, not
 * TE_GPU_FLAG_FAILED) into f; on timeout or cancel it stores
 * TE_GPU_FLAG_FAILED, so a kernel spinning on the flag always finishes.
 * One armed expectation per flag (-EBUSY). timeout_ms > 0.
 */
TE_API int te_imm_expect_gpu_flag(te_engine *e, uint32_t imm, uint64_t count,
                                  int timeout_ms, te_gpu_flag *f,
                                  uint32_t value);

/**
 * Forget the expectation armed on f after te_imm_disarm() took it away
 * (returned 1: its completion never comes then), so that f can be re-armed
 * or freed. After a 0 the completion is queued and clears the arming
 * itself: do not call this then (a late store could meet a re-armed flag).
 */
TE_API void te_gpu_flag_disarm(te_gpu_flag *f);

/**
 * The watcher (the paper's alloc_uvm_watcher): a 64-bit word in GPU-visible
 * memory (host-pinned, mapped) that kernels bump, also kernels captured in a
 * CUDA graph and replayed; a CPU thread of the watcher sees each change and
 * calls cb(old, new, arg) on that thread, in order.
 */
typedef struct te_gpu_watcher te_gpu_watcher;

/** Watcher callback: the word changed from old_value to new_value. */
typedef void (*te_gpu_watch_fn)(uint64_t old_value, uint64_t new_value,
                                void *arg);

/**
 * Treat the word as a counter bumped by +1 steps: one callback per step,
 * (k, k+1), even where several bumps land between two looks of the CPU.
 * Without it, one callback per observed change (old, new).
 */
#define TE_GPU_WATCH_EACH_STEP 0x1u

/**
 * Spin without pause: lowest latency, one CPU core busy. Without it, the
 * thread spins while changes come and, after 1 ms without any, looks every
 * 50 us (a change is then seen up to 50 us late), and after 100 ms without
 * any every 1 ms (an idle watcher costs about nothing; the first change
 * after such a pause is seen up to 1 ms late, the next ones at once).
 */
#define TE_GPU_WATCH_SPIN 0x2u

/** Create a watcher (word = 0) for device `device` and start its thread. */
TE_API int te_gpu_watcher_create(int device, uint32_t flags,
                                 te_gpu_watch_fn cb, void *arg,
                                 te_gpu_watcher **out);

/** The word's address for kernels (a device pointer to unsigned long long). */
TE_API void *te_gpu_watcher_device_ptr(const te_gpu_watcher *w);

/** The last value whose callback has returned. */
TE_API uint64_t te_gpu_watcher_delivered(const te_gpu_watcher *w);

/**
 * Wait until the callback for a value >= `value` has returned;
 * -ETIMEDOUT after timeout_ms (> 0).
 */
TE_API int te_gpu_watcher_wait(te_gpu_watcher *w, uint64_t value,
                               int timeout_ms);

/**
 * Stop the thread (after delivering changes already visible) and free the
 * word. Not from inside the callback (-EDEADLK).
 */
TE_API int te_gpu_watcher_destroy(te_gpu_watcher *w);

#ifdef __cplusplus
}
#endif
#endif /* TE_TE_H */
