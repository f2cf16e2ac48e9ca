/*
 * te-weights train / infer / bench: the update on real processes.
 *
 *   train --model CKPT --schedule FILE --rank t --dir D --update V=CKPT...
 *   infer --model CKPT --schedule FILE --rank r --dir D --update V=CKPT...
 *   bench --model small --trainers N --ranks M [--tp --ep --fp8 --nics]
 *         [--link-gbps G] [--runs K]
 *
 * infer checks every byte of its live buffer after each version against
 * the checkpoint of the version that is live, pushed through the same
 * sharding and quantisation (te_wt_slice_produce), and prints one line per
 * version; it exits non-zero if any byte differs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "te/te.h"
#include "te_weights_cli.h"

void wt_fill_weights(const te_wt_model *m, uint64_t seed, uint8_t *data)
{
    /* bf16 values of magnitude ~2^-3..2^1 with random sign and mantissa. */
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (uint64_t i = 0; i + 1 < m->data_bytes; i += 2) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data[i] = (uint8_t)x;
        data[i + 1] = (uint8_t)(0x3e + ((x >> 8) & 1) * 0x80 + ((x >> 9) & 1));
    }
}

static int die(const char *who, const char *what)
{
    fprintf(stderr, "te-weights %s: %s\n", who, what);
    return 1;
}

/* Model, schedule (its layout rebuilds the sharding), all validated. */
static int load_plan(const struct wt_cli *o, te_wt_model **m, te_wt_sharding **sh,
                     te_wt_schedule **s)
{
    if (!o->schedule || !o->dir || !o->nupdates)
        return die("run", "needs --schedule FILE, --dir DIR and at least one "
                   "--update VERSION=CHECKPOINT");
    FILE *f = fopen(o->schedule, "rb");
    if (!f)
        return die("run", "cannot open the schedule");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = fread(buf, 1, (size_t)(n > 0 ? n : 0), f);
    fclose(f);
    te_wt_schedule *raw;
    struct wt_cli lo = *o;
    int rc = te_wt_schedule_parse(buf, got, NULL, NULL, &raw);
    if (rc) {
        free(buf);
        return die("schedule", te_wt_last_error());
    }
    lo.ranks = raw->layout.ranks;
    lo.tp = raw->layout.tp;
    lo.ep = raw->layout.ep;
    lo.fp8 = (int)raw->layout.fp8;
    te_wt_schedule_free(raw);
    if (wt_cli_load(&lo, m, sh)) {
        free(buf);
        return 1;
    }
    rc = te_wt_schedule_parse(buf, got, *m, *sh, s);
    free(buf);
    if (rc)
        return die("schedule", te_wt_last_error());
    return 0;
}

static int make_engine(const struct wt_cli *o, uint32_t nics, te_engine **e)
{
    te_config *cfg = te_config_new();
    char n[16];
    snprintf(n, sizeof(n), "%u", nics);
    int rc = o->config ? te_config_load_file(cfg, o->config) : 0;
    if (!rc)
        rc = te_config_set(cfg, "engine", "nics_per_group", n);
    if (!rc && o->link_gbps)
        rc = te_config_set(cfg, "loopback", "link_gbps", o->link_gbps);
    if (!rc)
        rc = te_engine_create(cfg, e);
    te_config_free(cfg);
    if (rc)
        fprintf(stderr, "te-weights: engine: %s (%s)\n", te_strerror(rc), te_last_error());
    return rc;
}

struct progress {
    int last, show;
    uint32_t version, die_version, die_pct;
};

/* --progress: a line on stderr at every 10 % of the bytes; --die-at. */
static void show_progress(uint64_t writes, uint64_t total_writes, uint64_t bytes,
                          uint64_t total_bytes, uint64_t inflight, void *arg)
{
    struct progress *p = arg;
    if (p->die_version == p->version && total_writes &&
        writes * 100 >= (uint64_t)p->die_pct * total_writes && writes < total_writes) {
        fprintf(stderr, "te-weights train: --die-at: SIGKILL after %llu of %llu writes "
                "of version %u\n", (unsigned long long)writes,
                (unsigned long long)total_writes, p->version);
        fflush(NULL);
        raise(SIGKILL);
    }
    int pct = total_bytes ? (int)(bytes * 100 / total_bytes) : 100;
    if (!p->show || (pct / 10 == p->last / 10 && pct != 100))
        return;
    p->last = pct;
    fprintf(stderr, "  %3d%%  %llu/%llu writes  %.1f/%.1f MiB  %.1f MiB in flight\n",
            pct, (unsigned long long)writes, (unsigned long long)total_writes,
            bytes / 1048576.0, total_bytes / 1048576.0, inflight / 1048576.0);
}

