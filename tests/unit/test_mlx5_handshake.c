/*
 * The mlx5 plugin's connection handshake (plugins/mlx5/mx_hs.c) and wire
 * formats (plugins/mlx5/mx_wire.c), without a NIC: two simulated sides
 * exchange datagrams over a simulated network that can lose, duplicate,
 * delay and reorder them, on a simulated clock. The pure sources are
 * compiled into this test directly.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../plugins/mlx5/mx_hs.c"
#include "../../plugins/mlx5/mx_wire.c"
#include "te_test.h"

#define MS 1000000ull

static const struct mx_hs_params P = {
    .timeout_ns = 2000 * MS, .retry_ns = 10 * MS, .retry_max_ns = 200 * MS};

/* ------------------------------------------------------------ simulation */

/* A fake QP: what mx_hs asked us to connect it to. */
struct fqp {
    uint32_t qpn, epoch;
    int connected;
    uint32_t to_qpn; /* remote QP it is connected to */
};

struct side {
    struct mx_hs h;
    int exists;        /* conn object present (passive sides start without) */
    struct fqp qp;
    uint32_t *epochs;  /* NIC-wide epoch counter */
    uint32_t next_qpn;
    int ups, downs, renews, sends;
    uint64_t id;
};

struct pkt {
    int to; /* 0 or 1 */
    uint64_t at;
    struct mx_hs_wire m;
};

struct net {
    struct pkt q[4096];
    int n;
    uint64_t now;
    uint64_t latency;
    uint32_t rng;
    int drop_pct;      /* random loss */
    int drop_seq;      /* drop the datagram with this number (1-based) */
    uint64_t jitter;   /* extra random delay, reorders datagrams */
    int dup_pct;       /* duplicate */
    int dead[2];       /* side never receives */
    int sent_total;
};

static uint32_t rnd(struct net *n)
{
    n->rng = n->rng * 1103515245u + 12345u;
    return n->rng >> 8;
}

static void net_send(struct net *n, int to, const struct mx_hs_wire *m)
{
    n->sent_total++;
    if (n->sent_total == n->drop_seq)
        return;
    if (n->drop_pct && (int)(rnd(n) % 100) < n->drop_pct)
        return;
    int copies = (n->dup_pct && (int)(rnd(n) % 100) < n->dup_pct) ? 2 : 1;
    for (int c = 0; c < copies && n->n < 4096; c++) {
        n->q[n->n].to = to;
        n->q[n->n].at = n->now + n->latency + (n->jitter ? rnd(n) % n->jitter : 0);
        n->q[n->n].m = *m;
        n->n++;
    }
}

static void new_qp(struct side *s)
{
    s->qp.qpn = s->next_qpn++;
    s->qp.epoch = ++*s->epochs;
    s->qp.connected = 0;
    s->qp.to_qpn = 0;
}

static void act(struct net *n, struct side *s, int self, unsigned a,
                const struct mx_hs_wire *out)
{
    ck_assert_msg(!(a & MX_HS_RENEW), "RENEW must be handled by the caller");
    if (a & MX_HS_CONNECT) {
        ck_assert(!s->qp.connected);
        s->qp.connected = 1;
        s->qp.to_qpn = s->h.r_qpn;
    }
    if (a & MX_HS_SEND) {
        s->sends++;
        struct mx_hs_wire m = *out;
        m.src_id = s->id;
        net_send(n, !self, &m);
    }
    if (a & MX_HS_UP)
        s->ups++;
    if (a & MX_HS_DOWN)
        s->downs++;
}

static void side_init(struct side *s, uint64_t id, uint32_t *epochs,
                      uint32_t qpn_base)
{
    memset(s, 0, sizeof(*s));
    s->id = id;
    s->epochs = epochs;
    s->next_qpn = qpn_base;
}

/* peer_add on side s: create the QP and start, unless a datagram of the
 * other side created the connection already (then peer_add reuses it). */
