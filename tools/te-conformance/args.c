/* Command-line parsing and validation for te-conformance (args.h). */
#include "args.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

extern const char *conf_remote_wrapper; /* main.c */

void conf_usage(FILE *f)
{
    fprintf(f,
        "usage: te-conformance [options]\n"
        "  --plugin NAME|PATH   transport to test (default: engine.plugin of\n"
        "                       the config, else loopback)\n"
        "  --config FILE        INI file every engine of the suite is built from\n"
        "  --set SEC.KEY=VALUE  extra setting (repeatable, at most %d), e.g.\n"
        "                       --set engine.nics_per_group=4\n"
        "  --two-process        remotes run in child processes (default: in\n"
        "                       this process); peer_killed and remote_killed\n"
        "                       need it\n"
        "  --remotes N          number of remote engines, 1..%d (default 3)\n"
        "  --remote-wrapper CMD prefix that launches each remote child, split\n"
        "                       on spaces, e.g. \"ip netns exec te-ns-b\"\n"
        "  --remote-set SEC.KEY=VALUE  setting applied only in remote\n"
        "                       children (repeatable, at most %d), e.g. the\n"
        "                       source address of their network namespace\n"
        "  --case NAME          run only this case (repeatable; --list)\n"
        "  --skip NAME          run every case but this one (repeatable); it\n"
        "                       is reported as skipped\n"
        "  --strict             a missing optional behaviour (a NOTE line,\n"
        "                       e.g. no -ESHUTDOWN for an orderly close) fails\n"
        "  --mem host|cuda      memory of every test region (default host)\n"
        "  --mem-src host|cuda  memory of the local region (sources, read\n"
        "                       destinations)\n"
        "  --mem-dst host|cuda  memory of the remotes' regions\n"
        "  --list               list the cases and exit\n"
        "  --verbose            print each case's description\n"
        "  --help               this text\n"
        "Every wait has a deadline of %d ms; a hang is a failure. A case that\n"
        "cannot run prints \"SKIP name: why\". Exit 0: nothing failed; 1: a\n"
        "case failed or the suite could not start; 2: bad arguments; 77:\n"
        "--mem cuda asked for where CUDA memory is unavailable (skipped).\n",
        CONF_MAX_SETS, CONF_MAX_REMOTES, CONF_MAX_REMOTE_SETS, CONF_TIMEOUT_MS);
}

static int bad(const char *opt, const char *val, const char *what)
{
    fprintf(stderr, "te-conformance: %s \"%s\": %s\n", opt, val, what);
    return 2;
}

/* Strict decimal in [min, max]: digits only, no overflow. */
static int number(const char *opt, const char *s, long min, long max,
                  int *out)
{
    char want[96];
    snprintf(want, sizeof(want), "expected a whole number %ld..%ld", min, max);
    if (!*s || strspn(s, "0123456789") != strlen(s))
        return bad(opt, s, want);
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno == ERANGE || v < (unsigned long long)min ||
        v > (unsigned long long)max)
        return bad(opt, s, want);
    *out = (int)v;
    return 0;
}

/* section.key=value with a non-empty section and key. */
static int setting(const char *opt, const char *s)
{
    const char *dot = strchr(s, '.'), *eq = strchr(s, '=');
    if (!dot || !eq || dot > eq || dot == s || eq == dot + 1)
        return bad(opt, s, "expected SECTION.KEY=VALUE");
    if (strlen(s) >= 512)
        return bad(opt, s, "longer than 511 characters");
    return 0;
}

static int known_case(const char *name)
{
    for (int s = 0; conf_suites[s]; s++)
        for (const struct conf_case *k = conf_suites[s]; k->name; k++)
            if (strcmp(k->name, name) == 0)
                return 1;
    return 0;
}

static int memory(const char *opt, const char *s, int o)
{
    int cuda = strcmp(s, "cuda") == 0;
    if (!cuda && strcmp(s, "host") != 0)
        return bad(opt, s, "expected host or cuda");
    if (o != 'B')
        conf_mem_src_cuda = cuda;
    if (o != 'A')
        conf_mem_dst_cuda = cuda;
    return 0;
}

