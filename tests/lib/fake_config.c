/* Fake-host configuration for plugin tests (fake_config.h). */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "fake_config.h"

int te_fake_config_init(struct te_fake_config *fc,
                        const struct te_plugin_ops *ops, const char *const *kv)
{
    char why[256];
    memset(fc, 0, sizeof *fc);
    fc->cfg = te_config_new();
    if (!fc->cfg)
        return -ENOMEM;
    int rc = te_pcfg_read(ops, &fc->keys, why, sizeof why);
    for (const char *const *p = kv; rc == 0 && p && p[0]; p += 2)
        rc = te_config_set(fc->cfg, ops->name, p[0], p[1]);
    if (rc)
        te_fake_config_fini(fc);
    return rc;
}

void te_fake_config_fini(struct te_fake_config *fc)
{
    te_pcfg_free(&fc->keys);
    te_config_free(fc->cfg);
    fc->cfg = NULL;
}

static const char *fc_get(void *c, const char *key)
{
    struct te_fake_config *fc = c;
    const char *v = te_config_get(fc->cfg, fc->keys.section, key);
    return v ? v : te_pcfg_default(&fc->keys, key);
}

static int fc_u64(void *c, const char *key, uint64_t *out)
{
    struct te_fake_config *fc = c;
    return te_pcfg_u64(fc->cfg, &fc->keys, key, out);
}

static int fc_bool(void *c, const char *key, int *out)
{
    struct te_fake_config *fc = c;
    return te_pcfg_bool(fc->cfg, &fc->keys, key, out);
}

static int fc_double(void *c, const char *key, double *out)
{
    struct te_fake_config *fc = c;
    return te_pcfg_double(fc->cfg, &fc->keys, key, out);
}

static int fc_enum(void *c, const char *key, int *out)
{
    struct te_fake_config *fc = c;
    return te_pcfg_enum(fc->cfg, &fc->keys, key, out);
}

void te_fake_config_install(struct te_plugin_host *host)
{
    host->config_get = fc_get;
    host->config_u64 = fc_u64;
    host->config_bool = fc_bool;
    host->config_double = fc_double;
    host->config_enum = fc_enum;
}
