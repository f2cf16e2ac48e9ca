/* Paths and the engine.require policy: see paths.h. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "engine_internal.h"
#include "paths.h"
#include "te_error.h"

_Static_assert(TE_CAP_ZERO_COPY == TE_PCAP_ZERO_COPY &&
               TE_CAP_NATIVE_IMM == TE_PCAP_NATIVE_IMM &&
               TE_CAP_NATIVE_RMA == TE_PCAP_NATIVE_RMA &&
               TE_CAP_DEVICE_DIRECT == TE_PCAP_DEVICE_DIRECT &&
               TE_CAP_HARDWARE == TE_PCAP_HARDWARE &&
               TE_CAP_AUTO_PROGRESS == TE_PCAP_AUTO_PROGRESS,
               "te.h and plugin.h capability bits differ");
_Static_assert((int)TE_PATH_MEM_CUDA == (int)TE_PPATH_MEM_CUDA &&
               (int)TE_PATH_WRITE == (int)TE_PPATH_WRITE,
               "te.h and plugin.h path kinds differ");

static const struct {
    uint32_t bit;
    const char *name;
} cap_names[] = {
    {TE_CAP_ZERO_COPY, "zero_copy"},
    {TE_CAP_NATIVE_IMM, "native_imm"},
    {TE_CAP_NATIVE_RMA, "native_rma"},
    {TE_CAP_DEVICE_DIRECT, "device_direct"},
    {TE_CAP_HARDWARE, "hardware"},
    {TE_CAP_AUTO_PROGRESS, "auto_progress"},
};
#define NCAPS (sizeof(cap_names) / sizeof(cap_names[0]))

TE_API const char *te_path_kind_name(uint32_t kind)
{
    switch (kind) {
    case TE_PATH_WRITE: return "write";
    case TE_PATH_WRITE_IMM: return "write_imm";
    case TE_PATH_READ: return "read";
    case TE_PATH_SEND: return "send";
    case TE_PATH_MEM_HOST: return "mem_host";
    case TE_PATH_MEM_CUDA: return "mem_cuda";
    default: return "?";
    }
}

TE_API const char *te_cap_names(uint32_t caps, char *buf, size_t len)
{
    if (!buf || !len)
        return "";
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < NCAPS; i++)
        if (caps & cap_names[i].bit) {
            int n = snprintf(buf + at, len - at, "%s%s", at ? "," : "",
                             cap_names[i].name);
            if (n < 0 || (size_t)n >= len - at) {
                buf[at] = 0; /* whole names only */
                break;
            }
            at += (size_t)n;
        }
    return buf;
}

int te_paths_parse_require(const char *text, uint32_t *caps)
{
    *caps = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", text ? text : "");
    char *save = NULL;
    for (char *w = strtok_r(buf, ", \t", &save); w;
         w = strtok_r(NULL, ", \t", &save)) {
        if (strcasecmp(w, "any") == 0)
            continue;
        if (strcasecmp(w, "fast") == 0) {
            *caps |= TE_CAP_FAST;
            continue;
        }
        size_t i = 0;
        while (i < NCAPS && strcasecmp(w, cap_names[i].name) != 0)
            i++;
        if (i == NCAPS)
            return te_fail(-EINVAL, "engine.require: unknown capability "
                           "\"%s\" (any, fast, zero_copy, native_imm, "
                           "native_rma, device_direct, hardware, "
                           "auto_progress)", w);
        *caps |= cap_names[i].bit;
    }
    return 0;
}

static const struct te_plugin_path *find_path(const struct te_nic *n,
                                              uint32_t kind)
{
    for (int i = 0; i < n->npaths; i++)
        if (n->paths[i].kind == kind)
            return &n->paths[i];
    return NULL;
}

/* Log level of a degraded path: a warning when it lost a capability of
 * TE_CAP_FAST on a NIC; info on a software transport (lacking
 * TE_CAP_HARDWARE), which was chosen on purpose and whose other gaps
 * follow from being software. */
static int degraded_level(uint32_t missing)
{
    return (missing & TE_CAP_FAST) && !(missing & TE_CAP_HARDWARE) ? 1 : 2;
}

/* Refuse (require) or report (once) one path. */
static int judge(struct te_engine *e, const struct te_nic *n,
                 const struct te_plugin_path *p, const char *what)
{
    uint32_t missing = p->relevant & ~p->caps;
    char names[128];
    if (missing & e->s.require_caps)
        return te_fail(-ENOTSUP, "engine.require: %s on NIC %s lacks %s "
                       "(%s)", what, n->info.name,
                       te_cap_names(missing & e->s.require_caps, names,
                                    sizeof(names)), p->text);
    if (missing)
        te_log(e, degraded_level(missing), "NIC %s: %s path lacks "
               "%s: %s (engine.require refuses it; docs/paths.md)",
               n->info.name, what, te_cap_names(missing, names, sizeof(names)),
               p->text);
    return 0;
}

