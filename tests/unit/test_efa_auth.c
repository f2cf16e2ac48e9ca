/* Job authentication of the efa plugin (docs/security.md, efa_auth.h):
 *  - the handshake's messages and MAC input (plugins/efa/efa_auth_wire.c,
 *    pure, compiled in here);
 *  - engines of this process over libfabric's shm: the same secret
 *    authenticates and transfers; another secret is refused on both sides
 *    with the reason; a keyless engine and a keyed one refuse each other
 *    at te_peer_add. The engine tests skip (77) without the efa plugin or
 *    shm. */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/te.h"
#include "te_test.h"
#include "../../plugins/efa/efa_auth_wire.c"

/* ------------------------------------------------------------ wire */

static struct efa_auth_msg msg_of(uint8_t type)
{
    struct efa_auth_msg m;
    memset(&m, 0, sizeof(m));
    m.magic = EFA_AUTH_MAGIC;
    m.version = EFA_AUTH_VERSION;
    m.type = type;
    if (type == EFA_AUTH_HELLO)
        m.addr_len = 72;
    return m;
}

START_TEST(parse_accepts_every_type_and_refuses_damage)
{
    struct efa_auth_msg out;
    for (uint8_t t = EFA_AUTH_HELLO; t <= EFA_AUTH_FORGOT; t++) {
        struct efa_auth_msg m = msg_of(t);
        ck_assert_int_eq(efa_auth_msg_parse(&m, sizeof(m), &out), 0);
        ck_assert_int_eq(out.type, t);
    }
    struct efa_auth_msg m = msg_of(EFA_AUTH_PROOF);
    ck_assert_int_eq(efa_auth_msg_parse(&m, sizeof(m) - 1, &out), -EPROTO);
    ck_assert_int_eq(efa_auth_msg_parse(NULL, sizeof(m), &out), -EPROTO);
    m.magic ^= 1;
    ck_assert_int_eq(efa_auth_msg_parse(&m, sizeof(m), &out), -EPROTO);
    m = msg_of(EFA_AUTH_PROOF);
    m.version = 2;
    ck_assert_int_eq(efa_auth_msg_parse(&m, sizeof(m), &out), -EPROTO);
    m = msg_of(0);
    ck_assert_int_eq(efa_auth_msg_parse(&m, sizeof(m), &out), -EPROTO);
    m = msg_of(EFA_AUTH_FORGOT + 1);
    ck_assert_int_eq(efa_auth_msg_parse(&m, sizeof(m), &out), -EPROTO);
    /* A HELLO needs an address that fits; nothing else carries one. */
    m = msg_of(EFA_AUTH_HELLO);
    m.addr_len = 0;
    ck_assert_int_eq(efa_auth_msg_parse(&m, sizeof(m), &out), -EPROTO);
    m.addr_len = sizeof(m.addr) + 1;
    ck_assert_int_eq(efa_auth_msg_parse(&m, sizeof(m), &out), -EPROTO);
    m = msg_of(EFA_AUTH_CHALLENGE);
    m.addr_len = 8;
    ck_assert_int_eq(efa_auth_msg_parse(&m, sizeof(m), &out), -EPROTO);
}
END_TEST

