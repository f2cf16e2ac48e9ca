/*
 * Topology detection: group each GPU with its NICs and pick worker CPUs.
 * Rules (docs/topology.md):
 *   - GPU: PCI class 0x03xxxx (VGA 0x0300, 3D 0x0302, display 0x0380) from
 *     NVIDIA (0x10de) or AMD (0x1002), in PCI address order.
 *   - Same PCIe switch: a NIC goes to the GPU(s) with which it shares the
 *     deepest upstream bridge (below the host bridge). NICs whose deepest
 *     shared bridge is common to several GPUs are split between those GPUs
 *     in PCI order (GPUs that already have a closer NIC are skipped).
 *   - Else NUMA: a GPU without a switch-local NIC takes NICs of its NUMA
 *     node (unclaimed ones first), split the same way.
 *   - Else any: NICs shared from the whole pool.
 *   - No GPU: one group of every NIC (or the NICs split over engine.groups).
 *   - Worker CPU: topology_cpu.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "sysfs_cpu.h"
#include "sysfs_pci.h"
#include "te_error.h"
#include "topology.h"
#include "topology_cpu.h"

const char *te_topo_reason_name(int reason)
{
    switch (reason) {
    case TE_TOPO_REASON_SWITCH: return "pcie-switch";
    case TE_TOPO_REASON_NUMA: return "numa";
    case TE_TOPO_REASON_ANY: return "any";
    case TE_TOPO_REASON_OVERRIDE: return "override";
    case TE_TOPO_REASON_NO_GPU: return "no-gpu";
    default: return "?";
    }
}

/* Working state of one discovery. */
struct topo_ctx {
    const struct te_topo_overrides *ov;
    struct te_topology *t;
    struct te_sysfs_log log;
    struct te_pci_list pci;
    struct te_cpu_info *ci;
    const struct te_pci_dev *gpudev[TE_TOPO_MAX_GPUS];
    const struct te_pci_dev *nicdev[TE_TOPO_MAX_NICS];
    int claimed[TE_TOPO_MAX_NICS];
    int order[TE_TOPO_MAX_NICS]; /* eligible NICs, PCI order, virtual last */
    int norder;
    /* per GPU: NICs by the rules, before overrides */
    int gcount[TE_TOPO_MAX_GPUS];
    int gnics[TE_TOPO_MAX_GPUS][TE_MAX_NICS];
    int greason[TE_TOPO_MAX_GPUS];
    char gtext[TE_TOPO_MAX_GPUS][160];
};

static int is_gpu(const struct te_pci_dev *d)
{
    return d->pci_class != TE_PCI_UNKNOWN && (d->pci_class >> 16) == 0x03 &&
           (d->vendor == 0x10de || d->vendor == 0x1002);
}

/* NUMA node of a PCI device: numa_node, else the node its local_cpulist
 * falls in (when that says more than "every CPU"), else the only node. */
static int numa_of(const struct topo_ctx *c, const struct te_pci_dev *d,
                   const char **source)
{
    const struct te_cpu_info *ci = c->ci;
    if (d && d->numa_node >= 0) {
        *source = "numa_node";
        return d->numa_node;
    }
    if (d && d->have_local_cpus && ci->nnodes > 1 &&
        te_topo_cpuset_count(&d->local_cpus) < te_topo_cpuset_count(&ci->online)) {
        int best = -1, best_n = 0;
        for (int i = 0; i < ci->nnodes; i++) {
            int n = 0;
            for (int w = 0; w < TE_TOPO_CPU_WORDS; w++)
                n += __builtin_popcountll(d->local_cpus.w[w] &
                                          ci->node_cpus[i].w[w]);
            if (n > best_n)
                best = ci->node_id[i], best_n = n;
        }
        if (best >= 0) {
            *source = "local_cpulist";
            return best;
        }
    }
    if (ci->nnodes == 1) {
        *source = "only node";
        return ci->node_id[0];
    }
    *source = "unknown";
    return -1;
}

