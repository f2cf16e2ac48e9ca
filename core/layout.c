/*
 * Which plugin devices form which group, and where each group's worker
 * runs. With real NICs (PCI addresses) and engine.topology = auto, the
 * topology module decides (core/topology.h, docs/topology.md); otherwise
 * engine.groups / nics_per_group / group_nics / worker_cpus apply as given.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "layout.h"
#include "te_error.h"
#include "topology.h"

static int parse_int_list(const char *text, int *out, uint32_t max,
                          uint32_t *count, const char *what)
{
    *count = 0;
    const char *p = text;
    while (*p) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 4095)
            return te_fail(-EINVAL, "%s = \"%s\": expected non-negative "
                           "integers separated by ','", what, text);
        if (*count >= max)
            return te_fail(-EINVAL, "%s = \"%s\": more than %u entries", what,
                           text, max);
        out[(*count)++] = (int)v;
        p = end;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == ',')
            p++;
        else if (*p)
            return te_fail(-EINVAL, "%s = \"%s\": unexpected '%c'", what,
                           text, *p);
    }
    return 0;
}

/* engine.groups, nics_per_group, group_nics and worker_cpus as given. */
static int legacy_layout(const te_config *cfg, struct te_settings *s)
{
    int rc;
    /* NIC layout: group_nics "0,1;2,3" wins over nics_per_group. */
    const char *gn = te_config_get_str(cfg, "engine", "group_nics", "");
    if (gn[0]) {
        char buf[1024];
        snprintf(buf, sizeof(buf), "%s", gn);
        uint32_t g = 0;
        char *save = NULL;
        for (char *part = strtok_r(buf, ";", &save); part;
             part = strtok_r(NULL, ";", &save), g++) {
            if (g >= s->groups)
                return te_fail(-EINVAL, "engine.group_nics = \"%s\": lists "
                               "more groups than engine.groups = %u", gn,
                               s->groups);
            if ((rc = parse_int_list(part, s->group_nics[g], TE_MAX_NICS,
                                     &s->group_nic_count[g],
                                     "engine.group_nics")))
                return rc;
            if (s->group_nic_count[g] == 0)
                return te_fail(-EINVAL, "engine.group_nics = \"%s\": group %u "
                               "has no NIC", gn, g);
        }
        if (g != s->groups)
            return te_fail(-EINVAL, "engine.group_nics = \"%s\" lists %u "
                           "groups but engine.groups = %u", gn, g, s->groups);
    } else {
        for (uint32_t g = 0; g < s->groups; g++) {
            s->group_nic_count[g] = s->nics_per_group;
            for (uint32_t i = 0; i < s->nics_per_group; i++)
                s->group_nics[g][i] = (int)(g * s->nics_per_group + i);
        }
    }
    const char *wc = te_config_get_str(cfg, "engine", "worker_cpus", "");
    uint32_t ncpu = 0;
    int cpus[64];
    if ((rc = parse_int_list(wc, cpus, 64, &ncpu, "engine.worker_cpus")))
        return rc;
    if (ncpu && ncpu != s->groups)
        return te_fail(-EINVAL, "engine.worker_cpus = \"%s\" names %u CPUs "
                       "for %u groups (one per group, or none)", wc, ncpu,
                       s->groups);
    for (uint32_t g = 0; g < s->groups; g++)
        s->worker_cpu[g] = ncpu ? cpus[g] : -1;
    return 0;
}

/* The keys the topology module reads, when set (file, te_config_set or
 * environment): unset ones keep the module's defaults. */
static int topo_overrides(const te_config *cfg, struct te_topo_overrides *ov)
{
    static const char *const keys[] = {"topology", "sysfs_root",
                                       "nic_include", "nic_exclude",
                                       "group_nics", "worker_cpus", "groups",
                                       "nics_per_group", NULL};
    te_topo_overrides_init(ov);
    for (int i = 0; keys[i]; i++) {
        int rc = te_topo_overrides_set(ov, keys[i],
                                       te_config_get(cfg, "engine", keys[i]));
        if (rc)
            return rc;
    }
    return 0;
}

int te_layout_choose(struct te_engine *e, int ndev)
{
    const struct te_plugin_ops *P = e->plugin.ops;
    int n = ndev < TE_TOPO_MAX_NICS ? ndev : TE_TOPO_MAX_NICS;
    struct te_plugin_device_info *info = calloc((size_t)n, sizeof(*info));
    struct te_topo_nic *nics = calloc((size_t)n, sizeof(*nics));
    struct te_topo_overrides *ov = calloc(1, sizeof(*ov));
    e->topo = calloc(1, sizeof(*e->topo));
    int rc = -ENOMEM, have_pci = 0;
    if (!info || !nics || !ov || !e->topo)
        goto out;
    for (int i = 0; i < n; i++) {
        info[i].struct_size = sizeof(info[i]);
        if ((rc = P->query_device(e->pctx, i, &info[i])))
            goto out;
        nics[i].name = info[i].name;
        nics[i].pci_path = info[i].pci_path;
        nics[i].numa_node = info[i].numa_node;
        nics[i].link_gbps = info[i].link_gbps;
        have_pci |= info[i].pci_path[0] != 0;
    }
    if ((rc = topo_overrides(e->cfg, ov)))
        goto out;
    if (ov->mode == TE_TOPO_MODE_OFF) {
        free(e->topo);
        e->topo = NULL;
        snprintf(e->topo_note, sizeof(e->topo_note), "engine.topology = off: "
                 "groups from engine.groups/nics_per_group/group_nics");
        rc = legacy_layout(e->cfg, &e->s);
        goto out;
    }
    int trc = te_topology_discover(NULL, nics, n, ov, e->topo);
    if (!have_pci) {
        /* Virtual NICs (loopback): nothing to place in a PCI tree. The
         * discovery is kept for te-info, the layout is the configured one. */
        snprintf(e->topo_note, sizeof(e->topo_note), "the %s plugin's NICs "
                 "have no PCI address: groups from engine.groups/"
                 "nics_per_group/group_nics", P->name);
        if (trc) {
            free(e->topo);
            e->topo = NULL;
        }
        rc = legacy_layout(e->cfg, &e->s);
        goto out;
    }
    if (trc) {
        rc = trc; /* the module's message names the cause */
        goto out;
    }
    struct te_topology *t = e->topo;
    e->topo_applied = 1;
    snprintf(e->topo_note, sizeof(e->topo_note), "engine.topology = auto: "
             "%d group(s) from the PCI topology", t->ngroups);
    e->s.groups = (uint32_t)t->ngroups;
    for (int g = 0; g < t->ngroups; g++) {
        e->s.group_nic_count[g] = (uint32_t)t->groups[g].nic_count;
        for (int i = 0; i < t->groups[g].nic_count; i++)
            e->s.group_nics[g][i] = t->groups[g].nics[i];
        e->s.worker_cpu[g] = t->groups[g].worker_cpu;
    }
    rc = 0;
out:
    if (rc == -ENOMEM)
        te_fail(rc, "NIC layout: out of memory");
    free(info);
    free(nics);
    free(ov);
    return rc;
}

void te_layout_describe(const struct te_engine *e, FILE *f)
{
    if (e->topo)
        te_topology_describe(e->topo, f);
    fprintf(f, "used: %s\n", e->topo_note);
}
