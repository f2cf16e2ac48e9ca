/*
 * Configuration store: an ordered list of (section, key, value, origin)
 * entries filled from INI text (parsed by inih) or te_config_set(), read
 * with environment overrides, validated against tables of known keys.
 * Rules and messages: docs/config.md.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "config.h"
#include "te_error.h"

/* Longest section or key name accepted. */
#define TE_CFG_NAME_MAX 64
/* Room for "TE_" SECTION "_" KEY. */
#define TE_CFG_ENV_MAX (3 + TE_CFG_NAME_MAX + 1 + TE_CFG_NAME_MAX + 1)
/* Room for an origin description ("environment TE_X_Y", "file:line"). */
#define TE_CFG_ORIGIN_MAX 512

struct te_cfg_entry {
    char *section; /* lower case */
    char *key;     /* lower case */
    char *value;
    char *origin;  /* "file.ini:12", "string:3", "te_config_set" */
};

struct te_config {
    struct te_cfg_entry *v;
    size_t n, cap;
};

/* ------------------------------------------------------------ helpers */

static int name_char_ok(int c)
{
    return isalnum(c) || c == '_' || c == '-' || c == '.';
}

/* Letters, digits, '_', '-', '.'; 1..TE_CFG_NAME_MAX characters. */
static int valid_name(const char *s)
{
    size_t n = 0;
    if (s == NULL || *s == '\0')
        return 0;
    for (; s[n] != '\0'; n++)
        if (!name_char_ok((unsigned char)s[n]) || n >= TE_CFG_NAME_MAX)
            return 0;
    return 1;
}

static char *lower_dup(const char *s)
{
    char *d = strdup(s);
    if (d != NULL)
        for (char *p = d; *p; p++)
            *p = (char)tolower((unsigned char)*p);
    return d;
}

static void entry_free(struct te_cfg_entry *e)
{
    free(e->section);
    free(e->key);
    free(e->value);
    free(e->origin);
}

static const struct te_cfg_entry *find_entry(const te_config *cfg,
                                             const char *section,
                                             const char *key)
{
    for (size_t i = 0; i < cfg->n; i++)
        if (strcasecmp(cfg->v[i].section, section) == 0 &&
            strcasecmp(cfg->v[i].key, key) == 0)
            return &cfg->v[i];
    return NULL;
}

/* Insert or replace (keeping the first position). Names must be valid. */
static int cfg_put(te_config *cfg, const char *section, const char *key,
                   const char *value, const char *origin)
{
    struct te_cfg_entry *e = (struct te_cfg_entry *)find_entry(cfg, section, key);
    if (e != NULL) {
        char *v = strdup(value), *o = strdup(origin);
        if (v == NULL || o == NULL) {
            free(v);
            free(o);
            return -ENOMEM;
        }
        free(e->value);
        free(e->origin);
        e->value = v;
        e->origin = o;
        return 0;
    }
    if (cfg->n == cfg->cap) {
        size_t cap = cfg->cap ? cfg->cap * 2 : 16;
        struct te_cfg_entry *nv = realloc(cfg->v, cap * sizeof *nv);
        if (nv == NULL)
            return -ENOMEM;
        cfg->v = nv;
        cfg->cap = cap;
    }
    struct te_cfg_entry ne = {lower_dup(section), lower_dup(key), strdup(value),
                              strdup(origin)};
    if (!ne.section || !ne.key || !ne.value || !ne.origin) {
        entry_free(&ne);
        return -ENOMEM;
    }
    cfg->v[cfg->n++] = ne;
    return 0;
}

int te_config_env_name(const char *section, const char *key, char *buf,
                       size_t len)
{
    if (section == NULL || key == NULL || buf == NULL)
        return -EINVAL;
    int n = snprintf(buf, len, "TE_%s_%s", section, key);
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    for (char *p = buf; *p; p++) {
        if (*p == '-' || *p == '.')
            *p = '_';
        else
            *p = (char)toupper((unsigned char)*p);
    }
    return 0;
}

/*
 * Effective value: environment (TE_<SECTION>_<KEY>, then the shorthands)
 * then the stored value. Fills origin (may be NULL) and returns NULL if
 * neither is set.
 */
