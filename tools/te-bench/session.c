/*
 * Client side of the control protocol: the hello, bringing a case up
 * (client engine, server engines, peers, descriptors) and down, and the
 * requests that let the server measure on its own clock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* NUL-separated strings, as the hello and the setup carry them. */
static size_t pack_sets(const char *const *v, int n, char **out)
{
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += strlen(v[i]) + 1;
    char *p = malloc(len ? len : 1);
    *out = p;
    if (!p)
        return 0;
    for (int i = 0; i < n; i++) {
        size_t l = strlen(v[i]) + 1;
        memcpy(p, v[i], l);
        p += l;
    }
    return len;
}

int tb_session_hello(struct tb_session *s)
{
    const struct tb_opts *o = s->o;
    char *sets;
    size_t slen = pack_sets(o->sets, o->nsets, &sets);
    size_t tlen = o->config_text ? strlen(o->config_text) : 0;
    size_t len = slen + tlen;
    char *body = malloc(len ? len : 1);
    if (!body || !sets) {
        free(body);
        free(sets);
        return -ENOMEM;
    }
    memcpy(body, sets, slen);
    if (tlen)
        memcpy(body + slen, o->config_text, tlen);
    free(sets);
    struct tb_hello h;
    memset(&h, 0, sizeof(h));
    snprintf(h.version, sizeof(h.version), "%s", TB_VERSION);
    h.nsets = (uint32_t)o->nsets;
    h.text_len = (uint32_t)tlen;
    int rc = tb_chan_send(&s->ch, TB_MSG_HELLO, &h, sizeof(h), body, len);
    free(body);
    if (rc)
        return rc;
    void *msg;
    size_t mlen;
    if ((rc = tb_chan_expect(&s->ch, TB_MSG_ACK, sizeof(struct tb_ack), &msg,
                             &mlen)))
        return rc;
    const struct tb_ack *a = msg;
    snprintf(s->server_host, sizeof(s->server_host), "%.63s", a->error);
    free(msg);
    return 0;
}

void tb_env_req_init(struct tb_env_req *er, const struct tb_case *c,
                     uint32_t engines, uint64_t region, uint32_t access)
{
    memset(er, 0, sizeof(*er));
    er->test = c->test;
    er->engines = engines;
    er->region = region;
    er->access = access;
    if (c->nics) {
        tb_sets_add(&er->client_sets, "engine.nics_per_group=%u", c->nics);
        tb_sets_add(&er->server_sets, "engine.nics_per_group=%u", c->nics);
    }
}

static int env_open(struct tb_session *s, struct tb_env_req *r,
                    struct tb_env *env, char *err, size_t errlen);

int tb_env_open(struct tb_session *s, struct tb_env_req *r, struct tb_env *env,
                char *err, size_t errlen)
{
    int rc = env_open(s, r, env, err, errlen);
    tb_sets_free(&r->client_sets);
    tb_sets_free(&r->server_sets);
    return rc;
}

static int env_open(struct tb_session *s, struct tb_env_req *r,
                    struct tb_env *env, char *err, size_t errlen)
{
    const struct tb_opts *o = s->o;
    memset(env, 0, sizeof(*env));
    if (o->pin) {
        /* --pin: the client's worker shares CPU 0 with this thread, a single
         * receiving engine's worker gets the last CPU to itself. */
        long last = sysconf(_SC_NPROCESSORS_ONLN) - 1;
        tb_sets_add(&r->client_sets, "engine.worker_cpus=0");
        if (r->engines == 1 && last > 0)
            tb_sets_add(&r->server_sets, "engine.worker_cpus=%ld", last);
    }
    /* Remember what this case changed in the engines' configuration. */
    size_t sl = 0;
    s->settings[0] = 0;
    for (int k = 0; k < 2; k++) {
        const struct tb_sets *v = k ? &r->server_sets : &r->client_sets;
        sl += (size_t)snprintf(s->settings + sl, sizeof(s->settings) - sl,
                               "%s%s:", k ? "; " : "", k ? "server" : "client");
        for (int i = 0; i < v->n && sl < sizeof(s->settings); i++)
            sl += (size_t)snprintf(s->settings + sl, sizeof(s->settings) - sl,
                                   " %s", v->v[i]);
        if (sl >= sizeof(s->settings))
            break;
    }
    int rc = 0;
    if (o->self) {
        /* One engine serves both sides: the server builds it with both
         * sides' settings, the client borrows it after READY. */
        if (r->engines != 1 || r->recv_mode) {
            snprintf(err, errlen, "--self needs one receiving engine and no "
                     "messages (not post, scatter, send)");
            return -ENOTSUP;
        }
        for (int i = 0; i < r->client_sets.n; i++)
            tb_sets_add(&r->server_sets, "%s", r->client_sets.v[i]);
        r->server_probe |= r->client_probe;
    } else {
        rc = tb_engine_create(o->config_text, o->sets, o->nsets,
                              &r->client_sets, r->client_probe, &env->e, err,
                              errlen);
        if (rc)
            return rc;
        env->nics = te_engine_nic_count(env->e, 0);
        env->probe = r->client_probe;
        if (r->client_probe && !(env->papi = tb_probe_api())) {
            snprintf(err, errlen, "probe loaded but its API is not reachable");
            return -ENOENT;
        }
    }

