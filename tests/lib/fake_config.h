/*
 * Configuration for tests that drive a plugin through a fake host (no
 * engine): the plugin's section is served with the core's own store and
 * checks (core/plugin_config.c), so the plugin sees what an engine would
 * give it, typed getters of plugin ABI 1.4 included.
 */
#ifndef TE_TEST_FAKE_CONFIG_H
#define TE_TEST_FAKE_CONFIG_H

#include "plugin_config.h"
#include "te/plugin.h"
#include "te/te.h"

struct te_fake_config {
    te_config *cfg;       /* the plugin's section, from the test's pairs */
    struct te_pcfg keys;  /* the plugin's declared keys */
};

/**
 * Fill fc from kv ("key", "value", ..., NULL; NULL kv = no keys) for the
 * section of ops->name. 0 or -errno (te_last_error() says why).
 */
int te_fake_config_init(struct te_fake_config *fc,
                        const struct te_plugin_ops *ops,
                        const char *const *kv);
void te_fake_config_fini(struct te_fake_config *fc);

/**
 * Point host's config_get and config_u64/bool/double/enum at fc's: the
 * host's host_ctx must be fc (or a struct that begins with one). A
 * failed typed read leaves the core's message in te_last_error().
 */
void te_fake_config_install(struct te_plugin_host *host);

#endif
