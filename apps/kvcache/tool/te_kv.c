/*
 * te-kv: KV-cache transfer roles on TransferEngine (docs/kvcache.md).
 *
 *   te-kv demo    [options]  one host, no set-up: N prefiller processes and a
 *                            decoder find each other in the embedded store,
 *                            R requests are pushed and every byte checked
 *   te-kv prefill [options]  serve as a prefiller until --seconds or SIGTERM
 *   te-kv decode  [options]  push --requests requests through the live
 *                            prefillers of the store, verify, report
 *   te-kv members [options]  list the live members of the store
 *   te-kv bench   [options]  decoder and prefillers in one process: overlap
 *                            of transfer and compute, notification latency,
 *                            aggregate bandwidth against loopback link caps
 * Options: --model NAME (qwen3-235b-a22b, llama-3.1-70b, deepseek-v3) or
 * --layers/--kv-heads/--head-dim/--hidden for a custom shape; --layers also
 * trims a preset (tests: fewer layers of the real shape); --page-kib N;
 * --tokens T; --layer-us U (per-layer compute at --ref-tokens, default the
 * paper's 2.3 ms at 4096 tokens); --prefillers N; --requests R; --store URL
 * (etcd://HOST:PORT or dir:PATH); --cluster NAME; --name NAME;
 * --seconds S; --link-gbps G (loopback cap per NIC); --set sec.key=val.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "te_args.h"
#include "te_kv_tool.h"


double kv_tool_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int kv_tool_shape_of(const struct opts *o, te_kv_shape *s)
{
    int rc;
    if (o->kv_heads) {
        rc = te_kv_shape_custom(o->layers ? o->layers : 4, o->kv_heads,
                                o->head_dim ? o->head_dim : 128, 2, 2,
                                o->hidden ? o->hidden : 4096,
                                o->page_kib * 1024u, s);
    } else {
        rc = te_kv_shape_preset(o->model, o->page_kib * 1024u, s);
        if (!rc && o->layers && o->layers < s->layers)
            s->layers = o->layers; /* the real shape, fewer layers */
    }
    if (rc && o->kv_heads)
        fprintf(stderr, "te-kv: custom shape (--layers, --kv-heads, "
                "--head-dim, --hidden, --page-kib): %s\n", te_kv_last_error());
    else if (rc)
        fprintf(stderr, "te-kv: --model %s: %s\n", o->model,
                te_kv_last_error());
    return rc;
}

/* The progress threads of caller-mode engines (kv_tool_engine). */
#define KV_TOOL_MAX_ENGINES 64
static struct progressor {
    te_engine *e;
    pthread_t th;
    atomic_int stop;
} progressors[KV_TOOL_MAX_ENGINES];
static pthread_mutex_t progressors_mu = PTHREAD_MUTEX_INITIALIZER;

static void *progress_loop(void *arg)
{
    struct progressor *p = arg;
    /* -EBUSY: a library call is progressing it now (te_imm_wait and
     * te_poll_completions do); let it, without spinning. */
    while (!atomic_load(&p->stop))
        if (te_progress_wait(p->e, -1, 50) == -EBUSY)
            usleep(100);
    return NULL;
}

static void progressor_start(te_engine *e)
{
    pthread_mutex_lock(&progressors_mu);
    struct progressor *p = NULL;
    for (int i = 0; i < KV_TOOL_MAX_ENGINES && !p; i++)
        if (!progressors[i].e)
            p = &progressors[i];
    if (p) {
        p->e = e;
        atomic_store(&p->stop, 0);
        if (pthread_create(&p->th, NULL, progress_loop, p))
            p->e = NULL;
    }
    pthread_mutex_unlock(&progressors_mu);
    if (!p || !p->e) {
        fprintf(stderr, "te-kv: engine.progress = caller: cannot start the "
                "thread that progresses the engine\n");
        exit(1);
    }
}

void kv_tool_engine_destroy(te_engine *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&progressors_mu);
    for (int i = 0; i < KV_TOOL_MAX_ENGINES; i++) {
        struct progressor *p = &progressors[i];
        if (p->e != e)
            continue;
        atomic_store(&p->stop, 1);
        pthread_join(p->th, NULL);
        p->e = NULL;
    }
    pthread_mutex_unlock(&progressors_mu);
    te_engine_destroy(e);
}

