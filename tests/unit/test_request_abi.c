/* The growth rule of the public structs (te.h, docs/abi.md): te_request's
 * size field, reserved fields of te_route / te_scatter_dst /
 * te_barrier_dst, and the zeroed reserved fields of te_completion and
 * te_nic_info. Loopback engine that is its own peer. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/te.h"
#include "te_test.h"

/* The engine (its own peer, fx.peer) and buf, registered and described. */
static te_test_self fx;
static uint8_t buf[1 << 16];

static void setup(void)
{
    te_test_self_open(&fx, NULL, buf, sizeof(buf));
}

static void teardown(void)
{
    te_test_self_close(&fx);
}

static void write_req(te_request *r, uint32_t imm)
{
    te_request_init(r, TE_OP_WRITE);
    r->flags = TE_F_IMM;
    r->imm = imm;
    r->u.xfer.peer = fx.peer;
    r->u.xfer.local = fx.mr;
    r->u.xfer.remote = &fx.desc;
    r->u.xfer.remote_off = 4096;
    r->u.xfer.len = 100;
}

static void complete_one(int64_t id)
{
    ck_assert_msg(id > 0, "submit: %s", te_last_error());
    te_completion c;
    memset(&c, 0xa5, sizeof(c));
    ck_assert_int_eq(te_poll_completions(fx.e, &c, 1, 5000), 1);
    ck_assert_int_eq(c.status, 0);
    for (size_t i = 0; i < sizeof(c.reserved) / sizeof(c.reserved[0]); i++)
        ck_assert_uint_eq(c.reserved[i], 0);
}

START_TEST(init_sets_size_and_zeroes)
{
    te_request r;
    memset(&r, 0xff, sizeof(r));
    te_request_init(&r, TE_OP_PAGED);
    ck_assert_uint_eq(r.size, sizeof(te_request));
    ck_assert_uint_eq(r.op, TE_OP_PAGED);
    const unsigned char *p = (const unsigned char *)&r;
    for (size_t i = offsetof(te_request, flags); i < sizeof(r); i++)
        ck_assert_uint_eq(p[i], 0);
    ck_assert_uint_ge(sizeof(te_request), TE_REQUEST_SIZE_V0_2);
}
END_TEST

START_TEST(size_zero_is_refused_with_the_remedy)
{
    te_request r;
    write_req(&r, 1);
    r.size = 0;
    ck_assert_int_eq(te_submit(fx.e, &r), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "te_request_init"));
    ck_assert_int_eq(te_expected_imms(fx.e, &r, 0), -EINVAL);
}
END_TEST

START_TEST(size_below_first_layout_is_refused)
{
    te_request r;
    write_req(&r, 1);
    r.size = TE_REQUEST_SIZE_V0_2 - 8;
    ck_assert_int_eq(te_submit(fx.e, &r), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "smaller than the first"));
}
END_TEST

/* A caller built against a newer header: its te_request is longer. */
struct newer_request {
    te_request r;
    uint64_t field_from_the_future;
    uint32_t another;
    uint32_t pad;
};

START_TEST(newer_layout_with_zero_tail_is_accepted)
{
    struct newer_request n;
    memset(&n, 0, sizeof(n));
    write_req(&n.r, 21);
    n.r.size = sizeof(n);
    ck_assert_int_eq(te_expected_imms(fx.e, &n.r, 0), 1);
    complete_one(te_submit(fx.e, &n.r));
    ck_assert_int_eq(te_imm_wait(fx.e, 21, 1, 5000), 0);
}
END_TEST

START_TEST(newer_layout_using_an_unknown_field_is_refused)
{
    struct newer_request n;
    memset(&n, 0, sizeof(n));
    write_req(&n.r, 22);
    n.r.size = sizeof(n);
    n.another = 7;
    ck_assert_int_eq(te_submit(fx.e, &n.r), -E2BIG);
    char want[64];
    snprintf(want, sizeof(want), "sets byte %zu",
             offsetof(struct newer_request, another));
    ck_assert_msg(strstr(te_last_error(), want), "%s", te_last_error());
    ck_assert_ptr_nonnull(strstr(te_last_error(), "upgrade"));
    ck_assert_int_eq(te_expected_imms(fx.e, &n.r, 0), -E2BIG);
    uint64_t banked = 9;
    ck_assert_int_eq(te_imm_poll(fx.e, 22, &banked, NULL), 0);
    ck_assert_uint_eq(banked, 0); /* nothing was sent */
}
END_TEST

START_TEST(route_reserved_must_be_zero)
{
    te_request r;
    write_req(&r, 3);
    r.route.reserved = 1;
    ck_assert_int_eq(te_submit(fx.e, &r), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "te_route.reserved"));
    ck_assert_int_eq(te_expected_imms(fx.e, &r, 0), -EINVAL);
}
END_TEST

START_TEST(scatter_dst_reserved_must_be_zero)
{
    te_scatter_dst d[3];
    memset(d, 0, sizeof(d));
    for (int i = 0; i < 3; i++) {
        d[i].peer = fx.peer;
        d[i].dst = &fx.desc;
        d[i].dst_off = 8192 + (uint64_t)i * 512;
        d[i].len = 64;
    }
    te_request r;
    te_request_init(&r, TE_OP_SCATTER);
    r.u.scatter.src = fx.mr;
    r.u.scatter.count = 3;
    r.u.scatter.dsts = d;
    d[2].reserved[1] = 1;
    ck_assert_int_eq(te_submit(fx.e, &r), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "destination 2"));
    d[2].reserved[1] = 0;
    d[1].reserved0 = 5;
    ck_assert_int_eq(te_submit(fx.e, &r), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "destination 1"));
    d[1].reserved0 = 0;
    complete_one(te_submit(fx.e, &r));
}
END_TEST

START_TEST(barrier_dst_reserved_must_be_zero)
{
    te_barrier_dst d[1];
    memset(d, 0, sizeof(d));
    d[0].peer = fx.peer;
    d[0].dst = &fx.desc;
    d[0].reserved = 1;
    te_request r;
    te_request_init(&r, TE_OP_BARRIER);
    r.imm = 31;
    r.u.barrier.count = 1;
    r.u.barrier.dsts = d;
    ck_assert_int_eq(te_submit(fx.e, &r), -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "target 0"));
    d[0].reserved = 0;
    complete_one(te_submit(fx.e, &r));
    ck_assert_int_eq(te_imm_wait(fx.e, 31, 1, 5000), 0);
}
END_TEST

START_TEST(nic_info_reserved_is_zeroed)
{
    te_nic_info ni;
    memset(&ni, 0xa5, sizeof(ni));
    ck_assert_int_eq(te_engine_nic_info(fx.e, 0, 0, &ni), 0);
    for (size_t i = 0; i < sizeof(ni.reserved) / sizeof(ni.reserved[0]); i++)
        ck_assert_uint_eq(ni.reserved[i], 0);
}
END_TEST

TE_TEST_MAIN("request_abi",
             TE_TCASE_FULL("growth_rule", 0, setup, teardown,
               init_sets_size_and_zeroes, size_zero_is_refused_with_the_remedy,
               size_below_first_layout_is_refused,
               newer_layout_with_zero_tail_is_accepted,
               newer_layout_using_an_unknown_field_is_refused,
               route_reserved_must_be_zero, scatter_dst_reserved_must_be_zero,
               barrier_dst_reserved_must_be_zero, nic_info_reserved_is_zeroed))
