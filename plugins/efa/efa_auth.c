/*
 * Job authentication of the efa transport: the records, the handshake's
 * state machine and the gate on inbound events (efa_auth.h). Messages are
 * tagged sends from a small registered pool (efa_msgpool.h); their
 * completions come through poll() like every other (efa_cq.c hands them
 * here).
 *
 * Who waits for what (every wait bounded by EFA_AUTH_TIMEOUT_NS):
 *   initiator: HELLO sent -> CHALLENGE verified (rx_ok) -> PROOF sent ->
 *              ACK (tx_ok; the core's operations to it are posted);
 *   target:    HELLO -> CHALLENGE sent -> PROOF verified (rx_ok, tx_ok) ->
 *              ACK sent.
 * A MAC that does not verify gets a REFUSE, so both sides log the refusal;
 * the core's peers of the address go down with -EACCES and the reason.
 *
 * Records go (forget_exited, forget_idle): when the remote's process has
 * exited (same host), or when no core peer refers to it and nothing came
 * from it for efa.auth_forget_idle_ms: FORGET tells it to prove itself
 * again before its next operation; its FORGOT (sent once its operations
 * to us are done) frees the record after a grace for those still on the
 * way. A remote that answers EFA_AUTH_FORGET_TRIES FORGETs in a row with
 * neither FORGOT nor any event is taken for gone and freed anyway.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "efa_internal.h"

#define FAILED_KEEP_NS 1000000000ull /* a refused stranger's record */

static const struct te_plugin_host *host_of(const efa_ctx *ctx)
{
    const struct te_plugin_host *h = &ctx->host;
    /* A core older than ABI 1.4 has no secret to offer. */
    if (h->struct_size < offsetof(struct te_plugin_host, auth_verify) +
                             sizeof(h->auth_verify) ||
        !h->auth_required || !h->auth_mac || !h->auth_verify)
        return NULL;
    return h;
}

bool efa_auth_required(const efa_ctx *ctx)
{
    const struct te_plugin_host *h = host_of(ctx);
    return h && h->auth_required(h->host_ctx) == 1;
}

/* ---------------------------------------------------------- records */

static struct efa_auth_rec *rec_at(efa_nic *nic, uint32_t idx1)
{
    return idx1 && idx1 <= nic->auth.nrecs && nic->auth.recs[idx1 - 1].used
               ? &nic->auth.recs[idx1 - 1]
               : NULL;
}

static uint32_t rec_index(efa_nic *nic, const struct efa_auth_rec *r)
{
    return (uint32_t)(r - nic->auth.recs) + 1;
}

static struct efa_wire_addr hdr_of(const uint8_t *addr)
{
    struct efa_wire_addr h;
    memcpy(&h, addr, sizeof(h)); /* the bytes may be unaligned */
    return h;
}

static bool same_raw(const uint8_t *a, const uint8_t *b)
{
    struct efa_wire_addr ha = hdr_of(a), hb = hdr_of(b);
    return ha.raw_len == hb.raw_len &&
           memcmp(a + sizeof(ha), b + sizeof(hb), ha.raw_len) == 0;
}

static int map_set(efa_nic *nic, fi_addr_t fa, uint32_t v)
{
    return efa_addr_map_set(&nic->auth.map, &nic->auth.map_cap, fa, v);
}

static struct efa_auth_rec *rec_of_src(efa_nic *nic, fi_addr_t src)
{
    struct efa_auth *a = &nic->auth;
    if (src == FI_ADDR_NOTAVAIL || src >= a->map_cap)
        return NULL;
    return rec_at(nic, a->map[src]);
}

static struct efa_auth_rec *rec_find(efa_nic *nic, const uint8_t *addr)
{
    for (uint32_t i = 0; i < nic->auth.nrecs; i++)
        if (nic->auth.recs[i].used && same_raw(nic->auth.recs[i].addr, addr))
            return &nic->auth.recs[i];
    return NULL;
}

/* " on another host", or "" for a remote of this host. */
static const char *elsewhere(efa_nic *nic, const struct efa_auth_rec *r)
{
    return hdr_of(r->addr).host_id == nic->ctx->host_id ? ""
                                                         : " on another host";
}

/* "peer of pid 4242", for logs and errors. */
static void who(efa_nic *nic, const struct efa_auth_rec *r, char *buf,
                size_t len)
{
    snprintf(buf, len, "peer of pid %u%s", hdr_of(r->addr).pid,
             elsewhere(nic, r));
}

/* Handshake in progress (keeps the worker polling: efa_wait_arm). */
static void progress_set(struct efa_auth *a, struct efa_auth_rec *r,
                         uint8_t ini, uint8_t challenged)
{
    bool was = r->ini || r->challenged, now = ini || challenged;
    r->ini = ini;
    r->challenged = challenged;
    if (was && !now)
        a->busy--;
    else if (!was && now)
        a->busy++;
}

