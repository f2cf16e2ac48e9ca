/*
 * The reference a bandwidth result is divided by, measured in the same run.
 *
 * memcpy: the physical limit of a same-host copy, with what the transfer
 * has: the same bytes per operation, copied in the same unit (a page for
 * paged writes), cycling over the same footprint (window slots, so the cache
 * behaves alike), from a buffer allocated like the benchmark's, by the same
 * number of threads as copy in the transfer (the target's workers).
 *
 * cma: the same, copied with process_vm_readv() out of another process
 * (the loopback transport's cross-process copy): the raw limit of that path.
 *
 * command: any program (e.g. the raw libfabric benchmark tools/fi-raw-bench)
 * run once per repetition through /bin/sh with placeholders replaced:
 * {test} {size} {chunk} {window} {threads} {ms} {region_mib}. From its standard output
 * the last "<number> GB/s" is read, else the last line starting with a
 * number.
 *
 * ucx, ucx-tcp: shorthands for such a command, tools/ucx-raw-bench (raw
 * UCX, two processes) with this case's test, size, page, window, duration
 * and footprint, over shared memory or TCP on 127.0.0.1. Bandwidth tests
 * it has an equivalent of (write, paged, read) read GB/s; the latency tests
 * (immlat, send) read its p50 in us (tb_reference_latency, from main.c).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

extern char **environ;

static uint8_t *ref_src, *ref_dst;
static size_t ref_len;

struct copier {
    pthread_t th;
    uint8_t *src, *dst;
    pid_t pid;              /* cma: the process holding src */
    uint64_t size, chunk;
    uint32_t first, slots;  /* the slots this thread cycles over */
    uint64_t until_ns;
    uint64_t bytes;
    uint64_t end_ns;
};

static void copy_chunk(const struct copier *c, uint64_t off, uint64_t n);

static void *copy_loop(void *arg)
{
    struct copier *c = arg;
    uint64_t bytes = 0;
    uint32_t w = 0;
    do {
        uint64_t base = (uint64_t)(c->first + w) * c->size;
        for (uint64_t off = 0; off < c->size; off += c->chunk) {
            uint64_t n = c->size - off < c->chunk ? c->size - off : c->chunk;
            copy_chunk(c, base + off, n);
        }
        bytes += c->size;
        w = w + 1 == c->slots ? 0 : w + 1;
    } while (tb_now_ns() < c->until_ns);
    c->bytes = bytes;
    c->end_ns = tb_now_ns();
    return NULL;
}

/*
 * cma: the same copies made with process_vm_readv() from another process
 * (a forked child that holds the source), the primitive the loopback
 * transport copies with across processes: the raw limit of that path.
 */
static pid_t cma_pid;
static uint8_t *cma_src;
static size_t cma_len;

static int cma_keep = -1;

static void cma_stop(void)
{
    if (cma_keep >= 0)
        close(cma_keep);
    cma_keep = -1;
    if (cma_pid > 0) {
        kill(cma_pid, SIGKILL);
        waitpid(cma_pid, NULL, 0);
    }
    cma_pid = 0;
    cma_src = NULL;
    cma_len = 0;
}

/*
 * The helper is te-bench itself, re-executed (posix_spawn, so no copy-on-
 * write sharing with this process: a fork would make every page of the
 * running benchmark fault on its next write). It allocates the source,
 * prints its address and waits for its stdin to close.
 */
static int cma_start(uint64_t total)
{
    cma_stop();
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
        return -errno;
    char size[32];
    snprintf(size, sizeof(size), "%llu", (unsigned long long)total);
    char *argv[] = {"te-bench", "--cma-helper", size, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    if (rc) {
        close(in[1]);
        close(out[0]);
        return -rc;
    }
    cma_pid = pid;
    char line[64] = "";
    struct pollfd pf = {.fd = out[0], .events = POLLIN};
    ssize_t n = poll(&pf, 1, 30000) == 1 ? read(out[0], line, sizeof(line) - 1)
                                         : -1; /* bounded: 30 s */
    close(out[0]);
    unsigned long long addr = 0;
    if (n <= 0 || sscanf(line, "%llx", &addr) != 1 || !addr) {
        close(in[1]);
        cma_stop();
        return -EIO;
    }
    cma_src = (uint8_t *)(uintptr_t)addr; /* an address in the helper */
    cma_len = total;
    cma_keep = in[1]; /* its stdin: closing it (or our exit) ends it */
    static int registered;
    if (!registered++)
        atexit(cma_stop);
    return 0;
}

int tb_cma_helper(const char *size_arg)
{
    uint64_t total = strtoull(size_arg, NULL, 10);
    uint8_t *p = total ? tb_alloc(total) : NULL;
    if (!p)
        return 1;
    tb_fill(p, total, 3);
    printf("%llx\n", (unsigned long long)(uintptr_t)p);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) != 0 && errno == EINTR) {
    }
    return 0;
}

