/*
 * Worker CPU choice for the groups of a discovered topology (internal to
 * the topology module; rules in topology_cpu.c and docs/topology.md).
 */
#ifndef TE_CORE_TOPOLOGY_CPU_H
#define TE_CORE_TOPOLOGY_CPU_H

#include "sysfs_cpu.h"
#include "topology.h"

/**
 * Give every group of t a worker CPU: engine.worker_cpus entries first
 * (-EINVAL if such a CPU is not online), then automatic choices. 0 or
 * negative errno (message set).
 */
int te_topo_pick_cpus(struct te_topology *t, const struct te_topo_overrides *ov,
                      const struct te_cpu_info *ci);

#endif
