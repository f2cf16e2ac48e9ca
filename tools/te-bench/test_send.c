/*
 * Two-sided messages (te_submit SEND / receive handler).
 *
 * Rate: `window` sends of --size bytes in flight; the receiver counts
 * messages in its handler and the rate is N / (last message - the
 * receiver's answer to the arm), on the receiver's clock.
 *
 * Latency: ping-pong; the receiver's handler sends every message back, the
 * client's handler stamps the echo; half the round trip is reported. The
 * engines run with their configured (default) spin settings: this is the
 * latency an application sees without tuning the callback thread.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static _Atomic uint64_t echo_ns;

static void on_echo(int group, te_peer from, const void *data, size_t len,
                    void *arg)
{
    atomic_store_explicit(&echo_ns, tb_now_ns(), memory_order_release);
}

static int submit_retry(te_engine *e, const te_request *r, uint64_t deadline)
{
    for (;;) {
        int64_t id = te_submit(e, r);
        if (id != -EAGAIN || tb_now_ns() > deadline)
            return id < 0 ? (int)id : 0;
        tb_cpu_relax();
    }
}

/* Rate repetition: N messages, receiver-measured. Returns msgs/us or -errno. */
static double rate_rep(struct tb_session *s, struct tb_env *env,
                       const te_request *r, uint32_t window, uint64_t n,
                       char *err, size_t errlen)
{
    const struct tb_opts *o = s->o;
    struct tb_ack ack;
    int rc = tb_arm(s, TB_ARM_RECV, 0, n, &ack);
    if (rc) {
        snprintf(err, errlen, "arm: %s", ack.error);
        return rc;
    }
    uint64_t deadline = tb_now_ns() + (uint64_t)o->timeout_s * 1000000000ull;
    uint64_t sub = 0, done = 0;
    te_completion cq[64];
    while (done < n) {
        while (sub < n && sub - done < window) {
            if ((rc = submit_retry(env->e, r, deadline))) {
                snprintf(err, errlen, "te_submit: %s", te_last_error());
                return rc;
            }
            sub++;
        }
        int got = tb_wait_completions(env->e, cq, 64, deadline);
        if (got < 0) {
            snprintf(err, errlen, "sends did not complete in %u s",
                     o->timeout_s);
            return got;
        }
        for (int i = 0; i < got; i++)
            if (cq[i].status) {
                snprintf(err, errlen, "send failed: %s", cq[i].reason);
                return cq[i].status;
            }
        done += (uint64_t)got;
    }
    struct tb_result res;
    if ((rc = tb_collect(s, TB_ARM_RECV, 0, n, &res, NULL))) {
        snprintf(err, errlen, "%s", res.error);
        return rc;
    }
    return (double)n * 1e3 / (double)res.elapsed_ns;
}

void tb_test_send(struct tb_session *s, struct tb_result_row *row)
{
    const struct tb_opts *o = s->o;
    const struct tb_case *c = &row->c;
    char err[512] = "";
    struct tb_env env;
    struct tb_env_req er;
    tb_env_req_init(&er, c, 1, 4096, TE_MR_REMOTE_WRITE);
    er.recv_mode = 1;
    uint64_t msz = c->size < 4096 ? 4096 : c->size;
    tb_sets_add(&er.client_sets, "engine.max_msg_size=%llu",
                (unsigned long long)msz);
    tb_sets_add(&er.server_sets, "engine.max_msg_size=%llu",
                (unsigned long long)msz);
    int rc = tb_env_open(s, &er, &env, err, sizeof(err));
    uint8_t *msg = calloc(1, msz);
    if (!rc && !msg) {
        rc = -ENOMEM;
        snprintf(err, sizeof(err), "out of memory");
    }
    if (!rc && (rc = te_set_recv_handler(env.e, 0, on_echo, NULL)))
        snprintf(err, sizeof(err), "%s", te_last_error());
    if (rc)
        goto out;
    snprintf(row->plugin, sizeof(row->plugin), "%s", env.ready.plugin);
    row->nics_used = 1;
    row->lat_what[0] = "ping-pong half round trip";
    row->lat_key[0] = "half_rtt_us";
    tb_fill(msg, c->size, 5);
    te_request r;
    te_request_init(&r, TE_OP_SEND);
    r.u.send.peer = env.peer[0];
    r.u.send.buf = msg;
    r.u.send.len = (uint32_t)c->size;

    uint64_t n = o->min_iters > c->window ? o->min_iters : c->window;
    int reps = o->warmup + o->reps;
    for (int rep = 0; rep < reps && !rc; rep++) {
        int warm = rep < o->warmup;
        tb_progress(s, "send rep %d/%d%s", warm ? rep + 1 : rep - o->warmup + 1,
                    warm ? o->warmup : o->reps, warm ? " (warm-up)" : "");
        double mpus = rate_rep(s, &env, &r, c->window, n, err, sizeof(err));
        if (mpus < 0) {
            rc = (int)mpus;
            break;
        }
        if (!warm) {
            row->mops[row->nreps] = mpus;
            row->gbs[row->nreps] = mpus * (double)c->size / 1e3;
            row->nreps++;
        }
        double want = mpus * 1e3 * o->rep_ms;
        n = want < o->min_iters ? o->min_iters : (uint64_t)want;
        if (n > o->max_iters)
            n = o->max_iters;
    }
    /* Ping-pong. */
    struct tb_ack ack;
    if (!rc && (rc = tb_arm(s, TB_ARM_ECHO, 0, 0, &ack)))
        snprintf(err, sizeof(err), "arm: %s", ack.error);
    uint32_t total = (uint32_t)(o->warmup + o->reps) * o->lat_iters;
    int caller = !rc && te_progress(env.e, -1, 0) != -EINVAL;
    for (uint32_t i = 0; !rc && i < total; i++) {
        if (i % o->lat_iters == 0)
            tb_progress(s, "send ping-pong %u/%u", i / o->lat_iters + 1,
                        (uint32_t)(o->warmup + o->reps));
        uint64_t deadline = tb_now_ns() + (uint64_t)o->timeout_s * 1000000000ull;
        atomic_store(&echo_ns, 0);
        uint64_t t0 = tb_now_ns(), t1;
        if ((rc = submit_retry(env.e, &r, deadline))) {
            snprintf(err, sizeof(err), "te_submit: %s", te_last_error());
            break;
        }
        unsigned spins = 0;
        while (!(t1 = atomic_load_explicit(&echo_ns, memory_order_acquire))) {
            if (caller) /* engine.progress = caller: the echo comes in here */
                te_progress(env.e, -1, 0);
            else if (++spins > 2000) /* share the cores with the workers */
                sched_yield();
            else
                tb_cpu_relax();
            if ((spins & 1023) == 0 && tb_now_ns() > deadline) {
                rc = -ETIMEDOUT;
                snprintf(err, sizeof(err), "no echo within %u s", o->timeout_s);
                break;
            }
        }
        te_completion cq[4];
        while (!rc && te_poll_completions(env.e, cq, 4, 0) == 0 &&
               tb_now_ns() < deadline)
            tb_cpu_relax();
        if (!rc && i >= (uint32_t)o->warmup * o->lat_iters)
            tb_samples_add(&row->lat[0], (double)(t1 - t0) / 2e3);
    }
out:
    tb_row_result(row, rc, err);
    tb_env_close(s, &env);
    free(msg);
}
