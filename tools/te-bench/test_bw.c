/*
 * Bandwidth tests: single write, paged writes, scatter and read. The client
 * keeps `window` requests in flight, each on its own slot of the buffers
 * (slot w: bytes [w*size, (w+1)*size)), and resubmits a slot as soon as its
 * request completes.
 *
 * One repetition: fill the window, let the first `window` completions go
 * by (ramp-up), then count completed bytes until the repetition lasted
 * --rep-ms and saw --min-iters requests; stop submitting and drain (not
 * counted). Bandwidth = counted bytes / (last counted completion - start).
 * A local completion of a write means the target has placed the data (the
 * loopback completes after the target's copy; RDMA after the remote ACK).
 *
 * The reference (memcpy of the same sizes over the same buffer footprint)
 * runs one repetition before each measured one, so that load from other
 * processes hits both alike; the ratio is median(bench) / median(reference).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define BW_IMM 0x7b000000u

struct bw {
    struct tb_session *s;
    const struct tb_case *c;
    struct tb_env env;
    uint8_t *buf;            /* client buffer: window * size */
    te_mr *mr;
    uint64_t slice;          /* scatter: bytes per destination */
    uint32_t ppr;            /* paged: pages per request */
    uint32_t *src_idx, *dst_idx; /* paged: window * ppr */
    te_scatter_dst *dsts;    /* scatter: window * peers */
    te_request *req;         /* one template per slot */
    te_request *wreq;        /* reference "write": same bytes, one write */
    te_request *cur;         /* the set run_rep submits */
    uint64_t *t_submit;      /* per slot */
    char err[512];
};

static void build_requests(struct bw *b)
{
    const struct tb_case *c = b->c;
    const struct tb_opts *o = b->s->o;
    for (uint32_t w = 0; w < c->window; w++) {
        te_request *r = &b->req[w];
        te_request_init(r, 0); /* op set per test below */
        r->group = 0;
        r->user_data = w;
        if (o->route_pin >= 0) {
            r->route.kind = TE_ROUTE_PIN;
            r->route.nic = (uint32_t)o->route_pin;
        }
        if (!o->no_imm && c->test != TB_T_READ) {
            r->flags = TE_F_IMM;
            r->imm = BW_IMM + (uint32_t)c->test;
        }
        uint64_t off = (uint64_t)w * c->size;
        switch (c->test) {
        case TB_T_WRITE:
        case TB_T_READ:
            r->op = c->test == TB_T_WRITE ? TE_OP_WRITE : TE_OP_READ;
            r->u.xfer.peer = b->env.peer[0];
            r->u.xfer.local = b->mr;
            r->u.xfer.local_off = off;
            r->u.xfer.remote = &b->env.desc[0];
            r->u.xfer.remote_off = off;
            r->u.xfer.len = c->size;
            break;
        case TB_T_PAGED: {
            uint32_t *si = b->src_idx + (size_t)w * b->ppr;
            uint32_t *di = b->dst_idx + (size_t)w * b->ppr;
            for (uint32_t k = 0; k < b->ppr; k++) {
                si[k] = w * b->ppr + k;
                di[k] = w * b->ppr + k;
            }
            if (o->shuffle) { /* fixed permutation: KV-cache-like scatter */
                uint64_t x = 0x2545F4914F6CDD1Dull + w;
                for (uint32_t k = b->ppr; k > 1; k--) {
                    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                    uint32_t j = (uint32_t)(x % k), t = di[k - 1];
                    di[k - 1] = di[j];
                    di[j] = t;
                }
            }
            r->op = TE_OP_PAGED;
            r->u.paged.peer = b->env.peer[0];
            r->u.paged.src = b->mr;
            r->u.paged.src_stride = c->page;
            r->u.paged.src_idx = si;
            r->u.paged.dst = &b->env.desc[0];
            r->u.paged.dst_stride = c->page;
            r->u.paged.dst_idx = di;
            r->u.paged.page_len = c->page;
            r->u.paged.count = b->ppr;
            break;
        }
        case TB_T_SCATTER: {
            te_scatter_dst *d = b->dsts + (size_t)w * c->peers;
            for (uint32_t i = 0; i < c->peers; i++) {
                d[i].peer = b->env.peer[i];
                d[i].dst = &b->env.desc[i];
                d[i].dst_off = (uint64_t)w * b->slice;
                d[i].src_off = off + (uint64_t)i * b->slice;
                d[i].len = b->slice;
            }
            r->op = TE_OP_SCATTER;
            r->u.scatter.src = b->mr;
            r->u.scatter.split = TE_SCATTER_BY_PEER;
            r->u.scatter.count = c->peers;
            r->u.scatter.dsts = d;
            break;
        }
        }
    }
}

