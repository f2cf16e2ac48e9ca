/*
 * Worker CPUs for the topology's groups (see topology_cpu.h):
 *   - engine.worker_cpus entries are taken as given (must be online) and
 *     reserved first;
 *   - every other group gets a CPU of its NUMA node (the GPU's, else its
 *     first NIC's; any node when unknown), restricted to the process
 *     affinity when the overrides carry one, in this order: first threads
 *     of physical cores, cpu 0's core (the kernel's housekeeping CPU), SMT
 *     siblings; the first CPU whose core no other worker holds, else the
 *     first CPU no worker holds, else shared (more groups than CPUs).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te_error.h"
#include "topology_cpu.h"

int te_topo_cpuset_count(const struct te_topo_cpuset *s)
{
    int n = 0;
    for (int i = 0; i < TE_TOPO_CPU_WORDS; i++)
        n += __builtin_popcountll(s->w[i]);
    return n;
}

static int group_node(const struct te_topology *t, const struct te_topo_group *g)
{
    if (g->gpu >= 0 && t->gpus[g->gpu].numa_node >= 0)
        return t->gpus[g->gpu].numa_node;
    for (int i = 0; i < g->nic_count; i++)
        if (t->nics[g->nics[i]].numa_node >= 0)
            return t->nics[g->nics[i]].numa_node;
    return -1;
}

static int pick(struct te_topology *t, const struct te_topo_overrides *ov,
                const struct te_cpu_info *ci, char *used_core, char *used_cpu,
                int *list)
{
    char buf[256];
    for (int g = 0; g < t->ngroups; g++) {
        int cpu = ov->n_worker_cpus ? ov->worker_cpus[g] : -1;
        if (cpu < 0)
            continue;
        if (ci->have && !te_topo_cpuset_has(&ci->online, cpu))
            return te_fail(-EINVAL, "engine.worker_cpus: cpu %d (group %d) is "
                           "not online under %s (online: %s)", cpu, g,
                           t->sysfs_root,
                           te_topo_cpuset_format(&ci->online, buf, sizeof(buf)));
        struct te_topo_group *gr = &t->groups[g];
        gr->worker_cpu = cpu;
        gr->numa_node = ci->node_of[cpu];
        snprintf(gr->cpu_reason, sizeof(gr->cpu_reason),
                 "override (engine.worker_cpus)");
        used_cpu[cpu] = 1;
        used_core[ci->core_of[cpu]] = 1;
    }
    int core0 = te_topo_cpuset_has(&ci->online, 0) ? ci->core_of[0] : -1;
    for (int g = 0; g < t->ngroups; g++) {
        struct te_topo_group *gr = &t->groups[g];
        if (ov->n_worker_cpus && ov->worker_cpus[g] >= 0)
            continue;
        gr->numa_node = group_node(t, gr);
        if (!ci->have) {
            char root[64];
            snprintf(root, sizeof(root), "%.63s", t->sysfs_root);
            gr->numa_node = -1;
            snprintf(gr->cpu_reason, sizeof(gr->cpu_reason), "not pinned: no "
                     "CPU information under %s/devices/system/cpu", root);
            continue;
        }
        struct te_topo_cpuset cand = ci->online;
        const char *where = "any node";
        int ni = gr->numa_node >= 0 ? te_cpu_node_index(ci, gr->numa_node) : -1;
        if (ni >= 0) {
            struct te_topo_cpuset s;
            int any = 0;
            for (int w = 0; w < TE_TOPO_CPU_WORDS; w++) {
                s.w[w] = ci->node_cpus[ni].w[w] & ci->online.w[w] &
                         (ov->have_allowed ? ov->allowed.w[w] : ~0ull);
                any |= s.w[w] != 0;
            }
            if (any) {
                cand = s;
                where = NULL;
            }
        }
        if (where) {
            gr->numa_node = -1;
            int any = 0;
            if (ov->have_allowed)
                for (int w = 0; w < TE_TOPO_CPU_WORDS; w++)
                    any |= (cand.w[w] & ov->allowed.w[w]) != 0;
            if (any)
                for (int w = 0; w < TE_TOPO_CPU_WORDS; w++)
                    cand.w[w] &= ov->allowed.w[w];
        }
        /* Order: physical cores, cpu 0's core, then SMT siblings. */
        int n = 0;
        for (int rank = 0; rank < 4; rank++)
            for (int cpu = 0; cpu < TE_TOPO_MAX_CPUS; cpu++) {
                if (!te_topo_cpuset_has(&cand, cpu))
                    continue;
                int r = (ci->core_of[cpu] == cpu ? 0 : 2) +
                        (ci->core_of[cpu] == core0 ? 1 : 0);
                if (r == rank)
                    list[n++] = cpu;
            }
        char node_text[32];
        if (where)
            snprintf(node_text, sizeof(node_text), "%s", where);
        else
            snprintf(node_text, sizeof(node_text), "numa %d", gr->numa_node);
        int chosen = -1;
        const char *how = NULL;
        for (int i = 0; i < n && chosen < 0; i++)
            if (!used_core[ci->core_of[list[i]]])
                chosen = list[i], how = ci->core_of[list[i]] == list[i]
                                          ? "physical core"
                                          : "physical core (SMT sibling)";
        for (int i = 0; i < n && chosen < 0; i++)
            if (!used_cpu[list[i]])
                chosen = list[i], how = "SMT sibling of another worker's core "
                                      "(no free physical core)";
        if (chosen < 0 && n) {
            chosen = list[g % n];
            how = "shared with another worker (more groups than CPUs)";
        }
        if (chosen < 0) {
            snprintf(gr->cpu_reason, sizeof(gr->cpu_reason),
                     "not pinned: no usable CPU");
            continue;
        }
        gr->worker_cpu = chosen;
        used_cpu[chosen] = 1;
        used_core[ci->core_of[chosen]] = 1;
        snprintf(gr->cpu_reason, sizeof(gr->cpu_reason), "%s, %s%s", node_text,
                 how, core0 >= 0 && ci->core_of[chosen] == core0
                          ? " (cpu 0's core: nothing else free)" : "");
    }
    return 0;
}

