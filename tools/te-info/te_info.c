/*
 * te-info: what TransferEngine finds on this machine. Plugins on the search
 * path (with ABI versions and why any was refused), the NIC groups of an
 * engine built from the configuration, and the effective configuration.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The public API, and the unstable introspection header installed for this
 * tool (plugins found, documented keys, topology report): no private core
 * header. */
#include "te/te.h"
#include "te/te_introspect.h"

/* A key's effective value, or def when it is not set. */
static const char *config_str(const te_config *cfg, const char *section,
                              const char *key, const char *def)
{
    const char *v = te_config_get(cfg, section, key);
    return v ? v : def;
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: te-info [--config FILE] [--plugin NAME|PATH] [--plugins]\n"
        "               [--groups] [--paths] [--topology] [--show-config]\n"
        "               [--set SECTION.KEY=VALUE]... [--help]\n"
        "\n"
        "Without a section option, prints everything.\n"
        "  --config FILE     load this INI file (default: $TE_CONFIG if set)\n"
        "  --plugin NAME     use this transport (overrides engine.plugin)\n"
        "  --plugins         list plugins found on the search path\n"
        "  --groups          create an engine and list its NIC groups\n"
        "  --paths           how each NIC carries out each kind of operation\n"
        "                    and registration, and what it lacks (degraded\n"
        "                    paths; engine.require refuses them)\n"
        "  --set S.K=V       set one configuration key (repeatable)\n"
        "  --topology        GPUs, NUMA nodes, CPUs and NICs found, the\n"
        "                    grouping chosen and why (engine.topology)\n"
        "  --show-config     print every configuration key: effective value,\n"
        "                    default and meaning (also: --config-keys)\n"
        "Search path: $TE_PLUGIN_PATH, engine.plugin_path, then %s.\n",
        TE_PLUGIN_INSTALL_DIR);
}

static void list_plugins(const te_config *cfg)
{
    const char *path = config_str(cfg, "engine", "plugin_path", "");
    static te_plugin_found c[64];
    int n = te_introspect_plugins(cfg, c, 64);
    printf("Plugins (search: TE_PLUGIN_PATH=\"%s\", engine.plugin_path=\"%s\","
           " install dir %s)\n",
           getenv("TE_PLUGIN_PATH") ? getenv("TE_PLUGIN_PATH") : "", path,
           TE_PLUGIN_INSTALL_DIR);
    if (n < 0) {
        printf("  scan failed: %s\n", te_last_error());
        return;
    }
    if (n == 0)
        printf("  none found\n");
    for (int i = 0; i < n; i++) {
        if (c[i].usable)
            printf("  %-10s %-8s ABI %u.%u  %s\n", c[i].name, c[i].version,
                   c[i].abi_major, c[i].abi_minor, c[i].path);
        else
            printf("  %-10s REFUSED  %s\n             %s\n",
                   c[i].name[0] ? c[i].name : "?", c[i].path, c[i].why);
    }
    unsigned abi_major, abi_minor;
    te_introspect_plugin_abi(&abi_major, &abi_minor);
    printf("Core speaks plugin ABI %u.%u\n\n", abi_major, abi_minor);
}