START_TEST(bind_covers_role_nonces_and_both_addresses)
{
    uint8_t ni[EFA_AUTH_NONCE_LEN], nt[EFA_AUTH_NONCE_LEN];
    uint8_t ia[40], ta[40];
    memset(ni, 1, sizeof(ni));
    memset(nt, 2, sizeof(nt));
    memset(ia, 3, sizeof(ia));
    memset(ta, 4, sizeof(ta));
    uint8_t base[EFA_AUTH_BIND_MAX], other[EFA_AUTH_BIND_MAX];
    size_t n = efa_auth_bind(base, EFA_AUTH_ROLE_TARGET, ni, nt, ia,
                             sizeof(ia), ta, sizeof(ta));
    ck_assert_uint_gt(n, 2 * sizeof(ia));
    ck_assert_int_eq(memcmp(base, "te-efa-auth-v1", 14), 0);
    /* Each input changes the bytes. */
    size_t m = efa_auth_bind(other, EFA_AUTH_ROLE_INITIATOR, ni, nt, ia,
                             sizeof(ia), ta, sizeof(ta));
    ck_assert(m != n || memcmp(base, other, n) != 0);
    m = efa_auth_bind(other, EFA_AUTH_ROLE_TARGET, nt, ni, ia, sizeof(ia),
                      ta, sizeof(ta));
    ck_assert(m != n || memcmp(base, other, n) != 0);
    m = efa_auth_bind(other, EFA_AUTH_ROLE_TARGET, ni, nt, ta, sizeof(ta),
                      ia, sizeof(ia));
    ck_assert(m != n || memcmp(base, other, n) != 0);
    /* Moving a byte from one address to the other changes them too. */
    m = efa_auth_bind(other, EFA_AUTH_ROLE_TARGET, ni, nt, ia, sizeof(ia) - 1,
                      ta - 1 + 1, sizeof(ta));
    ck_assert(m != n || memcmp(base, other, n) != 0);
    /* The same inputs, the same bytes. */
    m = efa_auth_bind(other, EFA_AUTH_ROLE_TARGET, ni, nt, ia, sizeof(ia),
                      ta, sizeof(ta));
    ck_assert_uint_eq(m, n);
    ck_assert_int_eq(memcmp(base, other, n), 0);
    /* An address longer than the ABI allows is refused. */
    static uint8_t big[TE_PLUGIN_MAX_ADDR_LEN + 1];
    ck_assert_uint_eq(efa_auth_bind(other, 1, ni, nt, big, sizeof(big), ta,
                                    sizeof(ta)), 0);
}
END_TEST

START_TEST(exactly_one_side_keeps_initiating)
{
    const uint8_t a[] = {1, 2, 3}, b[] = {1, 2, 4}, c[] = {1, 2};
    ck_assert(efa_auth_keeps_initiator(a, 3, b, 3) !=
              efa_auth_keeps_initiator(b, 3, a, 3));
    ck_assert(efa_auth_keeps_initiator(a, 3, c, 2) !=
              efa_auth_keeps_initiator(c, 2, a, 3));
    ck_assert(strstr(efa_auth_reason_text(EFA_AUTH_R_BAD_MAC),
                     "engine.auth_key"));
}
END_TEST

/* ------------------------------------------------------------ engines */

#define KEY1 "efa-auth-test-secret-one-0123"
#define KEY2 "efa-auth-test-secret-two-4567"

/* An efa engine over shm with secret `key` (NULL: none), the [engine]
 * lines `extra` and the [efa] lines `efa_extra`. */
static te_engine *shm_engine_ex(const char *key, const char *extra,
                                const char *efa_extra)
{
    char ini[400];
    snprintf(ini, sizeof(ini), "[engine]\nplugin = efa\n%s%s%s%s[efa]\n"
             "provider = shm\n%s", key ? "auth_key = " : "", key ? key : "",
             key ? "\n" : "", extra, efa_extra);
    te_engine *e = NULL;
    te_test_engine_try(ini, &e);
    ck_assert_msg(e, "engine: %s", te_last_error());
    return e;
}

static te_engine *shm_engine_with(const char *key, const char *extra)
{
    return shm_engine_ex(key, extra, "");
}

static te_engine *shm_engine(const char *key)
{
    return shm_engine_with(key, "");
}

static int add(te_engine *from, te_engine *to, te_peer *p)
{
    uint8_t addr[TE_ADDR_MAX];
    size_t len = sizeof(addr);
    ck_assert_int_eq(te_engine_address(to, 0, addr, &len), 0);
    return te_peer_add(from, 0, addr, len, p);
}

/* Engines a (key ka) and b (key kb), a source on a, a writable region on
 * b described by d, and b added to a (the add itself succeeds: the
 * handshake runs behind it). */
struct two {
    te_engine *a, *b;
    te_mr *ma, *mb;
    te_mr_desc d;
    te_peer p;
};
static char abuf[4096] __attribute__((aligned(4096)));
static char bbuf[4096] __attribute__((aligned(4096)));

/* two_open with the [engine] lines a_extra for a and, for b, the
 * [engine] lines b_extra and the [efa] lines b_efa. */