static int submit_slot(struct bw *b, uint32_t w, uint64_t deadline)
{
    for (;;) {
        b->t_submit[w] = tb_now_ns();
        int64_t id = te_submit(b->env.e, &b->cur[w]);
        if (id > 0)
            return 0;
        if (id != -EAGAIN || tb_now_ns() > deadline) {
            snprintf(b->err, sizeof(b->err), "te_submit: %s: %s",
                     te_strerror((int)id), te_last_error());
            return (int)id;
        }
        tb_cpu_relax();
    }
}

/* One repetition; returns GB/s (> 0) or -errno. */
/* Caller mode over the efa plugin on libfabric's shm (its NICs are named
 * "shm:..."): the client's naps are time nobody progresses its engine, and
 * shm completes a write only in the initiator's CQ read after the
 * target's copy; a busy client, as UCX's reference is, measured 0.76 x
 * UCX at 64 KiB against 0.60 napping (docs/benchmarks.md), and with shm's
 * doorbell 7.9-11.5 GB/s against 6.8-7.7 napping (3 rounds). Over
 * tcp;ofi_rxm the naps did better (64 KiB 2.1-3.1 against 1.6-2.8 GB/s).
 * (Keyed on te_progress_fd() failing until shm got its doorbell.) */
static int caller_keeps_busy(te_engine *e)
{
    te_nic_info ni;
    return te_engine_progress_mode(e) == TE_PROGRESS_CALLER &&
           strcmp(te_engine_plugin_name(e), "efa") == 0 &&
           te_engine_nic_info(e, 0, 0, &ni) == 0 &&
           strncmp(ni.name, "shm:", 4) == 0;
}

