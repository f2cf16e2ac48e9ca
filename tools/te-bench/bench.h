/*
 * te-bench: the benchmark tool of TransferEngine. Shared declarations.
 *
 * Shape: a CLIENT drives every test; a SERVER owns the receiving engines.
 * Both speak a small framed protocol over a stream socket (ctrl.c): a
 * socketpair with the server in a thread (one process), or TCP on
 * 127.0.0.1 with the server in a forked child or another te-bench started
 * with --server (two processes). The same code path serves every mode, so
 * one-process and two-process numbers differ only by the transport's own
 * cross-process cost.
 *
 * Only the public API (te/te.h) is used. The two latency tests that need
 * to see the plugin boundary (scatter posting, imm arrival -> callback)
 * load the optional probe (probe/te_bench_probe.c), a transparent plugin
 * that wraps the real one through the public plugin ABI (te/plugin.h).
 */
#ifndef TE_BENCH_H
#define TE_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "te/te.h"

#define TB_VERSION "0.1.0"
#define TB_MAX_SIZES 64
#define TB_MAX_SETS 64
#define TB_MAX_PEERS 256
#define TB_DEFAULT_PORT 18515
/* Loopback copies requests of this many bytes and more with its copy
 * engines (LB_PAR_MIN_LEN of plugins/loopback/lb_engine.c). */
#define TB_LB_PAR_MIN (16u << 10)

/* ---------------------------------------------------------------- tests */

enum tb_test {
    TB_T_WRITE = 0,  /* single write bandwidth */
    TB_T_PAGED,      /* paged writes bandwidth */
    TB_T_SCATTER,    /* scatter bandwidth to --peers destinations */
    TB_T_READ,       /* one-sided read bandwidth */
    TB_T_IMM,        /* imm-only (WriteImm) rate counted by an ImmCounter */
    TB_T_SEND,       /* two-sided send/recv: rate and ping-pong latency */
    TB_T_POST,       /* scatter posting latency to --peers peers */
    TB_T_IMMLAT,     /* imm arrival -> ImmCounter callback latency */
    TB_T_COUNT
};

const char *tb_test_name(int t);
int tb_test_parse(const char *s); /* -1 if unknown */

enum tb_mode {
    TB_M_INPROC = 0, /* server in a thread of this process */
    TB_M_TWOPROC,    /* server in a forked child, TCP on --addr */
    TB_M_SERVER,     /* serve one client on --addr:--port */
    TB_M_CLIENT,     /* connect to a --server on --addr:--port */
};

/* ------------------------------------------------------------- options */

struct tb_opts {
    int tests[TB_T_COUNT];
    int ntests;
    uint64_t sizes[TB_MAX_SIZES];   /* --size; 0 entries = per-test default */
    int nsizes;
    uint64_t pages[TB_MAX_SIZES];   /* --page (paged writes) */
    int npages;
    uint32_t nics[TB_MAX_SIZES];    /* --nics sweep; 0 entries = config */
    int nnics;
    uint32_t window;                /* 0 = automatic */
    uint32_t peers;                 /* scatter/post destinations; 0 = default */
    uint32_t imm_batch;             /* zero-length WriteImms per request */
    int route_pin;                  /* -1 shard, else the pinned NIC */
    int no_imm;                     /* bw tests without TE_F_IMM */
    int shuffle;                    /* paged: shuffled destination pages */
    int verify;                     /* checksum the data after each case */
    int warmup;                     /* warm-up repetitions */
    int reps;                       /* measured repetitions */
    uint32_t rep_ms;                /* minimum duration of one repetition */
    uint32_t min_iters;             /* minimum requests per repetition */
    uint32_t max_iters;             /* bound on requests per repetition */
    uint32_t lat_iters;             /* samples per repetition (latency) */
    uint32_t timeout_s;             /* any single wait, seconds */
    int tune;                       /* latency tests: spinning threads */
    int self;                       /* receiver = the client's own engine */
    int pin;                        /* pin workers and this thread */
    int spin_wait;                  /* never block waiting for completions */
    /* where */
    int mode;                       /* enum tb_mode */
    char addr[64];
    uint16_t port;
    /* engine configuration */
    const char *plugin;
    const char *config_file;
    char *config_text;              /* contents of config_file */
    const char *sets[TB_MAX_SETS];
    int nsets;
    char plugin_eff[256];           /* the plugin the engines load */
    int lb_copy_threads;            /* loopback: its copy_threads, else 1 */
    /* probe */
    const char *probe;              /* "auto", "off" or a path */
    /* reference */
    const char *reference;          /* as given */
    const char *refs[3];            /* parsed: memcpy, cma or a command */
    int nrefs;                      /* 0 = none */
    char ref_buf[256];
    /* output */
    int json;
    int progress;                   /* 1: on a terminal, -1: forced off */
    int quiet;
};

