/*
 * The handshake state machine (see mx_hs.h for the model). Pure: every
 * input is an argument, every effect an action bit for the caller (the job
 * secret's MAC comes through the callbacks in params->auth).
 */
#include "mx_hs.h"

#include <string.h>

/* A new attempt. Its deadline bounds the time without a connection, so a
 * QP replaced while still connecting keeps the deadline it had. */
static void mx_hs_attempt(struct mx_hs *h, uint64_t now,
                          const struct mx_hs_params *p)
{
    if (h->state != MX_HS_CONNECTING || !h->deadline)
        h->deadline = now + p->timeout_ns;
    h->state = MX_HS_CONNECTING;
    h->backoff = p->retry_ns ? p->retry_ns : 1;
    h->sent = 0;
}

void mx_hs_init(struct mx_hs *h, uint32_t qpn, uint32_t psn, uint32_t epoch,
                const uint8_t *nonce, bool initiator, uint64_t now,
                const struct mx_hs_params *p)
{
    memset(h, 0, sizeof(*h)); /* deadline 0: a fresh one below */
    h->l_qpn = qpn;
    h->l_psn = psn;
    h->l_epoch = epoch;
    h->auth = p->auth;
    if (h->auth && nonce)
        memcpy(h->l_nonce, nonce, MX_NONCE_LEN);
    mx_hs_attempt(h, now, p);
    h->next_tx = initiator ? now : now + h->backoff;
}

/* Our datagram of this type; with a secret, our nonce and, with echo (the
 * peer's nonce it answers), our proof. */
static void mx_hs_make(const struct mx_hs *h, uint8_t type,
                       const uint8_t *echo, struct mx_hs_wire *out)
{
    memset(out, 0, sizeof(*out));
    out->type = type;
    out->flags = h->state == MX_HS_ESTABLISHED ? 0 : MX_HS_F_ACKREQ;
    if (type == MX_HS_T_BYE)
        out->flags = 0;
    out->qpn = h->l_qpn;
    out->psn = h->l_psn;
    out->epoch = h->l_epoch;
    if (h->l_connected && type != MX_HS_T_CHALLENGE) {
        out->echo_qpn = h->r_qpn;
        out->echo_epoch = h->r_epoch;
    }
    if (!h->auth)
        return;
    out->flags |= MX_HS_F_AUTH;
    memcpy(out->nonce, h->l_nonce, MX_NONCE_LEN);
    if (!echo)
        return;
    memcpy(out->echo_nonce, echo, MX_NONCE_LEN);
    uint8_t b[MX_BIND_LEN];
    mx_auth_bind(out, h->l_nonce, echo, h->l_ident, h->r_ident, b);
    if (h->auth->mac(h->auth->ctx, b, sizeof b, out->proof) == 0)
        out->flags |= MX_HS_F_PROOF;
}

void mx_hs_fill(const struct mx_hs *h, uint8_t type, struct mx_hs_wire *out)
{
    mx_hs_make(h, type, h->r_nonce_set ? h->r_nonce : NULL, out);
}

const char *mx_hs_fail_str(uint8_t fail)
{
    switch (fail) {
    case MX_HSF_PEER_NO_KEY:
        return "failed authentication: it has no key (engine.auth_key unset "
               "in its engine)";
    case MX_HSF_SELF_NO_KEY:
        return "failed authentication: it requires authentication and this "
               "engine has no key (engine.auth_key)";
    case MX_HSF_BAD_PROOF:
        return "failed authentication: its proof does not verify under our "
               "key (a different engine.auth_key)";
    case MX_HSF_REFUSED_NO_KEY:
        return "failed authentication: it has no key (engine.auth_key unset "
               "in its engine) and refused us";
    case MX_HSF_REFUSED_NEED_KEY:
        return "refused the connection: it requires authentication and this "
               "engine has no key (engine.auth_key)";
    case MX_HSF_REFUSED_BAD_PROOF:
        return "refused the connection: our proof does not verify under its "
               "key (a different engine.auth_key)";
    default:
        return "failed authentication";
    }
}

/* ------------------------------------------------------------ refusals */

/* A refusal of ours is still owed to a peer that keeps asking. */
static bool mx_hs_refuser(uint8_t fail)
{
    return fail >= MX_HSF_PEER_NO_KEY && fail <= MX_HSF_BAD_PROOF;
}

