/* Conformance cases: messages, ImmCounter semantics, completions, and
 * input validation. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conformance.h"

static int case_send_recv(struct conf *c)
{
    struct remote *r = &c->rem[0];
    /* 16 and 17: either side of the loopback's inline limit (lb_internal.h) */
    static const uint32_t sizes[] = {0, 1, 8, 16, 17, 100, 4096};
    uint8_t msg[4096], got[4096];
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        conf_fill(msg, 0, sizes[i], 40 + (uint32_t)i);
        te_request q = conf_req(TE_OP_SEND);
        q.u.send.peer = r->peer;
        q.u.send.buf = msg;
        q.u.send.len = sizes[i];
        te_completion done;
        CHECK_RC(conf_run(c, &q, &done));
        CHECK(done.status == 0, "send of %u: %s", sizes[i], done.reason);
        size_t len = 0;
        int known = 0;
        CHECK(r->ops->recv_wait(r, got, sizeof(got), &len, &known,
                                CONF_TIMEOUT_MS) == 0, "message %zu lost", i);
        CHECK(len == sizes[i], "received %zu bytes, sent %u", len, sizes[i]);
        CHECK(memcmp(got, msg, len) == 0, "message bytes differ");
        CHECK(known, "receiver did not recognise the sender as its peer");
    }
    /* Many messages at once: more than the receive depth. */
    enum { N = 300 };
    for (uint32_t i = 0; i < N; i++) {
        te_request q = conf_req(TE_OP_SEND);
        q.u.send.peer = r->peer;
        q.u.send.buf = &i;
        q.u.send.len = sizeof(i);
        CHECK_RC(conf_submit(c, &q));
    }
    te_completion *done = calloc(N, sizeof(*done));
    int rc = conf_wait_completions(c, done, N);
    int bad = 0;
    for (int i = 0; i < N && !rc; i++)
        bad += done[i].status != 0;
    free(done);
    CHECK(rc == 0 && bad == 0, "burst sends: rc %d, %d failed", rc, bad);
    char *seen = calloc(N, 1);
    for (int i = 0; i < N; i++) {
        uint32_t v = 0;
        size_t len = 0;
        int known;
        rc = r->ops->recv_wait(r, &v, sizeof(v), &len, &known, CONF_TIMEOUT_MS);
        if (rc || len != sizeof(v) || v >= N || seen[v]++) {
            free(seen);
            CHECK(0, "burst message %d: rc %d len %zu value %u", i, rc, len, v);
        }
    }
    free(seen);
    te_request big = conf_req(TE_OP_SEND);
    big.u.send.peer = r->peer;
    big.u.send.buf = msg;
    big.u.send.len = 1u << 30;
    CHECK(te_submit(c->e, &big) == -EMSGSIZE, "oversized message accepted");
    return CONF_PASS;
}

/* ImmCounter on the remote: banked credits and surplus. */
static int case_imm_banked(struct conf *c)
{
    struct remote *r = &c->rem[0];
    uint32_t imm = conf_imm();
    te_barrier_dst d = {.peer = r->peer, .dst = &r->desc};
    te_request q = conf_req(TE_OP_BARRIER);
    q.imm = imm;
    q.u.barrier.count = 1;
    q.u.barrier.dsts = &d;
    for (int i = 0; i < 5; i++) {
        te_completion done;
        CHECK_RC(conf_run(c, &q, &done));
        CHECK(done.status == 0, "%s", done.reason);
    }
    /* 5 arrivals banked before anyone waits: wait for 3, 2 stay. */
    CHECK(r->ops->imm_wait(r, imm, 3, CONF_TIMEOUT_MS) == 0, "banked credits");
    uint64_t banked = 0;
    uint64_t deadline = conf_now_ms() + CONF_TIMEOUT_MS;
    do {
        CHECK_RC(r->ops->imm_banked(r, imm, &banked));
    } while (banked < 2 && conf_now_ms() < deadline);
    CHECK(banked == 2, "surplus %llu, want 2", (unsigned long long)banked);
    CHECK(r->ops->imm_wait(r, imm, 3, 50) == -ETIMEDOUT,
          "waiting for more than banked must time out");
    uint64_t surplus = 0;
    CHECK_RC(r->ops->imm_remove(r, imm, &surplus));
    CHECK(surplus == 2, "remove returned %llu, want 2",
          (unsigned long long)surplus);
    return CONF_PASS;
}

/* Local engine as its own peer: callback expectations on the local side. */
struct cb_state {
    atomic_int fired;
    atomic_int done_calls;
    pthread_t submitter;
    atomic_int on_submitter;
};

