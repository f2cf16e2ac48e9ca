/*
 * PCI tree walk over <root>/bus/pci/devices (see sysfs_pci.h).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sysfs_pci.h"

/* Parse "[dddd:]bb:dd.f" exactly (whole string). */
static int parse_bdf(const char *s, unsigned *dom, unsigned *bus,
                     unsigned *dev, unsigned *fn)
{
    const char *p = s;
    unsigned v[4];
    int nf = 0;
    /* Up to three hex fields separated by ':' then '.' and one hex digit. */
    while (nf < 3) {
        const char *q = p;
        unsigned long x = 0;
        int digits = 0;
        while (isxdigit((unsigned char)*q) && digits < 9) {
            x = x * 16 + (unsigned)(isdigit((unsigned char)*q)
                                        ? *q - '0'
                                        : (tolower((unsigned char)*q) - 'a' + 10));
            q++;
            digits++;
        }
        if (!digits || x > 0xffffffffu)
            return -1;
        v[nf++] = (unsigned)x;
        p = q;
        if (*p == ':') {
            p++;
            continue;
        }
        if (*p == '.')
            break;
        return -1;
    }
    if (*p != '.' || !isxdigit((unsigned char)p[1]) || p[2] != '\0')
        return -1;
    unsigned f = (unsigned)strtoul(p + 1, NULL, 16);
    if (nf == 3) {
        *dom = v[0], *bus = v[1], *dev = v[2];
    } else if (nf == 2) {
        *dom = 0, *bus = v[0], *dev = v[1];
    } else {
        return -1;
    }
    if (*bus > 0xff || *dev > 0x1f || f > 7)
        return -1;
    *fn = f;
    return 0;
}

