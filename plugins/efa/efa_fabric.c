/*
 * Provider discovery and the decisions taken from it: which fi_info entries
 * become devices, what each operation uses (the "paths" te-info and the
 * logs report), and what is refused. Capabilities are asked for, then
 * measured (efa_probe.c); nothing here trusts an advertisement alone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "efa_internal.h"

/* What every operation needs. FI_REMOTE_CQ_DATA is asked for but dropped
 * when refused: shm (1.17) refuses it as a capability yet delivers the data,
 * so the probe decides. */
#define EFA_BASE_CAPS                                                          \
    (FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | \
     FI_SEND | FI_RECV)

/* FI_HMEM is asked for only where CUDA memory can exist: it is not free
 * (shm drops inject with it, for one). */
static bool want_hmem(efa_ctx *ctx)
{
#ifdef TE_EFA_WITH_HMEM
    if (ctx->cfg.hmem == EFA_ON)
        return true;
    return ctx->cfg.hmem == EFA_AUTO && access("/dev/nvidiactl", F_OK) == 0;
#else
    (void)ctx;
    return false;
#endif
}

static struct fi_info *make_hints(efa_ctx *ctx, uint64_t caps)
{
    struct fi_info *h = fi_allocinfo();
    if (!h)
        return NULL;
    h->ep_attr->type = FI_EP_RDM;
    h->caps = caps;
    /* Modes we can live with: op contexts are our slots (fi_context2 first),
     * and receives consumed by remote CQ data are reposted (efa_cq.c). */
    h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
    /* Every mr_mode bit we honour (efa_mr.c); a provider keeps the ones it
     * needs. Not offered: FI_MR_RAW (keys wider than 64 bits),
     * FI_MR_MMU_NOTIFY (we cannot see the application's remaps). */
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                              FI_MR_PROV_KEY | FI_MR_ENDPOINT |
                              FI_MR_RMA_EVENT;
    if (want_hmem(ctx))
        h->domain_attr->mr_mode |= FI_MR_HMEM;
    h->domain_attr->cq_data_size = 4;
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
    h->fabric_attr->prov_name = strdup(ctx->cfg.provider);
    if (ctx->cfg.domain[0])
        h->domain_attr->name = strdup(ctx->cfg.domain);
    if (!h->fabric_attr->prov_name ||
        (ctx->cfg.domain[0] && !h->domain_attr->name)) {
        fi_freeinfo(h);
        return NULL;
    }
    return h;
}

static int getinfo(efa_ctx *ctx, uint64_t caps, struct fi_info **out)
{
    struct fi_info *h = make_hints(ctx, caps);
    if (!h)
        return -FI_ENOMEM;
    const char *node = ctx->cfg.node[0] ? ctx->cfg.node : NULL;
    int rc = fi_getinfo(EFA_FI_VERSION, node, NULL, node ? FI_SOURCE : 0, h,
                        out);
    fi_freeinfo(h);
    return rc;
}