int te_paths_open_nic(struct te_engine *e, struct te_group *g,
                      struct te_nic *n)
{
    const struct te_plugin_ops *P = e->plugin.ops;
    n->npaths = 0;
    if (P->struct_size >= offsetof(struct te_plugin_ops, describe_paths) +
                              sizeof(P->describe_paths) &&
        P->describe_paths) {
        int got = P->describe_paths(n->pn, n->paths, TE_PLUGIN_MAX_PATHS);
        if (got < 0)
            return te_fail(got, "NIC %s: the plugin cannot describe its "
                           "paths: %s", n->info.name, te_strerror(got));
        n->npaths = got > TE_PLUGIN_MAX_PATHS ? TE_PLUGIN_MAX_PATHS : got;
        for (int i = 0; i < n->npaths; i++) {
            n->paths[i].text[sizeof(n->paths[i].text) - 1] = 0;
            n->paths[i].caps &= n->paths[i].relevant;
        }
    }
    if (!n->npaths) {
        if (e->s.require_caps)
            return te_fail(-ENOTSUP, "engine.require: plugin %s does not "
                           "describe its paths (plugin ABI %u.%u < 1.1), so "
                           "no capability can be proven on NIC %s",
                           P->name, P->abi_major, P->abi_minor, n->info.name);
        return 0;
    }
    static const uint32_t op_kinds[] = {TE_PATH_WRITE, TE_PATH_WRITE_IMM,
                                        TE_PATH_READ, TE_PATH_SEND,
                                        TE_PATH_MEM_HOST};
    for (size_t i = 0; i < sizeof(op_kinds) / sizeof(op_kinds[0]); i++) {
        const struct te_plugin_path *p = find_path(n, op_kinds[i]);
        if (!p)
            continue;
        int rc = judge(e, n, p, te_path_kind_name(op_kinds[i]));
        if (rc)
            return rc;
    }
    (void)g;
    return 0;
}

int te_paths_check_mem(struct te_engine *e, struct te_group *g,
                       uint32_t mem_kind)
{
    uint32_t kind = mem_kind == TE_MEM_CUDA ? TE_PATH_MEM_CUDA
                                            : TE_PATH_MEM_HOST;
    if (kind == TE_PATH_MEM_HOST)
        return 0; /* judged when the NICs opened */
    for (uint32_t i = 0; i < g->nic_count; i++) {
        struct te_nic *n = &g->nics[i];
        const struct te_plugin_path *p = find_path(n, kind);
        if (!p)
            continue; /* the plugin's mr_reg says why it cannot */
        uint32_t missing = p->relevant & ~p->caps;
        char names[128];
        if (missing & e->s.require_caps)
            return te_fail(-ENOTSUP, "engine.require: %s on NIC %s lacks %s "
                           "(%s)", te_path_kind_name(kind), n->info.name,
                           te_cap_names(missing & e->s.require_caps, names,
                                        sizeof(names)), p->text);
        if (missing && !atomic_exchange(&e->warned_mem_cuda, 1))
            te_log(e, degraded_level(missing), "NIC %s: %s path "
                   "lacks %s: %s (engine.require refuses it)", n->info.name,
                   te_path_kind_name(kind),
                   te_cap_names(missing, names, sizeof(names)), p->text);
    }
    return 0;
}

TE_API int te_engine_paths(const te_engine *e, int group, int nic,
                           te_path_info *out, int max)
{
    te_error_clear();
    if (!e || group < 0 || (uint32_t)group >= e->ngroups || nic < 0 ||
        (uint32_t)nic >= e->groups[group].nic_count || max < 0 ||
        (max && !out))
        return te_fail(-EINVAL, "te_engine_paths: bad group %d, NIC %d or "
                       "output", group, nic);
    const struct te_nic *n = &e->groups[group].nics[nic];
    for (int i = 0; i < n->npaths && i < max; i++) {
        const struct te_plugin_path *p = &n->paths[i];
        memset(&out[i], 0, sizeof(out[i]));
        out[i].kind = p->kind;
        out[i].caps = p->caps;
        out[i].missing = p->relevant & ~p->caps;
        out[i].refused = out[i].missing & e->s.require_caps;
        snprintf(out[i].text, sizeof(out[i].text), "%s", p->text);
    }
    return n->npaths;
}