static void add_nic(struct topo_ctx *c, int g, int nic)
{
    for (int i = 0; i < c->gcount[g]; i++)
        if (c->gnics[g][i] == nic)
            return;
    if (c->gcount[g] < TE_MAX_NICS)
        c->gnics[g][c->gcount[g]++] = nic;
}

/*
 * Give m GPUs (PCI order) their share of k NICs (PCI order): GPU j gets
 * NICs [j*k/m, (j+1)*k/m), at least one (so with k < m, neighbours share).
 */
static void split(struct topo_ctx *c, const int *gpus, int m, const int *nics,
                  int k, int reason, const char *text)
{
    for (int j = 0; j < m; j++) {
        int start = j * k / m, end = (j + 1) * k / m;
        if (end <= start)
            end = start + 1;
        for (int i = start; i < end && i < k; i++) {
            add_nic(c, gpus[j], nics[i]);
            c->claimed[nics[i]] = 1;
        }
        if (!c->greason[gpus[j]]) {
            c->greason[gpus[j]] = reason;
            snprintf(c->gtext[gpus[j]], sizeof(c->gtext[0]), "%s", text);
        }
    }
}

static int pattern_hit(const char pats[][64], int n, const struct te_topo_nic_info *ni,
                       const char **which)
{
    for (int i = 0; i < n; i++)
        if (fnmatch(pats[i], ni->name, 0) == 0 ||
            (ni->pci[0] && fnmatch(pats[i], ni->pci, 0) == 0)) {
            *which = pats[i];
            return 1;
        }
    return 0;
}

static int cmp_order_ctx_nic(const struct topo_ctx *c, int a, int b)
{
    const struct te_topo_nic_info *x = &c->t->nics[a], *y = &c->t->nics[b];
    if (!x->pci[0] != !y->pci[0])
        return x->pci[0] ? -1 : 1;
    if (x->pci[0]) {
        int r = te_pci_cmp(x->pci, y->pci);
        if (r)
            return r;
    }
    return (a > b) - (a < b);
}

/* ---------------------------------------------------------------- NICs */

static void read_nics(struct topo_ctx *c, const struct te_topo_nic *nics,
                      int nnics)
{
    struct te_topology *t = c->t;
    const struct te_topo_overrides *ov = c->ov;
    int missing = 0;
    t->nnics = nnics < TE_TOPO_MAX_NICS ? nnics : TE_TOPO_MAX_NICS;
    if (nnics > TE_TOPO_MAX_NICS)
        te_sysfs_warn(&c->log, "the plugin reported %d devices; only the "
                      "first %d are considered", nnics, TE_TOPO_MAX_NICS);
    for (int i = 0; i < t->nnics; i++) {
        struct te_topo_nic_info *ni = &t->nics[i];
        snprintf(ni->name, sizeof(ni->name), "%s",
                 nics[i].name && nics[i].name[0] ? nics[i].name : "?");
        ni->link_gbps = nics[i].link_gbps;
        ni->numa_node = -1;
        const char *pp = nics[i].pci_path;
        if (pp && pp[0]) {
            if (te_pci_normalize(pp, ni->pci))
                te_sysfs_warn(&c->log, "NIC %s: PCI path \"%.40s\" is not a PCI "
                              "address; treated as a virtual NIC", ni->name, pp);
            else if (!(c->nicdev[i] = te_pci_find(&c->pci, ni->pci)))
                missing++;
        }
        ni->pci_found = c->nicdev[i] != NULL;
        const char *src;
        ni->numa_node = nics[i].numa_node >= 0 ? nics[i].numa_node
                                               : numa_of(c, c->nicdev[i], &src);
        const char *pat;
        if (ov->n_include && !pattern_hit(ov->include,
                                          ov->n_include, ni, &pat)) {
            ni->state = TE_TOPO_NIC_EXCLUDED;
            snprintf(ni->note, sizeof(ni->note),
                     "matches no nic_include pattern");
        } else if (pattern_hit(ov->exclude, ov->n_exclude, ni,
                               &pat)) {
            ni->state = TE_TOPO_NIC_EXCLUDED;
            snprintf(ni->note, sizeof(ni->note), "nic_exclude pattern \"%s\"",
                     pat);
        } else {
            ni->state = TE_TOPO_NIC_UNUSED; /* until a group takes it */
            c->order[c->norder++] = i;
        }
    }
    if (missing)
        te_sysfs_warn(&c->log, "%d NIC%s with a PCI address not found under "
                      "%s/bus/pci/devices%s; placed by NUMA node only", missing,
                      missing > 1 ? "s" : "", t->sysfs_root,
                      c->pci.have_dir ? "" : " (no such directory)");
    /* insertion sort: PCI order, virtual NICs last in plugin order */
    for (int i = 1; i < c->norder; i++)
        for (int j = i; j > 0 && cmp_order_ctx_nic(c, c->order[j - 1],
                                                   c->order[j]) > 0; j--) {
            int x = c->order[j];
            c->order[j] = c->order[j - 1];
            c->order[j - 1] = x;
        }
}