static void owe_set(struct efa_auth *a, struct efa_auth_rec *r, uint8_t owe)
{
    if (r->owe_forgot && !owe)
        a->owed--;
    else if (!r->owe_forgot && owe)
        a->owed++;
    r->owe_forgot = owe;
}

static void due_set(struct efa_auth *a, struct efa_auth_rec *r, uint8_t type,
                    uint8_t reason)
{
    if (r->due && !type)
        a->due--;
    else if (!r->due && type)
        a->due++;
    r->due = type;
    r->due_reason = reason;
}

/* A record for addr (len bytes, already checked), its address inserted. */
static struct efa_auth_rec *rec_new(efa_nic *nic, const uint8_t *addr,
                                    size_t len)
{
    struct efa_auth *a = &nic->auth;
    struct efa_auth_rec *r = NULL;
    for (uint32_t i = 0; i < a->nrecs && !r; i++)
        if (!a->recs[i].used)
            r = &a->recs[i];
    if (!r) {
        if (a->nrecs == a->cap) {
            uint32_t cap = a->cap ? 2 * a->cap : 16;
            struct efa_auth_rec *n = realloc(a->recs, cap * sizeof(*n));
            if (!n)
                return NULL;
            a->recs = n;
            a->cap = cap;
        }
        r = &a->recs[a->nrecs++];
    }
    memset(r, 0, sizeof(*r));
    struct efa_wire_addr h = hdr_of(addr);
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    int n = fi_av_insert(nic->av, addr + sizeof(h), 1, &fa, 0, NULL);
    if (n != 1 || fa == FI_ADDR_NOTAVAIL) {
        efa_err(nic, "fi_av_insert of the address of a peer of pid %u: %s",
                h.pid, fi_strerror(n < 0 ? -n : FI_EINVAL));
        return NULL;
    }
    r->used = 1;
    r->fi_addr = fa;
    r->addr_len = (uint32_t)len;
    r->pid = h.pid;
    memcpy(r->addr, addr, len);
    if (map_set(nic, fa, rec_index(nic, r))) {
        fi_av_remove(nic->av, &fa, 1, 0);
        r->used = 0;
        return NULL;
    }
    /* A process of this host that we can see: its exit can be told later
     * (forget_exited). */
    r->alive_seen = efa_proc_running(nic->ctx->host_id, h.host_id, h.pid,
                                     h.start_time);
    /* Another endpoint of this process: messages to it go under its lock
     * like operations (efa_local.h). */
    if (h.host_id == nic->ctx->host_id && h.pid == (uint32_t)getpid() &&
        h.start_time == nic->ctx->start_time)
        r->local = efa_local_find(nic->info->fabric_attr->prov_name,
                                  addr + sizeof(h), h.raw_len);
    return r;
}

static void rec_free(efa_nic *nic, struct efa_auth_rec *r)
{
    struct efa_auth *a = &nic->auth;
    progress_set(a, r, 0, 0);
    due_set(a, r, 0, 0);
    owe_set(a, r, 0);
    fi_av_remove(nic->av, &r->fi_addr, 1, 0);
    map_set(nic, r->fi_addr, 0);
    efa_local_put(r->local);
    efa_bell_remote_close(r->bell);
    memset(r, 0, sizeof(*r));
}

struct efa_bell_remote *efa_auth_bell(efa_nic *nic, fi_addr_t fa)
{
    struct efa_auth_rec *r = nic->auth.on ? rec_of_src(nic, fa) : NULL;
    if (!r || r->bell || r->bell_tried)
        return r ? r->bell : NULL;
    r->bell_tried = 1;
    struct efa_wire_addr w;
    if (r->addr_len < sizeof(w))
        return NULL;
    memcpy(&w, r->addr, sizeof(w));
    if (r->addr_len < sizeof(w) + w.raw_len)
        return NULL;
    int err;
    r->bell = efa_bell_of(nic, &w, r->addr + sizeof(w), &err);
    return r->bell;
}

/* ---------------------------------------------------------- messages */

/* The MAC of role over r's handshake (we_initiate: this NIC is the
 * initiator); with check, verify that instead: 0 or -EACCES. */
static int mac_for(efa_nic *nic, const struct efa_auth_rec *r, uint32_t role,
                   bool we_initiate, uint8_t *mac, const uint8_t *check)
{
    const struct te_plugin_host *h = host_of(nic->ctx);
    uint8_t b[EFA_AUTH_BIND_MAX];
    size_t n = we_initiate
                   ? efa_auth_bind(b, role, r->n_i, r->n_t, nic->addr,
                                   nic->addr_len, r->addr, r->addr_len)
                   : efa_auth_bind(b, role, r->n_i, r->n_t, r->addr,
                                   r->addr_len, nic->addr, nic->addr_len);
    if (!h || !n)
        return -EINVAL;
    return check ? h->auth_verify(h->host_ctx, b, n, check)
                 : h->auth_mac(h->host_ctx, b, n, mac);
}

/* Send a message of type to r now, or mark it due (no buffer free, or the
 * provider says -FI_EAGAIN while it connects): housekeeping retries it. */
