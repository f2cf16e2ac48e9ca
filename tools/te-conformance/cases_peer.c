/*
 * Peer death and orderly close, for any plugin (no fault injection): a
 * remote is SIGKILLed mid-stream, or closes its engine in order, and the
 * plugin must tell the core (TE_PCQ_PEER_DOWN) so that requests to it end
 * with an error in bounded time and the peer reads as down.
 *
 * Each case builds its own local engine with heartbeats, the peer timeout
 * and request deadlines switched off: then nothing but the transport can
 * end a request or declare the peer down, so a plugin that never reports a
 * dead peer fails here instead of being rescued by the core's own timers.
 * The core names the cause of each peer-down in one log line, which the
 * cases read through a log sink (downlog.c): "it closed its NIC ... in
 * order" is a PEER_DOWN with -ESHUTDOWN, "the transport reported it
 * unreachable" any other status.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conformance.h"
#include "downlog.h"

/* A local engine of its own and one fresh remote peered with it. */
struct trial {
    te_engine *e;
    uint8_t *buf;
    te_mr *mr;
    struct remote r;
};

enum { TRIAL_BYTES = 4u << 20 };

static void trial_close(struct trial *t)
{
    if (t->r.ops)
        t->r.ops->close(&t->r);
    if (t->e) {
        if (t->mr)
            te_mr_dereg(t->e, t->mr);
        conf_engine_destroy(t->e);
    }
    free(t->buf);
    memset(t, 0, sizeof(*t));
    conf_downlog_stop();
}

static int trial_open(struct conf *c, struct trial *t)
{
    static const char *const sets[] = {
        "engine.heartbeat_ms=0", "engine.peer_timeout_ms=0",
        "engine.request_timeout_ms=0",
        "engine.log_level=2", /* the orderly close is logged at info */
        NULL};
    memset(t, 0, sizeof(*t));
    te_config *cfg = conf_config_with(c, sets);
    if (!cfg)
        return -EINVAL;
    conf_downlog_start(c->verbose); /* before: its info lines go there */
    int rc = conf_engine_create(cfg, &t->e);
    te_config_free(cfg);
    if (rc) {
        fprintf(stderr, "    local engine: %s\n", te_last_error());
        return rc;
    }
    if (!(t->buf = malloc(TRIAL_BYTES)))
        return -ENOMEM;
    conf_fill(t->buf, 0, TRIAL_BYTES, 9);
    if ((rc = te_mr_reg(t->e, 0, t->buf, TRIAL_BYTES, 0, TE_MEM_HOST,
                        &t->mr))) {
        fprintf(stderr, "    registration: %s\n", te_last_error());
        return rc;
    }
    if ((rc = conf_remote_attach(c, t->e, &t->r))) {
        fprintf(stderr, "    remote: %s: %s\n", te_strerror(rc), c->err);
        return rc;
    }
    conf_downlog_watch(t->r.peer);
    return 0;
}

static te_request trial_write(struct trial *t, uint64_t off, uint64_t len)
{
    te_request q = conf_req(TE_OP_WRITE);
    q.u.xfer.peer = t->r.peer;
    q.u.xfer.local = t->mr;
    q.u.xfer.local_off = off;
    q.u.xfer.remote = &t->r.desc;
    q.u.xfer.remote_off = off;
    q.u.xfer.len = len;
    return q;
}

/* Wait until the remote reads as down, at most ms; 1 if it does. */
static int trial_down_within(struct trial *t, int ms)
{
    uint64_t deadline = conf_now_ms() + (uint64_t)ms;
    for (;;) {
        if (te_peer_status(t->e, 0, t->r.peer) == -ECONNRESET)
            return 1;
        if (conf_now_ms() >= deadline)
            return 0;
        usleep(1000);
    }
}

/* A write to a remote that is gone must end in an error, never succeed
 * and never hang: refused at submit (the peer is down) or failed. */
static int write_to_gone(struct trial *t)
{
    te_request q = trial_write(t, 0, 4096);
    int64_t id = conf_submit_to(t->e, &q);
    if (id < 0) {
        CHECK(id == -ECONNRESET, "write to a gone remote refused with %lld "
              "(%s), want -ECONNRESET", (long long)id, te_last_error());
        return CONF_PASS;
    }
    te_completion done;
    CHECK(conf_wait_engine(t->e, &done, 1) == 1, "a write to a gone remote "
          "neither completed nor failed within %d ms", CONF_TIMEOUT_MS);
    CHECK(done.status < 0, "a write to a gone remote succeeded");
    return CONF_PASS;
}

