/*
 * Loopback plugin, driven directly through its ops table with a tiny fake
 * host (no core engine). Every wait is bounded by a deadline.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_config.h"
#include "te/plugin.h"
#include "te_test.h"

#ifndef TE_PLUGIN_BUILD_DIR
#define TE_PLUGIN_BUILD_DIR "."
#endif
#define PLUGIN_SO TE_PLUGIN_BUILD_DIR "/libte-plugin-loopback.so"
#define DEADLINE_S 10.0

/* ------------------------------------------------------------- fake host */

/* The fake host serves configuration as an engine does (fake_config.h):
 * fc first, so the host's ctx is both. */
struct env {
    struct te_fake_config fc; /* [loopback] from the test's key, value, ... */
    char last_err[1024];
    int nerr;
    struct te_plugin_host host;
    te_plugin_ctx *ctx;
};

static void fh_err(void *c, const char *fmt, ...)
{
    struct env *e = c;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->last_err, sizeof(e->last_err), fmt, ap);
    va_end(ap);
    e->nerr++;
}

/* Every message the plugin logged, for tests that check a refusal is
 * logged (LB_TEST_VERBOSE also prints them). */
static char log_text[8192];
static size_t log_len;

static void fh_log(void *c, int level, const char *fmt, ...)
{
    (void)c;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    size_t n = strlen(line);
    if (log_len + n + 2 < sizeof(log_text)) {
        memcpy(log_text + log_len, line, n);
        log_len += n;
        log_text[log_len++] = '\n';
        log_text[log_len] = 0;
    }
    if (getenv("LB_TEST_VERBOSE"))
        fprintf(stderr, "[log %d] %s\n", level, line);
}

static void *dl;
static const struct te_plugin_ops *ops;
static struct env envs[2];

static void env_free(struct env *e)
{
    te_fake_config_fini(&e->fc);
}

static int env_start(struct env *e, const char *const *kv)
{
    env_free(e);
    memset(e, 0, sizeof(*e));
    ck_assert_int_eq(te_fake_config_init(&e->fc, ops, kv), 0);
    e->host = (struct te_plugin_host){.struct_size = sizeof(e->host), .host_ctx = e,
        .set_error = fh_err, .log = fh_log};
    te_fake_config_install(&e->host);
    return ops->init(&e->host, &e->ctx);
}

/* ------------------------------------------------------------ event logs */

