/* Sharding math and expected immediate counts (core/shard.c). */
#include <errno.h>
#include <stdlib.h>

#include "shard.h"
#include "te_test.h"

START_TEST(nics_shard_and_pin)
{
    uint32_t first, k;
    te_route r = {.kind = TE_ROUTE_SHARD, .nics = 0};
    ck_assert_int_eq(te_shard_nics(&r, 4, &first, &k), 0);
    ck_assert_uint_eq(first, 0);
    ck_assert_uint_eq(k, 4);
    r.nics = 2;
    ck_assert_int_eq(te_shard_nics(&r, 4, &first, &k), 0);
    ck_assert_uint_eq(k, 2);
    r.nics = 9; /* more than the group has: all of them */
    ck_assert_int_eq(te_shard_nics(&r, 4, &first, &k), 0);
    ck_assert_uint_eq(k, 4);
    te_route p = {.kind = TE_ROUTE_PIN, .nic = 3};
    ck_assert_int_eq(te_shard_nics(&p, 4, &first, &k), 0);
    ck_assert_uint_eq(first, 3);
    ck_assert_uint_eq(k, 1);
    p.nic = 4;
    ck_assert_int_eq(te_shard_nics(&p, 4, &first, &k), -EINVAL);
    te_route bad = {.kind = 7};
    ck_assert_int_eq(te_shard_nics(&bad, 4, &first, &k), -EINVAL);
    ck_assert_int_eq(te_shard_nics(&r, 0, &first, &k), -EINVAL);
}
END_TEST

/* Shards tile [0, len) exactly, in order, aligned, for many lengths. */
START_TEST(ranges_tile_exactly)
{
    static const uint64_t lens[] = {0, 1, 63, 64, 65, 127, 128, 129, 1000,
                                    4096, 65537, (1u << 20) + 7, 1ull << 33};
    for (uint32_t k = 1; k <= 16; k++) {
        for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
            uint64_t len = lens[li], next = 0;
            for (uint32_t i = 0; i < k; i++) {
                uint64_t off, slen;
                te_shard_range(len, k, i, &off, &slen);
                ck_assert_uint_eq(off, next);
                if (slen && i + 1 < k)
                    ck_assert_uint_eq(off % TE_SHARD_ALIGN, 0);
                next = off + slen;
            }
            ck_assert_uint_eq(next, len);
        }
    }
}
END_TEST

START_TEST(ranges_balanced)
{
    uint64_t off, slen;
    te_shard_range(1u << 20, 4, 0, &off, &slen);
    ck_assert_uint_eq(slen, 1u << 18);
    te_shard_range(1u << 20, 4, 3, &off, &slen);
    ck_assert_uint_eq(off, 3u << 18);
    ck_assert_uint_eq(slen, 1u << 18);
    /* 10 bytes over 4 NICs: one aligned chunk holds all, the rest are empty
     * but still exist (and are still sent). */
    te_shard_range(10, 4, 0, &off, &slen);
    ck_assert_uint_eq(slen, 10);
    te_shard_range(10, 4, 2, &off, &slen);
    ck_assert_uint_eq(off, 10);
    ck_assert_uint_eq(slen, 0);
}
END_TEST

static te_request req(uint32_t op, uint32_t flags)
{
    te_request r = {.size = sizeof(te_request)};
    r.op = op;
    r.flags = flags;
    return r;
}

