/*
 * Configuration keys of section [mlx5] (repeated in docs/mlx5.md) and their
 * parsing. Everything is validated at init() so a bad value fails there,
 * with the key named, instead of misbehaving later.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mx_internal.h"

const struct te_plugin_config_key mx_config_keys[] = {
    {"devices", "",
     "comma-separated verbs device names to use, in this order (e.g. "
     "\"mlx5_0,mlx5_1\" or \"rxe0\"); empty = every device, sorted by name"},
    {"port", "0", "port number to use on each device; 0 = the first ACTIVE "
     "port"},
    {"gid_index", "-1",
     "GID table index; -1 = automatic (RoCE: a RoCEv2 GID with an IPv4 "
     "address, then RoCEv2 IPv6, then RoCEv1; InfiniBand: 0). RoCEv2 fabrics "
     "often want 3"},
    {"queue_depth", "1024",
     "WRITE/READ/SEND ops that may be outstanding per NIC over all peers "
     "(16-65536); a non-zero queue_depth of nic_open overrides it"},
    {"qp_depth", "256",
     "send work requests per RC QP, i.e. per peer (16-32768)"},
    {"srq_depth", "1024",
     "receive buffers kept posted on the shared receive queue; every "
     "incoming write-with-immediate or SEND consumes one, so size it for "
     "the largest burst of immediates (64-65536)"},
    {"msg_size", "4096",
     "largest SEND this NIC accepts, bytes; must be >= engine.max_msg_size "
     "(64-1048576)"},
    {"max_inline", "64",
     "WRITE/SEND payloads up to this many bytes are copied into the work "
     "request (no DMA read of the source); capped by the device (0-1024)"},
    {"signal_every", "16",
     "request a completion for every Nth work request of a QP (and the last "
     "one of each post); 1 = every request (1-1024)"},
    {"connect_timeout_ms", "10000",
     "a connection that is not established this long after the attempt "
     "began fails: its ops complete with errors and the peer is reported "
     "down (100-3600000)"},
    {"connect_retry_ms", "20",
     "first handshake retransmission interval; doubles up to 1000 ms "
     "(1-10000)"},
    {"ack_timeout", "14",
     "RC local ACK timeout exponent: 4.096 us * 2^N (1-31)"},
    {"retry_cnt", "6",
     "RC transport retries before an op fails with a retry error (0-7); 7 "
     "means retry forever on some providers (rxe), so a dead peer would "
     "never be noticed by the transport"},
    {"rnr_timer", "12",
     "minimum receiver-not-ready delay code the QP advertises (1-31); "
     "senders retry RNR forever"},
    {"traffic_class", "0", "IP traffic class / DSCP<<2 of RoCE packets "
     "(0-255)"},
    {"service_level", "0", "InfiniBand service level / RoCE priority (0-15)"},
    {"relaxed_ordering", "true",
     "register memory with IBV_ACCESS_RELAXED_ORDERING where the device and "
     "kernel support it (ignored elsewhere)"},
    {"cuda_dmabuf", "true",
     "register CUDA memory through a dma-buf (libcuda "
     "cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr); false or failure "
     "falls back to plain ibv_reg_mr, which needs nvidia-peermem"},
    {NULL, NULL, NULL},
};

static const char *mx_get(mx_ctx *ctx, const char *key)
{
    return ctx->host.config_get ? ctx->host.config_get(ctx->host.host_ctx, key)
                                : NULL;
}

static int mx_cfg_i64(mx_ctx *ctx, const char *key, int64_t def, int64_t min,
                      int64_t max, int64_t *out)
{
    const char *v = mx_get(ctx, key);
    if (!v) {
        *out = def;
        return 0;
    }
    const char *s = v;
    while (*s == ' ' || *s == '\t')
        s++;
    char *end = NULL;
    errno = 0;
    long long x = ((*s >= '0' && *s <= '9') || *s == '-') ? strtoll(s, &end, 0)
                                                          : 0;
    if (end)
        while (*end == ' ' || *end == '\t')
            end++;
    if (!end || *end || errno || x < min || x > max) {
        mx_ctx_err(ctx, "invalid value '%s' for key %s: expected an integer "
                        "in [%lld, %lld]",
                   v, key, (long long)min, (long long)max);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

static int mx_cfg_u32(mx_ctx *ctx, const char *key, uint32_t def, uint32_t min,
                      uint32_t max, uint32_t *out)
{
    int64_t x;
    int rc = mx_cfg_i64(ctx, key, def, min, max, &x);
    if (rc == 0)
        *out = (uint32_t)x;
    return rc;
}

static int mx_cfg_bool(mx_ctx *ctx, const char *key, bool def, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    const char *v = mx_get(ctx, key);
    if (!v) {
        *out = def;
        return 0;
    }
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) {
            *out = true;
            return 0;
        }
        if (!strcasecmp(v, no[i])) {
            *out = false;
            return 0;
        }
    }
    mx_ctx_err(ctx, "invalid value '%s' for key %s: expected true or false",
               v, key);
    return -EINVAL;
}

int mx_config_parse(mx_ctx *ctx)
{
    struct mx_cfg *c = &ctx->cfg;
    int64_t gid, tmo, retry;
    int rc;
    const char *dev = mx_get(ctx, "devices");
    if (dev && strlen(dev) >= sizeof(c->devices)) {
        mx_ctx_err(ctx, "value of key devices is too long (%zu bytes)",
                   strlen(dev));
        return -EINVAL;
    }
    snprintf(c->devices, sizeof(c->devices), "%s", dev ? dev : "");
    if ((rc = mx_cfg_u32(ctx, "port", 0, 0, 255, &c->port)) ||
        (rc = mx_cfg_i64(ctx, "gid_index", -1, -1, 65535, &gid)) ||
        (rc = mx_cfg_u32(ctx, "queue_depth", 1024, 16, 65536, &c->queue_depth)) ||
        (rc = mx_cfg_u32(ctx, "qp_depth", 256, 16, 32768, &c->qp_depth)) ||
        (rc = mx_cfg_u32(ctx, "srq_depth", 1024, 64, 65536, &c->srq_depth)) ||
        (rc = mx_cfg_u32(ctx, "msg_size", 4096, 64, 1u << 20, &c->msg_size)) ||
        (rc = mx_cfg_u32(ctx, "max_inline", 64, 0, 1024, &c->max_inline)) ||
        (rc = mx_cfg_u32(ctx, "signal_every", 16, 1, 1024, &c->signal_every)) ||
        (rc = mx_cfg_i64(ctx, "connect_timeout_ms", 10000, 100, 3600000, &tmo)) ||
        (rc = mx_cfg_i64(ctx, "connect_retry_ms", 20, 1, 10000, &retry)) ||
        (rc = mx_cfg_u32(ctx, "ack_timeout", 14, 1, 31, &c->ack_timeout)) ||
        (rc = mx_cfg_u32(ctx, "retry_cnt", 6, 0, 7, &c->retry_cnt)) ||
        (rc = mx_cfg_u32(ctx, "rnr_timer", 12, 1, 31, &c->rnr_timer)) ||
        (rc = mx_cfg_u32(ctx, "traffic_class", 0, 0, 255, &c->traffic_class)) ||
        (rc = mx_cfg_u32(ctx, "service_level", 0, 0, 15, &c->service_level)) ||
        (rc = mx_cfg_bool(ctx, "relaxed_ordering", true, &c->relaxed_ordering)) ||
        (rc = mx_cfg_bool(ctx, "cuda_dmabuf", true, &c->cuda_dmabuf)))
        return rc;
    c->gid_index = (int32_t)gid;
    c->connect_timeout_ms = (uint64_t)tmo;
    c->connect_retry_ms = (uint64_t)retry;
    return 0;
}