static void side_connect(struct net *n, struct side *s, int self)
{
    if (s->exists)
        return;
    new_qp(s);
    mx_hs_init(&s->h, s->qp.qpn, 100 + s->qp.qpn, s->qp.epoch, true, n->now, &P);
    s->exists = 1;
    struct mx_hs_wire out;
    act(n, s, self, mx_hs_on_timer(&s->h, n->now, &P, &out), &out);
}

static void side_renew(struct net *n, struct side *s)
{
    s->renews++;
    new_qp(s);
    mx_hs_renewed(&s->h, s->qp.qpn, 100 + s->qp.qpn, s->qp.epoch, n->now, &P);
}

static void deliver(struct net *n, struct side *sides, const struct pkt *pk)
{
    struct side *s = &sides[pk->to];
    if (n->dead[pk->to])
        return;
    struct mx_hs_wire out;
    if (!s->exists) { /* a passive conn is created by the first datagram */
        if (pk->m.type != MX_HS_T_HELLO)
            return;
        new_qp(s);
        mx_hs_init(&s->h, s->qp.qpn, 100 + s->qp.qpn, s->qp.epoch, false,
                   n->now, &P);
        s->exists = 1;
    }
    unsigned a = mx_hs_on_msg(&s->h, &pk->m, n->now, &P, &out);
    if (a & MX_HS_RENEW) {
        side_renew(n, s);
        a = mx_hs_on_msg(&s->h, &pk->m, n->now, &P, &out);
        ck_assert(!(a & MX_HS_RENEW));
    }
    act(n, s, pk->to, a, &out);
}

/* Run the simulation until both sides settle or the horizon passes. */
static void run(struct net *n, struct side *sides, uint64_t horizon)
{
    uint64_t end = n->now + horizon;
    for (int iter = 0; iter < 1000000 && n->now < end; iter++) {
        /* earliest event: a datagram or a timer */
        uint64_t t = end;
        int pi = -1;
        for (int i = 0; i < n->n; i++)
            if (n->q[i].at < t) {
                t = n->q[i].at;
                pi = i;
            }
        int ti = -1;
        for (int k = 0; k < 2; k++) {
            if (!sides[k].exists)
                continue;
            uint64_t e = mx_hs_next_event(&sides[k].h);
            if (e < t || (e == t && pi < 0)) {
                t = e;
                ti = k;
                pi = -1;
            }
        }
        if (pi < 0 && ti < 0) {
            n->now = end;
            break;
        }
        n->now = t;
        if (pi >= 0) {
            struct pkt pk = n->q[pi];
            n->q[pi] = n->q[--n->n];
            deliver(n, sides, &pk);
        } else {
            struct mx_hs_wire out;
            act(n, &sides[ti], ti,
                mx_hs_on_timer(&sides[ti].h, n->now, &P, &out), &out);
        }
    }
}

/* Both established, each QP connected to the other's current QP. */
static void assert_paired(const struct side *s)
{
    ck_assert_int_eq(s[0].h.state, MX_HS_ESTABLISHED);
    ck_assert_int_eq(s[1].h.state, MX_HS_ESTABLISHED);
    ck_assert(s[0].qp.connected && s[1].qp.connected);
    ck_assert_uint_eq(s[0].qp.to_qpn, s[1].qp.qpn);
    ck_assert_uint_eq(s[1].qp.to_qpn, s[0].qp.qpn);
    ck_assert_uint_eq(s[0].h.l_qpn, s[0].qp.qpn);
    ck_assert_uint_eq(s[1].h.l_qpn, s[1].qp.qpn);
}

static void setup(struct net *n, struct side *s, uint32_t *ea, uint32_t *eb)
{
    memset(n, 0, sizeof(*n));
    n->latency = 1 * MS;
    n->rng = 12345;
    side_init(&s[0], 0xA, ea, 1000);
    side_init(&s[1], 0xB, eb, 2000);
}

/* ------------------------------------------------------------- cases */

