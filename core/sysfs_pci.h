/*
 * The PCI tree as sysfs shows it: every <root>/bus/pci/devices/BDF entry is
 * a symlink to ../../../devices/pciDDDD:BB/<root port>/<bridge>/.../BDF, so
 * the link text lists the device's upstream bridges from the root port
 * down. We read class, vendor, device, numa_node and local_cpulist of each
 * device and keep that chain of bridges for "same PCIe switch" decisions.
 */
#ifndef TE_CORE_SYSFS_PCI_H
#define TE_CORE_SYSFS_PCI_H

#include <stdint.h>

#include "sysfs_util.h"

#define TE_PCI_MAX_DEPTH 16   /* bridges kept per device */
#define TE_PCI_UNKNOWN 0xffffffffu

struct te_pci_dev {
    char bdf[TE_PCI_ADDR_LEN];   /* "0000:4f:00.0" (lower case) */
    uint32_t vendor, device;     /* TE_PCI_UNKNOWN if missing/garbage */
    uint32_t pci_class;          /* 24 bits, e.g. 0x030200 */
    int numa_node;               /* -1 unknown */
    int have_local_cpus;
    struct te_topo_cpuset local_cpus;
    char host[24];               /* "pci0000:44", "" if unknown */
    int nanc;                    /* bridges above the device */
    char anc[TE_PCI_MAX_DEPTH][TE_PCI_ADDR_LEN]; /* [0] = root port ... [nanc-1] = parent */
};

struct te_pci_list {
    int n, cap;
    struct te_pci_dev *d;
    int have_dir;                /* <root>/bus/pci/devices exists */
};

/** Scan <root>/bus/pci/devices. 0, or -ENOMEM (the list is then freed). */
int te_pci_scan(const char *root, struct te_pci_list *out,
                struct te_sysfs_log *log);
void te_pci_free(struct te_pci_list *l);

/** Device by normalized BDF, NULL if absent. */
const struct te_pci_dev *te_pci_find(const struct te_pci_list *l,
                                     const char *bdf);

/**
 * Normalize "0000:4F:00.0", "4f:00.0" or a path ending in a BDF into
 * "0000:4f:00.0". 0, or -1 if it is not a PCI address.
 */
int te_pci_normalize(const char *in, char out[TE_PCI_ADDR_LEN]);

/** Order of two normalized BDFs (domain, bus, device, function). */
int te_pci_cmp(const char *a, const char *b);

/**
 * Number of upstream bridges two devices share (0 = none: different host
 * bridges, or the chain of either is unknown). The deepest shared bridge is
 * a->anc[depth - 1].
 */
int te_pci_common_depth(const struct te_pci_dev *a, const struct te_pci_dev *b);

#endif
