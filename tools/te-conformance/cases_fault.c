/*
 * Conformance cases that inject faults through the loopback plugin's keys
 * (skipped for other plugins): operation failures reported exactly once,
 * and a dead peer turning into errors while the engine keeps working.
 * Each case builds its own pair of engines in this process.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conformance.h"

struct pair {
    te_engine *a, *b;
    uint8_t *abuf, *bbuf;
    te_mr *amr, *bmr;
    te_mr_desc bdesc;
    te_peer b_at_a;
};

static void pair_close(struct pair *p)
{
    if (p->a) {
        if (p->amr)
            te_mr_dereg(p->a, p->amr);
        conf_engine_destroy(p->a);
    }
    if (p->b) {
        if (p->bmr)
            te_mr_dereg(p->b, p->bmr);
        conf_engine_destroy(p->b);
    }
    free(p->abuf);
    free(p->bbuf);
    memset(p, 0, sizeof(*p));
}

static int pair_open(struct conf *c, struct pair *p, const char *const *a_sets,
                     const char *const *b_sets)
{
    memset(p, 0, sizeof(*p));
    te_config *ca = conf_config_with(c, a_sets);
    te_config *cb = conf_config_with(c, b_sets);
    int rc = -EINVAL;
    if (!ca || !cb)
        goto out;
    if ((rc = conf_engine_create(ca, &p->a)) || (rc = conf_engine_create(cb, &p->b)))
        goto out;
    p->abuf = calloc(1, 1u << 20);
    p->bbuf = calloc(1, 1u << 20);
    if ((rc = te_mr_reg(p->a, 0, p->abuf, 1u << 20, 0, TE_MEM_HOST, &p->amr)) ||
        (rc = te_mr_reg(p->b, 0, p->bbuf, 1u << 20, TE_MR_REMOTE_WRITE,
                        TE_MEM_HOST, &p->bmr)) ||
        (rc = te_mr_describe(p->bmr, &p->bdesc)))
        goto out;
    uint8_t addr[TE_ADDR_MAX];
    size_t len = sizeof(addr);
    if ((rc = te_engine_address(p->b, 0, addr, &len)))
        goto out;
    rc = te_peer_add(p->a, 0, addr, len, &p->b_at_a);
out:
    te_config_free(ca);
    te_config_free(cb);
    if (rc)
        fprintf(stderr, "    engine pair: %s: %s\n", te_strerror(rc),
                te_last_error());
    return rc;
}

/* Every 7th operation fails: exactly those requests fail, once each, their
 * bytes and immediates never arrive, the rest arrive intact. */
static int case_fail_every(struct conf *c)
{
    if (strcmp(c->plugin, "loopback"))
        return conf_skip(c, "injects failures through loopback."
                         "fault_fail_every, a key plugin %s does not have",
                         c->plugin);
    static const char *const sets[] = {"engine.nics_per_group=1",
                                       "loopback.fault_fail_every=7", NULL};
    struct pair p;
    if (pair_open(c, &p, sets, sets)) {
        pair_close(&p);
        return CONF_FAIL;
    }
    enum { N = 700, SZ = 1024 };
    uint32_t imm = conf_imm();
    conf_fill(p.abuf, 0, (uint64_t)N * SZ / 2, 3);
    int fails = 0, oks = 0, dup = 0;
    char *seen = calloc(N, 1);
    for (int i = 0; i < N; i++) {
        te_request q = conf_req(TE_OP_WRITE);
        q.flags = TE_F_IMM;
        q.imm = imm;
        q.user_data = (uint64_t)i;
        q.u.xfer.peer = p.b_at_a;
        q.u.xfer.local = p.amr;
        q.u.xfer.local_off = (uint64_t)(i % (N / 2)) * SZ;
        q.u.xfer.remote = &p.bdesc;
        q.u.xfer.remote_off = (uint64_t)(i % (N / 2)) * SZ;
        q.u.xfer.len = SZ;
        if (i >= N / 2) /* second half: to a region only failures skip */
            q.u.xfer.remote_off += (1u << 19);
        if (conf_submit_to(p.a, &q) < 0)
            break;
    }
    te_completion *done = calloc(N, sizeof(*done));
    int got = conf_wait_engine(p.a, done, N);
    for (int i = 0; i < got; i++) {
        if (done[i].user_data >= N || seen[done[i].user_data]++)
            dup++;
        if (done[i].status == 0)
            oks++;
        else if (done[i].status == -EIO && done[i].reason[0])
            fails++;
    }
    te_completion extra;
    int more = te_poll_completions(p.a, &extra, 1, 100);
    int rc = te_imm_wait(p.b, imm, (uint64_t)oks, CONF_TIMEOUT_MS);
    uint64_t banked = 9;
    te_imm_poll(p.b, imm, &banked, NULL);
    /* Failed writes of the second half left their slot zero. */
    int zero_slots = 0;
    for (int i = N / 2; i < N; i++) {
        uint8_t *slot = p.bbuf + (1u << 19) + (uint64_t)(i % (N / 2)) * SZ;
        int zero = 1;
        for (int b = 0; b < SZ; b++)
            zero &= slot[b] == 0;
        zero_slots += zero;
    }
    int second_half_fails = 0;
    for (int i = 0; i < got; i++)
        second_half_fails += done[i].user_data >= N / 2 && done[i].status;
    free(done);
    free(seen);
    pair_close(&p);
    CHECK(got == N && more == 0 && dup == 0, "%d of %d completions, %d "
          "duplicates, %d extra", got, N, dup, more);
    CHECK(fails == N / 7 && oks == N - N / 7, "%d failed (want %d), %d ok",
          fails, N / 7, oks);
    CHECK(rc == 0 && banked == 0, "receiver counted %s, surplus %llu",
          rc ? "too few imms" : "the successes", (unsigned long long)banked);
    CHECK(zero_slots == second_half_fails, "%d failed writes but %d "
          "untouched slots", second_half_fails, zero_slots);
    return CONF_PASS;
}