static double run_rep(struct bw *b, struct tb_samples *lat)
{
    const struct tb_case *c = b->c;
    const struct tb_opts *o = b->s->o;
    uint64_t t0 = tb_now_ns();
    uint64_t deadline = t0 + (uint64_t)o->timeout_s * 1000000000ull;
    int rc = 0;
    for (uint32_t w = 0; w < c->window && !rc; w++)
        rc = submit_slot(b, w, deadline);
    if (rc)
        return rc;
    uint64_t done = 0, counted = 0, inflight = c->window;
    uint64_t t_start = 0, t_last = 0;
    int stopping = 0;
    te_completion cq[64];
    int caller_unwaitable = caller_keeps_busy(b->env.e);
    while (inflight) {
        /* Completion batching: when operations take long, sleep about a
         * quarter of the window's worth of them instead of waking per
         * completion, so the benchmark's own thread takes little CPU from
         * the workers (two cores carry two workers here). A quarter, not
         * half: `per` includes any stall, and a nap that drains the window
         * stalls the target, which lengthens `per` (measured: half-window
         * naps left the target idle 19% of the time at 1 MiB, window 16).
         * Short operations spin, then block. Not in caller mode over
         * libfabric's shm (caller_keeps_busy). Loopback's copy engines
         * move bytes while the client naps (a spinning client took their
         * CPU: 1 MiB 1.24 x against 1.58), an RDMA NIC moves them itself,
         * and so does a thread-mode worker. */
        int n = te_poll_completions(b->env.e, cq, 64, 0);
        if (n == 0 && counted > 8 && inflight > 3 && !o->spin_wait &&
            !caller_unwaitable) {
            uint64_t per = (tb_now_ns() - t_start) / counted;
            uint64_t nap = per * (inflight / 4);
            if (nap > 1000000)
                nap = 1000000;
            if (nap >= 50000) {
                tb_nap_us((uint32_t)(nap / 1000));
                continue;
            }
        }
        if (n == 0)
            n = tb_wait_completions(b->env.e, cq, 64, deadline);
        if (n < 0) {
            snprintf(b->err, sizeof(b->err), "%llu requests still in flight "
                     "after %u s", (unsigned long long)inflight, o->timeout_s);
            return n;
        }
        uint64_t now = tb_now_ns();
        for (int i = 0; i < n; i++) {
            inflight--;
            if (cq[i].status) {
                snprintf(b->err, sizeof(b->err), "request failed: %s: %s",
                         te_strerror(cq[i].status), cq[i].reason);
                rc = cq[i].status;
                stopping = 1;
                continue;
            }
            uint32_t w = (uint32_t)cq[i].user_data;
            done++;
            if (done == c->window) {
                t_start = now; /* ramp-up over: the window is full */
            } else if (done > c->window && !stopping) {
                counted++;
                t_last = now;
                tb_samples_add(lat, (double)(now - b->t_submit[w]) / 1e3);
            }
            if (!stopping && counted >= o->min_iters &&
                now - t_start >= (uint64_t)o->rep_ms * 1000000ull && t_start)
                stopping = 1;
            if (!stopping && counted >= o->max_iters)
                stopping = 1;
            if (!stopping) {
                if ((rc = submit_slot(b, w, deadline)))
                    stopping = 1;
                else
                    inflight++;
            }
        }
    }
    if (rc)
        return rc;
    if (!counted || t_last <= t_start) {
        snprintf(b->err, sizeof(b->err), "no completion measured");
        return -EIO;
    }
    return (double)counted * (double)c->size / (double)(t_last - t_start);
}

/* Compare what the target holds with what the client sent (or read). */
static int verify(struct bw *b)
{
    const struct tb_case *c = b->c;
    uint64_t total = (uint64_t)c->window * c->size;
    if (c->test == TB_T_WRITE || c->test == TB_T_READ) {
        uint64_t remote, local = tb_checksum(b->buf, total);
        int rc = tb_remote_checksum(b->s, 0, 0, total, &remote);
        return rc ? rc : remote == local ? 0 : -EBADMSG;
    }
    if (c->test == TB_T_SCATTER) {
        /* destination i holds, per slot, slice i of the source slot */
        uint8_t *exp = malloc((size_t)c->window * b->slice);
        if (!exp)
            return -ENOMEM;
        int rc = 0;
        for (uint32_t i = 0; !rc && i < c->peers; i++) {
            for (uint32_t w = 0; w < c->window; w++)
                memcpy(exp + (size_t)w * b->slice,
                       b->buf + (size_t)w * c->size + (size_t)i * b->slice,
                       b->slice);
            uint64_t remote;
            rc = tb_remote_checksum(b->s, i, 0, (uint64_t)c->window * b->slice,
                                    &remote);
            if (!rc && remote != tb_checksum(exp, (size_t)c->window * b->slice))
                rc = -EBADMSG;
        }
        free(exp);
        return rc;
    }
    /* paged: page src_idx[k] landed at dst_idx[k] */
    uint8_t *exp = malloc(total);
    if (!exp)
        return -ENOMEM;
    uint32_t np = c->window * b->ppr;
    for (uint32_t k = 0; k < np; k++)
        memcpy(exp + (size_t)b->dst_idx[k] * c->page,
               b->buf + (size_t)b->src_idx[k] * c->page, c->page);
    uint64_t remote;
    int rc = tb_remote_checksum(b->s, 0, 0, total, &remote);
    if (!rc && remote != tb_checksum(exp, total))
        rc = -EBADMSG;
    free(exp);
    return rc;
}

/* The "write" reference of paged writes: the same bytes of each slot as
 * one contiguous single write. */
