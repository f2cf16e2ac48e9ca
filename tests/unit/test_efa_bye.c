/* Orderly close of the efa plugin (plugins/efa/efa_bye.h, docs/efa.md
 * "Orderly close"):
 *  - the goodbye message (plugins/efa/efa_bye_wire.c, pure, compiled in
 *    here): built and parsed back, every kind of damage refused;
 *  - engines of this process over libfabric's shm, without and with a job
 *    secret: one is destroyed, and the other, which never writes to it
 *    again and has heartbeats and the peer timeout off, reports it down as
 *    closed in order (only a goodbye can tell it so); with efa.bye_wait_ms
 *    = 0 on the closing side it does not; four engines, all peers of each
 *    other, destroyed at once from four threads, all return; with a
 *    secret, a writer the closing engine never added hears it too
 *    (without one: test_efa_bye_twoproc).
 * The engine tests skip (77) without the efa plugin or shm. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/te.h"
#include "te_test.h"
#include "../../plugins/efa/efa_bye_wire.c"

/* ------------------------------------------------------------ wire */

static const uint8_t RAW[20] = "te-0000004242-000001";

START_TEST(build_then_parse_gives_the_message_back)
{
    for (int keyed = 0; keyed <= 1; keyed++) {
        struct efa_bye_msg m, out;
        ck_assert_int_eq(efa_bye_msg_build(&m, RAW, sizeof(RAW), keyed), 0);
        if (keyed)
            memset(m.mac, 0x5a, sizeof(m.mac));
        ck_assert_int_eq(efa_bye_msg_parse(&m, sizeof(m), &out), 0);
        ck_assert_int_eq(out.keyed, keyed);
        ck_assert_int_eq(out.raw_len, sizeof(RAW));
        ck_assert_mem_eq(out.raw, RAW, sizeof(RAW));
        ck_assert_int_eq(out.mac[31], keyed ? 0x5a : 0);
    }
    /* The longest name fits, one byte more does not. */
    uint8_t big[EFA_BYE_RAW_MAX + 1];
    memset(big, 7, sizeof(big));
    struct efa_bye_msg m;
    ck_assert_int_eq(efa_bye_msg_build(&m, big, EFA_BYE_RAW_MAX, 0), 0);
    ck_assert_int_eq(efa_bye_msg_build(&m, big, sizeof(big), 0), -EINVAL);
    ck_assert_int_eq(efa_bye_msg_build(&m, big, 0, 0), -EINVAL);
    ck_assert_int_eq(efa_bye_msg_build(&m, NULL, 4, 0), -EINVAL);
}
END_TEST

START_TEST(parse_refuses_damage)
{
    struct efa_bye_msg good, m, out;
    ck_assert_int_eq(efa_bye_msg_build(&good, RAW, sizeof(RAW), 0), 0);
    uint8_t longer[sizeof(good) + 1];
    memcpy(longer, &good, sizeof(good));
    ck_assert_int_eq(efa_bye_msg_parse(&good, sizeof(good) - 1, &out),
                     -EPROTO);
    ck_assert_int_eq(efa_bye_msg_parse(longer, sizeof(longer), &out),
                     -EPROTO);
    ck_assert_int_eq(efa_bye_msg_parse(NULL, sizeof(good), &out), -EPROTO);
    m = good; m.magic ^= 1;
    ck_assert_int_eq(efa_bye_msg_parse(&m, sizeof(m), &out), -EPROTO);
    m = good; m.version = EFA_BYE_VERSION + 1;
    ck_assert_int_eq(efa_bye_msg_parse(&m, sizeof(m), &out), -EPROTO);
    m = good; m.keyed = 2;
    ck_assert_int_eq(efa_bye_msg_parse(&m, sizeof(m), &out), -EPROTO);
    m = good; m.reserved = 1;
    ck_assert_int_eq(efa_bye_msg_parse(&m, sizeof(m), &out), -EPROTO);
    m = good; m.raw_len = 0;
    ck_assert_int_eq(efa_bye_msg_parse(&m, sizeof(m), &out), -EPROTO);
    m = good; m.raw_len = EFA_BYE_RAW_MAX + 1;
    ck_assert_int_eq(efa_bye_msg_parse(&m, sizeof(m), &out), -EPROTO);
    /* One encoding only: a byte past the name, a MAC when not keyed. */
    m = good; m.raw[sizeof(RAW)] = 1;
    ck_assert_int_eq(efa_bye_msg_parse(&m, sizeof(m), &out), -EPROTO);
    m = good; m.mac[0] = 1;
    ck_assert_int_eq(efa_bye_msg_parse(&m, sizeof(m), &out), -EPROTO);
    m = good; m.raw_len = 1; /* the rest of the name is now "past" it */
    ck_assert_int_eq(efa_bye_msg_parse(&m, sizeof(m), &out), -EPROTO);
}
END_TEST