te_engine *kv_tool_engine(const struct opts *o)
{
    te_config *c = te_config_new();
    char v[32];
    snprintf(v, sizeof(v), "%d", TE_KV_MSG_MAX + 64);
    te_config_set(c, "engine", "max_msg_size", v);
    if (o->link_gbps > 0) {
        snprintf(v, sizeof(v), "%g", o->link_gbps);
        te_config_set(c, "loopback", "link_gbps", v);
    }
    for (int i = 0; i < o->nsets; i++) {
        char b[256];
        snprintf(b, sizeof(b), "%s", o->sets[i]);
        char *dot = strchr(b, '.'), *eq = strchr(b, '=');
        if (!dot || !eq || dot > eq) {
            fprintf(stderr, "te-kv: --set %s: want section.key=value\n", b);
            exit(2);
        }
        *dot = *eq = 0;
        te_config_set(c, b, dot + 1, eq + 1);
    }
    te_engine *e = NULL;
    if (te_engine_create(c, &e)) {
        fprintf(stderr, "te-kv: engine: %s\n", te_last_error());
        exit(1);
    }
    te_config_free(c);
    if (te_engine_progress_mode(e) == TE_PROGRESS_CALLER)
        progressor_start(e);
    return e;
}

/* ------------------------------------------------------------ prefill */

static volatile sig_atomic_t stop_flag;
static void on_term(int sig) { (void)sig; stop_flag = 1; }

