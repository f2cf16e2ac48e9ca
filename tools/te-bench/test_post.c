/*
 * Scatter posting latency: the time from te_submit() of one scatter to
 * --peers destinations until every one of its operations has been handed
 * to the transport (the transport's post() returned having accepted the
 * last one). This is the core's cost (validation, copy, sharding, queueing,
 * one post per peer) plus the transport's post(); the data copy is
 * excluded: slices are --size bytes (default 0, an imm-only write each).
 *
 * The peers are --peers engines of one group each on the server side, so
 * every destination is a distinct peer with its own queue. They sleep when
 * idle (they only have to execute the writes eventually); the client's
 * worker spins (tuning, see --no-tune) so that the measured time is the
 * posting work, not a wake-up.
 *
 * The end of posting is seen by the probe (a transparent plugin wrapper).
 * Without it only public-API times are reported: the te_submit() call and
 * submit -> completion, which also contains the peers' wake-ups (an upper
 * bound, loose here).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define POST_IMM 0x7d000000u

void tb_test_post(struct tb_session *s, struct tb_result_row *row)
{
    const struct tb_opts *o = s->o;
    const struct tb_case *c = &row->c;
    char err[512] = "", ppath[PATH_MAX];
    int probe = tb_probe_find(o->probe, ppath, sizeof(ppath)) == 0;
    uint64_t region = c->size * c->peers < 4096 ? 4096 : c->size * c->peers;
    struct tb_env env;
    struct tb_env_req er;
    tb_env_req_init(&er, c, c->peers, c->size < 4096 ? 4096 : c->size,
                    TE_MR_REMOTE_WRITE);
    er.client_probe = probe;
    long last_cpu = sysconf(_SC_NPROCESSORS_ONLN) - 1;
    if (o->tune) {
        tb_sets_add(&er.client_sets, "engine.idle_spin_us=10000000");
        /* The posting worker gets CPU 0 to itself; this thread and the
         * sleeping peers share the others. Unpinned, 56 peers waking every
         * millisecond on a 2-core machine preempted the posting worker and
         * doubled the p50 from one run to the next (measured: 4.4 -> 10 us). */
        if (last_cpu > 0) {
            tb_sets_add(&er.client_sets, "engine.worker_cpus=0");
            tb_sets_add(&er.server_sets, "engine.worker_cpus=%ld", last_cpu);
        }
    }
    /* Many peers on few cores: they must not spin. */
    tb_sets_add(&er.server_sets, "engine.idle_spin_us=0");
    tb_sets_add(&er.server_sets, "engine.idle_sleep_us=1000");
    tb_sets_add(&er.server_sets, "engine.callback_spin_us=0");
    int rc = tb_env_open(s, &er, &env, err, sizeof(err));
    uint8_t *buf = NULL;
    te_mr *mr = NULL;
    te_scatter_dst *d = calloc(c->peers, sizeof(*d));
    if (!rc) {
        buf = tb_alloc(region);
        if (!buf || !d) {
            rc = -ENOMEM;
            snprintf(err, sizeof(err), "out of memory");
        } else if ((rc = te_mr_reg(env.e, 0, buf, region, 0, TE_MEM_HOST,
                                   &mr))) {
            snprintf(err, sizeof(err), "registration: %s", te_last_error());
        }
    }
    if (rc)
        goto out;
    snprintf(row->plugin, sizeof(row->plugin), "%s", env.ready.plugin);
    row->nics_used = o->route_pin >= 0 ? 1 : env.nics;
    row->probe_used = env.papi != NULL;
    for (uint32_t i = 0; i < c->peers; i++) {
        d[i].peer = env.peer[i];
        d[i].dst = &env.desc[i];
        d[i].src_off = (uint64_t)i * c->size;
        d[i].len = c->size;
    }
    te_request r;
    te_request_init(&r, TE_OP_SCATTER);
    r.flags = TE_F_IMM;
    r.imm = POST_IMM;
    if (o->route_pin >= 0) {
        r.route.kind = TE_ROUTE_PIN;
        r.route.nic = (uint32_t)o->route_pin;
    }
    r.u.scatter.src = mr;
    r.u.scatter.split = TE_SCATTER_BY_PEER;
    r.u.scatter.count = c->peers;
    r.u.scatter.dsts = d;
    /*
     * Each sample is a pair of scatters submitted back to back: the first
     * finds caches cold (the sleeping peers took about a millisecond to
     * execute the previous pair, and their wake-ups evicted our lines), the
     * second is posted while the first may still be executing, as in a
     * steady stream of scatters (an MoE proxy). Both are reported; the
     * second is the headline.
     */
    int k = 0;
    if (row->probe_used) {
        row->lat_what[0] = "te_submit() -> last op accepted by the plugin "
                           "(second of two back-to-back scatters)";
        row->lat_key[0] = "post_us";
        row->lat_what[1] = "the same, first scatter (cold caches)";
        row->lat_key[1] = "post_cold_us";
        k = 2;
    }
    row->lat_what[k] = "te_submit() call (second scatter)";
    row->lat_key[k] = "submit_call_us";
    row->lat_what[k + 1] = "te_submit() -> completion of both (upper bound)";
    row->lat_key[k + 1] = "submit_to_completion_us";
    if (!row->probe_used)
        row->note = "no probe: posting end not observable; upper bounds only";

    cpu_set_t saved, mine;
    int pinned = o->tune && last_cpu > 0 &&
                 pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved) == 0;
    if (pinned) {
        CPU_ZERO(&mine);
        CPU_SET((int)last_cpu, &mine);
        pthread_setaffinity_np(pthread_self(), sizeof(mine), &mine);
    }
    int reps = o->warmup + o->reps;
    te_completion cq[4];
    for (int rep = 0; rep < reps && !rc; rep++) {
        int warm = rep < o->warmup;
        tb_progress(s, "post rep %d/%d%s", warm ? rep + 1 : rep - o->warmup + 1,
                    warm ? o->warmup : o->reps, warm ? " (warm-up)" : "");
        for (uint32_t n = 0; n < o->lat_iters && !rc; n++) {
            uint64_t deadline = tb_now_ns() + (uint64_t)o->timeout_s * 1000000000ull;
            uint64_t t0[2], t1[2], t2[2] = {0, 0};
            for (int j = 0; j < 2 && !rc; j++) {
                if (env.papi)
                    env.papi->post_arm(c->peers);
                t0[j] = tb_now_ns();
                int64_t id = te_submit(env.e, &r);
                t1[j] = tb_now_ns();
                if (id < 0) {
                    rc = (int)id;
                    snprintf(err, sizeof(err), "te_submit: %s", te_last_error());
                    break;
                }
                while (env.papi && !env.papi->post_done(&t2[j])) {
                    if (tb_now_ns() > deadline) {
                        rc = -ETIMEDOUT;
                        snprintf(err, sizeof(err), "the scatter was not "
                                 "posted within %u s", o->timeout_s);
                        break;
                    }
                    tb_cpu_relax();
                }
            }
            for (int j = 0; j < 2 && !rc; j++) {
                int got = tb_wait_completions(env.e, cq, 1, deadline);
                if (got != 1 || cq[0].status) {
                    rc = got < 0 ? got : -EIO;
                    snprintf(err, sizeof(err), "scatter %s", got < 0
                             ? "did not complete" : cq[0].reason);
                }
            }
            if (rc)
                break;
            uint64_t t3 = tb_now_ns();
            if (!warm) {
                if (env.papi) {
                    tb_samples_add(&row->lat[0], (double)(t2[1] - t0[1]) / 1e3);
                    tb_samples_add(&row->lat[1], (double)(t2[0] - t0[0]) / 1e3);
                }
                tb_samples_add(&row->lat[k], (double)(t1[1] - t0[1]) / 1e3);
                tb_samples_add(&row->lat[k + 1], (double)(t3 - t0[0]) / 1e3);
            }
        }
    }
    if (pinned)
        pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
out:
    tb_row_result(row, rc, err);
    if (mr)
        te_mr_dereg(env.e, mr);
    tb_env_close(s, &env);
    free(buf);
    free(d);
}