/* SIGKILL in the middle of a stream of writes. */
static int case_peer_killed(struct conf *c)
{
    if (!c->two_process)
        return conf_skip(c, "needs --two-process: only a remote in another "
                         "process can be SIGKILLed (an in-process-only "
                         "plugin cannot be checked for peer death)");
    struct trial t;
    if (trial_open(c, &t)) {
        trial_close(&t);
        return CONF_FAIL;
    }
    enum { N = 300, SZ = 64 * 1024 };
    int submitted = 0, refused = 0, kill_rc = 0;
    int64_t bad_submit = 0;
    for (int i = 0; i < N; i++) {
        te_request q = trial_write(&t, (uint64_t)(i % 32) * SZ, SZ);
        q.user_data = (uint64_t)i;
        int64_t id = conf_submit_to(t.e, &q);
        submitted += id >= 0;
        /* Once the peer is down, submit refuses requests to it. */
        refused += id == -ECONNRESET;
        if (id < 0 && id != -ECONNRESET)
            bad_submit = id;
        if (i == N / 3)
            kill_rc = t.r.ops->kill(&t.r);
    }
    te_completion *done = calloc(N, sizeof(*done));
    int got = conf_wait_engine(t.e, done, submitted);
    int failed = 0, dup = 0;
    char *seen = calloc(N, 1);
    for (int i = 0; i < got; i++) {
        failed += done[i].status < 0;
        if (done[i].user_data >= N || seen[done[i].user_data]++)
            dup++;
    }
    te_completion extra;
    int more = got == submitted ? te_poll_completions(t.e, &extra, 1, 200) : 0;
    int down = trial_down_within(&t, CONF_TIMEOUT_MS);
    char why[256];
    conf_downlog_why(why, sizeof(why));
    int after = down ? write_to_gone(&t) : CONF_PASS;
    free(done);
    free(seen);
    trial_close(&t);
    CHECK(kill_rc == 0, "kill: %s", te_strerror(kill_rc));
    CHECK(bad_submit == 0, "a write to the remote was refused with %lld "
          "(%s)", (long long)bad_submit, te_strerror((int)bad_submit));
    CHECK(got == submitted, "%d of %d requests ended within %d ms of the "
          "kill (request deadlines are off: the transport must fail them)",
          got, submitted, CONF_TIMEOUT_MS);
    CHECK(dup == 0 && more == 0, "%d duplicate, %d extra completions", dup,
          more);
    CHECK(failed + refused > 0, "all %d writes to a killed remote "
          "succeeded", got);
    CHECK(down, "the killed remote was never reported down (no "
          "TE_PCQ_PEER_DOWN within %d ms)", CONF_TIMEOUT_MS);
    CHECK(why[0] && !conf_downlog_orderly(why), "a killed remote was "
          "reported as %s", why[0] ? why : "down without a logged cause");
    return after;
}

/* The remote closes its engine in order (te_engine_destroy, then exits). */
static int case_peer_closed(struct conf *c)
{
    struct trial t;
    if (trial_open(c, &t)) {
        trial_close(&t);
        return CONF_FAIL;
    }
    te_request q = trial_write(&t, 0, 64 * 1024);
    te_completion done;
    int64_t id = conf_submit_to(t.e, &q);
    int got = id >= 0 ? conf_wait_engine(t.e, &done, 1) : 0;
    if (got != 1 || done.status) {
        trial_close(&t);
        CHECK(0, "a write before the close: submit %lld, %s", (long long)id,
              got == 1 ? done.reason : "no completion");
    }
    t.r.ops->close(&t.r);
    t.r.ops = NULL;
    /* Noticed without traffic? A plugin that learns of it only from its
     * next operation gets one (strict: it must notice on its own). */
    int idle = trial_down_within(&t, c->strict ? CONF_TIMEOUT_MS
                                               : CONF_TIMEOUT_MS / 4);
    int after = idle ? CONF_PASS : write_to_gone(&t);
    int down = idle || trial_down_within(&t, CONF_TIMEOUT_MS);
    char why[256];
    conf_downlog_why(why, sizeof(why));
    trial_close(&t);
    if (after != CONF_PASS)
        return after;
    CHECK(down, "a remote that closed in order was never reported down "
          "(no TE_PCQ_PEER_DOWN within %d ms, not even after a write to it "
          "failed)", CONF_TIMEOUT_MS);
    if (!conf_downlog_orderly(why))
        return conf_note(c, "an orderly close was reported as a failure "
                         "(%s%s), not as TE_PCQ_PEER_DOWN with -ESHUTDOWN",
                         why[0] ? why : "no cause logged",
                         idle ? "" : ", noticed only on the next write");
    if (!idle)
        return conf_note(c, "the orderly close was noticed only when a "
                         "write was sent after it");
    return CONF_PASS;
}

const struct conf_case conf_cases_peer[] = {
    {"peer_killed", "remote process SIGKILLed mid-stream: the plugin fails "
     "every request to it and reports it down (own engine: no heartbeats, "
     "no timeouts)", case_peer_killed},
    {"peer_closed", "remote closes its engine in order: reported down, as "
     "-ESHUTDOWN (own engine: no heartbeats, no timeouts)", case_peer_closed},
    {NULL, NULL, NULL}};
