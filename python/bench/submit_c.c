/*
 * The C side of python/bench/bench_submit.py: the per-call time of
 * te_submit() for the same request the Python benchmark submits (an 8-byte
 * write with immediate from one engine to another in this process, up to
 * WINDOW in flight, completions polled), so that Python's added cost per
 * request is measured against C in one run. Prints "p50_ns <n> p99_ns <n>".
 *   te-py-bench-c [SAMPLES] [paged]
 * With "paged", every sample builds a new paged request (te_request_init,
 * 64 pages of 64 bytes, index arrays that already exist) and submits it:
 * the C side of Python's te.paged(...) + submit() per call.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <te/te.h>

enum { WINDOW = 64, LEN = 8, PAGES = 64, PAGE = 64 };

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void die(const char *what)
{
    fprintf(stderr, "te-py-bench-c: %s: %s\n", what, te_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    int samples = argc > 1 ? atoi(argv[1]) : 20000;
    if (samples < 100 || samples > 10000000)
        samples = 20000;
    int paged = argc > 2 && strcmp(argv[2], "paged") == 0;
    static uint32_t idx[PAGES];
    for (uint32_t k = 0; k < PAGES; k++)
        idx[k] = k;
    te_engine *a, *b;
    if (te_engine_create(NULL, &a) || te_engine_create(NULL, &b))
        die("engine");
    static uint8_t src[4096], dst[4096];
    te_mr *smr, *dmr;
    te_mr_desc d;
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    te_peer p;
    if (te_mr_reg(a, 0, src, sizeof(src), 0, TE_MEM_HOST, &smr) ||
        te_mr_reg(b, 0, dst, sizeof(dst), TE_MR_REMOTE_WRITE, TE_MEM_HOST, &dmr) ||
        te_mr_describe(dmr, &d) || te_engine_address(b, 0, addr, &alen) ||
        te_peer_add(a, 0, addr, alen, &p))
        die("setup");
    te_request r;
    te_request_init(&r, TE_OP_WRITE);
    r.flags = TE_F_IMM;
    r.imm = 1;
    r.u.xfer.peer = p;
    r.u.xfer.local = smr;
    r.u.xfer.remote = &d;
    r.u.xfer.len = LEN;
    uint64_t *t = calloc((size_t)samples, sizeof(uint64_t));
    te_completion c[WINDOW];
    int inflight = 0;
    uint64_t deadline = now_ns() + 60ull * 1000000000ull;
    for (int i = 0; i < samples;) {
        if (now_ns() > deadline)
            die("deadline");
        if (inflight < WINDOW) {
            uint64_t t0 = now_ns();
            if (paged) {
                te_request_init(&r, TE_OP_PAGED);
                r.flags = TE_F_IMM;
                r.imm = 1;
                r.u.paged.peer = p;
                r.u.paged.src = smr;
                r.u.paged.src_stride = PAGE;
                r.u.paged.src_idx = idx;
                r.u.paged.dst = &d;
                r.u.paged.dst_stride = PAGE;
                r.u.paged.dst_idx = idx;
                r.u.paged.page_len = PAGE;
                r.u.paged.count = PAGES;
            }
            int64_t id = te_submit(a, &r);
            uint64_t t1 = now_ns();
            if (id > 0) {
                t[i++] = t1 - t0;
                inflight++;
                continue;
            }
            if (id != -EAGAIN)
                die("te_submit");
        }
        int n = te_poll_completions(a, c, WINDOW, inflight == WINDOW ? 100 : 0);
        if (n < 0)
            die("poll");
        inflight -= n;
    }
    while (inflight > 0) {
        int n = te_poll_completions(a, c, WINDOW, 1000);
        if (n <= 0)
            die("drain");
        inflight -= n;
    }
    qsort(t, (size_t)samples, sizeof(uint64_t), cmp_u64);
    printf("p50_ns %llu p99_ns %llu\n", (unsigned long long)t[samples / 2],
           (unsigned long long)t[(size_t)samples * 99 / 100]);
    free(t);
    te_mr_dereg(a, smr);
    te_mr_dereg(b, dmr);
    te_engine_destroy(a);
    te_engine_destroy(b);
    return 0;
}
