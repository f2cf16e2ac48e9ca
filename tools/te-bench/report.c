/*
 * Output: a progress line on a terminal, the table for people, one JSON
 * document for machines. Throughput is the median of the repetitions; the
 * reference ratio is median(result) / median(reference) of the same run.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "bench.h"

/*
 * The ratio to reference k: the median of the per-repetition ratios (each
 * repetition is measured right after its reference repetition, so load
 * that changes within seconds hits both sides of one pair alike).
 */
static double paired_ratio(const struct tb_result_row *r, int k)
{
    double v[64];
    int n = 0;
    for (int i = 0; i < r->nreps && i < r->ref[k].n && n < 64; i++)
        if (r->ref[k].gbs[i] > 0)
            v[n++] = r->gbs[i] / r->ref[k].gbs[i];
    return n ? tb_median(v, n) : NAN;
}

static int progress_on(const struct tb_opts *o)
{
    return o->progress > 0 && isatty(2);
}

void tb_progress(const struct tb_session *s, const char *fmt, ...)
{
    if (!progress_on(s->o))
        return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "\r\033[K[%d/%d] %s", s->case_index + 1, s->case_count, msg);
    fflush(stderr);
}

void tb_progress_clear(const struct tb_session *s)
{
    if (progress_on(s->o))
        fprintf(stderr, "\r\033[K");
}

void tb_machine(char *buf, size_t len)
{
    char model[128] = "unknown CPU", line[256];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof(line), f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && c) {
            snprintf(model, sizeof(model), "%s", c + 2);
            model[strcspn(model, "\n")] = 0;
            break;
        }
    }
    if (f)
        fclose(f);
    struct utsname u;
    uname(&u);
    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    snprintf(buf, len, "%ld CPUs %s, Linux %s, load %.2f",
             sysconf(_SC_NPROCESSORS_ONLN), model, u.release, load[0]);
}

static const char *mode_name(const struct tb_opts *o)
{
    int m = o->mode;
    if (o->self)
        return "one process, one engine (--self)";
    return m == TB_M_INPROC ? "one process" : m == TB_M_TWOPROC ? "two processes"
           : m == TB_M_CLIENT ? "client of a remote server" : "server";
}

void tb_report_header(const struct tb_opts *o, FILE *f)
{
    char m[256];
    tb_machine(m, sizeof(m));
    fprintf(f, "te-bench %s (TransferEngine %s): plugin %s, %s; %d reps "
            "(median) + %d warm-up; reference %s\nmachine: %s\n", TB_VERSION,
            te_version(), o->plugin_eff, mode_name(o), o->reps, o->warmup,
            o->reference, m);
    fprintf(f, "units: GB/s = 1e9 B payload/s, Gbps = 1e9 bit/s, M op/s = "
            "1e6 op/s, latency in us\n");
    fprintf(f, "%-8s %-9s %-7s %4s %4s | %8s %8s %8s | %8s %6s | %8s %8s %8s\n",
            "test", "size", "page", "nics", "win", "GB/s", "Gbps", "M op/s",
            "ref GB/s", "ratio", "p50 us", "p99 us", "p99.9 us");
}

static void cell(FILE *f, double v, int w, int prec)
{
    if (isnan(v) || v == 0)
        fprintf(f, " %*s", w, "-");
    else
        fprintf(f, " %*.*f", w, prec, v);
}

