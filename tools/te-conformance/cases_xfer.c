/* Conformance cases: data movement (write, paged, scatter, barrier, read). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

static te_request write_req(struct conf *c, struct remote *r, uint64_t loff,
                            uint64_t roff, uint64_t len, uint32_t imm)
{
    te_request q = conf_req(TE_OP_WRITE);
    q.u.xfer.peer = r->peer;
    q.u.xfer.local = c->src;
    q.u.xfer.local_off = loff;
    q.u.xfer.remote = &r->desc;
    q.u.xfer.remote_off = roff;
    q.u.xfer.len = len;
    if (imm) {
        q.flags = TE_F_IMM;
        q.imm = imm;
    }
    return q;
}

/* Write sizes around shard and alignment edges; bytes exact, counts exact,
 * the bytes just outside the target untouched. */
static int case_write_sizes(struct conf *c)
{
    static const uint64_t sizes[] = {0, 1, 63, 64, 65, 4095, 4096, 4097,
                                     65536 + 3, (1u << 20) + 7, 8u << 20};
    struct remote *r = &c->rem[0];
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t len = sizes[i], loff = 17, roff = 4096 + 5;
        uint32_t seed = 100 + (uint32_t)i, imm = conf_imm();
        conf_fill(c->src_buf, loff, len, seed);
        CHECK_RC(r->ops->fill(r, 0, roff + len + 4096, 0xEE));
        te_request q = write_req(c, r, loff, roff, len, imm);
        int64_t want = te_expected_imms(c->e, &q, 0);
        CHECK_RC(want);
        te_completion done;
        CHECK_RC(conf_run(c, &q, &done));
        CHECK(done.status == 0, "write of %llu bytes failed: %s",
              (unsigned long long)len, done.reason);
        CHECK(r->ops->imm_wait(r, imm, (uint64_t)want, CONF_TIMEOUT_MS) == 0,
              "imm %u: %lld arrivals expected for %llu bytes", imm,
              (long long)want, (unsigned long long)len);
        uint64_t extra = 1;
        CHECK_RC(r->ops->imm_banked(r, imm, &extra));
        CHECK(extra == 0, "imm %u: %llu surplus arrivals", imm,
              (unsigned long long)extra);
        CHECK(conf_expect_remote(r, roff, len, seed, loff) == 0,
              "payload of %llu-byte write", (unsigned long long)len);
        CHECK(conf_expect_remote(r, roff - 64, 64, 0xEE, roff - 64) == 0,
              "bytes before the target changed");
        CHECK(conf_expect_remote(r, roff + len, 4096, 0xEE, roff + len) == 0,
              "bytes after the target changed");
    }
    return CONF_PASS;
}

/* Routing: pinned to each NIC, and sharded over 1..all NICs. */
static int case_write_routes(struct conf *c)
{
    struct remote *r = &c->rem[0];
    int nics = te_engine_nic_count(c->e, 0);
    for (int mode = 0; mode < 2; mode++) {
        for (int n = mode ? 1 : 0; n <= nics; n++) {
            if (!mode && n == nics)
                break;
            uint64_t len = 300000 + (uint64_t)n;
            uint32_t seed = 7 + (uint32_t)(n + mode * 16), imm = conf_imm();
            conf_fill(c->src_buf, 0, len, seed);
            te_request q = write_req(c, r, 0, 0, len, imm);
            if (mode == 0) {
                q.route.kind = TE_ROUTE_PIN;
                q.route.nic = (uint32_t)n;
            } else {
                q.route.nics = (uint32_t)n;
            }
            int64_t want = te_expected_imms(c->e, &q, 0);
            CHECK(want == (mode == 0 ? 1 : n), "expected imms %lld for %s %d",
                  (long long)want, mode ? "shard over" : "pin to", n);
            te_completion done;
            CHECK_RC(conf_run(c, &q, &done));
            CHECK(done.status == 0, "%s", done.reason);
            CHECK(r->ops->imm_wait(r, imm, (uint64_t)want, CONF_TIMEOUT_MS) == 0,
                  "imm count");
            CHECK(conf_expect_remote(r, 0, len, seed, 0) == 0, "payload");
        }
    }
    te_request bad = write_req(c, r, 0, 0, 1, 0);
    bad.route.kind = TE_ROUTE_PIN;
    bad.route.nic = (uint32_t)nics;
    CHECK(te_submit(c->e, &bad) == -EINVAL, "pin to NIC %d accepted", nics);
    return CONF_PASS;
}

/* Many writes in flight at once, all with the same imm: the count is exact
 * whatever the order of arrival. */