int tb_opts_parse(int argc, char **argv, struct tb_opts *o);
void tb_usage(FILE *f);
/* "4K", "1M", "16MiB", "0" -> bytes; -1 on error. */
int tb_parse_size(const char *s, uint64_t *out);
/* "1K:16M" (powers of two) or "4K,64K,1M" -> list; -1 on error. */
int tb_parse_size_list(const char *s, uint64_t *out, int max, int *n);
void tb_fmt_size(uint64_t v, char *buf, size_t len);

/* ----------------------------------------------------------------- time */

uint64_t tb_now_ns(void);
void tb_sleep_us(uint32_t us);
void tb_nap_us(uint32_t us); /* without timer slack */
void tb_cpu_relax(void);

/* ---------------------------------------------------------------- stats */

struct tb_samples {
    double *v;
    size_t n, cap;
};
void tb_samples_add(struct tb_samples *s, double x);
void tb_samples_free(struct tb_samples *s);
/* Percentile p in [0, 100] (nearest rank on a sorted copy); NAN if empty. */
double tb_percentile(const struct tb_samples *s, double p);
double tb_median(const double *v, int n);
double tb_min(const double *v, int n);
double tb_max(const double *v, int n);

/* ---------------------------------------------------- control channel */

enum tb_msg_type {
    TB_MSG_HELLO = 1,   /* c->s: struct tb_hello + config text */
    TB_MSG_SETUP,       /* c->s: struct tb_setup + client address */
    TB_MSG_READY,       /* s->c: struct tb_ready + addresses/descriptors */
    TB_MSG_ARM,         /* c->s: struct tb_arm */
    TB_MSG_COLLECT,     /* c->s: struct tb_arm (same imm) */
    TB_MSG_RESULT,      /* s->c: struct tb_result [+ samples] */
    TB_MSG_CHECKSUM,    /* c->s: struct tb_sum_req */
    TB_MSG_ACK,         /* s->c: struct tb_ack */
    TB_MSG_TEARDOWN,    /* c->s: release the case's engines */
    TB_MSG_QUIT,        /* c->s: end of session */
};

#define TB_MSG_MAX (64u << 20)

struct tb_chan {
    int fd;
    int timeout_ms;
};

int tb_chan_send(struct tb_chan *c, uint32_t type, const void *a, size_t alen,
                 const void *b, size_t blen);
/* Receive one message; *buf is malloc'd (free it); bounded by timeout_ms. */
int tb_chan_recv(struct tb_chan *c, uint32_t *type, void **buf, size_t *len);
/* Receive a message of an expected type and minimum size. */
int tb_chan_expect(struct tb_chan *c, uint32_t type, size_t min, void **buf,
                   size_t *len);
int tb_tcp_listen(const char *addr, uint16_t port, uint16_t *bound);
int tb_tcp_accept(int lfd, int timeout_ms);
int tb_tcp_connect(const char *addr, uint16_t port, int timeout_ms);

/* Wire structs (same binary on both ends: checked by the hello). */
struct tb_hello {
    char version[16];
    uint32_t nsets;     /* "section.key=value" strings follow, NUL separated */
    uint32_t text_len;  /* then the client's config file text */
};

struct tb_setup {
    uint32_t test;
    uint32_t engines;        /* receiving engines (peers) */
    uint64_t region;         /* bytes registered per engine */
    uint32_t access;         /* TE_MR_* */
    uint32_t probe;          /* wrap the plugin with the probe */
    uint32_t recv_mode;      /* 1: receive handler on, client added as peer */
    uint32_t nsets;          /* case overrides, as in the hello */
    uint32_t sets_len;
    uint32_t client_addr_len;
    uint32_t self;           /* --self: the client borrows engine 0 */
    uint32_t pad;
    uint64_t seed;           /* fill pattern of the region */
    /* sets, then the client's address */
};

struct tb_ready {
    int32_t rc;
    char error[256];
    char plugin[64];
    uint32_t engines;
    uint32_t nic_count;       /* NICs of each receiving group */
    uint64_t link_gbps_sum;   /* sum of the receiving NICs' caps (0 = none) */
    uint32_t probe_active;
    uint32_t pid;             /* server process */
    uint64_t engine_ptr;      /* --self: the engine, for this process only */
    /* per engine: u32 addr_len, addr, u32 desc_len, desc */
};