START_TEST(plain_open)
{
    struct net n;
    struct side s[2];
    uint32_t ea = 0, eb = 0;
    setup(&n, s, &ea, &eb);
    side_connect(&n, &s[0], 0);
    run(&n, s, 100 * MS);
    assert_paired(s);
    ck_assert_int_eq(s[0].ups, 1);
    ck_assert_int_eq(s[1].ups, 1);
    /* hello, answer, final answer: three datagrams and silence. */
    ck_assert_int_eq(n.sent_total, 3);
    ck_assert_int_eq(mx_hs_next_event(&s[0].h), UINT64_MAX);
    ck_assert_int_eq(mx_hs_next_event(&s[1].h), UINT64_MAX);
}
END_TEST

/* Each of the three datagrams lost in turn, then random heavy loss. */
START_TEST(loss)
{
    for (int k = 1; k <= 3; k++) {
        struct net n;
        struct side s[2];
        uint32_t ea = 0, eb = 0;
        setup(&n, s, &ea, &eb);
        n.drop_seq = k; /* hello, answer or final answer */
        side_connect(&n, &s[0], 0);
        run(&n, s, 1500 * MS);
        assert_paired(s);
        ck_assert_int_eq(s[0].ups, 1);
        ck_assert_int_eq(s[1].ups, 1);
    }
    for (uint32_t seed = 1; seed <= 50; seed++) {
        struct net n;
        struct side s[2];
        uint32_t ea = 0, eb = 0;
        setup(&n, s, &ea, &eb);
        n.rng = seed;
        n.drop_pct = 30;
        side_connect(&n, &s[0], 0);
        run(&n, s, 1900 * MS);
        assert_paired(s);
    }
}
END_TEST

/* Every datagram delivered twice, reordered by jitter: one QP pair, one UP
 * per side, no renewals. */
START_TEST(duplicates)
{
    for (uint32_t seed = 1; seed <= 50; seed++) {
        struct net n;
        struct side s[2];
        uint32_t ea = 0, eb = 0;
        setup(&n, s, &ea, &eb);
        n.rng = seed;
        n.dup_pct = 100;
        n.jitter = 5 * MS;
        side_connect(&n, &s[0], 0);
        run(&n, s, 500 * MS);
        assert_paired(s);
        ck_assert_int_eq(s[0].ups, 1);
        ck_assert_int_eq(s[1].ups, 1);
        ck_assert_int_eq(s[0].renews + s[1].renews, 0);
    }
}
END_TEST

/* Both sides connect at the same moment (and with skew): one QP each,
 * paired with each other, no tie-break, no renewal. */
START_TEST(simultaneous_open)
{
    for (int skew = 0; skew < 4; skew++) {
        struct net n;
        struct side s[2];
        uint32_t ea = 0, eb = 0;
        setup(&n, s, &ea, &eb);
        n.latency = 2 * MS;
        side_connect(&n, &s[0], 0);
        if (skew)
            run(&n, s, (uint64_t)skew * MS);
        side_connect(&n, &s[1], 1);
        run(&n, s, 200 * MS);
        assert_paired(s);
        ck_assert_int_eq(s[0].ups, 1);
        ck_assert_int_eq(s[1].ups, 1);
        ck_assert_int_eq(s[0].renews + s[1].renews, 0);
        ck_assert_int_lt(n.sent_total, 12);
    }
    /* and under loss and duplication */
    for (uint32_t seed = 1; seed <= 50; seed++) {
        struct net n;
        struct side s[2];
        uint32_t ea = 0, eb = 0;
        setup(&n, s, &ea, &eb);
        n.rng = seed;
        n.drop_pct = 30;
        n.dup_pct = 30;
        n.jitter = 3 * MS;
        side_connect(&n, &s[0], 0);
        side_connect(&n, &s[1], 1);
        run(&n, s, 1900 * MS);
        assert_paired(s);
    }
}
END_TEST

/* Nobody answers: retransmissions back off, the attempt fails at its
 * deadline, exactly once, and then stays quiet. */
