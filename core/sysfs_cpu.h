/*
 * CPUs and NUMA nodes from sysfs:
 *   <root>/devices/system/cpu/online                      online CPUs
 *   <root>/devices/system/cpu/cpuN/topology/thread_siblings_list
 *   <root>/devices/system/cpu/cpuN/topology/{core_id,physical_package_id}
 *   <root>/devices/system/node/nodeN/cpulist
 * A CPU is the "primary" thread of its physical core when it is the lowest
 * numbered CPU of its thread_siblings_list (or, without that file, of the
 * CPUs with the same physical_package_id and core_id).
 */
#ifndef TE_CORE_SYSFS_CPU_H
#define TE_CORE_SYSFS_CPU_H

#include "sysfs_util.h"

struct te_cpu_info {
    int have;                         /* some CPU information was found */
    struct te_topo_cpuset online;
    int core_of[TE_TOPO_MAX_CPUS];    /* primary CPU of the core, or itself */
    int node_of[TE_TOPO_MAX_CPUS];    /* -1 unknown */
    int nnodes;
    int node_id[TE_TOPO_MAX_NODES];   /* ascending */
    struct te_topo_cpuset node_cpus[TE_TOPO_MAX_NODES];
};

/** Scan; never fails (unknowns stay unknown, problems are warned). */
void te_cpu_scan(const char *root, struct te_cpu_info *out,
                 struct te_sysfs_log *log);

/** Index into node_id[] of NUMA node `node`, or -1. */
int te_cpu_node_index(const struct te_cpu_info *ci, int node);

#endif
