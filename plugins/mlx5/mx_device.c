/*
 * Verbs devices: which ones the plugin offers (key "devices"), what
 * query_device() reports about them, and the port and GID a NIC uses
 * (keys "port" and "gid_index", or an automatic choice: the first ACTIVE
 * port and, on RoCE, the best RoCEv2 GID; the authors' version hard-coded
 * port 1 and GID 0, which is RoCEv1 or link-local on most fabrics).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mx_internal.h"

/* ---------------------------------------------------------------- scan */

static int mx_cmp_name(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

int mx_devices_scan(mx_ctx *ctx)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) {
        int e = errno ? errno : ENODEV;
        mx_ctx_err(ctx, "ibv_get_device_list failed: %s (errno %d)",
                   strerror(e), e);
        return -e;
    }
    ctx->ndev = 0;
    if (!ctx->cfg.devices[0]) {
        for (int i = 0; i < n && ctx->ndev < MX_MAX_DEVICES; i++)
            snprintf(ctx->dev[ctx->ndev++], sizeof(ctx->dev[0]), "%s",
                     list[i]->name);
        qsort(ctx->dev, (size_t)ctx->ndev, sizeof(ctx->dev[0]), mx_cmp_name);
        ibv_free_device_list(list);
        return 0;
    }
    /* An explicit list: every name must exist, so a typo is an error. */
    char names[sizeof(ctx->cfg.devices)];
    snprintf(names, sizeof(names), "%s", ctx->cfg.devices);
    char *save = NULL;
    for (char *tok = strtok_r(names, ", \t", &save); tok;
         tok = strtok_r(NULL, ", \t", &save)) {
        int found = 0;
        for (int i = 0; i < n; i++)
            found |= strcmp(list[i]->name, tok) == 0;
        if (!found) {
            char avail[256] = "";
            size_t used = 0;
            for (int i = 0; i < n && used < sizeof(avail) - 1; i++)
                used += (size_t)snprintf(avail + used, sizeof(avail) - used,
                                         "%s%s", i ? ", " : "", list[i]->name);
            mx_ctx_err(ctx, "key devices: no verbs device named '%s' (present: "
                       "%s)", tok, n ? avail : "none; is a driver such as "
                       "mlx5_ib or rdma_rxe loaded?");
            ibv_free_device_list(list);
            return -ENODEV;
        }
        if (ctx->ndev == MX_MAX_DEVICES) {
            mx_ctx_err(ctx, "key devices: more than %d names", MX_MAX_DEVICES);
            ibv_free_device_list(list);
            return -EINVAL;
        }
        snprintf(ctx->dev[ctx->ndev++], sizeof(ctx->dev[0]), "%s", tok);
    }
    ibv_free_device_list(list);
    return 0;
}

/* Open device idx of the context's list; NULL with the error set. */
static struct ibv_context *mx_open_by_name(mx_ctx *ctx, int idx)
{
    if (idx < 0 || idx >= ctx->ndev) {
        mx_ctx_err(ctx, "device %d does not exist (%d verbs device%s%s)", idx,
                   ctx->ndev, ctx->ndev == 1 ? "" : "s",
                   ctx->ndev ? "" : "; is a driver such as mlx5_ib or "
                                    "rdma_rxe loaded?");
        errno = ENODEV;
        return NULL;
    }
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_context *vc = NULL;
    int e = ENODEV;
    for (int i = 0; list && i < n; i++) {
        if (strcmp(list[i]->name, ctx->dev[idx]) == 0) {
            vc = ibv_open_device(list[i]);
            e = vc ? 0 : (errno ? errno : EIO);
            break;
        }
    }
    if (list)
        ibv_free_device_list(list);
    if (!vc) {
        mx_ctx_err(ctx, "ibv_open_device(%s) failed: %s (errno %d)",
                   ctx->dev[idx], strerror(e), e);
        errno = e;
    }
    return vc;
}

/* --------------------------------------------------------------- ports */

