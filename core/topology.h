/*
 * Topology detection: which NICs and which CPU belong to which GPU.
 *
 * The module reads a sysfs tree (the real /sys or a fixture tree with the
 * same layout), finds GPUs by PCI class and vendor, places the plugin's NICs
 * in the PCI tree, and forms one group per GPU:
 *   1. the NICs that share the GPU's PCIe switch (deepest common upstream
 *      bridge below the host bridge; ties split in PCI order),
 *   2. else the NICs on the GPU's NUMA node,
 *   3. else any NIC (shared round the GPUs),
 * with no GPU at all: one group of every (included) NIC. Each group gets a
 * worker CPU on its NUMA node, physical cores first, distinct where
 * possible. Configuration overrides (explicit NIC lists and CPUs per group,
 * include/exclude patterns) are parsed from the [engine] key strings by
 * te_topo_overrides_set() so the module does not depend on te_config.
 * Rules, keys and the fixture trees: docs/topology.md.
 *
 * Nothing here allocates on behalf of the caller: struct te_topology is a
 * plain (large, ~100 KiB) struct; allocate it on the heap.
 */
#ifndef TE_CORE_TOPOLOGY_H
#define TE_CORE_TOPOLOGY_H

#include <stdint.h>
#include <stdio.h>

#include "config.h" /* struct te_config_key */
#include "te/te.h"  /* TE_MAX_NICS */

#define TE_TOPO_MAX_GPUS 64       /* GPUs considered (and groups formed) */
#define TE_TOPO_MAX_GROUPS 64     /* same bound as engine.groups */
#define TE_TOPO_MAX_NICS 256      /* plugin devices considered */
#define TE_TOPO_MAX_CPUS 1024     /* CPUs numbered >= this are ignored */
#define TE_TOPO_MAX_NODES 64      /* NUMA nodes */
#define TE_TOPO_MAX_PATTERNS 16   /* per include / exclude list */
#define TE_TOPO_MAX_WARNINGS 16   /* further ones are counted, not kept */
#define TE_TOPO_CPU_WORDS (TE_TOPO_MAX_CPUS / 64)
#define TE_PCI_ADDR_LEN 20        /* "0000:4f:00.0"; VMD domains have 5+ digits */

/** One plugin device, as the plugin reports it (te_plugin_device_info). */
struct te_topo_nic {
    const char *name;     /**< "rdmap79s0", "mlx5_0", "lo0" */
    const char *pci_path; /**< "0000:4f:00.0"; NULL or "" = virtual NIC */
    int numa_node;        /**< -1 = unknown (then read from sysfs) */
    uint64_t link_gbps;   /**< 0 = unknown; shown in the description only */
};

/** engine.topology */
enum te_topo_mode {
    TE_TOPO_MODE_AUTO = 0, /**< discover and group by the rules above */
    TE_TOPO_MODE_OFF = 1,  /**< engine keeps groups/nics_per_group/group_nics */
};

/** A CPU set as a bitmask of TE_TOPO_MAX_CPUS bits. */
struct te_topo_cpuset {
    uint64_t w[TE_TOPO_CPU_WORDS];
};

/**
 * Overrides, filled by te_topo_overrides_init() and te_topo_overrides_set().
 * Fields may also be set directly (tests do).
 */
struct te_topo_overrides {
    int mode;                 /**< enum te_topo_mode */
    char sysfs_root[256];     /**< "/sys" by default */
    int n_include, n_exclude; /**< fnmatch patterns on NIC name or PCI path */
    char include[TE_TOPO_MAX_PATTERNS][64];
    char exclude[TE_TOPO_MAX_PATTERNS][64];
    int groups;               /**< 0 = one group per GPU (1 without GPU) */
    int max_nics;             /**< 0 = all; else use at most this many per group */
    int n_group_nics;         /**< entries of group_nics; 0 = not set */
    int group_nic_count[TE_TOPO_MAX_GROUPS]; /**< 0 = "" entry: discover */
    int group_nics[TE_TOPO_MAX_GROUPS][TE_MAX_NICS]; /**< plugin device indices */
    int n_worker_cpus;        /**< entries of worker_cpus; 0 = not set */
    int worker_cpus[TE_TOPO_MAX_GROUPS]; /**< -1 = "" entry: choose */
    int have_allowed;         /**< restrict automatic CPU choice to allowed */
    struct te_topo_cpuset allowed;
};

/** Defaults: auto, "/sys", no patterns, no explicit lists. */
void te_topo_overrides_init(struct te_topo_overrides *ov);

/**
 * Apply one [engine] key: "topology", "sysfs_root", "nic_include",
 * "nic_exclude", "group_nics", "worker_cpus", "groups", "nics_per_group".
 * value is the text as read from the configuration (NULL = leave unset).
 * Returns 0, -ENOENT for a key this module does not handle, or -EINVAL with
 * a message naming engine.KEY, the text and what was expected.
 */
int te_topo_overrides_set(struct te_topo_overrides *ov, const char *key,
                          const char *value);

/**
 * Restrict automatic worker CPU choice to this process's CPU affinity
 * (sched_getaffinity). Explicit worker_cpus are not restricted. 0 or -errno.
 */
int te_topo_overrides_use_process_affinity(struct te_topo_overrides *ov);

