/*
 * te-bench --test waitlat: submit of a WriteImm -> te_imm_wait() returns at
 * the target, one process, loopback, with engine.waiter_progress on and off
 * in the same run (two engine pairs, samples interleaved). The engines are
 * idle between samples (--gap-us, 200 by default: an application between
 * layers), so their workers may be asleep when the write arrives: with
 * waiter_progress the waiting thread takes the target's turn itself
 * (docs/progress.md, "Waiters progress a sleeping group").
 *
 *   te-bench --test waitlat [--iters N] [--size BYTES] [--gap-us US]
 *            [--set section.key=value ...]   (applied to all four engines)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "te/te.h"
#include "alone_args.h"
#include "test_waitlat.h"

#define WL_IMM 0x6100u

struct wl_pair {
    te_engine *a, *b;
    te_peer pb;
    uint8_t *src, *dst;
    te_mr *smr, *dmr;
    te_mr_desc dd;
};

static int wl_open(struct wl_pair *p, int helps, const char *const *sets,
                   int nsets, size_t len)
{
    memset(p, 0, sizeof(*p));
    struct tb_sets mode = {0};
    tb_sets_add(&mode, "engine.waiter_progress=%s", helps ? "true" : "false");
    char err[512] = "";
    int rc = mode.n == 1 ? 0 : -ENOMEM;
    if (!rc)
        rc = tb_engine_create(NULL, sets, nsets, &mode, 0, &p->a, err,
                              sizeof(err));
    if (!rc)
        rc = tb_engine_create(NULL, sets, nsets, &mode, 0, &p->b, err,
                              sizeof(err));
    tb_sets_free(&mode);
    if (rc) {
        fprintf(stderr, "te-bench: waitlat engines: %s\n",
                err[0] ? err : "out of memory");
        return rc;
    }
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    size_t room = len ? len : 1;
    if (!(p->src = calloc(1, room)) || !(p->dst = calloc(1, room)))
        rc = -ENOMEM;
    if (!rc)
        rc = te_engine_address(p->b, 0, addr, &alen);
    if (!rc)
        rc = te_peer_add(p->a, 0, addr, alen, &p->pb);
    if (!rc)
        rc = te_mr_reg(p->a, 0, p->src, room, 0, TE_MEM_HOST, &p->smr);
    if (!rc)
        rc = te_mr_reg(p->b, 0, p->dst, room, TE_MR_REMOTE_WRITE, TE_MEM_HOST,
                       &p->dmr);
    if (!rc)
        rc = te_mr_describe(p->dmr, &p->dd);
    if (rc)
        fprintf(stderr, "te-bench: waitlat engines: %s\n", te_last_error());
    return rc;
}

static void wl_close(struct wl_pair *p)
{
    if (p->smr)
        te_mr_dereg(p->a, p->smr);
    if (p->dmr)
        te_mr_dereg(p->b, p->dmr);
    te_engine_destroy(p->a);
    te_engine_destroy(p->b);
    free(p->src);
    free(p->dst);
}

/* One sample: submit -> te_imm_wait returns; the write's completion is
 * taken after the clock stops. */
static int wl_sample(struct wl_pair *p, size_t len, struct tb_samples *us)
{
    te_request q = tb_imm_write(p->pb, p->smr, &p->dd, len, WL_IMM);
    uint64_t t0 = tb_now_ns();
    if (te_submit(p->a, &q) < 0 || te_imm_wait(p->b, WL_IMM, 1, 10000)) {
        fprintf(stderr, "te-bench: waitlat: %s\n", te_last_error());
        return -1;
    }
    tb_samples_add(us, (double)(tb_now_ns() - t0) / 1e3);
    te_completion c;
    if (te_poll_completions(p->a, &c, 1, 10000) != 1 || c.status) {
        fprintf(stderr, "te-bench: waitlat: write did not complete\n");
        return -1;
    }
    return 0;
}

int tb_waitlat_main(int argc, char **argv)
{
    struct tb_alone_args args = {.iters = 2000, .iters_max = 1000000,
                                 .gap_us = 200, .len = 8};
    if (tb_alone_parse(argc, argv, "waitlat",
                       TB_ARG_ITERS | TB_ARG_SIZE | TB_ARG_GAP | TB_ARG_SET,
                       &args))
        return 2;
    int iters = (int)args.iters;
    long gap_us = args.gap_us;
    unsigned long long len = args.len;
    const char *const *sets = args.sets;
    int nsets = args.nsets;
    struct wl_pair p[2];
    memset(p, 0, sizeof(p));
    struct tb_samples us[2]; /* [0]: waiter_progress off, [1]: on */
    memset(us, 0, sizeof(us));
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++)
        if (wl_open(&p[k], k, sets, nsets, (size_t)len))
            rc = 1;
    struct timespec gap = {gap_us / 1000000, (gap_us % 1000000) * 1000};
    for (int i = 0; i < 2 * iters && !rc; i++) {
        nanosleep(&gap, NULL);
        if (wl_sample(&p[i & 1], (size_t)len, &us[i & 1]))
            rc = 1;
    }
    if (!rc) {
        double off = tb_percentile(&us[0], 50), on = tb_percentile(&us[1], 50);
        printf("# waitlat: submit -> te_imm_wait returns, one process, "
               "loopback, %llu bytes, %ld us idle before each, %d samples "
               "each, interleaved\n"
               "waiter_progress_on_us p50 %.2f p99 %.2f | "
               "waiter_progress_off_us p50 %.2f p99 %.2f | off/on %.2f\n",
               len, gap_us, iters, on, tb_percentile(&us[1], 99), off,
               tb_percentile(&us[0], 99), off / on);
    }
    for (int k = 0; k < 2; k++)
        if (p[k].a || p[k].b)
            wl_close(&p[k]);
    tb_samples_free(&us[0]);
    tb_samples_free(&us[1]);
    return rc;
}