static int send_msg(efa_nic *nic, struct efa_auth_rec *r, uint8_t type,
                    uint8_t reason)
{
    struct efa_auth *a = &nic->auth;
    if (a->msgs.send_free >= a->msgs.nops) {
        due_set(a, r, type, reason);
        return 0;
    }
    uint32_t i = a->msgs.send_free;
    struct efa_auth_msg *m = (struct efa_auth_msg *)efa_msgpool_buf(&a->msgs,
                                                                   i);
    memset(m, 0, sizeof(*m));
    m->magic = EFA_AUTH_MAGIC;
    m->version = EFA_AUTH_VERSION;
    m->type = type;
    m->reason = reason;
    memcpy(m->n_i, r->n_i, sizeof(m->n_i));
    memcpy(m->n_t, r->n_t, sizeof(m->n_t));
    int rc = 0;
    if (type == EFA_AUTH_HELLO) {
        m->addr_len = (uint32_t)nic->addr_len;
        memcpy(m->addr, nic->addr, nic->addr_len);
    } else if (type == EFA_AUTH_CHALLENGE) {
        rc = mac_for(nic, r, EFA_AUTH_ROLE_TARGET, false, m->mac, NULL);
    } else if (type == EFA_AUTH_PROOF) {
        rc = mac_for(nic, r, EFA_AUTH_ROLE_INITIATOR, true, m->mac, NULL);
        m->key_secret = nic->key_secret;
    } else if (type == EFA_AUTH_ACK) {
        m->key_secret = nic->key_secret;
    } else if (type == EFA_AUTH_FORGET || type == EFA_AUTH_FORGOT) {
        /* Our address first: the sender's (efa_auth_wire.h). */
        rc = mac_for(nic, r,
                     type == EFA_AUTH_FORGET ? EFA_AUTH_ROLE_FORGET
                                             : EFA_AUTH_ROLE_FORGOT,
                     true, m->mac, NULL);
    }
    if (rc)
        return rc;
    if (r->local && !efa_local_enter(r->local))
        return -ECONNRESET; /* its engine in this process is gone */
    ssize_t s = efa_msgpool_send(nic, &a->msgs, i, r->fi_addr);
    if (r->local)
        efa_local_leave(r->local);
    if (s == -FI_EAGAIN) {
        due_set(a, r, type, reason);
        return 0;
    }
    due_set(a, r, 0, 0);
    if (s) {
        efa_log(nic->ctx, 1, "%s: authentication message to pid %u: %s",
                nic->name, r->pid, fi_strerror((int)-s));
        return efa_errno((int)s);
    }
    return 0;
}

/* Refuse r: log it, the core's peers of the address go down (-EACCES,
 * the reason in the engine's last error), the record is kept a while so
 * the stranger's messages find it refused, then freed. */
static void rec_fail(efa_nic *nic, struct efa_auth_rec *r, const char *why)
{
    struct efa_auth *a = &nic->auth;
    char w[64], reason[256];
    who(nic, r, w, sizeof(w));
    snprintf(reason, sizeof(reason), "%s failed authentication: %s", w, why);
    efa_log(nic->ctx, 1, "%s: %s", nic->name, reason);
    progress_set(a, r, 0, 0);
    r->rx_ok = r->tx_ok = 0;
    r->failed = 1;
    r->deadline_ns = tpc_now_ns() + FAILED_KEEP_NS;
    uint32_t idx = rec_index(nic, r);
    bool said = false;
    for (uint32_t i = 0; i < nic->npeers; i++) {
        struct efa_peer *p = &nic->peers[i];
        if (p->auth != idx || (p->state != EFA_PEER_LIVE &&
                               p->state != EFA_PEER_PENDING))
            continue;
        if (!said)
            efa_err(nic, "%s", reason);
        said = true;
        efa_peer_down(nic, p, -EACCES, reason);
    }
}

static int fresh(uint8_t *nonce)
{
    return getrandom(nonce, EFA_AUTH_NONCE_LEN, 0) == EFA_AUTH_NONCE_LEN
               ? 0
               : -EIO;
}

static int start_hello(efa_nic *nic, struct efa_auth_rec *r)
{
    if (fresh(r->n_i)) {
        efa_err(nic, "getrandom failed: no nonce for authentication");
        return -EIO;
    }
    memset(r->n_t, 0, sizeof(r->n_t));
    r->failed = 0;
    r->rx_ok = r->tx_ok = 0;
    progress_set(&nic->auth, r, EFA_AI_HELLO, 0);
    r->deadline_ns = tpc_now_ns() + EFA_AUTH_TIMEOUT_NS;
    int rc = send_msg(nic, r, EFA_AUTH_HELLO, 0);
    if (rc)
        progress_set(&nic->auth, r, 0, 0);
    return rc;
}

/* ---------------------------------------------------------- inbound */

/* A HELLO's address: one of ours (format, provider, endpoint name size)
 * and one that asks for authentication. */