static const char *lookup(const te_config *cfg, const char *section,
                          const char *key, char *origin, size_t olen)
{
    char env[TE_CFG_ENV_MAX];
    const char *v;

    if (te_config_env_name(section, key, env, sizeof env) == 0 &&
        (v = getenv(env)) != NULL) {
        if (origin)
            snprintf(origin, olen, "environment %s", env);
        return v;
    }
    if (strcasecmp(section, "engine") == 0) {
        const char *shorthand = NULL;
        if (strcasecmp(key, "plugin") == 0)
            shorthand = "TE_PLUGIN";
        if (shorthand != NULL && (v = getenv(shorthand)) != NULL) {
            if (origin)
                snprintf(origin, olen, "environment %s", shorthand);
            return v;
        }
    }
    const struct te_cfg_entry *e = cfg ? find_entry(cfg, section, key) : NULL;
    if (e == NULL)
        return NULL;
    if (origin)
        snprintf(origin, olen, "%s", e->origin);
    return e->value;
}

/* ----------------------------------------------------- create / free */

te_config *te_config_new(void)
{
    te_error_clear();
    te_config *cfg = calloc(1, sizeof *cfg);
    if (cfg == NULL)
        te_fail(-ENOMEM, "te_config_new: out of memory");
    return cfg;
}

void te_config_free(te_config *cfg)
{
    /* Does not clear the last error: callers often free, then report. */
    if (cfg == NULL)
        return;
    for (size_t i = 0; i < cfg->n; i++)
        entry_free(&cfg->v[i]);
    free(cfg->v);
    free(cfg);
}

te_config *te_config_clone(const te_config *cfg)
{
    if (cfg == NULL) {
        te_fail(-EINVAL, "te_config_clone: cfg is NULL");
        return NULL;
    }
    te_config *c = calloc(1, sizeof *c);
    if (c == NULL)
        goto oom;
    for (size_t i = 0; i < cfg->n; i++) {
        const struct te_cfg_entry *e = &cfg->v[i];
        if (cfg_put(c, e->section, e->key, e->value, e->origin) != 0)
            goto oom;
    }
    return c;
oom:
    if (c != NULL) {
        for (size_t i = 0; i < c->n; i++)
            entry_free(&c->v[i]);
        free(c->v);
        free(c);
    }
    te_fail(-ENOMEM, "te_config_clone: out of memory");
    return NULL;
}

/* --------------------------------------------------------------- set */

int te_config_set(te_config *cfg, const char *section, const char *key,
                  const char *value)
{
    te_error_clear();
    if (cfg == NULL || section == NULL || key == NULL || value == NULL)
        return te_fail(-EINVAL, "te_config_set: %s is NULL",
                       cfg == NULL       ? "cfg"
                       : section == NULL ? "section"
                       : key == NULL     ? "key"
                                         : "value");
    if (!valid_name(section))
        return te_fail(-EINVAL,
                       "te_config_set: invalid section name \"%s\" (use 1 to "
                       "%d letters, digits, '_', '-' or '.')",
                       section, TE_CFG_NAME_MAX);
    if (!valid_name(key))
        return te_fail(-EINVAL,
                       "te_config_set: invalid key name \"%s\" in section [%s] "
                       "(use 1 to %d letters, digits, '_', '-' or '.')",
                       key, section, TE_CFG_NAME_MAX);
    if (cfg_put(cfg, section, key, value, "te_config_set") != 0)
        return te_fail(-ENOMEM, "te_config_set: out of memory");
    return 0;
}

/* -------------------------------------------------------------- load */

/*
 * Input handed to inih line by line through our own reader, so that we know
 * the line number in the handler (Debian's inih lacks INI_HANDLER_LINENO),
 * can refuse over-long lines instead of letting inih split them, and strip
 * leading blanks (an indented line is never a continuation line).
 */
struct te_cfg_src {
    FILE *f;          /* file input, or */
    const char *s;    /* string input */
    size_t pos;
    const char *what; /* "config file X" or "config string" */
    const char *oname;/* origin prefix: path or "string" */
    int lineno;       /* line last handed to inih */
    int saw_empty_header; /* the current section header was "[]" or blank */
    int err_line;     /* first error found by us (0 = none) */
    int err_code;
    char err_msg[600];
    te_config *tmp;   /* what this load sets, merged on success */
};