static void on_imm(uint32_t imm, int status, void *arg)
{
    struct cb_state *s = arg;
    atomic_fetch_add(&s->fired, 1);
}

static void on_done(const te_completion *cpl, void *arg)
{
    struct cb_state *s = arg;
    if (pthread_equal(pthread_self(), s->submitter))
        atomic_fetch_add(&s->on_submitter, 1);
    atomic_fetch_add(&s->done_calls, 1);
}

static int wait_int(atomic_int *v, int want)
{
    uint64_t deadline = conf_now_ms() + CONF_TIMEOUT_MS;
    while (atomic_load(v) < want && conf_now_ms() < deadline)
        usleep(200);
    return atomic_load(v) == want;
}

static int case_imm_callbacks(struct conf *c)
{
    uint8_t addr[TE_ADDR_MAX];
    size_t len = sizeof(addr);
    te_peer self;
    CHECK_RC(te_engine_address(c->e, 0, addr, &len));
    CHECK_RC(te_peer_add(c->e, 0, addr, len, &self));
    te_mr_desc me;
    CHECK_RC(te_mr_describe(c->src, &me));
    struct cb_state s = {0};
    s.submitter = pthread_self();
    uint32_t imm = conf_imm();
    te_barrier_dst d = {.peer = self, .dst = &me};
    te_request q = conf_req(TE_OP_BARRIER);
    q.imm = imm;
    q.u.barrier.count = 1;
    q.u.barrier.dsts = &d;
    q.done = on_done;
    q.done_arg = &s;
    /* 2 arrivals before arming an expectation of 3. */
    for (int i = 0; i < 2; i++)
        CHECK_RC(conf_submit(c, &q));
    CHECK(wait_int(&s.done_calls, 2), "2 completion callbacks");
    uint64_t banked = 0;
    uint64_t deadline = conf_now_ms() + CONF_TIMEOUT_MS;
    while (banked < 2 && conf_now_ms() < deadline)
        te_imm_poll(c->e, imm, &banked, NULL);
    CHECK(banked == 2, "banked %llu", (unsigned long long)banked);
    CHECK_RC(te_imm_expect(c->e, imm, 3, on_imm, &s));
    CHECK(te_imm_expect(c->e, imm, 1, on_imm, &s) == -EBUSY,
          "second expectation on an armed imm accepted");
    usleep(20000);
    CHECK(atomic_load(&s.fired) == 0, "fired before the count was reached");
    for (int i = 0; i < 3; i++) /* 1 completes it, 2 are surplus */
        CHECK_RC(conf_submit(c, &q));
    CHECK(wait_int(&s.done_calls, 5), "5 completion callbacks");
    CHECK(wait_int(&s.fired, 1), "expectation did not fire");
    deadline = conf_now_ms() + CONF_TIMEOUT_MS;
    do {
        te_imm_poll(c->e, imm, &banked, NULL);
    } while (banked < 2 && conf_now_ms() < deadline);
    CHECK(banked == 2, "surplus %llu, want 2", (unsigned long long)banked);
    /* Re-arm: banked surplus satisfies it at once. */
    CHECK_RC(te_imm_expect(c->e, imm, 2, on_imm, &s));
    CHECK(wait_int(&s.fired, 2), "re-armed expectation did not fire");
    /* Removal disarms without calling back. */
    CHECK_RC(te_imm_expect(c->e, imm, 10, on_imm, &s));
    uint64_t surplus = 99;
    CHECK_RC(te_imm_remove(c->e, imm, &surplus));
    CHECK(surplus == 0, "surplus %llu", (unsigned long long)surplus);
    usleep(20000);
    CHECK(atomic_load(&s.fired) == 2, "removed expectation fired");
    CHECK(atomic_load(&s.on_submitter) == 0,
          "completion callback ran on the submitting thread");
    CHECK(atomic_load(&s.done_calls) == 5, "a completion callback ran twice");
    CHECK(te_imm_expect(c->e, imm, 0, NULL, NULL) == -EINVAL, "count 0");
    CHECK_RC(te_peer_remove(c->e, 0, self));
    return CONF_PASS;
}

