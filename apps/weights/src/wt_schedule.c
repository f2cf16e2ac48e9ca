/*
 * The static schedule: which trainer produces which inference slice, in
 * which order, from which staging offset. Computed once per (model,
 * shardings); deterministic (ties broken by index, never by address).
 *
 * Assignment: a unit (a param's slices, or a part of them for a param too
 * big for one trainer) goes to one trainer, so the full tensor is gathered
 * once per unit. Largest first, to the trainer with the least load so far
 * (longest-processing-time greedy, within 4/3 of optimal), where load =
 * bytes it writes + bytes it gathers + a per-write cost. Order: a trainer
 * walks its units smallest tensors first and, within a unit, starts at
 * slice (trainer mod n), so at any moment the trainers hit different
 * receivers instead of all starting at rank 0.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "wt_internal.h"

#define ALIGN 64u
/* A write costs ~23 us of CPU at ~50 GB/s: count it as 1 MiB of load, so
 * that trainers end up with similar write counts as well as bytes. */
#define WRITE_COST_BYTES (1u << 20)

struct unit {
    uint64_t bytes;      /* writes out + gather in */
    uint64_t in;         /* bytes of the param's tensors */
    uint64_t first, n;   /* slices [first, first + n) of one param */
    uint32_t param;
    uint32_t trainer;
    uint32_t rank;       /* receiver of the unit's first slice, rotated */
    uint64_t round;      /* k-th unit of this (trainer, in, rank) */
};

/* Execution order of one trainer: smallest tensors first, so the first
 * write leaves after a short gather (the pipeline fills fast) and the big
 * gathers overlap the writes of the units before them. */
static int by_trainer_input_rank(const void *a, const void *b)
{
    const struct unit *x = a, *y = b;
    if (x->trainer != y->trainer)
        return x->trainer < y->trainer ? -1 : 1;
    if (x->in != y->in)
        return x->in < y->in ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* Among units of equal size, round robin over receivers (rank rotated by
 * trainer): trainer t writes expert units to ranks t, t+1, ..., then the
 * second unit of each, instead of all of one rank's experts in a row. */
static int by_trainer_input_round(const void *a, const void *b)
{
    const struct unit *x = a, *y = b;
    if (x->trainer != y->trainer)
        return x->trainer < y->trainer ? -1 : 1;
    if (x->in != y->in)
        return x->in < y->in ? -1 : 1;
    if (x->round != y->round)
        return x->round < y->round ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

static int by_bytes_desc(const void *a, const void *b)
{
    const struct unit *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* Min-heap of trainers by (load, index). */
struct heap {
    uint64_t *load;
    uint32_t *h, n;
};

static int less(const struct heap *hp, uint32_t a, uint32_t b)
{
    return hp->load[a] != hp->load[b] ? hp->load[a] < hp->load[b] : a < b;
}

static void sift_down(struct heap *hp, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < hp->n && less(hp, hp->h[l], hp->h[m]))
            m = l;
        if (r < hp->n && less(hp, hp->h[r], hp->h[m]))
            m = r;
        if (m == i)
            return;
        uint32_t t = hp->h[i];
        hp->h[i] = hp->h[m];
        hp->h[m] = t;
        i = m;
    }
}

uint64_t wt_param_input_bytes(const te_wt_model *m, const te_wt_sharding *s,
                              uint32_t p)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < s->params[p].members; i++)
        n += m->tensors[s->members[s->params[p].first_member + i]].nbytes;
    return n;
}

static uint64_t slices_bytes(const te_wt_sharding *s, uint64_t first, uint64_t n)
{
    uint64_t b = 0;
    for (uint64_t k = first; k < first + n; k++)
        b += s->slices[k].bytes;
    return b;
}

/* Cut every param into units: a param whose writes exceed a quarter of a
 * trainer's mean share is split into that many units of whole slices. */
