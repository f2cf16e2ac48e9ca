/*
 * Configuration keys of section [efa] (te-info shows this table; docs/efa.md
 * repeats it). Every value is validated in init() with a message naming
 * the key.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "efa_internal.h"

const struct te_plugin_config_key efa_config_keys[] = {
    {"provider", "efa",
     "libfabric provider: efa on AWS; shm (same host) or tcp;ofi_rxm "
     "(also across hosts) for tests; any FI_EP_RDM provider with RMA"},
    {"devices", "0",
     "NICs to expose; 0 = one per distinct fi_info domain of the provider; "
     "more than that opens several endpoints per domain (virtual NICs, "
     "e.g. to exercise multi-NIC sharding over shm or tcp)"},
    {"node", "",
     "source address given to fi_getinfo with FI_SOURCE, e.g. 127.0.0.1 "
     "for tcp;ofi_rxm (which otherwise picks the first interface); "
     "empty = the provider's choice"},
    {"domain", "",
     "use only fi_info entries of this domain name (e.g. rdmap16s27-rdm, "
     "lo); empty = all"},
    {"queue_depth", "0",
     "operations outstanding per NIC; 0 = the provider's tx_attr->size; a "
     "non-zero queue_depth of nic_open overrides it"},
    {"require_native_rma", "false",
     "refuse a provider whose RMA is emulated by messages (e.g. udp;ofi_rxd, "
     "or efa without device RDMA write) instead of running with a warning"},
    {"inject", "auto",
     "auto|on|off: small writes with fi_inject_write[data] (no completion "
     "to read); auto = only where the probe found inject correct and the "
     "provider reports no remote errors anyway"},
    {"completion", "auto",
     "auto|default|transmit|delivery: completion level of writes; auto = "
     "the cheapest level the probe found to complete imm-only writes and to "
     "report a bad remote key"},
    {"av_insert", "first_use",
     "first_use|at_add: when a peer enters the address vector: on its first "
     "operation or the next poll (all peers added since in one "
     "fi_av_insert), or inside peer_add"},
    {"hmem", "auto",
     "auto|on|off: ask for FI_HMEM so CUDA memory can be registered; auto = "
     "when built with CUDA and /dev/nvidiactl exists (FI_HMEM changes the "
     "paths of some providers, e.g. shm stops injecting)"},
    {"watch_peers", "true",
     "watch peers on this host (same boot id, matching process start time) "
     "with a pidfd: a dead peer's operations fail at once instead of "
     "waiting for the provider (shm never reports it)"},
    {"stall_timeout_ms", "5000",
     "declare a peer down when the provider refuses every operation to it "
     "(-FI_EAGAIN) this long while none is in flight (tcp;ofi_rxm after "
     "the peer died); 0 = never"},
    {"probe_timeout_ms", "200",
     "bound of each probe wait for an event a broken provider never "
     "delivers (events a working one delivers at once get 8x, >= 2 s)"},
    {NULL, NULL, NULL},
};

static const char *cfg_get(efa_ctx *ctx, const char *key)
{
    return ctx->host.config_get ? ctx->host.config_get(ctx->host.host_ctx, key)
                                : NULL;
}

static int cfg_str(efa_ctx *ctx, const char *key, const char *def, char *out,
                   size_t len)
{
    const char *v = cfg_get(ctx, key);
    if (!v)
        v = def;
    if (strlen(v) >= len) {
        efa_ctx_err(ctx, "value of key %s is too long (%zu bytes, at most "
                    "%zu)", key, strlen(v), len - 1);
        return -EINVAL;
    }
    snprintf(out, len, "%s", v);
    return 0;
}

static int cfg_u32(efa_ctx *ctx, const char *key, uint32_t def, uint32_t min,
                   uint32_t max, uint32_t *out)
{
    const char *v = cfg_get(ctx, key);
    if (!v) {
        *out = def;
        return 0;
    }
    const char *s = v;
    while (*s == ' ' || *s == '\t')
        s++;
    char *end = NULL;
    errno = 0;
    unsigned long long x = (*s >= '0' && *s <= '9') ? strtoull(s, &end, 0) : 0;
    if (end)
        while (*end == ' ' || *end == '\t')
            end++;
    if (!end || *end || errno || x < min || x > max) {
        efa_ctx_err(ctx, "invalid value '%s' for key %s: expected an integer "
                    "in [%u, %u]", v, key, min, max);
        return -EINVAL;
    }
    *out = (uint32_t)x;
    return 0;
}

/* One of `words` (index returned in *out), booleans included. */
static int cfg_enum(efa_ctx *ctx, const char *key, int def,
                    const char *const *words, int nwords, int *out)
{
    const char *v = cfg_get(ctx, key);
    if (!v) {
        *out = def;
        return 0;
    }
    for (int i = 0; i < nwords; i++)
        if (words[i] && strcasecmp(v, words[i]) == 0) {
            *out = i;
            return 0;
        }
    char list[160] = "";
    for (int i = 0; i < nwords; i++)
        if (words[i]) {
            strncat(list, list[0] ? ", " : "", sizeof(list) - strlen(list) - 1);
            strncat(list, words[i], sizeof(list) - strlen(list) - 1);
        }
    efa_ctx_err(ctx, "invalid value '%s' for key %s: expected one of %s", v,
                key, list);
    return -EINVAL;
}