void tb_report_row(const struct tb_opts *o, const struct tb_result_row *r,
                   FILE *f)
{
    char sz[32], pg[32] = "-";
    tb_fmt_size(r->c.size, sz, sizeof(sz));
    if (r->c.test == TB_T_PAGED)
        tb_fmt_size(r->c.page, pg, sizeof(pg));
    fprintf(f, "%-8s %-9s %-7s %4d %4u |", tb_test_name(r->c.test), sz, pg,
            r->nics_used, r->c.window);
    if (!r->ok) {
        fprintf(f, " FAILED: %s\n", r->error);
        return;
    }
    double g = tb_median(r->gbs, r->nreps), mo = tb_median(r->mops, r->nreps);
    /* The table's reference: the first one measured for this row. */
    int rk = 0;
    while (rk < r->nref && !r->ref[rk].n)
        rk++;
    double ref = rk < r->nref ? tb_median(r->ref[rk].gbs, r->ref[rk].n) : NAN;
    cell(f, g, 8, 3);
    cell(f, g * 8, 8, 2);
    cell(f, mo, 8, 3);
    fprintf(f, " |");
    cell(f, ref, 8, 3);
    cell(f, rk < r->nref && ref > 0 ? paired_ratio(r, rk) : NAN, 6, 3);
    fprintf(f, " |");
    cell(f, tb_percentile(&r->lat[0], 50), 8, 2);
    cell(f, tb_percentile(&r->lat[0], 99), 8, 2);
    cell(f, tb_percentile(&r->lat[0], 99.9), 8, 2);
    fprintf(f, "\n");
    if (r->nreps > 1)
        fprintf(f, "           throughput min..max of %d reps: %.3f..%.3f GB/s, "
                "%.3f..%.3f M op/s\n", r->nreps, tb_min(r->gbs, r->nreps),
                tb_max(r->gbs, r->nreps), tb_min(r->mops, r->nreps),
                tb_max(r->mops, r->nreps));
    for (int k = 0; k < r->nref; k++) {
        if (!r->ref[k].n)
            continue; /* e.g. "write" for a test that is a write */
        double x = tb_median(r->ref[k].gbs, r->ref[k].n);
        fprintf(f, "           reference %s (%d thread%s): %.3f GB/s -> ratio "
                "%.3f (median of per-rep ratios; of medians %.3f)%s\n",
                r->ref[k].kind, r->ref_threads, r->ref_threads == 1 ? "" : "s",
                x, paired_ratio(r, k), x > 0 ? g / x : NAN,
                k == rk ? " (the table's)" : "");
    }
    if (r->link_gbps > 0)
        fprintf(f, "           link caps: %.1f Gbps in total -> %.3f of the "
                "caps\n", r->link_gbps, g * 8 / r->link_gbps);
    for (int i = 0; i < TB_LAT_SERIES; i++) {
        if (!r->lat_what[i] || !r->lat[i].n)
            continue;
        fprintf(f, "           %s%s: p50 %.2f  p99 %.2f  p99.9 %.2f us (%zu "
                "samples)\n", i == 0 ? "latency = " : "also: ", r->lat_what[i],
                tb_percentile(&r->lat[i], 50), tb_percentile(&r->lat[i], 99),
                tb_percentile(&r->lat[i], 99.9), r->lat[i].n);
    }
    if (r->note)
        fprintf(f, "           note: %s\n", r->note);
    (void)o;
}

/* ------------------------------------------------------------ JSON */