#define MAXEV 8192
struct nicw {
    te_plugin_nic *nic;
    struct env *env;
    int nev;
    struct te_plugin_cq_entry ev[MAXEV];
};
static struct nicw W[4];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void setup(void)
{
    dl = dlopen(PLUGIN_SO, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(dl, "dlopen %s: %s", PLUGIN_SO, dlerror());
    te_plugin_entry_fn entry = (te_plugin_entry_fn)dlsym(dl, TE_PLUGIN_ENTRY_SYMBOL);
    ck_assert_msg(entry, "no entry symbol");
    char err[256] = "";
    ops = entry(TE_PLUGIN_ABI_MAJOR, TE_PLUGIN_ABI_MINOR, err, sizeof(err));
    ck_assert_msg(ops, "entry refused: %s", err);
    memset(W, 0, sizeof(W));
    memset(envs, 0, sizeof(envs));
}

static void teardown(void)
{
    for (int i = 0; i < 4; i++)
        if (W[i].nic)
            ops->nic_close(W[i].nic);
    for (int i = 0; i < 2; i++) {
        if (envs[i].ctx)
            ops->fini(envs[i].ctx);
        env_free(&envs[i]);
    }
    memset(W, 0, sizeof(W));
    if (dl)
        dlclose(dl);
    dl = NULL;
}

static struct nicw *nic_open(int slot, struct env *e, int idx, uint32_t qd)
{
    struct te_plugin_nic_attr attr = {sizeof(attr), qd, 0, 0};
    struct nicw *w = &W[slot];
    w->env = e;
    w->nev = 0;
    int rc = ops->nic_open(e->ctx, idx, &attr, &w->nic);
    ck_assert_msg(rc == 0, "nic_open(%d) = %d: %s", idx, rc, e->last_err);
    return w;
}

static void nic_close(struct nicw *w)
{
    ops->nic_close(w->nic);
    w->nic = NULL;
}

static void pump1(struct nicw *w)
{
    struct te_plugin_cq_entry e[64];
    int n = ops->poll(w->nic, e, 64);
    ck_assert_int_ge(n, 0);
    ck_assert_msg(w->nev + n <= MAXEV, "event log overflow");
    memcpy(&w->ev[w->nev], e, (size_t)n * sizeof(e[0]));
    w->nev += n;
}

static void pump(void)
{
    for (int i = 0; i < 4; i++)
        if (W[i].nic)
            pump1(&W[i]);
}

#define WAIT(cond)                                                             \
    do {                                                                       \
        double dl_ = now_s() + DEADLINE_S;                                     \
        while (!(cond)) {                                                      \
            pump();                                                            \
            if (now_s() > dl_)                                                 \
                ck_abort_msg("timeout waiting for %s", #cond);                 \
        }                                                                      \
    } while (0)

/* Pump for a while, for checks that something does NOT happen. */
static void pump_for(double secs)
{
    double end = now_s() + secs;
    while (now_s() < end)
        pump();
}

static int count(const struct nicw *w, uint32_t kind)
{
    int n = 0;
    for (int i = 0; i < w->nev; i++)
        n += w->ev[i].kind == kind;
    return n;
}

static int count_status(const struct nicw *w, uint32_t kind, int status)
{
    int n = 0;
    for (int i = 0; i < w->nev; i++)
        n += w->ev[i].kind == kind && w->ev[i].status == status;
    return n;
}

static const struct te_plugin_cq_entry *find(const struct nicw *w,
                                             uint32_t kind, uint64_t context)
{
    for (int i = 0; i < w->nev; i++)
        if (w->ev[i].kind == kind && w->ev[i].context == context)
            return &w->ev[i];
    return NULL;
}

static te_plugin_peer connect_to(struct nicw *a, struct nicw *b)
{
    unsigned char addr[TE_PLUGIN_MAX_ADDR_LEN];
    size_t len = sizeof(addr);
    ck_assert_int_eq(ops->nic_address(b->nic, addr, &len), 0);
    te_plugin_peer p = 0;
    int rc = ops->peer_add(a->nic, addr, len, &p);
    ck_assert_msg(rc == 0, "peer_add = %d: %s", rc, a->env->last_err);
    ck_assert(p != 0);
    return p;
}

static te_plugin_mr *reg(struct nicw *w, void *addr, size_t len,
                         uint32_t access, struct te_plugin_mr_info *info)
{
    te_plugin_mr *mr = NULL;
    struct te_plugin_mr_info tmp;
    int rc = ops->mr_reg(w->nic, addr, len, access, TE_PMEM_HOST, 0, &mr,
                         info ? info : &tmp);
    ck_assert_msg(rc == 0, "mr_reg = %d: %s", rc, w->env->last_err);
    return mr;
}

static struct te_plugin_op op_write(te_plugin_peer peer, te_plugin_mr *mr,
                                    void *src, uint64_t len, uint64_t raddr,
                                    uint64_t rkey, uint32_t flags, uint32_t imm,
                                    uint64_t context)
{
    return (struct te_plugin_op){.kind = TE_POP_WRITE, .flags = flags,
                                 .peer = peer, .mr = mr, .local_addr = src,
                                 .len = len, .remote_addr = raddr,
                                 .rkey = rkey, .imm = imm, .context = context};
}

static void post1(struct nicw *w, struct te_plugin_op op)
{
    int rc = ops->post(w->nic, &op, 1);
    ck_assert_msg(rc == 1, "post = %d: %s", rc, w->env->last_err);
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7 + seed);
}

static const char *const NOKV[] = {NULL};

/* Two NICs lo0 (A) and lo1 (B) of one context. */
static void two_nics(const char *const *kv, uint32_t qd)
{
    ck_assert_int_eq(env_start(&envs[0], kv), 0);
    nic_open(0, &envs[0], 0, qd);
    nic_open(1, &envs[0], 1, qd);
}

/* ------------------------------------------------------------------ tests */

START_TEST(test_abi)
{
    ck_assert_uint_eq(ops->abi_major, TE_PLUGIN_ABI_MAJOR);
    ck_assert_uint_eq(ops->abi_minor, TE_PLUGIN_ABI_MINOR);
    ck_assert_uint_eq(ops->struct_size, sizeof(struct te_plugin_ops));
    ck_assert_uint_ge(ops->struct_size, TE_PLUGIN_OPS_MIN_SIZE_1_0);
    ck_assert_str_eq(ops->name, "loopback");
    ck_assert_ptr_nonnull(ops->version);
    ck_assert_ptr_nonnull(ops->description);
    ck_assert_ptr_nonnull(ops->init);
    ck_assert_ptr_nonnull(ops->poll);
    const char *want[] = {"devices", "queue_depth", "link_gbps", "fault_seed",
                          "fault_reorder", "fault_delay_us", "fault_fail_every",
                          "fault_kill_after"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct te_plugin_config_param *k = ops->config_params;
        while (k->name && strcmp(k->name, want[i]))
            k++;
        ck_assert_msg(k->name, "key %s not documented", want[i]);
        ck_assert_ptr_nonnull(k->default_value);
        ck_assert(k->doc && strlen(k->doc) > 10);
    }
    /* Only the entry point is exported. */
    ck_assert_ptr_null(dlsym(dl, "lb_post"));
    ck_assert_ptr_null(dlsym(dl, "lb_config_params"));
    /* A core of another major is refused with both versions named. */
    te_plugin_entry_fn entry = (te_plugin_entry_fn)dlsym(dl, TE_PLUGIN_ENTRY_SYMBOL);
    char err[256] = "";
    ck_assert_ptr_null(entry(2, 0, err, sizeof(err)));
    ck_assert_msg(strstr(err, "2.0") && strstr(err, "speaks plugin ABI 1."), "%s", err);
    ck_assert_ptr_nonnull(entry(1, 7, err, sizeof(err)));
}
END_TEST

START_TEST(test_devices_and_config)
{
    ck_assert_int_eq(env_start(&envs[0], NOKV), 0);
    ck_assert_int_eq(ops->device_count(envs[0].ctx), 8);
    struct te_plugin_device_info info;
    memset(&info, 0xab, sizeof(info));
    info.struct_size = sizeof(info);
    ck_assert_int_eq(ops->query_device(envs[0].ctx, 7, &info), 0);
    ck_assert_uint_eq(info.struct_size, sizeof(info));
    ck_assert_str_eq(info.name, "lo7");
    ck_assert_str_eq(info.pci_path, "");
    ck_assert_int_eq(info.numa_node, -1);
    ck_assert_uint_eq(info.link_gbps, 0);
    ck_assert_uint_eq(info.queue_depth, 1024);
    ck_assert_uint_eq(info.max_msg_size, 1ull << 40);
    ck_assert_int_eq(ops->query_device(envs[0].ctx, 8, &info), -ENODEV);
    ck_assert_int_eq(ops->query_device(envs[0].ctx, -1, &info), -ENODEV);
    /* A core that knows a shorter struct gets only that much written. */
    memset(&info, 0xab, sizeof(info));
    info.struct_size = offsetof(struct te_plugin_device_info, numa_node);
    ck_assert_int_eq(ops->query_device(envs[0].ctx, 2, &info), 0);
    ck_assert_str_eq(info.name, "lo2");
    ck_assert_int_eq(info.numa_node, (int32_t)0xabababab);
    ops->fini(envs[0].ctx);
    envs[0].ctx = NULL;

    static const char *const kv[] = {"devices", "3", "link_gbps", "100",
                                     "queue_depth", "64", NULL};
    ck_assert_int_eq(env_start(&envs[0], kv), 0);
    ck_assert_int_eq(ops->device_count(envs[0].ctx), 3);
    info.struct_size = sizeof(info);
    ck_assert_int_eq(ops->query_device(envs[0].ctx, 2, &info), 0);
    ck_assert_uint_eq(info.link_gbps, 100);
    ck_assert_uint_eq(info.queue_depth, 64);
    te_plugin_nic *nic;
    ck_assert_int_eq(ops->nic_open(envs[0].ctx, 3, NULL, &nic), -ENODEV);
    ops->fini(envs[0].ctx);
    envs[0].ctx = NULL;

    static const char *const bad[][3] = {
        {"devices", "abc", NULL},      {"devices", "0", NULL},
        {"devices", "1000", NULL},     {"queue_depth", "-1", NULL},
        {"fault_reorder", "maybe", NULL}, {"fault_seed", "12x", NULL},
        {"link_gbps", "", NULL},       {"fault_delay_us", "1e3", NULL},
        {"copy_threads", "0", NULL},   {"copy_threads", "17", NULL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(env_start(&envs[0], bad[i]), -EINVAL);
        /* The core's message for a declared key, the plugin's for the
         * text it parses itself (link_gbps). */
        ck_assert_msg(strstr(envs[0].last_err, bad[i][0]) ||
                          strstr(te_last_error(), bad[i][0]),
                      "message names the key: %s / %s", envs[0].last_err,
                      te_last_error());
        envs[0].ctx = NULL;
    }
    static const char *const good[] = {"fault_reorder", "yes", "fault_seed",
                                       "0xdeadbeef", "fault_fail_every", " 5 ",
                                       NULL};
    ck_assert_int_eq(env_start(&envs[0], good), 0);
}
END_TEST

START_TEST(test_address)
{
    two_nics(NOKV, 0);
    unsigned char addr[TE_PLUGIN_MAX_ADDR_LEN];
    size_t len = 4;
    ck_assert_int_eq(ops->nic_address(W[1].nic, addr, &len), -ENOSPC);
    ck_assert_uint_gt(len, 4);
    ck_assert_uint_le(len, TE_PLUGIN_MAX_ADDR_LEN);
    size_t need = len;
    len = sizeof(addr);
    ck_assert_int_eq(ops->nic_address(W[1].nic, addr, &len), 0);
    ck_assert_uint_eq(len, need);

    te_plugin_peer p = 0;
    ck_assert_int_eq(ops->peer_add(W[0].nic, addr, len - 1, &p), -EINVAL);
    ck_assert_msg(strstr(envs[0].last_err, "bytes"), "%s", envs[0].last_err);
    unsigned char bad[TE_PLUGIN_MAX_ADDR_LEN];
    memcpy(bad, addr, len);
    bad[0] ^= 0xff;
    ck_assert_int_eq(ops->peer_add(W[0].nic, bad, len, &p), -EINVAL);
    ck_assert_msg(strstr(envs[0].last_err, "not a loopback address"), "%s",
                  envs[0].last_err);
    memset(bad, 0x41, sizeof(bad));
    ck_assert_int_eq(ops->peer_add(W[0].nic, bad, len, &p), -EINVAL);
    ck_assert_int_eq(ops->peer_add(W[0].nic, NULL, 0, &p), -EINVAL);
    /* Unterminated socket name. */
    memcpy(bad, addr, len);
    memset(bad + len - 40, 'x', 40);
    ck_assert_int_eq(ops->peer_add(W[0].nic, bad, len, &p), -EINVAL);

    /* A closed NIC of this process is refused with a reason. */
    nic_close(&W[1]);
    ck_assert_int_eq(ops->peer_add(W[0].nic, addr, len, &p), -ECONNREFUSED);
    ck_assert_msg(strstr(envs[0].last_err, "not open"), "%s", envs[0].last_err);
}
END_TEST

START_TEST(test_write_imm)
{
    two_nics(NOKV, 0);
    struct nicw *a = &W[0], *b = &W[1];
    ck_assert_int_eq(env_start(&envs[1], NOKV), 0); /* second context */
    struct nicw *c = nic_open(2, &envs[1], 2, 0);

    static unsigned char src[65536], dst[65536];
    fill(src, sizeof(src), 3);
    memset(dst, 0xee, sizeof(dst));
    struct te_plugin_mr_info di;
    te_plugin_mr *smr = reg(a, src, sizeof(src), TE_PMR_LOCAL_WRITE, NULL);
    te_plugin_mr *cmr = reg(c, src, sizeof(src), 0, NULL);
    reg(b, dst, sizeof(dst), TE_PMR_REMOTE_WRITE, &di);
    ck_assert(di.rkey != 0);
    ck_assert_uint_eq(di.remote_base, (uintptr_t)dst);

    te_plugin_peer ab = connect_to(a, b);
    te_plugin_peer ba = connect_to(b, a); /* B knows A: IMMs name A */
    te_plugin_peer cb = connect_to(c, b); /* B does not know C */

    post1(a, op_write(ab, smr, src + 5, 40000, di.remote_base + 100, di.rkey,
                      TE_POP_F_IMM, 0x1234, 77));
    /* Poll only B until the imm shows: the data must already be there. */
    double until = now_s() + DEADLINE_S;
    while (!count(b, TE_PCQ_IMM)) {
        pump1(b);
        ck_assert(now_s() < until);
    }
    ck_assert_int_eq(memcmp(dst + 100, src + 5, 40000), 0);
    ck_assert_uint_eq(dst[99], 0xee);
    ck_assert_uint_eq(dst[100 + 40000], 0xee);
    ck_assert_int_eq(b->nev, 1);
    ck_assert_uint_eq(b->ev[0].imm, 0x1234);
    ck_assert_uint_eq(b->ev[0].peer, ba);
    WAIT(count(a, TE_PCQ_LOCAL) == 1);
    ck_assert_int_eq(a->ev[0].status, 0);
    ck_assert_uint_eq(a->ev[0].context, 77);

    /* From a NIC the target has not added: peer 0. Two imms, two LOCALs. */
    post1(c, op_write(cb, cmr, src, 10, di.remote_base, di.rkey, TE_POP_F_IMM,
                      9, 1));
    post1(c, op_write(cb, cmr, src, 10, di.remote_base + 10, di.rkey,
                      TE_POP_F_IMM, 9, 2));
    WAIT(count(c, TE_PCQ_LOCAL) == 2 && count(b, TE_PCQ_IMM) == 3);
    ck_assert_uint_eq(b->ev[1].peer, 0);
    ck_assert_uint_eq(b->ev[2].peer, 0);
    /* A write without imm reports nothing at the target. */
    post1(a, op_write(ab, smr, src, 1000, di.remote_base, di.rkey, 0, 0, 5));
    WAIT(count(a, TE_PCQ_LOCAL) == 2);
    pump_for(0.01);
    ck_assert_int_eq(count(b, TE_PCQ_IMM), 3);
    ck_assert_int_eq(memcmp(dst, src, 1000), 0);
    ck_assert_int_eq(count(a, TE_PCQ_LOCAL), 2);
    ck_assert_int_eq(count(c, TE_PCQ_LOCAL), 2);
}
END_TEST

START_TEST(test_zero_length_imm)
{
    two_nics(NOKV, 0);
    struct nicw *a = &W[0], *b = &W[1];
    static unsigned char dst[4096];
    struct te_plugin_mr_info di;
    reg(b, dst, sizeof(dst), TE_PMR_REMOTE_WRITE, &di);
    te_plugin_peer ab = connect_to(a, b);
    /* No key, no mr at all. */
    post1(a, op_write(ab, NULL, NULL, 0, 0, 0, TE_POP_F_IMM, 1, 1));
    /* A valid key, at the very end of the region. */
    post1(a, op_write(ab, NULL, NULL, 0, di.remote_base + sizeof(dst), di.rkey,
                      TE_POP_F_IMM, 2, 2));
    /* An invalid non-zero key is rejected even for zero bytes. */
    post1(a, op_write(ab, NULL, NULL, 0, 0, di.rkey ^ 0x100000000ull,
                      TE_POP_F_IMM, 3, 3));
    WAIT(count(a, TE_PCQ_LOCAL) == 3);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 1)->status, 0);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 2)->status, 0);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 3)->status, -EACCES);
    pump_for(0.005);
    ck_assert_int_eq(count(b, TE_PCQ_IMM), 2);
    ck_assert_uint_eq(b->ev[0].imm + b->ev[1].imm, 3);
}
END_TEST

START_TEST(test_read)
{
    two_nics(NOKV, 0);
    struct nicw *a = &W[0], *b = &W[1];
    static unsigned char remote[100000], local[100000];
    fill(remote, sizeof(remote), 11);
    memset(local, 0, sizeof(local));
    struct te_plugin_mr_info ri;
    reg(b, remote, sizeof(remote), TE_PMR_REMOTE_READ, &ri);
    te_plugin_mr *lmr = reg(a, local, sizeof(local), TE_PMR_LOCAL_WRITE, NULL);
    te_plugin_mr *romr = reg(a, local, sizeof(local), 0, NULL);
    te_plugin_peer ab = connect_to(a, b);
    struct te_plugin_op op = {.kind = TE_POP_READ, .peer = ab, .mr = lmr,
                              .local_addr = local + 8, .len = 90000,
                              .remote_addr = ri.remote_base + 1000,
                              .rkey = ri.rkey, .context = 42};
    post1(a, op);
    WAIT(count(a, TE_PCQ_LOCAL) == 1);
    ck_assert_int_eq(a->ev[0].status, 0);
    ck_assert_uint_eq(a->ev[0].context, 42);
    ck_assert_int_eq(memcmp(local + 8, remote + 1000, 90000), 0);
    ck_assert_uint_eq(local[7], 0);
    ck_assert_int_eq(count(b, TE_PCQ_IMM), 0);
    /* The local region must be writable by the NIC. */
    op.mr = romr;
    op.context = 43;
    post1(a, op);
    WAIT(count(a, TE_PCQ_LOCAL) == 2);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 43)->status, -EACCES);
    ck_assert_msg(strstr(envs[0].last_err, "LOCAL_WRITE"), "%s", envs[0].last_err);
}
END_TEST

