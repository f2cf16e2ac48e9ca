/*
 * TransferEngine introspection: UNSTABLE.
 *
 * What te-info prints that the stable API (te/te.h) does not describe: the
 * plugins on the search path and why any was refused, the documented keys
 * of every configuration section, and the topology report. It is installed
 * for te-info and for diagnostics tools built with the same release.
 *
 * No promise of any kind across releases: functions, structs and output
 * formats here change without notice. The functions are exported under the
 * symbol version node TE_INTROSPECT_<major>.<minor>.<patch> of the release
 * that built the library (docs/abi.md), so a program built against another
 * release fails to start with "version ... not found" instead of
 * misreading a struct. Applications use te/te.h only.
 */
#ifndef TE_INTROSPECT_H
#define TE_INTROSPECT_H

#include <stdio.h>

#include "te/te.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One libte-plugin-*.so found on the search path. */
typedef struct te_plugin_found {
    char path[4096];
    char name[64];        /**< "" when not even the name could be read */
    char version[64];
    unsigned abi_major, abi_minor;
    int usable;           /**< 1: it would load */
    char why[256];        /**< why not, when usable == 0 */
} te_plugin_found;

/**
 * The plugins on the search path of `cfg` ($TE_PLUGIN_PATH,
 * engine.plugin_path, beside the library, the install directory; cfg may be
 * NULL), deduplicated by name (first wins, later ones reported as shadowed).
 * Returns the number found (at most max) or -errno.
 */
TE_API int te_introspect_plugins(const te_config *cfg, te_plugin_found *out,
                                 int max);

/** The plugin ABI version this library speaks (include/te/plugin.h). */
TE_API void te_introspect_plugin_abi(unsigned *major, unsigned *minor);

/**
 * Called once per documented configuration key: its section, name, default
 * (NULL when it has none), meaning, and the values it takes as the core
 * checks them ("integer in [1, 256]", "one of auto|on|off", "boolean",
 * "text"; NULL for [engine] keys, whose doc says it). The strings live for
 * the call only.
 */
typedef void (*te_config_key_fn)(void *arg, const char *section,
                                 const char *name, const char *default_value,
                                 const char *doc, const char *values);

/**
 * Visit the keys of section [engine], then, when `plugin` is not NULL, load
 * that plugin (name or path, found through cfg's engine.plugin_path) and
 * visit the keys of its own section. 0, or -errno when the plugin cannot be
 * loaded (the [engine] keys were visited; te_last_error() says why).
 */
TE_API int te_introspect_config_keys(const te_config *cfg, const char *plugin,
                                     te_config_key_fn fn, void *arg);

/**
 * The topology report of an engine (te-info --topology): GPUs, NUMA nodes,
 * CPUs and NICs found, the grouping chosen and why. 0 or -EINVAL.
 */
TE_API int te_introspect_topology(const te_engine *e, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