/* ------------------------------------------------------------ grouping */

static void by_switch(struct topo_ctx *c)
{
    int ng = c->t->ngpus;
    int depth[TE_TOPO_MAX_NICS] = {0};
    uint64_t mask[TE_TOPO_MAX_NICS] = {0};
    int maxdepth = 0;
    for (int o = 0; o < c->norder; o++) {
        int i = c->order[o];
        if (!c->nicdev[i])
            continue;
        for (int g = 0; g < ng; g++) {
            int d = te_pci_common_depth(c->gpudev[g], c->nicdev[i]);
            if (d > depth[i])
                depth[i] = d, mask[i] = 1ull << g;
            else if (d && d == depth[i])
                mask[i] |= 1ull << g;
        }
        if (depth[i] > maxdepth)
            maxdepth = depth[i];
    }
    int done[TE_TOPO_MAX_NICS] = {0};
    /* Deepest shared bridges first, so that a GPU with a NIC of its own is
     * skipped when NICs higher up are shared out. */
    for (int d = maxdepth; d >= 1; d--) {
        for (int o = 0; o < c->norder; o++) {
            int first = c->order[o];
            if (done[first] || depth[first] != d)
                continue;
            int set[TE_TOPO_MAX_NICS], k = 0;
            for (int p = o; p < c->norder; p++) {
                int i = c->order[p];
                if (!done[i] && depth[i] == d && mask[i] == mask[first])
                    set[k++] = i, done[i] = 1;
            }
            int gpus[TE_TOPO_MAX_GPUS], m = 0, all[TE_TOPO_MAX_GPUS], na = 0;
            for (int g = 0; g < ng; g++) {
                if (!(mask[first] >> g & 1))
                    continue;
                all[na++] = g;
                if (c->gcount[g] == 0)
                    gpus[m++] = g;
            }
            if (m == 0) {
                memcpy(gpus, all, sizeof(int) * (size_t)na);
                m = na;
            }
            char text[160];
            const char *bridge = c->nicdev[first]->anc[d - 1];
            if (m == 1)
                snprintf(text, sizeof(text), "pcie-switch %s", bridge);
            else
                snprintf(text, sizeof(text), "pcie-switch %s, shared by %d "
                         "GPUs: %d NIC%s split in PCI order", bridge, m, k,
                         k > 1 ? "s" : "");
            split(c, gpus, m, set, k, TE_TOPO_REASON_SWITCH, text);
        }
    }
}

