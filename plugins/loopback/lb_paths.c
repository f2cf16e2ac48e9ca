/*
 * describe_paths (plugin ABI 1.1): how the loopback NIC carries out each
 * kind of operation. It is a software transport: every operation is a ring
 * entry that the target's worker executes (memcpy in one process,
 * process_vm_readv/writev across processes), so RMA is not one-sided in
 * the hardware sense and data moves only while the target polls.
 */
#include <stdio.h>
#include <string.h>

#include "lb_internal.h"

static void path(struct te_plugin_path *p, uint32_t kind, uint32_t caps,
                 uint32_t relevant, const char *text)
{
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->caps = caps;
    p->relevant = relevant;
    snprintf(p->text, sizeof(p->text), "%s", text);
}

int lb_describe_paths(te_plugin_nic *nic, struct te_plugin_path *out, int max)
{
    (void)nic;
    const uint32_t sw = TE_PCAP_HARDWARE | TE_PCAP_NATIVE_RMA |
                        TE_PCAP_AUTO_PROGRESS;
    struct te_plugin_path all[5];
    path(&all[0], TE_PPATH_WRITE, TE_PCAP_ZERO_COPY, TE_PCAP_ZERO_COPY | sw,
         "software: ring entry, the target's worker copies once (memcpy, or "
         "process_vm_readv from another process)");
    path(&all[1], TE_PPATH_WRITE_IMM, TE_PCAP_ZERO_COPY | TE_PCAP_NATIVE_IMM,
         TE_PCAP_ZERO_COPY | TE_PCAP_NATIVE_IMM | sw,
         "software: as write, the immediate travels in the ring entry");
    path(&all[2], TE_PPATH_READ, TE_PCAP_ZERO_COPY, TE_PCAP_ZERO_COPY | sw,
         "software: ring entry, the target's worker copies once (memcpy, or "
         "process_vm_writev into another process)");
    path(&all[3], TE_PPATH_SEND, 0, TE_PCAP_HARDWARE,
         "software: the message is copied through the ring");
    path(&all[4], TE_PPATH_MEM_HOST, TE_PCAP_ZERO_COPY,
         TE_PCAP_ZERO_COPY | TE_PCAP_HARDWARE,
         "software: keys and bounds checked by the target's worker");
    int n = max < 5 ? max : 5;
    memcpy(out, all, (size_t)n * sizeof(all[0]));
    return 5;
}
