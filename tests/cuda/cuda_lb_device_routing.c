/*
 * The loopback plugin's device-memory routing, through the plugin ABI, on
 * any host. The test host's device_copy service is a host memcpy that
 * records its calls: what is tested is the PLUGIN's part (which copies go
 * through the device service, keys and bounds checked before any copy, the
 * 1 MiB staging across processes, the refusal of an initiator's device
 * buffer in another process), not CUDA, which cuda_gpu_loopback covers on a
 * GPU. Regions registered as TE_PMEM_CUDA are host memory here.
 *
 * Exit 0 = pass; messages name the failed check.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_config.h"
#include "te/plugin.h"

#define PLUGIN_SO TE_PLUGIN_BUILD_DIR "/libte-plugin-loopback.so"
#define BIG ((3u << 20) + 100u) /* 4 staging chunks of 1 MiB */

#define FAIL(...)                                                            \
    do {                                                                     \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                 \
        fprintf(stderr, __VA_ARGS__);                                        \
        fprintf(stderr, "\n");                                               \
        return 1;                                                            \
    } while (0)

static const struct te_plugin_ops *ops;
static char last_err[1024];
static int copies;          /* device_copy calls */
static size_t copied;       /* bytes */
static int streams_freed;

static void h_err(void *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_err, sizeof(last_err), fmt, ap);
    va_end(ap);
}
static void h_log(void *c, int level, const char *fmt, ...) {}
static int h_copy(void *c, void **stream, void *dst, const void *src,
                  size_t len)
{
    if (!*stream)
        *stream = malloc(1); /* one per NIC, freed by device_stream_free */
    memcpy(dst, src, len);
    copies++;
    copied += len;
    return 0;
}
static void h_stream_free(void *c, void *stream)
{
    free(stream);
    streams_freed++;
}

/* The plugin's section as an engine serves it (defaults only). */
static struct te_fake_config fake_cfg;
static struct te_plugin_host host = {
    .struct_size = sizeof(struct te_plugin_host), .host_ctx = &fake_cfg,
    .set_error = h_err, .log = h_log, .device_copy = h_copy,
    .device_stream_free = h_stream_free};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Poll nics until one returns an entry of kind; deadline 10 s. */
static int wait_entry(te_plugin_nic **nics, int n, uint32_t kind,
                      struct te_plugin_cq_entry *out)
{
    double end = now_s() + 10.0;
    while (now_s() < end)
        for (int i = 0; i < n; i++) {
            struct te_plugin_cq_entry e[8];
            int k = ops->poll(nics[i], e, 8);
            for (int j = 0; j < k; j++)
                if (e[j].kind == kind) {
                    *out = e[j];
                    return 0;
                }
        }
    return -ETIMEDOUT;
}

static struct te_plugin_op write_op(te_plugin_peer peer, te_plugin_mr *mr,
                                    void *src, uint64_t len, uint64_t raddr,
                                    uint64_t rkey, uint32_t imm)
{
    return (struct te_plugin_op){.kind = TE_POP_WRITE, .flags = TE_POP_F_IMM,
                                 .peer = peer, .mr = mr, .local_addr = src,
                                 .len = len, .remote_addr = raddr,
                                 .rkey = rkey, .imm = imm, .context = imm};
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31u + seed);
}

static int open_nic(te_plugin_ctx *ctx, te_plugin_nic **nic, int idx)
{
    struct te_plugin_nic_attr attr = {.struct_size = sizeof(attr)};
    return ops->nic_open(ctx, idx, &attr, nic);
}