int te_pci_normalize(const char *in, char out[TE_PCI_ADDR_LEN])
{
    if (!in)
        return -1;
    const char *s = strrchr(in, '/');
    s = s ? s + 1 : in;
    unsigned dom, bus, dev, fn;
    if (parse_bdf(s, &dom, &bus, &dev, &fn))
        return -1;
    snprintf(out, TE_PCI_ADDR_LEN, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
    return 0;
}

int te_pci_cmp(const char *a, const char *b)
{
    unsigned x[4], y[4];
    int ea = parse_bdf(a, &x[0], &x[1], &x[2], &x[3]);
    int eb = parse_bdf(b, &y[0], &y[1], &y[2], &y[3]);
    if (ea || eb)
        return ea != eb ? (ea ? 1 : -1) : strcmp(a, b);
    for (int i = 0; i < 4; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

static int is_host_bridge(const char *c)
{
    /* "pci0000:00", "pci10000:e0" (VMD) */
    if (strncmp(c, "pci", 3) != 0)
        return 0;
    const char *p = c + 3;
    int n = 0;
    while (isxdigit((unsigned char)*p))
        p++, n++;
    if (!n || *p != ':')
        return 0;
    p++;
    n = 0;
    while (isxdigit((unsigned char)*p))
        p++, n++;
    return n && *p == '\0';
}

/* Fill host and ancestors of d from the link text of its bus entry. */
static void parse_chain(struct te_pci_dev *d, const char *link,
                        const char *entry, struct te_sysfs_log *log)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", link);
    char chain[TE_PCI_MAX_DEPTH + 1][TE_PCI_ADDR_LEN];
    int n = 0, too_deep = 0;
    char host[24] = "";
    char *save = NULL;
    for (char *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        char norm[TE_PCI_ADDR_LEN];
        if (is_host_bridge(c)) {
            snprintf(host, sizeof(host), "%s", c);
            n = 0;
            too_deep = 0;
        } else if (host[0] && te_pci_normalize(c, norm) == 0 &&
                   strchr(c, ':') != strrchr(c, ':')) {
            if (n <= TE_PCI_MAX_DEPTH)
                memcpy(chain[n++], norm, sizeof(norm));
            else
                too_deep = 1;
        }
    }
    if (!host[0] || n == 0 || strcmp(chain[n - 1], d->bdf) != 0 || too_deep) {
        te_sysfs_warn(log, "%s -> %s: not a path of PCI bridges ending in %s; "
                      "its PCIe switch is unknown", entry, link, d->bdf);
        return;
    }
    snprintf(d->host, sizeof(d->host), "%s", host);
    d->nanc = n - 1;
    for (int i = 0; i < n - 1; i++)
        memcpy(d->anc[i], chain[i], sizeof(chain[i]));
}

static uint32_t read_hex(struct te_sysfs_log *log, const char *dir,
                         const char *name, long max)
{
    char path[PATH_MAX];
    long v;
    if (te_sysfs_path(path, sizeof(path), "%s/%s", dir, name))
        return TE_PCI_UNKNOWN;
    int r = te_sysfs_read_long(log, path, 16, &v);
    if (r == 1 && (v < 0 || v > max)) {
        te_sysfs_warn(log, "%s: value 0x%lx out of range", path, v);
        r = -1;
    }
    return r == 1 ? (uint32_t)v : TE_PCI_UNKNOWN;
}

static int cmp_dev(const void *a, const void *b)
{
    return te_pci_cmp(((const struct te_pci_dev *)a)->bdf,
                      ((const struct te_pci_dev *)b)->bdf);
}

int te_pci_scan(const char *root, struct te_pci_list *out,
                struct te_sysfs_log *log)
{
    memset(out, 0, sizeof(*out));
    char dirpath[PATH_MAX];
    if (te_sysfs_path(dirpath, sizeof(dirpath), "%s/bus/pci/devices", root))
        return 0;
    DIR *dir = opendir(dirpath);
    if (!dir) {
        if (errno != ENOENT && errno != ENOTDIR)
            te_sysfs_warn(log, "%s: cannot list: %s", dirpath, strerror(errno));
        return 0;
    }
    out->have_dir = 1;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (de->d_name[0] == '.')
            continue;
        char entry[PATH_MAX];
        if (te_sysfs_path(entry, sizeof(entry), "%s/%s", dirpath, de->d_name))
            continue;
        struct te_pci_dev d;
        memset(&d, 0, sizeof(d));
        if (te_pci_normalize(de->d_name, d.bdf)) {
            te_sysfs_warn(log, "%s: not a PCI address; ignored", entry);
            continue;
        }
        if (out->n == out->cap) {
            int cap = out->cap ? out->cap * 2 : 64;
            struct te_pci_dev *nd = realloc(out->d, (size_t)cap * sizeof(*nd));
            if (!nd) {
                closedir(dir);
                te_pci_free(out);
                return -ENOMEM;
            }
            out->d = nd;
            out->cap = cap;
        }
        char link[PATH_MAX];
        ssize_t ll = readlink(entry, link, sizeof(link) - 1);
        if (ll > 0) {
            link[ll] = '\0';
            parse_chain(&d, link, entry, log);
        } /* a plain directory: no chain known, no warning needed */
        d.vendor = read_hex(log, entry, "vendor", 0xffff);
        d.device = read_hex(log, entry, "device", 0xffff);
        d.pci_class = read_hex(log, entry, "class", 0xffffff);
        char path[PATH_MAX];
        long v;
        d.numa_node = -1;
        if (!te_sysfs_path(path, sizeof(path), "%s/numa_node", entry) &&
            te_sysfs_read_long(log, path, 10, &v) == 1) {
            if (v >= -1 && v < 4096)
                d.numa_node = (int)v;
            else
                te_sysfs_warn(log, "%s: NUMA node %ld out of range", path, v);
        }
        if (!te_sysfs_path(path, sizeof(path), "%s/local_cpulist", entry))
            d.have_local_cpus =
                te_sysfs_read_cpulist(log, path, &d.local_cpus) == 1 &&
                te_topo_cpuset_count(&d.local_cpus) > 0;
        out->d[out->n++] = d;
    }
    closedir(dir);
    if (out->n > 1)
        qsort(out->d, (size_t)out->n, sizeof(*out->d), cmp_dev);
    return 0;
}

void te_pci_free(struct te_pci_list *l)
{
    free(l->d);
    l->d = NULL;
    l->n = l->cap = 0;
}

const struct te_pci_dev *te_pci_find(const struct te_pci_list *l,
                                     const char *bdf)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->d[i].bdf, bdf) == 0)
            return &l->d[i];
    return NULL;
}

int te_pci_common_depth(const struct te_pci_dev *a, const struct te_pci_dev *b)
{
    if (!a->host[0] || strcmp(a->host, b->host) != 0)
        return 0;
    int n = a->nanc < b->nanc ? a->nanc : b->nanc, i = 0;
    while (i < n && strcmp(a->anc[i], b->anc[i]) == 0)
        i++;
    return i;
}
