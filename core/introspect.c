/*
 * te/te_introspect.h: the unstable introspection API te-info is built on
 * (plugins found, documented configuration keys, topology report). Thin
 * wrappers over the loader, the configuration tables and the layout module,
 * so that no installed program includes a private core header.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "layout.h"
#include "loader.h"
#include "plugin_config.h"
#include "te/plugin.h"
#include "te/te_introspect.h"
#include "te_error.h"

_Static_assert(sizeof(((te_plugin_found *)0)->path) ==
                   sizeof(((struct te_plugin_candidate *)0)->path) &&
               sizeof(((te_plugin_found *)0)->name) ==
                   sizeof(((struct te_plugin_candidate *)0)->name) &&
               sizeof(((te_plugin_found *)0)->version) ==
                   sizeof(((struct te_plugin_candidate *)0)->version) &&
               sizeof(((te_plugin_found *)0)->why) ==
                   sizeof(((struct te_plugin_candidate *)0)->why),
               "te_plugin_found mirrors struct te_plugin_candidate");

static const char *plugin_path_of(const te_config *cfg)
{
    return cfg ? te_config_get_str(cfg, "engine", "plugin_path", "") : "";
}

int te_introspect_plugins(const te_config *cfg, te_plugin_found *out, int max)
{
    te_error_clear();
    if (max < 0 || (max > 0 && !out))
        return te_fail(-EINVAL, "te_introspect_plugins: out is NULL or max < 0");
    struct te_plugin_candidate c[64];
    int n = te_plugin_scan(plugin_path_of(cfg), c, max < 64 ? max : 64);
    for (int i = 0; i < n; i++) {
        memcpy(out[i].path, c[i].path, sizeof(out[i].path));
        memcpy(out[i].name, c[i].name, sizeof(out[i].name));
        memcpy(out[i].version, c[i].version, sizeof(out[i].version));
        out[i].abi_major = c[i].abi_major;
        out[i].abi_minor = c[i].abi_minor;
        out[i].usable = c[i].usable;
        memcpy(out[i].why, c[i].why, sizeof(out[i].why));
    }
    return n;
}

void te_introspect_plugin_abi(unsigned *major, unsigned *minor)
{
    if (major)
        *major = TE_PLUGIN_ABI_MAJOR;
    if (minor)
        *minor = TE_PLUGIN_ABI_MINOR;
}

int te_introspect_config_keys(const te_config *cfg, const char *plugin,
                              te_config_key_fn fn, void *arg)
{
    te_error_clear();
    if (!fn)
        return te_fail(-EINVAL, "te_introspect_config_keys: fn is NULL");
    for (const struct te_config_key *k = te_engine_keys; k->name; k++)
        fn(arg, "engine", k->name, k->default_value, k->doc, NULL);
    if (!plugin)
        return 0;
    struct te_loaded_plugin p;
    int rc = te_plugin_load(plugin, plugin_path_of(cfg), &p);
    if (rc)
        return rc; /* te_plugin_load recorded why */
    struct te_pcfg keys;
    char why[256];
    rc = te_pcfg_read(p.ops, &keys, why, sizeof why); /* the loader checked it */
    for (size_t i = 0; rc == 0 && i < keys.n; i++) {
        char values[160];
        te_pcfg_describe(&keys.keys[i], values, sizeof values);
        fn(arg, p.ops->name, keys.keys[i].name, keys.keys[i].default_value,
           keys.keys[i].doc, values);
    }
    te_pcfg_free(&keys);
    te_plugin_unload(&p);
    return rc ? te_fail(rc, "plugin %s: %s", plugin, why) : 0;
}

int te_introspect_topology(const te_engine *e, FILE *f)
{
    te_error_clear();
    if (!e || !f)
        return te_fail(-EINVAL, "te_introspect_topology: engine or FILE is NULL");
    te_layout_describe(e, f);
    return 0;
}