START_TEST(timeout)
{
    struct net n;
    struct side s[2];
    uint32_t ea = 0, eb = 0;
    setup(&n, s, &ea, &eb);
    n.dead[1] = 1;
    side_connect(&n, &s[0], 0);
    run(&n, s, 1999 * MS);
    ck_assert_int_eq(s[0].h.state, MX_HS_CONNECTING);
    ck_assert_int_eq(s[0].downs, 0);
    run(&n, s, 2 * MS);
    ck_assert_int_eq(s[0].h.state, MX_HS_FAILED);
    ck_assert_int_eq(s[0].downs, 1);
    /* 10+20+40+80+160+200*... ms: back-off, not a flood */
    ck_assert_int_le(s[0].sends, 16);
    ck_assert_int_ge(s[0].sends, 8);
    int before = n.sent_total;
    run(&n, s, 10000 * MS);
    ck_assert_int_eq(n.sent_total, before);
    ck_assert_int_eq(s[0].downs, 1);
    ck_assert_int_eq(mx_hs_next_event(&s[0].h), UINT64_MAX);
    /* A FAILED side ignores late datagrams. */
    struct mx_hs_wire m, out;
    memset(&m, 0, sizeof(m));
    m.type = MX_HS_T_HELLO;
    m.qpn = 7;
    m.epoch = 1;
    m.flags = MX_HS_F_ACKREQ;
    ck_assert_uint_eq(mx_hs_on_msg(&s[0].h, &m, n.now, &P, &out), 0);
    /* A restart renews the QP and tries again, with a fresh deadline. */
    ck_assert_uint_eq(mx_hs_restart(&s[0].h), MX_HS_RENEW);
    n.dead[1] = 0;
    side_renew(&n, &s[0]);
    run(&n, s, 100 * MS);
    assert_paired(s);
}
END_TEST

/* QPs replaced while still connecting (e.g. RTR keeps failing) do not
 * push the deadline out: it bounds the time without a connection. */
START_TEST(renew_keeps_deadline)
{
    struct net n;
    struct side s[2];
    uint32_t ea = 0, eb = 0;
    setup(&n, s, &ea, &eb);
    n.dead[1] = 1;
    side_connect(&n, &s[0], 0);
    uint64_t deadline = s[0].h.deadline;
    for (int i = 0; i < 5; i++) {
        run(&n, s, 300 * MS);
        ck_assert_uint_eq(mx_hs_on_error(&s[0].h), MX_HS_RENEW);
        side_renew(&n, &s[0]);
        ck_assert_uint_eq(s[0].h.deadline, deadline);
    }
    run(&n, s, 2000 * MS);
    ck_assert_int_eq(s[0].h.state, MX_HS_FAILED);
    ck_assert_int_eq(s[0].downs, 1);
}
END_TEST

/* A QP error on one side after establishment: both sides replace their QP
 * (never reusing one in the error state) and pair again. */
START_TEST(qp_error_renews_both)
{
    for (int who = 0; who < 2; who++) {
        struct net n;
        struct side s[2];
        uint32_t ea = 0, eb = 0;
        setup(&n, s, &ea, &eb);
        side_connect(&n, &s[0], 0);
        run(&n, s, 100 * MS);
        assert_paired(s);
        uint32_t old0 = s[0].qp.qpn, old1 = s[1].qp.qpn;
        ck_assert_uint_eq(mx_hs_on_error(&s[who].h), MX_HS_RENEW);
        side_renew(&n, &s[who]);
        run(&n, s, 200 * MS);
        assert_paired(s);
        ck_assert_uint_ne(s[0].qp.qpn, old0);
        ck_assert_uint_ne(s[1].qp.qpn, old1);
        ck_assert_int_eq(s[0].renews, 1);
        ck_assert_int_eq(s[1].renews, 1);
    }
    /* both notice the error at once */
    struct net n;
    struct side s[2];
    uint32_t ea = 0, eb = 0;
    setup(&n, s, &ea, &eb);
    side_connect(&n, &s[0], 0);
    run(&n, s, 100 * MS);
    mx_hs_on_error(&s[0].h);
    mx_hs_on_error(&s[1].h);
    side_renew(&n, &s[0]);
    side_renew(&n, &s[1]);
    run(&n, s, 200 * MS);
    assert_paired(s);
    ck_assert_int_eq(s[0].renews, 1);
    ck_assert_int_eq(s[1].renews, 1);
}
END_TEST

