/*
 * A plugin's declared configuration keys (plugin_config.h). The typed
 * table is read entry by entry struct_size apart, so a plugin built with
 * a longer te_plugin_config_param (a later minor) still reads right; every
 * check a malformed table can fail names the key, because the vendor who
 * reads the message has only the table to go on.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "plugin_config.h"
#include "te_error.h"

/* Longest key name (config.c's limit). */
#define NAME_MAX_LEN 64

/* Size of the 1.4 te_plugin_config_param: every field the core reads. */
#define PARAM_SIZE_1_4                                                         \
    (offsetof(struct te_plugin_config_param, choices) + sizeof(const char *))

static int name_ok(const char *s)
{
    size_t n = 0;
    if (!s || !*s)
        return 0;
    for (; s[n]; n++)
        if ((!isalnum((unsigned char)s[n]) && s[n] != '_' && s[n] != '-' &&
             s[n] != '.') || n >= NAME_MAX_LEN)
            return 0;
    return 1;
}

/* Word number `idx` of "a|b|c" into buf; 0, or -1 past the last word. */
static int choice_at(const char *choices, int idx, char *buf, size_t len)
{
    const char *p = choices;
    for (int i = 0; i < idx; i++) {
        p = strchr(p, '|');
        if (!p)
            return -1;
        p++;
    }
    size_t n = strcspn(p, "|");
    if (n >= len)
        n = len - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return 0;
}

/* Index of text among the choices (blanks around ignored), or -1. */
static int choice_index(const char *choices, const char *text)
{
    while (isspace((unsigned char)*text))
        text++;
    size_t tl = strlen(text);
    while (tl && isspace((unsigned char)text[tl - 1]))
        tl--;
    char w[NAME_MAX_LEN + 1];
    for (int i = 0; choice_at(choices, i, w, sizeof w) == 0; i++)
        if (strlen(w) == tl && strncasecmp(w, text, tl) == 0)
            return i;
    return -1;
}

static int parse_enum(const char *section, const struct te_pcfg_key *k,
                      const char *text, const char *origin, int *out)
{
    int i = choice_index(k->choices, text);
    if (i >= 0) {
        *out = i;
        return 0;
    }
    char list[512] = "";
    char w[NAME_MAX_LEN + 1];
    for (int j = 0; choice_at(k->choices, j, w, sizeof w) == 0; j++) {
        size_t off = strlen(list);
        snprintf(list + off, sizeof list - off, "%s%s", j ? ", " : "", w);
    }
    return te_fail(-EINVAL, "%s.%s = \"%s\" (%s): expected one of %s", section,
                   k->name, text, origin, list);
}

/* Parse text as a value of k (any type); 0 or -EINVAL with the message. */
static int check_value(const char *section, const struct te_pcfg_key *k,
                       const char *text, const char *origin)
{
    uint64_t u;
    double d;
    int b;
    switch (k->type) {
    case TE_PCFG_U64:
        return te_config_parse_u64(section, k->name, text, origin, k->min_u64,
                                   k->max_u64, &u);
    case TE_PCFG_BOOL:
        return te_config_parse_bool(section, k->name, text, origin, &b);
    case TE_PCFG_DOUBLE:
        return te_config_parse_double(section, k->name, text, origin,
                                      k->min_double, k->max_double, &d);
    case TE_PCFG_ENUM:
        return parse_enum(section, k, text, origin, &b);
    default:
        return 0;
    }
}

static int enum_choices_ok(const char *choices)
{
    if (!choices || !*choices)
        return 0;
    char w[NAME_MAX_LEN + 1];
    for (int i = 0; choice_at(choices, i, w, sizeof w) == 0; i++)
        if (!name_ok(w))
            return 0;
    return 1;
}

