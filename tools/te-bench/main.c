/*
 * te-bench main: parse the command line, pick where the server runs (a
 * thread, a forked child, another te-bench), expand tests x NIC counts x
 * sizes x page sizes into cases, run them one by one and print each result
 * as it comes (the table), or everything at the end (--json).
 *
 * Exit status: 0 when every case ran, 1 when one failed, 2 on bad usage.
 * Benchmarks are not tests: nothing here compares against a threshold.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "test_gpu.h"
#include "test_idleturn.h"
#include "test_waitlat.h"

static const uint64_t def_bw[] = {64 << 10, 1 << 20, 4 << 20, 16 << 20};
static const uint64_t def_paged[] = {1 << 20, 4 << 20, 16 << 20};

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[4096];
    size_t n;
    while (m && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        fwrite(chunk, 1, n, m);
    if (m)
        fclose(m);
    fclose(f);
    return buf;
}

/* The sizes a test runs: --size, else its default list. */
static int test_sizes(const struct tb_opts *o, int t, uint64_t *out)
{
    if (o->nsizes) {
        memcpy(out, o->sizes, (size_t)o->nsizes * sizeof(*out));
        return o->nsizes;
    }
    switch (t) {
    case TB_T_WRITE:
    case TB_T_READ:
        memcpy(out, def_bw, sizeof(def_bw));
        return 4;
    case TB_T_PAGED:
        memcpy(out, def_paged, sizeof(def_paged));
        return 3;
    case TB_T_SCATTER:
        out[0] = 1 << 20;
        return 1;
    case TB_T_SEND:
        out[0] = 64;
        return 1;
    default: /* imm, post, immlat: zero-length */
        out[0] = 0;
        return 1;
    }
}

static uint32_t auto_window(int t, uint64_t size)
{
    switch (t) {
    case TB_T_IMM: return 8;
    case TB_T_SEND: return 32;
    case TB_T_POST:
    case TB_T_IMMLAT: return 1;
    default: {
        uint64_t w = size ? (16ull << 20) / size : 64;
        return w < 2 ? 2 : w > 64 ? 64 : (uint32_t)w;
    }
    }
}

/* Expand the command line into cases (rows carry their own errors). */
static int plan(const struct tb_opts *o, struct tb_result_row **rows_out)
{
    int cap = 64, n = 0;
    struct tb_result_row *rows = calloc((size_t)cap, sizeof(*rows));
    uint32_t zero_nics = 0;
    for (int ti = 0; ti < o->ntests && rows; ti++) {
        int t = o->tests[ti];
        uint64_t sizes[TB_MAX_SIZES];
        int ns = test_sizes(o, t, sizes);
        uint64_t pages[TB_MAX_SIZES] = {0};
        int np = 1;
        if (t == TB_T_PAGED) {
            np = o->npages ? o->npages : 1;
            if (o->npages)
                memcpy(pages, o->pages, (size_t)np * sizeof(*pages));
            else
                pages[0] = 16 << 10;
        }
        int nn = o->nnics ? o->nnics : 1;
        const uint32_t *nics = o->nnics ? o->nics : &zero_nics;
        for (int a = 0; a < nn; a++)
            for (int b = 0; b < ns; b++)
                for (int p = 0; p < np; p++) {
                    if (n == cap) {
                        cap *= 2;
                        struct tb_result_row *nr =
                            realloc(rows, (size_t)cap * sizeof(*rows));
                        if (!nr) {
                            free(rows);
                            return -ENOMEM;
                        }
                        rows = nr;
                        memset(rows + n, 0, (size_t)(cap - n) * sizeof(*rows));
                    }
                    struct tb_result_row *r = &rows[n++];
                    struct tb_case *c = &r->c;
                    c->test = t;
                    c->size = sizes[b];
                    c->page = pages[p];
                    c->nics = nics[a];
                    c->peers = o->peers ? o->peers
                               : t == TB_T_POST ? 56 : t == TB_T_SCATTER ? 8 : 0;
                    c->batch = t == TB_T_IMM ? o->imm_batch : 0;
                    c->window = o->window ? o->window : auto_window(t, c->size);
                    r->nics_used = (int)c->nics;
                    if (t == TB_T_PAGED && (c->size < c->page || c->page == 0))
                        snprintf(r->error, sizeof(r->error), "size smaller "
                                 "than the page");
                    else if (t == TB_T_PAGED)
                        c->size -= c->size % c->page; /* whole pages */
                    if ((t == TB_T_WRITE || t == TB_T_READ || t == TB_T_PAGED) &&
                        c->size == 0)
                        snprintf(r->error, sizeof(r->error), "size must be > 0");
                    if (t == TB_T_SCATTER && c->size < c->peers)
                        snprintf(r->error, sizeof(r->error), "size smaller than "
                                 "the number of peers");
                    if (t == TB_T_SEND && c->size > (1u << 20))
                        snprintf(r->error, sizeof(r->error), "messages are at "
                                 "most 1 MiB (engine.max_msg_size)");
                    if ((uint64_t)c->window * (c->size ? c->size : 1) >
                        (8ull << 30))
                        snprintf(r->error, sizeof(r->error), "window x size "
                                 "exceeds 8 GiB");
                }
    }
    *rows_out = rows;
    return rows ? n : -ENOMEM;
}

