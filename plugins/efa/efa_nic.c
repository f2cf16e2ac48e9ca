/*
 * NIC life cycle: one fabric, domain, address vector, completion queue and
 * RDM endpoint per opened device, the landing region for imm-only writes,
 * and the address peers resolve.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "efa_internal.h"

static void nic_free(efa_nic *nic)
{
    efa_peers_free(nic);
    /* Posts of other NICs of this process to this endpoint end first. */
    efa_local_close(nic->local);
    /* Endpoint first: closing it cancels every operation, so nothing the
     * provider still holds can touch a region closed below. */
    if (nic->ep)
        fi_close(&nic->ep->fid);
    efa_auth_close(nic);
    efa_bye_close(nic);
    while (nic->mrs) {
        efa_mr *m = nic->mrs;
        nic->mrs = m->next;
        fi_close(&m->mr->fid);
        free(m);
    }
    if (nic->landing_mr)
        fi_close(&nic->landing_mr->fid);
    if (nic->av)
        fi_close(&nic->av->fid);
    if (nic->cq)
        fi_close(&nic->cq->fid);
    if (nic->domain)
        fi_close(&nic->domain->fid);
    if (nic->fabric)
        fi_close(&nic->fabric->fid);
    /* Only now can the provider touch no peer's region. */
    efa_shm_guard_forget(nic);
    efa_bell_close(nic->bell);
    if (nic->bell_tx_fd >= 0)
        close(nic->bell_tx_fd);
    if (nic->info)
        fi_freeinfo(nic->info);
    free(nic->landing);
    free(nic->slots);
    free(nic->av_map);
    tpc_fifo_free(&nic->cq_fifo);
    pthread_mutex_destroy(&nic->lock);
    free(nic);
}

static int build_address(efa_nic *nic, const uint8_t *raw, size_t raw_len)
{
    efa_ctx *ctx = nic->ctx;
    struct efa_wire_addr *a = (struct efa_wire_addr *)nic->addr;
    memset(nic->addr, 0, sizeof(nic->addr));
    a->magic = EFA_ADDR_MAGIC;
    a->version = EFA_ADDR_VERSION;
    a->raw_len = (uint8_t)raw_len;
    a->flags = (nic->mint_keys ? EFA_AF_KEYCHECK : 0) |
               (nic->auth.on ? EFA_AF_AUTH : 0) |
               (nic->bell ? EFA_AF_BELL : 0);
    a->landing_key = nic->landing_key;
    a->landing_addr = nic->virt_addr ? (uint64_t)(uintptr_t)nic->landing : 0;
    /* With a secret, the key check's input goes to authenticated peers
     * only (in the handshake), which makes keys unguessable to others. */
    a->key_secret = nic->auth.on ? 0 : nic->key_secret;
    a->host_id = ctx->host_id;
    a->pid = (uint32_t)getpid();
    a->start_time = ctx->start_time;
    memcpy(a->prov, nic->info->fabric_attr->prov_name,
           strnlen(nic->info->fabric_attr->prov_name, EFA_PROV_LEN));
    memcpy(a->raw, raw, raw_len);
    nic->addr_len = sizeof(*a) + raw_len;
    return 0;
}

/* Open the libfabric objects; `what` names the call that failed. */
static int open_objects(efa_nic *nic, const char **what)
{
    struct fi_info *i = nic->info;
    int rc;
    *what = "fi_fabric";
    if ((rc = fi_fabric(i->fabric_attr, &nic->fabric, NULL)))
        return rc;
    *what = "fi_domain";
    if ((rc = fi_domain(nic->fabric, i, &nic->domain, NULL)))
        return rc;
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .count = 256};
    *what = "fi_av_open";
    if ((rc = fi_av_open(nic->domain, &aa, &nic->av, NULL)))
        return rc;
    /* Room for every local completion plus a burst of remote CQ data;
     * the providers we know queue overflow internally beyond it. */
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_DATA,
                            .size = 2 * (nic->qd + nic->recv_cap) + 1024,
                            .wait_obj = FI_WAIT_NONE};
    *what = "fi_cq_open";
    if (efa_wants_progress_fd(i)) {
        ca.wait_obj = FI_WAIT_FD;
        if (fi_cq_open(nic->domain, &ca, &nic->cq, NULL) != 0)
            nic->cq = NULL; /* a provider without wait fds: open plain */
        else if (fi_control(&nic->cq->fid, FI_GETWAIT, &nic->progress_fd))
            nic->progress_fd = -1;
        ca.wait_obj = FI_WAIT_NONE;
    }
    if (!nic->cq && (rc = fi_cq_open(nic->domain, &ca, &nic->cq, NULL)))
        return rc;
    /* Measured (tcp;ofi_rxm, two processes, 64 KiB writes without an
     * immediate): 0.94 GB/s while the target's worker slept between polls,
     * 4.66 GB/s with the wait fd watched; with an immediate 3.4-3.7 either
     * way. Without a wait fd the old remedy is all there is: say it. */
    if (efa_wants_progress_fd(i) && nic->progress_fd < 0)
        efa_log(nic->ctx, 2, "%s: provider %s moves data only while the "
                "receiving host polls and offers no CQ wait fd: on receivers "
                "of writes without an immediate keep the worker spinning "
                "(engine.idle_spin_us large), see docs/efa.md", nic->name,
                i->fabric_attr->prov_name);
    *what = "fi_endpoint";
    if ((rc = fi_endpoint(nic->domain, i, &nic->ep, NULL)))
        return rc;
    *what = "fi_setname";
    if ((rc = efa_shm_name_endpoint(nic->ep, i)))
        return rc;
    *what = "fi_ep_bind";
    if ((rc = fi_ep_bind(nic->ep, &nic->av->fid, 0)) ||
        (rc = fi_ep_bind(nic->ep, &nic->cq->fid, FI_TRANSMIT | FI_RECV)))
        return rc;
    *what = "fi_enable";
    return fi_enable(nic->ep);
}