static bool hello_addr_ok(efa_nic *nic, const struct efa_auth_msg *m)
{
    if (m->addr_len < sizeof(struct efa_wire_addr))
        return false;
    struct efa_wire_addr h = hdr_of(m->addr);
    return h.magic == EFA_ADDR_MAGIC && h.version == EFA_ADDR_VERSION &&
           (h.flags & EFA_AF_AUTH) && h.raw_len == nic->raw_len &&
           m->addr_len == sizeof(h) + h.raw_len &&
           strncmp(h.prov, nic->info->fabric_attr->prov_name,
                   EFA_PROV_LEN) == 0;
}

static uint32_t strangers(efa_nic *nic)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < nic->auth.nrecs; i++) {
        const struct efa_auth_rec *r = &nic->auth.recs[i];
        n += r->used && !r->refs && !(r->rx_ok && r->tx_ok);
    }
    return n;
}

static void on_hello(efa_nic *nic, const struct efa_auth_msg *m,
                     fi_addr_t src)
{
    struct efa_auth *a = &nic->auth;
    if (!hello_addr_ok(nic, m)) {
        efa_log(nic->ctx, 2, "%s: authentication hello with a malformed "
                "address: dropped", nic->name);
        return;
    }
    struct efa_auth_rec *r = rec_find(nic, m->addr);
    if (r && src != r->fi_addr) {
        /* Someone else speaking for a known address. */
        efa_log(nic->ctx, 1, "%s: authentication hello naming the address "
                "of pid %u came from another sender: dropped", nic->name,
                r->pid);
        return;
    }
    if (!r) {
        if (strangers(nic) >= EFA_AUTH_MAX_STRANGERS) {
            efa_log(nic->ctx, 1, "%s: %u authentications in progress: hello "
                    "dropped", nic->name, EFA_AUTH_MAX_STRANGERS);
            return;
        }
        if (!(r = rec_new(nic, m->addr, m->addr_len)))
            return;
    }
    /* Both sides said hello at once: one answers (efa_auth_wire.h). */
    if (r->ini == EFA_AI_HELLO &&
        efa_auth_keeps_initiator(nic->addr, nic->addr_len, m->addr,
                                 m->addr_len))
        return;
    if (r->ini == EFA_AI_PROOF)
        return; /* ours is finishing; theirs would restart it */
    memcpy(r->n_i, m->n_i, sizeof(r->n_i));
    if (fresh(r->n_t))
        return;
    r->failed = 0;
    r->rx_ok = r->tx_ok = 0; /* a new life of the address proves again */
    r->forgetting = r->forgot = r->unanswered = 0;
    owe_set(a, r, 0);
    progress_set(a, r, 0, 1);
    r->deadline_ns = tpc_now_ns() + EFA_AUTH_TIMEOUT_NS;
    if (send_msg(nic, r, EFA_AUTH_CHALLENGE, 0))
        rec_fail(nic, r, "cannot send our challenge");
}

/* Operations of the core's peers of r that the provider still holds. */
static uint32_t ops_in_flight(efa_nic *nic, const struct efa_auth_rec *r)
{
    uint32_t idx = rec_index(nic, r), n = 0;
    for (uint32_t i = 0; i < nic->npeers; i++)
        if (nic->peers[i].auth == idx)
            n += nic->peers[i].live_ops;
    return n;
}

/* r asked us to forget: answer FORGOT once none of our operations to it
 * is in flight (an immediate that overtook the answer would find no
 * record). A handshake started since supersedes the question. */
static void forgot_answer(efa_nic *nic, struct efa_auth_rec *r)
{
    if (!r->owe_forgot)
        return;
    if (r->ini || r->challenged || !r->rx_ok) {
        owe_set(&nic->auth, r, 0);
        return;
    }
    if (ops_in_flight(nic, r))
        return;
    /* Sent, or due (send_msg retries it); on an error the forgetter's
     * FORGET goes unanswered (it asks again, or takes us for gone) and
     * our next operation proves us again anyway. */
    if (send_msg(nic, r, EFA_AUTH_FORGOT, 0))
        efa_log(nic->ctx, 2, "%s: cannot answer the FORGET of pid %u",
                nic->name, r->pid);
    owe_set(&nic->auth, r, 0);
}

void efa_auth_answer_owed(efa_nic *nic)
{
    struct efa_auth *a = &nic->auth;
    for (uint32_t i = 0; a->owed && i < a->nrecs; i++)
        if (a->recs[i].used)
            forgot_answer(nic, &a->recs[i]);
}

/* How long a FORGET waits for its FORGOT, and a FORGOT's grace: 5 s, or
 * the idle period if shorter. */
static uint64_t forget_wait_ns(const struct efa_auth *a)
{
    return a->forget_idle_ns < EFA_AUTH_TIMEOUT_NS ? a->forget_idle_ns
                                                   : EFA_AUTH_TIMEOUT_NS;
}

/* FORGET and FORGOT of the handshake that authenticated r (the nonces
 * matched: on_message). */
