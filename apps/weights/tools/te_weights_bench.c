/*
 * te-weights bench: the update measured on real processes, against the
 * simulator, on the loopback transport.
 *
 * For a small model it writes two checkpoints and a schedule into a
 * temporary directory, then runs the whole job (M `te-weights infer` and
 * N `te-weights train` processes pushing --runs versions) twice:
 *   1. uncapped: calibrates the per-operation cost (the simulator's
 *      write/read overhead) on this machine;
 *   2. with loopback.link_gbps = --link-gbps on every NIC: the measured
 *      update time (last write done - first write submitted, across all
 *      trainers; the median over versions 2..runs, version 1 also opens
 *      the connections) against the simulator's prediction with the
 *      calibrated overhead, and the aggregate write rate against the sum
 *      of the receivers' link caps (the loopback cap charges the NIC where
 *      the bytes land).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "te_weights_cli.h"

#define MAX_PROCS 64
#define MAX_RUNS 16

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n ? (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : 0;
}

struct job_result {
    double wall[MAX_RUNS];   /* per version */
    double bytes[MAX_RUNS];
    double ops_max[MAX_RUNS]; /* most operations of one trainer */
    int ok;
};

static pid_t spawn(const char *self, char **args, const char *log, const char *link)
{
    pid_t p = fork();
    if (p == 0) {
        FILE *f = freopen(log, "w", stdout);
        if (!f || !freopen(log, "a", stderr))
            _exit(127);
        if (link)
            setenv("TE_LOOPBACK_LINK_GBPS", link, 1);
        execv(self, args);
        _exit(127);
    }
    return p;
}

/* Run the job once; parse the trainers' logs. */
int mkdir_p(const char *path);

static int run_job(const struct wt_cli *o, const char *self, const char *dir,
                   const char *sched, const char *c1, const char *c2,
                   const char *link, const char *tag, struct job_result *res)
{
    char rv[4200], log[4300], rank[16], timeout[16];
    snprintf(rv, sizeof(rv), "%s/rv-%s", dir, tag);
    if (mkdir_p(rv))
        return -1;
    snprintf(timeout, sizeof(timeout), "%d", o->timeout_ms);
    char upd[MAX_RUNS][4200];
    pid_t pids[MAX_PROCS];
    int np = 0;
    uint32_t total = o->ranks + o->trainers;
    if (total > MAX_PROCS)
        return fprintf(stderr, "te-weights bench: at most %d processes\n", MAX_PROCS), -1;
    for (uint32_t i = 0; i < total; i++) {
        int train = i >= o->ranks;
        uint32_t r = train ? i - o->ranks : i;
        snprintf(rank, sizeof(rank), "%u", r);
        char *args[16 + 2 * MAX_RUNS];
        int a = 0;
        args[a++] = (char *)self;
        args[a++] = train ? "train" : "infer";
        args[a++] = "--model";
        args[a++] = (char *)c1;
        args[a++] = "--schedule";
        args[a++] = (char *)sched;
        args[a++] = "--dir";
        args[a++] = rv;
        args[a++] = "--rank";
        args[a++] = rank;
        args[a++] = "--timeout-ms";
        args[a++] = timeout;
        for (int v = 1; v <= o->runs; v++) {
            snprintf(upd[v - 1], sizeof(upd[0]), "%d=%s", v, v % 2 ? c1 : c2);
            args[a++] = "--update";
            args[a++] = upd[v - 1];
        }
        args[a] = NULL;
        snprintf(log, sizeof(log), "%s/%s-%s%u.log", dir, tag, train ? "train" : "infer", r);
        pids[np++] = spawn(self, args, log, link);
    }
    int bad = 0;
    for (int i = 0; i < np; i++) {
        int st;
        if (i == (int)o->ranks) { /* receivers done: release the trainers */
            snprintf(log, sizeof(log), "%s/done", rv);
            FILE *f = fopen(log, "w");
            if (f)
                fclose(f);
        }
        if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
            bad = 1;
    }
    memset(res, 0, sizeof(*res));
    double first[MAX_RUNS], last[MAX_RUNS];
    for (int v = 0; v < MAX_RUNS; v++) {
        first[v] = 1e300;
        last[v] = 0;
    }
    for (uint32_t t = 0; t < o->trainers; t++) {
        snprintf(log, sizeof(log), "%s/%s-train%u.log", dir, tag, t);
        FILE *f = fopen(log, "r");
        char line[1024];
        while (f && fgets(line, sizeof(line), f)) {
            unsigned tr, v;
            unsigned long long w, wb, rd, rb, peak;
            double secs, s0, s1;
            if (sscanf(line, "train %u: version %u pushed: %llu writes %llu bytes, %llu "
                       "reads %llu bytes, peak in flight %llu bytes, %lf s [%lf %lf]",
                       &tr, &v, &w, &wb, &rd, &rb, &peak, &secs, &s0, &s1) == 10 &&
                v >= 1 && v <= MAX_RUNS) {
                if (s0 < first[v - 1]) first[v - 1] = s0;
                if (s1 > last[v - 1]) last[v - 1] = s1;
                res->bytes[v - 1] += (double)wb;
                if ((double)(w + rd) > res->ops_max[v - 1])
                    res->ops_max[v - 1] = (double)(w + rd);
            }
        }
        if (f)
            fclose(f);
    }
    for (int v = 0; v < o->runs; v++)
        res->wall[v] = last[v] > 0 ? last[v] - first[v] : 0;
    res->ok = !bad;
    if (bad)
        fprintf(stderr, "te-weights bench: a process failed (logs in %s)\n", dir);
    return bad ? -1 : 0;
}

