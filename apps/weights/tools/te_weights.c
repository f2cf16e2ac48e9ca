/*
 * te-weights: RL weight updates over TransferEngine.
 *
 *   te-weights plan     --model M --trainers N --ranks R [--tp T] [--ep E]
 *                       [--fp8] [--nics K] [--watermark MiB] [--out FILE]
 *   te-weights simulate (plan options) --gbps G [--write-us U] [--read-us U]
 *                       [--quant-gbps Q] [--h2d-gbps H] [--target-charged]
 *   te-weights gen      --model small --seed S --out FILE.safetensors
 *   te-weights train    --rank t ... (te_weights_run.c)
 *   te-weights infer    --rank r ... (te_weights_run.c)
 *
 * M is a preset (kimi-k2, deepseek-v3, qwen3-235b, small) or a
 * .safetensors file (its header is read).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "te_args.h"
#include "te_weights_cli.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: te-weights COMMAND [options]\n"
"  plan       compute the static schedule and print its summary\n"
"  simulate   predict the update time from the schedule and say what bounds it\n"
"  gen        write a safetensors checkpoint of a preset with random bf16 weights\n"
"  train      training rank: gather, fuse, quantise, WriteImm into receivers\n"
"  infer      inference rank: receive a version, switch it live when complete\n"
"  bench      run trainers + receivers as processes and time updates\n"
"options:\n"
"  --model M         preset (kimi-k2, deepseek-v3, qwen3-235b, small, medium) or a\n"
"                    .safetensors file (its header is read)\n"
"  --trainers N      training ranks (FSDP)      --ranks R    inference ranks\n"
"  --tp T            inference TP size (1)      --ep E       expert parallel size (R)\n"
"  --fp8             linear weights arrive as fp8 e4m3 with 128x128 block scales\n"
"  --nics K          NICs per GPU (1)           --watermark MiB  staging per trainer (1024)\n"
"  --out FILE        plan: write the schedule   gen: the checkpoint\n"
"  --gbps G          simulate: per-NIC link speed   --write-us/--read-us per-op CPU cost\n"
"  --quant-gbps Q    simulate: fuse+quantise rate   --h2d-gbps H host->device copy\n"
"  --target-charged  simulate: charge only receiving NICs (the loopback cap)\n"
"train / infer (one process per rank; all share --dir):\n"
"  --schedule FILE   the schedule from plan --out (carries the inference layout)\n"
"  --rank R          this process's training / inference rank\n"
"  --dir DIR         rendezvous directory (records train-<t>, infer-<r>)\n"
"  --update V=CKPT   push / receive version V from checkpoint CKPT (repeatable)\n"
"  --timeout-ms T    deadline of every wait and of each version (20000)\n"
"  --config FILE     TransferEngine INI file   --link-gbps G  loopback NIC cap\n"
"  --progress        train: a progress line on stderr every 10 %% of the bytes\n"
"  --die-at V:PCT    train (tests): SIGKILL itself once PCT %% of its writes of\n"
"                    version V were submitted (a trainer dead mid-version)\n"
"bench: --model --trainers --ranks --tp --ep --fp8 --nics --link-gbps G (1) --runs K (3..16)\n"
"  runs the job uncapped and capped, and compares with the simulator (docs/weights.md)\n");
}

/* The whole-number options, their fields and ranges. The ranges bound
 * what a plan allocates (per trainer, per rank): 99999999999 trainers
 * grew the process to 7.3 GB before it was killed. */
