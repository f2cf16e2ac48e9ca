/*
 * Topology overrides: parsing of the [engine] key strings into
 * struct te_topo_overrides (see topology.h, docs/topology.md). Takes text,
 * not a te_config, so the module stays independent of the config store.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "te_error.h"
#include "topology.h"

void te_topo_overrides_init(struct te_topo_overrides *ov)
{
    memset(ov, 0, sizeof(*ov));
    ov->mode = TE_TOPO_MODE_AUTO;
    snprintf(ov->sysfs_root, sizeof(ov->sysfs_root), "/sys");
    for (int g = 0; g < TE_TOPO_MAX_GROUPS; g++)
        ov->worker_cpus[g] = -1;
}

static const char *skip_blank(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* Copy [a, b) without surrounding blanks into out; returns its length. */
static size_t trimmed(const char *a, const char *b, char *out, size_t len)
{
    while (a < b && (*a == ' ' || *a == '\t'))
        a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
        b--;
    size_t n = (size_t)(b - a);
    if (n >= len)
        n = len - 1;
    memcpy(out, a, n);
    out[n] = '\0';
    return (size_t)(b - a);
}

static int parse_patterns(const char *key, const char *value,
                          char pat[][64], int *count)
{
    *count = 0;
    const char *p = value;
    while (*p) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        char one[64];
        size_t n = trimmed(p, end, one, sizeof(one));
        if (n >= sizeof(one))
            return te_fail(-EINVAL, "engine.%s = \"%s\": pattern \"%.20s...\" "
                           "is longer than 63 characters", key, value, one);
        if (n) {
            if (*count >= TE_TOPO_MAX_PATTERNS)
                return te_fail(-EINVAL, "engine.%s = \"%s\": more than %d "
                               "patterns", key, value, TE_TOPO_MAX_PATTERNS);
            memcpy(pat[(*count)++], one, sizeof(one));
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* Non-negative decimal in [0, max] filling the whole of text. */
static int parse_uint(const char *text, long max, long *out)
{
    text = skip_blank(text);
    if (!isdigit((unsigned char)*text))
        return -1;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *skip_blank(end) || v > max)
        return -1;
    *out = v;
    return 0;
}

static int parse_group_nics(struct te_topo_overrides *ov, const char *value)
{
    ov->n_group_nics = 0;
    memset(ov->group_nic_count, 0, sizeof(ov->group_nic_count));
    if (!*skip_blank(value))
        return 0;
    const char *p = value;
    int g = 0;
    for (;;) {
        const char *gend = strchr(p, ';');
        if (!gend)
            gend = p + strlen(p);
        if (g >= TE_TOPO_MAX_GROUPS)
            return te_fail(-EINVAL, "engine.group_nics = \"%s\": more than %d "
                           "groups", value, TE_TOPO_MAX_GROUPS);
        int cnt = 0;
        const char *q = p;
        while (q < gend) {
            const char *iend = memchr(q, ',', (size_t)(gend - q));
            if (!iend)
                iend = gend;
            char one[32];
            size_t n = trimmed(q, iend, one, sizeof(one));
            long v;
            if (n == 0) {
                /* "0,,1" is a typo; an all-blank group is "discover". */
                if (iend != gend || cnt)
                    return te_fail(-EINVAL, "engine.group_nics = \"%s\": "
                                   "group %d has an empty NIC index", value, g);
            } else if (n >= sizeof(one) || parse_uint(one, 4095, &v)) {
                return te_fail(-EINVAL, "engine.group_nics = \"%s\": group %d: "
                               "\"%s\" is not a device index (expected "
                               "groups separated by ';' of indices separated "
                               "by ',', e.g. \"0,1;2,3\")", value, g, one);
            } else {
                if (cnt >= TE_MAX_NICS)
                    return te_fail(-EINVAL, "engine.group_nics = \"%s\": group "
                                   "%d has more than %d NICs", value, g,
                                   TE_MAX_NICS);
                for (int i = 0; i < cnt; i++)
                    if (ov->group_nics[g][i] == (int)v)
                        return te_fail(-EINVAL, "engine.group_nics = \"%s\": "
                                       "group %d lists device %ld twice",
                                       value, g, v);
                ov->group_nics[g][cnt++] = (int)v;
            }
            q = iend < gend ? iend + 1 : gend;
        }
        ov->group_nic_count[g++] = cnt;
        if (!*gend)
            break;
        p = gend + 1;
    }
    ov->n_group_nics = g;
    return 0;
}

static int parse_worker_cpus(struct te_topo_overrides *ov, const char *value)
{
    ov->n_worker_cpus = 0;
    for (int g = 0; g < TE_TOPO_MAX_GROUPS; g++)
        ov->worker_cpus[g] = -1;
    if (!*skip_blank(value))
        return 0;
    const char *p = value;
    int g = 0;
    for (;;) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        if (g >= TE_TOPO_MAX_GROUPS)
            return te_fail(-EINVAL, "engine.worker_cpus = \"%s\": more than %d "
                           "entries", value, TE_TOPO_MAX_GROUPS);
        char one[32];
        size_t n = trimmed(p, end, one, sizeof(one));
        long v;
        if (n == 0 || strcasecmp(one, "auto") == 0) {
            ov->worker_cpus[g] = -1;
        } else if (n >= sizeof(one) ||
                   parse_uint(one, TE_TOPO_MAX_CPUS - 1, &v)) {
            return te_fail(-EINVAL, "engine.worker_cpus = \"%s\": entry %d: "
                           "\"%s\" is not a CPU number in [0, %d] (or empty / "
                           "\"auto\" to choose)", value, g, one,
                           TE_TOPO_MAX_CPUS - 1);
        } else {
            ov->worker_cpus[g] = (int)v;
        }
        g++;
        if (!*end)
            break;
        p = end + 1;
    }
    ov->n_worker_cpus = g;
    return 0;
}