/* Bad requests fail at submit with a specific code; nothing is sent. */
static int case_validation(struct conf *c)
{
    struct remote *r = &c->rem[0];
    uint32_t imm = conf_imm();
    te_request q = conf_req(TE_OP_WRITE);
    q.flags = TE_F_IMM;
    q.imm = imm;
    q.u.xfer.peer = r->peer;
    q.u.xfer.local = c->src;
    q.u.xfer.remote = &r->desc;
    q.u.xfer.len = 16;

    te_request b = q;
    b.u.xfer.local_off = CONF_REGION - 8;
    CHECK(te_submit(c->e, &b) == -ERANGE, "local overrun accepted");
    CHECK(strstr(te_last_error(), "exceeds") != NULL, "message: %s",
          te_last_error());
    b = q;
    b.u.xfer.remote_off = UINT64_MAX - 4;
    CHECK(te_submit(c->e, &b) == -ERANGE, "remote offset overflow accepted");
    b = q;
    b.u.xfer.local = NULL;
    CHECK(te_submit(c->e, &b) == -EINVAL, "NULL local accepted");
    b = q;
    b.u.xfer.peer = 9999;
    CHECK(te_submit(c->e, &b) == -ENOENT, "unknown peer accepted");
    te_mr_desc wrong = r->desc;
    wrong.nic_count = r->desc.nic_count + 1;
    b = q;
    b.u.xfer.remote = &wrong;
    CHECK(te_submit(c->e, &b) == -EINVAL, "descriptor NIC count mismatch "
          "accepted");
    b = q;
    b.op = 99;
    CHECK(te_submit(c->e, &b) == -EINVAL, "unknown op accepted");
    b = q;
    b.group = 5;
    CHECK(te_submit(c->e, &b) == -EINVAL, "unknown group accepted");
    te_mr_desc ro = r->desc;
    ro.access = TE_MR_REMOTE_READ;
    b = q;
    b.u.xfer.remote = &ro;
    CHECK(te_submit(c->e, &b) == -EACCES, "write to read-only region "
          "accepted");
    /* Descriptor bytes: truncated and corrupted input is refused. */
    uint8_t buf[TE_DESC_MAX];
    size_t len = sizeof(buf);
    CHECK_RC(te_desc_serialize(&r->desc, buf, &len));
    te_mr_desc parsed;
    CHECK(te_desc_parse(buf, len - 1, &parsed) < 0, "truncated descriptor");
    buf[len - 1] ^= 0x40;
    CHECK(te_desc_parse(buf, len, &parsed) < 0, "corrupt descriptor");
    uint64_t banked = 1;
    CHECK_RC(r->ops->imm_banked(r, imm, &banked));
    CHECK(banked == 0, "a refused request delivered %llu imms",
          (unsigned long long)banked);
    return CONF_PASS;
}

/* A forged key is a remote access error: reported once, nothing written,
 * no immediate. */
static int case_bad_rkey(struct conf *c)
{
    struct remote *r = &c->rem[0];
    CHECK_RC(r->ops->fill(r, 0, 8192, 0x5A));
    te_mr_desc forged = r->desc;
    for (uint32_t i = 0; i < forged.nic_count; i++)
        forged.nic[i].rkey ^= 0x5bd1e995u;
    uint32_t imm = conf_imm();
    te_request q = conf_req(TE_OP_WRITE);
    q.flags = TE_F_IMM;
    q.imm = imm;
    q.u.xfer.peer = r->peer;
    q.u.xfer.local = c->src;
    q.u.xfer.remote = &forged;
    q.u.xfer.len = 4096;
    conf_fill(c->src_buf, 0, 4096, 1);
    te_completion done[2];
    CHECK_RC(conf_run(c, &q, &done[0]));
    CHECK(done[0].status < 0, "write with a forged key succeeded");
    CHECK(done[0].reason[0], "failure without a reason");
    CHECK(te_poll_completions(c->e, &done[1], 1, 200) == 0,
          "failed request reported twice");
    uint64_t banked = 1;
    CHECK_RC(r->ops->imm_banked(r, imm, &banked));
    CHECK(banked == 0, "forged write delivered an imm");
    CHECK(conf_expect_remote(r, 0, 8192, 0x5A, 0) == 0,
          "forged write changed remote bytes");
    /* The engine still works afterwards. */
    q.u.xfer.remote = &r->desc;
    CHECK_RC(conf_run(c, &q, &done[0]));
    CHECK(done[0].status == 0, "write after a failure: %s", done[0].reason);
    return CONF_PASS;
}

const struct conf_case conf_cases_misc[] = {
    {"send_recv", "two-sided messages incl. a burst beyond the receive depth",
     case_send_recv},
    {"imm_banked", "remote ImmCounter: banked credits, surplus, removal",
     case_imm_banked},
    {"imm_callbacks", "callbacks: banked, -EBUSY, re-arm, remove, callback "
     "thread", case_imm_callbacks},
    {"validation", "bad requests refused at submit with specific errors",
     case_validation},
    {"bad_rkey", "forged key: one failure, nothing written, no imm",
     case_bad_rkey},
    {NULL, NULL, NULL}};