static void two_open_ex(struct two *t, const char *ka, const char *a_extra,
                        const char *kb, const char *b_extra,
                        const char *b_efa)
{
    t->a = shm_engine_ex(ka, a_extra, "");
    t->b = shm_engine_ex(kb, b_extra, b_efa);
    t->ma = te_test_reg(t->a, abuf, sizeof(abuf), 0, NULL);
    t->mb = te_test_reg(t->b, bbuf, sizeof(bbuf), TE_MR_REMOTE_WRITE, &t->d);
    ck_assert_msg(add(t->a, t->b, &t->p) == 0, "%s", te_last_error());
}

static void two_open(struct two *t, const char *ka, const char *kb)
{
    two_open_ex(t, ka, "", kb, "", "");
}

static void two_close(struct two *t)
{
    ck_assert_int_eq(te_mr_dereg(t->b, t->mb), 0);
    ck_assert_int_eq(te_mr_dereg(t->a, t->ma), 0);
    te_engine_destroy(t->b);
    te_engine_destroy(t->a);
}

START_TEST(same_key_authenticates_and_transfers)
{
    struct two t;
    two_open(&t, KEY1, KEY1);
    te_engine *a = t.a, *b = t.b;
    te_mr *ma = t.ma;
    te_mr_desc d = t.d;
    te_peer p = t.p;
    memset(abuf, 0x6b, 256);
    te_request r = te_test_write(p, ma, &d, 256, 10000);
    r.flags |= TE_F_IMM;
    r.imm = 4242;
    ck_assert_int_gt(te_submit(a, &r), 0);
    te_completion c = te_test_completion(a, 10000);
    ck_assert_msg(c.status == 0, "%s", c.reason);
    ck_assert_uint_eq(te_test_wait_banked(b, 4242, 1, 10000), 1);
    ck_assert_int_eq(((volatile char *)bbuf)[255], 0x6b);
    /* b adds a back: the address is authenticated already. */
    te_peer back;
    ck_assert_msg(add(b, a, &back) == 0, "%s", te_last_error());
    two_close(&t);
}
END_TEST

START_TEST(another_key_is_refused_with_the_reason)
{
    struct two t;
    two_open(&t, KEY1, KEY2);
    te_engine *a = t.a, *b = t.b;
    te_mr *ma = t.ma;
    te_mr_desc d = t.d;
    te_peer p = t.p;
    memset(abuf, 0x6b, 64);
    te_request r = te_test_write(p, ma, &d, 64, 20000);
    r.flags |= TE_F_IMM;
    r.imm = 77;
    int64_t id = te_submit(a, &r);
    if (id > 0) {
        te_completion c = te_test_completion(a, 20000);
        /* The reason (96 bytes) starts with the core's words; the whole
         * of it is the peer's, below. */
        ck_assert_msg(c.status < 0, "the write succeeded");
    } else {
        ck_assert_msg(strstr(te_last_error(), "failed authentication"), "%s",
                      te_last_error());
    }
    int st = te_peer_status(a, 0, p);
    ck_assert_int_ne(st, 0);
    ck_assert_msg(strstr(te_last_error(), "failed authentication"), "%s",
                  te_last_error());
    /* Nothing arrived. */
    uint64_t banked = 0;
    te_test_sleep_ms(50);
    int armed = 0;
    ck_assert_int_eq(te_imm_poll(b, 77, &banked, &armed), 0);
    ck_assert_uint_eq(banked, 0);
    ck_assert_int_eq(((volatile char *)bbuf)[0], 0);
    two_close(&t);
}
END_TEST

START_TEST(keyless_and_keyed_refuse_each_other_at_add)
{
    te_engine *a = shm_engine(KEY1), *b = shm_engine(NULL);
    te_peer p;
    ck_assert_int_eq(add(a, b, &p), -EACCES);
    ck_assert_msg(strstr(te_last_error(), "failed authentication: it has no "
                         "key"), "%s", te_last_error());
    ck_assert_int_eq(add(b, a, &p), -EACCES);
    ck_assert_msg(strstr(te_last_error(), "requires authentication"), "%s",
                  te_last_error());
    te_engine_destroy(b);
    te_engine_destroy(a);
}
END_TEST

/*
 * A handshake in progress waits for the other side's next message, which
 * comes within microseconds: the side waiting must keep polling, not nap
 * (shm gives no wait object, so an idle worker sleeps engine.idle_sleep_us
 * at a time) or block, else every hop of the handshake costs a nap
 * (plugins/efa/efa_cq.c; measured +36 % set-up time against +7 %,
 * tools/te-bench/auth-setup.py). Caller mode shows it: te_progress()
 * reports work while the handshake waits for the peer, and nothing once
 * everything is done.
 */