    uint8_t caddr[TE_ADDR_MAX];
    size_t calen = sizeof(caddr);
    if (r->recv_mode && env->e &&
        (rc = te_engine_address(env->e, 0, caddr, &calen))) {
        snprintf(err, errlen, "client address: %s", te_last_error());
        return rc;
    }
    if (!r->recv_mode)
        calen = 0;
    char *sets;
    size_t slen = pack_sets((const char *const *)r->server_sets.v,
                            r->server_sets.n, &sets);
    if (!sets)
        return -ENOMEM;
    struct tb_setup su;
    memset(&su, 0, sizeof(su));
    su.test = (uint32_t)r->test;
    su.engines = r->engines;
    su.region = r->region;
    su.access = r->access;
    su.probe = (uint32_t)r->server_probe;
    su.recv_mode = r->recv_mode;
    su.nsets = (uint32_t)r->server_sets.n;
    su.sets_len = (uint32_t)slen;
    su.client_addr_len = (uint32_t)calen;
    su.self = (uint32_t)o->self;
    su.seed = 7;
    uint8_t *body = malloc(slen + calen + 1);
    if (!body) {
        free(sets);
        return -ENOMEM;
    }
    memcpy(body, sets, slen);
    memcpy(body + slen, caddr, calen);
    free(sets);
    rc = tb_chan_send(&s->ch, TB_MSG_SETUP, &su, sizeof(su), body, slen + calen);
    free(body);
    if (rc) {
        snprintf(err, errlen, "control channel: %s", te_strerror(rc));
        return rc;
    }
    void *msg;
    size_t len;
    if ((rc = tb_chan_expect(&s->ch, TB_MSG_READY, sizeof(struct tb_ready),
                             &msg, &len))) {
        snprintf(err, errlen, "control channel: %s", te_strerror(rc));
        return rc;
    }
    memcpy(&env->ready, msg, sizeof(env->ready));
    if (env->ready.rc) {
        snprintf(err, errlen, "%s", env->ready.error);
        free(msg);
        return env->ready.rc;
    }
    if (o->self) {
        if (env->ready.pid != (uint32_t)getpid() || !env->ready.engine_ptr) {
            snprintf(err, errlen, "--self needs the server in this process");
            free(msg);
            return -ENOTSUP;
        }
        env->e = (te_engine *)(uintptr_t)env->ready.engine_ptr;
        env->borrowed = 1;
        env->nics = te_engine_nic_count(env->e, 0);
        env->probe = r->server_probe;
        if (env->probe)
            env->papi = tb_probe_api();
    }
    const uint8_t *p = (const uint8_t *)msg + sizeof(struct tb_ready);
    const uint8_t *end = (const uint8_t *)msg + len;
    env->engines = env->ready.engines;
    for (uint32_t i = 0; !rc && i < env->engines && i < TB_MAX_PEERS; i++) {
        uint32_t al, dl;
        if (p + 4 > end || (memcpy(&al, p, 4), p + 4 + al + 4 > end)) {
            rc = -EPROTO;
            break;
        }
        const uint8_t *addr = p + 4;
        p += 4 + al;
        memcpy(&dl, p, 4);
        if (p + 4 + dl > end) {
            rc = -EPROTO;
            break;
        }
        if ((rc = te_desc_parse(p + 4, dl, &env->desc[i])))
            snprintf(err, errlen, "descriptor of engine %u: %s", i,
                     te_last_error());
        else if ((rc = te_peer_add(env->e, 0, addr, al, &env->peer[i])))
            snprintf(err, errlen, "adding server engine %u: %s", i,
                     te_last_error());
        p += 4 + dl;
    }
    if (rc == -EPROTO && !err[0])
        snprintf(err, errlen, "malformed READY from the server");
    free(msg);
    return rc;
}

