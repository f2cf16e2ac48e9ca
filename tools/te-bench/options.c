/*
 * Command line of te-bench. Every option is listed in tb_usage(); the
 * defaults are chosen so that a bare `te-bench` finishes in seconds and
 * measures something meaningful (single writes 64 KiB..16 MiB).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "bench.h"

static const char *const test_names[TB_T_COUNT] = {
    "write", "paged", "scatter", "read", "imm", "send", "post", "immlat"};

const char *tb_test_name(int t)
{
    return t >= 0 && t < TB_T_COUNT ? test_names[t] : "?";
}

int tb_test_parse(const char *s)
{
    for (int i = 0; i < TB_T_COUNT; i++)
        if (strcasecmp(s, test_names[i]) == 0)
            return i;
    return -1;
}

void tb_usage(FILE *f)
{
    fprintf(f,
"usage: te-bench [options]\n"
"Measures TransferEngine over any transport plugin and prints each result\n"
"next to a reference measured in the same run (memcpy of the same sizes).\n"
"Units: GB/s = 10^9 bytes of payload per second, Gbps = 10^9 bits per\n"
"second, M op/s = 10^6 operations per second, us = microseconds.\n"
"\n"
"What to measure:\n"
"  --test LIST        comma-separated, or 'all' (default: write):\n"
"       write    single write bandwidth (WriteImm unless --no-imm)\n"
"       paged    paged writes bandwidth, pages of --page bytes\n"
"       scatter  scatter of --size bytes to --peers destinations (by peer)\n"
"       read     one-sided read bandwidth\n"
"       imm      immediate rate: paged WriteImms of --size bytes (0 = imm\n"
"                only), --imm-batch per request, counted by the receiver's\n"
"                ImmCounter, in M op/s\n"
"       send     two-sided messages of --size bytes: rate and ping-pong\n"
"       post     scatter posting latency: te_submit() of a scatter to\n"
"                --peers peers until its last op is accepted by the plugin\n"
"       immlat   imm arrival -> ImmCounter callback latency\n"
"     GPU tests (alone, one process, loopback; docs/cuda.md; exit 77\n"
"     without CUDA), with --iters N and --mem/--mem-src/--mem-dst host|cuda:\n"
"       cudawrite  write 1M..64M vs cudaMemcpy of the same direction\n"
"       watcher    CUDA-graph kernel bump -> watcher callback latency\n"
"       gpuflag    imm arrival -> spinning kernel sees its te_gpu_flag\n"
"     waitlat (alone, one process, loopback; docs/progress.md): submit ->\n"
"       te_imm_wait returns, engine.waiter_progress on and off in one run,\n"
"       with --iters N, --size BYTES (8), --gap-us US (200), --set K=V\n"
"     idleturn (alone, one process; docs/progress.md): ns per te_progress()\n"
"       that finds nothing, caller-driven engine with one peer, vs one\n"
"       clock read; --iters N (1000000), --reps N (5), --set K=V\n"
"  --size LIST        bytes per request: 4K,1M or a power-of-two sweep 4K:16M\n"
"                     (suffixes K M G = KiB MiB GiB). Defaults per test:\n"
"                     write/read 64K,1M,4M,16M; paged 1M,4M,16M (total);\n"
"                     scatter 1M (total); imm 0; send 64; post 0; immlat 0\n"
"  --page LIST        page size(s) of paged writes (default 16K), sweep ok\n"
"  --nics LIST        NICs per group, e.g. 1,2,4 (default: the config's\n"
"                     engine.nics_per_group)\n"
"  --route shard|pin:N  shard requests over all NICs (default) or pin to N\n"
"  --window N         requests in flight (default: 16 MiB / size, 2..64;\n"
"                     imm: 8; send: 32)\n"
"  --peers N          scatter destinations (default 8) / post peers\n"
"                     (default 56); each is a separate engine of the server\n"
"  --imm-batch N      WriteImms per request of the imm test (default 1024)\n"
"  --no-imm           bandwidth tests without immediates\n"
"  --shuffle          paged writes to shuffled destination pages\n"
"  --verify           after each bandwidth case, compare the data landed\n"
"                     with the data sent (checksums of whole regions)\n"
"\n"
"How long:\n"
"  --warmup N         warm-up repetitions, discarded (default 1)\n"
"  --reps N           measured repetitions (default 5, at most 60); the\n"
"                     table shows their median\n"
"  --rep-ms MS        minimum duration of a repetition (default 200)\n"
"  --min-iters N      minimum requests per repetition (default 16)\n"
"  --max-iters N      most requests per repetition (default 10000000)\n"
"  --lat-iters N      samples per repetition of latency tests (default 1000)\n"
"  --timeout S        bound of every wait, seconds (default 30)\n"
"  --no-tune          latency tests keep the configured spin settings\n"
"                     (default: post spins the client worker, immlat spins\n"
"                     the receiver's callback thread)\n"
"  --pin              pin the client's worker and te-bench's thread to CPU 0\n"
"                     and a single receiving engine's worker to the last CPU\n"
"                     (engine.worker_cpus; one group per engine only)\n"
"  --spin-wait        te-bench's thread busy-polls for completions instead\n"
"                     of blocking after a short spin or napping (as a\n"
"                     latency-bound application does; costs a core; keeps\n"
"                     the window full)\n"
"\n"
"Where:\n"
"  --self             the receiver is the client's own engine (one process,\n"
"                     one group: a single worker posts, executes and counts;\n"
"                     write, paged, read, imm, immlat)\n"
"  --two-process      server in a forked child, over TCP on --addr\n"
"                     (default: server in a thread of this process)\n"
"  --server           serve one client on --addr:--port, then exit\n"
"  --client           connect to a te-bench --server on --addr:--port\n"
"  --addr IP          IPv4 address (default 127.0.0.1)\n"
"  --port N           TCP port (default %d; --two-process: any free port)\n"
"\n"
"Transport and engine:\n"
"  --plugin NAME|PATH transport plugin (default: the config's, else\n"
"                     loopback); reported in the output\n"
"  --config FILE      INI file for every engine (both sides: the client\n"
"                     sends its text to the server)\n"
"  --set SEC.KEY=VAL  extra setting, repeatable, e.g. --set\n"
"                     loopback.link_gbps=10 (a server's own --set wins)\n"
"  --probe auto|off|PATH  the probe plugin wrapper used by post and\n"
"                     immlat (default auto: $TE_BENCH_PROBE, next to the\n"
"                     binary, the build tree, the install dir)\n"
"  --reference memcpy|none|CMD  what bandwidth is divided by (default\n"
"                     memcpy). cma: copies with process_vm_readv from another\n"
"                     process (the loopback's cross-process path); write:\n"
"                     the same bytes as single writes through the engine\n"
"                     (for paged writes and scatters); a list such as\n"
"                     write,memcpy measures each (the ratio: the first).\n"
"                     ucx, ucx-tcp: tools/ucx-raw-bench (raw UCX, two\n"
"                     processes) over shared memory or TCP on 127.0.0.1:\n"
"                     write, paged, read as GB/s; immlat, send: its p50\n"
"                     latency once per case, in the row's note\n"
"                     CMD runs through sh once per repetition with {test}\n"
"                     {size} {chunk} {window} {threads} {ms} {region_mib}\n"
"                     (window x size, MiB rounded up) replaced; the\n"
"                     last \"<number> GB/s\" it prints is read (else the last\n"
"                     line starting with a number)\n"
"\n"
"Output:\n"
"  --cma-helper SIZE  (internal) the process the cma reference reads from\n"
"  --json             one JSON document on stdout instead of the table\n"
"  --no-progress      no progress line on stderr (default: on a terminal)\n"
"  --quiet            no table header\n"
"  --help             this text\n",
            TB_DEFAULT_PORT);
}

int tb_parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)*s))
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    uint64_t m = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': m = 1ull << 10; end++; break;
    case 'M': m = 1ull << 20; end++; break;
    case 'G': m = 1ull << 30; end++; break;
    default: break;
    }
    if (m > 1 && (strcasecmp(end, "iB") == 0 || strcasecmp(end, "B") == 0))
        end += strlen(end);
    if (*end || v > (1ull << 40) / m)
        return -1;
    *out = v * m;
    return 0;
}

int tb_parse_size_list(const char *s, uint64_t *out, int max, int *n)
{
    *n = 0;
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        uint64_t a, b;
        if (colon) {
            *colon = 0;
            if (tb_parse_size(tok, &a) || tb_parse_size(colon + 1, &b) ||
                a == 0 || b < a)
                return -1;
            for (uint64_t v = a; v <= b && *n < max; v *= 2)
                out[(*n)++] = v;
        } else {
            if (tb_parse_size(tok, &a) || *n >= max)
                return -1;
            out[(*n)++] = a;
        }
    }
    return *n ? 0 : -1;
}

void tb_fmt_size(uint64_t v, char *buf, size_t len)
{
    if (v >= (1ull << 30) && v % (1ull << 30) == 0)
        snprintf(buf, len, "%llu GiB", (unsigned long long)(v >> 30));
    else if (v >= (1ull << 20) && v % (1ull << 20) == 0)
        snprintf(buf, len, "%llu MiB", (unsigned long long)(v >> 20));
    else if (v >= 1024 && v % 1024 == 0)
        snprintf(buf, len, "%llu KiB", (unsigned long long)(v >> 10));
    else
        snprintf(buf, len, "%llu B", (unsigned long long)v);
}

static int parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
    char *end;
    errno = 0;
    /* strtoull takes " 5", "+5" and "-5" (negated: a huge value) */
    if (!isdigit((unsigned char)*s))
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || end == s || v < min || v > max)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int bad(const char *opt, const char *val, const char *want)
{
    fprintf(stderr, "te-bench: %s %s: expected %s (see --help)\n", opt, val,
            want);
    return -1;
}

