/*
 * CPU and NUMA scan (see sysfs_cpu.h).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sysfs_cpu.h"

/* "cpu12" / "node3" -> 12 / 3; -1 if the name is not prefix+digits. */
static int numbered(const char *name, const char *prefix)
{
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0 || !isdigit((unsigned char)name[pl]))
        return -1;
    char *end;
    long v = strtol(name + pl, &end, 10);
    return (*end || v < 0 || v > 1000000) ? -1 : (int)v;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int te_cpu_node_index(const struct te_cpu_info *ci, int node)
{
    for (int i = 0; i < ci->nnodes; i++)
        if (ci->node_id[i] == node)
            return i;
    return -1;
}

static void scan_nodes(const char *root, struct te_cpu_info *ci,
                       struct te_sysfs_log *log)
{
    char dirpath[PATH_MAX];
    if (te_sysfs_path(dirpath, sizeof(dirpath), "%s/devices/system/node", root))
        return;
    DIR *dir = opendir(dirpath);
    if (!dir)
        return;
    int ids[TE_TOPO_MAX_NODES], n = 0, dropped = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        int id = numbered(de->d_name, "node");
        if (id < 0)
            continue;
        if (n < TE_TOPO_MAX_NODES)
            ids[n++] = id;
        else
            dropped++;
    }
    closedir(dir);
    if (dropped)
        te_sysfs_warn(log, "%s: more than %d NUMA nodes; %d ignored", dirpath,
                      TE_TOPO_MAX_NODES, dropped);
    qsort(ids, (size_t)n, sizeof(int), cmp_int);
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        struct te_topo_cpuset s;
        if (te_sysfs_path(path, sizeof(path), "%s/node%d/cpulist", dirpath,
                          ids[i]))
            continue;
        if (te_sysfs_read_cpulist(log, path, &s) < 0)
            continue; /* warned; node left out */
        ci->node_id[ci->nnodes] = ids[i];
        ci->node_cpus[ci->nnodes] = s;
        ci->nnodes++;
        for (int c = 0; c < TE_TOPO_MAX_CPUS; c++) {
            if (!te_topo_cpuset_has(&s, c))
                continue;
            if (ci->node_of[c] >= 0 && ci->node_of[c] != ids[i])
                te_sysfs_warn(log, "%s: cpu %d is also in node %d; kept there",
                              path, c, ci->node_of[c]);
            else
                ci->node_of[c] = ids[i];
        }
    }
}

void te_cpu_scan(const char *root, struct te_cpu_info *ci,
                 struct te_sysfs_log *log)
{
    memset(ci, 0, sizeof(*ci));
    for (int c = 0; c < TE_TOPO_MAX_CPUS; c++)
        ci->core_of[c] = c, ci->node_of[c] = -1;

    char cpudir[PATH_MAX], path[PATH_MAX];
    if (te_sysfs_path(cpudir, sizeof(cpudir), "%s/devices/system/cpu", root))
        return;
    /* Online CPUs: the "online" list, else every cpuN directory. */
    if (te_sysfs_path(path, sizeof(path), "%s/online", cpudir) == 0 &&
        te_sysfs_read_cpulist(log, path, &ci->online) == 1 &&
        te_topo_cpuset_count(&ci->online) > 0) {
        ci->have = 1;
    } else {
        DIR *dir = opendir(cpudir);
        if (dir) {
            struct dirent *de;
            while ((de = readdir(dir))) {
                int c = numbered(de->d_name, "cpu");
                if (c >= 0 && c < TE_TOPO_MAX_CPUS) {
                    te_topo_cpuset_add(&ci->online, c);
                    ci->have = 1;
                }
            }
            closedir(dir);
        }
    }
    if (!ci->have)
        return;

    /* Physical cores. */
    static const long unknown = -1;
    long *pkg = malloc(sizeof(long) * 2 * TE_TOPO_MAX_CPUS);
    long *core = pkg ? pkg + TE_TOPO_MAX_CPUS : NULL;
    for (int c = 0; c < TE_TOPO_MAX_CPUS; c++) {
        if (pkg)
            pkg[c] = core[c] = unknown;
        if (!te_topo_cpuset_has(&ci->online, c))
            continue;
        struct te_topo_cpuset sib;
        if (te_sysfs_path(path, sizeof(path),
                          "%s/cpu%d/topology/thread_siblings_list", cpudir,
                          c) == 0 &&
            te_sysfs_read_cpulist(log, path, &sib) == 1) {
            if (!te_topo_cpuset_has(&sib, c)) {
                te_sysfs_warn(log, "%s: does not list cpu %d itself", path, c);
            } else {
                for (int s = 0; s < TE_TOPO_MAX_CPUS; s++)
                    if (te_topo_cpuset_has(&sib, s)) {
                        ci->core_of[c] = s;
                        break;
                    }
                continue;
            }
        }
        if (!pkg)
            continue;
        long v;
        if (te_sysfs_path(path, sizeof(path),
                          "%s/cpu%d/topology/physical_package_id", cpudir,
                          c) == 0 &&
            te_sysfs_read_long(log, path, 10, &v) == 1)
            pkg[c] = v;
        if (te_sysfs_path(path, sizeof(path), "%s/cpu%d/topology/core_id",
                          cpudir, c) == 0 &&
            te_sysfs_read_long(log, path, 10, &v) == 1)
            core[c] = v;
        /* Without a sibling list: the lowest CPU with the same ids. */
        if (core[c] != unknown)
            for (int o = 0; o < c; o++)
                if (core[o] == core[c] && pkg[o] == pkg[c] &&
                    ci->core_of[o] == o) {
                    ci->core_of[c] = o;
                    break;
                }
    }
    free(pkg);
    scan_nodes(root, ci, log);
}