static int run_prefill(const struct opts *o)
{
    te_kv_shape s;
    if (kv_tool_shape_of(o, &s))
        return 2;
    te_engine *e = kv_tool_engine(o);
    te_kv_prefiller_opts po = {.shape = s, .max_pages =
                               te_kv_pages_for(&s, o->tokens),
                               .layer_us = o->layer_us,
                               .ref_tokens = o->ref_tokens,
                               .no_fill = o->no_fill};
    te_kv_prefiller *p;
    if (te_kv_prefiller_new(e, &po, &p)) {
        fprintf(stderr, "te-kv prefill: %s\n", te_kv_last_error());
        return 1;
    }
    te_kv_store *st;
    if (te_kv_store_open(o->store, o->cluster, &st)) {
        fprintf(stderr, "te-kv prefill: store: %s\n", te_kv_last_error());
        return 1;
    }
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    te_engine_address(e, 0, addr, &alen);
    if (te_kv_store_register(st, o->name, "prefill", addr, alen,
                             po.max_pages, 3)) {
        fprintf(stderr, "te-kv prefill: register: %s\n", te_kv_last_error());
        return 1;
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    double end = kv_tool_now_s() + o->seconds;
    while (!stop_flag && kv_tool_now_s() < end) {
        usleep(200000);
        int ka = te_kv_store_keepalive(st);
        if (ka < 0)
            fprintf(stderr, "te-kv prefill: keepalive: %s\n",
                    te_kv_last_error());
        else if (ka == 1)
            fprintf(stderr, "te-kv prefill %s: its record had expired "
                    "(stopped or starved past the 3 s ttl): registered "
                    "again\n", o->name);
    }
    te_kv_store_unregister(st);
    te_kv_store_close(st);
    te_kv_prefiller_stats ps;
    te_kv_prefiller_stats_get(p, &ps);
    printf("te-kv prefill %s: %" PRIu64 " completed, %" PRIu64 " cancelled, %"
           PRIu64 " rejected\n", o->name, ps.completed, ps.cancelled,
           ps.rejected);
    te_kv_prefiller_free(p);
    kv_tool_engine_destroy(e);
    return 0;
}

/* ------------------------------------------------------------- decode */


te_kv_decoder *g_dec;

void kv_tool_on_done(uint64_t id, int status, const char *why, void *arg)
{
    struct tally *t = arg;
    if (status == -ECANCELED) {
        atomic_fetch_add(&t->cancelled, 1);
    } else if (status) {
        /* The first failure in full; the others usually share its cause
         * (a fence fails every request of a prefiller) and are counted
         * in the summary line. */
        if (atomic_fetch_add(&t->failed, 1) == 0)
            fprintf(stderr, "te-kv: request %" PRIu64 ": %s (%s)\n", id,
                    strerror(-status), why);
    } else {
        t->t_end[id] = kv_tool_now_s();
        if (!t->no_verify && te_kv_decoder_verify(g_dec, id)) {
            fprintf(stderr, "te-kv: %s\n", te_kv_last_error());
            t->verify_bad = 1;
        }
        te_kv_decoder_release(g_dec, id);
        atomic_fetch_add(&t->ok, 1);
    }
    atomic_fetch_add(&t->done, 1);
}

static int run_decode(const struct opts *o)
{
    te_kv_shape s;
    if (kv_tool_shape_of(o, &s))
        return 2;
    te_kv_store *st;
    if (te_kv_store_open(o->store, o->cluster, &st)) {
        fprintf(stderr, "te-kv decode: store: %s\n", te_kv_last_error());
        return 1;
    }
    te_kv_member m[64];
    int n = 0;
    /* The demo's own prefillers are watched (one that exits ends the wait
     * at once), so their start-up, slow on a loaded machine (an engine and
     * a buffer of layers x pages each), gets longer than unknown ones. */
    int wait_s = o->nchildren ? 120 : 30;
    double deadline = kv_tool_now_s() + wait_s;
    while ((n = te_kv_store_list(st, "prefill", m, 64)) < (int)o->prefillers &&
           kv_tool_now_s() < deadline && !kv_tool_child_exited(o))
        usleep(50000);
    /* Every failure below leaves through `out`, which frees what exists. */
    te_engine *e = NULL;
    struct tally t = {0};
    int ok = 0;
    g_dec = NULL;
    if (n < (int)o->prefillers) {
        if (kv_tool_now_s() >= deadline) /* else a child said why */
            fprintf(stderr, "te-kv decode: %d of %u prefillers in the store "
                    "after %d s\n", n < 0 ? 0 : n, o->prefillers, wait_s);
        goto out;
    }
    e = kv_tool_engine(o);
    uint32_t per = te_kv_pages_for(&s, o->tokens);
    te_kv_decoder_opts dopt = {.shape = s, .pool_pages = o->pool_pages ?
                               o->pool_pages : per * 8, .max_requests = 8,
                               .poison_freed = o->poison};
    if (o->request_ms) /* else the library's 5 s for both */
        dopt.accept_timeout_ms = dopt.cancel_timeout_ms = (int)o->request_ms;
    if (te_kv_decoder_new(e, &dopt, &g_dec)) {
        fprintf(stderr, "te-kv decode: %s\n", te_kv_last_error());
        g_dec = NULL;
        goto out;
    }
    uint32_t ids[64];
    int npf = n < 64 ? n : 64, live[64], nlive = 0;
    for (int i = 0; i < npf; i++) {
        live[i] = te_kv_decoder_add_prefiller(g_dec, m[i].addr,
                                              m[i].addr_len, &ids[i]) == 0;
        nlive += live[i];
        if (!live[i]) {
            /* --allow-failed: a listed prefiller may have died since. */
            fprintf(stderr, "te-kv decode: %s: %s%s\n", m[i].name,
                    te_kv_last_error(), o->allow_failed ? "; skipped" : "");
            if (!o->allow_failed)
                goto out;
        }
    }
    if (!nlive) {
        fprintf(stderr, "te-kv decode: no prefiller could be added\n");
        goto out;
    }
    t.t_end = calloc(o->requests + 1, sizeof(double));
    t.no_verify = o->no_fill; /* the prefillers wrote no pattern */
    double t0 = kv_tool_now_s();
    int cancel_calls = 0, rerouted = 0;
    for (uint32_t r = 1; r <= o->requests; r++) {
        int rc, k = (int)(r % (uint32_t)npf);
        /* Full pool or window: wait for requests to end (each has a
         * deadline, so this does too; bounded again here). */
        for (;;) {
            while (!live[k])
                k = (k + 1) % npf;
            rc = te_kv_decoder_submit(g_dec, ids[k], r, o->tokens,
                                      o->request_ms ? (int)o->request_ms
                                                    : 60000, kv_tool_on_done, &t);
            if (rc && rc != -EBUSY && rc != -ENOSPC && o->allow_failed &&
                nlive > 1) {
                /* --allow-failed: a dead or fenced prefiller takes no
                 * more requests; the next live one gets this one. */
                fprintf(stderr, "te-kv decode: request %u: %s; prefiller "
                        "%s taken out\n", r, te_kv_last_error(), m[k].name);
                live[k] = 0;
                nlive--;
                rerouted++;
                continue;
            }
            if ((rc != -EBUSY && rc != -ENOSPC) || kv_tool_now_s() > t0 + 120)
                break;
            usleep(200);
        }
        if (rc) {
            fprintf(stderr, "te-kv decode: submit request %u: %s\n", r,
                    te_kv_last_error());
            goto out; /* te_kv_decoder_free fails what is in flight */
        }
        /* --cancel-every K: this request (likely before its ACCEPT) and
         * the one before it (likely between layers, or already done:
         * then the cancel is refused and it completes). */
        if (o->cancel_every && r % o->cancel_every == 0) {
            cancel_calls += te_kv_decoder_cancel(g_dec, r) == 0;
            if (r > 1)
                cancel_calls += te_kv_decoder_cancel(g_dec, r - 1) == 0;
        }
    }
    while (atomic_load(&t.done) < (int)o->requests && kv_tool_now_s() < t0 + 120)
        usleep(1000);
    kv_tool_decode_summary(o, &t, &s, npf, kv_tool_now_s() - t0);
    int ended = atomic_load(&t.ok) + atomic_load(&t.cancelled) +
                atomic_load(&t.failed);
    uint64_t late = te_kv_decoder_late_writes(g_dec);
    if (o->cancel_every || o->allow_failed || o->poison)
        printf("te-kv decode: %d ended of %u: %d completed, %d cancelled "
               "(%d cancel calls), %d failed, %d rerouted; late writes "
               "%" PRIu64 "%s\n", ended, o->requests, atomic_load(&t.ok),
               atomic_load(&t.cancelled), cancel_calls, atomic_load(&t.failed),
               rerouted, late, o->poison ? "" : " (not checked: no --poison)");
    ok = ended == (int)o->requests && !t.verify_bad && late == 0 &&
             (o->allow_failed || atomic_load(&t.failed) == 0) &&
             (o->cancel_every || atomic_load(&t.cancelled) == 0);
out:
    if (g_dec)
        te_kv_decoder_free(g_dec);
    g_dec = NULL;
    kv_tool_engine_destroy(e);
    te_kv_store_close(st);
    free(t.t_end);
    return ok ? 0 : 1;
}

/* The decode result line. Only completed requests are claimed: their
 * bytes are the throughput and they are what was verified. */
void kv_tool_decode_summary(const struct opts *o, struct tally *t,
                            const te_kv_shape *s, int npf, double dt)
{
    int ok = atomic_load(&t->ok), failed = atomic_load(&t->failed);
    uint64_t bytes = (uint64_t)ok * s->layers *
                     te_kv_pages_for(s, o->tokens) * te_kv_page_bytes(s);
    printf("te-kv decode: %d/%u requests completed from %d prefillers, %d "
           "failed%s", ok, o->requests, npf, failed,
           failed > 1 ? " (the first failure is shown above)" : "");
    if (!ok) {
        printf(", no data arrived, nothing verified\n");
        return;
    }
    printf(", %s %d completed request%s; %.1f MiB in %.2f s (%.2f GB/s = "
           "%.1f Gbit/s)\n", o->no_fill ? "bytes unchecked (--no-fill) in"
           : t->verify_bad ? "bytes NOT verified in" : "every byte verified in",
           ok, ok == 1 ? "" : "s", (double)bytes / (1 << 20), dt,
           (double)bytes / dt / 1e9, (double)bytes * 8 / dt / 1e9);
}

/* --------------------------------------------------------------- demo */

int kv_tool_child_exited(const struct opts *o)
{
    for (uint32_t i = 0; i < o->nchildren; i++) {
        int st;
        if (o->children[i] > 0 &&
            waitpid(o->children[i], &st, WNOHANG) == o->children[i]) {
            o->children[i] = 0; /* reaped: never signalled or waited again */
            fprintf(stderr, "te-kv demo: prefiller process %u exited (%s %d) "
                    "before it registered\n", i, WIFEXITED(st) ? "status"
                    : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            return 1;
        }
    }
    return 0;
}

static int run_demo(struct opts *o)
{
    char dir[] = "/tmp/te-kv-demo-XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char url[64];
    snprintf(url, sizeof(url), "dir:%s", dir);
    o->store = url;
    pid_t pids[16];
    uint32_t np = o->prefillers > 16 ? 16 : o->prefillers;
    for (uint32_t i = 0; i < np; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            char name[32];
            snprintf(name, sizeof(name), "prefill-%u", i);
            o->name = name;
            o->seconds = 120;
            _exit(run_prefill(o));
        }
    }
    printf("te-kv demo: %u prefiller processes, store %s\n", np, url);
    fflush(stdout);
    o->children = pids;
    o->nchildren = np;
    int rc = run_decode(o);
    for (uint32_t i = 0; i < np; i++)
        if (pids[i] > 0) /* 0: exited early and reaped (kill(0) = our group) */
            kill(pids[i], SIGTERM);
    for (uint32_t i = 0; i < np; i++)
        if (pids[i] > 0)
            waitpid(pids[i], NULL, 0);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd)) {}
    printf("%s\n", rc ? "te-kv demo: FAILED" : "te-kv demo: OK");
    return rc;
}