START_TEST(test_send_recv)
{
    two_nics(NOKV, 0);
    struct nicw *a = &W[0], *b = &W[1];
    static unsigned char msg[300], rbuf[4][256];
    fill(msg, sizeof(msg), 1);
    memset(rbuf, 0, sizeof(rbuf));
    te_plugin_mr *smr = reg(a, msg, sizeof(msg), 0, NULL);
    te_plugin_mr *rmr = reg(b, rbuf, sizeof(rbuf), TE_PMR_LOCAL_WRITE, NULL);
    te_plugin_peer ab = connect_to(a, b);
    te_plugin_peer ba = connect_to(b, a);

    struct te_plugin_op s = {.kind = TE_POP_SEND, .peer = ab, .mr = smr,
                             .local_addr = msg, .len = 100, .context = 1};
    post1(a, s);
    /* Receiver not ready: nothing fails, nothing is dropped. */
    pump_for(0.03);
    ck_assert_int_eq(a->nev, 0);
    ck_assert_int_eq(b->nev, 0);
    struct te_plugin_op r = {.kind = TE_POP_RECV, .mr = rmr,
                             .local_addr = rbuf[0], .len = 256, .context = 100};
    post1(b, r);
    WAIT(count(a, TE_PCQ_LOCAL) == 1 && count(b, TE_PCQ_RECV) == 1);
    ck_assert_int_eq(a->ev[0].status, 0);
    const struct te_plugin_cq_entry *e = find(b, TE_PCQ_RECV, 100);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->status, 0);
    ck_assert_uint_eq(e->len, 100);
    ck_assert_uint_eq(e->peer, ba);
    ck_assert_int_eq(memcmp(rbuf[0], msg, 100), 0);

    /* Receive buffers are consumed in posting order. */
    r.local_addr = rbuf[1]; r.context = 101; post1(b, r);
    r.local_addr = rbuf[2]; r.context = 102; post1(b, r);
    s.local_addr = msg + 10; s.len = 20; s.context = 2; post1(a, s);
    s.local_addr = msg + 50; s.len = 0; s.context = 3; post1(a, s);
    WAIT(count(a, TE_PCQ_LOCAL) == 3 && count(b, TE_PCQ_RECV) == 3);
    ck_assert_uint_eq(find(b, TE_PCQ_RECV, 101)->len, 20);
    ck_assert_uint_eq(find(b, TE_PCQ_RECV, 102)->len, 0);
    ck_assert_int_eq(memcmp(rbuf[1], msg + 10, 20), 0);

    /* Too large for the buffer: both sides see -EMSGSIZE. */
    r.local_addr = rbuf[3]; r.len = 16; r.context = 103; post1(b, r);
    s.local_addr = msg; s.len = 300; s.context = 4; post1(a, s);
    WAIT(count(a, TE_PCQ_LOCAL) == 4 && count(b, TE_PCQ_RECV) == 4);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 4)->status, -EMSGSIZE);
    ck_assert_int_eq(find(b, TE_PCQ_RECV, 103)->status, -EMSGSIZE);
    ck_assert_msg(strstr(envs[0].last_err, "receive buffer"), "%s",
                  envs[0].last_err);
}
END_TEST

/*
 * SENDs of up to LB_INLINE_MAX (136) bytes travel in the request ring (16
 * bytes in the entry, the rest in up to two continuation entries), longer
 * ones are copied from the initiator's memory when the target executes
 * them. Which path a message took shows in when its bytes were read: the
 * test rewrites the source after post() and before the target polls.
 */
static const uint64_t inline_lens[] = {1, 16, 17, 76, 77, 136, 137, 200};
#define N_INLINE_LENS (sizeof(inline_lens) / sizeof(inline_lens[0]))

static void check_inline_recvs(const struct nicw *b,
                               unsigned char rbuf[][256],
                               const unsigned char *orig,
                               const unsigned char *rewritten)
{
    for (size_t i = 0; i < N_INLINE_LENS; i++) {
        const struct te_plugin_cq_entry *e = find(b, TE_PCQ_RECV, 100 + i);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(e->status, 0);
        ck_assert_uint_eq(e->len, inline_lens[i]);
        const unsigned char *want =
            inline_lens[i] <= 136 ? orig + i * 256 : rewritten + i * 256;
        ck_assert_msg(memcmp(rbuf[i], want, inline_lens[i]) == 0,
                      "message %zu (%llu bytes) came from the wrong copy", i,
                      (unsigned long long)inline_lens[i]);
    }
}

START_TEST(test_send_inline)
{
    two_nics(NOKV, 0);
    struct nicw *a = &W[0], *b = &W[1];
    static unsigned char msg[N_INLINE_LENS][256], orig[N_INLINE_LENS][256],
        rewritten[N_INLINE_LENS][256], rbuf[N_INLINE_LENS][256];
    te_plugin_mr *smr = reg(a, msg, sizeof(msg), 0, NULL);
    te_plugin_mr *rmr = reg(b, rbuf, sizeof(rbuf), TE_PMR_LOCAL_WRITE, NULL);
    te_plugin_peer ab = connect_to(a, b);

    /* Receiver ready (executed at once) and not ready (kept as pending
     * SENDs, with their inline payload, until the receives come). */
    for (int ready = 1; ready >= 0; ready--) {
        a->nev = b->nev = 0;
        fill(&orig[0][0], sizeof(orig), 11 + (unsigned)ready);
        fill(&rewritten[0][0], sizeof(rewritten), 77 + (unsigned)ready);
        memcpy(msg, orig, sizeof(msg));
        memset(rbuf, 0, sizeof(rbuf));
        struct te_plugin_op r = {.kind = TE_POP_RECV, .mr = rmr, .len = 256};
        if (ready)
            for (size_t i = 0; i < N_INLINE_LENS; i++) {
                r.local_addr = rbuf[i];
                r.context = 100 + i;
                post1(b, r);
            }
        for (size_t i = 0; i < N_INLINE_LENS; i++) {
            struct te_plugin_op s = {.kind = TE_POP_SEND, .peer = ab,
                                     .mr = smr, .local_addr = msg[i],
                                     .len = inline_lens[i], .context = i};
            post1(a, s);
        }
        memcpy(msg, rewritten, sizeof(msg)); /* before the target polls */
        if (!ready) {
            pump_for(0.01);
            ck_assert_int_eq(b->nev, 0);
            for (size_t i = 0; i < N_INLINE_LENS; i++) {
                r.local_addr = rbuf[i];
                r.context = 100 + i;
                post1(b, r);
            }
        }
        WAIT(count(a, TE_PCQ_LOCAL) == (int)N_INLINE_LENS &&
             count(b, TE_PCQ_RECV) == (int)N_INLINE_LENS);
        ck_assert_int_eq(count_status(a, TE_PCQ_LOCAL, 0), (int)N_INLINE_LENS);
        check_inline_recvs(b, rbuf, &orig[0][0], &rewritten[0][0]);
    }

    /* An inline SEND too long for the receive buffer fails alone: its
     * continuation entries are not taken for requests of their own. */
    a->nev = b->nev = 0;
    static const uint64_t recv_len[2] = {50, 256}, send_len[2] = {136, 77};
    for (int i = 0; i < 2; i++) {
        post1(b, (struct te_plugin_op){.kind = TE_POP_RECV, .mr = rmr,
                                       .local_addr = rbuf[i],
                                       .len = recv_len[i],
                                       .context = 200 + (uint64_t)i});
        post1(a, (struct te_plugin_op){.kind = TE_POP_SEND, .peer = ab,
                                       .mr = smr, .local_addr = msg[i],
                                       .len = send_len[i],
                                       .context = 1 + (uint64_t)i});
    }
    WAIT(count(a, TE_PCQ_LOCAL) == 2 && count(b, TE_PCQ_RECV) == 2);
    pump_for(0.005);
    ck_assert_int_eq(count(b, TE_PCQ_RECV), 2);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 1)->status, -EMSGSIZE);
    ck_assert_int_eq(find(b, TE_PCQ_RECV, 200)->status, -EMSGSIZE);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 2)->status, 0);
    ck_assert_uint_eq(find(b, TE_PCQ_RECV, 201)->len, 77);
    ck_assert_int_eq(memcmp(rbuf[1], msg[1], 77), 0);
}
END_TEST

/*
 * A full queue of SENDs of 136 bytes and less, round after round, through
 * a small ring (queue depth 16: 16 entries): continuation entries wrap
 * around the ring's end; SENDs past half a ring go uninlined; a ring that
 * fills all the same makes post() return short (the peer's queue is
 * full), and the rest goes in once the target has taken entries.
 */
START_TEST(test_send_inline_wraps)
{
    enum { QD = 16, ROUNDS = 40, LEN = 136 };
    two_nics(NOKV, QD);
    struct nicw *a = &W[0], *b = &W[1];
    static unsigned char msg[QD][LEN], rbuf[QD][LEN];
    te_plugin_mr *smr = reg(a, msg, sizeof(msg), 0, NULL);
    te_plugin_mr *rmr = reg(b, rbuf, sizeof(rbuf), TE_PMR_LOCAL_WRITE, NULL);
    te_plugin_peer ab = connect_to(a, b);
    int shorts = 0;
    for (int round = 0; round < ROUNDS; round++) {
        a->nev = b->nev = 0;
        memset(rbuf, 0, sizeof(rbuf));
        fill(&msg[0][0], sizeof(msg), (unsigned)round);
        struct te_plugin_op r[QD], s[QD];
        for (int i = 0; i < QD; i++) {
            r[i] = (struct te_plugin_op){.kind = TE_POP_RECV, .mr = rmr,
                                         .local_addr = rbuf[i], .len = LEN,
                                         .context = 100 + (uint64_t)i};
            /* 136, 76, 16 bytes: 3, 2 or 1 entries when inline */
            s[i] = (struct te_plugin_op){.kind = TE_POP_SEND, .peer = ab,
                                         .mr = smr, .local_addr = msg[i],
                                         .len = LEN - (uint64_t)((round + i) % 3) * 60,
                                         .context = (uint64_t)i};
        }
        ck_assert_int_eq(ops->post(b->nic, r, QD), QD);
        int posted = 0;
        double until = now_s() + DEADLINE_S;
        while (posted < QD) {
            int rc = ops->post(a->nic, s + posted, (size_t)(QD - posted));
            ck_assert_int_ge(rc, 0);
            posted += rc;
            if (posted < QD) {
                shorts++;
                pump();
                ck_assert_msg(now_s() < until, "post stays short");
            }
        }
        WAIT(count(a, TE_PCQ_LOCAL) == QD && count(b, TE_PCQ_RECV) == QD);
        for (int i = 0; i < QD; i++) {
            const struct te_plugin_cq_entry *e = find(b, TE_PCQ_RECV, 100 + (uint64_t)i);
            ck_assert_int_eq(e->status, 0);
            ck_assert_uint_eq(e->len, s[i].len);
            ck_assert_int_eq(memcmp(rbuf[i], msg[i], s[i].len), 0);
            ck_assert_int_eq(find(a, TE_PCQ_LOCAL, (uint64_t)i)->status, 0);
        }
    }
    ck_assert_int_gt(shorts, 0); /* the full ring was met */
}
END_TEST