static void mx_hs_refusal(const struct mx_hs *h, const struct mx_hs_wire *m,
                          struct mx_hs_wire *out)
{
    memset(out, 0, sizeof(*out));
    out->type = MX_HS_T_REFUSE;
    out->qpn = h->l_qpn;
    out->psn = h->l_psn;
    out->epoch = h->l_epoch;
    out->echo_qpn = m->qpn; /* the QP we refuse */
    out->echo_epoch = m->epoch;
    out->reason = h->fail == MX_HSF_SELF_NO_KEY   ? MX_REFUSE_NO_KEY
                  : h->fail == MX_HSF_PEER_NO_KEY ? MX_REFUSE_NEED_KEY
                                                  : MX_REFUSE_BAD_PROOF;
}

/* Refuse the peer that sent m: fail, and tell it why. */
static unsigned mx_hs_refuse(struct mx_hs *h, const struct mx_hs_wire *m,
                             uint8_t why, struct mx_hs_wire *out)
{
    h->state = MX_HS_FAILED;
    h->fail = why;
    mx_hs_refusal(h, m, out);
    return MX_HS_SEND | MX_HS_DOWN;
}

/* May the peer still be refused (or refuse us)? Only while connecting and
 * before it proved the secret: afterwards a refusal is a forgery. */
static bool mx_hs_refusable(const struct mx_hs *h)
{
    return h->state == MX_HS_CONNECTING && !h->r_auth;
}

static unsigned mx_hs_on_refuse(struct mx_hs *h, const struct mx_hs_wire *m)
{
    if (!mx_hs_refusable(h) || m->echo_qpn != h->l_qpn ||
        m->echo_epoch != h->l_epoch)
        return 0; /* stale, or too late to be true */
    uint8_t why;
    if (m->reason == MX_REFUSE_NEED_KEY && !h->auth)
        why = MX_HSF_REFUSED_NEED_KEY;
    else if (m->reason == MX_REFUSE_NO_KEY && h->auth)
        why = MX_HSF_REFUSED_NO_KEY;
    else if (m->reason == MX_REFUSE_BAD_PROOF && h->auth)
        why = MX_HSF_REFUSED_BAD_PROOF;
    else
        return 0; /* does not fit what we sent: not from a correct peer */
    h->state = MX_HS_FAILED;
    h->fail = why;
    return MX_HS_DOWN;
}

/* ----------------------------------------------------------- the protocol */

/* A HELLO or BYE we may act on: authenticated, addressed to us, and (with a
 * secret) proven over our current nonce. */
static unsigned mx_hs_accept(struct mx_hs *h, const struct mx_hs_wire *m,
                             struct mx_hs_wire *out)
{
    if (m->type == MX_HS_T_BYE) {
        /* A bye about a QP older than the one we use is a late duplicate. */
        if (h->r_epoch && m->epoch < h->r_epoch)
            return 0;
        h->state = MX_HS_FAILED;
        return MX_HS_DOWN;
    }
    if (m->type != MX_HS_T_HELLO)
        return 0;
    if (m->epoch < h->r_floor) {
        /* Stale: a QP we must not (re)use. But if it is connected to our
         * current QP, its side will not replace it by itself (it sees no
         * newer QP of ours while connected): replace ours again, which
         * makes it replace its own. Without this both sides would wait
         * for the other until the deadline. */
        if (h->state == MX_HS_CONNECTING && !h->l_connected &&
            m->echo_qpn == h->l_qpn && m->echo_epoch == h->l_epoch)
            return MX_HS_RENEW;
        return 0;
    }
    if (h->r_epoch && m->epoch < h->r_epoch)
        return 0; /* late duplicate of an older remote QP */
    if (h->r_epoch && m->epoch == h->r_epoch &&
        (m->qpn != h->r_qpn ||
         (h->auth && memcmp(m->nonce, h->r_nonce, MX_NONCE_LEN))))
        return 0; /* one epoch, two QPs: not from a correct peer */