/* The checks of one typed key beyond its name; message into why. */
static int check_key(const char *plugin, const struct te_pcfg_key *k,
                     char *why, size_t len)
{
    if (k->type < TE_PCFG_STRING || k->type > TE_PCFG_ENUM) {
        snprintf(why, len, "key \"%s\": unknown type %u", k->name, k->type);
        return -EINVAL;
    }
    if (!k->doc) {
        snprintf(why, len, "key \"%s\" has no doc", k->name);
        return -EINVAL;
    }
    if (k->type == TE_PCFG_U64 && k->min_u64 > k->max_u64) {
        snprintf(why, len, "key \"%s\": min %" PRIu64 " > max %" PRIu64,
                 k->name, k->min_u64, k->max_u64);
        return -EINVAL;
    }
    if (k->type == TE_PCFG_DOUBLE && !(k->min_double <= k->max_double)) {
        snprintf(why, len, "key \"%s\": min %g > max %g (or not a number)",
                 k->name, k->min_double, k->max_double);
        return -EINVAL;
    }
    if (k->type == TE_PCFG_ENUM && !enum_choices_ok(k->choices)) {
        snprintf(why, len, "key \"%s\": enum choices \"%s\" are not words "
                 "separated by '|'", k->name, k->choices ? k->choices : "(null)");
        return -EINVAL;
    }
    if (k->type == TE_PCFG_STRING)
        return 0;
    if (!k->default_value) {
        snprintf(why, len, "key \"%s\" is typed but has no default", k->name);
        return -EINVAL;
    }
    char origin[128];
    snprintf(origin, sizeof origin, "default declared by plugin %s", plugin);
    int rc = check_value(plugin, k, k->default_value, origin);
    if (rc) {
        snprintf(why, len, "%s", te_last_error());
        te_error_clear();
    }
    return rc;
}

/* Copy entry i of either table into *k; 1 at the table's end. */
static int entry_at(const struct te_plugin_ops *ops, size_t stride, size_t i,
                    struct te_pcfg_key *k)
{
    memset(k, 0, sizeof *k);
    if (stride) {
        const struct te_plugin_config_param *p =
            (const void *)((const char *)ops->config_params + i * stride);
        if (!p->name)
            return 1;
        *k = (struct te_pcfg_key){p->name, p->default_value, p->doc, p->type,
                                  p->min_u64, p->max_u64, p->min_double,
                                  p->max_double, p->choices};
        return 0;
    }
    const struct te_plugin_config_key *c = &ops->config_keys[i];
    if (!c->name)
        return 1;
    *k = (struct te_pcfg_key){.name = c->name, .default_value = c->default_value,
                              .doc = c->doc ? c->doc : "", .type = TE_PCFG_STRING};
    return 0;
}

/* The typed table's stride (its first entry's struct_size), 0 when the
 * plugin has none (then the 1.0 table is used), -1 when too small. */
static long typed_stride(const struct te_plugin_ops *ops)
{
    if (ops->struct_size < offsetof(struct te_plugin_ops, config_params) +
                               sizeof(ops->config_params) ||
        !ops->config_params)
        return 0;
    uint32_t sz = ops->config_params[0].struct_size;
    return sz < PARAM_SIZE_1_4 ? -1 : (long)sz;
}

int te_pcfg_read(const struct te_plugin_ops *ops, struct te_pcfg *out,
                 char *why, size_t len)
{
    memset(out, 0, sizeof *out);
    out->section = ops->name;
    long stride = typed_stride(ops);
    if (stride < 0) {
        snprintf(why, len, "config_params: struct_size %u is smaller than "
                 "ABI 1.4's %zu (set it to sizeof(struct "
                 "te_plugin_config_param))",
                 (unsigned)ops->config_params[0].struct_size,
                 (size_t)PARAM_SIZE_1_4);
        return -EINVAL;
    }
    if (!stride && !ops->config_keys)
        return 0;
    out->keys = calloc(TE_PCFG_MAX_KEYS, sizeof *out->keys);
    if (!out->keys) {
        snprintf(why, len, "out of memory");
        return -ENOMEM;
    }
    int rc = 0;
    size_t i;
    for (i = 0; i < TE_PCFG_MAX_KEYS; i++) {
        struct te_pcfg_key *k = &out->keys[i];
        if (entry_at(ops, (size_t)stride, i, k))
            break;
        if (stride && ((const struct te_plugin_config_param *)(const void *)(
                           (const char *)ops->config_params + i * stride))
                              ->struct_size != (uint32_t)stride) {
            snprintf(why, len, "key \"%s\": struct_size differs from the "
                     "first entry's (%ld)", k->name, stride);
            rc = -EINVAL;
            break;
        }
        if (!name_ok(k->name)) {
            snprintf(why, len, "key \"%s\": a name is 1 to %d letters, digits, "
                     "'_', '-' or '.'", k->name, NAME_MAX_LEN);
            rc = -EINVAL;
            break;
        }
        for (size_t j = 0; j < i && !rc; j++)
            if (strcasecmp(out->keys[j].name, k->name) == 0) {
                snprintf(why, len, "key \"%s\" is declared twice", k->name);
                rc = -EINVAL;
            }
        if (rc || (rc = check_key(ops->name, k, why, len)))
            break;
    }
    if (!rc && i == TE_PCFG_MAX_KEYS) {
        snprintf(why, len, "more than %d configuration keys, or a table "
                 "without its end entry (name NULL)", TE_PCFG_MAX_KEYS);
        rc = -EINVAL;
    }
    if (rc) {
        te_pcfg_free(out);
        return rc;
    }
    out->n = i;
    return 0;
}