static int src_getc(struct te_cfg_src *src)
{
    if (src->f != NULL)
        return getc(src->f);
    if (src->s[src->pos] == '\0')
        return EOF;
    return (unsigned char)src->s[src->pos++];
}

static void src_rewind(struct te_cfg_src *src)
{
    if (src->f != NULL)
        rewind(src->f);
    else
        src->pos = 0;
}

/*
 * Read one physical line without its leading blanks into buf (at most cap-1
 * characters kept, NUL terminated, no '\n'). Returns the number of
 * characters of the line after the blanks (may exceed cap-1), or -1 at EOF.
 * *nul is set when the line holds a NUL byte.
 */
static long src_read_line(struct te_cfg_src *src, char *buf, size_t cap, int *nul)
{
    long n = 0;
    int c, any = 0, lead = 1, cr = 0;
    size_t k = 0;

    *nul = 0;
    while ((c = src_getc(src)) != EOF) {
        any = 1;
        if (c == '\n')
            break;
        if (lead && (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'))
            continue;
        lead = 0;
        if (c == '\r') { /* dropped if it ends the line (CRLF files) */
            cr++;
            continue;
        }
        for (; cr > 0; cr--, n++)
            if (k + 1 < cap)
                buf[k++] = '\r';
        if (c == '\0')
            *nul = 1;
        if (k + 1 < cap)
            buf[k++] = (char)c;
        n++;
    }
    if (!any)
        return -1;
    buf[k] = '\0';
    return n;
}

static void src_error(struct te_cfg_src *src, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void src_error(struct te_cfg_src *src, int code, const char *fmt, ...)
{
    if (src->err_line != 0)
        return; /* keep the first */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(src->err_msg, sizeof src->err_msg, fmt, ap);
    va_end(ap);
    src->err_line = src->lineno;
    src->err_code = code;
}

/* inih reader: one call per physical line, so inih's line count is ours. */
static char *te_cfg_reader(char *str, int num, void *stream)
{
    struct te_cfg_src *src = stream;
    int nul;
    if (num < 3)
        return NULL;
    long n = src_read_line(src, str, (size_t)num - 1, &nul);
    if (n < 0)
        return NULL;
    src->lineno++;
    if (n > num - 2) {
        src_error(src, -EINVAL, "line too long (%ld characters; at most %d)", n,
                  num - 2);
        strcpy(str, ";\n");
        return str;
    }
    if (nul) {
        src_error(src, -EINVAL, "line contains a NUL byte");
        strcpy(str, ";\n");
        return str;
    }
    if (str[0] == '[') {
        /* Remember "[]" and "[  ]": inih passes them on as section "". */
        const char *p = str + 1;
        while (*p == ' ' || *p == '\t')
            p++;
        src->saw_empty_header = (*p == ']');
    }
    size_t k = strlen(str);
    str[k] = '\n';
    str[k + 1] = '\0';
    return str;
}

static int te_cfg_handler(void *user, const char *section, const char *name,
                          const char *value)
{
    struct te_cfg_src *src = user;
    char sec[TE_CFG_NAME_MAX + 2];
    char origin[TE_CFG_ORIGIN_MAX];

    if (src->err_line != 0)
        return 1; /* already failed: only the first error is reported */

    /* inih keeps blanks inside the brackets: "[ engine ]". */
    while (*section == ' ' || *section == '\t')
        section++;
    size_t sl = strlen(section);
    while (sl > 0 && (section[sl - 1] == ' ' || section[sl - 1] == '\t'))
        sl--;
    if (sl == 0) {
        if (src->saw_empty_header)
            src_error(src, -EINVAL, "empty section name \"[]\"");
        else
            src_error(src, -EINVAL,
                      "key \"%s\" is outside any section (add a section line "
                      "such as [engine] above it)",
                      name);
        return 0;
    }
    if (sl > TE_CFG_NAME_MAX) {
        src_error(src, -EINVAL, "section name \"%.*s\" is too long (at most %d "
                  "characters)", (int)sl, section, TE_CFG_NAME_MAX);
        return 0;
    }
    memcpy(sec, section, sl);
    sec[sl] = '\0';
    if (!valid_name(sec)) {
        src_error(src, -EINVAL,
                  "invalid section name \"[%s]\" (use letters, digits, '_', "
                  "'-' or '.')",
                  sec);
        return 0;
    }
    if (*name == '\0') {
        src_error(src, -EINVAL, "missing key name before '='");
        return 0;
    }
    if (!valid_name(name)) {
        src_error(src, -EINVAL,
                  "invalid key name \"%s\" in section [%s] (use 1 to %d "
                  "letters, digits, '_', '-' or '.')",
                  name, sec, TE_CFG_NAME_MAX);
        return 0;
    }
    /* One pair of double quotes around the value is removed. */
    char *val = strdup(value);
    if (val == NULL) {
        src_error(src, -ENOMEM, "out of memory");
        return 0;
    }
    size_t vl = strlen(val);
    if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') {
        memmove(val, val + 1, vl - 2);
        val[vl - 2] = '\0';
    }
    snprintf(origin, sizeof origin, "%s:%d", src->oname, src->lineno);
    int rc = cfg_put(src->tmp, sec, name, val, origin);
    free(val);
    if (rc != 0) {
        src_error(src, -ENOMEM, "out of memory");
        return 0;
    }
    return 1;
}

/* Text of line n of the input (for syntax error messages). */
static void src_line_text(struct te_cfg_src *src, int n, char *buf, size_t cap)
{
    int nul;
    buf[0] = '\0';
    src_rewind(src);
    for (int i = 1; i <= n; i++)
        if (src_read_line(src, buf, cap, &nul) < 0) {
            buf[0] = '\0';
            return;
        }
    /* Show the line without trailing blanks, control bytes as '?'. */
    size_t k = strlen(buf);
    while (k > 0 && isspace((unsigned char)buf[k - 1]))
        buf[--k] = '\0';
    for (size_t i = 0; i < k; i++)
        if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f)
            buf[i] = '?';
}

static int load_src(te_config *cfg, struct te_cfg_src *src)
{
    src->tmp = calloc(1, sizeof *src->tmp);
    if (src->tmp == NULL)
        return te_fail(-ENOMEM, "%s: out of memory", src->what);

    int rc = ini_parse_stream(te_cfg_reader, src, te_cfg_handler, src);
    int line = 0;
    if (rc > 0)
        line = rc;
    if (src->err_line > 0 && (line == 0 || src->err_line <= line))
        line = src->err_line;

    if (rc == -2 || (rc < 0 && rc != -1)) {
        rc = te_fail(-ENOMEM, "%s: out of memory while parsing", src->what);
    } else if (rc == -1) {
        rc = te_fail(-EIO, "%s: cannot be read", src->what);
    } else if (line != 0 && line == src->err_line) {
        rc = te_fail(src->err_code, "%s:%d: %s", src->what, line, src->err_msg);
    } else if (line != 0) {
        char text[96];
        src_line_text(src, line, text, sizeof text);
        if (text[0] == '[')
            rc = te_fail(-EINVAL,
                         "%s:%d: syntax error: section header \"%s\" has no "
                         "closing ']'",
                         src->what, line, text);
        else
            rc = te_fail(-EINVAL,
                         "%s:%d: syntax error: expected \"[section]\" or "
                         "\"key = value\", got \"%s\"",
                         src->what, line, text);
    } else if (src->f != NULL && ferror(src->f)) {
        rc = te_fail(-EIO, "%s: read error", src->what);
    } else {
        rc = 0;
        for (size_t i = 0; i < src->tmp->n && rc == 0; i++) {
            const struct te_cfg_entry *e = &src->tmp->v[i];
            if (cfg_put(cfg, e->section, e->key, e->value, e->origin) != 0)
                rc = te_fail(-ENOMEM, "%s: out of memory", src->what);
        }
    }
    for (size_t i = 0; i < src->tmp->n; i++)
        entry_free(&src->tmp->v[i]);
    free(src->tmp->v);
    free(src->tmp);
    src->tmp = NULL;
    return rc;
}

int te_config_load_file(te_config *cfg, const char *path)
{
    te_error_clear();
    if (cfg == NULL || path == NULL)
        return te_fail(-EINVAL, "te_config_load_file: %s is NULL",
                       cfg == NULL ? "cfg" : "path");
    if (*path == '\0')
        return te_fail(-EINVAL, "te_config_load_file: empty path");

    FILE *f = fopen(path, "r");
    if (f == NULL) {
        int e = errno;
        if (e == ENOENT)
            return te_fail(-ENOENT, "config file %s: No such file", path);
        return te_fail(-e, "config file %s: %s", path, te_strerror(e));
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return te_fail(-EISDIR, "config file %s: is a directory", path);
    }

    char what[TE_CFG_ORIGIN_MAX];
    snprintf(what, sizeof what, "config file %s", path);
    struct te_cfg_src src = {.f = f, .what = what, .oname = path};
    int rc = load_src(cfg, &src);
    fclose(f);
    return rc;
}

int te_config_load_string(te_config *cfg, const char *ini_text)
{
    te_error_clear();
    if (cfg == NULL || ini_text == NULL)
        return te_fail(-EINVAL, "te_config_load_string: %s is NULL",
                       cfg == NULL ? "cfg" : "ini_text");
    struct te_cfg_src src = {.s = ini_text, .what = "config string",
                             .oname = "string"};
    return load_src(cfg, &src);
}

/* --------------------------------------------------------------- get */

static int check_args(const char *fn, const te_config *cfg, const char *section,
                      const char *key)
{
    if (cfg == NULL || section == NULL || key == NULL)
        return te_fail(-EINVAL, "%s: %s is NULL", fn,
                       cfg == NULL ? "cfg" : section == NULL ? "section" : "key");
    return 0;
}

const char *te_config_get(const te_config *cfg, const char *section,
                          const char *key)
{
    te_error_clear();
    if (check_args("te_config_get", cfg, section, key) != 0)
        return NULL;
    return lookup(cfg, section, key, NULL, 0);
}

const char *te_config_get_stored(const te_config *cfg, const char *section,
                                 const char *key)
{
    if (check_args("te_config_get_stored", cfg, section, key) != 0)
        return NULL;
    const struct te_cfg_entry *e = find_entry(cfg, section, key);
    return e ? e->value : NULL;
}

const char *te_config_origin(const te_config *cfg, const char *section,
                             const char *key, char *buf, size_t len)
{
    if (buf == NULL || len == 0) {
        te_fail(-EINVAL, "te_config_origin: no buffer");
        return NULL;
    }
    if (check_args("te_config_origin", cfg, section, key) != 0)
        return NULL;
    if (lookup(cfg, section, key, buf, len) == NULL)
        return NULL;
    return buf;
}

const char *te_config_get_str(const te_config *cfg, const char *section,
                              const char *key, const char *def)
{
    if (check_args("te_config_get_str", cfg, section, key) != 0)
        return def;
    const char *v = lookup(cfg, section, key, NULL, 0);
    return v ? v : def;
}

/* Decimal or 0x hex, optional k/m/g suffix (powers of 1024), blanks
 * around. Returns 0, -EINVAL (not an integer) or -ERANGE (overflow). */
static int parse_u64(const char *s, uint64_t *out)
{
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return -EINVAL; /* also refuses "-1", "+1", "" */
    int base = 10;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
        if (!isxdigit((unsigned char)*s) || s[1] == 'x' || s[1] == 'X')
            return -EINVAL;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, base);
    int overflow = (errno == ERANGE);
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    while (isspace((unsigned char)*end))
        end++;
    if (*end != '\0')
        return -EINVAL;
    if (overflow || (shift && v > (UINT64_MAX >> shift)))
        return -ERANGE;
    *out = (uint64_t)v << shift;
    return 0;
}

