/*
 * The te-bench probe: a transparent transport plugin that forwards every
 * call to the real plugin (named by TE_BENCH_PROBE_INNER) and timestamps two
 * events at the plugin boundary, where the public API cannot see them:
 *
 *  - post watch: the moment the Nth WRITE op after post_arm(N) has been
 *    accepted by the real plugin's post() (the end of "posting a scatter");
 *  - imm watch: the moment the real plugin's poll() hands the core the
 *    immediate imm (the "arrival" the ImmCounter callback latency starts at).
 *
 * It reports the wrapped plugin's name as its own, so the engine reads the
 * wrapped plugin's configuration section and the addresses it publishes
 * name the wrapped transport: peers without the probe interoperate.
 * Cost when nothing is armed: one relaxed atomic load per post()/poll().
 *
 * te-bench reaches this table with dlopen(RTLD_NOLOAD) + dlsym of
 * TE_BENCH_PROBE_SYMBOL on the same file the engine loaded.
 */
#ifndef TE_BENCH_PROBE_API_H
#define TE_BENCH_PROBE_API_H

#include <stdatomic.h>
#include <stdint.h>

#define TE_BENCH_PROBE_SYMBOL "te_bench_probe"
#define TE_BENCH_PROBE_VERSION 1
#define TE_BENCH_PROBE_ENV_INNER "TE_BENCH_PROBE_INNER"
#define TE_BENCH_PROBE_ENV_PATH "TE_BENCH_PROBE_PATH"

struct te_bench_probe_api {
    uint32_t version;
    /* Watch for the n-th WRITE op accepted by post() from now on. */
    void (*post_arm)(uint32_t n);
    /* 1 and *t_ns (CLOCK_MONOTONIC) once reached, else 0. */
    int (*post_done)(uint64_t *t_ns);
    /*
     * Stamp the first arrival of each imm in [base, base + n) into
     * out[imm - base] (CLOCK_MONOTONIC ns; 0 = not seen). out must stay
     * valid until imm_disarm().
     */
    void (*imm_arm)(uint32_t base, uint32_t n, _Atomic uint64_t *out);
    void (*imm_disarm)(void);
    /* File of the wrapped plugin. */
    const char *(*inner_path)(void);
};

typedef const struct te_bench_probe_api *(*te_bench_probe_fn)(void);

#endif