START_TEST(a_handshake_in_progress_keeps_the_caller_polling)
{
    te_engine *a = shm_engine_with(KEY1, "progress = caller\n"),
              *b = shm_engine_with(KEY1, "progress = caller\n");
    te_mr_desc d;
    te_mr *ma = te_test_reg(a, abuf, sizeof(abuf), 0, NULL);
    te_mr *mb = te_test_reg(b, bbuf, sizeof(bbuf), TE_MR_REMOTE_WRITE, &d);
    te_peer p;
    ck_assert_msg(add(a, b, &p) == 0, "%s", te_last_error());
    /* a said hello (or will, once b's endpoint takes it); b has not
     * polled, so a waits: every turn of a says "keep calling". */
    for (int i = 0; i < 20; i++)
        ck_assert_int_gt(te_progress(a, -1, 0), 0);
    /* Both progress: the handshake ends and a write goes through. */
    memset(abuf, 0x5a, 64);
    te_request r = te_test_write(p, ma, &d, 64, 10000);
    r.flags |= TE_F_IMM;
    r.imm = 515;
    ck_assert_int_gt(te_submit(a, &r), 0);
    te_completion c;
    int got = 0;
    for (int i = 0; i < 1000000 && !got; i++) {
        te_progress(b, -1, 0);
        got = te_poll_completions(a, &c, 1, 0);
        ck_assert_int_ge(got, 0);
    }
    ck_assert_int_eq(got, 1);
    ck_assert_msg(c.status == 0, "%s", c.reason);
    uint64_t banked = 0;
    int armed = 0;
    for (int i = 0; i < 1000000 && !banked; i++) {
        te_progress(b, -1, 0);
        ck_assert_int_eq(te_imm_poll(b, 515, &banked, &armed), 0);
    }
    ck_assert_uint_eq(banked, 1);
    /* Done: neither side keeps reporting work (the mark does not stick). */
    int idle_a = 0, idle_b = 0;
    for (int i = 0; i < 100000 && !(idle_a && idle_b); i++) {
        idle_a |= te_progress(a, -1, 0) == 0;
        idle_b |= te_progress(b, -1, 0) == 0;
    }
    ck_assert_msg(idle_a && idle_b, "still busy after the handshake: a %d b %d",
                  idle_a, idle_b);
    ck_assert_int_eq(te_mr_dereg(b, mb), 0);
    ck_assert_int_eq(te_mr_dereg(a, ma), 0);
    te_engine_destroy(b);
    te_engine_destroy(a);
}
END_TEST

/*
 * Forgetting an idle remote (efa_auth.c forget_idle): b, whose record of a
 * no peer of b refers to (a only writes to b), asks a to forget once a has
 * been silent for auth_forget_idle_ms, and frees the record on a's FORGOT
 * (the log line says which way). a proves itself again before its next
 * operation, so that one's immediate is counted like the first: without
 * the exchange (b freeing alone) it would be dropped.
 */
static atomic_int forgot_agreed, forgot_silent;

static void forget_sink(int level, const char *origin, const char *msg,
                        void *arg)
{
    (void)arg;
    bool forgot = !strcmp(origin, "efa") &&
                  strstr(msg, "forgot the authentication of pid ");
    if (forgot && strstr(msg, "it agreed"))
        atomic_fetch_add(&forgot_agreed, 1);
    else if (forgot && strstr(msg, "no answer"))
        atomic_fetch_add(&forgot_silent, 1);
    else if (level <= 1)
        fprintf(stderr, "%s: %s\n", origin, msg);
}

static int wait_for(atomic_int *what, int timeout_ms)
{
    int64_t end = te_test_now_ms() + timeout_ms;
    while (!atomic_load(what) && te_test_now_ms() < end)
        te_test_sleep_ms(10);
    return atomic_load(what);
}

/* a (the [engine] lines a_extra) writes to b, which forgets a remote idle
 * for 300 ms and logs at info level (the sink reads the outcome). */
