/*
 * A plugin's configuration keys as the core serves them: read from the
 * plugin's typed table (ABI 1.4 config_params) or its untyped 1.0
 * config_keys, checked for malformation when the plugin is loaded,
 * validated against the engine's configuration when an engine is created,
 * and read back by the host's config_* getters.
 */
#ifndef TE_CORE_PLUGIN_CONFIG_H
#define TE_CORE_PLUGIN_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "te/plugin.h"
#include "te/te.h"

/** Most keys a plugin may declare (a table without its end stops here). */
#define TE_PCFG_MAX_KEYS 256

/** One key, whichever table it came from (strings point into the plugin). */
struct te_pcfg_key {
    const char *name;
    const char *default_value; /* NULL: none */
    const char *doc;
    uint32_t type;             /* enum te_plugin_config_type; 1.0 keys: STRING */
    uint64_t min_u64, max_u64;
    double min_double, max_double;
    const char *choices;       /* ENUM: "a|b|c" */
};

/** The keys of one plugin's section. */
struct te_pcfg {
    const char *section; /* the plugin's name */
    struct te_pcfg_key *keys;
    size_t n;
};

/**
 * Read and check the plugin's table. 0, -ENOMEM, or -EINVAL with the
 * malformation (naming the key) written to why, for the loader to refuse
 * the plugin with.
 */
int te_pcfg_read(const struct te_plugin_ops *ops, struct te_pcfg *out,
                 char *why, size_t len);
void te_pcfg_free(struct te_pcfg *t);

/**
 * Check the plugin's section of cfg: every key set is declared (unknown:
 * -EINVAL naming it, with a suggestion or the known keys), every declared
 * key's effective value (environment, set value or default) is valid for
 * its type and range (-EINVAL with the getters' message).
 */
int te_pcfg_validate(const te_config *cfg, const struct te_pcfg *t);

/**
 * Typed reads of the effective value of a declared key. 0; -ENOENT when
 * no key of that name and type is declared; -EINVAL with a message for a
 * bad value. The enum read gives the index among the choices.
 */
int te_pcfg_u64(const te_config *cfg, const struct te_pcfg *t, const char *key,
                uint64_t *out);
int te_pcfg_bool(const te_config *cfg, const struct te_pcfg *t, const char *key,
                 int *out);
int te_pcfg_double(const te_config *cfg, const struct te_pcfg *t,
                   const char *key, double *out);
int te_pcfg_enum(const te_config *cfg, const struct te_pcfg *t, const char *key,
                 int *out);

/** The declared default of key (NULL when it has none or is unknown). */
const char *te_pcfg_default(const struct te_pcfg *t, const char *key);

/**
 * What values a key takes, for te-info: "integer in [0, 64]", "one of
 * auto|on|off", "boolean", "number in [0, 1]", "text".
 */
void te_pcfg_describe(const struct te_pcfg_key *k, char *buf, size_t len);

/**
 * Sections of cfg that are neither [engine] nor the loaded plugin's: one
 * close to either name is a typo (-EINVAL, "did you mean"); any other is
 * the section of a plugin that is not loaded, reported through warn (the
 * engine logs it at warning level) and ignored.
 */
int te_pcfg_check_sections(const te_config *cfg, const char *plugin,
                           void (*warn)(void *arg, const char *section,
                                        const char *origin),
                           void *arg);

#endif