static void run_case(struct tb_session *s, struct tb_result_row *r)
{
    if (r->error[0])
        return;
    switch (r->c.test) {
    case TB_T_WRITE:
    case TB_T_PAGED:
    case TB_T_SCATTER:
    case TB_T_READ:
        tb_test_bw(s, r);
        break;
    case TB_T_IMM:
        tb_test_imm(s, r);
        break;
    case TB_T_SEND:
        tb_test_send(s, r);
        break;
    case TB_T_POST:
        tb_test_post(s, r);
        break;
    case TB_T_IMMLAT:
        tb_test_immlat(s, r);
        break;
    }
}

/*
 * --reference ucx|ucx-tcp for the latency tests (immlat, send): the raw UCX
 * program's p50 of the same test, measured once right before the case (the
 * latency tests take no per-repetition reference), then put beside the
 * case's own p50 (end to end for immlat, half round trip for send) in the
 * row's note.
 */
static void latency_refs(struct tb_session *s, struct tb_result_row *r,
                         double *p50)
{
    const struct tb_opts *o = s->o;
    for (int k = 0; k < o->nrefs; k++) {
        p50[k] = 0;
        if (r->error[0] || !tb_reference_is_ucx(o->refs[k]) ||
            (r->c.test != TB_T_IMMLAT && r->c.test != TB_T_SEND))
            continue;
        struct tb_refspec ref = {.kind = o->refs[k],
                                 .test = tb_test_name(r->c.test),
                                 .size = r->c.size, .chunk = r->c.size,
                                 .window = r->c.window, .threads = 1,
                                 .rep_ms = o->rep_ms};
        char err[256] = "";
        tb_progress(s, "%s reference %s", tb_test_name(r->c.test), o->refs[k]);
        p50[k] = tb_reference_latency(&ref, err, sizeof(err));
        if (p50[k] < 0)
            snprintf(r->error, sizeof(r->error), "reference: %s", err);
    }
}

static void latency_note(const struct tb_opts *o, struct tb_result_row *r,
                         const double *p50)
{
    const char *key = r->c.test == TB_T_IMMLAT ? "submit_to_callback_us"
                                               : "half_rtt_us";
    double mine = 0;
    for (int i = 0; i < TB_LAT_SERIES; i++)
        if (r->lat_key[i] && !strcmp(r->lat_key[i], key) && r->lat[i].n)
            mine = tb_percentile(&r->lat[i], 50);
    size_t n = 0;
    if (r->note)
        n = (size_t)snprintf(r->note_buf, sizeof(r->note_buf), "%s", r->note);
    for (int k = 0; k < o->nrefs && n < sizeof(r->note_buf); k++) {
        if (p50[k] <= 0)
            continue;
        n += (size_t)snprintf(r->note_buf + n, sizeof(r->note_buf) - n,
                              "%sreference %s: p50 %.3f us (%s); te-bench p50 "
                              "%.3f us = %.1f x", n ? "; " : "", o->refs[k],
                              p50[k], r->c.test == TB_T_IMMLAT
                              ? "submit -> AM handler" : "half round trip",
                              mine, mine / p50[k]);
    }
    if (n)
        r->note = r->note_buf;
}