static void forget_open(struct two *t, const char *a_extra)
{
    atomic_store(&forgot_agreed, 0);
    atomic_store(&forgot_silent, 0);
    te_set_log_fn(forget_sink, NULL);
    two_open_ex(t, KEY1, a_extra, KEY1, "log_level = 2\n",
                "auth_forget_idle_ms = 300\n");
}

static void forget_close(struct two *t)
{
    te_set_log_fn(NULL, NULL);
    two_close(t);
}

/* Submit a WriteImm of len bytes of abuf from a to b's region. */
static void submit_imm_write(struct two *t, uint64_t len, uint32_t imm)
{
    te_request r = te_test_write(t->p, t->ma, &t->d, len, 10000);
    r.flags |= TE_F_IMM;
    r.imm = imm;
    ck_assert_int_gt(te_submit(t->a, &r), 0);
}

START_TEST(an_idle_remote_is_forgotten_and_proves_itself_again)
{
    struct two t;
    forget_open(&t, "");
    for (uint32_t round = 0; round < 2; round++) {
        uint32_t imm = 9100 + round;
        memset(abuf, 0x30 + (int)round, 128);
        submit_imm_write(&t, 128, imm);
        te_completion c = te_test_completion(t.a, 10000);
        ck_assert_msg(c.status == 0, "%s", c.reason);
        ck_assert_uint_eq(te_test_wait_banked(t.b, imm, 1, 10000), 1);
        ck_assert_int_eq(((volatile char *)bbuf)[127], 0x30 + (int)round);
        if (round == 0)
            ck_assert_msg(wait_for(&forgot_agreed, 20000),
                          "b never forgot a (no agreed FORGET)");
    }
    ck_assert_int_eq(atomic_load(&forgot_silent), 0);
    forget_close(&t);
}
END_TEST

/*
 * A remote that answers nothing (a in caller mode, not progressed) is taken
 * for gone after two silent rounds and freed with a warning. When a runs
 * again it reads the FORGETs first, answers (to nobody: b dropped the
 * record) and proves itself again: its next immediate is counted.
 */
START_TEST(a_silent_remote_is_freed_after_two_rounds)
{
    struct two t;
    forget_open(&t, "progress = caller\n");
    for (uint32_t round = 0; round < 2; round++) {
        uint32_t imm = 9200 + round;
        submit_imm_write(&t, 64, imm);
        te_completion c;
        uint64_t banked = 0;
        int got = 0, armed = 0;
        for (int i = 0; i < 2000000 && !(got && banked); i++) {
            if (!got)
                got = te_poll_completions(t.a, &c, 1, 0);
            ck_assert_int_ge(got, 0);
            te_progress(t.a, -1, 0);
            ck_assert_int_eq(te_imm_poll(t.b, imm, &banked, &armed), 0);
        }
        ck_assert_int_eq(got, 1);
        ck_assert_msg(c.status == 0, "%s", c.reason);
        ck_assert_uint_eq(banked, 1);
        if (round == 0) {
            /* a is not progressed: b's FORGETs wait in its queue. */
            ck_assert_msg(wait_for(&forgot_silent, 20000),
                          "b never gave up on the silent a");
            ck_assert_int_eq(atomic_load(&forgot_agreed), 0);
            /* a reads them (and answers) before it posts again. */
            for (int i = 0; i < 2000; i++)
                te_progress(t.a, -1, 0);
        }
    }
    forget_close(&t);
}
END_TEST

int main(void)
{
    int rc = TE_TEST_RUN("efa_auth_wire",
        TE_TCASE("wire", parse_accepts_every_type_and_refuses_damage,
                 bind_covers_role_nonces_and_both_addresses,
                 exactly_one_side_keeps_initiating));
    if (rc)
        return rc;
    te_test_require("[engine]\nplugin = efa\n[efa]\nprovider = shm\n",
                    "efa plugin with libfabric's shm");
    return TE_TEST_RUN("efa_auth",
        TE_TCASE_FULL("engines", 60, NULL, NULL,
                      same_key_authenticates_and_transfers,
                      another_key_is_refused_with_the_reason,
                      keyless_and_keyed_refuse_each_other_at_add,
                      a_handshake_in_progress_keeps_the_caller_polling,
                      an_idle_remote_is_forgotten_and_proves_itself_again,
                      a_silent_remote_is_freed_after_two_rounds));
}
