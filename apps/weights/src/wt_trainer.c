/*
 * The trainer's pipeline. For each param of its schedule (in order):
 *   gather   TE_OP_READ of the other trainers' FSDP parts (own part copied)
 *            into a ring of WT_GATHER_DEPTH gather buffers: the next params
 *            are gathered while the current one is produced and written, so
 *            a large param's gather hides behind several small ones;
 *   produce  slice, fuse, quantise into the staging ring at the offset the
 *            schedule fixed;
 *   write    TE_OP_WRITE with TE_F_IMM into the receiver's standby buffer.
 * The staging ring is the watermark: a staging range is reused only after
 * the writes that used it have completed, so at most staging_bytes are in
 * flight. Every wait has the push's deadline.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wt_runtime.h"

/* Seconds a push's drain, and te_wt_trainer_destroy(), wait for
 * completions past the push's deadline. */
#define WT_DRAIN_GRACE_S 5.0

void te_wt_trainer_set_progress(te_wt_trainer *t, te_wt_progress_fn fn, void *arg)
{
    t->progress = fn;
    t->progress_arg = arg;
}

uint32_t *wt_slice_index(const te_wt_sharding *sh)
{
    uint32_t *idx = malloc((sh->nslices + 1) * sizeof(uint32_t));
    uint32_t *next = calloc(sh->layout.ranks, sizeof(uint32_t));
    if (!idx || !next) {
        free(idx);
        free(next);
        return NULL;
    }
    for (uint64_t k = 0; k < sh->nslices; k++)
        idx[k] = next[sh->slices[k].rank]++;
    free(next);
    return idx;
}

void wt_slice_request(const te_wt_schedule *s, const te_wt_slice *sl,
                      uint32_t imm, te_request *r)
{
    te_request_init(r, TE_OP_WRITE);
    r->flags = TE_F_IMM;
    r->imm = imm;
    r->route.kind = TE_ROUTE_SHARD;
    r->route.nics = s->nics;
    r->u.xfer.len = sl->bytes;
    r->u.xfer.remote_off = 0; /* each slice's destination is its own registration */
}

/* The error and its reason are recorded at once: a later call of the
 * engine would replace te_last_error(). */
static int alloc_reg(te_wt_trainer *t, const char *what, uint64_t len,
                     uint32_t access, uint8_t **buf, te_mr **mr)
{
    uint64_t n = len ? (len + 4095) & ~4095ull : 4096;
    void *p = aligned_alloc(4096, n);
    if (!p)
        return wt_fail(-ENOMEM, "trainer %u: out of memory for the %s buffer "
                       "(%llu bytes)", t->rank, what, (unsigned long long)n);
    memset(p, 0, n);
    int rc = te_mr_reg(t->e, 0, p, n, access, TE_MEM_HOST, mr);
    if (rc) {
        free(p);
        return wt_fail(rc, "trainer %u: cannot register the %s buffer: %s",
                       t->rank, what, te_last_error());
    }
    *buf = p;
    return 0;
}

static int alloc_buffers(te_wt_trainer *t)
{
    int rc = alloc_reg(t, "staging", t->s->staging_bytes, TE_MR_LOCAL, &t->staging,
                       &t->staging_mr);
    for (int g = 0; g < WT_GATHER_DEPTH && !rc; g++)
        rc = alloc_reg(t, "gather", t->gather_cap, TE_MR_LOCAL, &t->gather[g],
                       &t->gather_mr[g]);
    return rc;
}

static wt_track *new_track(const te_wt_trainer *t)
{
    uint64_t first = t->s->trainer_first[t->rank], n = t->s->trainer_first[t->rank + 1] - first;
    uint64_t *bytes = malloc((n + 1) * sizeof(uint64_t));
    if (!bytes)
        return NULL;
    for (uint64_t w = 0; w < n; w++)
        bytes[w] = t->sh->slices[t->s->writes[first + w].slice].bytes;
    wt_track *k = wt_track_new(n, bytes, t->e);
    free(bytes);
    return k;
}

