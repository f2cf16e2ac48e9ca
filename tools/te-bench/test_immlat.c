/*
 * Imm arrival -> ImmCounter callback latency on the receiver: the time from
 * the moment the transport hands the core an immediate (its poll() returns
 * it; seen by the probe) to the first instruction of the te_imm_expect()
 * callback. That is the core's share: counting, the hand-off to the
 * callback thread and that thread picking it up.
 *
 * One sample per immediate: the server arms one expectation (count 1) per
 * imm value of the repetition, the client sends one zero-length WriteImm at
 * a time, waits for its completion and a short gap, and sends the next.
 * The receiver's callback thread spins (tuning: engine.callback_spin_us,
 * see --no-tune), as a latency-sensitive application configures it; the
 * workers sleep when idle (engine.idle_spin_us=0) so that the spinning
 * thread keeps a core to itself on a small machine.
 *
 * Also reported: submit -> callback, end to end on the shared clock of one
 * host (client submit stamp vs server callback stamp), and its two client-
 * side parts: submit -> arrival (te_submit, the plugin's post and the
 * transport's hand-off to the receiver's poll; needs the probe) and the
 * te_submit() call itself.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define IMMLAT_BASE 0x7e000000u
#define IMMLAT_GAP_US 20

void tb_test_immlat(struct tb_session *s, struct tb_result_row *row)
{
    const struct tb_opts *o = s->o;
    const struct tb_case *c = &row->c;
    char err[512] = "", ppath[PATH_MAX];
    int probe = tb_probe_find(o->probe, ppath, sizeof(ppath)) == 0;
    struct tb_env env;
    struct tb_env_req er;
    tb_env_req_init(&er, c, 1, 4096, TE_MR_REMOTE_WRITE);
    er.server_probe = probe;
    if (o->tune) {
        /* The callback thread spins; the workers sleep when idle, so that
         * on a small machine the spinning callback thread keeps a core
         * (a worker's sleep only delays the arrival, which is where the
         * measured interval starts). */
        tb_sets_add(&er.server_sets, "engine.callback_spin_us=200000");
        tb_sets_add(&er.server_sets, "engine.idle_spin_us=0");
        tb_sets_add(&er.client_sets, "engine.idle_spin_us=0");
    }
    int rc = tb_env_open(s, &er, &env, err, sizeof(err));
    uint8_t *buf = NULL;
    te_mr *mr = NULL;
    uint64_t *t_sub = calloc(o->lat_iters, sizeof(*t_sub));
    uint64_t *t_ret = calloc(o->lat_iters, sizeof(*t_ret));
    if (!rc) {
        buf = tb_alloc(4096);
        if (!buf || !t_sub || !t_ret) {
            rc = -ENOMEM;
            snprintf(err, sizeof(err), "out of memory");
        } else if ((rc = te_mr_reg(env.e, 0, buf, 4096, 0, TE_MEM_HOST, &mr))) {
            snprintf(err, sizeof(err), "registration: %s", te_last_error());
        }
    }
    if (rc)
        goto out;
    snprintf(row->plugin, sizeof(row->plugin), "%s", env.ready.plugin);
    row->nics_used = 1;
    row->probe_used = env.ready.probe_active != 0;
    int k = row->probe_used ? 1 : 0;
    if (row->probe_used) {
        row->lat_what[0] = "imm arrival -> ImmCounter callback";
        row->lat_key[0] = "arrival_to_callback_us";
    } else {
        row->note = "no probe: arrival not observable; end to end only";
    }
    /* The end-to-end series needs one clock: same host only. */
    int same_host = o->mode != TB_M_CLIENT || strncmp(o->addr, "127.", 4) == 0;
    if (same_host) {
        row->lat_what[k] = "submit -> ImmCounter callback (end to end)";
        row->lat_key[k] = "submit_to_callback_us";
        if (row->probe_used) {
            row->lat_what[k + 1] = "submit -> imm arrival";
            row->lat_key[k + 1] = "submit_to_arrival_us";
        }
    }
    int k_call = k + 1 + (same_host && row->probe_used);
    row->lat_what[k_call] = "te_submit() call";
    row->lat_key[k_call] = "submit_call_us";

    /* imm set per sample below */
    te_request r = tb_imm_write(env.peer[0], mr, &env.desc[0], 0, 0);
    r.route.kind = TE_ROUTE_PIN; /* one imm per request (k shards = k imms) */
    int reps = o->warmup + o->reps;
    te_completion cq[4];
    for (int rep = 0; rep < reps && !rc; rep++) {
        int warm = rep < o->warmup;
        tb_progress(s, "immlat rep %d/%d%s", warm ? rep + 1 : rep - o->warmup + 1,
                    warm ? o->warmup : o->reps, warm ? " (warm-up)" : "");
        uint32_t base = IMMLAT_BASE + (uint32_t)rep * o->lat_iters;
        struct tb_ack ack;
        if ((rc = tb_arm(s, TB_ARM_LAT, base, o->lat_iters, &ack))) {
            snprintf(err, sizeof(err), "arm: %s", ack.error);
            break;
        }
        for (uint32_t i = 0; i < o->lat_iters && !rc; i++) {
            uint64_t deadline = tb_now_ns() + (uint64_t)o->timeout_s * 1000000000ull;
            r.imm = base + i;
            t_sub[i] = tb_now_ns();
            int64_t id = te_submit(env.e, &r);
            t_ret[i] = tb_now_ns();
            if (id < 0) {
                rc = (int)id;
                snprintf(err, sizeof(err), "te_submit: %s", te_last_error());
                break;
            }
            int got = tb_wait_completions(env.e, cq, 4, deadline);
            if (got != 1 || cq[0].status) {
                rc = got < 0 ? got : -EIO;
                snprintf(err, sizeof(err), "write %s",
                         got < 0 ? "did not complete" : cq[0].reason);
            }
            tb_sleep_us(IMMLAT_GAP_US);
        }
        if (rc)
            break;
        struct tb_result res;
        uint64_t *pairs = NULL;
        rc = tb_collect(s, TB_ARM_LAT, base, o->lat_iters, &res, (void **)&pairs);
        if (rc || !pairs) {
            snprintf(err, sizeof(err), "%s", rc ? res.error : "no samples");
            rc = rc ? rc : -EPROTO;
            free(pairs);
            break;
        }
        for (uint32_t i = 0; !warm && i < o->lat_iters && i < res.nsamples; i++) {
            uint64_t arr = pairs[2 * i], cb = pairs[2 * i + 1];
            if (row->probe_used && arr && cb >= arr)
                tb_samples_add(&row->lat[0], (double)(cb - arr) / 1e3);
            if (same_host && cb >= t_sub[i])
                tb_samples_add(&row->lat[k], (double)(cb - t_sub[i]) / 1e3);
            if (same_host && row->probe_used && arr >= t_sub[i])
                tb_samples_add(&row->lat[k + 1], (double)(arr - t_sub[i]) / 1e3);
        }
        for (uint32_t i = 0; !warm && i < o->lat_iters; i++)
            tb_samples_add(&row->lat[k_call], (double)(t_ret[i] - t_sub[i]) / 1e3);
        free(pairs);
    }
out:
    tb_row_result(row, rc, err);
    if (mr)
        te_mr_dereg(env.e, mr);
    tb_env_close(s, &env);
    free(buf);
    free(t_sub);
    free(t_ret);
}
