/*
 * A program built against a frozen copy of te.h (tests/abi/layout-<v>/),
 * linked with the current library: proves that binaries built against an
 * older public layout keep working (the growth rule, docs/abi.md). It runs
 * every request kind on one loopback engine that is its own peer, polls
 * completions into an array (whose stride is the old te_completion) and
 * checks the bytes and immediate counts. Exit 0 = pass.
 *
 * When te.h's layout changes, keep this directory as is and add a new
 * frozen copy; CMake builds this program once per frozen copy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <te/te.h> /* the FROZEN header, first on the include path */

#define FAIL(...) do { fprintf(stderr, "old_layout_client: " __VA_ARGS__); \
                       fprintf(stderr, " (%s)\n", te_last_error()); exit(1); } while (0)

enum { LEN = 1 << 20, PAGE = 4096 };

static te_engine *e;
static te_peer self;
static te_mr *src, *dst;
static te_mr_desc ddesc, sdesc;

/* expect: immediates all `targets` destinations (all this engine) count. */
static void run(te_request *r, uint32_t imm, uint32_t targets, uint64_t expect)
{
    int64_t n = 0;
    for (uint32_t t = 0; t < targets; t++)
        n += te_expected_imms(e, r, t);
    if (n != (int64_t)expect)
        FAIL("expected_imms of op %u = %lld, want %llu", r->op, (long long)n,
             (unsigned long long)expect);
    int64_t id = te_submit(e, r);
    if (id <= 0)
        FAIL("submit op %u: %lld", r->op, (long long)id);
    te_completion c[4]; /* an array: its stride is the frozen layout's */
    memset(c, 0xa5, sizeof(c));
    int got = te_poll_completions(e, c, 4, 5000);
    if (got != 1 || c[0].req_id != (uint64_t)id || c[0].status != 0)
        FAIL("completion of op %u: got %d, status %d", r->op, got, c[0].status);
    if (memcmp(&c[1], "\xa5\xa5\xa5\xa5", 4) != 0)
        FAIL("the library wrote past one frozen te_completion");
    if (expect && te_imm_wait(e, imm, expect, 5000) != 0)
        FAIL("imm %u: %llu arrivals not seen", imm, (unsigned long long)expect);
}

int main(void)
{
    if (te_engine_create(NULL, &e))
        FAIL("engine");
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    if (te_engine_address(e, 0, addr, &alen) || te_peer_add(e, 0, addr, alen, &self))
        FAIL("self peer");
    uint8_t *a = calloc(1, LEN), *b = calloc(1, LEN);
    for (size_t i = 0; i < LEN; i++)
        a[i] = (uint8_t)(i * 7 + 3);
    if (te_mr_reg(e, 0, a, LEN, TE_MR_REMOTE_READ, TE_MEM_HOST, &src) ||
        te_mr_reg(e, 0, b, LEN, TE_MR_REMOTE_WRITE, TE_MEM_HOST, &dst) ||
        te_mr_describe(dst, &ddesc) || te_mr_describe(src, &sdesc))
        FAIL("registration");
    te_nic_info ni;
    memset(&ni, 0xa5, sizeof(ni));
    if (te_engine_nic_info(e, 0, 0, &ni) || strcmp(ni.name, "lo0") != 0)
        FAIL("nic info");

    te_request r;
    te_request_init(&r, TE_OP_WRITE);
    r.flags = TE_F_IMM;
    r.imm = 11;
    r.u.xfer.peer = self;
    r.u.xfer.local = src;
    r.u.xfer.remote = &ddesc;
    r.u.xfer.len = LEN / 2;
    run(&r, 11, 1, 1);
    if (memcmp(a, b, LEN / 2) != 0)
        FAIL("write: bytes differ");

    uint32_t sidx[3] = {5, 1, 9}, didx[3] = {200, 201, 150};
    te_request_init(&r, TE_OP_PAGED);
    r.flags = TE_F_IMM;
    r.imm = 12;
    r.u.paged.peer = self;
    r.u.paged.src = src;
    r.u.paged.src_stride = PAGE;
    r.u.paged.src_idx = sidx;
    r.u.paged.dst = &ddesc;
    r.u.paged.dst_stride = PAGE;
    r.u.paged.dst_idx = didx;
    r.u.paged.page_len = PAGE;
    r.u.paged.count = 3;
    run(&r, 12, 1, 3); /* one immediate per page */
    for (int k = 0; k < 3; k++)
        if (memcmp(a + sidx[k] * PAGE, b + didx[k] * PAGE, PAGE) != 0)
            FAIL("paged: page %d differs", k);

    te_scatter_dst sd[2];
    memset(sd, 0, sizeof(sd));
    for (int i = 0; i < 2; i++) {
        sd[i].peer = self;
        sd[i].dst = &ddesc;
        sd[i].dst_off = (uint64_t)(700 + i) * 1024;
        sd[i].src_off = (uint64_t)i * 4096;
        sd[i].len = 1000;
    }
    te_request_init(&r, TE_OP_SCATTER);
    r.flags = TE_F_IMM;
    r.imm = 13;
    r.u.scatter.src = src;
    r.u.scatter.count = 2;
    r.u.scatter.dsts = sd;
    run(&r, 13, 2, 2);
    for (int i = 0; i < 2; i++)
        if (memcmp(a + sd[i].src_off, b + sd[i].dst_off, 1000) != 0)
            FAIL("scatter: destination %d differs", i);

    te_barrier_dst bd[1];
    memset(bd, 0, sizeof(bd));
    bd[0].peer = self;
    bd[0].dst = &ddesc;
    te_request_init(&r, TE_OP_BARRIER);
    r.imm = 14;
    r.u.barrier.count = 1;
    r.u.barrier.dsts = bd;
    run(&r, 14, 1, 1);

    memset(b, 0, LEN);
    te_request_init(&r, TE_OP_READ);
    r.u.xfer.peer = self;
    r.u.xfer.local = dst;
    r.u.xfer.remote = &sdesc;
    r.u.xfer.remote_off = 4096;
    r.u.xfer.len = 8192;
    run(&r, 0, 1, 0);
    if (memcmp(a + 4096, b, 8192) != 0)
        FAIL("read: bytes differ");

    te_mr_dereg(e, src);
    te_mr_dereg(e, dst);
    te_engine_destroy(e);
    free(a);
    free(b);
    printf("old_layout_client: te.h layout %zu-byte te_request, library %s: "
           "all request kinds pass\n", sizeof(te_request), te_version());
    return 0;
}