int te_wt_trainer_create(te_engine *e, const te_wt_model *m,
                         const te_wt_sharding *sh, const te_wt_schedule *s,
                         uint32_t rank, te_wt_trainer **out)
{
    wt_error_clear();
    if (rank >= s->trainers)
        return wt_fail(-EINVAL, "trainer rank %u of %u", rank, s->trainers);
    if (te_engine_nic_count(e, 0) != (int)s->nics)
        return wt_fail(-EINVAL, "the schedule is for %u NIC(s) per GPU, group 0 "
                       "has %d", s->nics, te_engine_nic_count(e, 0));
    const char *lr = getenv("TE_WT_LOCAL_READS");
    if (lr && *lr && strcmp(lr, "engine") && strcmp(lr, "cpu"))
        return wt_fail(-EINVAL, "TE_WT_LOCAL_READS=%s: want engine or cpu", lr);
    te_wt_trainer *t = calloc(1, sizeof(*t));
    if (!t)
        return wt_fail(-ENOMEM, "out of memory");
    *t = (te_wt_trainer){.e = e, .m = m, .sh = sh, .s = s, .rank = rank,
                         .own_via_engine = lr && !strcmp(lr, "engine")};
    uint32_t T = s->trainers;
    t->peers = calloc(T, sizeof(te_peer));
    t->descs = calloc((uint64_t)T * m->count + 1, sizeof(te_mr_desc));
    t->slice_index = wt_slice_index(sh);
    t->k = t->slice_index ? new_track(t) : NULL;
    if (!t->peers || !t->descs || !t->slice_index || !t->k ||
        wt_entries_init(&t->src, e, m->count, TE_MR_REMOTE_READ)) {
        te_wt_trainer_destroy(t);
        return wt_fail(-ENOMEM, "out of memory");
    }
    for (uint32_t p = 0; p < sh->nparams; p++) {
        uint64_t in = wt_param_input_bytes(m, sh, p);
        if (in > t->gather_cap)
            t->gather_cap = in;
    }
    int rc = alloc_buffers(t);
    if (rc) {
        te_wt_trainer_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

int te_wt_trainer_connect(te_wt_trainer *t, const char *dir, int timeout_ms)
{
    wt_error_clear();
    int rc = wt_publish(dir, "train", t->rank, 0, 0, t->e, NULL);
    for (uint32_t r = 0; r < t->s->trainers && !rc; r++) {
        wt_endpoint ep;
        if (r != t->rank && !(rc = wt_lookup(dir, "train", r, 0, timeout_ms, &ep)) &&
            (rc = te_peer_add(t->e, 0, ep.addr, ep.addr_len, &t->peers[r])))
            rc = wt_fail(rc, "trainer %u: peer trainer %u: %s", t->rank, r,
                         te_last_error());
    }
    return rc;
}

/* Every other trainer's record and table of `state` (2v-1: its parts of
 * version v): its address (a restarted trainer has a new one) and where
 * each of its parts lives. */
static int load_trainers(te_wt_trainer *t, const char *dir, uint32_t state)
{
    uint32_t n = t->m->count;
    for (uint32_t r = 0; r < t->s->trainers; r++) {
        wt_endpoint ep;
        int rc;
        if (r == t->rank)
            continue;
        if ((rc = wt_lookup(dir, "train", r, state, 1, &ep)))
            return rc;
        if ((rc = te_peer_add(t->e, 0, ep.addr, ep.addr_len, &t->peers[r])))
            return wt_fail(rc, "trainer %u: peer trainer %u: %s", t->rank, r,
                           te_last_error());
        if ((rc = wt_table_read(dir, "train", r, state, n, &t->descs[(uint64_t)r * n])))
            return wt_fail(rc, "trainer %u: trainer %u: %s", t->rank, r,
                           te_wt_last_error());
    }
    return 0;
}

/* Submit with the tracker's callback; `outstanding` counts it first, as
 * its completion may come before te_submit() returns. */
static int submit(te_wt_trainer *t, te_request *r, double deadline)
{
    wt_track *k = t->k;
    r->done = wt_track_done;
    r->done_arg = k;
    for (;;) {
        pthread_mutex_lock(&k->mu);
        k->outstanding++;
        pthread_mutex_unlock(&k->mu);
        int64_t id = te_submit(t->e, r);
        if (id > 0)
            return 0;
        pthread_mutex_lock(&k->mu);
        k->outstanding--;
        if (id == -EAGAIN && wt_now() <= deadline) /* queue full: let it drain */
            wt_track_sleep(k, wt_now() + 0.001);
        pthread_mutex_unlock(&k->mu);
        if (id != -EAGAIN)
            return wt_fail((int)id, "submit: %s", te_last_error());
        if (wt_now() > deadline)
            return wt_fail(-ETIMEDOUT, "submission queue full until the deadline");
    }
}

struct gather_view {
    const te_wt_trainer *t;
    const uint8_t *buf;
    uint32_t param;
};

/* Member tensors of a param lie back to back in its gather buffer. */
static const void *gathered(uint32_t tensor, void *arg)
{
    struct gather_view *v = arg;
    const te_wt_param *p = &v->t->sh->params[v->param];
    uint64_t off = 0;
    for (uint32_t i = 0; i < p->members; i++) {
        uint32_t ti = v->t->sh->members[p->first_member + i];
        if (ti == tensor)
            return v->buf + off;
        off += v->t->m->tensors[ti].nbytes;
    }
    return NULL;
}

static void add_reads(wt_track *k, int g, int n)
{
    pthread_mutex_lock(&k->mu);
    k->pending_reads[g] += (uint32_t)n; /* n = -1: undo one */
    pthread_mutex_unlock(&k->mu);
}

/* The engine's route to this trainer itself: a part the CPU must not read
 * (device memory) is read through it like another trainer's part. */
static int self_peer(te_wt_trainer *t)
{
    if (t->self_added)
        return 0;
    uint8_t a[TE_ADDR_MAX];
    size_t n = sizeof(a);
    int rc = te_engine_address(t->e, 0, a, &n);
    if (!rc)
        rc = te_peer_add(t->e, 0, a, n, &t->self);
    if (rc)
        return wt_fail(rc, "trainer %u: a route to itself (for its own parts "
                       "in device memory): %s", t->rank, te_last_error());
    t->self_added = 1;
    return 0;
}

/* Where the read of trainer r's part of tensor ti comes from: another
 * trainer's published part, or this trainer's own registration. */
static int read_source(te_wt_trainer *t, uint32_t r, uint32_t ti, te_peer *peer,
                       te_mr_desc *own, const te_mr_desc **remote)
{
    if (r != t->rank) {
        *peer = t->peers[r];
        *remote = &t->descs[(uint64_t)r * t->m->count + ti];
        return 0;
    }
    int rc = self_peer(t);
    if (rc)
        return rc;
    if ((rc = te_mr_describe(t->src.v[ti].mr, own)))
        return wt_fail(rc, "trainer %u: tensor '%s': %s", t->rank,
                       t->m->tensors[ti].name, te_last_error());
    *peer = t->self;
    *remote = own;
    return 0;
}

static int start_gather(te_wt_trainer *t, uint32_t param, int g, double deadline,
                        te_wt_push_stats *st)
{
    const te_wt_param *p = &t->sh->params[param];
    uint64_t base = 0;
    uint32_t T = t->s->trainers;
    for (uint32_t i = 0; i < p->members; i++) {
        uint32_t ti = t->sh->members[p->first_member + i];
        const te_wt_tensor *ts = &t->m->tensors[ti];
        for (uint32_t r = 0; r < T; r++) {
            uint64_t b, e;
            te_wt_fsdp_range(ts, T, r, &b, &e);
            if (e == b)
                continue;
            /* The framework's host tensor is read in place by the CPU; a
             * device part goes through the engine (the CPU cannot read it). */
            if (r == t->rank && t->src.v[ti].mem == TE_MEM_HOST &&
                !t->own_via_engine) {
                memcpy(t->gather[g] + base + b, t->src.v[ti].addr, e - b);
                continue;
            }
            te_request rq;
            te_request_init(&rq, TE_OP_READ);
            te_mr_desc own;
            int rc = read_source(t, r, ti, &rq.u.xfer.peer, &own,
                                 &rq.u.xfer.remote);
            if (rc)
                return rc;
            rq.route.kind = TE_ROUTE_SHARD;
            rq.user_data = wt_track_user_data(t->k, 1, (uint64_t)g);
            rq.u.xfer.local = t->gather_mr[g];
            rq.u.xfer.local_off = base + b;
            rq.u.xfer.remote_off = 0;
            rq.u.xfer.len = e - b;
            add_reads(t->k, g, 1);
            rc = submit(t, &rq, deadline);
            if (rc) {
                add_reads(t->k, g, -1);
                return rc;
            }
            st->reads++;
            st->read_bytes += e - b;
        }
        base += ts->nbytes;
    }
    return 0;
}

/* ready() is called under the tracker's mutex. */
static int wait_until(te_wt_trainer *t, double deadline,
                      int (*ready)(te_wt_trainer *, void *), void *arg)
{
    wt_track *k = t->k;
    char reason[sizeof(k->reason)];
    pthread_mutex_lock(&k->mu);
    while (!k->failed && !ready(t, arg) && wt_now() <= deadline)
        wt_track_sleep(k, deadline);
    int rc = k->failed ? k->failed : ready(t, arg) ? 0 : -ETIMEDOUT;
    memcpy(reason, k->reason, sizeof(reason));
    pthread_mutex_unlock(&k->mu);
    if (rc == -ETIMEDOUT && !k->failed)
        return wt_fail(rc, "trainer %u: deadline passed", t->rank);
    return rc ? wt_fail(rc, "%s", reason) : 0;
}

static int reads_done(te_wt_trainer *t, void *arg)
{
    return t->k->pending_reads[*(int *)arg] == 0;
}

struct range_arg {
    uint64_t lo, hi, from, to, first;
};

/* No write in [from, to) that is still in flight overlaps [lo, hi). */
static int range_free(te_wt_trainer *t, void *arg)
{
    struct range_arg *a = arg;
    for (uint64_t w = a->from; w < a->to; w++) {
        if (t->k->done[w - a->first])
            continue;
        uint64_t o = t->s->writes[w].staging_off;
        uint64_t n = t->sh->slices[t->s->writes[w].slice].bytes;
        if (o < a->hi && a->lo < o + n)
            return 0;
    }
    return 1;
}

/* Under the tracker's mutex: reads and writes of this push not completed. */
static uint64_t unconfirmed(const wt_track *k, uint64_t *reads)
{
    uint64_t n = 0;
    *reads = 0;
    for (int g = 0; g < WT_GATHER_DEPTH; g++)
        *reads += k->pending_reads[g];
    for (uint64_t w = 0; w < k->nwrites; w++)
        n += !k->done[w];
    return n;
}

/* Nothing may still reference the buffers when a push returns: wait for
 * every completion. Writes still unconfirmed at the end make the push fail:
 * a push is successful only when every write is known to have landed. */
static int drain(te_wt_trainer *t, uint64_t submitted, double deadline, int rc)
{
    wt_track *k = t->k;
    uint64_t writes, reads;
    pthread_mutex_lock(&k->mu);
    /* Unsubmitted writes will never complete. */
    for (uint64_t w = submitted; w < k->nwrites; w++)
        k->done[w] = 1;
    while ((writes = unconfirmed(k, &reads)) + reads && wt_now() < deadline)
        wt_track_sleep(k, deadline);
    pthread_mutex_unlock(&k->mu);
    if (rc || writes + reads == 0)
        return rc;
    return wt_fail(-ETIMEDOUT, "trainer %u: %llu of %llu writes and %llu gather "
                   "reads still unconfirmed at the drain deadline (their "
                   "completions did not come)", t->rank, (unsigned long long)writes,
                   (unsigned long long)submitted, (unsigned long long)reads);
}

static uint64_t add_inflight(wt_track *k, uint64_t add, uint64_t sub)
{
    pthread_mutex_lock(&k->mu);
    k->inflight += add;
    k->inflight -= sub < k->inflight ? sub : k->inflight;
    uint64_t v = k->inflight;
    pthread_mutex_unlock(&k->mu);
    return v;
}

/* Operations of an earlier push that returned at its deadline may still
 * read staging and gather buffers: this push reuses them only when they
 * have completed. */
static int previous_done(te_wt_trainer *t, double deadline)
{
    if (!wt_track_quiesce(t->k, deadline))
        return 0;
    return wt_fail(-EBUSY, "trainer %u: operations of an earlier push are still "
                   "in flight at the deadline; its buffers cannot be reused yet",
                   t->rank);
}

/* Trainer records carry a state: 2v-1 = shard of version v loaded, 2v =
 * done with version v (nobody gathers v from us any more after all are). */
static int wait_trainers(te_wt_trainer *t, const char *dir, uint32_t state,
                         double deadline)
{
    for (uint32_t r = 0; r < t->s->trainers; r++) {
        wt_endpoint ep;
        int left = (int)((deadline - wt_now()) * 1000);
        char why[256];
        if (r != t->rank &&
            wt_lookup_progress(dir, "train", r, state, left > 0 ? left : 1, &ep, t->e)) {
            snprintf(why, sizeof(why), "%s", te_wt_last_error()); /* not in place */
            return wt_fail(-ETIMEDOUT, "trainer %u: trainer %u did not reach state %u "
                           "(%s)", t->rank, r, state, why);
        }
    }
    return 0;
}

int te_wt_trainer_wait_done(te_wt_trainer *t, const char *dir, uint32_t version,
                            int timeout_ms)
{
    wt_error_clear();
    return wait_trainers(t, dir, 2 * version, wt_now() + timeout_ms / 1000.0);
}

/* Where receiver r wants each of its slices of `version`: one descriptor
 * per slice (the engine's parameter), indexed by the sharding's slice. */
static int read_receiver_table(te_wt_trainer *t, const char *dir, uint32_t r,
                               uint32_t version, te_mr_desc *rdesc)
{
    const te_wt_sharding *sh = t->sh;
    uint32_t n = 0;
    for (uint64_t k = 0; k < sh->nslices; k++)
        n += sh->slices[k].rank == r;
    te_mr_desc *tab = malloc(((uint64_t)n + 1) * sizeof(te_mr_desc));
    if (!tab)
        return wt_fail(-ENOMEM, "out of memory");
    int rc = wt_table_read(dir, "infer", r, version, n, tab);
    for (uint64_t k = 0; k < sh->nslices && !rc; k++)
        if (sh->slices[k].rank == r)
            rdesc[k] = tab[t->slice_index[k]];
    free(tab);
    return rc ? wt_fail(rc, "trainer %u: receiver %u: %s", t->rank, r,
                        te_wt_last_error()) : 0;
}

/* The first failure of an operation names the cause, whatever stopped us. */
static int push_verdict(te_wt_trainer *t, int rc)
{
    wt_track *k = t->k;
    char reason[sizeof(k->reason)];
    pthread_mutex_lock(&k->mu);
    int failed = k->failed;
    memcpy(reason, k->reason, sizeof(reason));
    pthread_mutex_unlock(&k->mu);
    if (!rc && failed)
        return wt_fail(failed, "trainer %u: %s", t->rank, reason);
    if (rc && reason[0] && !strstr(te_wt_last_error(), reason))
        wt_fail(rc, "trainer %u: %s", t->rank, reason);
    return rc;
}

int te_wt_trainer_push(te_wt_trainer *t, const char *dir, uint32_t version,
                       int timeout_ms, te_wt_push_stats *st)
{
    wt_error_clear();
    memset(st, 0, sizeof(*st));
    const te_wt_schedule *s = t->s;
    const te_wt_sharding *sh = t->sh;
    uint32_t R = sh->layout.ranks;
    double deadline = wt_now() + timeout_ms / 1000.0;
    te_peer *rpeer = calloc(R, sizeof(te_peer));
    te_mr_desc *rdesc = calloc(sh->nslices + 1, sizeof(te_mr_desc)); /* per slice */
    uint32_t *rbase = calloc(R, sizeof(uint32_t));
    uint64_t first = s->trainer_first[t->rank], last = s->trainer_first[t->rank + 1];
    int rc = rpeer && rdesc && rbase ? 0 : wt_fail(-ENOMEM, "out of memory");
    if (!version || version > (1u << 30))
        rc = wt_fail(-EINVAL, "version %u out of range (1..2^30)", version);
    if (!rc)
        rc = wt_sources_ready(t);
    int started = !rc && !(rc = previous_done(t, deadline));
    if (started)
        wt_track_begin(t->k);
    /* Our shard holds version v: say where its parts are and that they hold
     * it, and wait until every trainer's do before gathering from them. */
    if (!rc && !(rc = wt_table_publish(dir, "train", t->rank, 2 * version - 1, &t->src)) &&
        !(rc = wt_publish(dir, "train", t->rank, 2 * version - 1, 0, t->e, NULL)) &&
        !(rc = wait_trainers(t, dir, 2 * version - 1, deadline)))
        rc = load_trainers(t, dir, 2 * version - 1);
    for (uint32_t r = 0; r < R && !rc; r++) {
        wt_endpoint ep;
        int left = (int)((deadline - wt_now()) * 1000);
        if ((rc = wt_lookup_progress(dir, "infer", r, version, left > 0 ? left : 1, &ep,
                                     t->e)))
            break;
        if (ep.ready_version != version)
            rc = wt_fail(-ESTALE, "receiver %u moved on to version %u; version %u "
                         "is abandoned", r, ep.ready_version, version);
        else if ((rc = te_peer_add(t->e, 0, ep.addr, ep.addr_len, &rpeer[r])))
            rc = wt_fail(rc, "receiver %u: %s", r, te_last_error());
        else
            rc = read_receiver_table(t, dir, r, version, rdesc);
        rbase[r] = ep.imm_base;
    }
    double t0 = wt_now();
    /* Runs: consecutive writes of one param (gathered once). */
    uint64_t *run = malloc((last - first + 2) * sizeof(uint64_t)), nruns = 0;
    if (!run && !rc)
        rc = wt_fail(-ENOMEM, "out of memory");
    for (uint64_t w = first; w < last && run; w++)
        if (w == first || sh->slices[s->writes[w].slice].param !=
                              sh->slices[s->writes[w - 1].slice].param)
            run[nruns++] = w;
    if (run)
        run[nruns] = last;
    uint64_t next_gather = 0, total_bytes = 0;
    for (uint64_t w = first; w < last; w++)
        total_bytes += sh->slices[s->writes[w].slice].bytes;
    for (uint64_t i = 0, w = first; i < nruns && !rc; i++) {
        /* Keep WT_GATHER_DEPTH params gathering ahead; slot i mod depth is
         * free again once run i - 1 ... was produced (produce copies). */
        while (!rc && next_gather < nruns && next_gather < i + WT_GATHER_DEPTH) {
            rc = start_gather(t, sh->slices[s->writes[run[next_gather]].slice].param,
                              (int)(next_gather % WT_GATHER_DEPTH), deadline, st);
            next_gather++;
        }
        int g = (int)(i % WT_GATHER_DEPTH);
        if (rc || (rc = wait_until(t, deadline, reads_done, &g)))
            break;
        uint32_t param = sh->slices[s->writes[w].slice].param;
        uint64_t end = run[i + 1];
        struct gather_view view = {t, t->gather[g], param};
        for (; w < end && !rc; w++) {
            const te_wt_write *x = &s->writes[w];
            const te_wt_slice *sl = &sh->slices[x->slice];
            struct range_arg ra = {x->staging_off, x->staging_off + sl->bytes,
                                   first, w, first};
            if ((rc = wait_until(t, deadline, range_free, &ra)))
                break;
            rc = te_wt_slice_produce(t->m, sh, sl, gathered, &view,
                                     t->staging + x->staging_off);
            te_request rq;
            wt_slice_request(s, sl, rbase[sl->rank] + t->slice_index[x->slice], &rq);
            rq.user_data = wt_track_user_data(t->k, 0, w - first);
            rq.u.xfer.peer = rpeer[sl->rank];
            rq.u.xfer.local = t->staging_mr;
            rq.u.xfer.local_off = x->staging_off;
            rq.u.xfer.remote = &rdesc[x->slice];
            if (!rc) {
                /* before submit: a completion may race */
                uint64_t in = add_inflight(t->k, sl->bytes, 0);
                if (in > st->peak_inflight)
                    st->peak_inflight = in;
                if ((rc = submit(t, &rq, deadline))) {
                    add_inflight(t->k, 0, sl->bytes);
                } else {
                    st->writes++;
                    st->write_bytes += sl->bytes;
                }
            }
        }
        if (t->progress && !rc)
            t->progress(st->writes, last - first, st->write_bytes, total_bytes,
                        add_inflight(t->k, 0, 0), t->progress_arg);
    }
    free(run);
    double drain_deadline = wt_now() + WT_DRAIN_GRACE_S > deadline
                                ? wt_now() + WT_DRAIN_GRACE_S : deadline;
    if (started)
        rc = drain(t, st->writes, drain_deadline, rc);
    st->start_s = t0;
    st->end_s = wt_now();
    st->seconds = st->end_s - t0;
    /* A push refused before it started (bad version, no sources, buffers
     * still busy) keeps its own error and says nothing. */
    int prc = started ? wt_publish(dir, "train", t->rank, 2 * version, 0, t->e, NULL) : 0;
    if (!rc && prc)
        rc = prc;
    if (started)
        rc = push_verdict(t, rc);
    free(rpeer);
    free(rdesc);
    free(rbase);
    return rc;
}

void te_wt_trainer_destroy(te_wt_trainer *t)
{
    if (!t)
        return;
    /* The callbacks of requests still in flight write into the tracker:
     * wait a bounded time for them; one still missing then keeps the
     * tracker alive (leaked) rather than freed under a callback. */
    int busy = t->k && wt_track_quiesce(t->k, wt_now() + WT_DRAIN_GRACE_S);
    te_mr *mrs[1 + WT_GATHER_DEPTH] = {t->staging_mr};
    uint8_t *bufs[1 + WT_GATHER_DEPTH] = {t->staging};
    for (int g = 0; g < WT_GATHER_DEPTH; g++) {
        mrs[1 + g] = t->gather_mr[g];
        bufs[1 + g] = t->gather[g];
    }
    /* Sources before the load buffer they may point into. */
    if (t->src.v && !wt_entries_release(&t->src))
        free(t->load_buf);
    for (int i = 0; i < 1 + WT_GATHER_DEPTH; i++) {
        /* A registration still used by an operation that outlived the push's
         * drain (-EBUSY) keeps its memory: leaked, never reused under a
         * transfer. te_engine_destroy() ends such operations. */
        if (mrs[i] && te_mr_dereg(t->e, mrs[i]) == -EBUSY)
            continue;
        free(bufs[i]);
    }
    free(t->peers);
    free(t->descs);
    free(t->slice_index);
    if (!busy)
        wt_track_free(t->k);
    free(t);
}
