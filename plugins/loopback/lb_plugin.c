/*
 * Loopback plugin entry: the ops table, context, devices, NIC lifetime and
 * the poll() driver that runs target and initiator progress.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "lb_auth.h"
#include "lb_internal.h"
#include "tpc_cq.h"

/* ---------------------------------------------------------------- helpers */

void lb_cq_push(lb_nic *nic, const struct te_plugin_cq_entry *e)
{
    if (tpc_fifo_push(&nic->cq, e) != 0)
        lb_log(nic->ctx, 0, "%s: out of memory queueing a completion (kind %u)",
               nic->name, e->kind);
}

/* ---------------------------------------------------------- context, devices */

static int lb_init(const struct te_plugin_host *host, te_plugin_ctx **out)
{
    if (!out || !tpc_host_ok(host))
        return -EINVAL;
    lb_ctx *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return -ENOMEM;
    tpc_host_copy(&ctx->host, host);
    int rc = lb_config_parse(ctx);
    if (rc == 0 && ctx->cfg.copy_threads > 1 &&
        (rc = lb_copy_pool_new(ctx->cfg.copy_threads - 1, &ctx->copy_pool)))
        lb_ctx_err(ctx, "out of memory for the copy engines");
    if (rc < 0) {
        free(ctx);
        return rc;
    }
    if (ctx->cfg.ptracer_any)
        prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    *out = ctx;
    return 0;
}

static void lb_fini(te_plugin_ctx *ctx)
{
    if (!ctx)
        return;
    lb_copy_pool_free(ctx->copy_pool);
    free(ctx);
}

static int lb_device_count(te_plugin_ctx *ctx) { return (int)ctx->cfg.devices; }

static int lb_query_device(te_plugin_ctx *ctx, int idx,
                           struct te_plugin_device_info *info)
{
    if (!info)
        return -EINVAL;
    if (idx < 0 || (uint32_t)idx >= ctx->cfg.devices) {
        lb_ctx_err(ctx, "device %d does not exist (devices = %u)", idx,
                   ctx->cfg.devices);
        return -ENODEV;
    }
    struct te_plugin_device_info d;
    memset(&d, 0, sizeof(d));
    snprintf(d.name, sizeof(d.name), "lo%d", idx);
    d.numa_node = -1;
    d.link_gbps = lb_link_gbps(ctx, idx);
    d.max_inline = 0;
    d.queue_depth = ctx->cfg.queue_depth;
    d.max_msg_size = LB_MAX_MSG_SIZE;
    /* Fill only what the core's struct holds; keep its struct_size. */
    size_t n = info->struct_size < sizeof(d) ? info->struct_size : sizeof(d);
    size_t skip = sizeof(d.struct_size);
    if (n > skip)
        memcpy((char *)info + skip, (char *)&d + skip, n - skip);
    return 0;
}

/* ---------------------------------------------------------------- NICs */

static void lb_nic_free(lb_nic *nic)
{
    if (nic->listen_fd >= 0)
        close(nic->listen_fd);
    for (uint32_t i = 0; i < nic->nhello; i++)
        close(nic->hello_fds[i]);
    free(nic->hello_fds);
    lb_mr_free_all(nic);
    tpc_fifo_free(&nic->cq);
    tpc_fifo_free(&nic->recvq);
    tpc_fifo_free(&nic->pending);
    free(nic->slots);
    free(nic->peers);
    free(nic->in);
    free(nic->in_new);
    free(nic->batch);
    free(nic->copies);
    free(nic->pfds);
    lb_wait_close(nic);
    pthread_mutex_destroy(&nic->exec_lock);
    pthread_mutex_destroy(&nic->in_lock);
    free(nic);
}