/* The receiver's NIC dies after 100 operations: outstanding and later
 * requests to it fail (never hang) and the engine keeps serving others. */
static int case_peer_death(struct conf *c)
{
    if (strcmp(c->plugin, "loopback"))
        return conf_skip(c, "kills a NIC through loopback.fault_kill_after, "
                         "a key plugin %s does not have (peer_killed and "
                         "peer_closed check peer death for any plugin)",
                         c->plugin);
    static const char *const a_sets[] = {"engine.nics_per_group=1", NULL};
    static const char *const b_sets[] = {"engine.nics_per_group=1",
                                         "loopback.fault_kill_after=100",
                                         NULL};
    struct pair p;
    if (pair_open(c, &p, a_sets, b_sets)) {
        pair_close(&p);
        return CONF_FAIL;
    }
    /* b must send to die: it posts sends to a. */
    uint8_t addr[TE_ADDR_MAX];
    size_t len = sizeof(addr);
    te_peer a_at_b;
    int rc = te_engine_address(p.a, 0, addr, &len);
    if (!rc)
        rc = te_peer_add(p.b, 0, addr, len, &a_at_b);
    enum { N = 400 };
    int submitted = 0;
    for (int i = 0; i < N && !rc; i++) {
        te_request q = conf_req(TE_OP_SEND);
        q.u.send.peer = a_at_b;
        q.u.send.buf = &i;
        q.u.send.len = sizeof(i);
        if (conf_submit_to(p.b, &q) > 0)
            submitted++;
    }
    te_completion *done = calloc(N, sizeof(*done));
    int got = conf_wait_engine(p.b, done, submitted);
    int failed = 0;
    for (int i = 0; i < got; i++)
        failed += done[i].status != 0;
    /* a's writes to the dead b fail too, within the deadline. */
    te_request w = conf_req(TE_OP_WRITE);
    w.u.xfer.peer = p.b_at_a;
    w.u.xfer.local = p.amr;
    w.u.xfer.remote = &p.bdesc;
    w.u.xfer.len = 64;
    int64_t id = te_submit(p.a, &w);
    te_completion wd = {0};
    int wgot = id > 0 ? conf_wait_engine(p.a, &wd, 1) : 0;
    free(done);
    pair_close(&p);
    CHECK(rc == 0, "setup: %s", te_strerror(rc));
    CHECK(got == submitted, "%d of %d requests completed after the NIC died",
          got, submitted);
    CHECK(failed >= submitted - 100, "only %d of %d failed", failed, submitted);
    CHECK(id < 0 || (wgot == 1 && wd.status < 0), "write to a dead peer: "
          "submit %lld, completion status %d", (long long)id, wd.status);
    return CONF_PASS;
}