static void describe_range(char *buf, size_t len, uint64_t min, uint64_t max)
{
    if (max == UINT64_MAX && min == 0)
        snprintf(buf, len, "a non-negative integer");
    else if (max == UINT64_MAX)
        snprintf(buf, len, "an integer >= %" PRIu64, min);
    else
        snprintf(buf, len, "an integer in [%" PRIu64 ", %" PRIu64 "]", min, max);
}

int te_config_parse_u64(const char *section, const char *key, const char *v,
                        const char *origin, uint64_t min, uint64_t max,
                        uint64_t *out)
{
    char range[96];
    uint64_t x = 0; /* -Wmaybe-uninitialized (TSan build) */
    int rc = parse_u64(v, &x);
    describe_range(range, sizeof range, min, max);
    if (rc == -ERANGE)
        return te_fail(-EINVAL, "%s.%s = \"%s\" (%s): expected %s (the value "
                       "overflows 64 bits)", section, key, v, origin, range);
    if (rc != 0)
        return te_fail(-EINVAL, "%s.%s = \"%s\" (%s): expected %s", section,
                       key, v, origin, range);
    if (x < min || x > max) {
        char dec[32];
        snprintf(dec, sizeof dec, "%" PRIu64, x);
        if (strcmp(dec, v) == 0)
            return te_fail(-EINVAL, "%s.%s = \"%s\" (%s): expected %s", section,
                           key, v, origin, range);
        return te_fail(-EINVAL, "%s.%s = \"%s\" (%s): expected %s, got %s",
                       section, key, v, origin, range, dec);
    }
    *out = x;
    return 0;
}