static int mx_pick_port(mx_ctx *ctx, struct ibv_context *vc, const char *name,
                        uint8_t *port, struct ibv_port_attr *pa)
{
    struct ibv_device_attr da;
    int rc = ibv_query_device(vc, &da);
    if (rc) {
        mx_ctx_err(ctx, "ibv_query_device(%s) failed: %s (errno %d)", name,
                   strerror(rc), rc);
        return -rc;
    }
    if (ctx->cfg.port) {
        if (ctx->cfg.port > da.phys_port_cnt) {
            mx_ctx_err(ctx, "key port = %u but %s has %u port(s)",
                       ctx->cfg.port, name, da.phys_port_cnt);
            return -EINVAL;
        }
        *port = (uint8_t)ctx->cfg.port;
        if ((rc = ibv_query_port(vc, *port, pa))) {
            mx_ctx_err(ctx, "ibv_query_port(%s, %u) failed: %s (errno %d)",
                       name, *port, strerror(rc), rc);
            return -rc;
        }
        return 0;
    }
    for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
        if (ibv_query_port(vc, p, pa) == 0 && pa->state == IBV_PORT_ACTIVE) {
            *port = p;
            return 0;
        }
    }
    /* None active: report port 1 so query_device() still says something;
     * nic_open() refuses it. */
    *port = 1;
    if ((rc = ibv_query_port(vc, 1, pa))) {
        mx_ctx_err(ctx, "ibv_query_port(%s, 1) failed: %s (errno %d)", name,
                   strerror(rc), rc);
        return -rc;
    }
    return 0;
}

static uint64_t mx_link_gbps(const struct ibv_port_attr *pa)
{
    /* Per-lane rate in units of 1/8 Gbit/s, by active_speed code. */
    uint64_t lane8;
    switch (pa->active_speed) {
    case 1: lane8 = 20; break;   /* SDR 2.5 */
    case 2: lane8 = 40; break;   /* DDR 5 */
    case 4: lane8 = 80; break;   /* QDR 10 */
    case 8: lane8 = 80; break;   /* FDR10 10 */
    case 16: lane8 = 112; break; /* FDR 14 */
    case 32: lane8 = 200; break; /* EDR 25 */
    case 64: lane8 = 400; break; /* HDR 50 */
    case 128: lane8 = 800; break; /* NDR 100 */
    default: return 0;
    }
    uint64_t lanes;
    switch (pa->active_width) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: return 0;
    }
    return lane8 * lanes / 8;
}

static void mx_sysfs_info(const char *name, char *pci, size_t pcilen,
                          int32_t *numa)
{
    char path[PATH_MAX], link[PATH_MAX];
    pci[0] = 0;
    *numa = -1;
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device", name);
    ssize_t n = readlink(path, link, sizeof(link) - 1);
    if (n > 0) {
        link[n] = 0;
        const char *base = strrchr(link, '/');
        base = base ? base + 1 : link;
        /* Only a PCI function looks like dddd:bb:dd.f (rxe has none). */
        if (strlen(base) == 12 && base[4] == ':' && base[7] == ':' &&
            base[10] == '.')
            snprintf(pci, pcilen, "%s", base);
    }
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/numa_node",
             name);
    FILE *f = fopen(path, "r");
    if (f) {
        int v;
        if (fscanf(f, "%d", &v) == 1 && v >= 0)
            *numa = v;
        fclose(f);
    }
}

int mx_query_device(te_plugin_ctx *ctx, int idx,
                    struct te_plugin_device_info *info)
{
    if (!info)
        return -EINVAL;
    struct ibv_context *vc = mx_open_by_name(ctx, idx);
    if (!vc)
        return -errno;
    uint8_t port;
    struct ibv_port_attr pa;
    int rc = mx_pick_port(ctx, vc, ctx->dev[idx], &port, &pa);
    ibv_close_device(vc);
    if (rc)
        return rc;
    struct te_plugin_device_info d;
    memset(&d, 0, sizeof(d));
    snprintf(d.name, sizeof(d.name), "%s", ctx->dev[idx]);
    mx_sysfs_info(ctx->dev[idx], d.pci_path, sizeof(d.pci_path), &d.numa_node);
    d.link_gbps = mx_link_gbps(&pa);
    d.max_inline = ctx->cfg.max_inline;
    d.queue_depth = ctx->cfg.queue_depth;
    d.max_msg_size = pa.max_msg_sz;
    /* Fill only what the core's struct holds; keep its struct_size. */
    size_t n = info->struct_size < sizeof(d) ? info->struct_size : sizeof(d);
    size_t skip = sizeof(d.struct_size);
    if (n > skip)
        memcpy((char *)info + skip, (char *)&d + skip, n - skip);
    return 0;
}

/* ----------------------------------------------------------------- GIDs */

static const char *mx_gid_type(uint32_t t)
{
    return t == IBV_GID_TYPE_ROCE_V2 ? "RoCEv2"
           : t == IBV_GID_TYPE_ROCE_V1 ? "RoCEv1" : "IB";
}