#define WT_MAX_TRAINERS 65536u
#define WT_MAX_RANKS 4096u /* kimi-k2 at 65536 ranks: 3.5 GB, 19 s */
static const struct {
    const char *name;
    size_t off, size; /* the field of struct wt_cli: 4 or 8 bytes */
    uint64_t min, max;
} num_opts[] = {
#define N(opt, field, lo, hi) \
    {opt, offsetof(struct wt_cli, field), sizeof(((struct wt_cli *)0)->field), \
     lo, hi}
    N("--trainers", trainers, 1, WT_MAX_TRAINERS),
    N("--ranks", ranks, 1, WT_MAX_RANKS),
    N("--tp", tp, 1, WT_MAX_RANKS),
    N("--ep", ep, 1, WT_MAX_RANKS),
    N("--nics", nics, 1, 64),
    N("--watermark", watermark_mib, 1, 1u << 20),
    N("--seed", seed, 0, UINT64_MAX),
    N("--rank", rank, 0, WT_MAX_RANKS - 1),
    N("--timeout-ms", timeout_ms, 1, 3600000),
    N("--runs", runs, 3, 16),
#undef N
};
static const struct {
    const char *name;
    size_t off;
    double min, max;
} dbl_opts[] = {
    {"--gbps", offsetof(struct wt_cli, gbps), 1e-3, 1e6},
    {"--write-us", offsetof(struct wt_cli, write_us), 0, 1e6},
    {"--read-us", offsetof(struct wt_cli, read_us), 0, 1e6},
    {"--quant-gbps", offsetof(struct wt_cli, quant_gbps), 1e-3, 1e6},
    {"--h2d-gbps", offsetof(struct wt_cli, h2d_gbps), 0, 1e6},
};

static int is_option(const char *a)
{
    return a[0] == '-' && a[1] == '-';
}

/* 1: `a` is a number option and `v` its valid value (stored); 0: `a` is
 * not one; -1: refused (message printed). */
static int parse_number(struct wt_cli *o, const char *a, const char *v)
{
    for (size_t k = 0; k < sizeof(num_opts) / sizeof(*num_opts); k++) {
        if (strcmp(a, num_opts[k].name))
            continue;
        uint64_t x;
        if (!v) {
            te_arg_bad_option("te-weights", a, 1);
            return -1;
        }
        if (te_arg_u64("te-weights", a, v, num_opts[k].min, num_opts[k].max, &x))
            return -1;
        char *f = (char *)o + num_opts[k].off;
        if (num_opts[k].size == 8)
            memcpy(f, &x, 8);
        else
            memcpy(f, &(uint32_t){(uint32_t)x}, 4); /* int or uint32_t */
        return 1;
    }
    for (size_t k = 0; k < sizeof(dbl_opts) / sizeof(*dbl_opts); k++) {
        if (strcmp(a, dbl_opts[k].name))
            continue;
        if (!v) {
            te_arg_bad_option("te-weights", a, 1);
            return -1;
        }
        return te_arg_double("te-weights", a, v, dbl_opts[k].min, dbl_opts[k].max,
                             (double *)((char *)o + dbl_opts[k].off)) ? -1 : 1;
    }
    return 0;
}

/* --die-at VERSION:PCT, PCT in 1..99. */
static int parse_die_at(struct wt_cli *o, const char *v)
{
    char ver[24];
    const char *colon = strchr(v, ':');
    if (!colon || (size_t)(colon - v) >= sizeof(ver)) {
        fprintf(stderr, "te-weights: --die-at: expected VERSION:PCT, got \"%s\"\n", v);
        return -1;
    }
    memcpy(ver, v, (size_t)(colon - v));
    ver[colon - v] = 0;
    return te_arg_u32("te-weights", "--die-at VERSION", ver, 1, UINT32_MAX,
                      &o->die_version) ||
           te_arg_u32("te-weights", "--die-at PCT", colon + 1, 1, 99, &o->die_pct)
           ? -1 : 0;
}