void te_pcfg_free(struct te_pcfg *t)
{
    free(t->keys);
    t->keys = NULL;
    t->n = 0;
}

static const struct te_pcfg_key *find(const struct te_pcfg *t, const char *key)
{
    for (size_t i = 0; key && i < t->n; i++)
        if (strcasecmp(t->keys[i].name, key) == 0)
            return &t->keys[i];
    return NULL;
}

const char *te_pcfg_default(const struct te_pcfg *t, const char *key)
{
    const struct te_pcfg_key *k = find(t, key);
    return k ? k->default_value : NULL;
}

/* Effective text of k (NULL only for a STRING key without a default) and
 * where it comes from. */
static const char *effective(const te_config *cfg, const struct te_pcfg *t,
                             const struct te_pcfg_key *k, char *origin,
                             size_t len)
{
    const char *v = te_config_get_str(cfg, t->section, k->name, NULL);
    if (v && te_config_origin(cfg, t->section, k->name, origin, len))
        return v;
    snprintf(origin, len, "default");
    return k->default_value;
}

int te_pcfg_validate(const te_config *cfg, const struct te_pcfg *t)
{
    struct te_config_key *names = calloc(t->n + 1, sizeof *names);
    if (!names)
        return te_fail(-ENOMEM, "out of memory");
    for (size_t i = 0; i < t->n; i++)
        names[i] = (struct te_config_key){t->keys[i].name,
                                          t->keys[i].default_value,
                                          t->keys[i].doc};
    int rc = te_config_validate_section(cfg, t->section, names);
    free(names);
    for (size_t i = 0; !rc && i < t->n; i++) {
        char origin[512];
        const char *v = effective(cfg, t, &t->keys[i], origin, sizeof origin);
        if (v)
            rc = check_value(t->section, &t->keys[i], v, origin);
    }
    return rc;
}

/* The key `key` of type `type`, with its effective text, or -ENOENT. */
static int typed(const te_config *cfg, const struct te_pcfg *t, const char *key,
                 uint32_t type, const struct te_pcfg_key **k, const char **v,
                 char *origin, size_t len)
{
    *k = find(t, key);
    if (!*k || (*k)->type != type)
        return te_fail(-ENOENT, "plugin %s declared no %s key \"%s\"",
                       t->section,
                       type == TE_PCFG_U64    ? "integer"
                       : type == TE_PCFG_BOOL ? "boolean"
                       : type == TE_PCFG_ENUM ? "enum"
                                              : "number",
                       key ? key : "(null)");
    *v = effective(cfg, t, *k, origin, len);
    return 0;
}

int te_pcfg_u64(const te_config *cfg, const struct te_pcfg *t, const char *key,
                uint64_t *out)
{
    const struct te_pcfg_key *k;
    const char *v;
    char origin[512];
    int rc = typed(cfg, t, key, TE_PCFG_U64, &k, &v, origin, sizeof origin);
    return rc ? rc
              : te_config_parse_u64(t->section, k->name, v, origin, k->min_u64,
                                    k->max_u64, out);
}

