/*
 * te-moe: MoE dispatch/combine over TransferEngine (docs/moe.md).
 *
 *   te-moe run   [options]  R ranks as engines in this process, B batches,
 *                           every result compared with the dense reference
 *   te-moe bench [options]  dispatch and combine latency of the protocol
 *                           and of the naive exchange in the same run
 *
 * `te-moe --help` (or `te-moe run --help`) lists every option with its
 * default. Numbers are parsed strictly: a bad one is named, never read
 * as 0.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe_bench.h"
#include "te_args.h"
#include "moe_job.h"

#define MAX_SETS 32

static const char usage_text[] =
    "usage: te-moe run|bench [options]\n"
    "       te-moe --help | te-moe run --help | te-moe bench --help\n";

static const char help_text[] =
    "\n"
    "MoE dispatch/combine over TransferEngine (docs/moe.md). R ranks run as\n"
    "engines in this process, one thread per rank per batch.\n"
    "\n"
    "commands:\n"
    "  run     B batches; every rank sends between T/2 and T tokens (varying\n"
    "          per batch and rank); every output value is compared with the\n"
    "          dense single-process reference and the writes per peer are\n"
    "          checked (dispatch 1..2, combine exactly 1). Ends with\n"
    "          \"te-moe run: OK\" (exit 0) or \"te-moe run: FAILED\" (exit 1).\n"
    "  bench   latency of dispatch and combine, p50/p99 over ranks x batches\n"
    "          (2 warm-up batches not counted), every rank sending T tokens:\n"
    "          the protocol and the naive exchange (a head, then one write\n"
    "          per row, no private buffer) as two jobs in this process whose\n"
    "          batches run in turn (same machine load for both); one JSON\n"
    "          object per repeat (with the parts of dispatch: pack = staging,\n"
    "          post = te_submit; writes and bytes per peer), then one with\n"
    "          the medians when --repeat > 1.\n"
    "\n"
    "options (default in brackets):\n"
    "  --ranks R        ranks, 1..64 [8]\n"
    "  --experts E      experts, a multiple of R, at most 1024 [256]\n"
    "  --topk K         experts per token, 1..8 and at most E [8]\n"
    "  --hidden H       elements per token, a multiple of 8 [7168]\n"
    "  --tokens T       tokens per rank per batch, at most (the buffers are\n"
    "                   sized for it), 1..65536 [128]\n"
    "  --private P      rows per source that the receiver's private buffer\n"
    "                   takes with the first write; more rows need a second\n"
    "                   write (0: always two writes) [2*T/R, at most T]\n"
    "  --batches B      batches [run: 3, bench: 20]\n"
    "  --repeat N       bench: measurements of protocol + naive, 1..100 [1]\n"
    "  --bf16           bf16 tokens [fp32]\n"
    "  --skew           route every token to rank 0's experts (a hot rank)\n"
    "  --inplace        the ranks register their x (te_moe_rank_input):\n"
    "                   tokens for a rank that gets >= 3/4 of them go in one\n"
    "                   write straight from x (bench: the protocol only)\n"
    "                   [uniform random top-k]\n"
    "  --timeout-ms MS  deadline of every phase of a batch, 1..3600000 [5000]\n"
    "  --set S.K=V      engine setting for every rank, repeatable (at most\n"
    "                   32), e.g. --set engine.plugin=efa --set\n"
    "                   efa.provider=shm (docs/config.md, docs/efa.md); the\n"
    "                   environment works too (TE_PLUGIN=efa,\n"
    "                   TE_EFA_PROVIDER=shm) [loopback plugin, 1 NIC]\n"
    "  -h, --help       this text\n";

/* A whole number in [lo, hi], or -1 with a message naming the option. */
static int parse_u32(const char *opt, const char *s, uint32_t lo, uint32_t hi,
                     uint32_t *out)
{
    char name[32];
    snprintf(name, sizeof(name), "--%s", opt);
    return te_arg_u32("te-moe", name, s, lo, hi, out);
}

/* The buffers every rank registers (moe_rank.c: a dispatch and a combine
 * slot per peer, sent and received, each max_tokens rows), all ranks in
 * this process, checked before any is allocated: past the machine's memory
 * the job would be killed by the OOM killer instead of refused. Rows are
 * counted with 64 bytes of header, at least moe_rank.c's. */