static void by_numa(struct topo_ctx *c)
{
    struct te_topology *t = c->t;
    int handled[TE_TOPO_MAX_GPUS] = {0};
    for (int g0 = 0; g0 < t->ngpus; g0++) {
        int node = t->gpus[g0].numa_node;
        if (c->gcount[g0] || handled[g0] || node < 0)
            continue;
        int gpus[TE_TOPO_MAX_GPUS], m = 0;
        for (int g = g0; g < t->ngpus; g++)
            if (!c->gcount[g] && t->gpus[g].numa_node == node)
                gpus[m++] = g, handled[g] = 1;
        int pool[TE_TOPO_MAX_NICS], k = 0, shared = 0;
        for (int o = 0; o < c->norder; o++) {
            int i = c->order[o];
            if (t->nics[i].numa_node == node && !c->claimed[i])
                pool[k++] = i;
        }
        if (k == 0) {
            shared = 1;
            for (int o = 0; o < c->norder; o++)
                if (t->nics[c->order[o]].numa_node == node)
                    pool[k++] = c->order[o];
        }
        if (k == 0)
            continue;
        char text[160];
        snprintf(text, sizeof(text), "numa %d, no NIC on its PCIe switch%s",
                 node, shared ? "; NICs shared with switch-local groups" : "");
        split(c, gpus, m, pool, k, TE_TOPO_REASON_NUMA, text);
    }
    /* Still nothing: any NIC, unclaimed ones first. */
    int gpus[TE_TOPO_MAX_GPUS], m = 0;
    for (int g = 0; g < t->ngpus; g++)
        if (!c->gcount[g])
            gpus[m++] = g;
    if (!m)
        return;
    int pool[TE_TOPO_MAX_NICS], k = 0;
    for (int o = 0; o < c->norder; o++)
        if (!c->claimed[c->order[o]])
            pool[k++] = c->order[o];
    if (k == 0)
        for (int o = 0; o < c->norder; o++)
            pool[k++] = c->order[o];
    if (k)
        split(c, gpus, m, pool, k, TE_TOPO_REASON_ANY,
              "any, no NIC on its PCIe switch or NUMA node");
}

/* ------------------------------------------------------------- groups */

static int fail_group_count(struct topo_ctx *c, const char *why)
{
    return te_fail(-EINVAL, "topology: %s; %d GPU%s found under %s (set "
                   "engine.topology = off to lay out groups by hand)", why,
                   c->t->ngpus, c->t->ngpus == 1 ? "" : "s", c->t->sysfs_root);
}