START_TEST(expected_counts)
{
    te_request w = req(TE_OP_WRITE, TE_F_IMM);
    ck_assert_int_eq(te_shard_expected_imms(&w, 4, 0, 0), 4);
    w.route.nics = 2;
    ck_assert_int_eq(te_shard_expected_imms(&w, 4, 0, 0), 2);
    w.route.kind = TE_ROUTE_PIN;
    w.route.nic = 1;
    ck_assert_int_eq(te_shard_expected_imms(&w, 4, 0, 0), 1);
    w.flags = 0;
    ck_assert_int_eq(te_shard_expected_imms(&w, 4, 0, 0), 0);
    ck_assert_int_eq(te_shard_expected_imms(&w, 4, 0, 1), -EINVAL);

    te_request p = req(TE_OP_PAGED, TE_F_IMM);
    p.u.paged.count = 37;
    ck_assert_int_eq(te_shard_expected_imms(&p, 4, 0, 0), 37);
    ck_assert_int_eq(te_shard_expected_imms(&p, 1, 0, 0), 37);

    te_request s = req(TE_OP_SCATTER, TE_F_IMM);
    s.u.scatter.count = 3;
    s.u.scatter.split = TE_SCATTER_BY_PEER;
    ck_assert_int_eq(te_shard_expected_imms(&s, 4, 0, 2), 1);
    s.u.scatter.split = TE_SCATTER_BY_BYTES;
    ck_assert_int_eq(te_shard_expected_imms(&s, 4, 0, 2), 4);
    ck_assert_int_eq(te_shard_expected_imms(&s, 4, 0, 3), -EINVAL);

    te_request b = req(TE_OP_BARRIER, 0); /* barriers always carry imm */
    b.u.barrier.count = 5;
    ck_assert_int_eq(te_shard_expected_imms(&b, 4, 0, 4), 1);
    ck_assert_int_eq(te_shard_expected_imms(&b, 4, 0, 5), -EINVAL);

    te_request rd = req(TE_OP_READ, 0);
    ck_assert_int_eq(te_shard_expected_imms(&rd, 4, 0, 0), 0);
    te_request sd = req(TE_OP_SEND, 0);
    ck_assert_int_eq(te_shard_expected_imms(&sd, 4, 0, 0), 0);
    te_request bad = req(42, 0);
    ck_assert_int_eq(te_shard_expected_imms(&bad, 4, 0, 0), -EINVAL);
}
END_TEST

/* Weighted shards tile [0, len) in order, aligned, in proportion to the
 * weights (within one alignment unit per boundary). */
START_TEST(weighted_ranges)
{
    static const uint64_t w2[] = {8, 2}, w4[] = {100, 100, 200, 400},
                          w3[] = {1, 1000000, 1};
    static const uint64_t *ws[] = {w2, w4, w3};
    static const uint32_t ks[] = {2, 4, 3};
    static const uint64_t lens[] = {0, 1, 63, 64, 1000, 65536, (1u << 20) + 7,
                                    1ull << 33};
    for (size_t wi = 0; wi < 3; wi++) {
        uint32_t k = ks[wi];
        uint64_t total = 0;
        for (uint32_t i = 0; i < k; i++)
            total += ws[wi][i];
        for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
            uint64_t len = lens[li], next = 0;
            for (uint32_t i = 0; i < k; i++) {
                uint64_t off, slen;
                te_shard_range_weighted(len, ws[wi], k, i, &off, &slen);
                ck_assert_uint_eq(off, next);
                ck_assert(off % TE_SHARD_ALIGN == 0 || off == len);
                double want = (double)len * (double)ws[wi][i] / (double)total;
                ck_assert_msg((double)slen <= want + TE_SHARD_ALIGN &&
                              (double)slen + TE_SHARD_ALIGN >= want,
                              "k %u shard %u of %llu: %llu bytes, want ~%.0f", k,
                              i, (unsigned long long)len,
                              (unsigned long long)slen, want);
                next = off + slen;
            }
            ck_assert_uint_eq(next, len);
        }
    }
    /* 8:2 over 1 MiB: 80% / 20%, boundary aligned. */
    uint64_t off, slen;
    te_shard_range_weighted(1u << 20, w2, 2, 0, &off, &slen);
    ck_assert_uint_eq(off, 0);
    ck_assert_uint_eq(slen, 838912); /* 0.8 MiB rounded up to 64 */
    /* No weights: the equal split. */
    uint64_t eo, el;
    te_shard_range(1000, 3, 1, &eo, &el);
    te_shard_range_weighted(1000, NULL, 3, 1, &off, &slen);
    ck_assert_uint_eq(off, eo);
    ck_assert_uint_eq(slen, el);
}
END_TEST

