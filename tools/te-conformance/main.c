/*
 * te-conformance: runs the conformance suite against a transport plugin.
 *   te-conformance --plugin NAME|PATH [--config F] [--set sec.key=val]...
 *                  [--two-process] [--remotes N] [--case NAME] [--list]
 * Prints one line per case and "N passed, M failed" at the end; exits 0
 * only if nothing failed.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"
#include "side.h"

char **conf_argv;
/* --remote-wrapper: command prefix for remote children (remote.c). */
const char *conf_remote_wrapper;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: te-conformance [options]\n"
        "  --plugin NAME|PATH   transport to test (default: engine.plugin of\n"
        "                       the config, else loopback)\n"
        "  --config FILE        INI file every engine of the suite is built from\n"
        "  --set SEC.KEY=VALUE  extra setting (repeatable), e.g.\n"
        "                       --set engine.nics_per_group=4\n"
        "  --two-process        remotes run in child processes (default: in\n"
        "                       this process)\n"
        "  --remotes N          number of remote engines, 1..%d (default 3)\n"
        "  --remote-wrapper CMD prefix that launches each remote child, split\n"
        "                       on spaces, e.g. \"ip netns exec te-ns-b\"\n"
        "  --remote-set SEC.KEY=VALUE  setting applied only in remote\n"
        "                       children (repeatable), e.g. the source\n"
        "                       address of their network namespace\n"
        "  --case NAME          run only this case (repeatable)\n"
        "  --mem host|cuda      memory of every test region (default host)\n"
        "  --mem-src host|cuda  memory of the local region (sources, read\n"
        "                       destinations)\n"
        "  --mem-dst host|cuda  memory of the remotes' regions\n"
        "  --list               list the cases and exit\n"
        "  --verbose            print each case's description\n"
        "  --help               this text\n"
        "Every wait has a deadline of %d ms; a hang is a failure. Exit 77:\n"
        "--mem cuda asked for where CUDA memory is unavailable (skipped).\n",
        CONF_MAX_REMOTES, CONF_TIMEOUT_MS);
}

static const struct conf_case *const suites[] = {conf_cases_xfer,
                                                 conf_cases_misc,
                                                 conf_cases_fault,
                                                 conf_cases_spaces, NULL};