/* ------------------------------------------------------------ engines */

enum { DEADLINE_MS = 10000 };
#define KEY "efa-bye-test-secret-0123456789"

/* An efa engine over shm, nothing but the transport able to declare a
 * peer down; `key` NULL: no secret; efa_extra: more [efa] lines. */
static te_engine *engine(const char *key, const char *efa_extra)
{
    char ini[400];
    snprintf(ini, sizeof(ini), "[engine]\nplugin = efa\nheartbeat_ms = 0\n"
             "peer_timeout_ms = 0\nrequest_timeout_ms = 0\n%s%s%s"
             "[efa]\nprovider = shm\n%s", key ? "auth_key = " : "",
             key ? key : "", key ? "\n" : "", efa_extra);
    te_engine *e = NULL;
    te_test_engine_try(ini, &e);
    ck_assert_msg(e, "engine: %s", te_last_error());
    return e;
}

static te_peer add(te_engine *from, te_engine *to)
{
    uint8_t addr[TE_ADDR_MAX];
    size_t len = sizeof(addr);
    te_peer p;
    ck_assert_int_eq(te_engine_address(to, 0, addr, &len), 0);
    ck_assert_msg(te_peer_add(from, 0, addr, len, &p) == 0, "%s",
                  te_last_error());
    return p;
}

static char abuf[4096] __attribute__((aligned(4096)));
static char bbuf[4096] __attribute__((aligned(4096)));

/* a wrote to b, and b has a as a peer too unless one_sided; then b is
 * destroyed with b_efa as its [efa] lines. Returns te_peer_status of b at
 * a after waiting up to wait_ms for it to go down; *why: te_last_error()
 * then. */
static int close_b_ex(const char *key, const char *b_efa, int one_sided,
                      int wait_ms, char *why, size_t why_len)
{
    te_engine *a = engine(key, ""), *b = engine(key, b_efa);
    te_mr_desc d;
    te_mr *ma = te_test_reg(a, abuf, sizeof(abuf), 0, NULL);
    te_mr *mb = te_test_reg(b, bbuf, sizeof(bbuf), TE_MR_REMOTE_WRITE, &d);
    te_peer pb = add(a, b);
    if (!one_sided)
        (void)add(b, a);
    te_request r = te_test_write(pb, ma, &d, 64, DEADLINE_MS);
    r.flags |= TE_F_IMM;
    r.imm = 31;
    ck_assert_int_gt(te_submit(a, &r), 0);
    te_completion c = te_test_completion(a, DEADLINE_MS);
    ck_assert_msg(c.status == 0, "%s", c.reason);
    ck_assert_uint_eq(te_test_wait_banked(b, 31, 1, DEADLINE_MS), 1);
    ck_assert_int_eq(te_peer_status(a, 0, pb), 0);

    ck_assert_int_eq(te_mr_dereg(b, mb), 0);
    te_engine_destroy(b);
    int64_t end = te_test_now_ms() + wait_ms;
    int st;
    while ((st = te_peer_status(a, 0, pb)) == 0 && te_test_now_ms() < end)
        te_test_sleep_ms(1);
    snprintf(why, why_len, "%s", st ? te_last_error() : "");
    ck_assert_int_eq(te_mr_dereg(a, ma), 0);
    te_engine_destroy(a);
    return st;
}

static int close_b(const char *key, const char *b_efa, int wait_ms,
                   char *why, size_t why_len)
{
    return close_b_ex(key, b_efa, 0, wait_ms, why, why_len);
}