    unsigned act = 0;
    if ((!h->r_epoch || m->epoch > h->r_epoch) && !h->l_connected &&
        m->echo_epoch && m->echo_epoch < h->l_epoch) {
        /* A newer QP of the peer, connected to an older QP of ours (a late
         * datagram, or the one we just replaced ours for): the peer
         * replaces it as soon as it sees our current QP. Adopting it would
         * cross the pair (each side connected to the other's previous QP)
         * and make both replace their QPs in turn until the deadline.
         * Tell the peer our QP instead (we are not connected: no echo). */
        mx_hs_make(h, MX_HS_T_HELLO, h->auth ? m->nonce : NULL, out);
        return MX_HS_SEND;
    }
    if (!h->r_epoch || m->epoch > h->r_epoch) {
        if (h->l_connected) {
            /* Our QP talks to an older remote QP: replace ours too. */
            h->r_floor = m->epoch;
            if (h->auth) { /* the renewal changes our nonce: vouch for m */
                h->pv_set = true;
                h->pv_qpn = m->qpn;
                h->pv_psn = m->psn;
                h->pv_epoch = m->epoch;
                memcpy(h->pv_nonce, m->nonce, MX_NONCE_LEN);
            }
            return MX_HS_RENEW;
        }
        h->r_qpn = m->qpn;
        h->r_psn = m->psn;
        h->r_epoch = m->epoch;
        if (h->auth) {
            memcpy(h->r_nonce, m->nonce, MX_NONCE_LEN);
            h->r_nonce_set = true;
        }
    }
    if (!h->l_connected) {
        h->l_connected = true;
        act |= MX_HS_CONNECT;
    }
    if (h->state == MX_HS_CONNECTING && m->echo_qpn == h->l_qpn &&
        m->echo_epoch == h->l_epoch) {
        h->state = MX_HS_ESTABLISHED;
        act |= MX_HS_UP;
    }
    if (m->flags & MX_HS_F_ACKREQ) {
        mx_hs_make(h, MX_HS_T_HELLO, h->auth ? m->nonce : NULL, out);
        act |= MX_HS_SEND;
    }
    return act;
}

/* m's proof: 1 it verifies over our current nonce (or m is the HELLO we
 * renewed for), 0 it has none or answers another nonce of ours (an older
 * one: stale), -1 it answers our current nonce and does not verify. */
static int mx_hs_proven(struct mx_hs *h, const struct mx_hs_wire *m)
{
    if (h->pv_set && m->type == MX_HS_T_HELLO && m->qpn == h->pv_qpn &&
        m->psn == h->pv_psn && m->epoch == h->pv_epoch &&
        memcmp(m->nonce, h->pv_nonce, MX_NONCE_LEN) == 0) {
        h->pv_set = false; /* once */
        return 1;
    }
    if (!(m->flags & MX_HS_F_PROOF) ||
        memcmp(m->echo_nonce, h->l_nonce, MX_NONCE_LEN))
        return 0;
    uint8_t b[MX_BIND_LEN];
    mx_auth_bind(m, m->nonce, h->l_nonce, h->r_ident, h->l_ident, b);
    return h->auth->verify(h->auth->ctx, b, sizeof b, m->proof) == 0 ? 1 : -1;
}

/* With a secret: every datagram but a REFUSE. */
static unsigned mx_hs_on_auth(struct mx_hs *h, const struct mx_hs_wire *m,
                              struct mx_hs_wire *out)
{
    if (!(m->flags & MX_HS_F_AUTH)) {
        /* A peer without a key (or a stray version-1 datagram). */
        if (m->type != MX_HS_T_HELLO || !mx_hs_refusable(h))
            return 0;
        return mx_hs_refuse(h, m, MX_HSF_PEER_NO_KEY, out);
    }
    int pr = mx_hs_proven(h, m);
    if (pr < 0) {
        if (m->type == MX_HS_T_BYE || !mx_hs_refusable(h))
            return 0; /* a forgery: drop it */
        return mx_hs_refuse(h, m, MX_HSF_BAD_PROOF, out);
    }
    if (pr > 0)
        h->r_auth = true;
    if (m->type == MX_HS_T_CHALLENGE) {
        if (!pr)
            return 0; /* answers an older nonce of ours: our timer resends */
        if (h->r_epoch && (m->epoch < h->r_epoch ||
                           (m->epoch == h->r_epoch &&
                            memcmp(m->nonce, h->r_nonce, MX_NONCE_LEN))))
            return 0; /* from an older QP of the peer: a late duplicate */
        /* It proved the secret and told us its nonce: prove our QP. */
        memcpy(h->r_nonce, m->nonce, MX_NONCE_LEN);
        h->r_nonce_set = true;
        mx_hs_make(h, MX_HS_T_HELLO, m->nonce, out);
        return MX_HS_SEND;
    }
    if (pr)
        return mx_hs_accept(h, m, out);
    if (m->type != MX_HS_T_HELLO)
        return 0; /* an unproven bye changes nothing */
    /* A HELLO we cannot check: the sender does not know our nonce yet. */
    if (m->epoch < h->r_floor || (h->r_epoch && m->epoch < h->r_epoch))
        return 0; /* stale anyway */
    if (!h->r_auth) { /* until the peer proves itself, follow its newest */
        memcpy(h->r_nonce, m->nonce, MX_NONCE_LEN);
        h->r_nonce_set = true;
    }
    if (!(m->flags & MX_HS_F_ACKREQ))
        return 0;
    /* Answer with our nonce and our proof over its nonce: our QP, unless
     * ours is connected to an older QP of the sender (we shall replace it
     * once the sender proves its newer one): then only a challenge. */
    bool renew_due = h->l_connected && m->epoch != h->r_epoch;
    mx_hs_make(h, renew_due ? MX_HS_T_CHALLENGE : MX_HS_T_HELLO, m->nonce, out);
    return MX_HS_SEND;
}