int te_config_get_u64(const te_config *cfg, const char *section, const char *key,
                      uint64_t def, uint64_t min, uint64_t max, uint64_t *out)
{
    char origin[TE_CFG_ORIGIN_MAX];
    if (check_args("te_config_get_u64", cfg, section, key) != 0)
        return -EINVAL;
    if (out == NULL)
        return te_fail(-EINVAL, "te_config_get_u64: out is NULL");
    const char *v = lookup(cfg, section, key, origin, sizeof origin);
    if (v == NULL) {
        *out = def;
        return 0;
    }
    return te_config_parse_u64(section, key, v, origin, min, max, out);
}

int te_config_parse_bool(const char *section, const char *key, const char *v,
                         const char *origin, int *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    char word[8];
    /* Blanks around the word are ignored. */
    const char *p = v;
    while (isspace((unsigned char)*p))
        p++;
    size_t n = strlen(p);
    while (n > 0 && isspace((unsigned char)p[n - 1]))
        n--;
    if (n < sizeof word) {
        memcpy(word, p, n);
        word[n] = '\0';
        for (size_t i = 0; i < 4; i++) {
            if (strcasecmp(word, yes[i]) == 0) {
                *out = 1;
                return 0;
            }
            if (strcasecmp(word, no[i]) == 0) {
                *out = 0;
                return 0;
            }
        }
    }
    return te_fail(-EINVAL, "%s.%s = \"%s\" (%s): expected a boolean "
                   "(true/false, yes/no, on/off, 1/0)", section, key, v, origin);
}