/*
 * Copy engines (loopback.copy_threads): the WRITEs and READs of 16 KiB or
 * more of one poll are copied at once by the polling thread and a helper
 * thread, in chunks of 256 KiB. Checked, round after round: every byte of
 * every size lands (chunk remainders, a copy of less than a chunk beside
 * longer ones, reads and writes in one poll) and nothing past it; a copy
 * that collides with an earlier one of its poll (stores to bytes that one
 * stores to or loads) waits for it, so the later of two writes to the
 * same bytes wins and a read sees the write before it (a race otherwise:
 * ThreadSanitizer reports it, a plain build may not); a failing write
 * among them fails alone; immediates come once each.
 * tests/unit/test_lb_copy_pool.c checks the engines themselves.
 */
START_TEST(test_copy_engines)
{
    enum { K = 1 << 10, MB = 1 << 20, ROUNDS = 12, NOPS = 9 };
    static const char *const kv[] = {"copy_threads", "2", NULL};
    two_nics(kv, 0);
    struct nicw *a = &W[0], *b = &W[1];
    unsigned char *src = malloc(4 * MB), *dst = malloc(4 * MB),
                  *rbuf = malloc(2 * MB);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    ck_assert_ptr_nonnull(rbuf);
    te_plugin_mr *smr = reg(a, src, 4 * MB, 0, NULL);
    te_plugin_mr *rmr = reg(a, rbuf, 2 * MB, TE_PMR_LOCAL_WRITE, NULL);
    struct te_plugin_mr_info di;
    reg(b, dst, 4 * MB, TE_PMR_REMOTE_WRITE | TE_PMR_REMOTE_READ, &di);
    te_plugin_peer ab = connect_to(a, b);
    uint64_t d = (uint64_t)(uintptr_t)dst;

    /* Runs of one chunk or less are copied by the poller alone: no helper
     * thread starts for them; the first larger run starts one. */
    struct te_plugin_op small[3];
    for (int i = 0; i < 3; i++)
        small[i] = op_write(ab, smr, src + (uint64_t)i * 64 * K, 20 * K,
                            d + (uint64_t)i * 64 * K, di.rkey, 0, 0,
                            (uint64_t)i);
    ck_assert_int_eq(ops->post(a->nic, small, 3), 3);
    WAIT(count(a, TE_PCQ_LOCAL) == 3);
    ck_assert_int_eq(te_test_threads_named("te-lb-copy", NULL), 0);

    for (int round = 0; round < ROUNDS; round++) {
        a->nev = b->nev = 0;
        fill(src, 4 * MB, (unsigned)round * 3 + 1);
        memset(dst, 0, 4 * MB);
        fill(dst + 3 * MB, MB, 99 + (unsigned)round);
        memset(rbuf, 0, 2 * MB);
        /* A poll takes requests until they carry 1 MiB: the first two
         * are one batch, the rest come in the next ones. */
        uint64_t odd = (150 * K) + 17 + (uint64_t)round * 4099;
        struct te_plugin_op o[NOPS] = {
            op_write(ab, smr, src, 768 * K + 5, d, di.rkey, TE_POP_F_IMM, 1, 1),
            op_write(ab, smr, src + MB, 256 * K, d + 640 * K, di.rkey, 0, 0,
                     2), /* over the first's last 128 KiB: lands last */
            op_write(ab, smr, src + 2 * MB, odd, d + 2 * MB, di.rkey,
                     TE_POP_F_IMM, 3, 3),
            {.kind = TE_POP_READ, .peer = ab, .mr = rmr, .rkey = di.rkey,
             .local_addr = rbuf + MB + 512 * K, .len = 64 * K,
             .remote_addr = d + 2 * MB, .context = 4}, /* sees the write */
            op_write(ab, smr, src, 64 * K, d, di.rkey ^ 1, 0, 0, 5), /* bad */
            op_write(ab, smr, src + 3 * MB, 40 * K, d + 2 * MB + 512 * K,
                     di.rkey, TE_POP_F_IMM, 6, 6),
        };
        for (int i = 6; i < NOPS; i++)
            o[i] = (struct te_plugin_op){.kind = TE_POP_READ, .peer = ab,
                                         .mr = rmr, .rkey = di.rkey,
                                         .context = (uint64_t)i + 1};
        o[6].local_addr = rbuf, o[6].len = 600 * K;
        o[6].remote_addr = d + 3 * MB;
        o[7].local_addr = rbuf + MB, o[7].len = 17 * K;
        o[7].remote_addr = d + 3 * MB + 700 * K;
        o[8].local_addr = rbuf + MB + 64 * K, o[8].len = 300 * K + 3;
        o[8].remote_addr = d + 3 * MB + 5;
        ck_assert_int_eq(ops->post(a->nic, o, NOPS), NOPS);
        WAIT(count(a, TE_PCQ_LOCAL) == NOPS && count(b, TE_PCQ_IMM) == 3);
        ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 5)->status, -EACCES);
        ck_assert_int_eq(count_status(a, TE_PCQ_LOCAL, 0), NOPS - 1);
        ck_assert_int_eq(memcmp(dst, src, 640 * K), 0);
        ck_assert_msg(memcmp(dst + 640 * K, src + MB, 256 * K) == 0,
                      "round %d: the earlier write landed last", round);
        ck_assert_uint_eq(dst[896 * K], 0);
        ck_assert_int_eq(memcmp(dst + 2 * MB, src + 2 * MB, odd), 0);
        ck_assert_uint_eq(dst[2 * MB + odd], 0);
        ck_assert_msg(memcmp(rbuf + MB + 512 * K, src + 2 * MB, 64 * K) == 0,
                      "round %d: the read did not see the write before it",
                      round);
        ck_assert_int_eq(memcmp(dst + 2 * MB + 512 * K, src + 3 * MB, 40 * K),
                         0);
        ck_assert_int_eq(memcmp(rbuf, dst + 3 * MB, 600 * K), 0);
        ck_assert_uint_eq(rbuf[600 * K], 0);
        ck_assert_int_eq(memcmp(rbuf + MB, dst + 3 * MB + 700 * K, 17 * K), 0);
        ck_assert_int_eq(memcmp(rbuf + MB + 64 * K, dst + 3 * MB + 5,
                                300 * K + 3), 0);
        ck_assert_uint_eq(rbuf[MB + 364 * K + 3], 0);
    }
    pump_for(0.001);
    ck_assert_int_eq(count(b, TE_PCQ_IMM), 3);
    /* copy_threads 2: one helper beside the poller */
    ck_assert_int_eq(te_test_threads_named_settle("te-lb-copy", 1, 5000), 1);
    free(src);
    free(dst);
    free(rbuf);
}
END_TEST

START_TEST(test_access_errors)
{
    two_nics(NOKV, 0);
    struct nicw *a = &W[0], *b = &W[1];
    static unsigned char src[8192], wdst[4096], rdst[4096];
    fill(src, sizeof(src), 5);
    memset(wdst, 0x11, sizeof(wdst));
    memset(rdst, 0x22, sizeof(rdst));
    struct te_plugin_mr_info wi, ri;
    te_plugin_mr *smr = reg(a, src, sizeof(src), TE_PMR_LOCAL_WRITE, NULL);
    reg(b, wdst, sizeof(wdst), TE_PMR_REMOTE_WRITE, &wi);
    reg(b, rdst, sizeof(rdst), TE_PMR_REMOTE_READ, &ri);
    te_plugin_peer ab = connect_to(a, b);
    struct {
        struct te_plugin_op op;
        const char *msg;
    } cases[] = {
        {op_write(ab, smr, src, 10, wi.remote_base, 0xdead00000001ull,
                  TE_POP_F_IMM, 1, 1), "not registered"},
        {op_write(ab, smr, src, 100, wi.remote_base + 4000, wi.rkey,
                  TE_POP_F_IMM, 2, 2), "write of 100 bytes at +4000 exceeds region of 4096"},
        {op_write(ab, smr, src, 10, wi.remote_base - 1, wi.rkey, TE_POP_F_IMM,
                  3, 3), "exceeds region"},
        {op_write(ab, smr, src, 8192, wi.remote_base, wi.rkey, TE_POP_F_IMM,
                  4, 4), "exceeds region"},
        {op_write(ab, smr, src, 10, ri.remote_base, ri.rkey, TE_POP_F_IMM, 5,
                  5), "does not allow remote writes"},
        {{.kind = TE_POP_READ, .peer = ab, .mr = smr, .local_addr = src,
          .len = 10, .remote_addr = wi.remote_base, .rkey = wi.rkey,
          .context = 6}, "does not allow remote reads"},
        {{.kind = TE_POP_READ, .peer = ab, .mr = smr, .local_addr = src,
          .len = 10, .remote_addr = ri.remote_base + 4090, .rkey = ri.rkey,
          .context = 7}, "read of 10 bytes at +4090"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        post1(a, cases[i].op);
        WAIT(count(a, TE_PCQ_LOCAL) == (int)i + 1);
        const struct te_plugin_cq_entry *e = find(a, TE_PCQ_LOCAL, cases[i].op.context);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(e->status, -EACCES);
        ck_assert_msg(strstr(envs[0].last_err, cases[i].msg),
                      "case %zu: '%s' lacks '%s'", i, envs[0].last_err,
                      cases[i].msg);
        ck_assert_msg(strstr(envs[0].last_err, "lo1"), "%s", envs[0].last_err);
    }
    pump_for(0.005);
    ck_assert_int_eq(count(b, TE_PCQ_IMM), 0);
    for (size_t i = 0; i < sizeof(wdst); i++)
        ck_assert_uint_eq(wdst[i], 0x11);
    for (size_t i = 0; i < sizeof(rdst); i++)
        ck_assert_uint_eq(rdst[i], 0x22);
    /* Local buffer outside its registration: a local protection error. */
    post1(a, op_write(ab, smr, src + 8000, 500, wi.remote_base, wi.rkey, 0, 0, 8));
    WAIT(count(a, TE_PCQ_LOCAL) == 8);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 8)->status, -EACCES);
    ck_assert_msg(strstr(envs[0].last_err, "local buffer"), "%s", envs[0].last_err);
    /* CUDA memory needs the host's device copy service (this test host
     * offers none), refused with a reason. */
    te_plugin_mr *mr;
    struct te_plugin_mr_info info;
    ck_assert_int_eq(ops->mr_reg(a->nic, src, 10, 0, TE_PMEM_CUDA, 0, &mr, &info),
                     -ENOTSUP);
    ck_assert_msg(strstr(envs[0].last_err, "device copy"), "%s", envs[0].last_err);
    ck_assert_int_eq(ops->mr_reg(a->nic, src, 0, 0, TE_PMEM_HOST, 0, &mr, &info),
                     -EINVAL);
}
END_TEST