unsigned mx_hs_on_msg(struct mx_hs *h, const struct mx_hs_wire *m,
                      uint64_t now, const struct mx_hs_params *p,
                      struct mx_hs_wire *out)
{
    (void)now;
    (void)p;
    if (h->state == MX_HS_FAILED) {
        /* Refused: repeat the refusal to a peer that still asks (the first
         * REFUSE may have been lost). */
        if (mx_hs_refuser(h->fail) && m->type == MX_HS_T_HELLO &&
            (m->flags & MX_HS_F_ACKREQ)) {
            mx_hs_refusal(h, m, out);
            return MX_HS_SEND;
        }
        return 0;
    }
    if (m->type == MX_HS_T_REFUSE)
        return mx_hs_on_refuse(h, m);
    if (h->auth)
        return mx_hs_on_auth(h, m, out);
    if (m->flags & MX_HS_F_AUTH) {
        /* The peer requires authentication; we have no key. */
        if (m->type != MX_HS_T_HELLO || h->state != MX_HS_CONNECTING)
            return 0;
        return mx_hs_refuse(h, m, MX_HSF_SELF_NO_KEY, out);
    }
    if (m->type == MX_HS_T_CHALLENGE)
        return 0;
    return mx_hs_accept(h, m, out);
}

unsigned mx_hs_on_timer(struct mx_hs *h, uint64_t now,
                        const struct mx_hs_params *p, struct mx_hs_wire *out)
{
    if (h->state != MX_HS_CONNECTING)
        return 0;
    if (now >= h->deadline) {
        h->state = MX_HS_FAILED;
        return MX_HS_DOWN;
    }
    if (now < h->next_tx)
        return 0;
    mx_hs_fill(h, MX_HS_T_HELLO, out);
    h->sent++;
    h->next_tx = now + h->backoff;
    if (h->next_tx > h->deadline)
        h->next_tx = h->deadline;
    h->backoff *= 2;
    if (h->backoff > p->retry_max_ns)
        h->backoff = p->retry_max_ns;
    return MX_HS_SEND;
}

unsigned mx_hs_on_error(struct mx_hs *h)
{
    if (h->state == MX_HS_FAILED)
        return 0;
    /* The remote QP may be in the error state as well: never again. */
    if (h->r_epoch)
        h->r_floor = h->r_epoch + 1;
    h->pv_set = false;
    return MX_HS_RENEW;
}

unsigned mx_hs_restart(struct mx_hs *h)
{
    if (h->r_epoch)
        h->r_floor = h->r_epoch + 1;
    h->pv_set = false;
    h->fail = MX_HSF_NONE;
    return MX_HS_RENEW;
}

void mx_hs_renewed(struct mx_hs *h, uint32_t qpn, uint32_t psn, uint32_t epoch,
                   const uint8_t *nonce, uint64_t now,
                   const struct mx_hs_params *p)
{
    h->l_qpn = qpn;
    h->l_psn = psn;
    h->l_epoch = epoch;
    h->l_connected = false;
    if (h->auth && nonce)
        memcpy(h->l_nonce, nonce, MX_NONCE_LEN);
    mx_hs_attempt(h, now, p);
    h->next_tx = now; /* tell the remote at once */
}

uint64_t mx_hs_next_event(const struct mx_hs *h)
{
    if (h->state != MX_HS_CONNECTING)
        return UINT64_MAX;
    return h->next_tx < h->deadline ? h->next_tx : h->deadline;
}