struct inproc_server {
    pthread_t th;
    const struct tb_opts *o;
    int fd, rc;
};

static void *server_thread(void *arg)
{
    struct inproc_server *x = arg;
    x->rc = tb_server_run(x->o, x->fd);
    return NULL;
}

static int serve_standalone(struct tb_opts *o)
{
    uint16_t port = 0;
    int lfd = tb_tcp_listen(o->addr, o->port, &port);
    if (lfd < 0) {
        fprintf(stderr, "te-bench: cannot listen on %s:%u: %s\n", o->addr,
                o->port, strerror(-lfd));
        return 1;
    }
    fprintf(stderr, "te-bench: server listening on %s:%u\n", o->addr, port);
    int fd = tb_tcp_accept(lfd, (int)o->timeout_s * 10000);
    close(lfd);
    if (fd < 0) {
        fprintf(stderr, "te-bench: no client within %u s: %s\n",
                o->timeout_s * 10, strerror(-fd));
        return 1;
    }
    int rc = tb_server_run(o, fd);
    if (rc)
        fprintf(stderr, "te-bench server: session ended: %s\n", te_strerror(rc));
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    static struct tb_opts o;
    if (argc == 3 && strcmp(argv[1], "--cma-helper") == 0)
        return tb_cma_helper(argv[2]);
    /* The GPU tests (test_gpu.c) run in one process with their own
     * options (--mem, --mem-src, --mem-dst, --iters). */
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "--test") && tb_gpu_is_test(argv[i + 1]))
            return tb_gpu_main(argc, argv);
        /* So does waitlat (test_waitlat.c): --iters, --size, --gap-us, --set. */
        if (!strcmp(argv[i], "--test") && !strcmp(argv[i + 1], "waitlat"))
            return tb_waitlat_main(argc, argv);
        /* And idleturn (test_idleturn.c): --iters, --reps, --set. */
        if (!strcmp(argv[i], "--test") && !strcmp(argv[i + 1], "idleturn"))
            return tb_idleturn_main(argc, argv);
    }
    if (tb_opts_parse(argc, argv, &o))
        return 2;
    tb_reference_setup(&o);
    if (o.config_file && !(o.config_text = read_file(o.config_file))) {
        fprintf(stderr, "te-bench: cannot read %s\n", o.config_file);
        return 2;
    }
    /* Fix the plugin once, for both sides and for the probe: --plugin, else
     * the configuration and its environment overrides. The environment
     * overrides are then dropped, or they would also override the probe. */
    static char plugin_set[4200], plugin[4096], ppath[4096];
    if (o.plugin) {
        snprintf(plugin_set, sizeof(plugin_set), "engine.plugin=%s", o.plugin);
        o.sets[o.nsets++] = plugin_set;
    }
    tb_effective_plugin(o.config_text, o.sets, o.nsets, plugin, sizeof(plugin),
                        ppath, sizeof(ppath));
    unsetenv("TE_PLUGIN");
    unsetenv("TE_ENGINE_PLUGIN");
    if (!o.plugin && o.mode != TB_M_SERVER) {
        snprintf(plugin_set, sizeof(plugin_set), "engine.plugin=%s", plugin);
        o.sets[o.nsets++] = plugin_set;
    }
    tb_probe_env(plugin, ppath);
    snprintf(o.plugin_eff, sizeof(o.plugin_eff), "%.255s", plugin);
    /* Loopback's copy engines (docs/loopback.md): its bandwidth references
     * copy with as many threads (2: the plugin's default). */
    o.lb_copy_threads =
        strcmp(plugin, "loopback") == 0
            ? (int)tb_effective_long(o.config_text, o.sets, o.nsets,
                                     "loopback", "copy_threads", 2)
            : 1;
    signal(SIGPIPE, SIG_IGN);

    if (o.mode == TB_M_SERVER)
        return serve_standalone(&o);

    struct tb_session s;
    memset(&s, 0, sizeof(s));
    s.o = &o;
    s.ch.timeout_ms = (int)o.timeout_s * 1000 * 2;
    struct inproc_server ip = {.o = &o};
    pid_t child = 0;
    if (o.mode == TB_M_INPROC) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
            perror("te-bench: socketpair");
            return 1;
        }
        ip.fd = sv[1];
        s.ch.fd = sv[0];
        if (pthread_create(&ip.th, NULL, server_thread, &ip)) {
            fprintf(stderr, "te-bench: cannot start the server thread\n");
            return 1;
        }
    } else {
        uint16_t port = o.port;
        if (o.mode == TB_M_TWOPROC) {
            /* Listen before forking: the child inherits a ready socket, so
             * there is no race and any free port works. */
            int lfd = tb_tcp_listen(o.addr, o.port, &port);
            if (lfd < 0) {
                fprintf(stderr, "te-bench: cannot listen on %s:%u: %s\n",
                        o.addr, o.port, strerror(-lfd));
                return 1;
            }
            fflush(NULL);
            child = fork();
            if (child < 0) {
                perror("te-bench: fork");
                return 1;
            }
            if (child == 0) {
                int fd = tb_tcp_accept(lfd, (int)o.timeout_s * 1000);
                close(lfd);
                _exit(fd < 0 ? 1 : tb_server_run(&o, fd) ? 1 : 0);
            }
            close(lfd);
        }
        s.ch.fd = tb_tcp_connect(o.addr, port, (int)o.timeout_s * 1000);
        if (s.ch.fd < 0) {
            fprintf(stderr, "te-bench: cannot connect to %s:%u: %s\n", o.addr,
                    port, strerror(-s.ch.fd));
            if (child > 0)
                kill(child, SIGTERM);
            return 1;
        }
    }

    /* After the server started: it must not inherit this affinity. */
    tb_spin_wait = o.spin_wait;
    if (o.pin) { /* with the client's worker (see tb_env_open) */
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(0, &set);
        pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    }
    int rc = tb_session_hello(&s);
    if (rc) {
        fprintf(stderr, "te-bench: server handshake failed: %s\n",
                te_strerror(rc));
        return 1;
    }
    struct tb_result_row *rows;
    int n = plan(&o, &rows);
    if (n < 0) {
        fprintf(stderr, "te-bench: out of memory\n");
        return 1;
    }
    s.case_count = n;
    if (!o.json && !o.quiet)
        tb_report_header(&o, stdout);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        s.case_index = i;
        s.settings[0] = 0;
        double ref_p50[3] = {0, 0, 0};
        latency_refs(&s, &rows[i], ref_p50);
        run_case(&s, &rows[i]);
        if (rows[i].ok) {
            latency_note(&o, &rows[i], ref_p50);
            memcpy(rows[i].ref_lat_p50, ref_p50, sizeof(ref_p50));
        }
        snprintf(rows[i].settings, sizeof(rows[i].settings), "%s", s.settings);
        if (!rows[i].error[0] && !rows[i].ok)
            snprintf(rows[i].error, sizeof(rows[i].error), "did not run");
        failed |= !rows[i].ok;
        tb_progress_clear(&s);
        if (!o.json) {
            tb_report_row(&o, &rows[i], stdout);
            fflush(stdout);
        }
    }
    if (o.json)
        tb_report_json(&o, rows, n, stdout);

    tb_chan_send(&s.ch, TB_MSG_QUIT, NULL, 0, NULL, 0);
    if (o.mode == TB_M_INPROC) {
        pthread_join(ip.th, NULL);
        close(s.ch.fd);
    } else {
        close(s.ch.fd);
        if (child > 0) {
            int st = 0;
            uint64_t deadline = tb_now_ns() + (uint64_t)o.timeout_s * 1000000000ull;
            while (waitpid(child, &st, WNOHANG) == 0) {
                if (tb_now_ns() > deadline) {
                    kill(child, SIGKILL);
                    waitpid(child, &st, 0);
                    break;
                }
                tb_sleep_us(10000);
            }
        }
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < TB_LAT_SERIES; k++)
            tb_samples_free(&rows[i].lat[k]);
    free(rows);
    free(o.config_text);
    return failed ? 1 : 0;
}
