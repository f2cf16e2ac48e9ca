/*
 * mlx5 plugin entry: the ops table, the context and the
 * poll() driver that runs send completions, receive completions and the
 * connection handshake of one NIC.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mx_internal.h"
#include "tpc_cq.h"

/* ---------------------------------------------------------------- helpers */

void mx_cq_push(mx_nic *nic, const struct te_plugin_cq_entry *e)
{
    if (tpc_fifo_push(&nic->cq, e) != 0)
        mx_log(nic->ctx, 0, "%s: out of memory queueing a completion (kind %u)",
               nic->name, e->kind);
}

/* ---------------------------------------------------------------- context */

static int mx_init(const struct te_plugin_host *host, te_plugin_ctx **out)
{
    if (!out || !tpc_host_ok(host))
        return -EINVAL;
    mx_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return -ENOMEM;
    tpc_host_copy(&ctx->host, host);
    int rc = mx_config_parse(ctx);
    if (rc == 0)
        rc = mx_devices_scan(ctx);
    if (rc < 0) {
        free(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

static void mx_fini(te_plugin_ctx *ctx) { free(ctx); }

static int mx_device_count(te_plugin_ctx *ctx) { return ctx->ndev; }

/* ------------------------------------------------------------------ poll */

/* A queued entry on its way to the core (tpc_cq_take): a PEER_DOWN's
 * words become this poll's error (mx_conn_down said them in an earlier
 * call, maybe, whose error the core has cleared since). */
static void taking(void *arg, const struct te_plugin_cq_entry *e)
{
    mx_nic *nic = arg;
    if (e->kind != TE_PCQ_PEER_DOWN)
        return;
    const struct mx_conn *c = mx_handle_conn(nic, e->peer);
    if (c && c->down_why)
        mx_conn_say_down(nic, c, e->status, c->down_why);
    else /* removed since: no words left */
        mx_err(nic, "peer 0x%llx is down: %s", (unsigned long long)e->peer,
               strerror(-e->status));
}

static int mx_poll(te_plugin_nic *nic, struct te_plugin_cq_entry *out, int max)
{
    if (!out || max < 0)
        return -EINVAL;
    bool down_said = false;
    int n = tpc_cq_take(&nic->cq, out, 0, max, &down_said, taking, nic);
    if (down_said)
        return n; /* nothing may replace that peer's words in this poll */
    /* Alternate which CQ goes first so a flood of send completions cannot
     * starve the SRQ's refill (and vice versa) when max is small. */
    nic->recv_first = !nic->recv_first;
    if (nic->recv_first && n < max)
        n = mx_recv_progress(nic, out, n, max);
    if (n < max)
        n = mx_send_progress(nic, out, n, max, false);
    if (!nic->recv_first && n < max)
        n = mx_recv_progress(nic, out, n, max);
    mx_srq_refill(nic);
    if (nic->broken) /* QPs in the error state: fail their ops, replace */
        mx_conn_fix_broken(nic);

    /*
     * The handshake costs a CQ poll and, for timers, a clock read: while a
     * connection is being set up do it on every call, otherwise every 64
     * busy polls or on the first poll after an idle one.
     */
    if (nic->connecting || (++nic->hk_polls & 63) == 0 ||
        nic->hk_polls & 0x80000000u) {
        nic->hk_polls &= 0x7fffffffu;
        mx_oob_progress(nic);
        uint64_t now = tpc_now_ns();
        if (now >= nic->hk_next_ns) {
            nic->hk_next_ns = now + MX_HK_INTERVAL_NS;
            if (nic->connecting)
                mx_conn_timers(nic);
        }
        n = tpc_cq_take(&nic->cq, out, n, max, &down_said, taking, nic);
    }
    if (n == 0)
        nic->hk_polls |= 0x80000000u; /* idle: look at the clock next time */
    return n;
}

/* ------------------------------------------------------------ entry point */

static const struct te_plugin_ops mx_ops = {
    .abi_major = TE_PLUGIN_ABI_MAJOR,
    .abi_minor = TE_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(struct te_plugin_ops),
    .name = MX_NAME,
    .version = MX_VERSION,
    .description = "rdma-core ibverbs: RC QPs with RDMA WRITE (with "
                   "immediate), READ and SEND on any verbs device "
                   "(ConnectX mlx5_*, soft-RoCE rxe*)",
    .config_params = mx_config_params,
    .init = mx_init,
    .fini = mx_fini,
    .device_count = mx_device_count,
    .query_device = mx_query_device,
    .nic_open = mx_nic_open,
    .nic_close = mx_nic_close,
    .nic_address = mx_nic_address,
    .mr_reg = mx_mr_reg,
    .mr_dereg = mx_mr_dereg,
    .peer_add = mx_peer_add,
    .peer_remove = mx_peer_remove,
    .post = mx_post,
    .poll = mx_poll,
    .describe_paths = mx_describe_paths,
    .wait_fd = mx_wait_fd,
    .wait_arm = mx_wait_arm,
};

__attribute__((visibility("default"))) const struct te_plugin_ops *
te_plugin_entry(uint32_t core_major, uint32_t core_minor, char *err,
                size_t errlen)
{
    /* At least 1.4: the typed configuration getters. */
    return tpc_entry(&mx_ops, 4, core_major, core_minor, err, errlen);
}