struct tb_arm {
    uint32_t kind;      /* TB_ARM_* */
    uint32_t imm;
    uint64_t count;
    uint32_t timeout_ms;
    uint32_t pad;
};
#define TB_ARM_COUNT 1  /* expect `count` imms on imm: time ack -> callback */
#define TB_ARM_LAT 2    /* `count` imms imm..imm+count-1, one each: stamps */
#define TB_ARM_RECV 3   /* expect `count` messages: time ack -> last */
#define TB_ARM_ECHO 4   /* echo every message back to the client */

struct tb_result {
    int32_t rc;
    char error[256];
    uint32_t pad;
    uint64_t elapsed_ns;  /* ARM ack -> expectation met */
    uint64_t done_ns;     /* CLOCK_MONOTONIC of the end (same host only) */
    uint64_t count;       /* arrivals seen */
    uint64_t nsamples;    /* TB_ARM_LAT: pairs {arrival_ns, callback_ns} */
    uint32_t probe_active;
    uint32_t pad2;
};

struct tb_sum_req {
    uint32_t engine;
    uint32_t pad;
    uint64_t off, len;
};

struct tb_ack {
    int32_t rc;
    char error[256];
    uint32_t pad;
    uint64_t value;
    uint64_t t_ns;
};

/* --------------------------------------------------- engines, config */

