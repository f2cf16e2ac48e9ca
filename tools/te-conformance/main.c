/*
 * te-conformance: runs the conformance suite against a transport plugin.
 *   te-conformance --plugin NAME|PATH [--config F] [--set sec.key=val]...
 *                  [--two-process] [--remotes N] [--case NAME] [--list]
 * Prints one line per case ("SKIP name: why" for a case that cannot run)
 * and "N passed, M failed, K skipped" at the end, then the skipped and
 * noted cases by name; exits 0 only if nothing failed (args.c: 2 for bad
 * arguments).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "conformance.h"
#include "side.h"

char **conf_argv;
/* --remote-wrapper: command prefix for remote children (remote.c). */
const char *conf_remote_wrapper;

const struct conf_case *const conf_suites[] = {
    conf_cases_xfer, conf_cases_misc, conf_cases_fault, conf_cases_peer,
    conf_cases_spaces, NULL};

static int listed(const char *const *list, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(list[i], name) == 0)
            return 1;
    return 0;
}

/* Names (and reasons) of the skipped or noted cases, for the summary. */
struct tally {
    int passed, failed, skipped, noted;
    char skips[2048], notes[2048];
};

static void append(char *list, size_t cap, const char *name, const char *why)
{
    size_t n = strlen(list);
    snprintf(list + n, cap - n, "  %s: %s\n", name, why);
}

static void run_case(struct conf *c, const struct conf_case *k,
                     int left_out, struct tally *t)
{
    c->why[0] = c->note[0] = 0;
    uint64_t t0 = conf_now_ms();
    int r = left_out ? conf_skip(c, "left out by --skip") : k->fn(c);
    uint64_t ms = conf_now_ms() - t0;
    if (r == CONF_SKIP) {
        const char *why = c->why[0] ? c->why : "(the case gave no reason)";
        printf("SKIP %s: %s\n", k->name, why);
        append(t->skips, sizeof(t->skips), k->name, why);
        t->skipped++;
    } else {
        printf("%s %-18s %6llu ms%s%s\n", r == CONF_PASS ? "PASS" : "FAIL",
               k->name, (unsigned long long)ms, c->verbose ? "  " : "",
               c->verbose ? k->what : "");
        if (c->note[0]) {
            printf("NOTE %s: %s\n", k->name, c->note);
            append(t->notes, sizeof(t->notes), k->name, c->note);
            t->noted++;
        }
        t->passed += r == CONF_PASS;
        t->failed += r == CONF_FAIL;
    }
    fflush(stdout);
}

static void summary(const struct tally *t)
{
    printf("%d passed, %d failed, %d skipped\n", t->passed, t->failed,
           t->skipped);
    if (t->skipped)
        printf("skipped (could not run, not checked):\n%s", t->skips);
    if (t->noted)
        printf("noted (optional behaviour missing; --strict fails them):\n%s",
               t->notes);
}

/* Registers the local region and opens the remotes; 0 or an exit code. */
static int start(struct conf *c)
{
    struct conf_mem probe;
    int rc = conf_mem_alloc(&c->src_mem, CONF_REGION, conf_mem_src_cuda);
    if (!rc && conf_mem_dst_cuda && !conf_mem_src_cuda &&
        !(rc = conf_mem_alloc(&probe, 4096, 1))) /* remotes: ask now */
        conf_mem_free(&probe);
    if (rc)
        return rc == -ENOTSUP ? 77 : 1; /* 77: ctest's "skipped" */
    c->src_buf = c->src_mem.host;
    if (te_mr_reg(c->e, 0, conf_mem_region(&c->src_mem), CONF_REGION,
                  TE_MR_REMOTE_WRITE | TE_MR_REMOTE_READ,
                  conf_mem_kind(&c->src_mem), &c->src)) {
        fprintf(stderr, "te-conformance: registration: %s\n", te_last_error());
        return 1;
    }
    for (int i = 0; i < c->nremotes; i++) {
        if ((rc = conf_remote_open(c, i))) {
            /* c->err names the side that refused and keeps its words
             * (a plugin's set_error text) before anything else runs. */
            fprintf(stderr, "te-conformance: remote %d: %s: %s\n", i,
                    te_strerror(rc), c->err[0] ? c->err : "(no message)");
            return 1;
        }
    }
    return 0;
}

static void stop(struct conf *c)
{
    for (int i = 0; i < c->nremotes; i++)
        if (c->rem[i].ops)
            c->rem[i].ops->close(&c->rem[i]);
    if (c->src)
        te_mr_dereg(c->e, c->src);
    conf_engine_destroy(c->e);
    conf_mem_free(&c->src_mem);
    te_config_free(c->cfg);
}

int main(int argc, char **argv)
{
    conf_argv = argv;
    static struct conf c;
    static struct conf_args a;
    int rc = conf_args_parse(argc, argv, &c, &a);
    if (rc) {
        fprintf(stderr, "te-conformance: nothing was started\n");
        return rc;
    }
    if (a.help) {
        conf_usage(stdout);
        return 0;
    }
    if (a.plugin_set[0])
        c.sets[c.nsets++] = a.plugin_set;
    /* A remote child applies --remote-set after everything else; remotes
     * in this process get them through c.remote_sets. */
    for (int i = 0; a.serve_fd >= 0 && c.remote_sets[i]; i++)
        c.sets[c.nsets++] = c.remote_sets[i];
    if (a.serve_fd >= 0)
        c.remote_sets[0] = NULL;
    if (a.list) {
        for (int s = 0; conf_suites[s]; s++)
            for (const struct conf_case *k = conf_suites[s]; k->name; k++)
                printf("%-18s %s\n", k->name, k->what);
        return 0;
    }
    c.cfg = conf_config_with(&c, NULL);
    if (!c.cfg)
        return 2;
    if (a.serve_fd >= 0)
        return side_serve(c.cfg, a.serve_fd);

    if ((rc = conf_engine_create(c.cfg, &c.e))) {
        /* The engine checks keys and values, and finds the plugin: those
         * refusals are bad arguments (2); anything else (no device) 1. */
        int bad_args = rc == -EINVAL || rc == -ENOENT;
        fprintf(stderr, "te-conformance: %s: %s\n", bad_args
                ? "bad --plugin, --config or --set" : "cannot create engine",
                te_last_error());
        te_config_free(c.cfg);
        return bad_args ? 2 : 1;
    }
    c.plugin = te_engine_plugin_name(c.e);
    if ((rc = start(&c))) {
        stop(&c);
        return rc;
    }
    printf("te-conformance: plugin %s, %d NIC(s) per group, %d remote(s) %s\n",
           c.plugin, te_engine_nic_count(c.e, 0), c.nremotes,
           c.two_process ? "in child processes" : "in this process");
    struct tally t;
    memset(&t, 0, sizeof(t));
    for (int s = 0; conf_suites[s]; s++)
        for (const struct conf_case *k = conf_suites[s]; k->name; k++)
            if (!a.nonly || listed(a.only, a.nonly, k->name))
                run_case(&c, k, listed(a.left_out, a.nleft_out, k->name),
                         &t);
    stop(&c);
    summary(&t);
    return t.failed ? 1 : 0;
}
