/*
 * te_topology_describe(): what discovery found and what it chose, for
 * te-info --topology and the engine's log (format: docs/topology.md).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "topology.h"

static void nic_where(const struct te_topo_nic_info *n, char *buf, size_t len)
{
    char numa[16] = "numa ?";
    if (n->numa_node >= 0)
        snprintf(numa, sizeof(numa), "numa %d", n->numa_node);
    if (!n->pci[0])
        snprintf(buf, len, "virtual, %s", numa);
    else
        snprintf(buf, len, "%s%s, %s", n->pci,
                 n->pci_found ? "" : " not in sysfs", numa);
}

static void speed(const struct te_topology *t, const struct te_topo_group *g,
                  FILE *f)
{
    uint64_t first = t->nics[g->nics[0]].link_gbps, sum = 0;
    int same = 1;
    for (int i = 0; i < g->nic_count; i++) {
        uint64_t s = t->nics[g->nics[i]].link_gbps;
        if (!s)
            return; /* unknown: say nothing */
        same &= s == first;
        sum += s;
    }
    if (same)
        fprintf(f, " [%d x %llu Gbps]", g->nic_count, (unsigned long long)first);
    else
        fprintf(f, " [%llu Gbps in all]", (unsigned long long)sum);
}

void te_topology_describe(const struct te_topology *t, FILE *f)
{
    char buf[512];
    fprintf(f, "topology: engine.topology = %s, sysfs root %s\n",
            t->mode == TE_TOPO_MODE_OFF ? "off" : "auto", t->sysfs_root);
    if (t->mode == TE_TOPO_MODE_OFF)
        fprintf(f, "  (off: the engine uses groups, nics_per_group, group_nics "
                "and worker_cpus as given; below is what auto would choose)\n");

    /* What was found. */
    if (!t->have_pci)
        fprintf(f, "  PCI: no %s/bus/pci/devices, so no GPU and no PCIe switch "
                "can be seen\n", t->sysfs_root);
    else if (t->ngpus == 0)
        fprintf(f, "  GPUs: none among %d PCI devices (looked for class "
                "0x03xxxx from NVIDIA 0x10de or AMD 0x1002)\n", t->pci_devices);
    else {
        fprintf(f, "  GPUs: %d among %d PCI devices:", t->ngpus, t->pci_devices);
        for (int g = 0; g < t->ngpus; g++) {
            const struct te_topo_gpu *gp = &t->gpus[g];
            if (gp->numa_node >= 0)
                fprintf(f, "%s %s (numa %d)", g ? "," : "", gp->pci,
                        gp->numa_node);
            else
                fprintf(f, "%s %s (numa ?)", g ? "," : "", gp->pci);
        }
        fprintf(f, "\n");
    }
    if (!t->have_cpus) {
        fprintf(f, "  CPUs: no %s/devices/system/cpu; workers are not pinned\n",
                t->sysfs_root);
    } else {
        fprintf(f, "  CPUs: %d online (%s), %d physical cores; ", t->ncpus,
                te_topo_cpuset_format(&t->online, buf, sizeof(buf)), t->ncores);
        if (t->nnodes == 0)
            fprintf(f, "no NUMA information\n");
        else {
            fprintf(f, "%d NUMA node%s:", t->nnodes, t->nnodes == 1 ? "" : "s");
            for (int i = 0; i < t->nnodes; i++)
                fprintf(f, "%s node %d = cpus %s", i ? ";" : "", t->node_id[i],
                        te_topo_cpuset_format(&t->node_cpus[i], buf,
                                              sizeof(buf)));
            fprintf(f, "\n");
        }
    }
    int onpci = 0, virt = 0;
    for (int i = 0; i < t->nnics; i++) {
        onpci += t->nics[i].pci_found;
        virt += !t->nics[i].pci[0];
    }
    fprintf(f, "  NICs: %d from the plugin: %d found on PCI", t->nnics, onpci);
    if (virt)
        fprintf(f, ", %d virtual (no PCI address)", virt);
    if (t->nnics - onpci - virt)
        fprintf(f, ", %d with a PCI address missing from sysfs",
                t->nnics - onpci - virt);
    fprintf(f, "\n");

    /* What was chosen. */
    for (int g = 0; g < t->ngroups; g++) {
        const struct te_topo_group *gr = &t->groups[g];
        fprintf(f, "group %d: ", g);
        if (gr->gpu >= 0) {
            const struct te_topo_gpu *gp = &t->gpus[gr->gpu];
            if (gp->numa_node >= 0)
                fprintf(f, "GPU %s (numa %d): ", gp->pci, gp->numa_node);
            else
                fprintf(f, "GPU %s (numa ?): ", gp->pci);
        } else {
            fprintf(f, "no GPU: ");
        }
        fprintf(f, "NIC%s", gr->nic_count == 1 ? "" : "s");
        for (int i = 0; i < gr->nic_count; i++)
            fprintf(f, "%s %s", i ? "," : "", t->nics[gr->nics[i]].name);
        if (gr->nic_count)
            speed(t, gr, f);
        fprintf(f, " (%s); ", gr->reason_text);
        if (gr->worker_cpu >= 0)
            fprintf(f, "worker cpu %d (%s)\n", gr->worker_cpu, gr->cpu_reason);
        else
            fprintf(f, "worker %s\n", gr->cpu_reason);
    }
    for (int state = TE_TOPO_NIC_UNUSED; state >= TE_TOPO_NIC_EXCLUDED; state--) {
        int n = 0;
        for (int i = 0; i < t->nnics; i++)
            n += t->nics[i].state == state;
        if (!n)
            continue;
        fprintf(f, "%s NICs (%d):\n",
                state == TE_TOPO_NIC_UNUSED ? "unused" : "excluded", n);
        for (int i = 0; i < t->nnics; i++) {
            const struct te_topo_nic_info *ni = &t->nics[i];
            if (ni->state != state)
                continue;
            nic_where(ni, buf, sizeof(buf));
            fprintf(f, "  %s (%s): %s\n", ni->name, buf, ni->note);
        }
    }
    if (t->nwarnings) {
        fprintf(f, "warnings (%d):\n", t->nwarnings + t->warnings_dropped);
        for (int i = 0; i < t->nwarnings; i++)
            fprintf(f, "  %s\n", t->warnings[i]);
        if (t->warnings_dropped)
            fprintf(f, "  ... and %d more\n", t->warnings_dropped);
    }
}