/* ------------------------------------------------------------ members */

static int run_members(const struct opts *o)
{
    te_kv_store *st;
    if (te_kv_store_open(o->store, o->cluster, &st)) {
        fprintf(stderr, "te-kv members: %s\n", te_kv_last_error());
        return 1;
    }
    te_kv_member m[64];
    int n = te_kv_store_list(st, NULL, m, 64);
    if (n < 0) {
        fprintf(stderr, "te-kv members: %s\n", te_kv_last_error());
        return 1;
    }
    for (int i = 0; i < n && i < 64; i++)
        printf("%s %s capacity %u address %u bytes\n", m[i].name, m[i].role,
               m[i].capacity, m[i].addr_len);
    te_kv_store_close(st);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: te-kv ROLE [options]      (protocol and numbers: docs/kvcache.md)\n"
"roles:\n"
"  demo     one host, no set-up: --prefillers prefiller processes and a\n"
"           decoder meet in a temporary embedded store; --requests requests\n"
"           are pushed layer by layer and every byte is verified\n"
"  prefill  serve as a prefiller (registered in --store) until --seconds or\n"
"           SIGTERM\n"
"  decode   push --requests requests through the live prefillers of --store,\n"
"           verify every byte, report\n"
"  members  list the live members of --store\n"
"  bench    decoder and --prefillers prefillers in one process: transfer vs\n"
"           compute overlap, last layer -> decoder notified latency,\n"
"           aggregate Gbit/s against the loopback link caps; JSON at the end\n"
"model:\n"
"  --model NAME        qwen3-235b-a22b (default), llama-3.1-70b, deepseek-v3\n"
"  --layers N          custom shape, or fewer layers of a preset\n"
"  --kv-heads N --head-dim N --hidden N   custom shape (bf16)\n"
"  --page-kib N        bytes of one page of one layer (default 32 KiB)\n"
"requests:\n"
"  --tokens N          prompt tokens per request (default 512)\n"
"  --requests N        requests to push (default 8)\n"
"  --layer-us N        simulated compute per layer at --ref-tokens tokens\n"
"  --ref-tokens N      (default 2300 us at 4096: the paper's range); the\n"
"                      time scales linearly with a prompt's tokens\n"
"  --pool-pages N      decoder pool pages per layer\n"
"  --no-fill           bench: prefillers skip writing the check pattern\n"
"decode checks:\n"
"  --request-ms N      deadline of each request (default 60000), and of\n"
"                      its ACCEPT and cancel confirmation (default 5000)\n"
"  --cancel-every K    cancel every Kth request and the one before it\n"
"  --poison            late-write detector: freed pages are poisoned and\n"
"                      checked when reused (must find 0 late writes)\n"
"  --allow-failed      failed requests (a killed prefiller) do not fail\n"
"                      the run; later requests skip that prefiller\n"
"membership:\n"
"  --store URL         etcd://HOST:PORT or dir:PATH (default $TE_KV_STORE,\n"
"                      else dir:/tmp/te-kv-<uid>)\n"
"  --cluster NAME      namespace in the store (default \"default\")\n"
"  --name NAME         this member's name (prefill)\n"
"  --seconds S         how long a prefiller serves\n"
"engine:\n"
"  --prefillers N      demo/bench: prefillers to start, decode: to wait\n"
"                      for (default 1, at most 16)\n"
"  --link-gbps G       loopback cap per NIC (loopback.link_gbps)\n"
"  --set SEC.KEY=VAL   any engine configuration key (docs/config.md)\n"
"  --help              this text\n");
}