int efa_discover(efa_ctx *ctx)
{
    /* Optional capabilities, dropped in this order when refused. */
    uint64_t optional = FI_REMOTE_CQ_DATA | FI_SOURCE;
    if (want_hmem(ctx))
        optional |= FI_HMEM;
    static const uint64_t drop_order[] = {0, FI_REMOTE_CQ_DATA,
                                          FI_REMOTE_CQ_DATA | FI_HMEM,
                                          FI_REMOTE_CQ_DATA | FI_HMEM |
                                              FI_SOURCE};
    /* Tagged messages carry the handshake of a job secret and the
     * goodbyes of an orderly close, apart from the application's untagged
     * SENDs (efa_auth_wire.h, efa_bye_wire.h): required with a secret;
     * without one, a provider that lacks them is still used, closing
     * without goodbyes (tried last). */
    bool keyed = efa_auth_required(ctx);
    int rc = -FI_ENODATA;
    uint64_t caps = 0;
    for (int tagged = 1; tagged >= (keyed ? 1 : 0) && rc == -FI_ENODATA;
         tagged--) {
        uint64_t base = EFA_BASE_CAPS | (tagged ? FI_TAGGED : 0);
        for (size_t i = 0; i < sizeof(drop_order) / sizeof(drop_order[0]);
             i++) {
            caps = base | (optional & ~drop_order[i]);
            rc = getinfo(ctx, caps, &ctx->infos);
            if (rc != -FI_ENODATA)
                break;
        }
    }
    if (rc) {
        efa_ctx_err(ctx, "libfabric provider '%s' offers no FI_EP_RDM "
                    "endpoint with RMA%s%s%s (fi_getinfo: %s)%s",
                    ctx->cfg.provider, ctx->cfg.node[0] ? " at node " : "",
                    ctx->cfg.node, ctx->cfg.domain[0] ? " in that domain" : "",
                    fi_strerror(-rc),
                    strcmp(ctx->cfg.provider, "efa") == 0
                        ? "; no EFA device here? `fi_info -p efa` lists "
                          "them; for tests set efa.provider = shm or "
                          "tcp;ofi_rxm"
                        : "");
        return -ENODEV;
    }
    ctx->paths.remote_cq_data_cap = (caps & FI_REMOTE_CQ_DATA) != 0;
    ctx->paths.source = (caps & FI_SOURCE) != 0;
    ctx->paths.hmem = (caps & FI_HMEM) != 0;

    /* One device per distinct (fabric, domain): shm lists its domain twice,
     * tcp one entry per address family of an interface. */
    char skipped[256] = "";
    for (struct fi_info *i = ctx->infos; i; i = i->next) {
        if (i->domain_attr->cq_data_size < 4) {
            snprintf(skipped, sizeof(skipped), "domain %s: cq_data_size %zu "
                     "< 4 bytes of immediate", i->domain_attr->name,
                     i->domain_attr->cq_data_size);
            continue;
        }
        if (i->domain_attr->mr_mode & (FI_MR_RAW | FI_MR_MMU_NOTIFY)) {
            snprintf(skipped, sizeof(skipped), "domain %s: needs mr_mode "
                     "FI_MR_RAW/FI_MR_MMU_NOTIFY", i->domain_attr->name);
            continue;
        }
        int dup = 0;
        for (uint32_t d = 0; d < ctx->ndomains && !dup; d++)
            dup = strcmp(ctx->dev[d]->domain_attr->name,
                         i->domain_attr->name) == 0 &&
                  strcmp(ctx->dev[d]->fabric_attr->name,
                         i->fabric_attr->name) == 0;
        if (!dup && ctx->ndomains < EFA_MAX_DEVICES)
            ctx->dev[ctx->ndomains++] = i;
    }
    if (!ctx->ndomains) {
        efa_ctx_err(ctx, "provider '%s': no usable fi_info entry (%s)",
                    ctx->cfg.provider, skipped);
        return -ENODEV;
    }
    ctx->ndev = ctx->cfg.devices ? ctx->cfg.devices : ctx->ndomains;
    return 0;
}

/* ------------------------------------------------------------ RMA path */