static void build_write_refs(struct bw *b)
{
    const struct tb_case *c = b->c;
    for (uint32_t w = 0; w < c->window; w++) {
        te_request *r = &b->wreq[w];
        *r = b->req[w];
        uint64_t off = (uint64_t)w * c->size;
        r->op = TE_OP_WRITE;
        r->u.xfer.peer = b->env.peer[0];
        r->u.xfer.local = b->mr;
        r->u.xfer.local_off = off;
        r->u.xfer.remote = &b->env.desc[0];
        r->u.xfer.remote_off = off;
        r->u.xfer.len = c->size;
    }
}

static void free_bw(struct bw *b)
{
    if (b->mr)
        te_mr_dereg(b->env.e, b->mr);
    tb_env_close(b->s, &b->env);
    free(b->buf);
    free(b->src_idx);
    free(b->dst_idx);
    free(b->dsts);
    free(b->req);
    free(b->wreq);
    free(b->t_submit);
}

void tb_test_bw(struct tb_session *s, struct tb_result_row *row)
{
    const struct tb_opts *o = s->o;
    struct bw b;
    memset(&b, 0, sizeof(b));
    b.s = s;
    b.c = &row->c;
    const struct tb_case *c = &row->c;
    uint64_t total = (uint64_t)c->window * c->size;
    struct tb_env_req er;
    if (c->test == TB_T_SCATTER)
        b.slice = c->size / c->peers;
    tb_env_req_init(&er, c, c->test == TB_T_SCATTER ? c->peers : 1,
                    c->test == TB_T_SCATTER ? (uint64_t)c->window * b.slice
                                            : total,
                    c->test == TB_T_READ ? TE_MR_REMOTE_READ
                                         : TE_MR_REMOTE_WRITE);
    if (c->test == TB_T_SCATTER) /* peers idle most of the time: sleep */
        tb_sets_add(&er.server_sets, "engine.idle_spin_us=20");
    int rc = tb_env_open(s, &er, &b.env, b.err, sizeof(b.err));
    if (!rc) {
        b.buf = tb_alloc(total);
        b.req = calloc(c->window, sizeof(*b.req));
        b.t_submit = calloc(c->window, sizeof(*b.t_submit));
        if (c->test == TB_T_PAGED) {
            b.ppr = (uint32_t)(c->size / c->page);
            b.src_idx = calloc((size_t)c->window * b.ppr, sizeof(uint32_t));
            b.dst_idx = calloc((size_t)c->window * b.ppr, sizeof(uint32_t));
        }
        if (c->test == TB_T_SCATTER)
            b.dsts = calloc((size_t)c->window * c->peers, sizeof(*b.dsts));
        if (!b.buf || !b.req || !b.t_submit ||
            (c->test == TB_T_PAGED && (!b.src_idx || !b.dst_idx)) ||
            (c->test == TB_T_SCATTER && !b.dsts)) {
            rc = -ENOMEM;
            snprintf(b.err, sizeof(b.err), "out of memory");
        }
    }
    if (!rc) {
        tb_fill(b.buf, total, 42);
        if ((rc = te_mr_reg(b.env.e, 0, b.buf, total, 0, TE_MEM_HOST, &b.mr)))
            snprintf(b.err, sizeof(b.err), "registration: %s", te_last_error());
    }
    if (rc) {
        snprintf(row->error, sizeof(row->error), "%s", b.err);
        free_bw(&b);
        return;
    }
    snprintf(row->plugin, sizeof(row->plugin), "%s", b.env.ready.plugin);
    row->nics_used = o->route_pin >= 0 ? 1 : b.env.nics;
    /* Caps are charged where bytes land: one capped target NIC per used
     * (engine, remote NIC) pair: the average cap times the NICs used
     * (exact when every NIC is used, as with --nics = the group). */
    if (b.env.ready.link_gbps_sum && b.env.ready.nic_count) {
        double per = (double)b.env.ready.link_gbps_sum / b.env.ready.nic_count;
        uint32_t r = b.env.ready.nic_count, k = (uint32_t)row->nics_used;
        row->link_gbps = c->test == TB_T_SCATTER
                             ? per * c->peers
                             : per * (k < r ? k : r);
    }
    build_requests(&b);
    b.cur = b.req;
    int want_write_ref = 0;
    for (int k = 0; k < o->nrefs; k++)
        want_write_ref |= strcmp(o->refs[k], "write") == 0;
    if (want_write_ref && c->test == TB_T_PAGED) {
        b.wreq = calloc(c->window, sizeof(*b.wreq));
        if (b.wreq)
            build_write_refs(&b);
    }

    struct tb_refspec ref = {
        .test = tb_test_name(c->test), .size = c->size,
        .chunk = c->test == TB_T_PAGED ? c->page
                 : c->test == TB_T_SCATTER ? b.slice : c->size,
        .window = c->window, .threads = 1, .rep_ms = o->rep_ms};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (c->test == TB_T_SCATTER) {
        ref.threads = (int)(c->peers < cpus ? c->peers : cpus);
    } else if (o->lb_copy_threads > 1 && ref.chunk >= TB_LB_PAR_MIN) {
        /* Loopback's target copies these with copy_threads threads. */
        ref.threads = (int)(o->lb_copy_threads < cpus ? o->lb_copy_threads
                                                      : cpus);
    }
    row->ref_threads = ref.threads;
    row->lat_what[0] = "request submit -> completion";
    row->lat_key[0] = "request_us";
    int reps = o->warmup + o->reps;
    for (int r = 0; r < reps; r++) {
        int warm = r < o->warmup;
        tb_progress(s, "%s rep %d/%d%s", tb_test_name(c->test),
                    warm ? r + 1 : r - o->warmup + 1,
                    warm ? o->warmup : o->reps, warm ? " (warm-up)" : "");
        for (int k = 0; !warm && k < o->nrefs; k++) {
            char rerr[256] = "";
            ref.kind = o->refs[k];
            double g;
            if (strcmp(ref.kind, "write") == 0) {
                /* through the engine: the same bytes as single writes */
                if (!b.wreq)
                    continue; /* only paged writes have this reference */
                struct tb_samples junk2 = {0};
                b.cur = b.wreq;
                g = run_rep(&b, &junk2);
                b.cur = b.req;
                tb_samples_free(&junk2);
                if (g < 0)
                    snprintf(rerr, sizeof(rerr), "%.255s", b.err);
            } else {
                g = tb_reference(&ref, rerr, sizeof(rerr));
            }
            if (g < 0) {
                snprintf(row->error, sizeof(row->error), "reference: %s", rerr);
                break;
            }
            row->ref[k].gbs[row->ref[k].n++] = g;
        }
        if (row->error[0])
            break;
        struct tb_samples junk = {0};
        double g = run_rep(&b, warm ? &junk : &row->lat[0]);
        tb_samples_free(&junk);
        if (g < 0) {
            snprintf(row->error, sizeof(row->error), "%s", b.err);
            break;
        }
        if (!warm) {
            row->gbs[row->nreps] = g;
            /* operations: pages, destinations, or requests */
            uint64_t unit = c->test == TB_T_PAGED     ? c->page
                            : c->test == TB_T_SCATTER ? b.slice
                                                      : c->size;
            row->mops[row->nreps] = unit ? g * 1e3 / (double)unit : 0;
            row->nreps++;
        }
    }
    if (!row->error[0] && o->verify && (rc = verify(&b)))
        snprintf(row->error, sizeof(row->error), "verification failed: %s",
                 rc == -EBADMSG ? "data differs" : te_strerror(rc));
    row->nref = o->nrefs;
    for (int k = 0; k < o->nrefs; k++)
        row->ref[k].kind = strcmp(o->refs[k], "memcpy") == 0 ? "memcpy"
                           : strcmp(o->refs[k], "cma") == 0  ? "cma"
                           : strcmp(o->refs[k], "write") == 0 ? "write"
                                                             : "command";
    row->ok = !row->error[0];
    free_bw(&b);
}