static int lb_nic_open(te_plugin_ctx *ctx, int idx,
                       const struct te_plugin_nic_attr *attr,
                       te_plugin_nic **out)
{
    if (!out)
        return -EINVAL;
    if (idx < 0 || (uint32_t)idx >= ctx->cfg.devices) {
        lb_ctx_err(ctx, "cannot open device %d: devices = %u", idx,
                   ctx->cfg.devices);
        return -ENODEV;
    }
    uint32_t qd = ctx->cfg.queue_depth, rd = 0;
    if (attr && attr->struct_size >= offsetof(struct te_plugin_nic_attr, recv_depth) &&
        attr->queue_depth)
        qd = attr->queue_depth;
    if (attr && attr->struct_size >= offsetof(struct te_plugin_nic_attr, reserved))
        rd = attr->recv_depth;
    if (qd > LB_MAX_QUEUE_DEPTH) {
        lb_ctx_err(ctx, "queue depth %u exceeds the maximum %u", qd,
                   LB_MAX_QUEUE_DEPTH);
        return -EINVAL;
    }
    lb_nic *nic = calloc(1, sizeof(*nic));
    if (!nic)
        return -ENOMEM;
    nic->ctx = ctx;
    nic->index = (uint32_t)idx;
    nic->id = tpc_random64();
    snprintf(nic->name, sizeof(nic->name), "lo%d", idx);
    nic->qd = qd;
    nic->recv_cap = rd > qd ? rd : qd;
    nic->listen_fd = -1;
    nic->epfd = nic->bell = -1;
    nic->mr_free = UINT32_MAX;
    nic->rkey_seq = tpc_random64();
    pthread_mutex_init(&nic->exec_lock, NULL);
    pthread_mutex_init(&nic->in_lock, NULL);
    nic->rng = ctx->cfg.fault_seed ^ (0x9e3779b97f4a7c15ull * (idx + 1));
    nic->faults = ctx->cfg.fault_fail_every || ctx->cfg.fault_kill_after;
    nic->delay_ns = ctx->cfg.fault_delay_us * 1000;
    nic->link_gbps = lb_link_gbps(ctx, idx);
    nic->tok_last_ns = tpc_now_ns();

    int rc = -ENOMEM;
    nic->batch = calloc(LB_BATCH, sizeof(*nic->batch));
    nic->copies = calloc(LB_BATCH, sizeof(*nic->copies));
    if (!nic->batch || !nic->copies || lb_slots_init(nic) < 0 ||
        tpc_fifo_init(&nic->cq, sizeof(struct te_plugin_cq_entry), 2 * qd) < 0 ||
        tpc_fifo_init(&nic->recvq, sizeof(struct lb_recv), nic->recv_cap) < 0 ||
        tpc_fifo_init(&nic->pending, sizeof(struct lb_pending), 64) < 0)
        goto fail;
    if ((rc = lb_wait_open(nic)) < 0 || (rc = lb_listen(nic)) < 0 ||
        (rc = lb_wait_add(nic, nic->listen_fd)) < 0)
        goto fail;
    if ((rc = lb_registry_add(nic)) < 0)
        goto fail;
    *out = nic;
    return 0;
fail:
    if (rc == -ENOMEM)
        lb_ctx_err(ctx, "out of memory opening %s", nic->name);
    lb_nic_free(nic);
    return rc;
}

static void lb_nic_close(te_plugin_nic *nic)
{
    if (!nic)
        return;
    /* Unreachable first, so no new channel can arrive while tearing down. */
    lb_registry_remove(nic);
    lb_peers_free_all(nic);
    /* Connections that reached us but were not taken yet (in the listen
     * backlog, or their hello unread) become channels now, so that they
     * too are told of the orderly close below instead of only seeing the
     * socket go (reported as a failure). */
    if (!atomic_load(&nic->dead))
        lb_hellos_service(nic);
    lb_inbound_free_all(nic, LB_ST_CLOSED);
    lb_dev_free(nic);
    lb_nic_free(nic);
}

static int lb_nic_address(te_plugin_nic *nic, void *buf, size_t *len)
{
    if (!len)
        return -EINVAL;
    if (!buf || *len < sizeof(nic->addr)) {
        *len = sizeof(nic->addr);
        lb_err(nic, "address buffer too small: need %zu bytes",
               sizeof(nic->addr));
        return -ENOSPC;
    }
    memcpy(buf, &nic->addr, sizeof(nic->addr));
    *len = sizeof(nic->addr);
    return 0;
}

/* ------------------------------------------------------------------ poll */

/* A queued entry on its way to the core (tpc_cq_take): a LOCAL's op is
 * no longer outstanding; a PEER_DOWN's words become this poll's error. */