static void on_forget_message(efa_nic *nic, struct efa_auth_rec *r,
                              const struct efa_auth_msg *m)
{
    bool forget = m->type == EFA_AUTH_FORGET;
    if (r->ini || r->challenged || !r->rx_ok || (!forget && !r->forgetting))
        return; /* not of an authenticated record, or not asked for */
    if (mac_for(nic, r, forget ? EFA_AUTH_ROLE_FORGET : EFA_AUTH_ROLE_FORGOT,
                false, NULL, m->mac)) {
        efa_log(nic->ctx, 1, "%s: a %s naming pid %u does not verify under "
                "our key: dropped", nic->name, forget ? "FORGET" : "FORGOT",
                r->pid);
        return;
    }
    if (forget) {
        char w[64];
        who(nic, r, w, sizeof(w));
        /* Our next operation to it proves us again (efa_auth_tx_ready),
         * after the answer. */
        r->tx_ok = 0;
        owe_set(&nic->auth, r, 1);
        efa_log(nic->ctx, 3, "%s: the %s forgot our authentication (idle); "
                "we prove ourselves again before our next operation to it",
                nic->name, w);
        forgot_answer(nic, r);
        return;
    }
    /* Its operations before the answer may still be on the way (a
     * transmit completion does not say they landed): accepted a while. */
    r->forgetting = 0;
    r->forgot = 1;
    r->unanswered = 0;
    r->deadline_ns = tpc_now_ns() + forget_wait_ns(&nic->auth);
}

static void on_message(efa_nic *nic, const void *buf, uint64_t len,
                       fi_addr_t src)
{
    struct efa_auth *a = &nic->auth;
    struct efa_auth_msg m;
    if (efa_auth_msg_parse(buf, len, &m)) {
        efa_log(nic->ctx, 2, "%s: malformed authentication message of %llu "
                "bytes: dropped", nic->name, (unsigned long long)len);
        return;
    }
    if (m.type == EFA_AUTH_HELLO) {
        on_hello(nic, &m, src);
        return;
    }
    struct efa_auth_rec *r = rec_of_src(nic, src);
    if (!r || memcmp(m.n_i, r->n_i, sizeof(m.n_i)) ||
        (m.type != EFA_AUTH_CHALLENGE &&
         memcmp(m.n_t, r->n_t, sizeof(m.n_t))))
        return; /* not of a handshake in progress: stale or forged */
    switch (m.type) {
    case EFA_AUTH_CHALLENGE:
        if (r->ini != EFA_AI_HELLO)
            return;
        memcpy(r->n_t, m.n_t, sizeof(r->n_t));
        if (mac_for(nic, r, EFA_AUTH_ROLE_TARGET, true, NULL, m.mac)) {
            send_msg(nic, r, EFA_AUTH_REFUSE, EFA_AUTH_R_BAD_MAC);
            rec_fail(nic, r, "its proof does not verify under our key (a "
                     "different engine.auth_key)");
            return;
        }
        r->rx_ok = 1;
        progress_set(a, r, EFA_AI_PROOF, 0);
        r->deadline_ns = tpc_now_ns() + EFA_AUTH_TIMEOUT_NS;
        if (send_msg(nic, r, EFA_AUTH_PROOF, 0))
            rec_fail(nic, r, "cannot send our proof");
        return;
    case EFA_AUTH_PROOF:
        if (!r->challenged)
            return;
        if (mac_for(nic, r, EFA_AUTH_ROLE_INITIATOR, false, NULL, m.mac)) {
            send_msg(nic, r, EFA_AUTH_REFUSE, EFA_AUTH_R_BAD_MAC);
            rec_fail(nic, r, "its proof does not verify under our key (a "
                     "different engine.auth_key)");
            return;
        }
        r->rx_ok = r->tx_ok = 1;
        r->peer_key_secret = m.key_secret;
        progress_set(a, r, 0, 0);
        if (send_msg(nic, r, EFA_AUTH_ACK, 0))
            rec_fail(nic, r, "cannot send our acknowledgement");
        else
            efa_log(nic->ctx, 3, "%s: peer of pid %u authenticated",
                    nic->name, r->pid);
        return;
    case EFA_AUTH_ACK:
        if (r->ini != EFA_AI_PROOF)
            return;
        r->tx_ok = 1;
        r->peer_key_secret = m.key_secret;
        progress_set(a, r, 0, 0);
        efa_log(nic->ctx, 3, "%s: peer of pid %u authenticated", nic->name,
                r->pid);
        return;
    case EFA_AUTH_REFUSE:
        if (r->ini || r->challenged)
            rec_fail(nic, r, efa_auth_reason_text(m.reason));
        return;
    case EFA_AUTH_FORGET:
    case EFA_AUTH_FORGOT:
        on_forget_message(nic, r, &m);
        return;
    default:
        return;
    }
}

/* ---------------------------------------------------------- interface */