static struct unit *make_units(const te_wt_model *m, const te_wt_sharding *s,
                               uint32_t trainers, uint64_t *count)
{
    uint64_t total = slices_bytes(s, 0, s->nslices);
    uint64_t quarter = total / trainers / 4 + 1, cap = s->nparams + 16, n = 0;
    struct unit *u = malloc(cap * sizeof(*u));
    for (uint32_t p = 0; u && p < s->nparams; p++) {
        uint64_t first = s->slice_of_param[p], ns = s->slice_of_param[p + 1] - first;
        uint64_t out = slices_bytes(s, first, ns), in = wt_param_input_bytes(m, s, p);
        uint64_t parts = out / quarter + 1;
        if (parts > ns)
            parts = ns ? ns : 1;
        for (uint64_t k = 0; k < parts; k++) {
            if (n == cap) {
                cap *= 2;
                struct unit *q = realloc(u, cap * sizeof(*u));
                if (!q) {
                    free(u);
                    return NULL;
                }
                u = q;
            }
            uint64_t a = first + ns * k / parts, b = first + ns * (k + 1) / parts;
            u[n++] = (struct unit){slices_bytes(s, a, b - a) + in - in / trainers +
                                       (b - a) * WRITE_COST_BYTES,
                                   in, a, b - a, p, 0, 0, 0};
        }
    }
    *count = n;
    return u;
}