/*
 * Peers are removed before either side goes away: a transport that sees a
 * peer's NIC close reports the peer down, which the engine logs as a
 * warning, and an orderly end of a benchmark is not a failure.
 */
void tb_env_close(struct tb_session *s, struct tb_env *env)
{
    for (uint32_t i = 0; env->e && i < env->engines && i < TB_MAX_PEERS; i++)
        te_peer_remove(env->e, 0, env->peer[i]);
    struct tb_ack a;
    void *msg;
    size_t len;
    if (tb_chan_send(&s->ch, TB_MSG_TEARDOWN, &a, 0, NULL, 0) == 0 &&
        tb_chan_expect(&s->ch, TB_MSG_ACK, sizeof(a), &msg, &len) == 0)
        free(msg);
    if (env->e && !env->borrowed)
        te_engine_destroy(env->e);
    env->e = NULL;
}

int tb_arm(struct tb_session *s, uint32_t kind, uint32_t imm, uint64_t count,
           struct tb_ack *ack)
{
    struct tb_arm a = {.kind = kind, .imm = imm, .count = count};
    int rc = tb_chan_send(&s->ch, TB_MSG_ARM, &a, sizeof(a), NULL, 0);
    if (rc)
        return rc;
    void *msg;
    size_t len;
    if ((rc = tb_chan_expect(&s->ch, TB_MSG_ACK, sizeof(*ack), &msg, &len)))
        return rc;
    memcpy(ack, msg, sizeof(*ack));
    free(msg);
    return ack->rc;
}

int tb_collect(struct tb_session *s, uint32_t kind, uint32_t imm,
               uint64_t count, struct tb_result *res, void **samples)
{
    struct tb_arm a = {.kind = kind, .imm = imm, .count = count,
                       .timeout_ms = s->o->timeout_s * 1000u};
    if (samples)
        *samples = NULL;
    int rc = tb_chan_send(&s->ch, TB_MSG_COLLECT, &a, sizeof(a), NULL, 0);
    if (rc)
        return rc;
    void *msg;
    size_t len;
    if ((rc = tb_chan_expect(&s->ch, TB_MSG_RESULT, sizeof(*res), &msg, &len)))
        return rc;
    memcpy(res, msg, sizeof(*res));
    if (samples && res->nsamples &&
        len >= sizeof(*res) + res->nsamples * 16) {
        *samples = malloc(res->nsamples * 16);
        if (*samples)
            memcpy(*samples, (uint8_t *)msg + sizeof(*res), res->nsamples * 16);
    }
    free(msg);
    return res->rc;
}

int tb_remote_checksum(struct tb_session *s, uint32_t engine, uint64_t off,
                       uint64_t len, uint64_t *sum)
{
    struct tb_sum_req q = {.engine = engine, .off = off, .len = len};
    int rc = tb_chan_send(&s->ch, TB_MSG_CHECKSUM, &q, sizeof(q), NULL, 0);
    if (rc)
        return rc;
    void *msg;
    size_t mlen;
    if ((rc = tb_chan_expect(&s->ch, TB_MSG_ACK, sizeof(struct tb_ack), &msg,
                             &mlen)))
        return rc;
    const struct tb_ack *a = msg;
    rc = a->rc;
    *sum = a->value;
    free(msg);
    return rc;
}

int tb_spin_wait;

/*
 * Completions of callback-less requests. A short spin catches the common
 * case cheaply; then block in the engine (the condition variable frees the
 * CPU for the workers, which matters on a 2-core machine). Bounded.
 */
int tb_wait_completions(te_engine *e, te_completion *c, int max,
                        uint64_t deadline_ns)
{
    for (int spin = 0; spin < 64 || tb_spin_wait; spin++) {
        int n = te_poll_completions(e, c, max, 0);
        if (n)
            return n;
        tb_cpu_relax();
        if (tb_spin_wait && (spin & 1023) == 1023 && tb_now_ns() >= deadline_ns)
            return -ETIMEDOUT;
    }
    for (;;) {
        int n = te_poll_completions(e, c, max, 5);
        if (n)
            return n;
        if (tb_now_ns() >= deadline_ns)
            return -ETIMEDOUT;
    }
}

void tb_row_result(struct tb_result_row *row, int rc, const char *err)
{
    if (rc)
        snprintf(row->error, sizeof(row->error), "%s",
                 err && err[0] ? err : te_strerror(rc));
    row->ok = !rc;
}