int efa_auth_open(efa_nic *nic)
{
    struct efa_auth *a = &nic->auth;
    a->forget_idle_ns = (uint64_t)nic->ctx->cfg.auth_forget_idle_ms * 1000000ull;
    return efa_msgpool_open(nic, &a->msgs, EFA_AUTH_TAG,
                            sizeof(struct efa_auth_msg), EFA_AUTH_NRECV,
                            EFA_AUTH_NSEND, "authentication");
}

void efa_auth_close(efa_nic *nic)
{
    struct efa_auth *a = &nic->auth;
    for (uint32_t i = 0; i < a->nrecs; i++)
        if (a->recs[i].used) {
            efa_local_put(a->recs[i].local);
            efa_bell_remote_close(a->recs[i].bell);
        }
    free(a->recs);
    free(a->map);
    efa_msgpool_close(&a->msgs);
    memset(a, 0, sizeof(*a));
}

int efa_auth_peer_attach(efa_nic *nic, struct efa_peer *p, const void *addr,
                         size_t len)
{
    struct efa_auth_rec *r = rec_find(nic, addr);
    if (!r && !(r = rec_new(nic, addr, len)))
        return -EHOSTUNREACH;
    r->refs++;
    r->forgetting = r->forgot = r->unanswered = 0; /* in use again */
    r->idle_since_ns = 0;
    p->auth = rec_index(nic, r);
    p->fi_addr = r->fi_addr;
    if (same_raw(addr, nic->addr)) {
        /* This very NIC: nothing to prove to ourselves. */
        r->rx_ok = r->tx_ok = 1;
        r->peer_key_secret = nic->key_secret;
        return 0;
    }
    if (r->tx_ok || r->ini || r->challenged)
        return 0; /* done, or running */
    int rc = start_hello(nic, r);
    if (rc) {
        r->refs--;
        p->auth = 0;
        p->fi_addr = FI_ADDR_NOTAVAIL;
        if (!r->refs && !r->rx_ok)
            rec_free(nic, r);
        if (rc != -EIO)
            efa_err(nic, "cannot start authentication with the peer: %s",
                    strerror(-rc));
    }
    return rc;
}

void efa_auth_peer_detach(efa_nic *nic, struct efa_peer *p)
{
    struct efa_auth_rec *r = rec_at(nic, p->auth);
    p->auth = 0;
    if (r && r->refs && !--r->refs)
        r->idle_since_ns = 0; /* idle from the next scan on */
}

/* r's remote is gone for good: whoever answers at its address proves
 * itself anew. */
static void rec_lost(efa_nic *nic, struct efa_auth_rec *r)
{
    progress_set(&nic->auth, r, 0, 0);
    r->rx_ok = r->tx_ok = 0;
}

/* A same-host remote whose process has exited, where that can be told
 * (alive_seen: its process was seen running here, start time and all;
 * under qemu-user a process reads its own start time as 0, so its address
 * never matches). */
static bool rec_exited(const efa_nic *nic, const struct efa_auth_rec *r)
{
    if (!r->alive_seen)
        return false;
    struct efa_wire_addr h = hdr_of(r->addr);
    return !efa_proc_running(nic->ctx->host_id, h.host_id, h.pid,
                             h.start_time);
}

/* Free r, whose remote exited or closed (why), counted and said. */
static void rec_forget(efa_nic *nic, struct efa_auth_rec *r, const char *why)
{
    nic->auth.forgotten++;
    efa_log(nic->ctx, 2, "%s: forgot the authentication of pid %u: %s (%llu "
            "forgotten so far)", nic->name, r->pid, why,
            (unsigned long long)nic->auth.forgotten);
    rec_free(nic, r);
}

void efa_auth_peer_lost(efa_nic *nic, struct efa_peer *p)
{
    struct efa_auth_rec *r = rec_at(nic, p->auth);
    if (r && !r->failed)
        rec_lost(nic, r);
}

int efa_auth_tx_ready(efa_nic *nic, const struct efa_peer *p)
{
    struct efa_auth_rec *r = rec_at(nic, p->auth);
    if (!r)
        return 0;
    if (r->tx_ok)
        return 1;
    /* Lost since (efa_auth_peer_lost), or forgotten by it once its
     * FORGOT is out (forgot_answer): prove ourselves again. */
    if (!r->ini && !r->challenged && !r->failed && !r->owe_forgot &&
        start_hello(nic, r))
        rec_fail(nic, r, "cannot start authentication");
    return 0;
}

uint64_t efa_auth_key_secret(efa_nic *nic, const struct efa_peer *p)
{
    struct efa_auth_rec *r = rec_at(nic, p->auth);
    return r ? r->peer_key_secret : p->key_secret;
}

/* Goodbyes (efa_bye_wire.h) travel only between authenticated NICs. */
static bool authenticated(const struct efa_auth_rec *r)
{
    return r && r->rx_ok && !r->ini && !r->challenged && !r->failed;
}

