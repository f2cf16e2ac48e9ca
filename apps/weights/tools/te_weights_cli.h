/* Options and commands shared by te-weights' files. */
#ifndef TE_WEIGHTS_CLI_H
#define TE_WEIGHTS_CLI_H

#include <stdint.h>

#include "te/weights.h"

#define WT_CLI_MAX_UPDATES 8

struct wt_cli {
    const char *model, *out, *dir, *schedule, *config, *link_gbps;
    uint32_t trainers, ranks, tp, ep, nics, rank;
    int fp8, target_charged, timeout_ms, runs, progress;
    uint64_t watermark_mib, seed;
    double gbps, write_us, read_us, quant_gbps, h2d_gbps;
    uint32_t nupdates;
    /* train --die-at V:PCT (tests): SIGKILL this process once PCT % of its
     * writes of version V were submitted; a real death mid-version on any
     * transport (the loopback's fault_kill_after is loopback-only). */
    uint32_t die_version, die_pct;
    struct { uint32_t version; const char *checkpoint; } updates[WT_CLI_MAX_UPDATES];
};

int wt_cli_parse(int argc, char **argv, struct wt_cli *o);
/* Load --model and cut it for the layout options (messages on stderr). */
int wt_cli_load(const struct wt_cli *o, te_wt_model **m, te_wt_sharding **sh);
/* Deterministic bf16 weights for a model (small normal-ish values). */
void wt_fill_weights(const te_wt_model *m, uint64_t seed, uint8_t *data);

int wt_cmd_train(const struct wt_cli *o);
int wt_cmd_infer(const struct wt_cli *o);
int wt_cmd_bench(const struct wt_cli *o, const char *self);

#endif
