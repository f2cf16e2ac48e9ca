/*
 * The handshake state machine (see mx_hs.h for the model). Pure: every
 * input is an argument, every effect an action bit for the caller.
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
                bool initiator, uint64_t now, const struct mx_hs_params *p)
{
    memset(h, 0, sizeof(*h)); /* deadline 0: a fresh one below */
    h->l_qpn = qpn;
    h->l_psn = psn;
    h->l_epoch = epoch;
    mx_hs_attempt(h, now, p);
    h->next_tx = initiator ? now : now + h->backoff;
}

void mx_hs_fill(const struct mx_hs *h, uint8_t type, struct mx_hs_wire *out)
{
    memset(out, 0, sizeof(*out));
    out->type = type;
    out->flags = h->state == MX_HS_ESTABLISHED ? 0 : MX_HS_F_ACKREQ;
    if (type == MX_HS_T_BYE)
        out->flags = 0;
    out->qpn = h->l_qpn;
    out->psn = h->l_psn;
    out->epoch = h->l_epoch;
    if (h->l_connected) {
        out->echo_qpn = h->r_qpn;
        out->echo_epoch = h->r_epoch;
    }
}

unsigned mx_hs_on_msg(struct mx_hs *h, const struct mx_hs_wire *m,
                      uint64_t now, const struct mx_hs_params *p,
                      struct mx_hs_wire *out)
{
    (void)now;
    (void)p;
    if (h->state == MX_HS_FAILED)
        return 0;
    if (m->type == MX_HS_T_BYE) {
        /* A bye about a QP older than the one we use is a late duplicate. */
        if (h->r_epoch && m->epoch < h->r_epoch)
            return 0;
        h->state = MX_HS_FAILED;
        return MX_HS_DOWN;
    }
    if (m->type != MX_HS_T_HELLO || m->epoch < h->r_floor)
        return 0; /* stale: a QP we must not (re)use */
    if (h->r_epoch && m->epoch < h->r_epoch)
        return 0; /* late duplicate of an older remote QP */
    if (h->r_epoch && m->epoch == h->r_epoch && m->qpn != h->r_qpn)
        return 0; /* one epoch, two QPs: not from a correct peer */

    unsigned act = 0;
    if (!h->r_epoch || m->epoch > h->r_epoch) {
        if (h->l_connected) {
            /* Our QP talks to an older remote QP: replace ours too. */
            h->r_floor = m->epoch;
            return MX_HS_RENEW;
        }
        h->r_qpn = m->qpn;
        h->r_psn = m->psn;
        h->r_epoch = m->epoch;
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
        mx_hs_fill(h, MX_HS_T_HELLO, out);
        act |= MX_HS_SEND;
    }
    return act;
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
    return MX_HS_RENEW;
}

unsigned mx_hs_restart(struct mx_hs *h)
{
    if (h->r_epoch)
        h->r_floor = h->r_epoch + 1;
    return MX_HS_RENEW;
}

void mx_hs_renewed(struct mx_hs *h, uint32_t qpn, uint32_t psn, uint32_t epoch,
                   uint64_t now, const struct mx_hs_params *p)
{
    h->l_qpn = qpn;
    h->l_psn = psn;
    h->l_epoch = epoch;
    h->l_connected = false;
    mx_hs_attempt(h, now, p);
    h->next_tx = now; /* tell the remote at once */
}

uint64_t mx_hs_next_event(const struct mx_hs *h)
{
    if (h->state != MX_HS_CONNECTING)
        return UINT64_MAX;
    return h->next_tx < h->deadline ? h->next_tx : h->deadline;
}
