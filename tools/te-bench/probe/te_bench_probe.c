/*
 * te-bench probe plugin (see probe_api.h): forwards the plugin ABI to the
 * real plugin and timestamps the end of posting and the arrival of
 * immediates. Built as libte-bench-probe.so; deliberately NOT named
 * libte-plugin-*.so so that plugin scans (te-info) never list it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "te/plugin.h"
#include "probe_api.h"

#ifndef TE_PLUGIN_INSTALL_DIR
#define TE_PLUGIN_INSTALL_DIR "/usr/local/lib/transferengine"
#endif

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static void *inner_dl;
static const struct te_plugin_ops *inner;
static struct te_plugin_ops probe_ops;
static char inner_file[4096];

/* post watch */
static _Atomic int64_t post_left;      /* WRITE ops still to see; <= 0 idle */
static _Atomic uint64_t post_stamp;    /* 0 until reached */
/* imm watch */
static _Atomic uint32_t imm_on;
static uint32_t imm_base, imm_n;
static _Atomic uint64_t *_Atomic imm_out;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ wrappers */

static int probe_post(te_plugin_nic *nic, const struct te_plugin_op *ops,
                      size_t n)
{
    int rc = inner->post(nic, ops, n);
    if (rc > 0 && atomic_load_explicit(&post_left, memory_order_relaxed) > 0) {
        int64_t w = 0;
        for (int i = 0; i < rc; i++)
            w += ops[i].kind == TE_POP_WRITE;
        if (w) {
            int64_t before = atomic_fetch_sub_explicit(&post_left, w,
                                                       memory_order_relaxed);
            if (before > 0 && before - w <= 0)
                atomic_store_explicit(&post_stamp, now_ns(),
                                      memory_order_release);
        }
    }
    return rc;
}

static int probe_poll(te_plugin_nic *nic, struct te_plugin_cq_entry *out,
                      int max)
{
    int rc = inner->poll(nic, out, max);
    if (rc > 0 && atomic_load_explicit(&imm_on, memory_order_acquire)) {
        uint64_t t = 0;
        _Atomic uint64_t *o = atomic_load_explicit(&imm_out,
                                                   memory_order_acquire);
        for (int i = 0; i < rc && o; i++) {
            if (out[i].kind != TE_PCQ_IMM || out[i].imm - imm_base >= imm_n)
                continue;
            if (!t)
                t = now_ns();
            uint64_t zero = 0;
            atomic_compare_exchange_strong_explicit(
                &o[out[i].imm - imm_base], &zero, t, memory_order_release,
                memory_order_relaxed);
        }
    }
    return rc;
}

/* ------------------------------------------------------------ API */

static void api_post_arm(uint32_t n)
{
    atomic_store_explicit(&post_stamp, 0, memory_order_relaxed);
    atomic_store_explicit(&post_left, (int64_t)n, memory_order_release);
}

static int api_post_done(uint64_t *t)
{
    uint64_t s = atomic_load_explicit(&post_stamp, memory_order_acquire);
    if (!s)
        return 0;
    *t = s;
    return 1;
}

static void api_imm_arm(uint32_t base, uint32_t n, _Atomic uint64_t *out)
{
    atomic_store_explicit(&imm_on, 0, memory_order_release);
    imm_base = base;
    imm_n = n;
    atomic_store_explicit(&imm_out, out, memory_order_release);
    atomic_store_explicit(&imm_on, 1, memory_order_release);
}

static void api_imm_disarm(void)
{
    atomic_store_explicit(&imm_on, 0, memory_order_release);
    atomic_store_explicit(&imm_out, NULL, memory_order_release);
}

static const char *api_inner_path(void) { return inner_file; }

static const struct te_bench_probe_api api = {
    .version = TE_BENCH_PROBE_VERSION,
    .post_arm = api_post_arm,
    .post_done = api_post_done,
    .imm_arm = api_imm_arm,
    .imm_disarm = api_imm_disarm,
    .inner_path = api_inner_path,
};