static int case_write_many(struct conf *c)
{
    struct remote *r = &c->rem[0];
    enum { N = 2000, SZ = 1000 };
    uint32_t imm = conf_imm();
    conf_fill(c->src_buf, 0, (uint64_t)N * SZ, 31);
    int64_t total = 0;
    for (int i = 0; i < N; i++) {
        te_request q = write_req(c, r, (uint64_t)i * SZ, (uint64_t)i * SZ, SZ,
                                 imm);
        q.user_data = (uint64_t)i;
        total += te_expected_imms(c->e, &q, 0);
        CHECK_RC(conf_submit(c, &q));
    }
    te_completion *done = calloc(N, sizeof(*done));
    int rc = conf_wait_completions(c, done, N);
    if (rc) {
        free(done);
        CHECK(0, "completions: %s", te_strerror(rc));
    }
    char *seen = calloc(N, 1);
    for (int i = 0; i < N; i++) {
        if (done[i].status || done[i].user_data >= N ||
            seen[done[i].user_data]++) {
            fprintf(stderr, "    bad completion %d: status %d ud %llu\n", i,
                    done[i].status, (unsigned long long)done[i].user_data);
            free(done);
            free(seen);
            return CONF_FAIL;
        }
    }
    free(done);
    free(seen);
    te_completion extra;
    CHECK(te_poll_completions(c->e, &extra, 1, 0) == 0,
          "a request completed twice");
    CHECK(r->ops->imm_wait(r, imm, (uint64_t)total, CONF_TIMEOUT_MS) == 0,
          "%lld arrivals", (long long)total);
    CHECK(conf_expect_remote(r, 0, (uint64_t)N * SZ, 31, 0) == 0, "payload");
    return CONF_PASS;
}

/* Paged writes: random page permutation, each page carries the imm. */
static int case_paged(struct conf *c)
{
    struct remote *r = &c->rem[0];
    enum { PAGES = 257 };
    const uint64_t page = 4096 + 64, stride = 8192;
    uint32_t src_idx[PAGES], dst_idx[PAGES];
    for (uint32_t j = 0; j < PAGES; j++) {
        src_idx[j] = (j * 7) % PAGES;
        dst_idx[j] = (j * 13 + 5) % PAGES;
    }
    conf_fill(c->src_buf, 0, PAGES * stride, 55);
    CHECK_RC(r->ops->fill(r, 0, PAGES * stride + 128, 0xAB));
    uint32_t imm = conf_imm();
    te_request q = conf_req(TE_OP_PAGED);
    q.flags = TE_F_IMM;
    q.imm = imm;
    q.u.paged.peer = r->peer;
    q.u.paged.src = c->src;
    q.u.paged.src_stride = stride;
    q.u.paged.src_idx = src_idx;
    q.u.paged.dst = &r->desc;
    q.u.paged.dst_off = 64;
    q.u.paged.dst_stride = stride;
    q.u.paged.dst_idx = dst_idx;
    q.u.paged.page_len = page;
    q.u.paged.count = PAGES;
    int64_t want = te_expected_imms(c->e, &q, 0);
    CHECK(want == PAGES, "expected %lld imms for %d pages", (long long)want,
          PAGES);
    te_completion done;
    CHECK_RC(conf_run(c, &q, &done));
    CHECK(done.status == 0, "%s", done.reason);
    CHECK(r->ops->imm_wait(r, imm, (uint64_t)want, CONF_TIMEOUT_MS) == 0,
          "imm count");
    for (uint32_t j = 0; j < PAGES; j++)
        CHECK(conf_expect_remote(r, 64 + dst_idx[j] * stride, page, 55,
                                 src_idx[j] * stride) == 0, "page %u", j);
    CHECK(conf_expect_remote(r, 0, 64, 0xAB, 0) == 0, "bytes before page 0");
    /* Out-of-range page index: refused up front. */
    dst_idx[3] = 1u << 30;
    CHECK(te_submit(c->e, &q) == -ERANGE, "page outside the region accepted");
    /* Zero pages: completes, no imm. */
    q.u.paged.count = 0;
    CHECK(te_expected_imms(c->e, &q, 0) == 0, "0 pages, 0 imms");
    CHECK_RC(conf_run(c, &q, &done));
    CHECK(done.status == 0, "empty paged write: %s", done.reason);
    return CONF_PASS;
}

/* Scatter to every remote, several slices each, split by peer and by
 * bytes (including zero-length slices). */