void efa_auth_bye_targets(efa_nic *nic, efa_auth_bye_fn fn, void *arg)
{
    struct efa_auth *a = &nic->auth;
    for (uint32_t i = 0; i < a->nrecs; i++) {
        struct efa_auth_rec *r = &a->recs[i];
        /* Authenticated both ways, or our proof is on its way to a remote
         * we verified (we initiated and wait for its ACK): the remote
         * takes that proof before this goodbye (one sender's messages
         * arrive in order) and can then verify its MAC. A close in that
         * window is likely: a receiver's keyless heartbeat starts a
         * handshake with each peer it adds. */
        bool told = authenticated(r) && r->tx_ok;
        bool proof_sent = r->rx_ok && r->ini == EFA_AI_PROOF &&
                          !r->challenged && !r->failed;
        if (!r->used || !(told || proof_sent) ||
            r->fi_addr == FI_ADDR_NOTAVAIL || same_raw(r->addr, nic->addr))
            continue; /* nothing to tell, or ourselves */
        /* A same-host remote whose process is gone: nobody to tell, and
         * shm would enter its region through a lock it may have died
         * holding. */
        if (rec_exited(nic, r))
            continue;
        uint8_t mac[TE_PLUGIN_AUTH_MAC_LEN];
        /* Our address first: the sender's (efa_auth_wire.h). */
        if (mac_for(nic, r, EFA_AUTH_ROLE_BYE, true, mac, NULL))
            continue;
        if (fn(nic, r->fi_addr, r->local, mac, arg))
            return;
    }
}

int efa_auth_bye_verify(efa_nic *nic, fi_addr_t src, const uint8_t *mac,
                        uint32_t *rec)
{
    struct efa_auth_rec *r = rec_of_src(nic, src);
    if (!authenticated(r) ||
        mac_for(nic, r, EFA_AUTH_ROLE_BYE, false, NULL, mac))
        return -EACCES;
    rec_lost(nic, r);
    *rec = rec_index(nic, r);
    if (!r->refs) /* no peer of ours to turn down: only its record goes */
        rec_forget(nic, r, "it closed its NIC in order, its goodbye came");
    return 0;
}

bool efa_auth_accept(efa_nic *nic, fi_addr_t src, const char *what)
{
    struct efa_auth_rec *r = rec_of_src(nic, src);
    if (r && r->rx_ok) {
        r->seen = 1;
        return true;
    }
    uint64_t n = ++nic->auth.dropped;
    if ((n & (n - 1)) == 0) /* the 1st, 2nd, 4th, 8th, ... */
        efa_log(nic->ctx, 1, "%s: dropped %s from %s (%llu dropped so "
                "far)", nic->name, what,
                r ? "a peer whose authentication is not complete"
                  : "a sender that never authenticated",
                (unsigned long long)n);
    return false;
}

bool efa_auth_owns(efa_nic *nic, void *op_context)
{
    return nic->auth.on && efa_msgpool_index(&nic->auth.msgs, op_context) >= 0;
}

void efa_auth_completion(efa_nic *nic, void *op_context, fi_addr_t src,
                         uint64_t len, int err)
{
    struct efa_auth *a = &nic->auth;
    uint32_t i = (uint32_t)efa_msgpool_index(&a->msgs, op_context);
    if (i >= a->msgs.nrecv) {
        efa_msgpool_send_done(&a->msgs, i);
        if (err)
            efa_log(nic->ctx, 2, "%s: an authentication message was not "
                    "delivered: %s", nic->name, fi_strerror(err));
        return;
    }
    if (!err)
        on_message(nic, efa_msgpool_buf(&a->msgs, i), len, src);
    else if (err != FI_ECANCELED)
        efa_log(nic->ctx, 2, "%s: authentication receive: %s", nic->name,
                fi_strerror(err));
    efa_msgpool_recv_done(nic, &a->msgs, i);
}

#define EXIT_SCAN_NS 1000000000ull

/*
 * Records that no peer of the core refers to, of a process of this host
 * that has exited: nothing can come from it again (its pid and start time
 * named one process), so its acceptance and its address vector entry go,
 * and a process that comes and goes does not leave a record behind each
 * time. A live remote keeps its record whether we added it or not: it may
 * still write to us. A remote on another host is never freed this way (no
 * exit to see; docs/efa.md, "Authentication").
 */
static void forget_exited(efa_nic *nic)
{
    struct efa_auth *a = &nic->auth;
    for (uint32_t i = 0; i < a->nrecs; i++) {
        struct efa_auth_rec *r = &a->recs[i];
        if (!r->used || r->refs || r->failed || r->ini || r->challenged ||
            !rec_exited(nic, r))
            continue;
        rec_forget(nic, r, "the process exited");
    }
}

/*
 * Records that no core peer refers to and that nothing came from for
 * efa.auth_forget_idle_ms (a remote on another host, or one whose exit
 * cannot be told): ask it to forget (FORGET). Freed on its FORGOT, or
 * after EFA_AUTH_FORGET_TRIES silent rounds (efa_auth_housekeeping).
 */