int te_topo_overrides_set(struct te_topo_overrides *ov, const char *key,
                          const char *value)
{
    if (!ov || !key)
        return te_fail(-EINVAL, "te_topo_overrides_set: NULL argument");
    int known = !strcmp(key, "topology") || !strcmp(key, "sysfs_root") ||
                !strcmp(key, "nic_include") || !strcmp(key, "nic_exclude") ||
                !strcmp(key, "group_nics") || !strcmp(key, "worker_cpus") ||
                !strcmp(key, "groups") || !strcmp(key, "nics_per_group");
    if (!known)
        return te_fail(-ENOENT, "engine.%s is not a topology key", key);
    if (!value)
        return 0;
    if (!strcmp(key, "topology")) {
        char v[16];
        trimmed(value, value + strlen(value), v, sizeof(v));
        if (!strcasecmp(v, "auto"))
            ov->mode = TE_TOPO_MODE_AUTO;
        else if (!strcasecmp(v, "off"))
            ov->mode = TE_TOPO_MODE_OFF;
        else
            return te_fail(-EINVAL, "engine.topology = \"%s\": expected "
                           "\"auto\" or \"off\"", value);
        return 0;
    }
    if (!strcmp(key, "sysfs_root")) {
        char v[sizeof(ov->sysfs_root)];
        size_t n = trimmed(value, value + strlen(value), v, sizeof(v));
        if (n >= sizeof(v))
            return te_fail(-EINVAL, "engine.sysfs_root = \"%.40s...\": longer "
                           "than %zu characters", value, sizeof(v) - 1);
        snprintf(ov->sysfs_root, sizeof(ov->sysfs_root), "%s",
                 n ? v : "/sys");
        return 0;
    }
    if (!strcmp(key, "nic_include"))
        return parse_patterns(key, value, ov->include, &ov->n_include);
    if (!strcmp(key, "nic_exclude"))
        return parse_patterns(key, value, ov->exclude, &ov->n_exclude);
    if (!strcmp(key, "group_nics"))
        return parse_group_nics(ov, value);
    if (!strcmp(key, "worker_cpus"))
        return parse_worker_cpus(ov, value);
    long v;
    if (!strcmp(key, "groups")) {
        if (parse_uint(value, TE_TOPO_MAX_GROUPS, &v))
            return te_fail(-EINVAL, "engine.groups = \"%s\": expected an "
                           "integer in [0, %d] (0 = one group per GPU)", value,
                           TE_TOPO_MAX_GROUPS);
        ov->groups = (int)v;
        return 0;
    }
    /* nics_per_group: a cap per group under topology = auto */
    if (parse_uint(value, TE_MAX_NICS, &v) || v < 1)
        return te_fail(-EINVAL, "engine.nics_per_group = \"%s\": expected an "
                       "integer in [1, %d]", value, TE_MAX_NICS);
    ov->max_nics = (int)v;
    return 0;
}

int te_topo_overrides_use_process_affinity(struct te_topo_overrides *ov)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return te_fail(-errno, "sched_getaffinity: %s", strerror(errno));
    memset(&ov->allowed, 0, sizeof(ov->allowed));
    for (int c = 0; c < TE_TOPO_MAX_CPUS && c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            te_topo_cpuset_add(&ov->allowed, c);
    ov->have_allowed = 1;
    return 0;
}