int te_wt_schedule_build(const te_wt_model *m, const te_wt_sharding *s,
                         uint32_t trainers, uint32_t nics,
                         uint64_t staging_bytes, te_wt_schedule **out)
{
    wt_error_clear();
    if (!trainers || !nics)
        return wt_fail(-EINVAL, "schedule: trainers (%u) and nics (%u) must be > 0",
                       trainers, nics);
    if (!staging_bytes)
        staging_bytes = 1ull << 30;
    uint64_t nunits = 0;
    te_wt_schedule *sc = calloc(1, sizeof(*sc));
    struct unit *units = make_units(m, s, trainers, &nunits);
    struct heap hp = {calloc(trainers, sizeof(uint64_t)),
                      malloc(trainers * sizeof(uint32_t)), trainers};
    uint64_t *fill = calloc(trainers + 1, sizeof(uint64_t));
    int rc = 0;
    if (!sc || !units || !hp.load || !hp.h || !fill) {
        rc = wt_fail(-ENOMEM, "out of memory");
        goto done;
    }
    sc->fingerprint = te_wt_model_fingerprint(m);
    sc->trainers = trainers;
    sc->nics = nics;
    sc->layout = s->layout;
    sc->staging_bytes = staging_bytes;
    sc->nwrites = s->nslices;
    sc->nparams = s->nparams;
    sc->writes = malloc((s->nslices + 1) * sizeof(te_wt_write));
    sc->trainer_first = calloc(trainers + 1, sizeof(uint64_t));
    if (!sc->writes || !sc->trainer_first) {
        rc = wt_fail(-ENOMEM, "out of memory for %llu writes",
                     (unsigned long long)s->nslices);
        goto done;
    }
    qsort(units, nunits, sizeof(*units), by_bytes_desc);
    for (uint32_t t = 0; t < trainers; t++)
        hp.h[t] = t;
    for (uint64_t i = 0; i < nunits; i++) {
        uint32_t t = hp.h[0];
        units[i].trainer = t;
        hp.load[t] += units[i].bytes;
        sift_down(&hp, 0);
        sc->trainer_first[t + 1] += units[i].n;
    }
    for (uint32_t t = 0; t < trainers; t++)
        sc->trainer_first[t + 1] += sc->trainer_first[t];
    uint32_t R = s->layout.ranks;
    for (uint64_t i = 0; i < nunits; i++)
        units[i].rank = (s->slices[units[i].first].rank + R -
                         units[i].trainer % R) % R;
    qsort(units, nunits, sizeof(*units), by_trainer_input_rank);
    for (uint64_t i = 0; i < nunits; i++) {
        int same = i && units[i].trainer == units[i - 1].trainer &&
                   units[i].in == units[i - 1].in && units[i].rank == units[i - 1].rank;
        units[i].round = same ? units[i - 1].round + 1 : 0;
    }
    qsort(units, nunits, sizeof(*units), by_trainer_input_round);
    memcpy(fill, sc->trainer_first, trainers * sizeof(uint64_t));
    uint64_t *ring = hp.load; /* reused: staging ring position per trainer */
    memset(ring, 0, trainers * sizeof(uint64_t));
    for (uint64_t i = 0; i < nunits; i++) {
        uint32_t t = units[i].trainer, p = units[i].param;
        uint64_t first = units[i].first, n = units[i].n;
        for (uint64_t k = 0; k < n; k++) {
            uint64_t si = first + (k + t) % n;
            uint64_t need = (s->slices[si].bytes + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
            if (need > staging_bytes) {
                rc = wt_fail(-E2BIG, "tensor '%s': a slice of %llu bytes exceeds "
                             "the staging watermark of %llu bytes",
                             m->tensors[s->members[s->params[p].first_member]].name,
                             (unsigned long long)need,
                             (unsigned long long)staging_bytes);
                goto done;
            }
            if (ring[t] + need > staging_bytes)
                ring[t] = 0;
            uint64_t w = fill[t]++;
            sc->writes[w] = (te_wt_write){si, ring[t], t,
                                          (uint32_t)(w - sc->trainer_first[t])};
            ring[t] += need;
        }
    }
done:
    free(units);
    free(hp.load);
    free(hp.h);
    free(fill);
    if (rc) {
        te_wt_schedule_free(sc);
        return rc;
    }
    *out = sc;
    return 0;
}

void te_wt_schedule_free(te_wt_schedule *s)
{
    if (!s)
        return;
    free(s->writes);
    free(s->trainer_first);
    free(s);
}

int wt_gathers(const te_wt_sharding *sh, const te_wt_schedule *s, uint64_t w)
{
    return w == s->trainer_first[s->writes[w].trainer] ||
           sh->slices[s->writes[w].slice].param !=
               sh->slices[s->writes[w - 1].slice].param;
}

/* Bytes trainer `t` reads to gather param p (its own part is local). */
uint64_t wt_gather_bytes(const te_wt_model *m, const te_wt_sharding *s,
                         uint32_t p, uint32_t trainers, uint32_t t)
{
    uint64_t n = 0, b, e;
    for (uint32_t i = 0; i < s->params[p].members; i++) {
        const te_wt_tensor *ts = &m->tensors[s->members[s->params[p].first_member + i]];
        te_wt_fsdp_range(ts, trainers, t, &b, &e);
        n += ts->nbytes - (e - b);
    }
    return n;
}

void te_wt_schedule_summary(const te_wt_model *m, const te_wt_sharding *sh,
                            const te_wt_schedule *s, te_wt_summary *o)
{
    memset(o, 0, sizeof(*o));
    uint32_t T = s->trainers, R = sh->layout.ranks;
    uint64_t *tx = calloc(T, 8), *gather = calloc(T, 8), *rx = calloc(R, 8);
    for (uint64_t w = 0; w < s->nwrites; w++) {
        const te_wt_slice *sl = &sh->slices[s->writes[w].slice];
        tx[s->writes[w].trainer] += sl->bytes;
        rx[sl->rank] += sl->bytes;
        o->bytes += sl->bytes;
    }
    for (uint64_t w = 0; w < s->nwrites; w++)
        if (wt_gathers(sh, s, w))
            gather[s->writes[w].trainer] += wt_gather_bytes(
                m, sh, sh->slices[s->writes[w].slice].param, T, s->writes[w].trainer);
    o->writes = s->nwrites;
    o->writes_min = o->tx_min = o->rx_min = UINT64_MAX;
    for (uint32_t t = 0; t < T; t++) {
        uint64_t n = s->trainer_first[t + 1] - s->trainer_first[t];
        if (n < o->writes_min) o->writes_min = n;
        if (n > o->writes_max) o->writes_max = n;
        if (tx[t] < o->tx_min) o->tx_min = tx[t];
        if (tx[t] > o->tx_max) o->tx_max = tx[t];
        if (gather[t] > o->gather_max) o->gather_max = gather[t];
    }
    for (uint32_t r = 0; r < R; r++) {
        if (rx[r] < o->rx_min) o->rx_min = rx[r];
        if (rx[r] > o->rx_max) o->rx_max = rx[r];
    }
    o->trainer_imbalance = o->bytes ? (double)o->tx_max * T / (double)o->bytes : 1;
    o->receiver_imbalance = o->bytes ? (double)o->rx_max * R / (double)o->bytes : 1;
    free(tx);
    free(gather);
    free(rx);
}