static int list_groups(const te_config *cfg)
{
    te_engine *e;
    int rc = te_engine_create(cfg, &e);
    if (rc) {
        printf("Engine: cannot be created: %s\n  %s\n\n", te_strerror(rc),
               te_last_error());
        return rc;
    }
    printf("Engine: transport %s, %d group(s)\n", te_engine_plugin_name(e),
           te_engine_group_count(e));
    const char *by_speed = te_config_get(cfg, "engine", "shard_by_speed");
    const char *min_bytes = te_config_get(cfg, "engine", "shard_min_bytes");
    for (int g = 0; g < te_engine_group_count(e); g++) {
        printf("  group %d: %d NIC(s)\n", g, te_engine_nic_count(e, g));
        uint64_t first_speed = 0;
        int known = 1, differ = 0;
        for (int i = 0; i < te_engine_nic_count(e, g); i++) {
            te_nic_info ni;
            if (te_engine_nic_info(e, g, i, &ni))
                continue;
            if (i == 0)
                first_speed = ni.link_gbps;
            known &= ni.link_gbps != 0;
            differ |= ni.link_gbps != first_speed;
            printf("    nic %d: %-12s device %d  numa %d  pci %s  link %s%llu "
                   "Gbps  queue %u\n", i, ni.name, ni.device, ni.numa_node,
                   ni.pci_path[0] ? ni.pci_path : "-",
                   ni.link_gbps ? "" : "uncapped/",
                   (unsigned long long)ni.link_gbps, ni.queue_depth);
        }
        /* The routing rules of docs/sharding.md as they apply here. */
        int off = by_speed && (!strcasecmp(by_speed, "false") ||
                               !strcmp(by_speed, "0") ||
                               !strcasecmp(by_speed, "no") ||
                               !strcasecmp(by_speed, "off"));
        int whole = min_bytes && *min_bytes && strcmp(min_bytes, "0");
        printf("    shards: %s; %s%s%s\n",
               !known || !differ ? "equal (the NICs' speeds are equal or "
                                   "unknown)"
               : off ? "equal (engine.shard_by_speed = false)"
                     : "in proportion to link speed",
               whole ? "WRITE/READ under " : "small requests split like the "
                                             "rest (engine.shard_min_bytes = 0)",
               whole ? min_bytes : "",
               whole ? " bytes whole on one NIC (engine.shard_min_bytes)" : "");
        unsigned char addr[TE_ADDR_MAX];
        size_t len = sizeof(addr);
        if (te_engine_address(e, g, addr, &len) == 0)
            printf("    address: %zu bytes\n", len);
    }
    printf("\n");
    te_engine_destroy(e);
    return 0;
}

/* --paths: te_engine_paths() of every NIC, degradations marked. Exit
 * status 1 when the engine cannot be created (engine.require refused a
 * path: the message names it). */
static int list_paths(const te_config *cfg)
{
    te_engine *e;
    int rc = te_engine_create(cfg, &e);
    if (rc) {
        printf("Paths: engine cannot be created: %s\n  %s\n\n",
               te_strerror(rc), te_last_error());
        return rc;
    }
    const char *req = te_config_get(cfg, "engine", "require");
    printf("Paths (transport %s, engine.require = %s)\n",
           te_engine_plugin_name(e), req && *req ? req : "any");
    for (int g = 0; g < te_engine_group_count(e); g++)
        for (int i = 0; i < te_engine_nic_count(e, g); i++) {
            te_nic_info ni;
            te_path_info p[16];
            te_engine_nic_info(e, g, i, &ni);
            int n = te_engine_paths(e, g, i, p, 16);
            printf("  group %d nic %d (%s):%s\n", g, i, ni.name,
                   n == 0 ? " not described (plugin ABI 1.0)" : "");
            for (int k = 0; k < n && k < 16; k++) {
                char has[128], lacks[128];
                te_cap_names(p[k].caps, has, sizeof(has));
                te_cap_names(p[k].missing, lacks, sizeof(lacks));
                printf("    %-9s %-8s has [%s]%s%s%s\n      %s\n",
                       te_path_kind_name(p[k].kind),
                       p[k].missing ? "DEGRADED" : "ok", has,
                       p[k].missing ? " lacks [" : "", lacks,
                       p[k].missing ? "]" : "", p[k].text);
            }
        }
    printf("\n");
    te_engine_destroy(e);
    return 0;
}

static int show_topology(const te_config *cfg)
{
    te_engine *e;
    int rc = te_engine_create(cfg, &e);
    if (rc) {
        printf("Topology: engine cannot be created: %s\n  %s\n\n",
               te_strerror(rc), te_last_error());
        return rc;
    }
    printf("Topology\n");
    te_introspect_topology(e, stdout);
    printf("\n");
    te_engine_destroy(e);
    return 0;
}

/* Keys are printed section by section, in the order they are visited. */
struct key_printer {
    const te_config *cfg;
    char section[64];
};

static void print_key(void *arg, const char *section, const char *name,
                      const char *def, const char *doc, const char *values)
{
    struct key_printer *kp = arg;
    if (strcmp(kp->section, section)) {
        snprintf(kp->section, sizeof(kp->section), "%s", section);
        printf("[%s]\n", section);
    }
    const char *v = te_config_get(kp->cfg, section, name);
    /* The job secret is never shown (docs/security.md). */
    if (v && v[0] && !strcmp(section, "engine") && !strcmp(name, "auth_key"))
        v = "(set, not shown)";
    printf("  %-24s = %-12s (default %s)\n      %s\n", name,
           v ? v : (def ? def : ""), def && def[0] ? def : "\"\"", doc);
    if (values)
        printf("      values: %s\n", values);
}