static const struct option opts[] = {
    {"plugin", required_argument, 0, 'p'},
    {"config", required_argument, 0, 'c'},
    {"set", required_argument, 0, 's'},
    {"two-process", no_argument, 0, 't'},
    {"remotes", required_argument, 0, 'r'},
    {"case", required_argument, 0, 'k'},
    {"skip", required_argument, 0, 'K'},
    {"list", no_argument, 0, 'l'},
    {"verbose", no_argument, 0, 'v'},
    {"strict", no_argument, 0, 'x'},
    {"serve", required_argument, 0, 'S'},
    {"remote-wrapper", required_argument, 0, 'W'},
    {"remote-set", required_argument, 0, 'R'},
    {"mem", required_argument, 0, 'M'},
    {"mem-src", required_argument, 0, 'A'},
    {"mem-dst", required_argument, 0, 'B'},
    {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0}};

/* One option; 0 or 2. */
static int one(int o, const char *v, struct conf *c, struct conf_args *a)
{
    switch (o) {
    case 'p':
        if (!*v)
            return bad("--plugin", v, "expected a plugin name or path");
        if (strlen(v) >= sizeof(a->plugin_set) - 16)
            return bad("--plugin", v, "path too long");
        snprintf(a->plugin_set, sizeof(a->plugin_set), "engine.plugin=%s", v);
        return 0;
    case 'c':
        if (!*v)
            return bad("--config", v, "expected a file name");
        c->config_file = v;
        return 0;
    case 's':
        if (c->nsets >= CONF_MAX_SETS)
            return bad("--set", v, "too many --set options");
        c->sets[c->nsets++] = v;
        return setting("--set", v);
    case 'R':
        for (int i = 0; i < CONF_MAX_REMOTE_SETS; i++)
            if (!c->remote_sets[i]) {
                c->remote_sets[i] = v;
                return setting("--remote-set", v);
            }
        return bad("--remote-set", v, "too many --remote-set options");
    case 'k':
    case 'K': {
        const char *opt = o == 'k' ? "--case" : "--skip";
        const char **list = o == 'k' ? a->only : a->left_out;
        int *n = o == 'k' ? &a->nonly : &a->nleft_out;
        if (!known_case(v))
            return bad(opt, v, "no such case (te-conformance --list)");
        if (*n >= CONF_MAX_ONLY)
            return bad(opt, v, "too many of this option");
        list[(*n)++] = v;
        return 0;
    }
    case 'r':
        return number("--remotes", v, 1, CONF_MAX_REMOTES, &c->nremotes);
    case 'S':
        return number("--serve", v, 0, 65535, &a->serve_fd);
    case 'W':
        if (!v[strspn(v, " ")])
            return bad("--remote-wrapper", v, "expected a command");
        conf_remote_wrapper = v;
        return 0;
    case 'M':
    case 'A':
    case 'B':
        return memory(o == 'M' ? "--mem" : o == 'A' ? "--mem-src" : "--mem-dst",
                      v, o);
    case 't': c->two_process = 1; return 0;
    case 'l': a->list = 1; return 0;
    case 'v': c->verbose = 1; return 0;
    case 'x': c->strict = 1; return 0;
    case 'h': a->help = 1; return 0;
    default: /* getopt_long printed what was wrong */
        fprintf(stderr, "te-conformance: see --help\n");
        return 2;
    }
}

int conf_args_parse(int argc, char **argv, struct conf *c,
                    struct conf_args *a)
{
    memset(a, 0, sizeof(*a));
    a->serve_fd = -1;
    c->nremotes = 3;
    int o, rc;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1)
        if ((rc = one(o, optarg, c, a)))
            return rc;
    if (optind < argc)
        return bad("argument", argv[optind], "unexpected (options only)");
    return 0;
}
