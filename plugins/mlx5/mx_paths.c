/*
 * describe_paths (plugin ABI 1.1). On a verbs device every operation is a
 * one-sided RC work request with native immediates; what can degrade is
 * the device itself (a software device such as rxe or siw instead of an
 * RDMA NIC) and CUDA memory (built without CUDA: not listed).
 */
#include <stdio.h>
#include <string.h>

#include "mx_internal.h"

/* Vendor ids of the kernel's software verbs devices. */
#define MX_VENDOR_RXE 0xffffffu /* rdma_rxe (soft-RoCE) */
#define MX_VENDOR_SIW 0x626d74u /* siw (soft-iWARP) */

static void add(struct te_plugin_path *all, int *n, uint32_t kind,
                uint32_t caps, uint32_t relevant, const char *text,
                const char *dev)
{
    struct te_plugin_path *p = &all[(*n)++];
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->caps = caps & relevant;
    p->relevant = relevant;
    snprintf(p->text, sizeof(p->text), "%s on %s", text, dev);
}

int mx_describe_paths(te_plugin_nic *nic, struct te_plugin_path *out, int max)
{
    struct ibv_device_attr attr;
    if (ibv_query_device(nic->vctx, &attr))
        return -EIO;
    int hw = attr.vendor_id != MX_VENDOR_RXE && attr.vendor_id != MX_VENDOR_SIW;
    char dev[96];
    snprintf(dev, sizeof(dev), "%s (%s device, vendor 0x%x)", nic->name,
             hw ? "hardware" : "software", attr.vendor_id);
    uint32_t h = hw ? TE_PCAP_HARDWARE : 0;
    const uint32_t rma = TE_PCAP_ZERO_COPY | TE_PCAP_NATIVE_RMA |
                         TE_PCAP_AUTO_PROGRESS | TE_PCAP_HARDWARE;
    struct te_plugin_path all[6];
    int n = 0;
    add(all, &n, TE_PPATH_WRITE, (rma & ~TE_PCAP_HARDWARE) | h, rma,
        "RC IBV_WR_RDMA_WRITE", dev);
    add(all, &n, TE_PPATH_WRITE_IMM,
        (rma & ~TE_PCAP_HARDWARE) | TE_PCAP_NATIVE_IMM | h,
        rma | TE_PCAP_NATIVE_IMM, "RC IBV_WR_RDMA_WRITE_WITH_IMM", dev);
    add(all, &n, TE_PPATH_READ, (rma & ~TE_PCAP_HARDWARE) | h, rma,
        "RC IBV_WR_RDMA_READ", dev);
    add(all, &n, TE_PPATH_SEND, h, TE_PCAP_HARDWARE, "RC IBV_WR_SEND into an SRQ",
        dev);
    add(all, &n, TE_PPATH_MEM_HOST, TE_PCAP_ZERO_COPY | h,
        TE_PCAP_ZERO_COPY | TE_PCAP_HARDWARE, "ibv_reg_mr", dev);
#ifndef MX_NO_CUDA
    add(all, &n, TE_PPATH_MEM_CUDA, TE_PCAP_DEVICE_DIRECT | h,
        TE_PCAP_DEVICE_DIRECT | TE_PCAP_HARDWARE,
        nic->ctx->cfg.cuda_dmabuf
            ? "ibv_reg_dmabuf_mr, else ibv_reg_mr via nvidia-peermem"
            : "ibv_reg_mr via nvidia-peermem (cuda_dmabuf = false)",
        dev);
#endif
    int k = max < n ? max : n;
    memcpy(out, all, (size_t)k * sizeof(all[0]));
    return n;
}
