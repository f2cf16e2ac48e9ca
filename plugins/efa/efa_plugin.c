/*
 * efa plugin entry: the ops table, the context (discovery, probing, path
 * decisions) and the libfabric errno mapping every module uses.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "efa_internal.h"

/* ---------------------------------------------------------------- helpers */

int efa_errno(int fi_err)
{
    int e = fi_err < 0 ? -fi_err : fi_err;
    switch (e) {
    case 0: return -EIO;
    case FI_ETRUNC: return -EMSGSIZE;
    case FI_ENOKEY: return -EACCES;
    case FI_EBADFLAGS: return -EINVAL;
    case FI_ENOAV: return -EHOSTUNREACH;
    case FI_EOVERRUN: return -EOVERFLOW;
    case FI_ENOCQ: case FI_ENOEQ: case FI_EOPBADSTATE: case FI_EOTHER:
    case FI_EAVAIL: case FI_ETOOSMALL:
        return -EIO;
    default:
        /* libfabric's other codes are errno values. */
        return e < 256 ? -e : -EIO;
    }
}

/* ---------------------------------------------------------------- probing */

/* The probe costs endpoints and, on a broken provider, a timeout: run it
 * once per process and provider setup. */
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char key[512];
    struct efa_probe_result r;
} probe_cache[8];
static unsigned probe_cached;

static int probe(efa_ctx *ctx)
{
    const struct fi_info *i = ctx->dev[0];
    char key[512];
    snprintf(key, sizeof(key), "%s|%s|%s|%s|%d", i->fabric_attr->prov_name,
             i->fabric_attr->name, i->domain_attr->name, ctx->cfg.node,
             ctx->cfg.completion);
    pthread_mutex_lock(&probe_lock);
    for (unsigned k = 0; k < probe_cached; k++)
        if (strcmp(probe_cache[k].key, key) == 0) {
            ctx->probe = probe_cache[k].r;
            pthread_mutex_unlock(&probe_lock);
            return 0;
        }
    char err[256] = "";
    uint64_t t0 = tpc_now_ns();
    int rc = efa_probe_run(i, ctx->cfg.probe_timeout_ms, ctx->cfg.completion,
                           &ctx->probe, err, sizeof(err));
    if (rc == 0) {
        unsigned k = probe_cached < 8 ? probe_cached++ : 7;
        snprintf(probe_cache[k].key, sizeof(probe_cache[k].key), "%s", key);
        probe_cache[k].r = ctx->probe;
    }
    pthread_mutex_unlock(&probe_lock);
    if (rc) {
        efa_ctx_err(ctx, "provider %s: cannot probe: %s",
                    i->fabric_attr->prov_name, err);
        return rc;
    }
    efa_log(ctx, 2, "probed provider %s in %llu ms", i->fabric_attr->prov_name,
            (unsigned long long)((tpc_now_ns() - t0) / 1000000u));
    return 0;
}

/* ---------------------------------------------------------- context */

static void efa_fini(te_plugin_ctx *ctx)
{
    if (!ctx)
        return;
    if (ctx->infos)
        fi_freeinfo(ctx->infos);
    free(ctx);
}

static int efa_init(const struct te_plugin_host *host, te_plugin_ctx **out)
{
    if (!out || !tpc_host_ok(host))
        return -EINVAL;
    efa_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return -ENOMEM;
    tpc_host_copy(&ctx->host, host);
    if (fi_version() < EFA_FI_VERSION) {
        efa_ctx_err(ctx, "built for libfabric %d.%d, running with %u.%u",
                    FI_MAJOR_VERSION, FI_MINOR_VERSION,
                    FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
        free(ctx);
        return -ENOTSUP;
    }
    /* Regions of killed processes would take names from their pids'
     * next owners, and 16 MiB of memory each (efa_shm_name.h). */
    int reaped = efa_shm_reap_stale();
    if (reaped)
        efa_log(ctx, 2, "removed %d shm regions of processes that are gone",
                reaped);
    int rc;
    if ((rc = efa_config_parse(ctx)) || (rc = efa_discover(ctx)) ||
        (rc = probe(ctx)) || (rc = efa_decide_paths(ctx))) {
        efa_fini(ctx);
        return rc;
    }
    ctx->host_id = efa_host_id();
    ctx->start_time = efa_proc_start_time((uint32_t)getpid());
    *out = ctx;
    return 0;
}

static int efa_device_count(te_plugin_ctx *ctx) { return (int)ctx->ndev; }

/* ------------------------------------------------------------ entry point */

static const struct te_plugin_ops efa_ops = {
    .abi_major = TE_PLUGIN_ABI_MAJOR,
    .abi_minor = TE_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(struct te_plugin_ops),
    .name = EFA_NAME,
    .version = EFA_VERSION,
    .description = "libfabric FI_EP_RDM: write with remote CQ data; provider "
                   "from efa.provider (efa, shm, tcp;ofi_rxm); NIC names "
                   "are provider:domain, log_level 2 shows each path",
    .config_params = efa_config_params,
    .init = efa_init,
    .fini = efa_fini,
    .device_count = efa_device_count,
    .query_device = efa_query_device,
    .nic_open = efa_nic_open,
    .nic_close = efa_nic_close,
    .nic_address = efa_nic_address,
    .mr_reg = efa_mr_reg,
    .mr_dereg = efa_mr_dereg,
    .peer_add = efa_peer_add,
    .peer_remove = efa_peer_remove,
    .post = efa_post,
    .poll = efa_poll,
    .describe_paths = efa_describe_paths,
    .wait_fd = efa_wait_fd,
    .wait_arm = efa_wait_arm,
};

__attribute__((visibility("default"))) const struct te_plugin_ops *
te_plugin_entry(uint32_t core_major, uint32_t core_minor, char *err,
                size_t errlen)
{
    /* At least 1.4: the typed configuration getters. */
    return tpc_entry(&efa_ops, 4, core_major, core_minor, err, errlen);
}