static int in_process(void)
{
    te_plugin_ctx *ctx;
    te_plugin_nic *n[2];
    if (ops->init(&host, &ctx) || open_nic(ctx, &n[0], 0) ||
        open_nic(ctx, &n[1], 0))
        FAIL("init/open: %s", last_err);
    unsigned char addr[TE_PLUGIN_MAX_ADDR_LEN];
    size_t alen = sizeof(addr);
    te_plugin_peer peer;
    if (ops->nic_address(n[1], addr, &alen) ||
        ops->peer_add(n[0], addr, alen, &peer))
        FAIL("peer: %s", last_err);
    size_t len = 1 << 16;
    unsigned char *src = malloc(len), *dst = calloc(1, len + 64);
    fill(src, len, 7);
    te_plugin_mr *smr, *dmr;
    struct te_plugin_mr_info si, di;
    if (ops->mr_reg(n[0], src, len, TE_PMR_LOCAL_WRITE, TE_PMEM_HOST, 0, &smr,
                    &si) ||
        ops->mr_reg(n[1], dst, len + 64, TE_PMR_LOCAL_WRITE |
                    TE_PMR_REMOTE_WRITE, TE_PMEM_CUDA, 0, &dmr, &di))
        FAIL("mr_reg: %s", last_err);
    /* host -> "device": one device copy, the bytes, then the imm. */
    struct te_plugin_op op = write_op(peer, smr, src, len, di.remote_base + 64,
                                      di.rkey, 1);
    struct te_plugin_cq_entry e;
    if (ops->post(n[0], &op, 1) != 1 || wait_entry(n, 2, TE_PCQ_IMM, &e) ||
        e.imm != 1)
        FAIL("write into a device region: no imm (%s)", last_err);
    if (wait_entry(n, 2, TE_PCQ_LOCAL, &e) || e.status)
        FAIL("write completion %d: %s", e.status, last_err);
    if (copies != 1 || copied != len || memcmp(dst + 64, src, len))
        FAIL("device copies %d (%zu bytes), bytes %s", copies, copied,
             memcmp(dst + 64, src, len) ? "differ" : "equal");
    /* Out of bounds: refused before any copy. */
    op = write_op(peer, smr, src, len, di.remote_base + 128, di.rkey, 2);
    if (ops->post(n[0], &op, 1) != 1 || wait_entry(n, 2, TE_PCQ_LOCAL, &e) ||
        e.status != -EACCES || copies != 1)
        FAIL("out-of-bounds write into device region: status %d, copies %d",
             e.status, copies);
    /* A wrong key: the same. */
    op = write_op(peer, smr, src, 16, di.remote_base, di.rkey ^ (1ull << 40),
                  3);
    if (ops->post(n[0], &op, 1) != 1 || wait_entry(n, 2, TE_PCQ_LOCAL, &e) ||
        e.status != -EACCES || copies != 1)
        FAIL("bad key: status %d, copies %d", e.status, copies);
    /* "device" source -> host region also goes through the service. */
    te_plugin_mr *dsrc, *hdst;
    struct te_plugin_mr_info dsi, hdi;
    unsigned char *hbuf = calloc(1, 4096);
    if (ops->mr_reg(n[0], src, len, TE_PMR_LOCAL_WRITE, TE_PMEM_CUDA, 0, &dsrc,
                    &dsi) ||
        ops->mr_reg(n[1], hbuf, 4096, TE_PMR_REMOTE_WRITE, TE_PMEM_HOST, 0,
                    &hdst, &hdi))
        FAIL("mr_reg 2: %s", last_err);
    op = write_op(peer, dsrc, src, 4096, hdi.remote_base, hdi.rkey, 4);
    if (ops->post(n[0], &op, 1) != 1 || wait_entry(n, 2, TE_PCQ_LOCAL, &e) ||
        e.status || copies != 2 || memcmp(hbuf, src, 4096))
        FAIL("device source: status %d, copies %d", e.status, copies);
    ops->mr_dereg(n[0], smr);
    ops->mr_dereg(n[0], dsrc);
    ops->mr_dereg(n[1], dmr);
    ops->mr_dereg(n[1], hdst);
    ops->nic_close(n[0]);
    ops->nic_close(n[1]);
    ops->fini(ctx);
    if (streams_freed != 1)
        FAIL("streams freed %d (want 1: the target NIC's)", streams_freed);
    free(src);
    free(dst);
    free(hbuf);
    printf("PASS in_process\n");
    return 0;
}

struct hello {
    unsigned char addr[TE_PLUGIN_MAX_ADDR_LEN];
    size_t alen;
    uint64_t base, rkey;
};

