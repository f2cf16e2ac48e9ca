/*
 * te-soak: many operations through two engines with faults injected, and
 * proof that nothing is lost or doubled: every request completes exactly
 * once, and each receiver-side ImmCounter ends at exactly the number of
 * requests that succeeded with that immediate.
 *
 *   te-soak [--ops N] [--window W] [--imms K] [--seconds S] [--spaces]
 *           [--set s.k=v]...
 *
 * --spaces: two subsystems share the receiving engine, each with its own
 * immediate space (te_imm_space_create) of K values, and use the SAME
 * indexes: request i goes to subsystem i % 2 with index (i / 2) % K. Each
 * subsystem's counts must come out exact: no arrival of one may be
 * credited to the other.
 *
 * Each request is one operation (a write pinned to one NIC, alternating),
 * so success or failure of a request says whether its immediate arrived.
 * Defaults inject reordering, delays of 0-20 us and a failure every 997th
 * operation on the loopback plugin (override with --set; --set with an
 * empty list via --no-faults for other plugins).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "te/te.h"
#include "te_args.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int apply(te_config *c, const char *set)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", set);
    char *dot = strchr(buf, '.'), *eq = strchr(buf, '=');
    if (!dot || !eq || dot > eq) {
        fprintf(stderr, "te-soak: --set \"%s\": expected section.key=value\n",
                set);
        return -EINVAL;
    }
    *dot = *eq = 0;
    return te_config_set(c, buf, dot + 1, eq + 1);
}

/* Counter slot of request i: subsystem i % nsub, index (i / nsub) % per,
 * where per = total / nsub values per subsystem. */
static uint32_t slot_of(uint64_t i, uint32_t nsub, uint32_t total)
{
    uint32_t per = total / nsub;
    return (uint32_t)(i % nsub) * per + (uint32_t)((i / nsub) % per);
}

