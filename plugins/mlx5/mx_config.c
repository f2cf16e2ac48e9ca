/*
 * Configuration keys of section [mlx5] (repeated in docs/mlx5.md): typed
 * keys of plugin ABI 1.4 that the core validates when the engine is
 * created, so a bad value fails there with the key named; the two text
 * keys (devices, gid_index) are checked here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mx_internal.h"

const struct te_plugin_config_param mx_config_params[] = {
    TE_PCFG_STRING_KEY(
        "devices", "",
        "comma-separated verbs device names to use, in this order (e.g. "
        "\"mlx5_0,mlx5_1\" or \"rxe0\"); empty = every device, sorted by "
        "name"),
    TE_PCFG_U64_KEY("port", "0", 0, 255,
                    "port number to use on each device; 0 = the first ACTIVE "
                    "port"),
    TE_PCFG_STRING_KEY(
        "gid_index", "-1",
        "GID table index 0-65535, or -1 = automatic (RoCE: a RoCEv2 GID with "
        "an IPv4 address, then RoCEv2 IPv6, then RoCEv1; InfiniBand: 0). "
        "RoCEv2 fabrics often want 3"),
    TE_PCFG_U64_KEY("queue_depth", "1024", 16, 65536,
                    "WRITE/READ/SEND ops that may be outstanding per NIC over "
                    "all peers; a non-zero queue_depth of nic_open overrides "
                    "it"),
    TE_PCFG_U64_KEY("qp_depth", "256", 16, 32768,
                    "send work requests per RC QP, i.e. per peer"),
    TE_PCFG_U64_KEY("srq_depth", "1024", 64, 65536,
                    "receive buffers kept posted on the shared receive queue; "
                    "every incoming write-with-immediate or SEND consumes "
                    "one, so size it for the largest burst of immediates"),
    TE_PCFG_U64_KEY("msg_size", "4096", 64, 1u << 20,
                    "largest SEND this NIC accepts, bytes; must be >= "
                    "engine.max_msg_size"),
    TE_PCFG_U64_KEY("max_inline", "64", 0, 1024,
                    "WRITE/SEND payloads up to this many bytes are copied "
                    "into the work request (no DMA read of the source); "
                    "capped by the device"),
    TE_PCFG_U64_KEY("signal_every", "16", 1, 1024,
                    "request a completion for every Nth work request of a QP "
                    "(and the last one of each post); 1 = every request"),
    TE_PCFG_U64_KEY("connect_timeout_ms", "10000", 100, 3600000,
                    "a connection that is not established this long after "
                    "the attempt began fails: its ops complete with errors "
                    "and the peer is reported down"),
    TE_PCFG_U64_KEY("connect_retry_ms", "20", 1, 10000,
                    "first handshake retransmission interval; doubles up to "
                    "1000 ms"),
    TE_PCFG_U64_KEY("ack_timeout", "14", 1, 31,
                    "RC local ACK timeout exponent: 4.096 us * 2^N"),
    TE_PCFG_U64_KEY("retry_cnt", "6", 0, 7,
                    "RC transport retries before an op fails with a retry "
                    "error; 7 means retry forever on some providers (rxe), so "
                    "a dead peer would never be noticed by the transport"),
    TE_PCFG_U64_KEY("rnr_timer", "12", 1, 31,
                    "minimum receiver-not-ready delay code the QP advertises; "
                    "senders retry RNR forever"),
    TE_PCFG_U64_KEY("traffic_class", "0", 0, 255,
                    "IP traffic class / DSCP<<2 of RoCE packets"),
    TE_PCFG_U64_KEY("service_level", "0", 0, 15,
                    "InfiniBand service level / RoCE priority"),
    TE_PCFG_BOOL_KEY("relaxed_ordering", "true",
                     "register memory with IBV_ACCESS_RELAXED_ORDERING where "
                     "the device and kernel support it (ignored elsewhere)"),
    TE_PCFG_BOOL_KEY("cuda_dmabuf", "true",
                     "register CUDA memory through a dma-buf (libcuda "
                     "cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr); "
                     "false or failure falls back to plain ibv_reg_mr, which "
                     "needs nvidia-peermem"),
    TE_PCFG_END};

static const char *mx_get(mx_ctx *ctx, const char *key)
{
    return ctx->host.config_get(ctx->host.host_ctx, key);
}

/* gid_index, the one signed key: -1 or 0..65535. */
static int mx_gid_index(mx_ctx *ctx, int32_t *out)
{
    const char *v = mx_get(ctx, "gid_index");
    char *end = NULL;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : -1;
    if (v && (end == v || errno || x < -1 || x > 65535)) {
        mx_ctx_err(ctx, "mlx5.gid_index = \"%s\": expected -1 (automatic) or "
                   "an integer in [0, 65535]", v);
        return -EINVAL;
    }
    while (end && (*end == ' ' || *end == '\t'))
        end++;
    if (end && *end) {
        mx_ctx_err(ctx, "mlx5.gid_index = \"%s\": expected -1 (automatic) or "
                   "an integer in [0, 65535]", v);
        return -EINVAL;
    }
    *out = (int32_t)x;
    return 0;
}