static int check_memory(const te_moe_config *c)
{
    uint64_t elem = c->dtype == TE_MOE_BF16 ? 2 : 4;
    uint64_t row = (uint64_t)c->hidden * elem + 64, crow = 16 + (uint64_t)c->hidden * 4;
    uint64_t per_rank = 2ull * c->ranks * c->max_tokens * (row + crow);
    uint64_t need = per_rank * c->ranks;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t phys = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : UINT64_MAX;
    if (need <= phys / 2)
        return 0;
    fprintf(stderr, "te-moe: --ranks %u x --tokens %u x --hidden %u need %.1f GiB "
            "of buffers; this machine has %.1f GiB: at most half of it is used\n",
            c->ranks, c->max_tokens, c->hidden, (double)need / (1 << 30),
            (double)phys / (1 << 30));
    return -1;
}

static int parse_set(const char *s)
{
    const char *dot = strchr(s, '.'), *eq = strchr(s, '=');
    if (!dot || !eq || dot == s || eq < dot + 2 || strlen(s) >= 256) {
        fprintf(stderr, "te-moe: --set: expected section.key=value, got "
                "\"%s\"\n", s);
        return -1;
    }
    return 0;
}

static int run(const te_moe_config *c, uint32_t batches, uint32_t skew,
               const char *const *sets, int inplace)
{
    struct moe_job j;
    if (moe_job_open(&j, c, sets)) {
        moe_job_close(&j);
        printf("te-moe run: FAILED\n");
        return 1;
    }
    j.inplace = inplace;
    char what[256];
    moe_job_describe(&j, what, sizeof(what));
    printf("te-moe run: %u ranks, %u experts, top-%u, hidden %u %s, up to %u "
           "tokens per rank, private %u rows; %s\n", c->ranks, c->experts,
           c->topk, c->hidden, c->dtype == TE_MOE_BF16 ? "bf16" : "fp32",
           c->max_tokens, c->private_rows, what);
    uint32_t tok[TE_MOE_MAX_RANKS];
    int ok = 1;
    for (uint32_t b = 0; b < batches; b++) {
        for (uint32_t i = 0; i < c->ranks; i++)
            tok[i] = c->max_tokens -
                     (uint32_t)((b * 7 + i * 13) % (c->max_tokens / 2 + 1));
        moe_job_inputs(&j, tok, b + 1, skew);
        int rc = moe_job_batch(&j, b);
        uint64_t bad = rc ? 0 : moe_job_check(&j);
        uint32_t dmax = 0, dmin = ~0u, cmin = ~0u, cmax = 0;
        for (uint32_t i = 0; !rc && i < c->ranks; i++) {
            te_moe_stats st;
            te_moe_rank_stats(j.r[i], &st);
            for (uint32_t d = 0; d < c->ranks; d++) {
                if (d == i)
                    continue;
                uint32_t dw = st.dispatch_writes[d], cw = st.combine_writes[d];
                dmax = dw > dmax ? dw : dmax;
                dmin = dw < dmin ? dw : dmin;
                cmax = cw > cmax ? cw : cmax;
                cmin = cw < cmin ? cw : cmin;
            }
        }
        int counts_ok = rc || c->ranks < 2 || c->naive ||
                        (dmin >= 1 && dmax <= 2 && cmin == 1 && cmax == 1);
        te_moe_stats st;
        te_moe_rank_stats(j.r[0], &st);
        if (rc)
            printf("batch %u: FAILED: %s\n", b, j.why[0]);
        else
            printf("batch %u: ok, %llu values differ from the reference; "
                   "writes per peer: dispatch %u..%u, combine %u..%u%s; "
                   "rank 0: dispatch %.0f us, combine %.0f us\n", b,
                   (unsigned long long)bad, c->ranks < 2 ? 0 : dmin,
                   dmax, c->ranks < 2 ? 0 : cmin, cmax,
                   counts_ok ? "" : " (WRONG: dispatch 1..2, combine 1)",
                   st.dispatch_us, st.combine_us);
        ok &= !rc && !bad && counts_ok;
    }
    moe_job_close(&j);
    printf("%s\n", ok ? "te-moe run: OK" : "te-moe run: FAILED");
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    te_moe_config c = {.ranks = 8, .experts = 256, .topk = 8, .hidden = 7168,
                       .dtype = TE_MOE_FP32, .max_tokens = 128,
                       .timeout_ms = 5000};
    uint32_t batches = 0, skew = 0, repeat = 1, timeout = 5000;
    int have_private = 0, have_repeat = 0, inplace = 0;
    const char *sets[MAX_SETS + 1] = {0};
    int nsets = 0;
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
                      !strcmp(argv[1], "help"))) {
        printf("%s%s", usage_text, help_text);
        return 0;
    }
    if (argc < 2 || (strcmp(argv[1], "run") && strcmp(argv[1], "bench"))) {
        if (argc >= 2)
            fprintf(stderr, "te-moe: unknown command \"%s\"\n", argv[1]);
        fprintf(stderr, "%s(te-moe --help lists the options)\n", usage_text);
        return 2;
    }
    const char *cmd = argv[1];
    int bench = !strcmp(cmd, "bench");
    static const struct option lo[] = {
        {"ranks", 1, 0, 'r'}, {"experts", 1, 0, 'e'}, {"topk", 1, 0, 'k'},
        {"hidden", 1, 0, 'H'}, {"tokens", 1, 0, 't'}, {"private", 1, 0, 'p'},
        {"batches", 1, 0, 'b'}, {"repeat", 1, 0, 'n'}, {"bf16", 0, 0, 'B'},
        {"skew", 0, 0, 's'}, {"set", 1, 0, 'S'}, {"timeout-ms", 1, 0, 'T'},
        {"inplace", 0, 0, 'I'},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int o, bad = 0;
    optind = 2;
    opterr = 0;
    while (!bad && (o = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        switch (o) {
        case 'r': bad = parse_u32("ranks", optarg, 1, TE_MOE_MAX_RANKS, &c.ranks); break;
        case 'e': bad = parse_u32("experts", optarg, 1, TE_MOE_MAX_EXPERTS, &c.experts); break;
        case 'k': bad = parse_u32("topk", optarg, 1, TE_MOE_MAX_TOPK, &c.topk); break;
        case 'H': bad = parse_u32("hidden", optarg, 8, 1u << 20, &c.hidden); break;
        case 't': bad = parse_u32("tokens", optarg, 1, 65536, &c.max_tokens); break;
        case 'p':
            bad = parse_u32("private", optarg, 0, 65536, &c.private_rows);
            have_private = 1;
            break;
        case 'b': bad = parse_u32("batches", optarg, 1, 1000000, &batches); break;
        case 'n':
            bad = parse_u32("repeat", optarg, 1, 100, &repeat);
            have_repeat = 1;
            break;
        case 'B': c.dtype = TE_MOE_BF16; break;
        case 's': skew = 1; break;
        case 'I': inplace = 1; break;
        case 'S':
            if (nsets == MAX_SETS) {
                fprintf(stderr, "te-moe: --set: more than %d settings\n",
                        MAX_SETS);
                bad = 1;
            } else if (!(bad = parse_set(optarg))) {
                sets[nsets++] = optarg;
            }
            break;
        case 'T': bad = parse_u32("timeout-ms", optarg, 1, 3600000, &timeout); break;
        case 'h':
            printf("%s%s", usage_text, help_text);
            return 0;
        case ':':
            fprintf(stderr, "te-moe %s: option %s needs a value\n", cmd,
                    argv[optind - 1]);
            bad = 1;
            break;
        default:
            if (optopt)
                fprintf(stderr, "te-moe %s: unknown option \"-%c\"\n", cmd,
                        optopt);
            else
                fprintf(stderr, "te-moe %s: unknown option \"%s\"\n", cmd,
                        argv[optind - 1]);
            bad = 1;
            break;
        }
    }
    if (!bad && optind < argc) {
        fprintf(stderr, "te-moe %s: unexpected argument \"%s\"\n", cmd,
                argv[optind]);
        bad = 1;
    }
    if (!bad && have_repeat && !bench) {
        fprintf(stderr, "te-moe run: --repeat is an option of bench\n");
        bad = 1;
    }
    if (bad) {
        fprintf(stderr, "(te-moe %s --help lists the options)\n", cmd);
        return 2;
    }
    if (skew && c.topk > c.experts / c.ranks) {
        fprintf(stderr, "te-moe %s: --skew routes to rank 0's %u experts: "
                "fewer than --topk %u\n", cmd, c.experts / c.ranks, c.topk);
        return 2;
    }
    if (check_memory(&c))
        return 2;
    c.timeout_ms = (int32_t)timeout;
    if (!have_private) {
        c.private_rows = c.max_tokens * 2 / c.ranks;
        if (c.private_rows > c.max_tokens)
            c.private_rows = c.max_tokens;
    }
    if (!batches)
        batches = bench ? 20 : 3;
    if (bench)
        return moe_bench(&c, batches, repeat, sets, inplace);
    return run(&c, batches, skew, sets, inplace);
}
