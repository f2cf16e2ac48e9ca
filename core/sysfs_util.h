/*
 * Reading small sysfs files defensively: a missing file is "unknown", never
 * an error; a malformed one becomes a warning that names the file. Used by
 * the PCI tree walk (sysfs_pci.c) and the CPU/NUMA scan (sysfs_cpu.c).
 */
#ifndef TE_CORE_SYSFS_UTIL_H
#define TE_CORE_SYSFS_UTIL_H

#include <stddef.h>

#include "topology.h" /* struct te_topo_cpuset */

/** Where warnings go: a fixed array of messages, the rest only counted. */
struct te_sysfs_log {
    int *n;          /* messages stored */
    int *dropped;    /* messages beyond cap */
    int cap;
    char (*msg)[256];
};

void te_sysfs_warn(struct te_sysfs_log *log, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** snprintf into buf; -ENAMETOOLONG if it does not fit, else 0. */
int te_sysfs_path(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/**
 * Read a file into buf (NUL-terminated, trailing blanks and newlines
 * removed). Returns the length, or -errno (-ENOENT if missing, -EFBIG if it
 * does not fit in len - 1 bytes).
 */
int te_sysfs_read(const char *path, char *buf, size_t len);

/**
 * Read one integer (base 10, or 16 with or without "0x"). Returns 1 and sets
 * *out; 0 if the file is missing or empty (*out untouched); -1 if it holds
 * anything else (warned, naming the file and the text).
 */
int te_sysfs_read_long(struct te_sysfs_log *log, const char *path, int base,
                       long *out);

/** Parse "0-3,8,10-11" (also "" = empty). 0 or -1 on a syntax error. */
int te_cpulist_parse(const char *text, struct te_topo_cpuset *out,
                     int *beyond_max);

/** Read a cpulist file: 1 read, 0 missing, -1 malformed (warned). */
int te_sysfs_read_cpulist(struct te_sysfs_log *log, const char *path,
                          struct te_topo_cpuset *out);

#endif