START_TEST(test_dereg)
{
    two_nics(NOKV, 0);
    struct nicw *a = &W[0], *b = &W[1];
    static unsigned char src[4096], dst[4096];
    fill(src, sizeof(src), 9);
    memset(dst, 0, sizeof(dst));
    struct te_plugin_mr_info di, di2;
    te_plugin_mr *smr = reg(a, src, sizeof(src), 0, NULL);
    te_plugin_mr *dmr = reg(b, dst, sizeof(dst), TE_PMR_REMOTE_WRITE, &di);
    te_plugin_peer ab = connect_to(a, b);
    post1(a, op_write(ab, smr, src, 100, di.remote_base, di.rkey, 0, 0, 1));
    WAIT(count(a, TE_PCQ_LOCAL) == 1);
    ck_assert_int_eq(a->ev[0].status, 0);
    ck_assert_int_eq(ops->mr_dereg(b->nic, dmr), 0);
    memset(dst, 0, sizeof(dst));
    post1(a, op_write(ab, smr, src, 100, di.remote_base, di.rkey, TE_POP_F_IMM,
                      1, 2));
    WAIT(count(a, TE_PCQ_LOCAL) == 2);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 2)->status, -EACCES);
    ck_assert_int_eq(count(b, TE_PCQ_IMM), 0);
    ck_assert_uint_eq(dst[0], 0);
    /* Re-registering the same memory yields a fresh key; the old stays dead. */
    reg(b, dst, sizeof(dst), TE_PMR_REMOTE_WRITE, &di2);
    ck_assert(di2.rkey != di.rkey);
    post1(a, op_write(ab, smr, src, 100, di.remote_base, di.rkey, 0, 0, 3));
    post1(a, op_write(ab, smr, src, 100, di2.remote_base, di2.rkey, 0, 0, 4));
    WAIT(count(a, TE_PCQ_LOCAL) == 4);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 3)->status, -EACCES);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 4)->status, 0);
    ck_assert_int_eq(ops->mr_dereg(a->nic, smr), 0);
}
END_TEST

/* Dereg from another thread while the target copies: nothing lands after. */
struct poller {
    struct nicw *w;
    _Atomic int stop;
    long imms;
};

static void *poller_main(void *arg)
{
    struct poller *p = arg;
    struct te_plugin_cq_entry e[64];
    while (!p->stop) {
        int n = ops->poll(p->w->nic, e, 64);
        for (int i = 0; i < n; i++)
            p->imms += e[i].kind == TE_PCQ_IMM;
    }
    return NULL;
}

START_TEST(test_dereg_quiescence)
{
    two_nics(NOKV, 16);
    struct nicw *a = &W[0], *b = &W[1];
    size_t len = 1 << 20;
    unsigned char *src = malloc(len), *dst = malloc(len), *snap = malloc(len);
    fill(src, len, 1);
    memset(dst, 0, len);
    struct te_plugin_mr_info di;
    te_plugin_mr *smr = reg(a, src, len, 0, NULL);
    te_plugin_mr *dmr = reg(b, dst, len, TE_PMR_REMOTE_WRITE, &di);
    te_plugin_peer ab = connect_to(a, b);
    struct poller p = {.w = b};
    pthread_t th;
    pthread_create(&th, NULL, poller_main, &p);

    int posted = 0, done = 0, ok = 0, after = 0;
    double t0 = now_s();
    bool deregd = false;
    for (;;) {
        double t = now_s() - t0;
        ck_assert(t < DEADLINE_S);
        bool posting = !deregd || after < 4;
        if (!posting && done == posted)
            break;
        if (posting) {
            struct te_plugin_op op = op_write(ab, smr, src, len, di.remote_base,
                                              di.rkey, 0, 0, (uint64_t)posted);
            int k = ops->post(a->nic, &op, 1);
            posted += k;
            after += deregd ? k : 0;
        }
        if (!deregd && ok >= 2 && posted - done >= 2) {
            ck_assert_int_eq(ops->mr_dereg(b->nic, dmr), 0);
            deregd = true;
            memset(dst, 0, len); /* any later landing would show */
        }
        struct te_plugin_cq_entry e[64];
        int n = ops->poll(a->nic, e, 64);
        for (int i = 0; i < n; i++) {
            done++;
            ok += e[i].status == 0;
            ck_assert(e[i].status == 0 || e[i].status == -EACCES);
        }
    }
    p.stop = 1;
    pthread_join(th, NULL);
    memset(snap, 0, len);
    ck_assert_int_eq(memcmp(dst, snap, len), 0);
    ck_assert_int_gt(ok, 0);
    ck_assert_int_gt(posted - ok, 0);
    free(src);
    free(dst);
    free(snap);
}
END_TEST

START_TEST(test_queue_full)
{
    static const char *const kv[] = {"queue_depth", "8", NULL};
    two_nics(kv, 0);
    struct nicw *a = &W[0], *b = &W[1];
    static unsigned char src[64], dst[64];
    struct te_plugin_mr_info di;
    te_plugin_mr *smr = reg(a, src, sizeof(src), 0, NULL);
    reg(b, dst, sizeof(dst), TE_PMR_REMOTE_WRITE, &di);
    te_plugin_peer ab = connect_to(a, b);
    struct te_plugin_op ops_[20];
    for (int i = 0; i < 20; i++)
        ops_[i] = op_write(ab, smr, src, 8, di.remote_base, di.rkey,
                           TE_POP_F_IMM, 1, (uint64_t)i);
    ck_assert_int_eq(ops->post(a->nic, ops_, 20), 8);
    ck_assert_int_eq(ops->post(a->nic, ops_ + 8, 12), 0);
    WAIT(count(a, TE_PCQ_LOCAL) == 8);
    ck_assert_int_eq(ops->post(a->nic, ops_ + 8, 12), 8);
    WAIT(count(a, TE_PCQ_LOCAL) == 16);
    ck_assert_int_eq(ops->post(a->nic, ops_ + 16, 4), 4);
    WAIT(count(a, TE_PCQ_LOCAL) == 20 && count(b, TE_PCQ_IMM) == 20);
    for (int i = 0; i < 20; i++)
        ck_assert_ptr_nonnull(find(a, TE_PCQ_LOCAL, (uint64_t)i));

    /* attr->queue_depth overrides the config. */
    struct nicw *c = nic_open(2, &envs[0], 2, 3);
    te_plugin_peer cb = connect_to(c, b);
    te_plugin_mr *cmr = reg(c, src, sizeof(src), 0, NULL);
    for (int i = 0; i < 20; i++) {
        ops_[i].peer = cb;
        ops_[i].mr = cmr;
    }
    ck_assert_int_eq(ops->post(c->nic, ops_, 20), 3);

    /* Malformed ops: -EINVAL only when first; otherwise a short count. */
    struct te_plugin_op bad[2] = {ops_[0], ops_[0]};
    bad[0].kind = 99;
    ck_assert_int_eq(ops->post(a->nic, bad, 2), -EINVAL);
    ck_assert_msg(strstr(envs[0].last_err, "unknown op kind"), "%s", envs[0].last_err);
    bad[0] = ops_[0];
    bad[0].peer = ab;
    bad[0].mr = smr;
    bad[1] = bad[0];
    bad[1].peer = ab + 12345;
    ck_assert_int_eq(ops->post(a->nic, bad, 2), 1);
    ck_assert_int_eq(ops->post(a->nic, bad + 1, 1), -EINVAL);
    ck_assert_msg(strstr(envs[0].last_err, "unknown peer"), "%s", envs[0].last_err);
    bad[1] = bad[0];
    bad[1].mr = NULL;
    ck_assert_int_eq(ops->post(a->nic, bad + 1, 1), -EINVAL);
    bad[1].mr = cmr; /* registered on another NIC */
    ck_assert_int_eq(ops->post(a->nic, bad + 1, 1), -EINVAL);
    ck_assert_int_eq(ops->post(a->nic, bad, 0), 0);
}
END_TEST

START_TEST(test_fault_reorder)
{
    static const char *const kv[] = {"fault_reorder", "true", "fault_seed", "7",
                                     NULL};
    two_nics(kv, 256);
    struct nicw *a = &W[0], *b = &W[1];
    enum { N = 200 };
    static unsigned char src[N * 8], dst[N * 8];
    fill(src, sizeof(src), 2);
    struct te_plugin_mr_info di;
    te_plugin_mr *smr = reg(a, src, sizeof(src), 0, NULL);
    reg(b, dst, sizeof(dst), TE_PMR_REMOTE_WRITE, &di);
    te_plugin_peer ab = connect_to(a, b);
    struct te_plugin_op o[N];
    for (int i = 0; i < N; i++)
        o[i] = op_write(ab, smr, src + i * 8, 8, di.remote_base + i * 8, di.rkey,
                        TE_POP_F_IMM, (uint32_t)i, (uint64_t)i);
    ck_assert_int_eq(ops->post(a->nic, o, N), N);
    WAIT(count(a, TE_PCQ_LOCAL) == N && count(b, TE_PCQ_IMM) == N);
    pump_for(0.005);
    ck_assert_int_eq(a->nev, N);
    ck_assert_int_eq(b->nev, N);
    int seen_l[N] = {0}, seen_i[N] = {0}, inv_l = 0, inv_i = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(a->ev[i].status, 0);
        seen_l[a->ev[i].context]++;
        seen_i[b->ev[i].imm]++;
        if (i && a->ev[i].context < a->ev[i - 1].context)
            inv_l++;
        if (i && b->ev[i].imm < b->ev[i - 1].imm)
            inv_i++;
    }
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(seen_l[i], 1);
        ck_assert_int_eq(seen_i[i], 1);
    }
    ck_assert_int_gt(inv_l, 0);
    ck_assert_int_gt(inv_i, 0);
    ck_assert_int_eq(memcmp(src, dst, sizeof(src)), 0);
}
END_TEST

