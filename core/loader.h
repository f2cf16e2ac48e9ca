/*
 * Plugin discovery and ABI negotiation.
 * Search order for a plugin given by NAME (not a path): each directory of
 * TE_PLUGIN_PATH (colon separated), then engine.plugin_path from the
 * config, then the install directory (TE_PLUGIN_INSTALL_DIR). File name:
 * libte-plugin-NAME.so. A value containing '/' is used as a path directly.
 */
#ifndef TE_CORE_LOADER_H
#define TE_CORE_LOADER_H

#include <stddef.h>
#include "te/plugin.h"

struct te_loaded_plugin {
    void *dl;                         /* dlopen handle */
    const struct te_plugin_ops *ops;  /* negotiated table */
    char path[4096];                  /* where it was found */
};

/**
 * Load and negotiate. config_path may be NULL. On failure returns -errno
 * with a message listing every place tried and why each was refused
 * (not found / dlopen error / missing symbol / ABI major X.Y vs core A.B /
 * table too small: N bytes < M).
 */
int te_plugin_load(const char *name_or_path, const char *config_path,
                   struct te_loaded_plugin *out);
void te_plugin_unload(struct te_loaded_plugin *p);

/**
 * Check a table returned by an entry point against the core's ABI:
 * 0 or -EPROTO/-EINVAL with a message naming both versions.
 */
int te_plugin_check_ops(const struct te_plugin_ops *ops, const char *where);

/** One candidate found while scanning for te-info. */
struct te_plugin_candidate {
    char path[4096];
    char name[64];
    char version[64];
    unsigned abi_major, abi_minor;
    int usable;        /* 1 if it would load */
    char why[256];     /* reason if not usable */
};

/**
 * List every libte-plugin-*.so in the search path (deduplicated by name,
 * first wins, later ones reported as shadowed). Returns the number found
 * (up to max) or -errno.
 */
int te_plugin_scan(const char *config_path, struct te_plugin_candidate *out,
                   int max);

#endif