static int cfg_bool(efa_ctx *ctx, const char *key, bool def, bool *out)
{
    static const char *const words[] = {"false", "true", "no", "yes",
                                        "off",   "on",   "0",  "1"};
    int i;
    int rc = cfg_enum(ctx, key, def ? 1 : 0, words, 8, &i);
    if (!rc)
        *out = i & 1;
    return rc;
}

int efa_config_parse(efa_ctx *ctx)
{
    struct efa_cfg *c = &ctx->cfg;
    static const char *const tri[] = {"auto", "on", "off"};
    static const char *const compl[] = {"auto", "default", "transmit",
                                        "delivery"};
    static const char *const av[] = {"first_use", "at_add"};
    int rc;
    if ((rc = cfg_str(ctx, "provider", "efa", c->provider,
                      sizeof(c->provider))) ||
        (rc = cfg_str(ctx, "node", "", c->node, sizeof(c->node))) ||
        (rc = cfg_str(ctx, "domain", "", c->domain, sizeof(c->domain))) ||
        (rc = cfg_u32(ctx, "devices", 0, 0, EFA_MAX_DEVICES, &c->devices)) ||
        (rc = cfg_u32(ctx, "queue_depth", 0, 0, 1u << 20, &c->queue_depth)) ||
        (rc = cfg_bool(ctx, "require_native_rma", false,
                       &c->require_native_rma)) ||
        (rc = cfg_enum(ctx, "inject", EFA_AUTO, tri, 3, &c->inject)) ||
        (rc = cfg_enum(ctx, "completion", EFA_COMPL_AUTO, compl, 4,
                       &c->completion)) ||
        (rc = cfg_enum(ctx, "av_insert", EFA_AV_FIRST_USE, av, 2,
                       &c->av_insert)) ||
        (rc = cfg_enum(ctx, "hmem", EFA_AUTO, tri, 3, &c->hmem)) ||
        (rc = cfg_bool(ctx, "watch_peers", true, &c->watch_peers)) ||
        (rc = cfg_u32(ctx, "stall_timeout_ms", 5000, 0, 3600000,
                      &c->stall_timeout_ms)) ||
        (rc = cfg_u32(ctx, "probe_timeout_ms", 200, 1, 60000,
                      &c->probe_timeout_ms)))
        return rc;
    if (!c->provider[0]) {
        efa_ctx_err(ctx, "key provider is empty: name a libfabric provider "
                    "(efa, shm, tcp;ofi_rxm, ...)");
        return -EINVAL;
    }
    return 0;
}