static void taking(void *arg, const struct te_plugin_cq_entry *e)
{
    lb_nic *nic = arg;
    if (e->kind == TE_PCQ_LOCAL) {
        nic->outstanding--;
    } else if (e->kind == TE_PCQ_PEER_DOWN) {
        const struct lb_peer *p = lb_peer_get(nic, e->peer);
        if (p && p->down_why[0])
            lb_err(nic, "%s", p->down_why);
        else /* removed since: no words left */
            lb_err(nic, "peer 0x%llx is down: %s", (unsigned long long)e->peer,
                   strerror(-e->status));
    }
}

TPC_HOT
static int lb_poll(te_plugin_nic *nic, struct te_plugin_cq_entry *out, int max)
{
    if (!out || max < 0)
        return -EINVAL;
    if (nic->armed)
        lb_wait_disarm(nic);
    bool down_said = false;
    int n = tpc_cq_take(&nic->cq, out, 0, max, &down_said, taking, nic);
    /* After a PEER_DOWN nothing else may set this poll's error (a failed
     * op's words would replace the peer's): the rest waits. */
    if (n == max || down_said ||
        atomic_load_explicit(&nic->dead, memory_order_relaxed))
        return n;

    /*
     * Sockets and liveness cost syscalls: look at them at most once per
     * LB_HK_INTERVAL_NS. The clock is read every 64 busy polls, every 8
     * idle ones (a thread spinning on an idle engine: a read per poll was
     * a sixth of such a poll's cost), and on the first poll after the NIC
     * was armed for blocking.
     */
    uint32_t every = nic->hk_idle ? 7 : 63;
    if ((++nic->hk_polls & every) == 0 || nic->hk_polls & LB_HK_NOW) {
        nic->hk_polls &= ~LB_HK_NOW;
        uint64_t now = tpc_now_ns();
        if (now >= nic->hk_next_ns) {
            nic->hk_next_ns = now + LB_HK_INTERVAL_NS;
            lb_housekeeping(nic);
            n = tpc_cq_take(&nic->cq, out, n, max, &down_said, taking, nic);
            if (n == max || down_said ||
                atomic_load_explicit(&nic->dead, memory_order_relaxed))
                return n;
        }
    }
    if (atomic_load_explicit(&nic->in_gen, memory_order_acquire) != nic->in_seen)
        lb_inbound_refresh(nic);

    /* Alternate which side goes first so neither starves with a small max. */
    nic->resp_first = !nic->resp_first;
    if (nic->resp_first) {
        n += lb_initiator_progress(nic, out + n, max - n);
        n += lb_target_progress(nic, out + n, max - n);
    } else {
        n += lb_target_progress(nic, out + n, max - n);
        n += lb_initiator_progress(nic, out + n, max - n);
    }
    nic->hk_idle = n == 0;
    return n;
}

/* ------------------------------------------------------------ entry point */

static const struct te_plugin_ops lb_ops = {
    .abi_major = TE_PLUGIN_ABI_MAJOR,
    .abi_minor = TE_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(struct te_plugin_ops),
    .name = LB_NAME,
    .version = LB_VERSION,
    .description = "software NIC: in-process and same-host cross-process "
                   "transfers, with fault injection",
    .config_params = lb_config_params,
    .init = lb_init,
    .fini = lb_fini,
    .device_count = lb_device_count,
    .query_device = lb_query_device,
    .nic_open = lb_nic_open,
    .nic_close = lb_nic_close,
    .nic_address = lb_nic_address,
    .mr_reg = lb_mr_reg,
    .mr_dereg = lb_mr_dereg,
    .peer_add = lb_peer_add,
    .peer_remove = lb_peer_remove,
    .post = lb_post,
    .poll = lb_poll,
    .describe_paths = lb_describe_paths,
    .wait_fd = lb_wait_fd,
    .wait_arm = lb_wait_arm,
};

__attribute__((visibility("default"))) const struct te_plugin_ops *
te_plugin_entry(uint32_t core_major, uint32_t core_minor, char *err,
                size_t errlen)
{
    /* At least 1.4: the typed configuration getters. */
    return tpc_entry(&lb_ops, 4, core_major, core_minor, err, errlen);
}