int main(int argc, char **argv)
{
    uint64_t ops = 1000000;
    uint32_t window = 512, nimms = 64;
    double seconds = 600;
    int faults = 1, spaces = 0;
    const char *sets[64];
    int nsets = 0;
    static const struct option lo[] = {
        {"ops", required_argument, 0, 'n'},
        {"window", required_argument, 0, 'w'},
        {"imms", required_argument, 0, 'k'},
        {"seconds", required_argument, 0, 's'},
        {"set", required_argument, 0, 'S'},
        {"spaces", no_argument, 0, 'P'},
        {"no-faults", no_argument, 0, 'F'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int o, bad = 0;
    opterr = 0; /* te_arg_getopt_error names the option */
    while ((o = getopt_long(argc, argv, ":n:w:k:s:S:Fh", lo, NULL)) != -1) {
        switch (o) {
        /* --ops sizes a bitmap of ops / 8 bytes: 1e9 is 125 MB. */
        case 'n': bad |= te_arg_u64("te-soak", "--ops", optarg, 1, 1000000000,
                                    &ops); break;
        case 'w': bad |= te_arg_u32("te-soak", "--window", optarg, 1, 65536,
                                    &window); break;
        case 'k': bad |= te_arg_u32("te-soak", "--imms", optarg, 1, 65536,
                                    &nimms); break;
        case 'P': spaces = 1; break;
        case 's': bad |= te_arg_double("te-soak", "--seconds", optarg, 0.001,
                                       1e7, &seconds); break;
        case 'S':
            if (nsets == 64) {
                fprintf(stderr, "te-soak: --set: at most 64\n");
                return 2;
            }
            sets[nsets++] = optarg;
            break;
        case 'F': faults = 0; break;
        case 'h':
            printf("usage: te-soak [--ops N (1000000)] [--window W (512)] "
                   "[--imms K (64)] [--spaces]\n"
                   "               [--seconds S (600): stop submitting after "
                   "S]\n"
                   "               [--set section.key=value]... "
                   "[--no-faults]\n");
            return 0;
        default:
            te_arg_getopt_error("te-soak", o, argv, optind, optopt);
            return 2;
        }
    }
    if (bad || te_arg_no_operands("te-soak", argc, argv, optind))
        return 2;
    te_config *cfg = te_config_new();
    te_config_set(cfg, "engine", "nics_per_group", "2");
    te_config_set(cfg, "engine", "completion_queue_depth", "65536");
    if (faults) {
        te_config_set(cfg, "loopback", "fault_reorder", "true");
        te_config_set(cfg, "loopback", "fault_fail_every", "997");
        te_config_set(cfg, "loopback", "fault_delay_us", "5");
        te_config_set(cfg, "loopback", "fault_seed", "12345");
    }
    for (int i = 0; i < nsets; i++)
        if (apply(cfg, sets[i]))
            return 2;
    te_engine *a, *b;
    if (te_engine_create(cfg, &a) || te_engine_create(cfg, &b)) {
        fprintf(stderr, "te-soak: engine: %s\n", te_last_error());
        return 1;
    }
    te_config_free(cfg);
    enum { SLOT = 64 };
    size_t size = (size_t)window * SLOT;
    uint8_t *src = calloc(1, size), *dst = calloc(1, size);
    te_mr *smr, *dmr;
    te_mr_desc d;
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    te_peer p;
    if (te_mr_reg(a, 0, src, size, 0, TE_MEM_HOST, &smr) ||
        te_mr_reg(b, 0, dst, size, TE_MR_REMOTE_WRITE, TE_MEM_HOST, &dmr) ||
        te_mr_describe(dmr, &d) || te_engine_address(b, 0, addr, &alen) ||
        te_peer_add(a, 0, addr, alen, &p)) {
        fprintf(stderr, "te-soak: setup: %s\n", te_last_error());
        return 1;
    }
    int nics = te_engine_nic_count(a, 0);
    /* The raw immediate of each (subsystem, index): a flat range without
     * --spaces, else the value of index k in subsystem s's own space. */
    uint32_t nsub = spaces ? 2 : 1;
    uint32_t *raw = calloc((size_t)nsub * nimms, sizeof(uint32_t));
    te_imm_space *space[2] = {NULL, NULL};
    for (uint32_t s = 0; s < nsub; s++) {
        if (spaces && te_imm_space_create(b, s ? "soak-B" : "soak-A", nimms, 0,
                                          0, 0, &space[s])) {
            fprintf(stderr, "te-soak: space: %s\n", te_last_error());
            return 1;
        }
        for (uint32_t k = 0; k < nimms; k++)
            if (spaces)
                te_imm_space_value(space[s], k, &raw[s * nimms + k]);
            else
                raw[k] = 0x50000u + k;
    }
    nimms *= nsub; /* counters below are per (subsystem, index) */
    uint64_t *want = calloc(nimms, sizeof(uint64_t));
    uint8_t *seen = calloc((size_t)(ops + 7) / 8, 1);
    uint64_t submitted = 0, completed = 0, failed = 0, dup = 0, bad_id = 0;
    uint32_t outstanding = 0;
    te_completion cq[256];
    double t0 = now_s(), stop_at = t0 + seconds, last_report = t0;
    while (completed < submitted || (submitted < ops && now_s() < stop_at)) {
        while (outstanding < window && submitted < ops && now_s() < stop_at) {
            te_request r = {.size = sizeof(te_request)};
            r.op = TE_OP_WRITE;
            r.flags = TE_F_IMM;
            r.imm = raw[slot_of(submitted, nsub, nimms)];
            r.route.kind = TE_ROUTE_PIN;
            r.route.nic = (uint32_t)(submitted % (uint64_t)nics);
            r.timeout_ms = -1;
            r.user_data = submitted;
            r.u.xfer.peer = p;
            r.u.xfer.local = smr;
            r.u.xfer.local_off = (submitted % window) * SLOT;
            r.u.xfer.remote = &d;
            r.u.xfer.remote_off = (submitted % window) * SLOT;
            r.u.xfer.len = submitted % SLOT;
            int64_t id = te_submit(a, &r);
            if (id == -EAGAIN)
                break;
            if (id < 0) {
                fprintf(stderr, "te-soak: submit: %s\n", te_last_error());
                return 1;
            }
            submitted++;
            outstanding++;
        }
        int n = te_poll_completions(a, cq, 256, 100);
        if (n == 0 && now_s() > stop_at + 60) {
            fprintf(stderr, "te-soak: no completion for 60 s after the end "
                    "(%" PRIu64 " of %" PRIu64 " completed)\n", completed,
                    submitted);
            return 1;
        }
        for (int i = 0; i < n; i++) {
            uint64_t u = cq[i].user_data;
            if (u >= submitted) {
                bad_id++;
                continue;
            }
            if (seen[u / 8] & (1u << (u % 8)))
                dup++;
            seen[u / 8] |= (uint8_t)(1u << (u % 8));
            completed++;
            outstanding--;
            if (cq[i].status == 0)
                want[slot_of(u, nsub, nimms)]++;
            else
                failed++;
        }
        double now = now_s();
        if (now - last_report > 2) {
            fprintf(stderr, "te-soak: %" PRIu64 " / %" PRIu64 " ops, %.2f M "
                    "op/s\n", completed, ops, completed / (now - t0) / 1e6);
            last_report = now;
        }
    }
    double t = now_s() - t0;
    /* The receiver's counts must match the successes exactly. */
    uint64_t mismatched = 0, total = 0;
    for (uint32_t k = 0; k < nimms; k++) {
        int rc = want[k] ? te_imm_wait(b, raw[k], want[k], 10000) : 0;
        uint64_t extra = 0;
        te_imm_poll(b, raw[k], &extra, NULL);
        /* The first few in full, the rest counted in the summary. */
        if ((rc || extra) && mismatched++ < 5)
            fprintf(stderr, "te-soak: imm %u: want %" PRIu64 " (%s), %" PRIu64
                    " surplus\n", raw[k], want[k],
                    rc ? te_last_error() : "ok", extra);
        total += want[k];
    }
    te_completion extra;
    int more = te_poll_completions(a, &extra, 1, 100);
    printf("te-soak: %" PRIu64 " operations in %.1f s (%.2f M op/s): %" PRIu64
           " succeeded, %" PRIu64 " failed (each reported once: %s), "
           "immediates counted exactly: %s\n", completed, t,
           completed / t / 1e6, completed - failed, failed,
           dup || bad_id || more ? "NO" : "yes",
           /* nothing counted is nothing proven */
           mismatched ? "NO" : completed == failed ? "nothing succeeded" : "yes");
    if (mismatched > 5)
        fprintf(stderr, "te-soak: %" PRIu64 " immediates miscounted (5 shown)\n",
                mismatched);
    int ok = completed == submitted && submitted == ops && !dup && !bad_id &&
             !more && !mismatched && total == completed - failed;
    te_mr_dereg(a, smr);
    te_mr_dereg(b, dmr);
    te_engine_destroy(a);
    te_engine_destroy(b);
    free(src);
    free(dst);
    free(want);
    free(raw);
    free(seen);
    printf("%s\n", ok ? "te-soak: OK" : "te-soak: FAILED");
    return ok ? 0 : 1;
}