/* shm: a doorbell, so that the idle worker can block (efa_shm_bell.h).
 * Without one the NIC works as before, napping when idle. */
static void open_bell(efa_nic *nic, const uint8_t *raw, size_t raw_len)
{
    if (!nic->shm_regions || !nic->ctx->cfg.shm_bell)
        return;
    char why[200];
    if (efa_bell_open(&nic->bell, raw, raw_len, why, sizeof(why)) < 0) {
        nic->bell = NULL;
        efa_log(nic->ctx, 1, "%s: no doorbell (%s): its idle worker naps "
                "between polls instead of blocking", nic->name, why);
    }
}

int efa_nic_open(te_plugin_ctx *ctx, int idx,
                 const struct te_plugin_nic_attr *attr, te_plugin_nic **out)
{
    if (!out)
        return -EINVAL;
    if (idx < 0 || (uint32_t)idx >= ctx->ndev) {
        efa_ctx_err(ctx, "cannot open device %d: %u devices", idx, ctx->ndev);
        return -ENODEV;
    }
    efa_nic *nic = calloc(1, sizeof(*nic));
    if (!nic)
        return -ENOMEM;
    pthread_mutex_init(&nic->lock, NULL);
    nic->ctx = ctx;
    nic->progress_fd = -1;
    nic->bell_tx_fd = -1;
    nic->index = (uint32_t)idx;
    efa_device_name(ctx, (uint32_t)idx, nic->name, sizeof(nic->name));
    nic->info = fi_dupinfo(ctx->dev[(uint32_t)idx % ctx->ndomains]);
    if (!nic->info) {
        nic_free(nic);
        return -ENOMEM;
    }
    struct fi_info *i = nic->info;

    /* Queue depths: the core's wish, else ours, else the provider's. */
    uint32_t qd = ctx->cfg.queue_depth ? ctx->cfg.queue_depth
                                       : (uint32_t)i->tx_attr->size;
    uint32_t rd = 64;
    if (attr && attr->struct_size >=
                    offsetof(struct te_plugin_nic_attr, queue_depth) +
                        sizeof(attr->queue_depth) && attr->queue_depth)
        qd = attr->queue_depth;
    if (attr && attr->struct_size >=
                    offsetof(struct te_plugin_nic_attr, recv_depth) +
                        sizeof(attr->recv_depth) && attr->recv_depth > rd)
        rd = attr->recv_depth;
    if (i->rx_attr->size && rd > i->rx_attr->size)
        rd = (uint32_t)i->rx_attr->size;
    /* The receive queue holds the core's message buffers only (RMA needs
     * none); asking less than the provider's default matters: ofi_rxm backs
     * every entry with a 16 KiB bounce buffer it fills at open. */
    if (i->rx_attr->size > 2u * rd + 64)
        i->rx_attr->size = 2u * rd + 64;
    nic->qd = qd ? qd : 256;
    nic->recv_cap = rd;

    uint64_t mode = i->domain_attr->mr_mode;
    nic->virt_addr = (mode & FI_MR_VIRT_ADDR) != 0;
    nic->mr_local = (mode & FI_MR_LOCAL) != 0;
    nic->mr_endpoint = (mode & FI_MR_ENDPOINT) != 0;
    nic->mr_rma_event = (mode & FI_MR_RMA_EVENT) != 0;
    nic->prov_key = (mode & FI_MR_PROV_KEY) != 0;
    nic->hmem = ctx->paths.hmem;
    nic->mint_keys = ctx->paths.key_check;
    nic->key_secret = tpc_random64();
    nic->write_flags = ctx->paths.write_flags;
    nic->use_inject = ctx->paths.inject;
    nic->inject_max = ctx->paths.inject_max;
    nic->inject_zero = ctx->paths.inject_zero;
    nic->inject_send = ctx->paths.inject_send;
    nic->rx_cq_data = (i->mode & FI_RX_CQ_DATA) != 0;
    nic->source = ctx->paths.source && ctx->probe.source == 1;
    const char *prov = i->fabric_attr->prov_name;
    /* A job secret (docs/security.md): peers authenticate with tagged
     * messages, and inbound events are told apart by FI_SOURCE. Without
     * either, refuse rather than run unauthenticated. */
    nic->auth.on = efa_auth_required(ctx);
    if (nic->auth.on && (!nic->source || !(i->caps & FI_TAGGED))) {
        efa_ctx_err(ctx, "%s: engine.auth_key is set and provider %s %s: "
                    "peers cannot be authenticated, refused rather than "
                    "accept unauthenticated ones (docs/security.md)",
                    nic->name, prov, !nic->source
                        ? "does not name the sender of completions "
                          "(FI_SOURCE)"
                        : "has no tagged messages (FI_TAGGED)");
        nic_free(nic);
        return -ENOTSUP;
    }
    nic->prov_errno_is_errno = efa_prov_has(prov, "tcp") ||
                               efa_prov_has(prov, "sockets") ||
                               efa_prov_has(prov, "udp");

    const char *what = "out of memory";
    int rc = -ENOMEM;
    if (efa_slots_init(nic) < 0 ||
        tpc_fifo_init(&nic->cq_fifo, sizeof(struct te_plugin_cq_entry),
                      2 * nic->qd))
        goto fail;
    if ((rc = open_objects(nic, &what)))
        goto fail_fi;
    uint8_t raw[256];
    size_t raw_len = sizeof(raw);
    what = "fi_getname";
    if ((rc = fi_getname(&nic->ep->fid, raw, &raw_len)))
        goto fail_fi;
    if (raw_len > EFA_RAW_MAX) {
        efa_ctx_err(ctx, "%s: endpoint name of %zu bytes does not fit an "
                    "address (at most %d)", nic->name, raw_len, EFA_RAW_MAX);
        rc = -ENAMETOOLONG;
        goto fail;
    }
    nic->raw_len = raw_len;
    if (efa_shm_guarded(nic))
        efa_shm_guard_own(nic, &ctx->host, nic->name, raw, raw_len);
    nic->local = efa_local_open(nic->info->fabric_attr->prov_name, raw,
                                raw_len);
    /* The landing region: a key every imm-only write can use (EFA needs a
     * valid key even for zero bytes; the core may not have one). */
    what = "landing region";
    if (posix_memalign((void **)&nic->landing, 64, EFA_LANDING_LEN)) {
        rc = -ENOMEM;
        goto fail;
    }
    memset(nic->landing, 0, EFA_LANDING_LEN);
    pthread_mutex_lock(&nic->lock);
    rc = efa_mr_register_locked(nic, nic->landing, EFA_LANDING_LEN,
                                FI_REMOTE_WRITE | FI_WRITE, TE_PMEM_HOST, 0,
                                &nic->landing_mr, &nic->landing_key);
    pthread_mutex_unlock(&nic->lock);
    if (rc)
        goto fail; /* message already set */
    if (nic->auth.on && (rc = efa_auth_open(nic)))
        goto fail; /* message already set */
    nic->shm_regions = !strcmp(prov, "shm") &&
                       efa_shm_region_visible(raw, raw_len);
    open_bell(nic, raw, raw_len);
    build_address(nic, raw, raw_len);
    if ((rc = efa_bye_open(nic)))
        goto fail; /* message already set */
    efa_log(ctx, 2, "%s: opened (queue depth %u, %u receives, %zu-byte "
            "address)", nic->name, nic->qd, nic->recv_cap, nic->addr_len);
    *out = nic;
    return 0;
fail_fi:
    efa_ctx_err(ctx, "%s: %s: %s", nic->name, what, fi_strerror(-rc));
    rc = efa_errno(rc);
    nic_free(nic);
    return rc;
fail:
    if (rc == -ENOMEM)
        efa_ctx_err(ctx, "%s: %s", nic->name, what);
    nic_free(nic);
    return rc;
}

void efa_nic_close(te_plugin_nic *nic)
{
    if (!nic)
        return;
    /* Peers hear of the close now, not at their next write (efa_bye.h). */
    efa_bye_send_all(nic);
    /* Completions still queued are discarded with the NIC (plugin.h). */
    nic_free(nic);
}

int efa_nic_address(te_plugin_nic *nic, void *buf, size_t *len)
{
    if (!len)
        return -EINVAL;
    if (!buf || *len < nic->addr_len) {
        *len = nic->addr_len;
        efa_err(nic, "address buffer too small: need %zu bytes",
                nic->addr_len);
        return -ENOSPC;
    }
    memcpy(buf, nic->addr, nic->addr_len);
    *len = nic->addr_len;
    return 0;
}