/* Every bandwidth case holds window x size bytes on the client and again
 * on the server (both on this machine unless --client/--server): refused
 * before anything is allocated when that passes half of this machine's
 * memory (--size takes up to 1 TiB). The automatic window is at least 2. */
static int check_memory(const struct tb_opts *o)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t phys = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz
                                         : UINT64_MAX;
    uint64_t sides = o->mode == TB_M_CLIENT || o->mode == TB_M_SERVER ? 1 : 2;
    uint64_t w = o->window ? o->window : 2;
    for (int i = 0; i < o->nsizes; i++) {
        uint64_t need = sides * w * o->sizes[i];
        if (o->sizes[i] > phys || need / sides / w != o->sizes[i] ||
            need > phys / 2) {
            char sz[32];
            tb_fmt_size(o->sizes[i], sz, sizeof(sz));
            fprintf(stderr, "te-bench: --size %s with --window %llu needs "
                    "%.1f GiB; this machine has %.1f GiB: at most half of it "
                    "is used\n", sz, (unsigned long long)w,
                    (double)need / (1 << 30), (double)phys / (1 << 30));
            return -1;
        }
    }
    return 0;
}

int tb_opts_parse(int argc, char **argv, struct tb_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->route_pin = -1;
    o->warmup = 1;
    o->reps = 5;
    o->rep_ms = 200;
    o->min_iters = 16;
    o->max_iters = 10000000;
    o->lat_iters = 1000;
    o->timeout_s = 30;
    o->imm_batch = 1024;
    o->tune = 1;
    o->mode = TB_M_INPROC;
    snprintf(o->addr, sizeof(o->addr), "127.0.0.1");
    o->port = 0;
    o->probe = "auto";
    o->reference = "memcpy";
    o->progress = 1;
    enum { O_NOIMM = 256, O_SHUFFLE, O_VERIFY, O_WARMUP, O_REPS, O_REPMS,
           O_MINIT, O_MAXIT, O_LATIT, O_TIMEOUT, O_NOTUNE, O_TWOPROC,
           O_SERVER, O_CLIENT, O_ADDR, O_PORT, O_PROBE, O_REF, O_JSON,
           O_NOPROG, O_QUIET, O_ROUTE, O_BATCH, O_PAGE, O_NICS, O_PEERS, O_PIN, O_SPIN_WAIT,
           O_SELF };
    static const struct option lo[] = {
        {"test", required_argument, 0, 't'},
        {"size", required_argument, 0, 's'},
        {"page", required_argument, 0, O_PAGE},
        {"nics", required_argument, 0, O_NICS},
        {"route", required_argument, 0, O_ROUTE},
        {"window", required_argument, 0, 'w'},
        {"peers", required_argument, 0, O_PEERS},
        {"imm-batch", required_argument, 0, O_BATCH},
        {"no-imm", no_argument, 0, O_NOIMM},
        {"shuffle", no_argument, 0, O_SHUFFLE},
        {"verify", no_argument, 0, O_VERIFY},
        {"warmup", required_argument, 0, O_WARMUP},
        {"reps", required_argument, 0, O_REPS},
        {"rep-ms", required_argument, 0, O_REPMS},
        {"min-iters", required_argument, 0, O_MINIT},
        {"max-iters", required_argument, 0, O_MAXIT},
        {"lat-iters", required_argument, 0, O_LATIT},
        {"timeout", required_argument, 0, O_TIMEOUT},
        {"no-tune", no_argument, 0, O_NOTUNE},
        {"pin", no_argument, 0, O_PIN},
        {"spin-wait", no_argument, 0, O_SPIN_WAIT},
        {"two-process", no_argument, 0, O_TWOPROC},
        {"self", no_argument, 0, O_SELF},
        {"server", no_argument, 0, O_SERVER},
        {"client", no_argument, 0, O_CLIENT},
        {"addr", required_argument, 0, O_ADDR},
        {"port", required_argument, 0, O_PORT},
        {"plugin", required_argument, 0, 'p'},
        {"config", required_argument, 0, 'c'},
        {"set", required_argument, 0, 'S'},
        {"probe", required_argument, 0, O_PROBE},
        {"reference", required_argument, 0, O_REF},
        {"json", no_argument, 0, O_JSON},
        {"no-progress", no_argument, 0, O_NOPROG},
        {"quiet", no_argument, 0, O_QUIET},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c, port_set = 0;
    uint32_t v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:s:w:p:c:S:h", lo, NULL)) != -1) {
        switch (c) {
        case 't': {
            char buf[256];
            snprintf(buf, sizeof(buf), "%s", optarg);
            char *save = NULL;
            for (char *tok = strtok_r(buf, ",", &save); tok;
                 tok = strtok_r(NULL, ",", &save)) {
                if (strcasecmp(tok, "all") == 0) {
                    o->ntests = 0;
                    for (int i = 0; i < TB_T_COUNT; i++)
                        o->tests[o->ntests++] = i;
                    continue;
                }
                int t = tb_test_parse(tok);
                if (t < 0)
                    return bad("--test", tok, "write, paged, scatter, read, "
                               "imm, send, post, immlat or all");
                if (o->ntests < TB_T_COUNT)
                    o->tests[o->ntests++] = t;
            }
            break;
        }
        case 's':
            if (tb_parse_size_list(optarg, o->sizes, TB_MAX_SIZES, &o->nsizes))
                return bad("--size", optarg, "sizes like 4K,1M or 4K:16M");
            break;
        case O_PAGE:
            if (tb_parse_size_list(optarg, o->pages, TB_MAX_SIZES, &o->npages))
                return bad("--page", optarg, "sizes like 16K or 1K:64K");
            for (int i = 0; i < o->npages; i++)
                if (!o->pages[i])
                    return bad("--page", optarg, "non-zero page sizes");
            break;
        case O_NICS: {
            uint64_t tmp[TB_MAX_SIZES];
            int n;
            if (tb_parse_size_list(optarg, tmp, TB_MAX_SIZES, &n))
                return bad("--nics", optarg, "counts like 1,2,4");
            for (int i = 0; i < n; i++) {
                if (tmp[i] < 1 || tmp[i] > TE_MAX_NICS)
                    return bad("--nics", optarg, "counts from 1 to 16");
                o->nics[i] = (uint32_t)tmp[i];
            }
            o->nnics = n;
            break;
        }
        case O_ROUTE:
            if (strcmp(optarg, "shard") == 0)
                o->route_pin = -1;
            else if (strncmp(optarg, "pin:", 4) == 0 &&
                     !parse_u32(optarg + 4, 0, TE_MAX_NICS - 1, &v))
                o->route_pin = (int)v;
            else
                return bad("--route", optarg, "shard or pin:N");
            break;
        case 'w':
            if (parse_u32(optarg, 1, 4096, &o->window))
                return bad("--window", optarg, "1..4096");
            break;
        case O_PEERS:
            if (parse_u32(optarg, 1, TB_MAX_PEERS, &o->peers))
                return bad("--peers", optarg, "1..256");
            break;
        case O_BATCH:
            if (parse_u32(optarg, 1, 1u << 20, &o->imm_batch))
                return bad("--imm-batch", optarg, "1..1048576");
            break;
        case O_NOIMM: o->no_imm = 1; break;
        case O_SHUFFLE: o->shuffle = 1; break;
        case O_VERIFY: o->verify = 1; break;
        case O_WARMUP:
            if (parse_u32(optarg, 0, 100, &v))
                return bad("--warmup", optarg, "0..100");
            o->warmup = (int)v;
            break;
        case O_REPS:
            if (parse_u32(optarg, 1, 60, &v))
                return bad("--reps", optarg, "1..60");
            o->reps = (int)v;
            break;
        case O_REPMS:
            if (parse_u32(optarg, 1, 600000, &o->rep_ms))
                return bad("--rep-ms", optarg, "1..600000");
            break;
        case O_MINIT:
            if (parse_u32(optarg, 1, 1u << 30, &o->min_iters))
                return bad("--min-iters", optarg, "a positive count");
            break;
        case O_MAXIT:
            if (parse_u32(optarg, 1, 1u << 30, &o->max_iters))
                return bad("--max-iters", optarg, "a positive count");
            break;
        case O_LATIT:
            if (parse_u32(optarg, 1, 100000, &o->lat_iters))
                return bad("--lat-iters", optarg, "1..100000");
            break;
        case O_TIMEOUT:
            if (parse_u32(optarg, 1, 3600, &o->timeout_s))
                return bad("--timeout", optarg, "1..3600 seconds");
            break;
        case O_NOTUNE: o->tune = 0; break;
        case O_PIN: o->pin = 1; break;
        case O_SPIN_WAIT: o->spin_wait = 1; break;
        case O_TWOPROC: o->mode = TB_M_TWOPROC; break;
        case O_SELF: o->self = 1; break;
        case O_SERVER: o->mode = TB_M_SERVER; break;
        case O_CLIENT: o->mode = TB_M_CLIENT; break;
        case O_ADDR:
            snprintf(o->addr, sizeof(o->addr), "%s", optarg);
            break;
        case O_PORT:
            if (parse_u32(optarg, 0, 65535, &v))
                return bad("--port", optarg, "0..65535");
            o->port = (uint16_t)v;
            port_set = 1;
            break;
        case 'p': o->plugin = optarg; break;
        case 'c': o->config_file = optarg; break;
        case 'S':
            if (o->nsets >= TB_MAX_SETS - 1)
                return bad("--set", optarg, "at most 63 settings");
            if (!strchr(optarg, '.') || !strchr(optarg, '='))
                return bad("--set", optarg, "SECTION.KEY=VALUE");
            o->sets[o->nsets++] = optarg;
            break;
        case O_PROBE: o->probe = optarg; break;
        case O_REF: o->reference = optarg; break;
        case O_JSON: o->json = 1; break;
        case O_NOPROG: o->progress = -1; break;
        case O_QUIET: o->quiet = 1; break;
        case 'h':
            tb_usage(stdout);
            exit(0);
        default:
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "te-bench: unexpected argument '%s' (see --help)\n",
                argv[optind]);
        return -1;
    }
    if (!o->ntests)
        o->tests[o->ntests++] = TB_T_WRITE;
    /* A list of built-in kinds ("memcpy,cma"), "none", or one command. */
    snprintf(o->ref_buf, sizeof(o->ref_buf), "%s", o->reference);
    int builtin = 1;
    for (const char *p = o->ref_buf; *p;) {
        size_t l = strcspn(p, ",");
        if (!((l == 6 && !strncmp(p, "memcpy", 6)) ||
              (l == 3 && !strncmp(p, "cma", 3)) ||
              (l == 5 && !strncmp(p, "write", 5)) ||
              (l == 3 && !strncmp(p, "ucx", 3)) ||
              (l == 7 && !strncmp(p, "ucx-tcp", 7)) ||
              (l == 4 && !strncmp(p, "none", 4))))
            builtin = 0;
        p += l + (p[l] == ',');
    }
    if (!builtin) {
        o->refs[o->nrefs++] = o->reference;
    } else {
        char *save = NULL;
        for (char *t = strtok_r(o->ref_buf, ",", &save); t && o->nrefs < 3;
             t = strtok_r(NULL, ",", &save))
            if (strcmp(t, "none") != 0)
                o->refs[o->nrefs++] = t;
    }
    if (o->self && o->mode != TB_M_INPROC) {
        fprintf(stderr, "te-bench: --self works in one process only\n");
        return -1;
    }
    if (!port_set && o->mode != TB_M_TWOPROC)
        o->port = TB_DEFAULT_PORT;
    if (o->min_iters > o->max_iters)
        o->min_iters = o->max_iters;
    return check_memory(o);
}