/* A whole-number option value in [lo, hi], or exit 2 naming the option. */
static uint32_t parse_u32(const char *opt, const char *v, uint32_t lo,
                          uint32_t hi)
{
    uint32_t x;
    if (te_arg_u32("te-kv", opt, v, lo, hi, &x))
        exit(TE_ARGS_EXIT);
    return x;
}

/* A decimal option value in [0, hi], or exit 2 naming the option. */
static double parse_pos(const char *opt, const char *v, double hi)
{
    double x;
    if (te_arg_double("te-kv", opt, v, 0, hi, &x))
        exit(TE_ARGS_EXIT);
    return x;
}

/* The memory a role will allocate, checked before anything starts: the
 * decoder's pool and a prefiller's source buffer are layers x pages x page
 * bytes, which a large --tokens, --page-kib or --pool-pages makes larger
 * than the machine (a process killed by the OOM killer names nothing). */
static int check_sizes(const struct opts *o, const te_kv_shape *s)
{
    uint32_t per = te_kv_pages_for(s, o->tokens);
    if (per > TE_KV_MAX_PAGES) {
        fprintf(stderr, "te-kv: --tokens %u: %u pages of %u tokens, at most "
                "%d pages per request\n", o->tokens, per, s->tokens_per_page,
                TE_KV_MAX_PAGES);
        return -1;
    }
    uint64_t pool = o->pool_pages ? o->pool_pages : (uint64_t)per * 8;
    uint64_t need = (pool + per) * s->layers * te_kv_page_bytes(s);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t phys = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz
                                         : UINT64_MAX;
    if (need > phys / 2) {
        fprintf(stderr, "te-kv: the decoder pool (--pool-pages %" PRIu64 ") "
                "and a prefiller buffer (--tokens %u) need %.1f GiB of %u "
                "layers x %" PRIu64 "-byte pages (--page-kib); this machine "
                "has %.1f GiB: at most half of it is used\n", pool,
                o->tokens, (double)need / (1 << 30), s->layers,
                te_kv_page_bytes(s), (double)phys / (1 << 30));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {.model = "qwen3-235b-a22b", .cluster = "default",
                     .name = "prefill-0", .page_kib = 32, .tokens = 512,
                     .layer_us = 2300, .ref_tokens = 4096, .prefillers = 1,
                     .requests = 8, .seconds = 3600};
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
                      !strcmp(argv[1], "help"))) {
        usage(stdout);
        return 0;
    }
    static const char *const roles[] = {"demo", "prefill", "decode", "members",
                                        "bench"};
    int known = 0;
    for (size_t i = 0; argc >= 2 && i < sizeof(roles) / sizeof(*roles); i++)
        known |= !strcmp(argv[1], roles[i]);
    if (!known) {
        if (argc < 2)
            usage(stderr);
        else
            fprintf(stderr, "te-kv: the first argument must be a role (demo, "
                    "prefill, decode, members, bench), got \"%s\" (te-kv "
                    "--help)\n", argv[1]);
        return 2;
    }
    const char *role = argv[1];
    static const struct option lo[] = {
        {"model", 1, 0, 'm'}, {"layers", 1, 0, 'L'}, {"kv-heads", 1, 0, 'H'},
        {"head-dim", 1, 0, 'D'}, {"hidden", 1, 0, 'h'},
        {"page-kib", 1, 0, 'P'}, {"tokens", 1, 0, 't'},
        {"layer-us", 1, 0, 'u'}, {"ref-tokens", 1, 0, 'r'},
        {"prefillers", 1, 0, 'p'}, {"requests", 1, 0, 'n'},
        {"store", 1, 0, 's'}, {"cluster", 1, 0, 'c'}, {"name", 1, 0, 'N'},
        {"seconds", 1, 0, 'S'}, {"link-gbps", 1, 0, 'g'},
        {"pool-pages", 1, 0, 'o'}, {"set", 1, 0, 'x'},
        {"no-fill", 0, 0, 'F'}, {"request-ms", 1, 0, 'T'},
        {"cancel-every", 1, 0, 'C'}, {"poison", 0, 0, 'Z'},
        {"allow-failed", 0, 0, 'A'}, {"help", 0, 0, '?' + 256}, {0, 0, 0, 0}};
    int c;
    optind = 2;
    opterr = 0; /* our message names the option (te_arg_bad_option) */
    while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o.model = optarg; break;
        case 'L': o.layers = parse_u32("--layers", optarg, 1, 4096); break;
        case 'H': o.kv_heads = parse_u32("--kv-heads", optarg, 1, 4096); break;
        case 'D': o.head_dim = parse_u32("--head-dim", optarg, 1, 65536); break;
        case 'h': o.hidden = parse_u32("--hidden", optarg, 1, 1u << 20); break;
        case 'P': o.page_kib = parse_u32("--page-kib", optarg, 1, 65536); break;
        case 't': o.tokens = parse_u32("--tokens", optarg, 1, 1u << 24); break;
        case 'u': o.layer_us = parse_u32("--layer-us", optarg, 0, 60000000); break;
        case 'r': o.ref_tokens = parse_u32("--ref-tokens", optarg, 1, 1u << 24); break;
        case 'p': o.prefillers = parse_u32("--prefillers", optarg, 1, 16); break;
        case 'n': o.requests = parse_u32("--requests", optarg, 1, 1000000); break;
        case 's': o.store = optarg; break;
        case 'c': o.cluster = optarg; break;
        case 'N': o.name = optarg; break;
        case 'S': o.seconds = parse_pos("--seconds", optarg, 1e9); break;
        case 'g': o.link_gbps = parse_pos("--link-gbps", optarg, 1e6); break;
        case 'o': o.pool_pages = parse_u32("--pool-pages", optarg, 0, 1u << 24); break;
        case 'x':
            if (o.nsets < 32)
                o.sets[o.nsets] = optarg;
            o.nsets++;
            break;
        case 'F': o.no_fill = 1; break;
        case 'T': o.request_ms = parse_u32("--request-ms", optarg, 0, 3600000); break;
        case 'C': o.cancel_every = parse_u32("--cancel-every", optarg, 0, 1000000); break;
        case 'Z': o.poison = 1; break;
        case 'A': o.allow_failed = 1; break;
        case '?' + 256: usage(stdout); return 0;
        default:
            te_arg_getopt_error("te-kv", c, argv, optind, optopt);
            return 2;
        }
    }
    if (te_arg_no_operands("te-kv", argc, argv, optind))
        return 2;
    if (o.nsets > 32) {
        fprintf(stderr, "te-kv: --set: at most 32\n");
        return 2;
    }
    for (int i = 0; i < o.nsets; i++) {
        const char *dot = strchr(o.sets[i], '.'), *eq = strchr(o.sets[i], '=');
        if (!dot || !eq || dot == o.sets[i] || eq < dot + 2) {
            fprintf(stderr, "te-kv: --set \"%s\": expected section.key=value\n",
                    o.sets[i]);
            return 2;
        }
    }
    te_kv_shape shape;
    /* Every role but members needs the model: refused here, once, before
     * any process or engine starts. */
    if (strcmp(role, "members") &&
        (kv_tool_shape_of(&o, &shape) || check_sizes(&o, &shape)))
        return 2;
    if (!strcmp(role, "prefill"))
        return run_prefill(&o);
    if (!strcmp(role, "decode"))
        return run_decode(&o);
    if (!strcmp(role, "demo"))
        return run_demo(&o);
    if (!strcmp(role, "bench"))
        return kv_tool_run_bench(&o);
    if (!strcmp(role, "members"))
        return run_members(&o);
    return 2; /* not reached: roles[] was checked above */
}