/* --update V=CHECKPOINT (repeatable). */
static int parse_update(struct wt_cli *o, const char *v)
{
    char ver[24];
    const char *eq = strchr(v, '=');
    if (o->nupdates == WT_CLI_MAX_UPDATES) {
        fprintf(stderr, "te-weights: --update: at most %d\n", WT_CLI_MAX_UPDATES);
        return -1;
    }
    if (!eq || !eq[1] || (size_t)(eq - v) >= sizeof(ver)) {
        fprintf(stderr, "te-weights: --update: expected VERSION=CHECKPOINT, got "
                "\"%s\"\n", v);
        return -1;
    }
    memcpy(ver, v, (size_t)(eq - v));
    ver[eq - v] = 0;
    if (te_arg_u32("te-weights", "--update VERSION", ver, 1, UINT32_MAX,
                   &o->updates[o->nupdates].version))
        return -1;
    o->updates[o->nupdates++].checkpoint = eq + 1;
    return 0;
}

/* Layout options that only make sense together, refused before a model is
 * loaded or a plan built. */
static int check_layout(const struct wt_cli *o)
{
    if (o->tp > o->ranks || (o->ep && o->ep > o->ranks)) {
        fprintf(stderr, "te-weights: --tp %u / --ep %u: at most --ranks (%u)\n",
                o->tp, o->ep, o->ranks);
        return -1;
    }
    return 0;
}

int wt_cli_parse(int argc, char **argv, struct wt_cli *o)
{
    memset(o, 0, sizeof(*o));
    o->model = "small";
    o->trainers = 1;
    o->ranks = 1;
    o->tp = 1;
    o->nics = 1;
    o->watermark_mib = 1024;
    o->gbps = 400;
    o->write_us = 23;
    o->read_us = 2;
    o->quant_gbps = 2000;
    o->timeout_ms = 20000;
    o->runs = 3;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = parse_number(o, a, v);
        if (rc == 1) { /* a number option and its value */
            i++;
            continue;
        }
        if (rc < 0)
            return -1;
#define ARG(name) (!strcmp(a, name) && v && (i++, 1))
        if (ARG("--model")) o->model = v;
        else if (ARG("--out")) o->out = v;
        else if (ARG("--dir")) o->dir = v;
        else if (ARG("--schedule")) o->schedule = v;
        else if (ARG("--config")) o->config = v;
        else if (ARG("--link-gbps")) {
            double g;
            if (te_arg_double("te-weights", "--link-gbps", v, 1e-3, 1e6, &g))
                return -1;
            o->link_gbps = v; /* passed on as loopback.link_gbps */
        }
        else if (ARG("--die-at")) {
            if (parse_die_at(o, v))
                return -1;
        }
        else if (ARG("--update")) {
            if (parse_update(o, v))
                return -1;
        }
        else if (!strcmp(a, "--fp8")) o->fp8 = 1;
        else if (!strcmp(a, "--progress")) o->progress = 1;
        else if (!strcmp(a, "--target-charged")) o->target_charged = 1;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); exit(0); }
        else {
            te_arg_bad_option("te-weights", a, !v && is_option(a));
            return -1;
        }
#undef ARG
    }
    return check_layout(o);
}

int wt_cli_load(const struct wt_cli *o, te_wt_model **m, te_wt_sharding **sh)
{
    te_wt_preset p;
    int rc;
    if (strstr(o->model, ".safetensors") || strchr(o->model, '/'))
        rc = te_wt_safetensors_load(o->model, m);
    else
        rc = te_wt_preset_parse(o->model, &p) ?: te_wt_preset_model(p, m);
    if (rc)
        return fprintf(stderr, "te-weights: model %s: %s\n", o->model,
                       te_wt_last_error()), rc;
    te_wt_infer_layout l = {o->ranks, o->tp, o->ep, (uint32_t)o->fp8};
    if ((rc = te_wt_sharding_build(*m, &l, sh))) {
        fprintf(stderr, "te-weights: sharding: %s\n", te_wt_last_error());
        te_wt_model_free(*m);
    }
    return rc;
}