/** Why a group has its NICs. */
enum te_topo_reason {
    TE_TOPO_REASON_SWITCH = 1,   /**< NICs below the GPU's PCIe switch */
    TE_TOPO_REASON_NUMA = 2,     /**< no switch-local NIC: NICs of its NUMA node */
    TE_TOPO_REASON_ANY = 3,      /**< no NIC near the GPU: shared from all */
    TE_TOPO_REASON_OVERRIDE = 4, /**< engine.group_nics */
    TE_TOPO_REASON_NO_GPU = 5,   /**< no GPU: all NICs (split over groups) */
};

/** A GPU found in sysfs. */
struct te_topo_gpu {
    char pci[TE_PCI_ADDR_LEN]; /**< "0000:53:00.0" */
    uint32_t vendor, device, pci_class;
    int numa_node;          /**< -1 = unknown */
    char numa_source[24];   /**< "numa_node", "local_cpulist", "unknown" */
};

/** State of a plugin device after discovery. */
enum te_topo_nic_state {
    TE_TOPO_NIC_USED = 0,     /**< in at least one group */
    TE_TOPO_NIC_EXCLUDED = 1, /**< removed by nic_include / nic_exclude */
    TE_TOPO_NIC_UNUSED = 2,   /**< not near any GPU that needed it */
};

struct te_topo_nic_info {
    char name[64];
    char pci[TE_PCI_ADDR_LEN]; /**< normalized "dddd:bb:dd.f", "" if virtual */
    int pci_found;      /**< its PCI device exists under the sysfs root */
    int numa_node;      /**< plugin's value, else sysfs, else -1 */
    uint64_t link_gbps;
    int state;          /**< enum te_topo_nic_state */
    char note[160];     /**< why excluded / unused */
};

struct te_topo_group {
    int gpu;                 /**< index into gpus[], -1 = none */
    int numa_node;           /**< node the worker CPU was chosen on, -1 = any */
    int nic_count;
    int nics[TE_MAX_NICS];   /**< indices into the caller's NIC array */
    int reason;              /**< enum te_topo_reason */
    char reason_text[160];   /**< "pcie-switch 0000:45:00.0", "numa 1", ... */
    int worker_cpu;          /**< -1 = leave unpinned (no CPU information) */
    char cpu_reason[128];    /**< "numa 0, physical core", "override", ... */
};

struct te_topology {
    char sysfs_root[256];
    int mode;                        /**< enum te_topo_mode (from overrides) */
    int pci_devices;                 /**< PCI devices read */
    int have_pci;                    /**< <root>/bus/pci/devices exists */
    int ngpus;
    struct te_topo_gpu gpus[TE_TOPO_MAX_GPUS];
    int gpus_dropped;                /**< beyond TE_TOPO_MAX_GPUS */
    int nnics;
    struct te_topo_nic_info nics[TE_TOPO_MAX_NICS];
    int ngroups;
    struct te_topo_group groups[TE_TOPO_MAX_GROUPS];
    /* CPUs */
    int have_cpus;                   /**< CPU topology was readable */
    int ncpus, ncores;               /**< online CPUs, physical cores */
    struct te_topo_cpuset online;
    int nnodes;
    int node_id[TE_TOPO_MAX_NODES];
    struct te_topo_cpuset node_cpus[TE_TOPO_MAX_NODES];
    /* Problems found in files (garbage, truncated lists); never fatal. */
    int nwarnings, warnings_dropped;
    char warnings[TE_TOPO_MAX_WARNINGS][256];
};

/**
 * Discover the topology under sysfs_root (NULL: ov->sysfs_root, "" or
 * unset: "/sys") for the plugin's nnics devices, apply the overrides (NULL:
 * defaults) and fill *out. Missing files are not errors (unknown values);
 * unreadable or malformed ones become warnings naming the file.
 * Errors (negative errno, message in te_last_error()): -ENOENT the root does
 * not exist; -EINVAL an override does not fit (too many groups for the GPUs
 * found, an excluded or unknown device in group_nics, a CPU that is not
 * online); -ENODEV a group would have no NIC; -ENOMEM.
 */
int te_topology_discover(const char *sysfs_root, const struct te_topo_nic *nics,
                         int nnics, const struct te_topo_overrides *ov,
                         struct te_topology *out);

/**
 * Human-readable explanation: what was found (GPUs, NUMA nodes, CPUs, NICs)
 * and, per group, its GPU, NICs, why (switch, NUMA, override, no GPU) and
 * its worker CPU; then unused and excluded NICs and warnings.
 */
void te_topology_describe(const struct te_topology *t, FILE *f);

/** Name of a reason: "pcie-switch", "numa", "any", "override", "no-gpu". */
const char *te_topo_reason_name(int reason);

/** cpuset helpers */
static inline void te_topo_cpuset_add(struct te_topo_cpuset *s, int cpu)
{
    if (cpu >= 0 && cpu < TE_TOPO_MAX_CPUS)
        s->w[cpu / 64] |= 1ull << (cpu % 64);
}
static inline int te_topo_cpuset_has(const struct te_topo_cpuset *s, int cpu)
{
    return cpu >= 0 && cpu < TE_TOPO_MAX_CPUS &&
           (s->w[cpu / 64] >> (cpu % 64)) & 1;
}
int te_topo_cpuset_count(const struct te_topo_cpuset *s);
/** "0-47,96-143" ("" if empty), truncated with "..." if buf is short. */
char *te_topo_cpuset_format(const struct te_topo_cpuset *s, char *buf,
                            size_t len);

#endif
