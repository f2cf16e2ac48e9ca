/*
 * A minimal TransferEngine transport plugin: it opens no devices. It is the
 * skeleton shown in docs/plugin-guide.md, built out of tree by
 * tests/out-of-tree/run.sh from the installed header alone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <te/plugin.h>

struct te_plugin_ctx {
    const struct te_plugin_host *host;
    uint64_t devices; /* [skeleton] devices, checked by the core */
};

static int sk_init(const struct te_plugin_host *host, te_plugin_ctx **out)
{
    te_plugin_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return -ENOMEM;
    ctx->host = host;
    /* The entry point refused cores older than 1.4: the getter exists,
     * and the value was validated against the table below. */
    int rc = host->config_u64(host->host_ctx, "devices", &ctx->devices);
    if (rc) {
        free(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

static void sk_fini(te_plugin_ctx *ctx) { free(ctx); }

static int sk_device_count(te_plugin_ctx *ctx) { return 0; }

static int sk_query_device(te_plugin_ctx *ctx, int idx,
                           struct te_plugin_device_info *info)
{
    if (ctx->host->set_error)
        ctx->host->set_error(ctx->host->host_ctx, "skeleton: no device %d", idx);
    return -ENODEV;
}

static int sk_nic_open(te_plugin_ctx *ctx, int idx,
                       const struct te_plugin_nic_attr *attr, te_plugin_nic **out)
{
    return sk_query_device(ctx, idx, NULL);
}

/* No NIC can be opened, so the per-NIC functions are never reached. */
static void sk_nic_close(te_plugin_nic *nic) {}
static int sk_nic_address(te_plugin_nic *nic, void *buf, size_t *len) { return -ENOSYS; }
static int sk_mr_reg(te_plugin_nic *nic, void *addr, size_t len, uint32_t access,
                     uint32_t mem_type, int device_id, te_plugin_mr **mr,
                     struct te_plugin_mr_info *info)
{
    return -ENOSYS;
}
static int sk_mr_dereg(te_plugin_nic *nic, te_plugin_mr *mr) { return -ENOSYS; }
static int sk_peer_add(te_plugin_nic *nic, const void *addr, size_t len,
                       te_plugin_peer *out)
{
    return -ENOSYS;
}
static int sk_peer_remove(te_plugin_nic *nic, te_plugin_peer peer) { return -ENOSYS; }
static int sk_post(te_plugin_nic *nic, const struct te_plugin_op *ops, size_t n)
{
    return -ENOSYS;
}
static int sk_poll(te_plugin_nic *nic, struct te_plugin_cq_entry *out, int max)
{
    return 0;
}

/* Typed keys (ABI 1.4): the core validates [skeleton] and serves them. */
static const struct te_plugin_config_param sk_params[] = {
    TE_PCFG_U64_KEY("devices", "0", 0, 16,
                    "number of devices to pretend (read, then unused)"),
    TE_PCFG_ENUM_KEY("mode", "auto", "auto|on|off",
                     "an example of an enum key (unused)"),
    TE_PCFG_END};

static const struct te_plugin_ops sk_ops = {
    .abi_major = TE_PLUGIN_ABI_MAJOR,
    .abi_minor = TE_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(struct te_plugin_ops),
    .name = "skeleton",
    .version = "0.1",
    .description = "example out-of-tree plugin with no devices",
    .config_params = sk_params,
    .init = sk_init,
    .fini = sk_fini,
    .device_count = sk_device_count,
    .query_device = sk_query_device,
    .nic_open = sk_nic_open,
    .nic_close = sk_nic_close,
    .nic_address = sk_nic_address,
    .mr_reg = sk_mr_reg,
    .mr_dereg = sk_mr_dereg,
    .peer_add = sk_peer_add,
    .peer_remove = sk_peer_remove,
    .post = sk_post,
    .poll = sk_poll,
};

__attribute__((visibility("default"))) const struct te_plugin_ops *
te_plugin_entry(uint32_t core_major, uint32_t core_minor, char *err, size_t errlen)
{
    if (core_major != TE_PLUGIN_ABI_MAJOR || core_minor < 4) {
        snprintf(err, errlen, "skeleton speaks plugin ABI %d.4+, core speaks %u.%u",
                 TE_PLUGIN_ABI_MAJOR, (unsigned)core_major, (unsigned)core_minor);
        return NULL;
    }
    return &sk_ops;
}