bool efa_prov_has(const char *prov, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = prov; p && *p;) {
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

bool efa_wants_progress_fd(const struct fi_info *i)
{
    /* shm is left out: its initiator copies into the target's memory, so
     * the target's polls move nothing (measured: no-imm writes at full
     * speed there). */
    return i->domain_attr->data_progress != FI_PROGRESS_AUTO &&
           !efa_prov_has(i->fabric_attr->prov_name, "shm");
}

/* Is RMA carried out by the provider as RMA (hardware, or a software
 * protocol that writes into the region as bytes arrive), or emulated with
 * message exchanges? Unknown providers count as emulated: the point of
 * require_native_rma is to refuse what we cannot vouch for. */
static bool classify_rma(efa_ctx *ctx, const struct fi_info *i, char *why,
                         size_t len)
{
    const char *prov = i->fabric_attr->prov_name;
    if (efa_prov_has(prov, "ofi_rxd")) {
        snprintf(why, len, "ofi_rxd emulates RMA with messages over "
                 "datagrams");
        return false;
    }
    if (efa_prov_has(prov, "efa")) {
        if (ctx->probe.emulated_write == 0) {
            snprintf(why, len, "efa device RDMA write "
                     "(FI_OPT_EFA_EMULATED_WRITE = false)");
            return true;
        }
        if (ctx->probe.emulated_write == 1)
            snprintf(why, len, "this EFA device has no RDMA write: efa "
                     "emulates fi_write with send/receive packets "
                     "(FI_OPT_EFA_EMULATED_WRITE = true)");
        else
            snprintf(why, len, "libfabric %u.%u cannot say "
                     "(no FI_OPT_EFA_EMULATED_WRITE); its efa provider "
                     "carries fi_write in send/receive packets "
                     "(eager/medium/long-CTS, RDMA read for large ones)",
                     FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
        return false;
    }
    if (efa_prov_has(prov, "shm")) {
        snprintf(why, len, "shm: the target copies from shared memory or "
                 "with process_vm_readv (CMA), no receive buffers");
        return true;
    }
    if (efa_prov_has(prov, "tcp") || efa_prov_has(prov, "sockets")) {
        snprintf(why, len, "%s: RMA is part of the stream protocol, the "
                 "target writes into the region as bytes arrive",
                 efa_prov_has(prov, "tcp") ? "tcp" : "sockets");
        return true;
    }
    if (efa_prov_has(prov, "verbs") || efa_prov_has(prov, "cxi")) {
        snprintf(why, len, "hardware RDMA");
        return true;
    }
    snprintf(why, len, "provider %s is not known to execute RMA natively",
             prov);
    return false;
}

static void mr_mode_str(uint64_t mode, char *buf, size_t len)
{
    static const struct { uint64_t bit; const char *name; } bits[] = {
        {FI_MR_LOCAL, "LOCAL"},         {FI_MR_VIRT_ADDR, "VIRT_ADDR"},
        {FI_MR_ALLOCATED, "ALLOCATED"}, {FI_MR_PROV_KEY, "PROV_KEY"},
        {FI_MR_ENDPOINT, "ENDPOINT"},   {FI_MR_RMA_EVENT, "RMA_EVENT"},
        {FI_MR_HMEM, "HMEM"}};
    buf[0] = 0;
    for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
        if (mode & bits[i].bit)
            snprintf(buf + strlen(buf), len - strlen(buf), "%s%s",
                     buf[0] ? "|" : "", bits[i].name);
    if (!buf[0])
        snprintf(buf, len, "none");
}

int efa_decide_paths(efa_ctx *ctx)
{
    const struct efa_probe_result *r = &ctx->probe;
    struct efa_paths *p = &ctx->paths;
    const struct fi_info *i = ctx->dev[0];
    const char *prov = i->fabric_attr->prov_name;
    if (r->imm_write != 1) {
        efa_ctx_err(ctx, "provider %s does not deliver a write's remote CQ "
                    "data to the target (probe: %s): immediates cannot work",
                    prov, r->notes);
        return -ENOTSUP;
    }
    if (r->imm_zero != 1 || r->zero[r->completion] != 1) {
        efa_ctx_err(ctx, "provider %s: a zero-length write with remote CQ "
                    "data is not delivered and completed with %s completion "
                    "(probe: %s); barriers and empty shards need it",
                    prov, efa_completion_name(r->completion), r->notes);
        return -ENOTSUP;
    }
    p->write_flags = efa_completion_flag(r->completion);
    uint64_t mode = i->domain_attr->mr_mode;
    p->key_check = !(mode & FI_MR_PROV_KEY) && i->domain_attr->mr_key_size >= 8;

    if (ctx->cfg.inject == EFA_ON && r->inject_data == 0) {
        efa_ctx_err(ctx, "inject = on, but the probe found "
                    "fi_inject_writedata broken on provider %s (%s)", prov,
                    r->notes);
        return -ENOTSUP;
    }
    p->inject = i->tx_attr->inject_size >= 8 &&
                (ctx->cfg.inject == EFA_ON ||
                 (ctx->cfg.inject == EFA_AUTO && r->inject_data == 1 &&
                  !r->key_errors_reported));
    p->inject_max = p->inject ? i->tx_attr->inject_size : 0;
    /* Imm-only writes as injects where the probe saw one arrive: no
     * provider completion to produce, read and match per barrier/imm. */
    p->inject_zero = p->inject && r->inject_zero == 1;
    /* Small messages likewise, where the probe saw injected ones arrive
     * intact: no provider completion per SEND (a ping-pong's half). */
    p->inject_send = p->inject && r->inject_send == 1;

    p->native_rma = classify_rma(ctx, i, p->rma, sizeof(p->rma));
    if (!p->native_rma && ctx->cfg.require_native_rma) {
        efa_ctx_err(ctx, "provider %s emulates RMA by messages (%s); refused "
                    "because efa.require_native_rma = true", prov, p->rma);
        return -EPROTONOSUPPORT;
    }
    if (!p->native_rma)
        efa_log(ctx, 1, "provider %s: RMA is EMULATED by messages (%s): "
                "writes cost the target CPU and may run far slower than "
                "RDMA; set efa.require_native_rma = true to refuse",
                prov, p->rma);
    if (!r->key_errors_reported && !p->key_check)
        efa_log(ctx, 1, "provider %s reports no remote key errors and its "
                "keys carry no check (%s): a write with a bad key completes "
                "without an error and without writing", prov,
                (mode & FI_MR_PROV_KEY) ? "provider keys" : "keys < 8 bytes");

    char mm[96], inj[48];
    mr_mode_str(mode, mm, sizeof(mm));
    if (p->inject)
        snprintf(inj, sizeof(inj), "fi_inject_write[data]<=%zu", p->inject_max);
    else
        snprintf(inj, sizeof(inj), "off");
    snprintf(p->summary, sizeof(p->summary),
             "provider=%s api=%u.%u rma=%s write=fi_writemsg+REMOTE_CQ_DATA "
             "completion=%s imm0=%s read=%s send=%s "
             "inject=%s keys=%s mr_mode=%s rx_cq_data=%s source=%s hmem=%s "
             "progress=%s",
             prov, FI_MAJOR(fi_version()), FI_MINOR(fi_version()),
             p->native_rma ? "native" : "EMULATED",
             efa_completion_name(r->completion),
             p->inject_zero ? "zero-length-inject" : "zero-length-write",
             r->read == 1 ? "fi_readmsg" : "unsupported",
             p->inject_send ? "fi_inject+fi_sendmsg" : "fi_sendmsg", inj,
             p->key_check ? "checked-at-initiator"
             : (mode & FI_MR_PROV_KEY) ? "provider" : "counter",
             mm, (i->mode & FI_RX_CQ_DATA) ? "yes" : "no",
             p->source && r->source == 1 ? "yes" : "no",
             p->hmem ? "yes" : "no",
             i->domain_attr->data_progress == FI_PROGRESS_AUTO ? "auto"
                                                               : "manual");
    efa_log(ctx, 2, "paths: %s", p->summary);
    /* Manual data progress where the target moves the bytes (not shm): a
     * write without an immediate gives the target no CQ entry, so each NIC
     * watches its CQ's wait fd instead (efa_cq.c inbound_pending; a NIC
     * that cannot get one says so when it opens). */
    efa_log(ctx, 2, "rma: %s", p->rma);
    efa_log(ctx, 2, "quirks: %s%s%s", p->remote_cq_data_cap ? ""
                    : "FI_REMOTE_CQ_DATA refused as a capability (data is "
                      "delivered anyway); ",
            r->notes[0] ? r->notes : "none measured",
            r->key_errors_reported ? "" : "; remote key errors not reported");
    return 0;
}

/* ------------------------------------------------------------ devices */

void efa_device_name(efa_ctx *ctx, uint32_t idx, char *buf, size_t len)
{
    const struct fi_info *i = ctx->dev[idx % ctx->ndomains];
    if (ctx->ndev > ctx->ndomains)
        snprintf(buf, len, "%s:%s#%u", i->fabric_attr->prov_name,
                 i->domain_attr->name, idx);
    else
        snprintf(buf, len, "%s:%s", i->fabric_attr->prov_name,
                 i->domain_attr->name);
}

static int pci_numa(const char *pci)
{
    char path[128];
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", pci);
    FILE *f = fopen(path, "r");
    int node = -1;
    if (f) {
        if (fscanf(f, "%d", &node) != 1)
            node = -1;
        fclose(f);
    }
    return node;
}

int efa_query_device(te_plugin_ctx *ctx, int idx,
                     struct te_plugin_device_info *info)
{
    if (!info)
        return -EINVAL;
    if (idx < 0 || (uint32_t)idx >= ctx->ndev) {
        efa_ctx_err(ctx, "device %d does not exist (%u devices)", idx,
                    ctx->ndev);
        return -ENODEV;
    }
    const struct fi_info *i = ctx->dev[(uint32_t)idx % ctx->ndomains];
    struct te_plugin_device_info d;
    memset(&d, 0, sizeof(d));
    efa_device_name(ctx, (uint32_t)idx, d.name, sizeof(d.name));
    d.numa_node = -1;
    if (i->nic && i->nic->bus_attr && i->nic->bus_attr->bus_type == FI_BUS_PCI) {
        const struct fi_pci_attr *pa = &i->nic->bus_attr->attr.pci;
        snprintf(d.pci_path, sizeof(d.pci_path), "%04x:%02x:%02x.%x",
                 pa->domain_id, pa->bus_id, pa->device_id, pa->function_id);
        d.numa_node = pci_numa(d.pci_path);
    }
    if (i->nic && i->nic->link_attr && i->nic->link_attr->speed)
        d.link_gbps = i->nic->link_attr->speed / 1000000000ull;
    d.max_inline = ctx->paths.inject ? (uint32_t)ctx->paths.inject_max : 0;
    d.queue_depth = ctx->cfg.queue_depth ? ctx->cfg.queue_depth
                                         : (uint32_t)i->tx_attr->size;
    d.max_msg_size = i->ep_attr->max_msg_size;
    size_t n = info->struct_size < sizeof(d) ? info->struct_size : sizeof(d);
    size_t skip = sizeof(d.struct_size);
    if (n > skip)
        memcpy((char *)info + skip, (char *)&d + skip, n - skip);
    return 0;
}