/* A remote process is killed in the middle of a stream of writes: every
 * request to it completes exactly once (most with an error) within the
 * deadline, and the engine keeps serving the other remotes. The killed
 * remote stays dead: later cases have one remote fewer. Any plugin; remotes
 * must be processes. The engine's own timers stay on here (peer_killed,
 * cases_peer.c, turns them off to see the plugin report the death). */
static int case_remote_killed(struct conf *c)
{
    if (!c->two_process)
        return conf_skip(c, "needs --two-process (a remote in this process "
                         "cannot be killed)");
    if (c->nremotes < 2)
        return conf_skip(c, "needs --remotes 2 or more (one is killed, "
                         "another must keep working)");
    struct remote *victim = &c->rem[c->nremotes - 1], *ok = &c->rem[0];
    enum { N = 300, SZ = 256 * 1024 };
    conf_fill(c->src_buf, 0, SZ, 5);
    int submitted = 0, refused = 0;
    int64_t bad_refusal = 0;
    for (int i = 0; i < N; i++) {
        te_request q = conf_req(TE_OP_WRITE);
        q.user_data = (uint64_t)i;
        q.u.xfer.peer = victim->peer;
        q.u.xfer.local = c->src;
        q.u.xfer.remote = &victim->desc;
        q.u.xfer.remote_off = (uint64_t)(i % 32) * SZ;
        q.u.xfer.len = SZ;
        int64_t id = conf_submit(c, &q);
        if (id > 0)
            submitted++;
        /* Once the engine knows the remote is down, te_submit refuses at
         * once (-ECONNRESET): in caller mode that is the usual sign of the
         * death, every write before the kill having completed. */
        else if (i > N / 3 && id == -ECONNRESET)
            refused++;
        else if (!bad_refusal)
            bad_refusal = id ? id : -EPROTO;
        if (i == N / 3)
            CHECK_RC(victim->ops->kill(victim));
    }
    te_completion *done = calloc(N, sizeof(*done));
    int rc = conf_wait_completions(c, done, submitted);
    int failed = 0, dup = 0;
    char *seen = calloc(N, 1);
    for (int i = 0; i < submitted && !rc; i++) {
        failed += done[i].status != 0;
        if (done[i].user_data >= N || seen[done[i].user_data]++)
            dup++;
    }
    free(done);
    free(seen);
    te_completion extra;
    int more = te_poll_completions(c->e, &extra, 1, 200);
    victim->ops->close(victim);
    victim->ops = NULL;
    c->nremotes--;
    CHECK(rc == 0, "only some of %d requests completed after the kill: %s",
          submitted, te_strerror(rc));
    CHECK(dup == 0 && more == 0, "%d duplicate, %d extra completions", dup,
          more);
    CHECK(!bad_refusal, "te_submit to the remote refused a write: %s",
          te_strerror((int)bad_refusal));
    CHECK(failed + refused > 0, "no request failed or was refused although "
          "the remote was killed");
    /* The survivor still works. */
    uint32_t imm = conf_imm();
    te_request q = conf_req(TE_OP_WRITE);
    q.flags = TE_F_IMM;
    q.imm = imm;
    q.u.xfer.peer = ok->peer;
    q.u.xfer.local = c->src;
    q.u.xfer.remote = &ok->desc;
    q.u.xfer.len = SZ;
    te_completion one;
    CHECK_RC(conf_run(c, &q, &one));
    CHECK(one.status == 0, "write to a live remote after the kill: %s",
          one.reason);
    CHECK(ok->ops->imm_wait(ok, imm, (uint64_t)te_expected_imms(c->e, &q, 0),
                            CONF_TIMEOUT_MS) == 0, "imm after the kill");
    CHECK(conf_expect_remote(ok, 0, SZ, 5, 0) == 0, "payload after the kill");
    return CONF_PASS;
}

const struct conf_case conf_cases_fault[] = {
    {"fault_fail_every", "injected failures: reported once, nothing lost",
     case_fail_every},
    {"fault_peer_death", "dead NIC: errors, not hangs", case_peer_death},
    {"remote_killed", "remote process killed mid-stream: every request "
     "completes once, the others keep working",
     case_remote_killed},
    {NULL, NULL, NULL}};