static long peak_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static int cmd_plan(const struct wt_cli *o, int simulate)
{
    double t0 = now_s();
    te_wt_model *m;
    te_wt_sharding *sh;
    te_wt_schedule *s;
    if (wt_cli_load(o, &m, &sh))
        return 1;
    if (te_wt_schedule_build(m, sh, o->trainers, o->nics, o->watermark_mib << 20, &s)) {
        fprintf(stderr, "te-weights: schedule: %s\n", te_wt_last_error());
        return 1;
    }
    double t_plan = now_s() - t0;
    te_wt_summary su;
    te_wt_schedule_summary(m, sh, s, &su);
    printf("model %s: %u tensors, %.3f G params, %.2f GiB checkpoint\n", m->name,
           m->count, te_wt_model_params(m) / 1e9, m->data_bytes / 1073741824.0);
    printf("layout: %u trainers (FSDP) -> %u inference ranks (tp %u, ep %u%s), %u NIC(s)/GPU\n",
           o->trainers, o->ranks, o->tp, sh->layout.ep, o->fp8 ? ", fp8" : "", o->nics);
    printf("params %u (fused), writes %llu, bytes %.2f GiB\n", sh->nparams,
           (unsigned long long)su.writes, su.bytes / 1073741824.0);
    printf("writes per trainer: min %llu max %llu\n",
           (unsigned long long)su.writes_min, (unsigned long long)su.writes_max);
    printf("bytes per trainer NIC: min %.3f max %.3f GiB (imbalance %.3f), gather max %.3f GiB\n",
           su.tx_min / 1073741824.0, su.tx_max / 1073741824.0, su.trainer_imbalance,
           su.gather_max / 1073741824.0);
    printf("bytes per receiver NIC: min %.3f max %.3f GiB (imbalance %.3f)\n",
           su.rx_min / 1073741824.0, su.rx_max / 1073741824.0, su.receiver_imbalance);
    int rc = 0;
    if (o->out) {
        void *buf;
        size_t len;
        FILE *f = NULL;
        if (te_wt_schedule_serialize(s, &buf, &len) || !(f = fopen(o->out, "wb")) ||
            fwrite(buf, 1, len, f) != len) {
            fprintf(stderr, "te-weights: cannot write %s\n", o->out);
            rc = 1;
        } else {
            printf("schedule: %s (%zu bytes)\n", o->out, len);
        }
        if (f)
            fclose(f);
        free(buf);
    }
    printf("plan time %.3f s, peak memory %.1f MiB\n", t_plan, peak_rss_kib() / 1024.0);
    if (simulate) {
        te_wt_sim_params p = {o->gbps, o->nics, o->write_us, o->read_us,
                              o->quant_gbps, o->h2d_gbps, o->watermark_mib << 20,
                              o->target_charged};
        te_wt_sim_result r;
        if (te_wt_simulate(m, sh, s, &p, &r)) {
            fprintf(stderr, "te-weights: %s\n", te_wt_last_error());
            rc = 1;
        } else {
            printf("simulate: %.0f Gbps x %u NIC(s) per GPU, %.1f us/write, "
                   "%.1f us/read, quantise %.0f GB/s%s\n", o->gbps, o->nics,
                   o->write_us, o->read_us, o->quant_gbps,
                   o->target_charged ? ", receiver-charged links" : "");
            printf("  trainer TX %.4f s, trainer RX %.4f s, receiver RX %.4f s, "
                   "submit %.4f s, quantise %.4f s, fill %.4f s\n", r.trainer_tx_s,
                   r.trainer_rx_s, r.receiver_rx_s, r.submit_s, r.quant_s, r.fill_s);
            printf("  predicted update time %.4f s, bound by %s\n", r.seconds, r.bound);
        }
    }
    te_wt_schedule_free(s);
    te_wt_sharding_free(sh);
    te_wt_model_free(m);
    return rc;
}