__attribute__((visibility("default"))) const struct te_bench_probe_api *
te_bench_probe(void)
{
    return &api;
}

/* ------------------------------------------------------------ loading */

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* First libte-plugin-NAME.so in a colon-separated list of directories. */
static int search(const char *list, const char *name)
{
    if (!list)
        return 0;
    for (const char *p = list; *p;) {
        const char *c = strchr(p, ':');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len) {
            snprintf(inner_file, sizeof(inner_file),
                     "%.*s/libte-plugin-%s.so", (int)len, p, name);
            if (exists(inner_file))
                return 1;
        }
        if (!c)
            break;
        p = c + 1;
    }
    inner_file[0] = 0;
    return 0;
}

/* Same search order as the core's loader (TE_PLUGIN_PATH, the engine's
 * plugin_path handed over by te-bench, the install dir). */
static int locate(const char *name, char *err, size_t errlen)
{
    if (strchr(name, '/')) {
        snprintf(inner_file, sizeof(inner_file), "%s", name);
        return 0;
    }
    if (search(getenv("TE_PLUGIN_PATH"), name) ||
        search(getenv(TE_BENCH_PROBE_ENV_PATH), name) ||
        search(TE_PLUGIN_INSTALL_DIR, name))
        return 0;
    snprintf(err, errlen, "te-bench probe: plugin \"%s\" not found in "
             "TE_PLUGIN_PATH, %s or " TE_PLUGIN_INSTALL_DIR, name,
             TE_BENCH_PROBE_ENV_PATH);
    return -ENOENT;
}

static const struct te_plugin_ops *load(uint32_t major, uint32_t minor,
                                        char *err, size_t errlen)
{
    const char *name = getenv(TE_BENCH_PROBE_ENV_INNER);
    if (!name || !name[0])
        name = "loopback";
    if (locate(name, err, errlen))
        return NULL;
    inner_dl = dlopen(inner_file, RTLD_NOW | RTLD_LOCAL);
    if (!inner_dl) {
        snprintf(err, errlen, "te-bench probe: cannot open %s: %s", inner_file,
                 dlerror());
        return NULL;
    }
    te_plugin_entry_fn entry;
    void *sym = dlsym(inner_dl, TE_PLUGIN_ENTRY_SYMBOL);
    if (!sym) {
        snprintf(err, errlen, "te-bench probe: %s has no entry symbol",
                 inner_file);
        return NULL;
    }
    memcpy(&entry, &sym, sizeof(entry));
    const struct te_plugin_ops *ops = entry(major, minor, err, errlen);
    if (!ops)
        return NULL;
    if (ops->abi_major != TE_PLUGIN_ABI_MAJOR ||
        ops->struct_size < TE_PLUGIN_OPS_MIN_SIZE_1_0) {
        snprintf(err, errlen, "te-bench probe: %s speaks ABI %u.%u (table of "
                 "%u bytes); the probe needs %u.x", inner_file, ops->abi_major,
                 ops->abi_minor, ops->struct_size, TE_PLUGIN_ABI_MAJOR);
        return NULL;
    }
    /* Copy what both know; newer fields of the inner table stay unseen. */
    size_t n = ops->struct_size < sizeof(probe_ops) ? ops->struct_size
                                                    : sizeof(probe_ops);
    memcpy(&probe_ops, ops, n);
    probe_ops.struct_size = (uint32_t)n;
    probe_ops.post = probe_post;
    probe_ops.poll = probe_poll;
    return ops;
}

__attribute__((visibility("default"))) const struct te_plugin_ops *
te_plugin_entry(uint32_t core_major, uint32_t core_minor, char *err,
                size_t errlen)
{
    pthread_mutex_lock(&load_lock);
    if (!inner)
        inner = load(core_major, core_minor, err, errlen);
    pthread_mutex_unlock(&load_lock);
    return inner ? &probe_ops : NULL;
}