START_TEST(test_fault_fail_every)
{
    static const char *const kv[] = {"fault_fail_every", "3", NULL};
    two_nics(kv, 0);
    struct nicw *a = &W[0], *b = &W[1];
    static unsigned char src[9 * 16], dst[9 * 16];
    fill(src, sizeof(src), 4);
    memset(dst, 0, sizeof(dst));
    struct te_plugin_mr_info di;
    te_plugin_mr *smr = reg(a, src, sizeof(src), 0, NULL);
    reg(b, dst, sizeof(dst), TE_PMR_REMOTE_WRITE, &di);
    te_plugin_peer ab = connect_to(a, b);
    for (int i = 0; i < 9; i++)
        post1(a, op_write(ab, smr, src + i * 16, 16, di.remote_base + i * 16,
                          di.rkey, TE_POP_F_IMM, (uint32_t)i, (uint64_t)i));
    WAIT(count(a, TE_PCQ_LOCAL) == 9 && count(b, TE_PCQ_IMM) == 6);
    pump_for(0.005);
    ck_assert_int_eq(count(b, TE_PCQ_IMM), 6);
    for (int i = 0; i < 9; i++) {
        bool fail = (i + 1) % 3 == 0;
        ck_assert_int_eq(find(a, TE_PCQ_LOCAL, (uint64_t)i)->status, fail ? -EIO : 0);
        for (int k = 0; k < 16; k++)
            ck_assert_uint_eq(dst[i * 16 + k], fail ? 0 : src[i * 16 + k]);
        for (int k = 0; k < b->nev; k++)
            ck_assert(!fail || b->ev[k].imm != (uint32_t)i);
    }
}
END_TEST

START_TEST(test_fault_delay)
{
    static const char *const kv[] = {"fault_delay_us", "50000", NULL};
    two_nics(kv, 0);
    struct nicw *a = &W[0], *b = &W[1];
    static unsigned char src[16], dst[16];
    struct te_plugin_mr_info di;
    te_plugin_mr *smr = reg(a, src, sizeof(src), 0, NULL);
    reg(b, dst, sizeof(dst), TE_PMR_REMOTE_WRITE, &di);
    te_plugin_peer ab = connect_to(a, b);
    double t0 = now_s(), t_imm = 0, t_local = 0;
    post1(a, op_write(ab, smr, src, 16, di.remote_base, di.rkey, TE_POP_F_IMM, 1, 1));
    /* Timestamps taken after the poll that showed them: never early. */
    while (!t_imm || !t_local) {
        pump();
        if (!t_imm && count(b, TE_PCQ_IMM))
            t_imm = now_s();
        if (!t_local && count(a, TE_PCQ_LOCAL))
            t_local = now_s();
        ck_assert(now_s() - t0 < DEADLINE_S);
    }
    ck_assert_msg(t_imm - t0 >= 0.05, "imm after %.3f s", t_imm - t0);
    ck_assert_msg(t_local - t0 >= 0.05, "completed after %.3f s", t_local - t0);
    ck_assert_int_eq(b->nev, 1);
    ck_assert_int_eq(a->nev, 1);
}
END_TEST

START_TEST(test_fault_kill_after)
{
    static const char *const kv[] = {"fault_kill_after", "2", NULL};
    ck_assert_int_eq(env_start(&envs[0], kv), 0);
    ck_assert_int_eq(env_start(&envs[1], NOKV), 0);
    struct nicw *a = nic_open(0, &envs[0], 0, 0);
    struct nicw *b = nic_open(1, &envs[1], 1, 0);
    static unsigned char abuf[64], bbuf[64], rbuf[64];
    struct te_plugin_mr_info ai, bi;
    te_plugin_mr *amr = reg(a, abuf, sizeof(abuf), TE_PMR_REMOTE_WRITE, &ai);
    te_plugin_mr *rmr = reg(a, rbuf, sizeof(rbuf), TE_PMR_LOCAL_WRITE, NULL);
    te_plugin_mr *bmr = reg(b, bbuf, sizeof(bbuf), TE_PMR_REMOTE_WRITE, &bi);
    te_plugin_peer ab = connect_to(a, b), ba = connect_to(b, a);
    struct te_plugin_op r = {.kind = TE_POP_RECV, .mr = rmr, .local_addr = rbuf,
                             .len = 64, .context = 500};
    post1(a, r);
    /* Two ops are fine and left outstanding (B not polled yet). */
    post1(a, op_write(ab, amr, abuf, 8, bi.remote_base, bi.rkey, TE_POP_F_IMM, 1, 1));
    post1(a, op_write(ab, amr, abuf, 8, bi.remote_base, bi.rkey, TE_POP_F_IMM, 2, 2));
    /* B has an op towards A that A will never execute. */
    post1(b, op_write(ba, bmr, bbuf, 8, ai.remote_base, ai.rkey, TE_POP_F_IMM, 3, 10));
    /* The third kills A. */
    post1(a, op_write(ab, amr, abuf, 8, bi.remote_base, bi.rkey, TE_POP_F_IMM, 4, 3));
    ck_assert_msg(strstr(envs[0].last_err, "fault_kill_after"), "%s", envs[0].last_err);
    post1(a, op_write(ab, amr, abuf, 8, bi.remote_base, bi.rkey, TE_POP_F_IMM, 5, 4));
    WAIT(count(a, TE_PCQ_LOCAL) == 4 && count(b, TE_PCQ_PEER_DOWN) == 1 &&
         count(b, TE_PCQ_LOCAL) == 1);
    ck_assert_int_eq(count_status(a, TE_PCQ_LOCAL, -ENETDOWN), 4);
    ck_assert_int_eq(find(a, TE_PCQ_RECV, 500)->status, -ENETDOWN);
    ck_assert_int_eq(find(b, TE_PCQ_LOCAL, 10)->status, -ECONNRESET);
    for (int i = 0; i < b->nev; i++)
        if (b->ev[i].kind == TE_PCQ_PEER_DOWN)
            ck_assert_uint_eq(b->ev[i].peer, ba);
    pump_for(0.01);
    ck_assert_int_eq(count(b, TE_PCQ_IMM), 0);
    ck_assert_int_eq(count(a, TE_PCQ_IMM), 0);
    ck_assert_int_eq(a->nev, 5);
    ck_assert_int_eq(b->nev, 2);
    /* A dead NIC cannot be reached. */
    te_plugin_peer p;
    unsigned char addr[TE_PLUGIN_MAX_ADDR_LEN];
    size_t len = sizeof(addr);
    ck_assert_int_eq(ops->nic_address(a->nic, addr, &len), 0);
    ck_assert_int_eq(ops->peer_add(b->nic, addr, len, &p), -ECONNREFUSED);
}
END_TEST

START_TEST(test_peer_remove)
{
    two_nics(NOKV, 0);
    struct nicw *a = &W[0], *b = &W[1];
    static unsigned char src[64], dst[64];
    fill(src, sizeof(src), 1);
    memset(dst, 0, sizeof(dst));
    struct te_plugin_mr_info di;
    te_plugin_mr *smr = reg(a, src, sizeof(src), 0, NULL);
    reg(b, dst, sizeof(dst), TE_PMR_REMOTE_WRITE, &di);
    te_plugin_peer ab = connect_to(a, b);
    for (int i = 0; i < 5; i++)
        post1(a, op_write(ab, smr, src, 64, di.remote_base, di.rkey,
                          TE_POP_F_IMM, 1, (uint64_t)i));
    ck_assert_int_eq(ops->peer_remove(a->nic, ab), 0);
    WAIT(count(a, TE_PCQ_LOCAL) == 5);
    ck_assert_int_eq(count_status(a, TE_PCQ_LOCAL, -ECONNABORTED), 5);
    pump_for(0.01);
    ck_assert_int_eq(b->nev, 0);
    ck_assert_int_eq(a->nev, 5);
    ck_assert_uint_eq(dst[0], 0);
    struct te_plugin_op o = op_write(ab, smr, src, 8, di.remote_base, di.rkey, 0, 0, 9);
    ck_assert_int_eq(ops->post(a->nic, &o, 1), -EINVAL);
    ck_assert_int_eq(ops->peer_remove(a->nic, ab), -EINVAL);
    /* A fresh peer to the same NIC works. */
    te_plugin_peer ab2 = connect_to(a, b);
    ck_assert(ab2 != ab);
    o.peer = ab2;
    post1(a, o);
    WAIT(count(a, TE_PCQ_LOCAL) == 6);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 9)->status, 0);
}
END_TEST

START_TEST(test_target_closed)
{
    two_nics(NOKV, 0);
    struct nicw *a = &W[0], *b = &W[1];
    static unsigned char src[64], dst[64];
    struct te_plugin_mr_info di;
    te_plugin_mr *smr = reg(a, src, sizeof(src), 0, NULL);
    reg(b, dst, sizeof(dst), TE_PMR_REMOTE_WRITE, &di);
    te_plugin_peer ab = connect_to(a, b);
    for (int i = 0; i < 3; i++)
        post1(a, op_write(ab, smr, src, 8, di.remote_base, di.rkey, 0, 0, (uint64_t)i));
    nic_close(b);
    WAIT(count(a, TE_PCQ_LOCAL) == 3 && count(a, TE_PCQ_PEER_DOWN) == 1);
    ck_assert_int_eq(count_status(a, TE_PCQ_LOCAL, -ECONNRESET), 3);
    /* Later ops to the dead peer still complete exactly once. */
    post1(a, op_write(ab, smr, src, 8, di.remote_base, di.rkey, 0, 0, 7));
    WAIT(count(a, TE_PCQ_LOCAL) == 4);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 7)->status, -ECONNRESET);
    pump_for(0.005);
    ck_assert_int_eq(count(a, TE_PCQ_PEER_DOWN), 1);
}
END_TEST

START_TEST(test_self_and_link_cap)
{
    static const char *const kv[] = {"link_gbps", "1", NULL};
    ck_assert_int_eq(env_start(&envs[0], kv), 0);
    struct nicw *a = nic_open(0, &envs[0], 0, 0);
    size_t len = 4 << 20;
    unsigned char *src = malloc(len), *dst = malloc(len);
    fill(src, len, 8);
    struct te_plugin_mr_info di;
    te_plugin_mr *smr = reg(a, src, len, 0, NULL);
    reg(a, dst, len, TE_PMR_REMOTE_WRITE, &di);
    te_plugin_peer self = connect_to(a, a);
    double t0 = now_s();
    for (int i = 0; i < 4; i++)
        post1(a, op_write(self, smr, src + i * (len / 4), len / 4,
                          di.remote_base + i * (len / 4), di.rkey, TE_POP_F_IMM,
                          (uint32_t)i, (uint64_t)i));
    WAIT(count(a, TE_PCQ_LOCAL) == 4 && count(a, TE_PCQ_IMM) == 4);
    double dt = now_s() - t0;
    /* 4 MiB at 1 Gbit/s is 33 ms; the bucket starts with at most 1 MiB. */
    ck_assert_msg(dt >= 0.02, "4 MiB at 1 Gbit/s took %.4f s", dt);
    ck_assert_int_eq(memcmp(src, dst, len), 0);
    for (int i = 0; i < a->nev; i++)
        if (a->ev[i].kind == TE_PCQ_IMM)
            ck_assert_uint_eq(a->ev[i].peer, self);
    free(src);
    free(dst);
}
END_TEST