static int case_scatter(struct conf *c)
{
    enum { PER = 3 };
    te_scatter_dst d[CONF_MAX_REMOTES * PER];
    memset(d, 0, sizeof(d)); /* reserved fields must be zero */
    for (int split = 0; split < 2; split++) {
        int n = 0;
        uint32_t imm = conf_imm();
        conf_fill(c->src_buf, 0, 4u << 20, 77 + (uint32_t)split);
        for (int i = 0; i < c->nremotes; i++)
            for (int k = 0; k < PER; k++) {
                d[n].peer = c->rem[i].peer;
                d[n].dst = &c->rem[i].desc;
                d[n].dst_off = (uint64_t)k * (1u << 20) + 8;
                d[n].src_off = (uint64_t)n * 100000;
                d[n].len = k == 2 ? 0 : 70000 + (uint64_t)n;
                n++;
            }
        te_request q = conf_req(TE_OP_SCATTER);
        q.flags = TE_F_IMM;
        q.imm = imm;
        q.u.scatter.src = c->src;
        q.u.scatter.split = split ? TE_SCATTER_BY_BYTES : TE_SCATTER_BY_PEER;
        q.u.scatter.count = (uint32_t)n;
        q.u.scatter.dsts = d;
        uint64_t want[CONF_MAX_REMOTES] = {0};
        for (int j = 0; j < n; j++) {
            int64_t w = te_expected_imms(c->e, &q, (uint32_t)j);
            CHECK_RC(w);
            want[j / PER] += (uint64_t)w;
        }
        CHECK(te_expected_imms(c->e, &q, (uint32_t)n) < 0,
              "target out of range accepted");
        te_completion done;
        CHECK_RC(conf_run(c, &q, &done));
        CHECK(done.status == 0, "%s", done.reason);
        for (int i = 0; i < c->nremotes; i++)
            CHECK(c->rem[i].ops->imm_wait(&c->rem[i], imm, want[i],
                                          CONF_TIMEOUT_MS) == 0,
                  "remote %d: %llu imms", i, (unsigned long long)want[i]);
        for (int j = 0; j < n; j++)
            CHECK(conf_expect_remote(&c->rem[j / PER], d[j].dst_off, d[j].len,
                                     77 + (uint32_t)split, d[j].src_off) == 0,
                  "slice %d", j);
    }
    return CONF_PASS;
}

/* Barrier: one zero-length imm to every remote. */
static int case_barrier(struct conf *c)
{
    te_barrier_dst d[CONF_MAX_REMOTES];
    memset(d, 0, sizeof(d)); /* reserved fields must be zero */
    for (int i = 0; i < c->nremotes; i++) {
        d[i].peer = c->rem[i].peer;
        d[i].dst = (i & 1) ? NULL : &c->rem[i].desc;
    }
    uint32_t imm = conf_imm();
    te_request q = conf_req(TE_OP_BARRIER);
    q.imm = imm;
    q.u.barrier.count = (uint32_t)c->nremotes;
    q.u.barrier.dsts = d;
    for (int round = 0; round < 3; round++) {
        te_completion done;
        CHECK_RC(conf_run(c, &q, &done));
        CHECK(done.status == 0, "%s", done.reason);
    }
    for (int i = 0; i < c->nremotes; i++) {
        CHECK(te_expected_imms(c->e, &q, (uint32_t)i) == 1, "barrier count");
        CHECK(c->rem[i].ops->imm_wait(&c->rem[i], imm, 3, CONF_TIMEOUT_MS) == 0,
              "remote %d: 3 barrier imms", i);
    }
    return CONF_PASS;
}

/* One-sided read of remote bytes into the local region. */
static int case_read(struct conf *c)
{
    struct remote *r = &c->rem[0];
    static const uint64_t sizes[] = {0, 1, 4097, (1u << 20) + 3};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uint64_t len = sizes[i], roff = 333, loff = 4096;
        uint32_t seed = 900 + (uint32_t)i;
        CHECK_RC(r->ops->fill(r, roff, len, seed));
        memset(c->src_buf, 0xCC, loff + len + 64);
        te_request q = conf_req(TE_OP_READ);
        q.u.xfer.peer = r->peer;
        q.u.xfer.local = c->src;
        q.u.xfer.local_off = loff;
        q.u.xfer.remote = &r->desc;
        q.u.xfer.remote_off = roff;
        q.u.xfer.len = len;
        CHECK(te_expected_imms(c->e, &q, 0) == 0, "reads carry no imm");
        te_completion done;
        CHECK_RC(conf_run(c, &q, &done));
        CHECK(done.status == 0, "read of %llu: %s", (unsigned long long)len,
              done.reason);
        for (uint64_t b = 0; b < len; b++)
            CHECK(c->src_buf[loff + b] == conf_pattern(roff + b, seed),
                  "read byte %llu of %llu", (unsigned long long)b,
                  (unsigned long long)len);
        CHECK(c->src_buf[loff + len] == 0xCC, "read wrote past its end");
        CHECK(c->src_buf[loff - 1] == 0xCC, "read wrote before its start");
    }
    return CONF_PASS;
}

const struct conf_case conf_cases_xfer[] = {
    {"write_sizes", "single writes 0 B..8 MiB: bytes, imm counts, fences",
     case_write_sizes},
    {"write_routes", "pinned and sharded routing over every NIC",
     case_write_routes},
    {"write_many", "2000 writes in flight, one imm: exact count, each "
     "completion once", case_write_many},
    {"paged", "paged writes with permuted indices", case_paged},
    {"scatter", "scatter by peer and by bytes to every remote", case_scatter},
    {"barrier", "imm-only barrier to every remote", case_barrier},
    {"read", "one-sided reads", case_read},
    {NULL, NULL, NULL}};