/* The target, in a child: a "device" region; checks what arrives. */
static int child_target(int to_parent, int from_parent)
{
    te_plugin_ctx *ctx;
    te_plugin_nic *n;
    if (ops->init(&host, &ctx) || open_nic(ctx, &n, 0))
        FAIL("child init: %s", last_err);
    unsigned char *dst = calloc(1, BIG);
    te_plugin_mr *mr;
    struct te_plugin_mr_info info;
    if (ops->mr_reg(n, dst, BIG, TE_PMR_LOCAL_WRITE | TE_PMR_REMOTE_WRITE,
                    TE_PMEM_CUDA, 0, &mr, &info))
        FAIL("child mr_reg: %s", last_err);
    struct hello h = {.alen = sizeof(h.addr), .base = info.remote_base,
                      .rkey = info.rkey};
    ops->nic_address(n, h.addr, &h.alen);
    if (write(to_parent, &h, sizeof(h)) != sizeof(h))
        FAIL("child: pipe");
    struct te_plugin_cq_entry e;
    if (wait_entry(&n, 1, TE_PCQ_IMM, &e) || e.imm != 10)
        FAIL("child: no imm 10");
    unsigned char *want = malloc(BIG);
    fill(want, BIG, 3);
    if (memcmp(dst, want, BIG))
        FAIL("child: staged bytes differ");
    if (copies != 4 || copied != BIG)
        FAIL("child: %d device copies of %zu bytes (want 4 of %u)", copies,
             copied, BIG);
    /* Keep executing until the parent is done (its second write must be
     * refused here without any copy). */
    char done;
    double end = now_s() + 10.0;
    while (read(from_parent, &done, 1) != 1 && now_s() < end) {
        struct te_plugin_cq_entry x[4];
        ops->poll(n, x, 4);
    }
    if (copies != 4)
        FAIL("child: a refused op copied (%d)", copies);
    ops->mr_dereg(n, mr);
    ops->nic_close(n);
    ops->fini(ctx);
    free(dst);
    free(want);
    return 0;
}

static int cross_process(void)
{
    int up[2], down[2];
    if (pipe(up) || pipe(down))
        FAIL("pipe");
    fcntl(down[0], F_SETFL, O_NONBLOCK);
    pid_t pid = fork();
    if (pid == 0)
        _exit(child_target(up[1], down[0]));
    struct hello h;
    if (read(up[0], &h, sizeof(h)) != sizeof(h))
        FAIL("no hello from the child");
    te_plugin_ctx *ctx;
    te_plugin_nic *n;
    te_plugin_peer peer;
    if (ops->init(&host, &ctx) || open_nic(ctx, &n, 0) ||
        ops->peer_add(n, h.addr, h.alen, &peer))
        FAIL("parent: %s", last_err);
    unsigned char *src = malloc(BIG);
    fill(src, BIG, 3);
    te_plugin_mr *smr, *dsmr;
    struct te_plugin_mr_info si;
    if (ops->mr_reg(n, src, BIG, TE_PMR_LOCAL_WRITE, TE_PMEM_HOST, 0, &smr,
                    &si) ||
        ops->mr_reg(n, src, BIG, TE_PMR_LOCAL_WRITE, TE_PMEM_CUDA, 0, &dsmr,
                    &si))
        FAIL("parent mr_reg: %s", last_err);
    struct te_plugin_op op = write_op(peer, smr, src, BIG, h.base, h.rkey, 10);
    struct te_plugin_cq_entry e;
    if (ops->post(n, &op, 1) != 1 || wait_entry(&n, 1, TE_PCQ_LOCAL, &e) ||
        e.status)
        FAIL("host -> device across processes: status %d: %s", e.status,
             last_err);
    /* Our "device" buffer across processes: refused, saying why. */
    last_err[0] = 0;
    op = write_op(peer, dsmr, src, 4096, h.base, h.rkey, 11);
    if (ops->post(n, &op, 1) != 1 || wait_entry(&n, 1, TE_PCQ_LOCAL, &e) ||
        e.status != -ENOTSUP || !strstr(last_err, "CUDA IPC"))
        FAIL("device source across processes: status %d, \"%s\"", e.status,
             last_err);
    if (write(down[1], "x", 1) != 1)
        FAIL("pipe");
    int st = 0;
    waitpid(pid, &st, 0);
    ops->mr_dereg(n, smr);
    ops->mr_dereg(n, dsmr);
    ops->nic_close(n);
    ops->fini(ctx);
    free(src);
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        FAIL("child target failed (status 0x%x)", st);
    printf("PASS cross_process\n");
    return 0;
}

int main(void)
{
    void *dl = dlopen(PLUGIN_SO, RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        FAIL("dlopen %s: %s", PLUGIN_SO, dlerror());
    te_plugin_entry_fn entry =
        (te_plugin_entry_fn)dlsym(dl, TE_PLUGIN_ENTRY_SYMBOL);
    char err[256] = "";
    if (!entry || !(ops = entry(TE_PLUGIN_ABI_MAJOR, TE_PLUGIN_ABI_MINOR, err,
                                sizeof(err))))
        FAIL("entry: %s", err);
    if (te_fake_config_init(&fake_cfg, ops, NULL))
        FAIL("configuration: %s", te_last_error());
    te_fake_config_install(&host);
    int rc = in_process();
    if (!rc) {
        copies = 0;
        copied = 0;
        rc = cross_process();
    }
    te_fake_config_fini(&fake_cfg);
    dlclose(dl);
    return rc;
}