int te_config_get_bool(const te_config *cfg, const char *section,
                       const char *key, int def, int *out)
{
    char origin[TE_CFG_ORIGIN_MAX];
    if (check_args("te_config_get_bool", cfg, section, key) != 0)
        return -EINVAL;
    if (out == NULL)
        return te_fail(-EINVAL, "te_config_get_bool: out is NULL");
    const char *v = lookup(cfg, section, key, origin, sizeof origin);
    if (v == NULL) {
        *out = def ? 1 : 0;
        return 0;
    }
    return te_config_parse_bool(section, key, v, origin, out);
}

int te_config_parse_double(const char *section, const char *key,
                           const char *v, const char *origin, double min,
                           double max, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    int ok = end != v && errno != ERANGE && isfinite(x);
    while (ok && isspace((unsigned char)*end))
        end++;
    if (!ok || *end != '\0' || x < min || x > max)
        return te_fail(-EINVAL, "%s.%s = \"%s\" (%s): expected a number in "
                       "[%g, %g]", section, key, v, origin, min, max);
    *out = x;
    return 0;
}

int te_config_get_double(const te_config *cfg, const char *section,
                         const char *key, double def, double min, double max,
                         double *out)
{
    char origin[TE_CFG_ORIGIN_MAX];
    if (check_args("te_config_get_double", cfg, section, key) != 0)
        return -EINVAL;
    if (out == NULL)
        return te_fail(-EINVAL, "te_config_get_double: out is NULL");
    const char *v = lookup(cfg, section, key, origin, sizeof origin);
    if (v == NULL) {
        *out = def;
        return 0;
    }
    return te_config_parse_double(section, key, v, origin, min, max, out);
}

/* ---------------------------------------------------------- validate */

/* Levenshtein distance, or a large number for very long names. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t row[130];
    if (la > 128 || lb > 128)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) ==
                                  tolower((unsigned char)b[j - 1])
                              ? 0
                              : 1;
            size_t best = diag + cost;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* Nearest candidate within distance 3 that is not a complete rewrite. */