/* Weighted page blocks tile [0, count) in order, in proportion. */
START_TEST(weighted_pages)
{
    static const uint64_t w[] = {8, 2, 6};
    static const uint32_t counts[] = {0, 1, 2, 3, 7, 16, 100, 1000001};
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        uint32_t next = 0;
        for (uint32_t i = 0; i < 3; i++) {
            uint32_t first, n;
            te_shard_pages_weighted(counts[ci], w, 3, i, &first, &n);
            ck_assert_uint_eq(first, next);
            double want = (double)counts[ci] * (double)w[i] / 16.0;
            ck_assert((double)n <= want + 1 && (double)n + 1 >= want);
            next = first + n;
        }
        ck_assert_uint_eq(next, counts[ci]);
    }
    uint32_t first, n;
    te_shard_pages_weighted(100, w, 2, 0, &first, &n); /* 8:2 */
    ck_assert_uint_eq(first, 0);
    ck_assert_uint_eq(n, 80);
}
END_TEST

/* engine.shard_min_bytes: shorter WRITE/READ stay whole (one imm). */
START_TEST(small_requests_stay_whole)
{
    te_request w = {.size = sizeof(te_request), .op = TE_OP_WRITE, .flags = TE_F_IMM};
    w.u.xfer.len = 65536;
    ck_assert_int_eq(te_shard_keep_whole(&w, 131072, 4), 1);
    ck_assert_int_eq(te_shard_expected_imms(&w, 4, 131072, 0), 1);
    ck_assert_int_eq(te_shard_expected_imms(&w, 4, 0, 0), 4);
    w.u.xfer.len = 131072; /* not shorter: split */
    ck_assert_int_eq(te_shard_keep_whole(&w, 131072, 4), 0);
    ck_assert_int_eq(te_shard_expected_imms(&w, 4, 131072, 0), 4);
    w.u.xfer.len = 0;
    ck_assert_int_eq(te_shard_expected_imms(&w, 4, 131072, 0), 1);
    ck_assert_int_eq(te_shard_keep_whole(&w, 131072, 1), 0); /* one NIC */
    w.route.kind = TE_ROUTE_PIN;
    ck_assert_int_eq(te_shard_keep_whole(&w, 131072, 4), 0);
    te_request p = {.size = sizeof(te_request), .op = TE_OP_PAGED, .flags = TE_F_IMM};
    p.u.paged.count = 3;
    ck_assert_int_eq(te_shard_keep_whole(&p, 131072, 4), 0);
    ck_assert_int_eq(te_shard_expected_imms(&p, 4, 131072, 0), 3);
    te_request r = {.size = sizeof(te_request), .op = TE_OP_READ};
    r.u.xfer.len = 100;
    ck_assert_int_eq(te_shard_keep_whole(&r, 131072, 2), 1);
    ck_assert_int_eq(te_shard_expected_imms(&r, 2, 131072, 0), 0);
}
END_TEST

START_TEST(remote_nic_mapping)
{
    /* 4 local NICs to a 2-NIC peer: 0,1,0,1. */
    ck_assert_uint_eq(te_shard_remote_nic(0, 2), 0);
    ck_assert_uint_eq(te_shard_remote_nic(3, 2), 1);
    ck_assert_uint_eq(te_shard_remote_nic(1, 4), 1);
    ck_assert_uint_eq(te_shard_page_nic(5, 4), 1);
}
END_TEST

TE_TEST_MAIN("shard",
             TE_TCASE("core",
               nics_shard_and_pin, ranges_tile_exactly, ranges_balanced,
               expected_counts, remote_nic_mapping, weighted_ranges,
               weighted_pages, small_requests_stay_whole))