static void show_config(const te_config *cfg)
{
    printf("Effective configuration (file < te_config_set < environment "
           "TE_<SECTION>_<KEY>)\n");
    struct key_printer kp = {.cfg = cfg};
    const char *plugin = config_str(cfg, "engine", "plugin", "loopback");
    if (te_introspect_config_keys(cfg, plugin, print_key, &kp))
        printf("[%s]\n  (plugin not loadable: %s)\n", plugin, te_last_error());
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, 0, 'c'},
        {"plugin", required_argument, 0, 'p'},
        {"plugins", no_argument, 0, 'P'},
        {"groups", no_argument, 0, 'g'},
        {"paths", no_argument, 0, 'a'},
        {"set", required_argument, 0, 'S'},
        {"show-config", no_argument, 0, 's'},
        {"topology", no_argument, 0, 't'},
        {"config-keys", no_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *config = getenv("TE_CONFIG");
    const char *plugin = NULL;
    int want_plugins = 0, want_groups = 0, want_config = 0, want_topo = 0, o;
    int want_paths = 0, nsets = 0;
    const char *sets[32];
    while ((o = getopt_long(argc, argv, "c:p:PgsthaS:", opts, NULL)) != -1) {
        switch (o) {
        case 'c': config = optarg; break;
        case 'p': plugin = optarg; break;
        case 'P': want_plugins = 1; break;
        case 'g': want_groups = 1; break;
        case 's': want_config = 1; break;
        case 't': want_topo = 1; break;
        case 'a': want_paths = 1; break;
        case 'S':
            if (nsets == 32) {
                fprintf(stderr, "te-info: at most 32 --set\n");
                return 2;
            }
            sets[nsets++] = optarg;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "te-info: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!want_plugins && !want_groups && !want_config && !want_topo &&
        !want_paths)
        want_plugins = want_groups = want_config = want_topo = want_paths = 1;
    te_config *cfg = te_config_new();
    if (!cfg)
        return 1;
    if (config && config[0] && te_config_load_file(cfg, config)) {
        fprintf(stderr, "te-info: %s\n", te_last_error());
        te_config_free(cfg);
        return 1;
    }
    if (plugin)
        te_config_set(cfg, "engine", "plugin", plugin);
    for (int i = 0; i < nsets; i++) {
        char sec[64], key[64];
        const char *dot = strchr(sets[i], '.'), *eq = strchr(sets[i], '=');
        if (!dot || !eq || dot > eq || dot - sets[i] >= 64 || eq - dot > 64) {
            fprintf(stderr, "te-info: --set \"%s\": expected "
                    "section.key=value\n", sets[i]);
            te_config_free(cfg);
            return 2;
        }
        snprintf(sec, sizeof(sec), "%.*s", (int)(dot - sets[i]), sets[i]);
        snprintf(key, sizeof(key), "%.*s", (int)(eq - dot - 1), dot + 1);
        if (te_config_set(cfg, sec, key, eq + 1)) {
            fprintf(stderr, "te-info: --set %s: %s\n", sets[i], te_last_error());
            te_config_free(cfg);
            return 2;
        }
    }
    printf("TransferEngine %s\n\n", te_version());
    /* CUDA memory (TE_MEM_CUDA, GPU flags, watcher): usable, or why not.
     * The classification of each registration is te_cuda_pointer_info(). */
    char cuda_why[512];
    if (te_cuda_status(cuda_why, sizeof(cuda_why)) == 0)
        printf("CUDA memory: usable (driver loaded; TE_MEM_CUDA registrations "
               "are classified with cuPointerGetAttributes)\n\n");
    else
        printf("CUDA memory: unavailable: %s\n\n", cuda_why);
    int rc = 0;
    if (want_plugins)
        list_plugins(cfg);
    if (want_groups && list_groups(cfg))
        rc = 1;
    if (want_paths && list_paths(cfg))
        rc = 1;
    if (want_topo && show_topology(cfg))
        rc = 1;
    if (want_config)
        show_config(cfg);
    te_config_free(cfg);
    return rc;
}