/* peer_remove while the target executes on its own thread: nothing lands after. */
START_TEST(test_peer_remove_concurrent)
{
    two_nics(NOKV, 32);
    struct nicw *a = &W[0], *b = &W[1];
    size_t len = 256 << 10;
    unsigned char *src = malloc(len), *dst = malloc(len), *zero = calloc(1, len);
    fill(src, len, 1);
    struct te_plugin_mr_info di;
    te_plugin_mr *smr = reg(a, src, len, 0, NULL);
    reg(b, dst, len, TE_PMR_REMOTE_WRITE, &di);
    te_plugin_peer ab = connect_to(a, b);
    struct poller p = {.w = b};
    pthread_t th;
    pthread_create(&th, NULL, poller_main, &p);
    int posted = 0, ok = 0;
    double t0 = now_s();
    while (ok < 20) {
        ck_assert(now_s() - t0 < DEADLINE_S);
        struct te_plugin_op op = op_write(ab, smr, src, len, di.remote_base,
                                          di.rkey, TE_POP_F_IMM, 1, (uint64_t)posted);
        posted += ops->post(a->nic, &op, 1);
        pump1(a);
        ok = count_status(a, TE_PCQ_LOCAL, 0);
    }
    /* Keep the queue full, then remove the peer under the target's feet. */
    for (int i = 0; i < 32; i++) {
        struct te_plugin_op op = op_write(ab, smr, src, len, di.remote_base,
                                          di.rkey, TE_POP_F_IMM, 1, (uint64_t)posted);
        posted += ops->post(a->nic, &op, 1);
    }
    ck_assert_int_eq(ops->peer_remove(a->nic, ab), 0);
    memset(dst, 0, len);
    /* Only A is pumped here: B belongs to the poller thread. */
    while (count(a, TE_PCQ_LOCAL) < posted) {
        ck_assert(now_s() - t0 < DEADLINE_S);
        pump1(a);
    }
    double end = now_s() + 0.05;
    while (now_s() < end)
        pump1(a);
    p.stop = 1;
    pthread_join(th, NULL);
    ck_assert_int_eq(memcmp(dst, zero, len), 0);
    ck_assert_int_eq(count(a, TE_PCQ_LOCAL), posted);
    for (int i = 0; i < posted; i++) {
        const struct te_plugin_cq_entry *e = find(a, TE_PCQ_LOCAL, (uint64_t)i);
        ck_assert_ptr_nonnull(e);
        ck_assert(e->status == 0 || e->status == -ECONNABORTED);
    }
    /* Every imm the target reported belongs to a write that succeeded. */
    ck_assert_int_eq(p.imms, count_status(a, TE_PCQ_LOCAL, 0));
    free(src);
    free(dst);
    free(zero);
}
END_TEST

/* Both NICs post to each other and poll on their own threads. */
struct streamer {
    struct nicw *w;
    te_plugin_peer peer;
    te_plugin_mr *mr;
    unsigned char *src;
    struct te_plugin_mr_info dst;
    long posted, ok, bad, imms;
    _Atomic int *finished;
};

static void *streamer_main(void *arg)
{
    struct streamer *s = arg;
    /* Post 5000 ops (at most 2 s: valgrind serializes threads). */
    double end = now_s() + 2.0;
    struct te_plugin_cq_entry e[64];
    long done = 0;
    bool posting = true;
    while (posting || done < s->posted) {
        if (now_s() > end + DEADLINE_S)
            break;
        posting = now_s() < end && s->posted < 5000;
        if (posting) {
            struct te_plugin_op o[16];
            for (int i = 0; i < 16; i++)
                o[i] = op_write(s->peer, s->mr, s->src + (i & 3) * 64, 16 * (i & 3),
                                s->dst.remote_base + 64 * (i & 7), s->dst.rkey,
                                TE_POP_F_IMM, 5, (uint64_t)(s->posted + i));
            int k = ops->post(s->w->nic, o, 16);
            if (k > 0)
                s->posted += k;
        }
        int n = ops->poll(s->w->nic, e, 64);
        for (int i = 0; i < n; i++) {
            if (e[i].kind == TE_PCQ_LOCAL) {
                done++;
                if (e[i].status == 0)
                    s->ok++;
                else
                    s->bad++;
            } else if (e[i].kind == TE_PCQ_IMM) {
                s->imms++;
            }
        }
    }
    /* Keep serving the other side until it is done too. */
    atomic_fetch_add(s->finished, 1);
    while (atomic_load(s->finished) < 2 && now_s() < end + DEADLINE_S) {
        int n = ops->poll(s->w->nic, e, 64);
        for (int i = 0; i < n; i++)
            s->imms += e[i].kind == TE_PCQ_IMM;
    }
    return NULL;
}

START_TEST(test_bidirectional_threads)
{
    static const char *const kv[] = {"fault_reorder", "1", NULL};
    two_nics(kv, 64);
    static unsigned char sa[256], sb[256], da[4096], db[4096];
    _Atomic int finished = 0;
    struct streamer s[2] = {{.w = &W[0], .src = sa, .finished = &finished},
                            {.w = &W[1], .src = sb, .finished = &finished}};
    s[0].mr = reg(&W[0], sa, sizeof(sa), 0, NULL);
    s[1].mr = reg(&W[1], sb, sizeof(sb), 0, NULL);
    reg(&W[0], da, sizeof(da), TE_PMR_REMOTE_WRITE, &s[1].dst);
    reg(&W[1], db, sizeof(db), TE_PMR_REMOTE_WRITE, &s[0].dst);
    s[0].peer = connect_to(&W[0], &W[1]);
    s[1].peer = connect_to(&W[1], &W[0]);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, streamer_main, &s[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        /* 5000 normally; valgrind without --fair-sched=yes starves spinners. */
        ck_assert_int_ge(s[i].posted, 64);
        ck_assert_int_eq(s[i].bad, 0);
        ck_assert_int_eq(s[i].ok, s[i].posted);
        ck_assert_int_eq(s[1 - i].imms, s[i].posted);
    }
}
END_TEST

/*
 * Peer authentication: the NIC id in a loopback address is 64 random bits
 * and the only secret a connecting process must present. A process that
 * found the socket (abstract names are listed in /proc/net/unix) but not
 * the address sends a well-formed hello with a wrong id: it is refused
 * and logged before any channel memory is mapped. Mirrors struct lb_hello
 * of plugins/loopback/lb_internal.h (protocol version 1).
 */
START_TEST(test_stranger_refused)
{
    two_nics(NOKV, 0);
    struct nicw *b = &W[1];
    unsigned char addr[TE_PLUGIN_MAX_ADDR_LEN];
    size_t alen = sizeof(addr);
    ck_assert_int_eq(ops->nic_address(b->nic, addr, &alen), 0);
    const char *name = (const char *)addr + alen - 40;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path + 1, name, strlen(name));
    socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sl), 0);
    struct {
        uint32_t magic, version, pid, nic_index;
        uint64_t nic_id, target_nic_id, shm_size;
    } h = {0x4c484c54u, 1, (uint32_t)getpid(), 0, 12345, 0, 1u << 16};
    uint64_t real_id;
    memcpy(&real_id, addr + 16, sizeof(real_id)); /* lb_addr.nic_id */
    h.target_nic_id = real_id ^ 0x5a5a5a5a00000001ull; /* a guess */
    int mfd = memfd_create("stranger", MFD_ALLOW_SEALING);
    ck_assert_int_ge(mfd, 0);
    ck_assert_int_eq(ftruncate(mfd, (off_t)h.shm_size), 0);
    ck_assert_int_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL), 0);
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct iovec iov = {&h, sizeof(h)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &mfd, sizeof(int));
    log_len = 0;
    log_text[0] = 0;
    ck_assert_int_eq(sendmsg(fd, &msg, 0), (ssize_t)sizeof(h));
    close(mfd);
    pump_for(0.05);
    char ch;
    struct pollfd pf = {fd, POLLIN, 0};
    ck_assert_int_eq(poll(&pf, 1, 1000), 1);
    ck_assert_int_eq(recv(fd, &ch, 1, MSG_DONTWAIT), 0); /* closed by b */
    close(fd);
    ck_assert_msg(strstr(log_text, "rejected a connection: hello meant for "
                                   "another NIC"), "log: %s", log_text);
}
END_TEST

/* Garbage on a NIC's socket is refused; the NIC keeps working. */
START_TEST(test_hostile_connections)
{
    two_nics(NOKV, 0);
    struct nicw *a = &W[0], *b = &W[1];
    unsigned char addr[TE_PLUGIN_MAX_ADDR_LEN];
    size_t alen = sizeof(addr);
    ck_assert_int_eq(ops->nic_address(b->nic, addr, &alen), 0);
    /* The socket name sits at the end of the address (see lb_internal.h). */
    const char *name = (const char *)addr + alen - 40;
    ck_assert(!strncmp(name, "te-lb-", 6));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path + 1, name, strlen(name));
    socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name));
    int fds[4];
    for (int i = 0; i < 4; i++) {
        fds[i] = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        ck_assert_int_eq(connect(fds[i], (struct sockaddr *)&sa, sl), 0);
    }
    unsigned char junk[200];
    fill(junk, sizeof(junk), 99);
    ck_assert_int_eq(send(fds[0], junk, 7, 0), 7);
    ck_assert_int_eq(send(fds[1], junk, 48, 0), 48);   /* hello-sized, no fd */
    ck_assert_int_eq(send(fds[2], junk, 200, 0), 200); /* too long */
    close(fds[3]);                                     /* nothing at all */
    pump_for(0.02);
    static unsigned char src[64], dst[64];
    struct te_plugin_mr_info di;
    te_plugin_mr *smr = reg(a, src, sizeof(src), 0, NULL);
    reg(b, dst, sizeof(dst), TE_PMR_REMOTE_WRITE, &di);
    te_plugin_peer ab = connect_to(a, b);
    post1(a, op_write(ab, smr, src, 64, di.remote_base, di.rkey, TE_POP_F_IMM, 1, 1));
    WAIT(count(a, TE_PCQ_LOCAL) == 1 && count(b, TE_PCQ_IMM) == 1);
    ck_assert_int_eq(a->ev[0].status, 0);
    /* The rejected connections were closed by the NIC. */
    for (int i = 0; i < 3; i++) {
        char c;
        struct pollfd pf = {fds[i], POLLIN, 0};
        ck_assert_int_eq(poll(&pf, 1, 1000), 1);
        ck_assert_int_eq(recv(fds[i], &c, 1, MSG_DONTWAIT), 0);
        close(fds[i]);
    }
}
END_TEST

/* ---------------------------------------------------------- cross-process */

struct child_info {
    unsigned char addr[TE_PLUGIN_MAX_ADDR_LEN];
    size_t addr_len;
    uint64_t rkey, base, len;
};

#define XLEN (1u << 20)
#define XWRITE_OFF 4096u
#define XWRITE_LEN (256u * 1024)
#define XREAD_OFF (512u * 1024)