const char *te_config_suggest(const char *typed, const char *const *names,
                              size_t n)
{
    const char *best = NULL;
    size_t best_d = 4;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(typed, names[i]);
        if (d < best_d && d < strlen(typed)) {
            best = names[i];
            best_d = d;
        }
    }
    return best;
}

int te_config_validate_section(const te_config *cfg, const char *section,
                               const struct te_config_key *keys)
{
    if (cfg == NULL || section == NULL || keys == NULL)
        return te_fail(-EINVAL, "te_config_validate_section: %s is NULL",
                       cfg == NULL ? "cfg" : section == NULL ? "section" : "keys");
    size_t nk = 0;
    while (keys[nk].name != NULL)
        nk++;

    for (size_t i = 0; i < cfg->n; i++) {
        const struct te_cfg_entry *e = &cfg->v[i];
        if (strcasecmp(e->section, section) != 0)
            continue;
        size_t k;
        for (k = 0; k < nk; k++)
            if (strcasecmp(keys[k].name, e->key) == 0)
                break;
        if (k < nk)
            continue;

        if (nk == 0)
            return te_fail(-EINVAL, "unknown key \"%s\" in section [%s] (%s); "
                           "section [%s] takes no keys", e->key, section,
                           e->origin, section);
        const char **names = malloc(nk * sizeof *names);
        if (names == NULL)
            return te_fail(-ENOMEM, "te_config_validate_section: out of memory");
        for (k = 0; k < nk; k++)
            names[k] = keys[k].name;
        const char *s = te_config_suggest(e->key, names, nk);
        if (s != NULL) {
            te_fail(-EINVAL, "unknown key \"%s\" in section [%s] (%s); did you "
                    "mean \"%s\"?", e->key, section, e->origin, s);
        } else {
            char list[1024];
            size_t off = 0;
            list[0] = '\0';
            for (k = 0; k < nk && off < sizeof list; k++) {
                int w = snprintf(list + off, sizeof list - off, "%s%s",
                                 k ? ", " : "", names[k]);
                if (w < 0)
                    break;
                off += (size_t)w;
            }
            te_fail(-EINVAL, "unknown key \"%s\" in section [%s] (%s); known "
                    "keys: %s", e->key, section, e->origin, list);
        }
        free(names);
        return -EINVAL;
    }
    return 0;
}

int te_config_validate_sections(const te_config *cfg,
                                const char *const *sections)
{
    if (cfg == NULL || sections == NULL)
        return te_fail(-EINVAL, "te_config_validate_sections: %s is NULL",
                       cfg == NULL ? "cfg" : "sections");
    size_t ns = 0;
    while (sections[ns] != NULL)
        ns++;

    for (size_t i = 0; i < cfg->n; i++) {
        const struct te_cfg_entry *e = &cfg->v[i];
        size_t k;
        for (k = 0; k < ns; k++)
            if (strcasecmp(sections[k], e->section) == 0)
                break;
        if (k < ns)
            continue;
        const char *s = te_config_suggest(e->section, (const char *const *)sections, ns);
        if (s != NULL)
            return te_fail(-EINVAL, "unknown section [%s] (%s); did you mean "
                           "[%s]?", e->section, e->origin, s);
        char list[1024];
        size_t off = 0;
        list[0] = '\0';
        for (k = 0; k < ns && off < sizeof list; k++) {
            int w = snprintf(list + off, sizeof list - off, "%s[%s]",
                             k ? ", " : "", sections[k]);
            if (w < 0)
                break;
            off += (size_t)w;
        }
        return te_fail(-EINVAL, "unknown section [%s] (%s); known sections: %s",
                       e->section, e->origin, ns ? list : "none");
    }
    return 0;
}

void te_config_foreach(const te_config *cfg,
                       void (*fn)(const char *section, const char *key,
                                  const char *value, void *arg),
                       void *arg)
{
    if (cfg == NULL || fn == NULL) {
        te_fail(-EINVAL, "te_config_foreach: %s is NULL",
                cfg == NULL ? "cfg" : "fn");
        return;
    }
    for (size_t i = 0; i < cfg->n; i++)
        fn(cfg->v[i].section, cfg->v[i].key, cfg->v[i].value, arg);
}