/* Overrides of one case, "section.key=value" each. */
struct tb_sets {
    char *v[TB_MAX_SETS + 16];
    int n;
};
void tb_sets_add(struct tb_sets *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tb_sets_free(struct tb_sets *s);

/* Build an engine from the config text, the base sets and the case sets. */
int tb_engine_create(const char *config_text, const char *const *base,
                     int nbase, const struct tb_sets *extra, int use_probe,
                     te_engine **out, char *err, size_t errlen);
/* A WriteImm of len bytes from local (offset 0) to remote (offset 0) on
 * peer, carrying imm. */
te_request tb_imm_write(te_peer peer, te_mr *local, const te_mr_desc *remote,
                        size_t len, uint32_t imm);
/* FNV-1a over the region, in 64-bit words (the checksum of --verify). */
uint64_t tb_checksum(const void *p, size_t len);
void tb_fill(void *p, size_t len, uint64_t seed);
void *tb_alloc(size_t len);  /* page aligned, touched */

/* ------------------------------------------------------------- probe */

#include "probe/probe_api.h"
/* Resolve the probe (--probe): 0 and the path in *path, or -ENOENT. */
int tb_probe_find(const char *opt, char *path, size_t len);
/* The probe's API once an engine has loaded it in this process, or NULL. */
const struct te_bench_probe_api *tb_probe_api(void);
/* The value of section.key the engines get from the INI text and the sets
 * (environment overrides included), as a number; dflt when unset. */
long tb_effective_long(const char *text, const char *const *sets, int n,
                       const char *section, const char *key, long dflt);
void tb_effective_plugin(const char *text, const char *const *sets, int n,
                         char *plugin, size_t plen, char *path, size_t pathlen);
/* Prepare the environment the probe reads (call before any thread). */
void tb_probe_env(const char *inner_plugin, const char *plugin_path);

/* ------------------------------------------------------------- server */

struct tb_server_args {
    const struct tb_opts *o;
    int fd;
    int rc;
};
/* Serve one session on fd (closed at the end). */
int tb_server_run(const struct tb_opts *o, int fd);

/* ------------------------------------------------------------- client */

/* A case as the client runs it. */
struct tb_case {
    int test;
    uint64_t size;       /* bytes per request (message size, slice total) */
    uint64_t page;       /* paged: page length */
    uint32_t nics;       /* 0 = config */
    uint32_t window;
    uint32_t peers;
    uint32_t batch;      /* imm: WriteImms per request */
};

/* What one case produced. */
/* Latency series a result row can carry. */
#define TB_LAT_SERIES 4

struct tb_result_row {
    struct tb_case c;
    char plugin[64];
    int nics_used;
    int ok;
    char error[512];
    /* throughput per repetition */
    double gbs[64], mops[64];
    int nreps;
    /* references per repetition (GB/s): [0] is the ratio's divisor */
    struct {
        const char *kind;    /* "memcpy", "cma", "command" */
        double gbs[64];
        int n;
    } ref[3];
    int nref;
    int ref_threads;
    double link_gbps;        /* sum of the caps of the NICs used, 0 = none */
    /* latency series (us): [0] is the test's main metric */
    struct tb_samples lat[TB_LAT_SERIES];
    const char *lat_what[TB_LAT_SERIES];
    const char *lat_key[TB_LAT_SERIES]; /* JSON name */
    int probe_used;
    /* latency references (--reference ucx|ucx-tcp on immlat, send): the
     * raw UCX program's p50 in us, 0 = none; kinds as in tb_opts.refs */
    double ref_lat_p50[3];
    const char *note;
    char note_buf[512];      /* storage for note when composed */
    char settings[1024];     /* per-case engine settings, both sides */
};

struct tb_session {
    const struct tb_opts *o;
    struct tb_chan ch;
    int server_pid;          /* forked child, or 0 */
    char server_host[64];
    /* progress */
    int case_index, case_count;
    /* the per-case engine settings of the last case (for the report) */
    char settings[1024];
};

/* Session bring-up: hello, version check. */
int tb_session_hello(struct tb_session *s);
/* Case bring-up: client engine, SETUP/READY, peers added. */
struct tb_env {
    te_engine *e;
    int nics;
    te_peer peer[TB_MAX_PEERS];
    te_mr_desc desc[TB_MAX_PEERS];
    uint32_t engines;
    struct tb_ready ready;
    int probe;               /* the client engine runs over the probe */
    const struct te_bench_probe_api *papi;
    int borrowed;            /* --self: e belongs to the server */
};
struct tb_env_req {
    int test;
    uint32_t engines;
    uint64_t region;
    uint32_t access;
    int client_probe, server_probe;
    uint32_t recv_mode;
    struct tb_sets client_sets, server_sets;
};
/* Zero *er and fill the fields every test sets: the case's test, the
 * number of receiving engines, their region and its access, and the case's
 * --nics on both sides. */
void tb_env_req_init(struct tb_env_req *er, const struct tb_case *c,
                     uint32_t engines, uint64_t region, uint32_t access);
/* Open the case's engines as r asks; r's setting lists are freed (on
 * success and failure alike). */
int tb_env_open(struct tb_session *s, struct tb_env_req *r, struct tb_env *env,
                char *err, size_t errlen);
void tb_env_close(struct tb_session *s, struct tb_env *env);
int tb_arm(struct tb_session *s, uint32_t kind, uint32_t imm, uint64_t count,
           struct tb_ack *ack);
int tb_collect(struct tb_session *s, uint32_t kind, uint32_t imm,
               uint64_t count, struct tb_result *res, void **samples);
int tb_remote_checksum(struct tb_session *s, uint32_t engine, uint64_t off,
                       uint64_t len, uint64_t *sum);

/* Completion wait shared by the tests: up to max completions, bounded. */
int tb_wait_completions(te_engine *e, te_completion *c, int max,
                        uint64_t deadline_ns);
/* --spin-wait: tb_wait_completions() never blocks (set once by main). */
extern int tb_spin_wait;

/* A test's outcome into row: ok, or the error (err, else rc's text). */
void tb_row_result(struct tb_result_row *row, int rc, const char *err);

/* The tests. Each fills row (ok, error, samples). */
void tb_test_bw(struct tb_session *s, struct tb_result_row *row);
void tb_test_imm(struct tb_session *s, struct tb_result_row *row);
void tb_test_send(struct tb_session *s, struct tb_result_row *row);
void tb_test_post(struct tb_session *s, struct tb_result_row *row);
void tb_test_immlat(struct tb_session *s, struct tb_result_row *row);

/* ---------------------------------------------------------- reference */

/*
 * Reference of one repetition for a bandwidth case: memcpy of the same
 * sizes over the same buffer footprint with `threads` threads, or an
 * external command. Returns GB/s, 0 when none, < 0 on error.
 */
struct tb_refspec {
    const char *kind;    /* "memcpy", "none" or a command line */
    const char *test;
    uint64_t size;       /* bytes per operation */
    uint64_t chunk;      /* copy unit (page for paged writes; = size else) */
    uint32_t window;     /* slots of the footprint */
    int threads;
    uint32_t rep_ms;
};
double tb_reference(const struct tb_refspec *r, char *err, size_t errlen);
/* ucx / ucx-tcp (tools/ucx-raw-bench): the options the command takes from
 * the command line; whether kind is one; its p50 latency in us for immlat
 * and send (0 for other kinds). */
void tb_reference_setup(const struct tb_opts *o);
int tb_reference_is_ucx(const char *kind);
double tb_reference_latency(const struct tb_refspec *r, char *err,
                            size_t errlen);
/* te-bench --cma-helper SIZE: the process the cma reference reads from. */
int tb_cma_helper(const char *size_arg);

/* ------------------------------------------------------------- report */

void tb_progress(const struct tb_session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tb_progress_clear(const struct tb_session *s);
void tb_report_header(const struct tb_opts *o, FILE *f);
void tb_report_row(const struct tb_opts *o, const struct tb_result_row *r,
                   FILE *f);
void tb_report_json(const struct tb_opts *o, struct tb_result_row *rows,
                    int n, FILE *f);
void tb_machine(char *buf, size_t len);

#endif