static void jstr(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void jnum(FILE *f, double v)
{
    if (isnan(v) || isinf(v))
        fprintf(f, "null");
    else
        fprintf(f, "%.6g", v);
}

static void jseries(FILE *f, const double *v, int n)
{
    fprintf(f, "{\"median\": ");
    jnum(f, n ? tb_median(v, n) : NAN);
    fprintf(f, ", \"min\": ");
    jnum(f, n ? tb_min(v, n) : NAN);
    fprintf(f, ", \"max\": ");
    jnum(f, n ? tb_max(v, n) : NAN);
    fprintf(f, ", \"reps\": [");
    for (int i = 0; i < n; i++) {
        fprintf(f, i ? ", " : "");
        jnum(f, v[i]);
    }
    fprintf(f, "]}");
}

/* One reference object; k beyond the measured ones prints kind "none". */
static void jref(FILE *f, const struct tb_result_row *r, int k, double g)
{
    int have = k < r->nref;
    double ref = have ? tb_median(r->ref[k].gbs, r->ref[k].n) : NAN;
    fprintf(f, "{\"kind\": ");
    jstr(f, have ? r->ref[k].kind : "none");
    fprintf(f, ", \"threads\": %d, \"gbs\": ", r->ref_threads);
    jseries(f, have ? r->ref[k].gbs : NULL, have ? r->ref[k].n : 0);
    fprintf(f, ", \"ratio\": ");
    jnum(f, have && ref > 0 && r->nreps ? paired_ratio(r, k) : NAN);
    fprintf(f, ", \"ratio_of_medians\": ");
    jnum(f, have && ref > 0 && r->nreps ? g / ref : NAN);
    fprintf(f, "}");
}

void tb_report_json(const struct tb_opts *o, struct tb_result_row *rows, int n,
                    FILE *f)
{
    char m[256];
    tb_machine(m, sizeof(m));
    fprintf(f, "{\n  \"tool\": \"te-bench\", \"version\": ");
    jstr(f, TB_VERSION);
    fprintf(f, ", \"transferengine\": ");
    jstr(f, te_version());
    fprintf(f, ",\n  \"machine\": ");
    jstr(f, m);
    fprintf(f, ", \"plugin\": ");
    jstr(f, o->plugin_eff);
    fprintf(f, ", \"mode\": ");
    jstr(f, mode_name(o));
    fprintf(f, ", \"reps\": %d, \"warmup\": %d, \"reference\": ", o->reps,
            o->warmup);
    jstr(f, o->reference);
    fprintf(f, ",\n  \"units\": {\"gbs\": \"1e9 bytes of payload per second\", "
            "\"gbit\": \"1e9 bits per second\", \"mops\": \"1e6 operations per "
            "second\", \"latency\": \"microseconds\"},\n  \"results\": [");
    for (int i = 0; i < n; i++) {
        const struct tb_result_row *r = &rows[i];
        double g = tb_median(r->gbs, r->nreps);
        fprintf(f, "%s\n    {\"test\": ", i ? "," : "");
        jstr(f, tb_test_name(r->c.test));
        fprintf(f, ", \"plugin\": ");
        jstr(f, r->plugin);
        fprintf(f, ", \"ok\": %s, \"error\": ", r->ok ? "true" : "false");
        jstr(f, r->error);
        fprintf(f, ",\n     \"size\": %llu, \"page\": %llu, \"nics\": %d, "
                "\"window\": %u, \"peers\": %u, \"imm_batch\": %u,\n",
                (unsigned long long)r->c.size, (unsigned long long)r->c.page,
                r->nics_used, r->c.window, r->c.peers, r->c.batch);
        fprintf(f, "     \"gbs\": ");
        jseries(f, r->gbs, r->nreps);
        fprintf(f, ", \"gbit\": ");
        jnum(f, r->nreps ? g * 8 : NAN);
        fprintf(f, ",\n     \"mops\": ");
        jseries(f, r->mops, r->nreps);
        /* "reference": the ratio's divisor; "references": all measured */
        int rk = 0; /* the first reference measured for this row */
        while (rk < r->nref && !r->ref[rk].n)
            rk++;
        fprintf(f, ",\n     \"reference\": ");
        jref(f, r, rk, g);
        fprintf(f, ", \"references\": [");
        for (int k = 0; k < r->nref; k++) {
            fprintf(f, k ? ", " : "");
            jref(f, r, k, g);
        }
        fprintf(f, "]");
        fprintf(f, ",\n     \"link_gbps\": ");
        jnum(f, r->link_gbps);
        fprintf(f, ", \"ratio_links\": ");
        jnum(f, r->link_gbps > 0 && r->nreps ? g * 8 / r->link_gbps : NAN);
        fprintf(f, ",\n     \"settings\": ");
        jstr(f, r->settings);
        fprintf(f, ", \"probe\": %s, \"note\": ", r->probe_used ? "true" : "false");
        jstr(f, r->note ? r->note : "");
        /* The latency references as numbers (the note words them). */
        fprintf(f, ",\n     \"reference_latency\": [");
        for (int k = 0, shown = 0; k < o->nrefs; k++) {
            if (!(r->ref_lat_p50[k] > 0))
                continue;
            fprintf(f, "%s{\"kind\": ", shown++ ? ", " : "");
            jstr(f, o->refs[k]);
            fprintf(f, ", \"p50_us\": ");
            jnum(f, r->ref_lat_p50[k]);
            fprintf(f, "}");
        }
        fprintf(f, "]");
        fprintf(f, ",\n     \"latency\": {");
        int first = 1;
        for (int k = 0; k < TB_LAT_SERIES; k++) {
            if (!r->lat_key[k])
                continue;
            fprintf(f, "%s\n       ", first ? "" : ",");
            first = 0;
            jstr(f, r->lat_key[k]);
            fprintf(f, ": {\"what\": ");
            jstr(f, r->lat_what[k]);
            fprintf(f, ", \"samples\": %zu, \"min\": ", r->lat[k].n);
            jnum(f, tb_percentile(&r->lat[k], 0));
            fprintf(f, ", \"p10\": ");
            jnum(f, tb_percentile(&r->lat[k], 10));
            fprintf(f, ", \"p50\": ");
            jnum(f, tb_percentile(&r->lat[k], 50));
            fprintf(f, ", \"p99\": ");
            jnum(f, tb_percentile(&r->lat[k], 99));
            fprintf(f, ", \"p999\": ");
            jnum(f, tb_percentile(&r->lat[k], 99.9));
            fprintf(f, ", \"max\": ");
            jnum(f, tb_percentile(&r->lat[k], 100));
            fprintf(f, "}");
        }
        fprintf(f, "}}");
    }
    fprintf(f, "\n  ]\n}\n");
}