int wt_cmd_train(const struct wt_cli *o)
{
    te_wt_model *m;
    te_wt_sharding *sh;
    te_wt_schedule *s;
    if (load_plan(o, &m, &sh, &s))
        return 1;
    te_engine *e;
    te_wt_trainer *t;
    if (make_engine(o, s->nics, &e))
        return 1;
    if (te_wt_trainer_create(e, m, sh, s, o->rank, &t) ||
        te_wt_trainer_connect(t, o->dir, o->timeout_ms))
        return die("train", te_wt_last_error());
    int failed = 0;
    struct progress prog = {.last = -10, .show = o->progress,
                            .die_version = o->die_version, .die_pct = o->die_pct};
    if (o->progress || o->die_version)
        te_wt_trainer_set_progress(t, show_progress, &prog);
    for (uint32_t i = 0; i < o->nupdates; i++) {
        if (i && te_wt_trainer_wait_done(t, o->dir, o->updates[i - 1].version,
                                          o->timeout_ms)) {
            printf("train %u: version %u not started: %s\n", o->rank,
                   o->updates[i].version, te_wt_last_error());
            failed = 1;
            break;
        }
        if (te_wt_trainer_load(t, o->updates[i].checkpoint))
            return die("train", te_wt_last_error());
        te_wt_push_stats st;
        prog.last = -10;
        prog.version = o->updates[i].version;
        int rc = te_wt_trainer_push(t, o->dir, o->updates[i].version, o->timeout_ms, &st);
        if (rc) {
            printf("train %u: version %u failed: %s\n", o->rank, o->updates[i].version,
                   te_wt_last_error());
            failed = 1;
        } else {
            printf("train %u: version %u pushed: %llu writes %llu bytes, %llu reads "
                   "%llu bytes, peak in flight %llu bytes, %.6f s [%.6f %.6f]\n", o->rank,
                   o->updates[i].version, (unsigned long long)st.writes,
                   (unsigned long long)st.write_bytes, (unsigned long long)st.reads,
                   (unsigned long long)st.read_bytes,
                   (unsigned long long)st.peak_inflight, st.seconds, st.start_s,
                   st.end_s);
        }
        fflush(stdout);
    }
    /* Stay reachable until the receivers are done with us (the others may
     * still gather from our shard); a bounded wait on a marker file. */
    char done[4200];
    snprintf(done, sizeof(done), "%s/done", o->dir);
    for (int i = 0; i < o->timeout_ms / 10 && access(done, F_OK); i++)
        usleep(10000);
    te_wt_trainer_destroy(t);
    te_engine_destroy(e);
    te_wt_schedule_free(s);
    te_wt_sharding_free(sh);
    te_wt_model_free(m);
    return failed ? 3 : 0;
}

struct ckpt {
    const te_wt_model *m;
    uint8_t *data;
};

static const void *ckpt_tensor(uint32_t t, void *arg)
{
    struct ckpt *c = arg;
    return c->data + c->m->tensors[t].offset;
}

static uint8_t *read_data(const char *path, const te_wt_model *m)
{
    FILE *f = fopen(path, "rb");
    uint8_t lenb[8];
    if (!f || fread(lenb, 1, 8, f) != 8) {
        if (f)
            fclose(f);
        return NULL;
    }
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--)
        h = h << 8 | lenb[i];
    uint8_t *d = malloc(m->data_bytes + 1);
    if (fseek(f, (long)(8 + h), SEEK_SET) || fread(d, 1, m->data_bytes, f) != m->data_bytes) {
        free(d);
        d = NULL;
    }
    fclose(f);
    return d;
}

/* Bytes of the live buffer that differ from `checkpoint` cut for this rank. */
static long verify(const te_wt_model *m, const te_wt_sharding *sh, uint32_t rank,
                   const uint8_t *live, const char *checkpoint, uint32_t *slices)
{
    struct ckpt c = {m, read_data(checkpoint, m)};
    if (!c.data)
        return -1;
    long bad = 0;
    *slices = 0;
    uint8_t *buf = aligned_alloc(64, (sh->rank_bytes[rank] + 64) & ~63ull);
    for (uint64_t k = 0; k < sh->nslices; k++) {
        const te_wt_slice *sl = &sh->slices[k];
        if (sl->rank != rank)
            continue;
        te_wt_slice_produce(m, sh, sl, ckpt_tensor, &c, buf);
        bad += memcmp(buf, live + sl->dst_off, sl->bytes) != 0;
        (*slices)++;
    }
    free(buf);
    free(c.data);
    return bad;
}

int wt_cmd_infer(const struct wt_cli *o)
{
    te_wt_model *m;
    te_wt_sharding *sh;
    te_wt_schedule *s;
    if (load_plan(o, &m, &sh, &s))
        return 1;
    te_engine *e;
    te_wt_receiver *r;
    if (make_engine(o, s->nics, &e))
        return 1;
    if (te_wt_receiver_create(e, m, sh, s, o->rank, &r))
        return die("infer", te_wt_last_error());
    int bad = 0, last_ok = 0;
    const char *live_ckpt = NULL;
    for (uint32_t i = 0; i < o->nupdates; i++) {
        uint32_t v = o->updates[i].version;
        te_wt_update_report rep;
        int rc = te_wt_receiver_update(r, o->dir, v, o->timeout_ms, &rep);
        if (!rc)
            live_ckpt = o->updates[i].checkpoint;
        last_ok = rc == 0;
        uint32_t lv, n = 0;
        const uint8_t *live = te_wt_receiver_live(r, &lv);
        long diff = live ? verify(m, sh, o->rank, live, live_ckpt, &n) : 0;
        if (diff)
            bad = 1;
        if (rc)
            printf("infer %u: version %u rejected: %u of %u tensors missing (%s); "
                   "live version %u, %u tensors checked, %ld differ\n", o->rank, v,
                   rep.missing, rep.expected, rep.missing_names, lv, n, diff);
        else
            printf("infer %u: version %u live: %u tensors, %ld differ from the "
                   "checkpoint\n", o->rank, v, n, diff);
        fflush(stdout);
    }
    /* Stay up until the trainers hold their completions of the last version
     * (after a failed one nobody may be left to say so: do not wait). */
    if (last_ok && te_wt_receiver_wait_trainers(r, o->dir,
                                                o->updates[o->nupdates - 1].version,
                                                o->timeout_ms))
        fprintf(stderr, "te-weights infer: %s\n", te_wt_last_error());
    te_wt_receiver_destroy(r);
    te_engine_destroy(e);
    te_wt_schedule_free(s);
    te_wt_sharding_free(sh);
    te_wt_model_free(m);
    return bad ? 1 : 0;
}