static int selected(const char *name, const char **only, int nonly)
{
    if (!nonly)
        return 1;
    for (int i = 0; i < nonly; i++)
        if (strcmp(only[i], name) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    conf_argv = argv;
    static const struct option opts[] = {
        {"plugin", required_argument, 0, 'p'},
        {"config", required_argument, 0, 'c'},
        {"set", required_argument, 0, 's'},
        {"two-process", no_argument, 0, 't'},
        {"remotes", required_argument, 0, 'r'},
        {"case", required_argument, 0, 'k'},
        {"list", no_argument, 0, 'l'},
        {"verbose", no_argument, 0, 'v'},
        {"serve", required_argument, 0, 'S'},
        {"remote-wrapper", required_argument, 0, 'W'},
        {"remote-set", required_argument, 0, 'R'},
        {"mem", required_argument, 0, 'M'},
        {"mem-src", required_argument, 0, 'A'},
        {"mem-dst", required_argument, 0, 'B'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    static struct conf c;
    const char *only[64], *remote_sets[16];
    int nonly = 0, list = 0, serve_fd = -1, o, nremote_sets = 0;
    char plugin_set[4200] = "";
    c.nremotes = 3;
    while ((o = getopt_long(argc, argv, "p:c:s:tr:k:lvS:W:R:M:A:B:h", opts, NULL)) != -1) {
        switch (o) {
        case 'p':
            snprintf(plugin_set, sizeof(plugin_set), "engine.plugin=%s", optarg);
            break;
        case 'c': c.config_file = optarg; break;
        case 's':
            if (c.nsets < 63)
                c.sets[c.nsets++] = optarg;
            break;
        case 't': c.two_process = 1; break;
        case 'r': c.nremotes = atoi(optarg); break;
        case 'k':
            if (nonly < 64)
                only[nonly++] = optarg;
            break;
        case 'l': list = 1; break;
        case 'v': c.verbose = 1; break;
        case 'S': serve_fd = atoi(optarg); break;
        case 'W': conf_remote_wrapper = optarg; break;
        case 'R':
            if (nremote_sets < 16)
                remote_sets[nremote_sets++] = optarg;
            break;
        case 'M':
        case 'A':
        case 'B': {
            int cuda = strcmp(optarg, "cuda") == 0;
            if (!cuda && strcmp(optarg, "host") != 0) {
                fprintf(stderr, "te-conformance: memory \"%s\": expected "
                        "host or cuda\n", optarg);
                return 2;
            }
            if (o != 'B')
                conf_mem_src_cuda = cuda;
            if (o != 'A')
                conf_mem_dst_cuda = cuda;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc || c.nremotes < 1 || c.nremotes > CONF_MAX_REMOTES) {
        usage(stderr);
        return 2;
    }
    if (plugin_set[0])
        c.sets[c.nsets++] = plugin_set;
    /* A remote child applies --remote-set after everything else; remotes
     * in this process get them through c.remote_sets. */
    for (int i = 0; serve_fd >= 0 && i < nremote_sets && c.nsets < 64; i++)
        c.sets[c.nsets++] = remote_sets[i];
    for (int i = 0; serve_fd < 0 && i < nremote_sets; i++)
        c.remote_sets[i] = remote_sets[i];
    if (list) {
        for (int s = 0; suites[s]; s++)
            for (const struct conf_case *k = suites[s]; k->name; k++)
                printf("%-18s %s\n", k->name, k->what);
        return 0;
    }
    c.cfg = conf_config_with(&c, NULL);
    if (!c.cfg)
        return 2;
    if (serve_fd >= 0)
        return side_serve(c.cfg, serve_fd);

    int rc = conf_engine_create(c.cfg, &c.e);
    if (rc) {
        fprintf(stderr, "te-conformance: cannot create engine: %s\n",
                te_last_error());
        return 1;
    }
    c.plugin = te_engine_plugin_name(c.e);
    struct conf_mem probe;
    if (!(rc = conf_mem_alloc(&c.src_mem, CONF_REGION, conf_mem_src_cuda)) &&
        conf_mem_dst_cuda && !conf_mem_src_cuda &&
        !(rc = conf_mem_alloc(&probe, 4096, 1))) /* remotes: ask now */
        conf_mem_free(&probe);
    if (rc) {
        conf_engine_destroy(c.e);
        conf_mem_free(&c.src_mem);
        te_config_free(c.cfg);
        return rc == -ENOTSUP ? 77 : 1; /* 77: ctest's "skipped" */
    }
    c.src_buf = c.src_mem.host;
    if (te_mr_reg(c.e, 0, conf_mem_region(&c.src_mem), CONF_REGION,
                  TE_MR_REMOTE_WRITE | TE_MR_REMOTE_READ,
                  conf_mem_kind(&c.src_mem), &c.src)) {
        fprintf(stderr, "te-conformance: registration: %s\n", te_last_error());
        return 1;
    }
    for (int i = 0; i < c.nremotes; i++) {
        if ((rc = conf_remote_open(&c, i))) {
            fprintf(stderr, "te-conformance: remote %d: %s: %s\n", i,
                    te_strerror(rc), te_last_error());
            return 1;
        }
    }
    printf("te-conformance: plugin %s, %d NIC(s) per group, %d remote(s) %s\n",
           c.plugin, te_engine_nic_count(c.e, 0), c.nremotes,
           c.two_process ? "in child processes" : "in this process");
    int passed = 0, failed = 0, skipped = 0;
    for (int s = 0; suites[s]; s++) {
        for (const struct conf_case *k = suites[s]; k->name; k++) {
            if (!selected(k->name, only, nonly))
                continue;
            uint64_t t0 = conf_now_ms();
            int r = k->fn(&c);
            uint64_t ms = conf_now_ms() - t0;
            const char *word = r == CONF_PASS ? "PASS" : r == CONF_SKIP ? "SKIP"
                                                                        : "FAIL";
            printf("%s %-18s %6llu ms%s%s\n", word, k->name,
                   (unsigned long long)ms, c.verbose ? "  " : "",
                   c.verbose ? k->what : "");
            fflush(stdout);
            passed += r == CONF_PASS;
            failed += r == CONF_FAIL;
            skipped += r == CONF_SKIP;
        }
    }
    for (int i = 0; i < c.nremotes; i++)
        if (c.rem[i].ops)
            c.rem[i].ops->close(&c.rem[i]);
    te_mr_dereg(c.e, c.src);
    conf_engine_destroy(c.e);
    conf_mem_free(&c.src_mem);
    te_config_free(c.cfg);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