static int form_groups(struct topo_ctx *c)
{
    struct te_topology *t = c->t;
    const struct te_topo_overrides *ov = c->ov;
    int ng;
    if (ov->groups > 0)
        ng = ov->groups;
    else if (t->ngpus > 0)
        ng = t->ngpus > ov->n_group_nics ? t->ngpus : ov->n_group_nics;
    else
        ng = ov->n_group_nics > 1 ? ov->n_group_nics : 1;
    if (ng > TE_TOPO_MAX_GROUPS)
        ng = TE_TOPO_MAX_GROUPS;
    char why[200];
    if (ov->n_group_nics && ov->n_group_nics != ng) {
        snprintf(why, sizeof(why), "engine.group_nics lists %d group%s for %d "
                 "groups (one entry per group; an empty entry keeps the "
                 "discovered NICs)", ov->n_group_nics,
                 ov->n_group_nics == 1 ? "" : "s", ng);
        return fail_group_count(c, why);
    }
    if (ov->n_worker_cpus && ov->n_worker_cpus != ng) {
        snprintf(why, sizeof(why), "engine.worker_cpus names %d CPU%s for %d "
                 "groups (one per group, an empty entry to choose, or none)",
                 ov->n_worker_cpus, ov->n_worker_cpus == 1 ? "" : "s", ng);
        return fail_group_count(c, why);
    }
    t->ngroups = ng;
    /* NICs for the automatic groups of a GPU-less machine. */
    int nogpu[TE_TOPO_MAX_GROUPS], nn = 0;
    for (int g = 0; g < ng; g++) {
        struct te_topo_group *gr = &t->groups[g];
        gr->gpu = g < t->ngpus ? g : -1;
        gr->worker_cpu = -1;
        if (ov->n_group_nics && ov->group_nic_count[g] > 0) {
            gr->reason = TE_TOPO_REASON_OVERRIDE;
            snprintf(gr->reason_text, sizeof(gr->reason_text),
                     "override (engine.group_nics entry %d)", g);
            for (int i = 0; i < ov->group_nic_count[g]; i++) {
                int d = ov->group_nics[g][i];
                if (d >= t->nnics)
                    return te_fail(-ENODEV, "engine.group_nics: group %d names "
                                   "device %d, but the plugin has %d device%s "
                                   "(0..%d)", g, d, t->nnics,
                                   t->nnics == 1 ? "" : "s", t->nnics - 1);
                if (t->nics[d].state == TE_TOPO_NIC_EXCLUDED)
                    return te_fail(-EINVAL, "engine.group_nics: group %d names "
                                   "device %d (%s), which is excluded: %s", g,
                                   d, t->nics[d].name, t->nics[d].note);
                gr->nics[gr->nic_count++] = d;
            }
        } else if (gr->gpu >= 0) {
            gr->reason = c->greason[g];
            snprintf(gr->reason_text, sizeof(gr->reason_text), "%s",
                     c->gtext[g]);
            gr->nic_count = c->gcount[g];
            memcpy(gr->nics, c->gnics[g], sizeof(int) * (size_t)gr->nic_count);
        } else if (t->ngpus > 0) {
            snprintf(why, sizeof(why), "group %d has no GPU (engine.groups = "
                     "%d) and no engine.group_nics entry", g, ng);
            return fail_group_count(c, why);
        } else {
            nogpu[nn++] = g;
        }
    }
    for (int j = 0; j < nn; j++) {
        struct te_topo_group *gr = &t->groups[nogpu[j]];
        int k = c->norder, start = j * k / nn, end = (j + 1) * k / nn;
        if (end <= start)
            end = start + 1;
        for (int i = start; i < end && i < k && gr->nic_count < TE_MAX_NICS; i++)
            gr->nics[gr->nic_count++] = c->order[i];
        gr->reason = TE_TOPO_REASON_NO_GPU;
        if (nn == 1 && ng == 1)
            snprintf(gr->reason_text, sizeof(gr->reason_text),
                     "no-gpu: one group of all NICs");
        else
            snprintf(gr->reason_text, sizeof(gr->reason_text),
                     "no-gpu: NICs split over %d groups in PCI order", nn);
    }
    for (int g = 0; g < ng; g++) {
        struct te_topo_group *gr = &t->groups[g];
        if (ov->max_nics && gr->nic_count > ov->max_nics &&
            gr->reason != TE_TOPO_REASON_OVERRIDE)
            gr->nic_count = ov->max_nics;
        if (gr->nic_count == 0) {
            int excluded = 0;
            for (int i = 0; i < t->nnics; i++)
                excluded += t->nics[i].state == TE_TOPO_NIC_EXCLUDED;
            return te_fail(-ENODEV, "topology: group %d has no NIC: the plugin "
                           "reported %d device%s, %d excluded by "
                           "nic_include/nic_exclude", g, t->nnics,
                           t->nnics == 1 ? "" : "s", excluded);
        }
        for (int i = 0; i < gr->nic_count; i++)
            t->nics[gr->nics[i]].state = TE_TOPO_NIC_USED;
    }
    /* Say why the others are unused. */
    for (int i = 0; i < t->nnics; i++) {
        struct te_topo_nic_info *ni = &t->nics[i];
        if (ni->state != TE_TOPO_NIC_UNUSED || ni->note[0])
            continue;
        int owner = -1;
        for (int g = 0; g < t->ngpus && owner < 0; g++)
            for (int j = 0; j < c->gcount[g]; j++)
                if (c->gnics[g][j] == i)
                    owner = g;
        if (owner >= ng) {
            char gpu[TE_PCI_ADDR_LEN];
            memcpy(gpu, t->gpus[owner].pci, sizeof(gpu));
            snprintf(ni->note, sizeof(ni->note), "its GPU %s has no group "
                     "(engine.groups = %d)", gpu, ng);
        } else if (owner >= 0) {
            snprintf(ni->note, sizeof(ni->note), "%s",
                     ov->max_nics ? "beyond engine.nics_per_group"
                                  : "its group's NICs were overridden");
        } else {
            snprintf(ni->note, sizeof(ni->note), "no GPU needs it: not below "
                     "a GPU's PCIe switch, and every GPU%s has closer NICs",
                     ni->numa_node >= 0 ? " of its NUMA node" : "");
        }
    }
    return 0;
}

/* ----------------------------------------------------------- discover */