int mkdir_p(const char *path)
{
    char cmd[4300];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
    return system(cmd) ? -1 : 0;
}

int wt_cmd_bench(const struct wt_cli *o, const char *self_arg)
{
    struct wt_cli lo = *o;
    if (lo.runs < 3 || lo.runs > MAX_RUNS)
        lo.runs = lo.runs < 3 ? 3 : MAX_RUNS;
    if (!lo.link_gbps)
        lo.link_gbps = "1";
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return fprintf(stderr, "te-weights bench: cannot find myself (%s)\n", self_arg), 1;
    self[n] = 0;
    char dir[] = "/tmp/te-weights-bench.XXXXXX";
    if (!mkdtemp(dir))
        return fprintf(stderr, "te-weights bench: mkdtemp: %s\n", strerror(errno)), 1;
    char c1[4200], c2[4200], sched[4200];
    snprintf(c1, sizeof(c1), "%s/c1.safetensors", dir);
    snprintf(c2, sizeof(c2), "%s/c2.safetensors", dir);
    snprintf(sched, sizeof(sched), "%s/schedule.bin", dir);
    /* Checkpoints and schedule through the same commands a user runs. */
    char *cmd = NULL;
    int len = asprintf(&cmd,
             "'%s' gen --model %s --seed 1 --out '%s' >/dev/null && "
             "'%s' gen --model %s --seed 2 --out '%s' >/dev/null && "
             "'%s' plan --model '%s' --trainers %u --ranks %u --tp %u --ep %u %s "
             "--nics %u --watermark %llu --out '%s' >/dev/null", self, lo.model, c1,
             self, lo.model, c2, self, c1, lo.trainers, lo.ranks, lo.tp,
             lo.ep ? lo.ep : lo.ranks, lo.fp8 ? "--fp8" : "", lo.nics,
             (unsigned long long)lo.watermark_mib, sched);
    if (len < 0 || system(cmd))
        return fprintf(stderr, "te-weights bench: setup failed: %s\n", cmd ? cmd : "?"), 1;
    free(cmd);
    struct job_result free_run, capped;
    if (run_job(&lo, self, dir, sched, c1, c2, NULL, "uncapped", &free_run) ||
        run_job(&lo, self, dir, sched, c1, c2, lo.link_gbps, "capped", &capped))
        return 1;
    double w_free[MAX_RUNS], w_cap[MAX_RUNS], per_op[MAX_RUNS];
    int k = 0;
    for (int v = 1; v < lo.runs; v++, k++) {
        w_free[k] = free_run.wall[v];
        w_cap[k] = capped.wall[v];
        per_op[k] = free_run.ops_max[v] ? free_run.wall[v] / free_run.ops_max[v] : 0;
    }
    double bytes = capped.bytes[1];
    double t_free = median(w_free, k), t_cap = median(w_cap, k);
    double op_us = median(per_op, k) * 1e6;
    double gbps = atof(lo.link_gbps);
    double caps = gbps * lo.nics * lo.ranks;
    double agg = bytes * 8 / t_cap / 1e9;
    /* The simulator on the same schedule, with the calibrated overhead. */
    te_wt_model *m;
    te_wt_sharding *sh;
    te_wt_schedule *s;
    te_wt_sim_result r;
    struct wt_cli mo = lo;
    mo.model = c1;
    if (wt_cli_load(&mo, &m, &sh) ||
        te_wt_schedule_build(m, sh, lo.trainers, lo.nics, lo.watermark_mib << 20, &s))
        return 1;
    te_wt_sim_params p = {gbps, lo.nics, op_us, op_us, 0, 0, lo.watermark_mib << 20, 1};
    te_wt_simulate(m, sh, s, &p, &r);
    printf("bench: %s, %u trainers -> %u receivers (tp %u%s), %u NIC(s) each, "
           "%.2f MiB per version, %d versions (median of versions 2..%d)\n",
           m->name, lo.trainers, lo.ranks, lo.tp, lo.fp8 ? ", fp8" : "", lo.nics,
           bytes / 1048576.0, lo.runs, lo.runs);
    printf("  uncapped: %.4f s per update; calibrated cost %.1f us per operation\n",
           t_free, op_us);
    printf("  link_gbps %s: measured %.4f s, aggregate %.3f Gbps = %.3f x sum of "
           "receiver caps (%.2f Gbps)\n", lo.link_gbps, t_cap, agg, agg / caps, caps);
    printf("  simulator: %.4f s (bound by %s); measured / simulated = %.3f\n",
           r.seconds, r.bound, t_cap / r.seconds);
    te_wt_schedule_free(s);
    /* Every receiver verified its bytes (else run_job failed): clean up. */
    if (asprintf(&cmd, "rm -rf '%s'", dir) > 0) {
        if (system(cmd))
            fprintf(stderr, "te-weights bench: could not remove %s\n", dir);
        free(cmd);
    }
    te_wt_sharding_free(sh);
    te_wt_model_free(m);
    return 0;
}