/* A declared integer key whose range fits 32 bits. */
static int mx_u32(mx_ctx *ctx, const char *key, uint32_t *out)
{
    uint64_t x;
    int rc = ctx->host.config_u64(ctx->host.host_ctx, key, &x);
    if (!rc)
        *out = (uint32_t)x;
    return rc;
}

int mx_config_parse(mx_ctx *ctx)
{
    /* The entry point refused cores older than 1.4: the getters exist. */
    struct mx_cfg *c = &ctx->cfg;
    const struct te_plugin_host *h = &ctx->host;
    int relaxed, dmabuf, rc;
    const char *dev = mx_get(ctx, "devices");
    if (dev && strlen(dev) >= sizeof(c->devices)) {
        mx_ctx_err(ctx, "value of key devices is too long (%zu bytes)",
                   strlen(dev));
        return -EINVAL;
    }
    snprintf(c->devices, sizeof(c->devices), "%s", dev ? dev : "");
    if ((rc = mx_u32(ctx, "port", &c->port)) ||
        (rc = mx_gid_index(ctx, &c->gid_index)) ||
        (rc = mx_u32(ctx, "queue_depth", &c->queue_depth)) ||
        (rc = mx_u32(ctx, "qp_depth", &c->qp_depth)) ||
        (rc = mx_u32(ctx, "srq_depth", &c->srq_depth)) ||
        (rc = mx_u32(ctx, "msg_size", &c->msg_size)) ||
        (rc = mx_u32(ctx, "max_inline", &c->max_inline)) ||
        (rc = mx_u32(ctx, "signal_every", &c->signal_every)) ||
        (rc = h->config_u64(h->host_ctx, "connect_timeout_ms",
                            &c->connect_timeout_ms)) ||
        (rc = h->config_u64(h->host_ctx, "connect_retry_ms",
                            &c->connect_retry_ms)) ||
        (rc = mx_u32(ctx, "ack_timeout", &c->ack_timeout)) ||
        (rc = mx_u32(ctx, "retry_cnt", &c->retry_cnt)) ||
        (rc = mx_u32(ctx, "rnr_timer", &c->rnr_timer)) ||
        (rc = mx_u32(ctx, "traffic_class", &c->traffic_class)) ||
        (rc = mx_u32(ctx, "service_level", &c->service_level)) ||
        (rc = h->config_bool(h->host_ctx, "relaxed_ordering", &relaxed)) ||
        (rc = h->config_bool(h->host_ctx, "cuda_dmabuf", &dmabuf)))
        return rc;
    c->relaxed_ordering = relaxed;
    c->cuda_dmabuf = dmabuf;
    return 0;
}