int te_topology_discover(const char *sysfs_root, const struct te_topo_nic *nics,
                         int nnics, const struct te_topo_overrides *ov,
                         struct te_topology *out)
{
    struct te_topo_overrides defaults;
    if (!out || (nnics > 0 && !nics) || nnics < 0)
        return te_fail(-EINVAL, "te_topology_discover: bad arguments");
    if (!ov) {
        te_topo_overrides_init(&defaults);
        ov = &defaults;
    }
    memset(out, 0, sizeof(*out));
    const char *root = sysfs_root ? sysfs_root
                                  : (ov->sysfs_root[0] ? ov->sysfs_root : "/sys");
    if (!root[0])
        root = "/sys";
    if (strlen(root) >= sizeof(out->sysfs_root))
        return te_fail(-ENAMETOOLONG, "topology: sysfs root \"%.60s...\" is "
                       "too long", root);
    snprintf(out->sysfs_root, sizeof(out->sysfs_root), "%s", root);
    /* "/sys/" and "/sys" alike */
    size_t rl = strlen(out->sysfs_root);
    while (rl > 1 && out->sysfs_root[rl - 1] == '/')
        out->sysfs_root[--rl] = '\0';
    out->mode = ov->mode;
    struct stat st;
    if (stat(out->sysfs_root, &st) != 0)
        return te_fail(-ENOENT, "topology: sysfs root %s: %s", out->sysfs_root,
                       strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return te_fail(-ENOTDIR, "topology: sysfs root %s is not a directory",
                       out->sysfs_root);

    struct topo_ctx *c = calloc(1, sizeof(*c));
    struct te_cpu_info *ci = calloc(1, sizeof(*ci));
    if (!c || !ci) {
        free(c);
        free(ci);
        return te_fail(-ENOMEM, "topology: out of memory");
    }
    c->ov = ov;
    c->t = out;
    c->ci = ci;
    c->log.n = &out->nwarnings;
    c->log.dropped = &out->warnings_dropped;
    c->log.cap = TE_TOPO_MAX_WARNINGS;
    c->log.msg = out->warnings;

    int rc = 0;
    te_cpu_scan(out->sysfs_root, ci, &c->log);
    out->have_cpus = ci->have;
    out->online = ci->online;
    out->ncpus = te_topo_cpuset_count(&ci->online);
    for (int cpu = 0; cpu < TE_TOPO_MAX_CPUS; cpu++)
        out->ncores += te_topo_cpuset_has(&ci->online, cpu) && ci->core_of[cpu] == cpu;
    out->nnodes = ci->nnodes;
    memcpy(out->node_id, ci->node_id, sizeof(out->node_id));
    memcpy(out->node_cpus, ci->node_cpus, sizeof(out->node_cpus));

    if ((rc = te_pci_scan(out->sysfs_root, &c->pci, &c->log))) {
        rc = te_fail(rc, "topology: out of memory reading the PCI tree");
        goto done;
    }
    out->have_pci = c->pci.have_dir;
    out->pci_devices = c->pci.n;
    for (int i = 0; i < c->pci.n; i++) {
        const struct te_pci_dev *d = &c->pci.d[i];
        if (!is_gpu(d))
            continue;
        if (out->ngpus == TE_TOPO_MAX_GPUS) {
            out->gpus_dropped++;
            continue;
        }
        struct te_topo_gpu *g = &out->gpus[out->ngpus];
        c->gpudev[out->ngpus++] = d;
        snprintf(g->pci, sizeof(g->pci), "%s", d->bdf);
        g->vendor = d->vendor;
        g->device = d->device;
        g->pci_class = d->pci_class;
        const char *src;
        g->numa_node = numa_of(c, d, &src);
        snprintf(g->numa_source, sizeof(g->numa_source), "%s", src);
    }
    if (out->gpus_dropped)
        te_sysfs_warn(&c->log, "%d GPUs beyond the first %d ignored",
                      out->gpus_dropped, TE_TOPO_MAX_GPUS);

    read_nics(c, nics, nnics);
    by_switch(c);
    by_numa(c);
    if ((rc = form_groups(c)) || (rc = te_topo_pick_cpus(out, ov, ci)))
        goto done;
done:
    te_pci_free(&c->pci);
    free(ci);
    free(c);
    return rc;
}