static int read_full(int fd, void *buf, size_t len, double secs)
{
    size_t got = 0;
    double end = now_s() + secs;
    while (got < len) {
        struct pollfd p = {fd, POLLIN, 0};
        int ms = (int)((end - now_s()) * 1000);
        if (ms <= 0 || poll(&p, 1, ms) <= 0)
            return -1;
        ssize_t k = read(fd, (char *)buf + got, len - got);
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

/* Child: no Check calls here; report through the exit status and pipe. */
static void child_main(int to_parent, int from_parent, bool never_poll)
{
    struct env ce = {0};
    if (env_start(&ce, NOKV) != 0)
        _exit(10);
    te_plugin_nic *nic;
    if (ops->nic_open(ce.ctx, 3, NULL, &nic) != 0)
        _exit(11);
    unsigned char *mem = malloc(XLEN);
    fill(mem, XLEN, 0x5a);
    te_plugin_mr *mr;
    struct te_plugin_mr_info info;
    if (ops->mr_reg(nic, mem, XLEN, TE_PMR_REMOTE_WRITE | TE_PMR_REMOTE_READ,
                    TE_PMEM_HOST, 0, &mr, &info) != 0)
        _exit(12);
    struct child_info ci = {.rkey = info.rkey, .base = info.remote_base, .len = XLEN};
    ci.addr_len = sizeof(ci.addr);
    if (ops->nic_address(nic, ci.addr, &ci.addr_len) != 0)
        _exit(13);
    if (write(to_parent, &ci, sizeof(ci)) != (ssize_t)sizeof(ci))
        _exit(14);
    if (never_poll) {
        /*
         * A grandchild inherits the NIC's sockets and outlives us (until the
         * parent closes the pipe): death must be noticed anyway.
         */
        if (fork() == 0) {
            char c;
            while (read(from_parent, &c, 1) > 0)
                ;
            _exit(0);
        }
        sleep(60);
        _exit(0);
    }
    unsigned char *expect = malloc(XWRITE_LEN);
    fill(expect, XWRITE_LEN, 3);
    double end = now_s() + DEADLINE_S;
    while (now_s() < end) {
        struct te_plugin_cq_entry e[64];
        int n = ops->poll(nic, e, 64);
        for (int i = 0; i < n; i++) {
            if (e[i].kind == TE_PCQ_IMM && e[i].imm == 0xbeef) {
                unsigned char ok =
                    memcmp(mem + XWRITE_OFF, expect, XWRITE_LEN) == 0 ? 1 : 2;
                if (write(to_parent, &ok, 1) != 1)
                    _exit(15);
            }
        }
        struct pollfd p = {from_parent, POLLIN, 0};
        if (poll(&p, 1, 0) == 1)
            break;
    }
    ops->mr_dereg(nic, mr);
    ops->nic_close(nic);
    ops->fini(ce.ctx);
    free(mem);
    free(expect);
    _exit(0);
}

static pid_t spawn_child(bool never_poll, int *to_child, int *from_child)
{
    pid_t pid = te_test_fork(to_child, from_child);
    if (pid == 0)
        child_main(*to_child, *from_child, never_poll);
    return pid;
}

START_TEST(test_cross_process)
{
    ck_assert_int_eq(env_start(&envs[0], NOKV), 0);
    int to_child, from_child;
    pid_t pid = spawn_child(false, &to_child, &from_child);
    struct nicw *a = nic_open(0, &envs[0], 0, 0);
    struct child_info ci;
    ck_assert_int_eq(read_full(from_child, &ci, sizeof(ci), DEADLINE_S), 0);
    ck_assert_uint_le(ci.addr_len, sizeof(ci.addr));
    te_plugin_peer p = 0;
    int rc = ops->peer_add(a->nic, ci.addr, ci.addr_len, &p);
    ck_assert_msg(rc == 0, "peer_add = %d: %s", rc, envs[0].last_err);

    unsigned char *src = malloc(XWRITE_LEN), *dst = malloc(XLEN);
    fill(src, XWRITE_LEN, 3);
    memset(dst, 0, XLEN);
    te_plugin_mr *smr = reg(a, src, XWRITE_LEN, 0, NULL);
    te_plugin_mr *dmr = reg(a, dst, XLEN, TE_PMR_LOCAL_WRITE, NULL);
    post1(a, op_write(p, smr, src, XWRITE_LEN, ci.base + XWRITE_OFF, ci.rkey,
                      TE_POP_F_IMM, 0xbeef, 1));
    WAIT(count(a, TE_PCQ_LOCAL) == 1);
    ck_assert_int_eq(a->ev[0].status, 0);
    unsigned char verdict = 0;
    ck_assert_int_eq(read_full(from_child, &verdict, 1, DEADLINE_S), 0);
    ck_assert_msg(verdict == 1, "child saw wrong bytes after the imm");

    /* Read back both what we wrote and what the child had there. */
    struct te_plugin_op r = {.kind = TE_POP_READ, .peer = p, .mr = dmr,
                             .local_addr = dst, .len = XLEN, .remote_addr = ci.base,
                             .rkey = ci.rkey, .context = 2};
    post1(a, r);
    WAIT(count(a, TE_PCQ_LOCAL) == 2);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 2)->status, 0);
    unsigned char *expect = malloc(XLEN);
    fill(expect, XLEN, 0x5a);
    memcpy(expect + XWRITE_OFF, src, XWRITE_LEN);
    ck_assert_int_eq(memcmp(dst, expect, XLEN), 0);

    /* Keys and bounds are enforced across processes too. */
    post1(a, op_write(p, smr, src, 100, ci.base + XLEN - 50, ci.rkey,
                      TE_POP_F_IMM, 0xbad, 3));
    WAIT(count(a, TE_PCQ_LOCAL) == 3);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 3)->status, -EACCES);
    ck_assert_msg(strstr(envs[0].last_err, "exceeds region"), "%s", envs[0].last_err);

    ck_assert_int_eq(write(to_child, "x", 1), 1);
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status 0x%x", st);
    /* The child closed its NIC: we notice, and new connections are refused. */
    WAIT(count(a, TE_PCQ_PEER_DOWN) == 1);
    ck_assert_int_eq(ops->peer_add(a->nic, ci.addr, ci.addr_len, &p), -ECONNREFUSED);
    close(to_child);
    close(from_child);
    free(src);
    free(dst);
    free(expect);
}
END_TEST

START_TEST(test_cross_process_peer_killed)
{
    ck_assert_int_eq(env_start(&envs[0], NOKV), 0);
    int to_child, from_child;
    pid_t pid = spawn_child(true, &to_child, &from_child);
    struct nicw *a = nic_open(0, &envs[0], 0, 0);
    struct child_info ci;
    ck_assert_int_eq(read_full(from_child, &ci, sizeof(ci), DEADLINE_S), 0);
    te_plugin_peer p = 0;
    ck_assert_int_eq(ops->peer_add(a->nic, ci.addr, ci.addr_len, &p), 0);
    static unsigned char src[4096];
    te_plugin_mr *smr = reg(a, src, sizeof(src), 0, NULL);
    for (int i = 0; i < 4; i++)
        post1(a, op_write(p, smr, src, sizeof(src), ci.base, ci.rkey,
                          TE_POP_F_IMM, 1, (uint64_t)i));
    pump_for(0.02);
    ck_assert_int_eq(a->nev, 0); /* the child never polls */
    double t0 = now_s();
    kill(pid, SIGKILL);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    WAIT(count(a, TE_PCQ_LOCAL) == 4 && count(a, TE_PCQ_PEER_DOWN) == 1);
    ck_assert_msg(now_s() - t0 < 2.0, "noticed after %.3f s", now_s() - t0);
    ck_assert_int_eq(count_status(a, TE_PCQ_LOCAL, -ECONNRESET), 4);
    post1(a, op_write(p, smr, src, 8, ci.base, ci.rkey, 0, 0, 9));
    WAIT(count(a, TE_PCQ_LOCAL) == 5);
    ck_assert_int_eq(find(a, TE_PCQ_LOCAL, 9)->status, -ECONNRESET);
    close(to_child);
    close(from_child);
}
END_TEST

START_TEST(test_cross_process_killed_mid_stream)
{
    ck_assert_int_eq(env_start(&envs[0], NOKV), 0);
    int to_child, from_child;
    pid_t pid = spawn_child(false, &to_child, &from_child);
    struct nicw *a = nic_open(0, &envs[0], 0, 64);
    struct child_info ci;
    ck_assert_int_eq(read_full(from_child, &ci, sizeof(ci), DEADLINE_S), 0);
    te_plugin_peer p = 0;
    ck_assert_int_eq(ops->peer_add(a->nic, ci.addr, ci.addr_len, &p), 0);
    static unsigned char src[65536];
    te_plugin_mr *smr = reg(a, src, sizeof(src), 0, NULL);
    int posted = 0;
    bool killed = false;
    double t0 = now_s(), tk = 0;
    while (!killed || count(a, TE_PCQ_LOCAL) < posted) {
        ck_assert(now_s() - t0 < DEADLINE_S);
        if (!killed) {
            struct te_plugin_op o = op_write(p, smr, src, sizeof(src),
                                             ci.base + XREAD_OFF, ci.rkey, 0, 0,
                                             (uint64_t)posted);
            posted += ops->post(a->nic, &o, 1);
            if (count(a, TE_PCQ_LOCAL) >= 200) {
                kill(pid, SIGKILL);
                killed = true;
                tk = now_s();
            }
        }
        pump();
    }
    ck_assert_msg(now_s() - tk < 2.0, "noticed after %.3f s", now_s() - tk);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    WAIT(count(a, TE_PCQ_PEER_DOWN) == 1);
    ck_assert_int_eq(count(a, TE_PCQ_LOCAL), posted);
    for (int i = 0; i < posted; i++) {
        const struct te_plugin_cq_entry *e = find(a, TE_PCQ_LOCAL, (uint64_t)i);
        ck_assert_ptr_nonnull(e);
        ck_assert(e->status == 0 || e->status == -ECONNRESET);
    }
    ck_assert_int_ge(count_status(a, TE_PCQ_LOCAL, 0), 200);
    close(to_child);
    close(from_child);
}
END_TEST

TE_TEST_MAIN("loopback_plugin",
             TE_TCASE_FULL("core", 60, setup, teardown,
               test_abi, test_devices_and_config, test_address, test_write_imm,
               test_zero_length_imm, test_read, test_send_recv,
               test_send_inline, test_send_inline_wraps, test_copy_engines,
               test_access_errors, test_dereg, test_dereg_quiescence,
               test_queue_full, test_fault_reorder, test_fault_fail_every,
               test_fault_delay, test_fault_kill_after, test_peer_remove,
               test_target_closed, test_self_and_link_cap,
               test_peer_remove_concurrent, test_bidirectional_threads,
               test_hostile_connections, test_stranger_refused),
             TE_TCASE_FULL("cross_process", 60, setup, teardown,
               test_cross_process, test_cross_process_peer_killed,
               test_cross_process_killed_mid_stream))