int te_topo_pick_cpus(struct te_topology *t, const struct te_topo_overrides *ov,
                      const struct te_cpu_info *ci)
{
    char *used_core = calloc(2, TE_TOPO_MAX_CPUS);
    int *list = calloc(TE_TOPO_MAX_CPUS, sizeof(int));
    if (!used_core || !list) {
        free(used_core);
        free(list);
        return te_fail(-ENOMEM, "topology: out of memory");
    }
    char *used_cpu = used_core + TE_TOPO_MAX_CPUS;
    int rc = pick(t, ov, ci, used_core, used_cpu, list);
    free(used_core);
    free(list);
    return rc;
}

char *te_topo_cpuset_format(const struct te_topo_cpuset *s, char *buf,
                            size_t len)
{
    size_t off = 0;
    if (!len)
        return buf;
    buf[0] = '\0';
    for (int c = 0; c < TE_TOPO_MAX_CPUS; c++) {
        if (!te_topo_cpuset_has(s, c))
            continue;
        int e = c;
        while (e + 1 < TE_TOPO_MAX_CPUS && te_topo_cpuset_has(s, e + 1))
            e++;
        int last = 1;
        for (int x = e + 1; x < TE_TOPO_MAX_CPUS && last; x++)
            last = !te_topo_cpuset_has(s, x);
        char part[32];
        if (e == c)
            snprintf(part, sizeof(part), "%s%d", off ? "," : "", c);
        else
            snprintf(part, sizeof(part), "%s%d-%d", off ? "," : "", c, e);
        size_t pl = strlen(part);
        if (off + pl + (last ? 0 : 3) >= len) {
            if (off + 3 < len)
                memcpy(buf + off, "...", 4); /* "..." marks the cut */
            return buf;
        }
        memcpy(buf + off, part, pl + 1);
        off += pl;
        c = e;
    }
    return buf;
}
