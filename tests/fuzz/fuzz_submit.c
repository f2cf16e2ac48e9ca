/*
 * Fuzz target: te_submit() with hostile requests, on a real engine (the
 * loopback transport, one group of two NICs, its own address added as the
 * peer). Kinds, flags, routes, peers, descriptors (valid, read-only,
 * corrupted, NULL), offsets, lengths, strides and page indices come from
 * the input; values are drawn near the interesting edges (0, region size
 * +-1, 2^63, UINT64_MAX, ...).
 *
 * Properties:
 *  - a refused request returns a specific negative errno with a message,
 *    and changes nothing: no byte of the target regions, no immediate;
 *  - an accepted request completes exactly once (0 or a negative errno with
 *    a reason); a completed WRITE put exactly the source bytes at the
 *    destination; the receiver counts exactly te_expected_imms() immediates
 *    for it (no more arrive later);
 *  - no memory error, leak or UB in the core (compiled into the target).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/te.h"
#include "fuzz_check.h"

#ifndef FUZZ_PLUGIN_DIR
#define FUZZ_PLUGIN_DIR "."
#endif

#define RLEN 65536u
#define IMM_BASE 0x7e000000u

static te_engine *E;
static te_mr *src_mr, *dst_mr, *ro_mr;
static uint8_t *srcbuf, *src_pristine, *dstbuf, *robuf, *dst_before, *ro_before;
static te_mr_desc d_dst, d_ro;
static te_peer self;

struct in {
    const uint8_t *p;
    size_t n;
};

static uint8_t u8(struct in *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

static uint64_t u64raw(struct in *in)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)u8(in) << (8 * i);
    return v;
}

/* An offset or length near an edge. */
static uint64_t val(struct in *in)
{
    uint8_t s = u8(in);
    uint64_t small = u8(in) | (uint64_t)u8(in) << 8;
    switch (s % 12) {
    case 0: return 0;
    case 1: return 1;
    case 2: return small % 4097;
    case 3: return RLEN - 1;
    case 4: return RLEN;
    case 5: return RLEN + 1;
    case 6: return RLEN - small % 4097;
    case 7: return UINT64_MAX;
    case 8: return UINT64_MAX - small;
    case 9: return 1ull << 63;
    case 10: return u64raw(in);
    default: return small;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    te_config *cfg = te_config_new();
    FUZZ_CHECK(cfg);
    FUZZ_CHECK(te_config_set(cfg, "engine", "plugin", "loopback") == 0);
    FUZZ_CHECK(te_config_set(cfg, "engine", "nics_per_group", "2") == 0);
    FUZZ_CHECK(te_config_set(cfg, "engine", "max_msg_size", "4096") == 0);
    if (!getenv("TE_PLUGIN_PATH"))
        FUZZ_CHECK(te_config_set(cfg, "engine", "plugin_path", FUZZ_PLUGIN_DIR) == 0);
    int rc = te_engine_create(cfg, &E);
    if (rc) {
        fprintf(stderr, "fuzz_submit: te_engine_create: %s\n", te_last_error());
        abort();
    }
    te_config_free(cfg);
    srcbuf = aligned_alloc(4096, RLEN);
    dstbuf = aligned_alloc(4096, RLEN);
    robuf = aligned_alloc(4096, RLEN);
    dst_before = malloc(RLEN);
    ro_before = malloc(RLEN);
    src_pristine = malloc(RLEN);
    FUZZ_CHECK(srcbuf && dstbuf && robuf && dst_before && ro_before && src_pristine);
    for (uint32_t i = 0; i < RLEN; i++) {
        src_pristine[i] = (uint8_t)(i * 13 + 5);
        robuf[i] = (uint8_t)(i ^ 0x5a);
    }
    memcpy(srcbuf, src_pristine, RLEN);
    memset(dstbuf, 0, RLEN);
    FUZZ_CHECK(te_mr_reg(E, 0, srcbuf, RLEN, TE_MR_LOCAL, TE_MEM_HOST, &src_mr) == 0);
    FUZZ_CHECK(te_mr_reg(E, 0, dstbuf, RLEN, TE_MR_REMOTE_WRITE | TE_MR_REMOTE_READ,
                         TE_MEM_HOST, &dst_mr) == 0);
    FUZZ_CHECK(te_mr_reg(E, 0, robuf, RLEN, TE_MR_REMOTE_READ, TE_MEM_HOST, &ro_mr) == 0);
    FUZZ_CHECK(te_mr_describe(dst_mr, &d_dst) == 0);
    FUZZ_CHECK(te_mr_describe(ro_mr, &d_ro) == 0);
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof addr;
    FUZZ_CHECK(te_engine_address(E, 0, addr, &alen) == 0);
    FUZZ_CHECK(te_peer_add(E, 0, addr, alen, &self) == 0);
    return 0;
}

static const te_mr_desc *pick_desc(struct in *in, te_mr_desc *scratch)
{
    switch (u8(in) % 6) {
    case 0:
    case 1: return &d_dst;
    case 2: return &d_ro;
    case 3: return NULL;
    case 4: /* corrupted copy */
        *scratch = d_dst;
        scratch->nic_count = u8(in) % 20;
        scratch->nic[u8(in) % TE_MAX_NICS].rkey ^= u64raw(in);
        scratch->addr += (int8_t)u8(in);
        scratch->len = val(in);
        scratch->access = u8(in) % 8;
        return scratch;
    default: /* fewer NICs than the group */
        *scratch = d_dst;
        scratch->nic_count = 1;
        return scratch;
    }
}

static te_peer pick_peer(struct in *in)
{
    switch (u8(in) % 5) {
    case 0: return self + 1;
    case 1: return TE_PEER_UNKNOWN;
    default: return self;
    }
}

/* Immediates counted for imm so far (banked, not consumed). */
static uint64_t banked(uint32_t imm)
{
    uint64_t b = 0;
    FUZZ_CHECK(te_imm_poll(E, imm, &b, NULL) == 0);
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!E)
        LLVMFuzzerInitialize(NULL, NULL);
    struct in in = {data, size};
    te_request q;
    te_request_init(&q, u8(&in) % 8);
    q.flags = u8(&in) % 4;
    uint32_t imm = IMM_BASE | u8(&in);
    q.imm = imm;
    static const int32_t groups[] = {0, 0, 0, 0, 1, -1};
    q.group = groups[u8(&in) % 6];
    q.route.kind = u8(&in) % 3;
    q.route.nics = u8(&in) % 4;
    q.route.nic = u8(&in) % 4;
    q.user_data = 0xfeed;

    te_mr_desc scratch[8];
    te_scatter_dst sd[8];
    te_barrier_dst bd[8];
    memset(bd, 0, sizeof(bd)); /* reserved fields must be zero */
    memset(sd, 0, sizeof(sd));
    uint32_t sidx[16], didx[16];
    static uint8_t msg[RLEN + 2];
    uint32_t ntargets = 1;
    int nulls = u8(&in);
    switch (q.op) {
    case TE_OP_WRITE:
    case TE_OP_READ:
        q.u.xfer.peer = pick_peer(&in);
        q.u.xfer.local = (nulls & 1) ? NULL : src_mr;
        q.u.xfer.local_off = val(&in);
        q.u.xfer.remote = pick_desc(&in, &scratch[0]);
        q.u.xfer.remote_off = val(&in);
        q.u.xfer.len = val(&in);
        break;
    case TE_OP_PAGED: {
        q.u.paged.peer = pick_peer(&in);
        q.u.paged.src = (nulls & 1) ? NULL : src_mr;
        q.u.paged.count = u8(&in) % 17;
        for (uint32_t k = 0; k < 16; k++) {
            sidx[k] = (u8(&in) & 0x80) ? (uint32_t)u64raw(&in) : u8(&in) % 16;
            didx[k] = (u8(&in) & 0x80) ? (uint32_t)u64raw(&in) : u8(&in) % 16;
        }
        q.u.paged.src_idx = (nulls & 2) ? NULL : sidx;
        q.u.paged.dst_idx = (nulls & 4) ? NULL : didx;
        q.u.paged.src_off = val(&in);
        q.u.paged.src_stride = val(&in);
        q.u.paged.dst = pick_desc(&in, &scratch[0]);
        q.u.paged.dst_off = val(&in);
        q.u.paged.dst_stride = val(&in);
        q.u.paged.page_len = val(&in);
        break;
    }
    case TE_OP_SCATTER:
        q.u.scatter.src = (nulls & 1) ? NULL : src_mr;
        q.u.scatter.split = u8(&in) % 3;
        q.u.scatter.count = u8(&in) % 9;
        for (uint32_t k = 0; k < 8; k++) {
            sd[k].peer = pick_peer(&in);
            sd[k].dst = pick_desc(&in, &scratch[k]);
            sd[k].dst_off = val(&in);
            sd[k].src_off = val(&in);
            sd[k].len = val(&in);
        }
        q.u.scatter.dsts = (nulls & 2) ? NULL : sd;
        ntargets = q.u.scatter.count;
        break;
    case TE_OP_BARRIER:
        q.u.barrier.count = u8(&in) % 9;
        for (uint32_t k = 0; k < 8; k++) {
            bd[k].peer = pick_peer(&in);
            bd[k].dst = pick_desc(&in, &scratch[k]);
        }
        q.u.barrier.dsts = (nulls & 2) ? NULL : bd;
        ntargets = q.u.barrier.count;
        break;
    case TE_OP_SEND:
        q.u.send.peer = pick_peer(&in);
        q.u.send.buf = (nulls & 1) ? NULL : msg;
        q.u.send.len = (uint32_t)(val(&in) % (RLEN + 2));
        break;
    default:
        break;
    }

    memcpy(dst_before, dstbuf, RLEN);
    memcpy(ro_before, robuf, RLEN);
    uint64_t b0 = banked(imm);
    int64_t id = te_submit(E, &q);
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("FUZZ_SUBMIT_VERBOSE") != NULL;
    if (verbose)
        fprintf(stderr, "fuzz_submit: op %u: te_submit = %lld%s%s\n", q.op,
                (long long)id, id < 0 ? ": " : "", id < 0 ? te_last_error() : "");
    if (id < 0) {
        FUZZ_CHECK(id == -EINVAL || id == -ERANGE || id == -ENOENT ||
                   id == -EACCES || id == -EMSGSIZE || id == -EOVERFLOW ||
                   id == -ENOTSUP || id == -E2BIG || id == -EAGAIN ||
                   id == -ENOTCONN || id == -ECONNRESET || id == -EBADMSG);
        FUZZ_CHECK(te_last_error()[0] != '\0');
        FUZZ_CHECK(memcmp(dst_before, dstbuf, RLEN) == 0);
        FUZZ_CHECK(memcmp(ro_before, robuf, RLEN) == 0);
        FUZZ_CHECK(banked(imm) == b0);
        return 0;
    }
    /* Accepted: what will arrive, then exactly one completion. */
    uint64_t expect = 0;
    for (uint32_t t = 0; t < ntargets; t++) {
        int64_t x = te_expected_imms(E, &q, t);
        FUZZ_CHECK(x >= 0);
        expect += (uint64_t)x;
    }
    te_completion c;
    int got = 0;
    for (int tries = 0; tries < 10 && !got; tries++)
        got = te_poll_completions(E, &c, 1, 1000);
    FUZZ_CHECK(got == 1);
    FUZZ_CHECK(c.req_id == (uint64_t)id && c.user_data == 0xfeed);
    FUZZ_CHECK(c.status <= 0 && c.status > -4096);
    FUZZ_CHECK(te_poll_completions(E, &c, 1, 0) == 0); /* only once */
    if (verbose)
        fprintf(stderr, "fuzz_submit:   completion %d %s, %llu imms expected\n",
                c.status, c.reason, (unsigned long long)expect);
    if ((q.op == TE_OP_WRITE || q.op == TE_OP_READ) &&
        (q.u.xfer.remote == &d_dst || q.u.xfer.remote == &d_ro)) {
        /* Accepted: both ranges must lie inside their regions. */
        FUZZ_CHECK(q.u.xfer.local_off <= RLEN &&
                   q.u.xfer.len <= RLEN - q.u.xfer.local_off);
        FUZZ_CHECK(q.u.xfer.remote_off <= RLEN &&
                   q.u.xfer.len <= RLEN - q.u.xfer.remote_off);
    }
    if (c.status == 0) {
        if (q.op == TE_OP_WRITE && q.u.xfer.remote == &d_dst)
            FUZZ_CHECK(memcmp(dstbuf + q.u.xfer.remote_off,
                              srcbuf + q.u.xfer.local_off, q.u.xfer.len) == 0);
        if (q.op == TE_OP_READ && q.u.xfer.remote == &d_ro)
            FUZZ_CHECK(memcmp(srcbuf + q.u.xfer.local_off,
                              robuf + q.u.xfer.remote_off, q.u.xfer.len) == 0);
        if (expect)
            FUZZ_CHECK(te_imm_wait(E, imm, b0 + expect, 5000) == 0);
        uint64_t surplus = 1;
        FUZZ_CHECK(te_imm_remove(E, imm, &surplus) == 0);
        FUZZ_CHECK(surplus == 0);
    } else {
        FUZZ_CHECK(c.reason[0] != '\0');
        te_imm_remove(E, imm, NULL);
    }
    /* A READ wrote into the source region: restore it. */
    if (q.op == TE_OP_READ)
        memcpy(srcbuf, src_pristine, RLEN);
    return 0;
}