static int cmd_gen(const struct wt_cli *o)
{
    te_wt_model *m;
    te_wt_preset p;
    if (!o->out || te_wt_preset_parse(o->model, &p) || te_wt_preset_model(p, &m)) {
        fprintf(stderr, "te-weights gen: needs --model PRESET --out FILE (%s)\n",
                te_wt_last_error());
        return 1;
    }
    if (m->data_bytes > (1ull << 30)) {
        fprintf(stderr, "te-weights gen: %s is %.1f GiB, too large to write here\n",
                m->name, m->data_bytes / 1073741824.0);
        return 1;
    }
    uint8_t *data = malloc(m->data_bytes);
    wt_fill_weights(m, o->seed, data);
    char md[512];
    snprintf(md, sizeof(md), "{\"format\":\"pt\",\"num_hidden_layers\":\"%u\","
             "\"hidden_size\":\"%u\",\"num_attention_heads\":\"%u\","
             "\"num_key_value_heads\":\"%u\",\"head_dim\":\"%u\","
             "\"n_routed_experts\":\"%u\",\"num_experts_per_tok\":\"%u\","
             "\"moe_intermediate_size\":\"%u\",\"intermediate_size\":\"%u\","
             "\"vocab_size\":\"%u\"}", m->layers, m->hidden, m->heads, m->kv_heads,
             m->head_dim, m->experts, m->top_k, m->moe_inter, m->dense_inter, m->vocab);
    m->metadata_json = strdup(md);
    int rc = te_wt_safetensors_write(o->out, m, data);
    if (rc)
        fprintf(stderr, "te-weights gen: %s\n", te_wt_last_error());
    else
        printf("wrote %s: %u tensors, %llu bytes of data\n", o->out, m->count,
               (unsigned long long)m->data_bytes);
    free(data);
    te_wt_model_free(m);
    return rc ? 1 : 0;
}

/* What each command needs, checked before it starts: a missing option or
 * a model that is neither a preset nor a readable file is a bad command
 * line (exit 2), not a failed run. */
static int check_command(const char *cmd, const struct wt_cli *o)
{
    int file = strstr(o->model, ".safetensors") || strchr(o->model, '/');
    te_wt_preset p;
    if (file && access(o->model, R_OK)) {
        fprintf(stderr, "te-weights: --model %s: %s\n", o->model, strerror(errno));
        return -1;
    }
    if (!file && te_wt_preset_parse(o->model, &p)) {
        fprintf(stderr, "te-weights: --model %s: %s\n", o->model, te_wt_last_error());
        return -1;
    }
    if (!strcmp(cmd, "gen") && (file || !o->out)) {
        fprintf(stderr, "te-weights gen: needs --model PRESET and --out FILE\n");
        return -1;
    }
    if ((!strcmp(cmd, "train") || !strcmp(cmd, "infer")) &&
        (!o->schedule || !o->dir || !o->nupdates)) {
        fprintf(stderr, "te-weights %s: needs --schedule FILE, --dir DIR and at "
                "least one --update VERSION=CHECKPOINT (missing:%s%s%s)\n", cmd,
                o->schedule ? "" : " --schedule", o->dir ? "" : " --dir",
                o->nupdates ? "" : " --update");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const cmds[] = {"plan", "simulate", "gen", "train",
                                       "infer", "bench"};
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    struct wt_cli o;
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    int known = 0;
    for (size_t i = 0; i < sizeof(cmds) / sizeof(*cmds); i++)
        known |= !strcmp(argv[1], cmds[i]);
    if (!known) {
        fprintf(stderr, "te-weights: unknown command \"%s\" (plan, simulate, gen, "
                "train, infer, bench; te-weights --help)\n", argv[1]);
        return 2;
    }
    if (wt_cli_parse(argc, argv, &o) || check_command(argv[1], &o))
        return 2;
    if (!strcmp(argv[1], "plan"))
        return cmd_plan(&o, 0);
    if (!strcmp(argv[1], "simulate"))
        return cmd_plan(&o, 1);
    if (!strcmp(argv[1], "gen"))
        return cmd_gen(&o);
    if (!strcmp(argv[1], "train"))
        return wt_cmd_train(&o);
    if (!strcmp(argv[1], "infer"))
        return wt_cmd_infer(&o);
    return wt_cmd_bench(&o, argv[0]);
}
