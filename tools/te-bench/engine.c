/*
 * Engines and buffers as both sides build them: the configuration is the
 * same on client and server (the client's file text and --set list travel
 * in the hello), plus per-case overrides; with the probe, engine.plugin
 * names the probe file and the probe loads the real plugin.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

#ifndef TB_PROBE_BUILD_PATH
#define TB_PROBE_BUILD_PATH ""
#endif
#ifndef TB_PROBE_INSTALL_PATH
#define TB_PROBE_INSTALL_PATH ""
#endif

void tb_sets_add(struct tb_sets *s, const char *fmt, ...)
{
    if (s->n >= (int)(sizeof(s->v) / sizeof(s->v[0])))
        return;
    va_list ap;
    va_start(ap, fmt);
    char *v = NULL;
    if (vasprintf(&v, fmt, ap) >= 0)
        s->v[s->n++] = v;
    va_end(ap);
}

void tb_sets_free(struct tb_sets *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->v[i]);
    s->n = 0;
}

/* "section.key=value" -> te_config_set. */
static int apply_set(te_config *cfg, const char *s, char *err, size_t errlen)
{
    const char *dot = strchr(s, '.'), *eq = strchr(s, '=');
    if (!dot || !eq || dot > eq) {
        snprintf(err, errlen, "--set %s: expected SECTION.KEY=VALUE", s);
        return -EINVAL;
    }
    char sec[128], key[128];
    snprintf(sec, sizeof(sec), "%.*s", (int)(dot - s), s);
    snprintf(key, sizeof(key), "%.*s", (int)(eq - dot - 1), dot + 1);
    int rc = te_config_set(cfg, sec, key, eq + 1);
    if (rc)
        snprintf(err, errlen, "--set %s: %s", s, te_last_error());
    return rc;
}

te_request tb_imm_write(te_peer peer, te_mr *local, const te_mr_desc *remote,
                        size_t len, uint32_t imm)
{
    te_request q;
    te_request_init(&q, TE_OP_WRITE);
    q.flags = TE_F_IMM;
    q.imm = imm;
    q.u.xfer.peer = peer;
    q.u.xfer.local = local;
    q.u.xfer.remote = remote;
    q.u.xfer.len = len;
    return q;
}

int tb_engine_create(const char *config_text, const char *const *base,
                     int nbase, const struct tb_sets *extra, int use_probe,
                     te_engine **out, char *err, size_t errlen)
{
    te_config *cfg = te_config_new();
    if (!cfg) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int rc = 0;
    if (config_text && config_text[0] &&
        (rc = te_config_load_string(cfg, config_text)))
        snprintf(err, errlen, "configuration: %s", te_last_error());
    for (int i = 0; !rc && i < nbase; i++)
        rc = apply_set(cfg, base[i], err, errlen);
    for (int i = 0; !rc && extra && i < extra->n; i++)
        rc = apply_set(cfg, extra->v[i], err, errlen);
    if (!rc && use_probe) {
        char path[PATH_MAX];
        if ((rc = tb_probe_find("auto", path, sizeof(path))))
            snprintf(err, errlen, "the probe (libte-bench-probe.so) is not "
                     "available");
        else
            rc = te_config_set(cfg, "engine", "plugin", path);
    }
    if (!rc && (rc = te_engine_create(cfg, out)))
        snprintf(err, errlen, "engine: %s", te_last_error());
    te_config_free(cfg);
    return rc;
}

/* ------------------------------------------------------------ buffers */

void *tb_alloc(size_t len)
{
    size_t al = len >= (2u << 20) ? (2u << 20) : 4096;
    size_t n = (len + al - 1) / al * al;
    void *p = aligned_alloc(al, n ? n : al);
    if (!p)
        return NULL;
    /* Huge pages where the kernel allows them: fewer TLB misses on both
     * the measured path and the memcpy reference (same allocator). */
    if (al > 4096)
        madvise(p, n, MADV_HUGEPAGE);
    memset(p, 0, n ? n : al); /* fault every page in before measuring */
    return p;
}