static void copy_chunk(const struct copier *c, uint64_t off, uint64_t n)
{
    if (c->pid) {
        struct iovec l = {c->dst + off, n}, r = {c->src + off, n};
        if (process_vm_readv(c->pid, &l, 1, &r, 1, 0) < 0)
            memcpy(c->dst + off, c->src + off, n); /* never silently 0 */
    } else {
        memcpy(c->dst + off, c->src + off, n);
    }
}

static double ref_memcpy(const struct tb_refspec *r, char *err, size_t errlen)
{
    uint64_t total = (uint64_t)r->window * r->size;
    int cma = strcmp(r->kind, "cma") == 0;
    if (cma && total > cma_len && cma_start(total) < 0) {
        snprintf(err, errlen, "cannot start the cma helper process");
        return -EIO;
    }
    if (total > ref_len) {
        free(ref_src);
        free(ref_dst);
        ref_src = tb_alloc(total);
        ref_dst = tb_alloc(total);
        ref_len = ref_src && ref_dst ? total : 0;
        if (!ref_len) {
            snprintf(err, errlen, "cannot allocate 2 x %llu bytes",
                     (unsigned long long)total);
            return -ENOMEM;
        }
        tb_fill(ref_src, total, 3);
    }
    int t = r->threads < 1 ? 1 : r->threads > 64 ? 64 : r->threads;
    if ((uint32_t)t > r->window)
        t = (int)r->window;
    struct copier c[64];
    uint64_t start = tb_now_ns();
    for (int i = 0; i < t; i++) {
        c[i] = (struct copier){.src = cma ? cma_src : ref_src, .dst = ref_dst,
                               .pid = cma ? cma_pid : 0, .size = r->size,
                               .chunk = r->chunk ? r->chunk : r->size,
                               .first = r->window * (uint32_t)i / (uint32_t)t,
                               .until_ns = start + (uint64_t)r->rep_ms * 1000000ull};
        c[i].slots = r->window * (uint32_t)(i + 1) / (uint32_t)t - c[i].first;
        if (i && pthread_create(&c[i].th, NULL, copy_loop, &c[i]))
            t = i; /* fewer threads than asked: still a valid measurement */
    }
    copy_loop(&c[0]);
    uint64_t bytes = c[0].bytes, end = c[0].end_ns;
    for (int i = 1; i < t; i++) {
        pthread_join(c[i].th, NULL);
        bytes += c[i].bytes;
        if (c[i].end_ns > end)
            end = c[i].end_ns;
    }
    return (double)bytes / (double)(end - start);
}

/* Replace {name} placeholders. */
static void expand(const struct tb_refspec *r, char *out, size_t len)
{
    struct { const char *k; char v[32]; } vars[] = {
        {"{test}", ""}, {"{size}", ""}, {"{chunk}", ""},
        {"{window}", ""}, {"{threads}", ""}, {"{ms}", ""},
        {"{region_mib}", ""}};
    snprintf(vars[0].v, 32, "%s", r->test);
    snprintf(vars[1].v, 32, "%llu", (unsigned long long)r->size);
    snprintf(vars[2].v, 32, "%llu", (unsigned long long)r->chunk);
    snprintf(vars[3].v, 32, "%u", r->window);
    snprintf(vars[4].v, 32, "%d", r->threads);
    snprintf(vars[5].v, 32, "%u", r->rep_ms);
    /* The footprint the transfer cycles over (window slots), in whole MiB
     * rounded up, so that a raw program can touch the same amount of
     * memory: cache-resident or not changes bandwidth several-fold. */
    uint64_t fp = r->size * (r->window ? r->window : 1);
    snprintf(vars[6].v, 32, "%llu", (unsigned long long)((fp + (1u << 20) - 1) >> 20));
    size_t o = 0;
    for (const char *p = r->kind; *p && o + 1 < len;) {
        int hit = 0;
        for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
            size_t kl = strlen(vars[i].k);
            if (strncmp(p, vars[i].k, kl) == 0) {
                o += (size_t)snprintf(out + o, len - o, "%s", vars[i].v);
                p += kl;
                hit = 1;
                break;
            }
        }
        if (!hit)
            out[o++] = *p++;
        if (o >= len)
            o = len - 1;
    }
    out[o] = 0;
}