/* Datagrams of an older remote QP, arriving late, change nothing. */
START_TEST(stale_datagrams)
{
    struct net n;
    struct side s[2];
    uint32_t ea = 0, eb = 0;
    setup(&n, s, &ea, &eb);
    side_connect(&n, &s[0], 0);
    run(&n, s, 100 * MS);
    struct mx_hs_wire old;
    mx_hs_fill(&s[1].h, MX_HS_T_HELLO, &old);
    old.flags = MX_HS_F_ACKREQ;
    mx_hs_on_error(&s[1].h);
    side_renew(&n, &s[1]);
    run(&n, s, 200 * MS);
    assert_paired(s);
    struct mx_hs_wire out;
    ck_assert_uint_eq(mx_hs_on_msg(&s[0].h, &old, n.now, &P, &out), 0);
    ck_assert_uint_eq(mx_hs_on_msg(&s[0].h, &old, n.now, &P, &out), 0);
    /* same epoch, different QP: refused */
    struct mx_hs_wire forged;
    mx_hs_fill(&s[1].h, MX_HS_T_HELLO, &forged);
    forged.qpn ^= 1;
    ck_assert_uint_eq(mx_hs_on_msg(&s[0].h, &forged, n.now, &P, &out), 0);
    /* a stale bye is ignored; a current one fails the connection */
    struct mx_hs_wire bye = old;
    bye.type = MX_HS_T_BYE;
    ck_assert_uint_eq(mx_hs_on_msg(&s[0].h, &bye, n.now, &P, &out), 0);
    assert_paired(s);
    mx_hs_fill(&s[1].h, MX_HS_T_BYE, &bye);
    ck_assert_uint_eq(mx_hs_on_msg(&s[0].h, &bye, n.now, &P, &out), MX_HS_DOWN);
    ck_assert_int_eq(s[0].h.state, MX_HS_FAILED);
}
END_TEST

/* A connection to itself (an engine adding its own address). */
START_TEST(self_connect)
{
    uint32_t e = 0;
    struct side s;
    side_init(&s, 0xA, &e, 1);
    new_qp(&s);
    mx_hs_init(&s.h, s.qp.qpn, 7, s.qp.epoch, true, 0, &P);
    struct mx_hs_wire m, out;
    unsigned a = mx_hs_on_timer(&s.h, 0, &P, &m);
    ck_assert_uint_eq(a, MX_HS_SEND);
    for (int i = 0; i < 4 && (a & MX_HS_SEND); i++) {
        a = mx_hs_on_msg(&s.h, &m, 1, &P, &out);
        m = out;
    }
    ck_assert_int_eq(s.h.state, MX_HS_ESTABLISHED);
    ck_assert_uint_eq(s.h.r_qpn, s.h.l_qpn);
    ck_assert(!(a & MX_HS_SEND));
}
END_TEST

/* ------------------------------------------------------------- wire */

START_TEST(siphash_vector)
{
    /* The reference vector of the SipHash paper (appendix A). */
    uint8_t key[16], msg[15];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 15; i++)
        msg[i] = (uint8_t)i;
    ck_assert_uint_eq(mx_siphash24(key, msg, 15), 0xa129ca6149be45e5ull);
    ck_assert_uint_eq(mx_siphash24(key, msg, 0), 0x726fdb47dd0e0e31ull);
}
END_TEST

