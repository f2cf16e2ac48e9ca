/* Shared by the te-kv tool's files (tool/te_kv.c, tool/te_kv_bench.c). */
#ifndef TE_KV_TOOL_H
#define TE_KV_TOOL_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include <te/kv.h>

/* The command line (te_kv.c's main parses it). */
struct opts {
    const char *model, *store, *cluster, *name;
    uint32_t layers, kv_heads, head_dim, hidden, page_kib, tokens;
    uint32_t layer_us, ref_tokens, prefillers, requests, pool_pages;
    double seconds, link_gbps;
    int no_fill;
    /* decode: per-request deadline, cancel every Kth request (and the one
     * before it), the late-write detector, failures tolerated (a killed
     * prefiller: its requests fail at their deadline, later ones go to
     * the survivors) */
    uint32_t request_ms, cancel_every;
    int poison, allow_failed;
    const char *sets[32];
    int nsets;
    /* demo: its prefiller processes, watched while decode waits for them
     * (an entry becomes 0 once reaped) */
    pid_t *children;
    uint32_t nchildren;
};

/* Outcomes of a run's requests, filled by kv_tool_on_done(). */
struct tally {
    atomic_int done, ok, failed, cancelled;
    double *t_end;
    int verify_bad, no_verify;
};

/* The decoder whose requests kv_tool_on_done() verifies and releases. */
extern te_kv_decoder *g_dec;

double kv_tool_now_s(void);
/* The model shape of the options (message on stderr on failure). */
int kv_tool_shape_of(const struct opts *o, te_kv_shape *s);
/* An engine configured by the options; exits on failure. With
 * engine.progress = caller (--set) a thread of this tool progresses it:
 * the te-kv libraries react to messages and completions in its callbacks,
 * which then run only inside progress calls. */
te_engine *kv_tool_engine(const struct opts *o);
/* Stop that thread (if any), then te_engine_destroy. */
void kv_tool_engine_destroy(te_engine *e);
/* te_kv_done_fn: counts, verifies and releases (arg: struct tally). */
void kv_tool_on_done(uint64_t id, int status, const char *why, void *arg);

/* demo: 1 (with a message) if one of o->children exited, which is then
 * reaped and its entry set to 0; 0 otherwise, or without children. */
int kv_tool_child_exited(const struct opts *o);

/* decode's result line: only completed requests count as bytes moved and
 * verified; with none, it says nothing arrived (dt: seconds of the run). */
void kv_tool_decode_summary(const struct opts *o, struct tally *t,
                            const te_kv_shape *s, int npf, double dt);

int kv_tool_run_bench(const struct opts *o);

#endif
