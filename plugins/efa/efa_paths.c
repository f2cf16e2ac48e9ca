/*
 * describe_paths (plugin ABI 1.1): the paths efa_decide_paths() chose, as
 * capabilities the core can report and enforce (engine.require). What
 * degrades here: RMA emulated by messages (classify_rma), manual data
 * progress (bytes move only while the target polls), a software provider
 * (shm, tcp, ...) where a NIC was expected, CUDA memory without FI_HMEM.
 */
#include <rdma/fabric.h>
#include <stdio.h>
#include <string.h>

#include "efa_internal.h"

/* Providers that are software: the first component of the name. */
static int software_provider(const char *prov)
{
    static const char *const sw[] = {"shm", "tcp", "udp", "sockets", "sm2",
                                     "net", "rxm", "rxd"};
    size_t n = strcspn(prov, ";");
    for (size_t i = 0; i < sizeof(sw) / sizeof(sw[0]); i++)
        if (strlen(sw[i]) == n && strncmp(prov, sw[i], n) == 0)
            return 1;
    return 0;
}

static void add(struct te_plugin_path *all, int *n, uint32_t kind,
                uint32_t caps, uint32_t relevant, const char *fmt,
                const char *what, const char *prov, const char *how)
{
    struct te_plugin_path *p = &all[(*n)++];
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->caps = caps & relevant;
    p->relevant = relevant;
    snprintf(p->text, sizeof(p->text), fmt, what, prov, how);
}

int efa_describe_paths(te_plugin_nic *nic, struct te_plugin_path *out, int max)
{
    const efa_ctx *ctx = nic->ctx;
    const struct efa_paths *pp = &ctx->paths;
    const struct fi_info *i = nic->info;
    const char *prov = i->fabric_attr->prov_name;
    int hw = !software_provider(prov);
    int autoprog = i->domain_attr->data_progress == FI_PROGRESS_AUTO;
    uint32_t base = TE_PCAP_ZERO_COPY | (pp->native_rma ? TE_PCAP_NATIVE_RMA : 0) |
                    (autoprog ? TE_PCAP_AUTO_PROGRESS : 0) |
                    (hw ? TE_PCAP_HARDWARE : 0);
    const uint32_t rma = TE_PCAP_ZERO_COPY | TE_PCAP_NATIVE_RMA |
                         TE_PCAP_AUTO_PROGRESS | TE_PCAP_HARDWARE;
    char how[112];
    snprintf(how, sizeof(how), "RMA %s, %s progress",
             pp->native_rma ? "native" : "EMULATED by messages",
             autoprog ? "auto" : "manual");
    struct te_plugin_path all[6];
    int n = 0;
    add(all, &n, TE_PPATH_WRITE, base, rma, "%s on provider %s: %s",
        "fi_writemsg", prov, how);
    add(all, &n, TE_PPATH_WRITE_IMM, base | TE_PCAP_NATIVE_IMM,
        rma | TE_PCAP_NATIVE_IMM, "%s on provider %s: %s",
        "fi_writemsg + FI_REMOTE_CQ_DATA", prov, how);
    if (ctx->probe.read == 1)
        add(all, &n, TE_PPATH_READ, base, rma, "%s on provider %s: %s",
            "fi_readmsg", prov, how);
    add(all, &n, TE_PPATH_SEND, hw ? TE_PCAP_HARDWARE : 0, TE_PCAP_HARDWARE,
        "%s on provider %s%s", "fi_sendmsg", prov, "");
    add(all, &n, TE_PPATH_MEM_HOST, TE_PCAP_ZERO_COPY | (hw ? TE_PCAP_HARDWARE : 0),
        TE_PCAP_ZERO_COPY | TE_PCAP_HARDWARE, "%s on provider %s%s",
        "fi_mr_regattr", prov, "");
    if (pp->hmem)
        add(all, &n, TE_PPATH_MEM_CUDA,
            TE_PCAP_DEVICE_DIRECT | (hw ? TE_PCAP_HARDWARE : 0),
            TE_PCAP_DEVICE_DIRECT | TE_PCAP_HARDWARE, "%s on provider %s%s",
            "fi_mr_regattr FI_HMEM_CUDA", prov,
            hw ? "" : " (the provider copies device memory itself)");
    int k = max < n ? max : n;
    memcpy(out, all, (size_t)k * sizeof(all[0]));
    return n;
}