void tb_fill(void *p, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(b + i, &x, 8);
    }
    for (; i < len; i++)
        b[i] = (uint8_t)(x >> (8 * (i & 7)));
}

uint64_t tb_checksum(const void *p, size_t len)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < len; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* ------------------------------------------------------------ probe */

static int is_file(const char *p)
{
    struct stat st;
    return p && p[0] && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* auto: $TE_BENCH_PROBE, the build tree, next to the binary, the install. */
int tb_probe_find(const char *opt, char *path, size_t len)
{
    if (opt && strcmp(opt, "off") == 0)
        return -ENOENT;
    if (opt && strcmp(opt, "auto") != 0) {
        snprintf(path, len, "%s", opt);
        return is_file(path) ? 0 : -ENOENT;
    }
    const char *env = getenv("TE_BENCH_PROBE");
    if (is_file(env)) {
        snprintf(path, len, "%s", env);
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(path, len, "%s/libte-bench-probe.so", exe);
            if (is_file(path))
                return 0;
        }
    }
    const char *cands[] = {TB_PROBE_BUILD_PATH, TB_PROBE_INSTALL_PATH};
    for (size_t i = 0; i < 2; i++) {
        if (is_file(cands[i])) {
            snprintf(path, len, "%s", cands[i]);
            return 0;
        }
    }
    return -ENOENT;
}

void tb_probe_env(const char *inner_plugin, const char *plugin_path)
{
    setenv(TE_BENCH_PROBE_ENV_INNER, inner_plugin ? inner_plugin : "loopback",
           1);
    if (plugin_path && plugin_path[0])
        setenv(TE_BENCH_PROBE_ENV_PATH, plugin_path, 1);
}

const struct te_bench_probe_api *tb_probe_api(void)
{
    char path[PATH_MAX];
    if (tb_probe_find("auto", path, sizeof(path)))
        return NULL;
    /* NOLOAD: only the copy an engine already loaded (same file). */
    void *dl = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
    if (!dl)
        return NULL;
    void *sym = dlsym(dl, TE_BENCH_PROBE_SYMBOL);
    dlclose(dl); /* the engine keeps it loaded */
    if (!sym)
        return NULL;
    te_bench_probe_fn fn;
    memcpy(&fn, &sym, sizeof(fn));
    const struct te_bench_probe_api *a = fn();
    return a && a->version == TE_BENCH_PROBE_VERSION ? a : NULL;
}

/*
 * The plugin the engines will use (file text, then --set, then the
 * environment, as te_engine_create() resolves it) and engine.plugin_path:
 * what the probe must load when it wraps the transport.
 */
/* The configuration both sides start from: the INI text, then the sets. */
static te_config *effective_config(const char *text, const char *const *sets,
                                   int n)
{
    char err[256];
    te_config *cfg = te_config_new();
    if (cfg && text && text[0])
        te_config_load_string(cfg, text);
    for (int i = 0; cfg && i < n; i++)
        apply_set(cfg, sets[i], err, sizeof(err));
    return cfg;
}

void tb_effective_plugin(const char *text, const char *const *sets, int n,
                         char *plugin, size_t plen, char *path, size_t pathlen)
{
    te_config *cfg = effective_config(text, sets, n);
    const char *p = cfg ? te_config_get(cfg, "engine", "plugin") : NULL;
    const char *pp = cfg ? te_config_get(cfg, "engine", "plugin_path") : NULL;
    snprintf(plugin, plen, "%s", p && p[0] ? p : "loopback");
    snprintf(path, pathlen, "%s", pp ? pp : "");
    te_config_free(cfg);
}

long tb_effective_long(const char *text, const char *const *sets, int n,
                       const char *section, const char *key, long dflt)
{
    te_config *cfg = effective_config(text, sets, n);
    const char *v = cfg ? te_config_get(cfg, section, key) : NULL;
    char *end = NULL;
    long x = v ? strtol(v, &end, 0) : dflt;
    if (v && (end == v || *end))
        x = dflt; /* the engine refuses it with a message of its own */
    te_config_free(cfg);
    return x;
}