static void forget_idle(efa_nic *nic, uint64_t now)
{
    struct efa_auth *a = &nic->auth;
    if (!a->forget_idle_ns)
        return;
    for (uint32_t i = 0; i < a->nrecs; i++) {
        struct efa_auth_rec *r = &a->recs[i];
        if (!r->used || r->refs || r->failed || r->ini || r->challenged ||
            !r->rx_ok || r->forgetting || r->forgot)
            continue;
        if (r->seen || !r->idle_since_ns) {
            r->seen = 0;
            r->idle_since_ns = now;
            continue;
        }
        if (now - r->idle_since_ns < a->forget_idle_ns ||
            send_msg(nic, r, EFA_AUTH_FORGET, 0))
            continue; /* not yet, or no message: the next scan tries */
        r->forgetting = 1;
        r->deadline_ns = now + forget_wait_ns(a);
    }
}

/* r's FORGET had no answer by its deadline. */
static void forget_unanswered(efa_nic *nic, struct efa_auth_rec *r,
                              uint64_t now)
{
    struct efa_auth *a = &nic->auth;
    r->forgetting = 0;
    r->idle_since_ns = now; /* the next round after another idle period */
    if (r->seen) {
        /* It is alive (it wrote since): not a silent one. */
        r->seen = 0;
        r->unanswered = 0;
        return;
    }
    if (++r->unanswered < EFA_AUTH_FORGET_TRIES)
        return;
    a->idle_forgotten++;
    efa_log(nic->ctx, 1, "%s: forgot the authentication of pid %u%s: idle "
            "and no answer to %u requests to forget it, taken for gone (if "
            "it is alive and writes again, its immediates are dropped until "
            "it authenticates again: docs/efa.md); %llu idle remotes "
            "forgotten so far", nic->name, r->pid, elsewhere(nic, r),
            EFA_AUTH_FORGET_TRIES, (unsigned long long)a->idle_forgotten);
    rec_free(nic, r);
}

/* Whether efa_auth_housekeeping acts on r's deadline_ns (its branches). */
static bool rec_timed(const struct efa_auth_rec *r)
{
    return r->ini == EFA_AI_HELLO || r->ini == EFA_AI_PROOF ||
           r->challenged || (r->failed && !r->refs) || r->forgetting ||
           (r->forgot && !r->refs);
}

uint64_t efa_auth_next_due_ns(const efa_nic *nic)
{
    const struct efa_auth *a = &nic->auth;
    uint64_t due = 0;
    for (uint32_t i = 0; i < a->nrecs; i++) {
        const struct efa_auth_rec *r = &a->recs[i];
        if (!r->used)
            continue;
        /* The scan for exited and idle remotes (never run yet: now), and
         * the record's own deadline. */
        uint64_t scan = a->next_exit_scan_ns ? a->next_exit_scan_ns : 1;
        if (!due || scan < due)
            due = scan;
        if (rec_timed(r) && r->deadline_ns < due)
            due = r->deadline_ns ? r->deadline_ns : 1;
    }
    return due;
}

void efa_auth_housekeeping(efa_nic *nic, bool deadlines)
{
    struct efa_auth *a = &nic->auth;
    efa_msgpool_repost(nic, &a->msgs);
    for (uint32_t i = 0; a->due && a->msgs.send_free < a->msgs.nops &&
                         i < a->nrecs; i++) {
        struct efa_auth_rec *r = &a->recs[i];
        if (r->used && r->due && send_msg(nic, r, r->due, r->due_reason))
            rec_fail(nic, r, "cannot send an authentication message");
    }
    if (!deadlines)
        return;
    uint64_t now = tpc_now_ns();
    if (now >= a->next_exit_scan_ns) {
        a->next_exit_scan_ns = now + EXIT_SCAN_NS;
        forget_exited(nic);
        forget_idle(nic, now);
    }
    for (uint32_t i = 0; i < a->nrecs; i++) {
        struct efa_auth_rec *r = &a->recs[i];
        if (!r->used || now <= r->deadline_ns)
            continue;
        if (r->ini == EFA_AI_HELLO)
            rec_fail(nic, r, "no answer to our authentication hello within "
                     "5000 ms (its engine is not progressing, or has no "
                     "efa endpoint there)");
        else if (r->ini == EFA_AI_PROOF)
            rec_fail(nic, r, "no acknowledgement of our proof within 5000 "
                     "ms");
        else if (r->challenged)
            rec_fail(nic, r, "no proof within 5000 ms");
        else if (r->failed && !r->refs)
            rec_free(nic, r);
        else if (r->forgetting)
            forget_unanswered(nic, r, now);
        else if (r->forgot && !r->refs) {
            a->idle_forgotten++;
            efa_log(nic->ctx, 2, "%s: forgot the authentication of pid %u%s: "
                    "idle, and it agreed to prove itself again (%llu idle "
                    "remotes forgotten so far)", nic->name, r->pid,
                    elsewhere(nic, r), (unsigned long long)a->idle_forgotten);
            rec_free(nic, r);
        }
    }
}