START_TEST(address_roundtrip)
{
    struct mx_addr a = {.nic_id = 0x1122334455667788ull, .lid = 0, .port = 1,
                        .link_layer = MX_LL_ETH, .ud_qpn = 0x123456,
                        .msg_size = 4096, .mtu = 3, .gid_index = 1};
    for (int i = 0; i < 16; i++) {
        a.gid[i] = (uint8_t)(0xf0 + i);
        a.secret[i] = (uint8_t)(i * 7);
    }
    uint8_t buf[MX_ADDR_LEN];
    mx_addr_encode(&a, buf);
    struct mx_addr b;
    const char *why = NULL;
    ck_assert_int_eq(mx_addr_decode(buf, sizeof(buf), &b, &why), 0);
    ck_assert_mem_eq(&a, &b, sizeof(a));
    ck_assert_int_eq(mx_addr_decode(buf, sizeof(buf) - 1, &b, &why), -EINVAL);
    ck_assert_ptr_nonnull(why);
    ck_assert_int_eq(mx_addr_decode(NULL, 64, &b, &why), -EINVAL);
    uint8_t bad[MX_ADDR_LEN];
    memcpy(bad, buf, sizeof(bad));
    bad[0] ^= 1;
    ck_assert_int_eq(mx_addr_decode(bad, sizeof(bad), &b, &why), -EINVAL);
    memcpy(bad, buf, sizeof(bad));
    bad[35] = 9; /* link layer */
    ck_assert_int_eq(mx_addr_decode(bad, sizeof(bad), &b, &why), -EINVAL);
    memcpy(bad, buf, sizeof(bad));
    memset(bad + 8, 0, 8); /* NIC id 0 */
    ck_assert_int_eq(mx_addr_decode(bad, sizeof(bad), &b, &why), -EINVAL);
    /* every single-byte truncation and random garbage: refused or parsed,
     * never a crash */
    for (size_t l = 0; l <= MX_ADDR_LEN; l++)
        mx_addr_decode(buf, l, &b, &why);
    uint32_t r = 1;
    for (int k = 0; k < 10000; k++) {
        for (size_t i = 0; i < sizeof(bad); i++) {
            r = r * 1103515245u + 12345u;
            bad[i] = (uint8_t)(r >> 16);
        }
        mx_addr_decode(bad, sizeof(bad), &b, &why);
    }
}
END_TEST

START_TEST(datagram_mac)
{
    struct mx_hs_wire m = {.type = MX_HS_T_HELLO, .flags = MX_HS_F_ACKREQ,
                           .keysel = MX_KEY_RECEIVER, .src_id = 5, .dst_id = 6,
                           .src_mtu = 3, .src_link_layer = MX_LL_ETH,
                           .src_ud_qpn = 77, .src_msg_size = 4096,
                           .qpn = 0x1234, .psn = 0x55, .epoch = 9,
                           .echo_qpn = 0x4321, .echo_epoch = 8};
    uint8_t key[16] = {1, 2, 3}, other[16] = {1, 2, 4};
    uint8_t buf[MX_HS_LEN];
    mx_hs_encode(&m, key, buf);
    ck_assert(mx_hs_verify(buf, key));
    ck_assert(!mx_hs_verify(buf, other));
    struct mx_hs_wire d;
    const char *why;
    ck_assert_int_eq(mx_hs_decode(buf, sizeof(buf), &d, &why), 0);
    ck_assert_mem_eq(&m, &d, sizeof(m));
    /* any flipped bit breaks the MAC */
    for (size_t i = 0; i < MX_HS_LEN; i++) {
        buf[i] ^= 0x10;
        ck_assert(!mx_hs_verify(buf, key));
        buf[i] ^= 0x10;
    }
    ck_assert_int_eq(mx_hs_decode(buf, MX_HS_LEN - 1, &d, &why), -EINVAL);
    m.epoch = 0;
    mx_hs_encode(&m, key, buf);
    ck_assert_int_eq(mx_hs_decode(buf, sizeof(buf), &d, &why), -EINVAL);
}
END_TEST

TE_TEST_MAIN("mlx5_handshake",
             TE_TCASE("hs",
               plain_open, loss, duplicates, simultaneous_open, timeout,
               renew_keeps_deadline, qp_error_renews_both, stale_datagrams,
               self_connect),
             TE_TCASE("wire",
               siphash_vector, address_roundtrip, datagram_mac))
