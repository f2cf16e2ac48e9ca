/*
 * Configuration store: section/key/value strings loaded from INI (inih) or
 * set programmatically, with environment overrides and validation against
 * tables of known keys.
 */
#ifndef TE_CORE_CONFIG_H
#define TE_CORE_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include "te/te.h"

/** A documented key of a section. Tables end with {NULL}. */
struct te_config_key {
    const char *name;
    const char *default_value; /* NULL = no default */
    const char *doc;
};

/** Keys of section [engine] (defined in config_keys.c). */
extern const struct te_config_key te_engine_keys[];

/** Deep copy (NULL on allocation failure). */
te_config *te_config_clone(const te_config *cfg);

/**
 * Check that every key set in `section` (file or te_config_set; env
 * overrides are only consulted for known keys) is in `keys`. On an unknown
 * key: -EINVAL and a message naming section, key, origin (file:line or
 * "te_config_set") and the nearest known key if any.
 */
int te_config_validate_section(const te_config *cfg, const char *section,
                               const struct te_config_key *keys);

/**
 * -EINVAL with message if a section is set that is not in `sections`
 * (NULL-terminated list of names).
 */
int te_config_validate_sections(const te_config *cfg, const char *const *sections);

/** Visit every (section, key, value) set explicitly, in insertion order. */
void te_config_foreach(const te_config *cfg,
                       void (*fn)(const char *section, const char *key,
                                  const char *value, void *arg),
                       void *arg);

/**
 * Typed getters: effective value (env override > set value > default_value
 * passed here). Return 0 or -EINVAL with a message naming section.key, the
 * bad text and what was expected. Integers accept decimal, 0x hex and the
 * suffixes k/K (1024), m/M, g/G; bounds are inclusive.
 */
int te_config_get_u64(const te_config *cfg, const char *section, const char *key,
                      uint64_t def, uint64_t min, uint64_t max, uint64_t *out);
int te_config_get_bool(const te_config *cfg, const char *section, const char *key,
                       int def, int *out); /* true/false/yes/no/on/off/1/0 */
int te_config_get_double(const te_config *cfg, const char *section, const char *key,
                         double def, double min, double max, double *out);
/**
 * The typed getters' parsing and messages on a given text: `origin` says
 * where it comes from ("default of plugin x", "conf/x.ini:3"). For values
 * that do not come from the store, e.g. a plugin's declared defaults.
 */
int te_config_parse_u64(const char *section, const char *key, const char *text,
                        const char *origin, uint64_t min, uint64_t max,
                        uint64_t *out);
int te_config_parse_bool(const char *section, const char *key, const char *text,
                         const char *origin, int *out);
int te_config_parse_double(const char *section, const char *key,
                           const char *text, const char *origin, double min,
                           double max, double *out);

/**
 * The nearest of names to `typed` within edit distance 3 that is not a
 * complete rewrite (the "did you mean" of messages), or NULL.
 */
const char *te_config_suggest(const char *typed, const char *const *names,
                              size_t n);

/** String getter: effective value or def. */
const char *te_config_get_str(const te_config *cfg, const char *section,
                              const char *key, const char *def);

/* ---- additions (config.c) ---- */

/**
 * Stored value of section.key (file or te_config_set), ignoring the
 * environment; NULL if unset. E.g. the loader searches TE_PLUGIN_PATH and
 * then the stored engine.plugin_path (te_config_get() would return
 * TE_PLUGIN_PATH for both, hiding the file's value).
 */
const char *te_config_get_stored(const te_config *cfg, const char *section,
                                 const char *key);

/**
 * Where the effective value of section.key comes from, written to buf:
 * "environment TE_ENGINE_GROUPS", "conf/x.ini:12", "string:3" or
 * "te_config_set". Returns buf, or NULL if the key is unset (default).
 */
const char *te_config_origin(const te_config *cfg, const char *section,
                             const char *key, char *buf, size_t len);

/**
 * Name of the environment variable overriding section.key:
 * "TE_" SECTION "_" KEY, upper case, '-' and '.' mapped to '_'.
 * 0, -EINVAL or -ENAMETOOLONG. (engine.plugin and engine.plugin_path also
 * read the shorthands TE_PLUGIN and TE_PLUGIN_PATH.)
 */
int te_config_env_name(const char *section, const char *key, char *buf,
                       size_t len);

#endif