static void says_goodbye(const char *key, int one_sided)
{
    char why[512];
    int st = close_b_ex(key, "", one_sided, DEADLINE_MS, why, sizeof(why));
    ck_assert_msg(st == -ECONNRESET, "the closed peer was not reported "
                  "down (status %d)", st);
    ck_assert_msg(strstr(why, "in order") && strstr(why, "goodbye"),
                  "not reported as an orderly close: %s", why);
}

START_TEST(a_closed_engine_is_reported_closed_in_order)
{
    says_goodbye(NULL, 0);
}
END_TEST

START_TEST(a_closed_keyed_engine_is_reported_closed_in_order)
{
    says_goodbye(KEY, 0);
}
END_TEST

/* With a secret the closing side knows every remote that authenticated
 * with it: a writer it never added as a peer hears the goodbye too. */
START_TEST(a_keyed_target_tells_a_writer_it_never_added)
{
    says_goodbye(KEY, 1);
}
END_TEST

START_TEST(without_goodbyes_nothing_tells_the_peer)
{
    /* Nothing else could: no heartbeat, no timeout, no write after. */
    char why[512];
    int st = close_b(NULL, "bye_wait_ms = 0\n", 300, why, sizeof(why));
    ck_assert_msg(st == 0, "reported down without a goodbye: %s", why);
}
END_TEST

/* Four engines of this process, each a peer of the others and written to
 * by them, destroyed at once from four threads: each says goodbye to
 * endpoints that are closing too (efa_local.h: a send to one that closed
 * first is skipped). Every destroy returns (the ctest timeout catches a
 * hang), ten rounds. */
enum { NENG = 4 };
static te_engine *eng[NENG];

static void *destroy_one(void *arg)
{
    te_engine_destroy(arg);
    return NULL;
}

START_TEST(engines_closing_together_all_return)
{
    static char bufs[NENG][4096] __attribute__((aligned(4096)));
    for (int round = 0; round < 10; round++) {
        te_mr_desc d[NENG];
        te_mr *mr[NENG];
        te_peer peer[NENG][NENG];
        for (int i = 0; i < NENG; i++) {
            eng[i] = engine(round & 1 ? KEY : NULL, "");
            mr[i] = te_test_reg(eng[i], bufs[i], sizeof(bufs[i]),
                                TE_MR_REMOTE_WRITE, &d[i]);
        }
        for (int i = 0; i < NENG; i++)
            for (int j = 0; j < NENG; j++)
                if (i != j)
                    peer[i][j] = add(eng[i], eng[j]);
        for (int i = 0; i < NENG; i++)
            for (int j = 0; j < NENG; j++) {
                if (i == j)
                    continue;
                te_request r = te_test_write(peer[i][j], mr[i], &d[j], 8,
                                             DEADLINE_MS);
                ck_assert_int_gt(te_submit(eng[i], &r), 0);
                te_completion c = te_test_completion(eng[i], DEADLINE_MS);
                ck_assert_msg(c.status == 0, "%s", c.reason);
            }
        for (int i = 0; i < NENG; i++)
            ck_assert_int_eq(te_mr_dereg(eng[i], mr[i]), 0);
        pthread_t th[NENG];
        for (int i = 0; i < NENG; i++)
            ck_assert_int_eq(pthread_create(&th[i], NULL, destroy_one,
                                            eng[i]), 0);
        for (int i = 0; i < NENG; i++)
            pthread_join(th[i], NULL);
    }
}
END_TEST

int main(void)
{
    int rc = TE_TEST_RUN("efa_bye_wire",
        TE_TCASE("wire", build_then_parse_gives_the_message_back,
                 parse_refuses_damage));
    if (rc)
        return rc;
    te_test_require("[engine]\nplugin = efa\n[efa]\nprovider = shm\n",
                    "efa plugin with libfabric's shm");
    return TE_TEST_RUN("efa_bye",
        TE_TCASE_FULL("engines", 60, NULL, NULL,
                      a_closed_engine_is_reported_closed_in_order,
                      a_closed_keyed_engine_is_reported_closed_in_order,
                      a_keyed_target_tells_a_writer_it_never_added,
                      without_goodbyes_nothing_tells_the_peer,
                      engines_closing_together_all_return));
}
