/*
 * Immediate rate: how many WriteImm operations per second one worker posts
 * and the receiver's ImmCounter counts. Each request is a paged write of
 * --imm-batch pages of --size bytes (0 = zero-length WriteImm), every page
 * carrying the immediate (docs/sharding.md), `window` requests in flight.
 *
 * The receiver measures: before a repetition it arms te_imm_expect(imm,
 * N pages) with a callback and answers; the rate is N / (callback time -
 * answer time), both on the receiver's clock. The answer's trip to the
 * client and the client's first submit fall inside that interval, so the
 * rate is, if anything, understated.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define IMM_RATE 0x7c000000u

void tb_test_imm(struct tb_session *s, struct tb_result_row *row)
{
    const struct tb_opts *o = s->o;
    const struct tb_case *c = &row->c;
    char err[512] = "";
    struct tb_env env;
    uint64_t region = (uint64_t)c->window * c->batch * c->size;
    if (region < 4096)
        region = 4096;
    struct tb_env_req er;
    tb_env_req_init(&er, c, 1, region, TE_MR_REMOTE_WRITE);
    int rc = tb_env_open(s, &er, &env, err, sizeof(err));
    uint8_t *buf = NULL;
    te_mr *mr = NULL;
    uint32_t *idx = NULL;
    te_request *req = NULL;
    if (!rc) {
        buf = tb_alloc(region);
        idx = calloc((size_t)c->window * c->batch, sizeof(*idx));
        req = calloc(c->window, sizeof(*req));
        if (!buf || !idx || !req) {
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
    for (uint32_t w = 0; w < c->window; w++) {
        uint32_t *ix = idx + (size_t)w * c->batch;
        for (uint32_t k = 0; k < c->batch; k++)
            ix[k] = c->size ? w * c->batch + k : 0;
        te_request *r = &req[w];
        te_request_init(r, TE_OP_PAGED);
        r->flags = TE_F_IMM;
        r->imm = IMM_RATE;
        r->user_data = w;
        if (o->route_pin >= 0) {
            r->route.kind = TE_ROUTE_PIN;
            r->route.nic = (uint32_t)o->route_pin;
        }
        r->u.paged.peer = env.peer[0];
        r->u.paged.src = mr;
        r->u.paged.src_stride = c->size;
        r->u.paged.src_idx = ix;
        r->u.paged.dst = &env.desc[0];
        r->u.paged.dst_stride = c->size;
        r->u.paged.dst_idx = ix;
        r->u.paged.page_len = c->size;
        r->u.paged.count = c->batch;
    }
    int64_t per_req = te_expected_imms(env.e, &req[0], 0);
    if (per_req != c->batch) {
        rc = -EPROTO;
        snprintf(err, sizeof(err), "te_expected_imms says %lld per request, "
                 "expected %u", (long long)per_req, c->batch);
        goto out;
    }

    /* Requests per repetition: from the warm-up's rate, to last ~rep_ms. */
    uint64_t nreq = o->min_iters > c->window ? o->min_iters : c->window;
    int reps = o->warmup + o->reps;
    te_completion cq[64];
    for (int r = 0; r < reps && !rc; r++) {
        int warm = r < o->warmup;
        tb_progress(s, "imm rep %d/%d%s", warm ? r + 1 : r - o->warmup + 1,
                    warm ? o->warmup : o->reps, warm ? " (warm-up)" : "");
        struct tb_ack ack;
        if ((rc = tb_arm(s, TB_ARM_COUNT, IMM_RATE, nreq * c->batch, &ack))) {
            snprintf(err, sizeof(err), "arm: %s", ack.error);
            break;
        }
        uint64_t deadline = tb_now_ns() + (uint64_t)o->timeout_s * 1000000000ull;
        uint64_t sub = 0, done = 0;
        while (done < nreq && !rc) {
            while (sub < nreq && sub - done < c->window) {
                int64_t id = te_submit(env.e, &req[sub % c->window]);
                if (id == -EAGAIN)
                    break;
                if (id < 0) {
                    rc = (int)id;
                    snprintf(err, sizeof(err), "te_submit: %s",
                             te_last_error());
                    break;
                }
                sub++;
            }
            int n = tb_wait_completions(env.e, cq, 64, deadline);
            if (n < 0) {
                rc = n;
                snprintf(err, sizeof(err), "completions missing after %u s",
                         o->timeout_s);
                break;
            }
            for (int i = 0; i < n; i++)
                if (cq[i].status && !rc) {
                    rc = cq[i].status;
                    snprintf(err, sizeof(err), "request failed: %s",
                             cq[i].reason);
                }
            done += (uint64_t)n;
        }
        if (rc)
            break;
        struct tb_result res;
        if ((rc = tb_collect(s, TB_ARM_COUNT, IMM_RATE, nreq * c->batch, &res,
                             NULL))) {
            snprintf(err, sizeof(err), "%s", res.error);
            break;
        }
        double mops = (double)(nreq * c->batch) * 1e3 / (double)res.elapsed_ns;
        if (!warm) {
            row->mops[row->nreps] = mops;
            row->gbs[row->nreps] = mops * (double)c->size / 1e3;
            row->nreps++;
        }
        /* Size the next repetitions to last about rep_ms. */
        double want = mops * 1e3 * o->rep_ms / c->batch;
        nreq = want < o->min_iters ? o->min_iters : (uint64_t)want;
        if (nreq > o->max_iters)
            nreq = o->max_iters;
        if (nreq < c->window)
            nreq = c->window;
    }
out:
    tb_row_result(row, rc, err);
    row->note = "rate of immediates counted by the receiver's ImmCounter";
    if (mr)
        te_mr_dereg(env.e, mr);
    tb_env_close(s, &env);
    free(buf);
    free(idx);
    free(req);
}