static double ref_command(const struct tb_refspec *r, char *err, size_t errlen)
{
    char raw[2048], cmd[8192], line[512];
    expand(r, raw, sizeof(raw));
    /* `timeout` bounds a reference that hangs; quote for sh -c '...'. */
    size_t o = (size_t)snprintf(cmd, sizeof(cmd), "timeout 120 sh -c '");
    for (const char *p = raw; *p && o + 6 < sizeof(cmd); p++) {
        if (*p == '\'') {
            memcpy(cmd + o, "'\\''", 4);
            o += 4;
        } else {
            cmd[o++] = *p;
        }
    }
    cmd[o++] = '\'';
    cmd[o] = 0;
    FILE *f = popen(cmd, "r");
    if (!f) {
        snprintf(err, errlen, "cannot run: %s", cmd);
        return -errno;
    }
    /* The last "<number> GB/s" printed, else the last line that starts
     * with a number (fi-raw-bench prints "... 12.3 GB/s ..."). */
    double v = -1, unit = -1;
    while (fgets(line, sizeof(line), f)) {
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        char *end;
        double x = strtod(p, &end);
        if (end != p)
            v = x;
        for (char *q = strstr(line, "GB/s"); q; q = strstr(q + 1, "GB/s")) {
            char *b = q;
            while (b > line && b[-1] == ' ')
                b--;
            while (b > line && (isdigit((unsigned char)b[-1]) || b[-1] == '.'))
                b--;
            if (b < q && isdigit((unsigned char)*b))
                unit = strtod(b, NULL);
        }
    }
    if (unit >= 0)
        v = unit;
    int st = pclose(f);
    if (v < 0 || st != 0) {
        snprintf(err, errlen, "reference command failed (status %d) or printed "
                 "no number: %s", st, cmd);
        return -EIO;
    }
    return v;
}

/* ------------------------------------------------------------- ucx */

static struct {
    int no_imm;
    uint32_t lat_iters, reps, warmup, timeout_s, min_iters;
} ucx_o;

void tb_reference_setup(const struct tb_opts *o)
{
    ucx_o.no_imm = o->no_imm;
    ucx_o.lat_iters = o->lat_iters;
    ucx_o.reps = (uint32_t)o->reps;
    ucx_o.warmup = (uint32_t)o->warmup;
    ucx_o.timeout_s = o->timeout_s;
    ucx_o.min_iters = o->min_iters;
}

int tb_reference_is_ucx(const char *kind)
{
    return kind && (!strcmp(kind, "ucx") || !strcmp(kind, "ucx-tcp"));
}

/* $TE_BENCH_UCX, else ucx-raw-bench next to this binary (installed), in
 * the build tree (../ucx-raw-bench/), else the one on $PATH. */
static void ucx_path(char *out, size_t len)
{
    const char *env = getenv("TE_BENCH_UCX");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return;
    }
    char exe[3072];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) {
        *slash = 0;
        const char *rel[] = {"/ucx-raw-bench", "/../ucx-raw-bench/ucx-raw-bench"};
        for (int i = 0; i < 2; i++) {
            snprintf(out, len, "%s%s", exe, rel[i]);
            if (access(out, X_OK) == 0)
                return;
        }
    }
    snprintf(out, len, "ucx-raw-bench");
}

static double ref_ucx(const struct tb_refspec *r, char *err, size_t errlen)
{
    int lat = !strcmp(r->test, "immlat") || !strcmp(r->test, "send");
    if (strcmp(r->test, "write") && strcmp(r->test, "paged") &&
        strcmp(r->test, "read") && !lat)
        return 0; /* no UCX equivalent here (scatter, imm, post) */
    char path[3200], tmpl[4096];
    ucx_path(path, sizeof(path));
    /* Latency: as many samples (and warm-up samples) as the case takes. */
    snprintf(tmpl, sizeof(tmpl),
             "%s --tls %s --test {test} --size {size} --chunk {chunk} "
             "--window {window} --ms {ms} --min-iters %u --iters %u "
             "--warmup %u --timeout %u%s",
             path, strcmp(r->kind, "ucx-tcp") ? "shm" : "tcp", ucx_o.min_iters,
             ucx_o.lat_iters * (ucx_o.reps ? ucx_o.reps : 1),
             ucx_o.lat_iters * ucx_o.warmup, ucx_o.timeout_s,
             ucx_o.no_imm ? " --no-imm" : "");
    struct tb_refspec c = *r;
    c.kind = tmpl;
    if (!c.chunk)
        c.chunk = c.size ? c.size : 1;
    return ref_command(&c, err, errlen);
}

double tb_reference_latency(const struct tb_refspec *r, char *err,
                            size_t errlen)
{
    return tb_reference_is_ucx(r->kind) ? ref_ucx(r, err, errlen) : 0;
}

double tb_reference(const struct tb_refspec *r, char *err, size_t errlen)
{
    if (tb_reference_is_ucx(r->kind))
        return ref_ucx(r, err, errlen);
    if (!r->kind || strcmp(r->kind, "none") == 0 ||
        strcmp(r->kind, "write") == 0) /* "write" runs in test_bw.c */
        return 0;
    if (strcmp(r->kind, "memcpy") == 0 || strcmp(r->kind, "cma") == 0)
        return ref_memcpy(r, err, errlen);
    return ref_command(r, err, errlen);
}