int te_pcfg_bool(const te_config *cfg, const struct te_pcfg *t, const char *key,
                 int *out)
{
    const struct te_pcfg_key *k;
    const char *v;
    char origin[512];
    int rc = typed(cfg, t, key, TE_PCFG_BOOL, &k, &v, origin, sizeof origin);
    return rc ? rc : te_config_parse_bool(t->section, k->name, v, origin, out);
}

int te_pcfg_double(const te_config *cfg, const struct te_pcfg *t,
                   const char *key, double *out)
{
    const struct te_pcfg_key *k;
    const char *v;
    char origin[512];
    int rc = typed(cfg, t, key, TE_PCFG_DOUBLE, &k, &v, origin, sizeof origin);
    return rc ? rc
              : te_config_parse_double(t->section, k->name, v, origin,
                                       k->min_double, k->max_double, out);
}

int te_pcfg_enum(const te_config *cfg, const struct te_pcfg *t, const char *key,
                 int *out)
{
    const struct te_pcfg_key *k;
    const char *v;
    char origin[512];
    int rc = typed(cfg, t, key, TE_PCFG_ENUM, &k, &v, origin, sizeof origin);
    return rc ? rc : parse_enum(t->section, k, v, origin, out);
}

void te_pcfg_describe(const struct te_pcfg_key *k, char *buf, size_t len)
{
    switch (k->type) {
    case TE_PCFG_U64:
        if (k->max_u64 == UINT64_MAX)
            snprintf(buf, len, "integer >= %" PRIu64, k->min_u64);
        else
            snprintf(buf, len, "integer in [%" PRIu64 ", %" PRIu64 "]",
                     k->min_u64, k->max_u64);
        break;
    case TE_PCFG_BOOL:
        snprintf(buf, len, "boolean");
        break;
    case TE_PCFG_DOUBLE:
        snprintf(buf, len, "number in [%g, %g]", k->min_double, k->max_double);
        break;
    case TE_PCFG_ENUM:
        snprintf(buf, len, "one of %s", k->choices);
        break;
    default:
        snprintf(buf, len, "text");
    }
}

struct section_scan {
    const char *plugin;
    const char *typo, *typo_of; /* first section close to a known one */
    char typo_origin[512];
    const te_config *cfg;
    void (*warn)(void *, const char *, const char *);
    void *arg;
    char warned[16][NAME_MAX_LEN + 1];
    int nwarned;
};

static void visit_section(const char *section, const char *key,
                          const char *value, void *arg)
{
    struct section_scan *s = arg;
    (void)value;
    if (strcasecmp(section, "engine") == 0 ||
        strcasecmp(section, s->plugin) == 0 || s->typo)
        return;
    const char *known[] = {"engine", s->plugin};
    const char *near = te_config_suggest(section, known, 2);
    char origin[512];
    if (!te_config_origin(s->cfg, section, key, origin, sizeof origin))
        snprintf(origin, sizeof origin, "te_config_set");
    if (near) {
        s->typo = section;
        s->typo_of = near;
        snprintf(s->typo_origin, sizeof s->typo_origin, "%s", origin);
        return;
    }
    for (int i = 0; i < s->nwarned; i++)
        if (strcasecmp(s->warned[i], section) == 0)
            return;
    if (s->nwarned < 16)
        snprintf(s->warned[s->nwarned++], NAME_MAX_LEN + 1, "%s", section);
    s->warn(s->arg, section, origin);
}

int te_pcfg_check_sections(const te_config *cfg, const char *plugin,
                           void (*warn)(void *arg, const char *section,
                                        const char *origin),
                           void *arg)
{
    struct section_scan s = {.plugin = plugin, .cfg = cfg, .warn = warn,
                             .arg = arg};
    te_config_foreach(cfg, visit_section, &s);
    if (s.typo)
        return te_fail(-EINVAL, "unknown section [%s] (%s); did you mean "
                       "[%s]?", s.typo, s.typo_origin, s.typo_of);
    return 0;
}