static void mx_gid_str(const uint8_t *g, char *buf, size_t len)
{
    if (!inet_ntop(AF_INET6, g, buf, (socklen_t)len))
        snprintf(buf, len, "?");
}

/* Preference of a GID entry for RC traffic; 0 = unusable. */
static int mx_gid_score(const struct ibv_gid_entry *e, uint8_t ll)
{
    static const uint8_t zero[16];
    const uint8_t *g = e->gid.raw;
    if (!memcmp(g, zero, 16))
        return 0;
    if (ll == MX_LL_IB)
        return e->gid_index == 0 ? 2 : 1;
    bool v4 = !memcmp(g, zero, 10) && g[10] == 0xff && g[11] == 0xff;
    bool ll6 = g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
    if (e->gid_type == IBV_GID_TYPE_ROCE_V2)
        return v4 ? 5 : ll6 ? 3 : 4;
    return 1; /* RoCEv1: routable only inside one L2 domain */
}

int mx_select_port_gid(mx_nic *nic)
{
    mx_ctx *ctx = nic->ctx;
    struct ibv_port_attr pa;
    int rc = mx_pick_port(ctx, nic->vctx, nic->name, &nic->port, &pa);
    if (rc)
        return rc;
    if (pa.state != IBV_PORT_ACTIVE) {
        mx_err(nic, "port %u is not ACTIVE (state %s)%s", nic->port,
               ibv_port_state_str(pa.state),
               ctx->cfg.port ? "" : "; no port of the device is active");
        return -ENETDOWN;
    }
    nic->link_layer = pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? MX_LL_IB
                                                                 : MX_LL_ETH;
    nic->lid = nic->link_layer == MX_LL_IB ? pa.lid : 0;
    nic->mtu = (uint8_t)pa.active_mtu;
    nic->max_msg = pa.max_msg_sz ? pa.max_msg_sz : (1ull << 31);

    if (ctx->cfg.gid_index >= 0) {
        struct ibv_gid_entry e;
        rc = ibv_query_gid_ex(nic->vctx, nic->port, (uint32_t)ctx->cfg.gid_index,
                              &e, 0);
        if (rc || !mx_gid_score(&e, nic->link_layer)) {
            mx_err(nic, "key gid_index = %d: entry %d of port %u is %s%s%s",
                   ctx->cfg.gid_index, ctx->cfg.gid_index, nic->port,
                   rc ? "unreadable: " : "empty",
                   rc ? strerror(rc) : "",
                   "; see `ibv_devinfo -v` or `show_gids` for valid entries");
            return -EINVAL;
        }
        nic->gid_index = ctx->cfg.gid_index;
        memcpy(nic->gid.raw, e.gid.raw, 16);
        return 0;
    }

    size_t max = pa.gid_tbl_len ? pa.gid_tbl_len : 1;
    struct ibv_device_attr da;
    if (ibv_query_device(nic->vctx, &da) == 0 && da.phys_port_cnt > 1)
        max *= da.phys_port_cnt; /* the table call returns every port */
    if (max > 8192)
        max = 8192;
    struct ibv_gid_entry *tab = calloc(max, sizeof(*tab));
    if (!tab)
        return -ENOMEM;
    ssize_t cnt = ibv_query_gid_table(nic->vctx, tab, max, 0);
    if (cnt < 0) {
        int e = (int)-cnt;
        mx_err(nic, "ibv_query_gid_table failed: %s (errno %d)", strerror(e), e);
        free(tab);
        return -e;
    }
    int best = -1, best_score = 0;
    for (ssize_t i = 0; i < cnt; i++) {
        if (tab[i].port_num != nic->port)
            continue;
        int s = mx_gid_score(&tab[i], nic->link_layer);
        if (s > best_score ||
            (s == best_score && s && tab[i].gid_index < tab[best].gid_index)) {
            best = (int)i;
            best_score = s;
        }
    }
    if (best < 0) {
        free(tab);
        mx_err(nic, "port %u has no usable GID (%s: does its network "
                    "interface have an IP address yet?)",
               nic->port, nic->link_layer == MX_LL_ETH ? "RoCE" : "IB");
        return -EADDRNOTAVAIL;
    }
    nic->gid_index = (int)tab[best].gid_index;
    memcpy(nic->gid.raw, tab[best].gid.raw, 16);
    char gs[64];
    mx_gid_str(nic->gid.raw, gs, sizeof(gs));
    mx_log(ctx, 2, "%s: port %u GID index %d (%s %s)", nic->name, nic->port,
           nic->gid_index, mx_gid_type(tab[best].gid_type), gs);
    free(tab);
    return 0;
}
