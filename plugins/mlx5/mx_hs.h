/*
 * Connection handshake of the mlx5 plugin: a pure state machine (no verbs,
 * no clock, no I/O), so loss, duplication, simultaneous open, QP errors and
 * deadlines are unit-tested without a NIC (tests/unit/test_mlx5_handshake.c).
 *
 * Model. Two NICs share ONE reliable-connected QP pair, whichever side (or
 * both at once) started. Each side owns one QP per remote NIC; a datagram
 * says "my QP is (qpn, psn, epoch); the QP of yours I am connected to is
 * (echo_qpn, echo_epoch)". A side connects its QP (RTR/RTS) to the remote
 * QP named in the newest datagram it accepts, and may post work once the
 * remote echoes its own current QP: then both QPs are known to be RTR.
 * Because a side has exactly one QP per remote NIC, a simultaneous open
 * needs no tie-break: both sides connect their one QP to the other's.
 *
 * Epochs are drawn from a NIC-wide counter that only grows, so "newer QP of
 * that remote NIC" is a plain comparison, even across conn objects the
 * remote created and destroyed. A side that replaces its QP (after a QP
 * error, or because the remote replaced its own) thereafter accepts only a
 * strictly newer remote QP (r_floor), which forces the other side to
 * replace its QP too: a QP in the error state is never reused. Two rules
 * keep a pair from crossing or sticking when errors, loss and reordering
 * meet (tests/unit/test_mlx5_handshake.c, error_storm): a side that is not
 * connected does not adopt a newer remote QP that is connected to an
 * older QP of its own (the remote replaces that QP as soon as it sees the
 * current one; adopting it made both sides replace their QPs in turn until
 * the deadline); and a side that receives, below its floor, a remote QP
 * connected to its current QP replaces its QP again (else each side waited
 * for the other until the deadline).
 *
 * Authentication (engine.auth_key, docs/security.md), when params->auth
 * is set. Every QP a side creates comes with a fresh nonce; a datagram
 * carries the sender's nonce and, once it knows the receiver's current
 * nonce, its proof: the job secret's HMAC over mx_auth_bind() (type, the
 * sender's place in the pair, the QP it announces and the one it echoes,
 * both nonces, both NIC identities). The rules:
 *  - a side acts on a HELLO (connects its QP, i.e. moves it to RTR; replaces
 *    it; becomes established) and on a BYE only when its proof verifies
 *    over the side's CURRENT nonce: so no replay of an old proof, no proof
 *    moved to another QP, and no forged reset or bye;
 *  - a HELLO it cannot check yet (the sender did not know its nonce) is
 *    answered, when it asks for an answer, with the side's nonce and its
 *    proof over the sender's: a HELLO announcing its QP, or a CHALLENGE
 *    when its QP is connected to an older QP of the sender (announcing it
 *    would pair the sender with a QP about to be replaced);
 *  - until the peer has proven the secret once, a peer that sends no
 *    nonce, a proof over our current nonce that does not verify, or a
 *    nonce while we have no secret is refused: the side fails
 *    (MX_HS_DOWN, h->fail says why) and sends a REFUSE with the reason, to
 *    which the peer fails too. A REFUSE (not MACed: the refuser may have no
 *    secret) counts only while connecting, before the peer proved the
 *    secret, and only if it names our current QP.
 * Without params->auth, datagrams are version 1 and every rule above is
 * off: the protocol is exactly the one without a secret.
 *
 * Timing. A side that is not established retransmits with exponential
 * back-off (retry_ns doubling up to retry_max_ns) until its deadline
 * (timeout_ns after the attempt began); then it fails (MX_HS_DOWN). Only
 * datagrams with MX_HS_F_ACKREQ are answered, and a side sets that flag only
 * while it is not established, so the exchange ends by itself.
 */
#ifndef MX_HS_H
#define MX_HS_H

#include <stdbool.h>
#include <stdint.h>

#include "mx_wire.h"

enum mx_hs_state {
    MX_HS_CONNECTING = 1, /* handshake in progress; posts must wait */
    MX_HS_ESTABLISHED = 2, /* both QPs RTR/RTS towards each other */
    MX_HS_FAILED = 3,     /* deadline passed or the remote said bye */
};

/* Actions the caller performs, in this order, after an event. */
#define MX_HS_RENEW 0x1u   /* replace our QP, call mx_hs_renewed(), then feed
                              the same datagram again (nothing else is set) */
#define MX_HS_CONNECT 0x2u /* move our QP to RTR/RTS towards r_qpn/r_psn */
#define MX_HS_SEND 0x4u    /* send the datagram in *out */
#define MX_HS_UP 0x8u      /* became ESTABLISHED */
#define MX_HS_DOWN 0x10u   /* became FAILED */

/* The job secret, through the host (auth_mac / auth_verify of plugin ABI
 * 1.4): mac writes MX_PROOF_LEN bytes; both return 0 on success. */
struct mx_hs_auth {
    int (*mac)(void *ctx, const void *msg, size_t len, uint8_t *mac);
    int (*verify)(void *ctx, const void *msg, size_t len, const uint8_t *mac);
    void *ctx;
};

struct mx_hs_params {
    uint64_t timeout_ns;   /* deadline of one connection attempt */
    uint64_t retry_ns;     /* first retransmission interval */
    uint64_t retry_max_ns; /* back-off cap */
    const struct mx_hs_auth *auth; /* NULL: no job secret */
};

/* Why authentication failed (h->fail; 0 = it did not). The first three
 * are refusals of ours (a REFUSE goes to the peer), the others the peer's. */
enum mx_hs_fail {
    MX_HSF_NONE = 0,
    MX_HSF_PEER_NO_KEY = 1,   /* its datagrams carry no nonce */
    MX_HSF_SELF_NO_KEY = 2,   /* it requires authentication; we have no key */
    MX_HSF_BAD_PROOF = 3,     /* its proof does not verify under our key */
    MX_HSF_REFUSED_NO_KEY = 4,   /* it refused us: it has no key */
    MX_HSF_REFUSED_NEED_KEY = 5, /* it refused us: we have no key */
    MX_HSF_REFUSED_BAD_PROOF = 6, /* it refused our proof */
};

struct mx_hs {
    enum mx_hs_state state;
    uint32_t l_qpn, l_psn, l_epoch; /* our current QP */
    bool l_connected;               /* our QP is RTR/RTS towards r_qpn */
    uint32_t r_qpn, r_psn, r_epoch; /* remote QP we use; r_epoch 0 = none */
    uint32_t r_floor;               /* accept only remote epochs >= this */
    uint64_t deadline;              /* attempt fails at this time */
    uint64_t next_tx;               /* next retransmission */
    uint64_t backoff;               /* current retransmission interval */
    uint32_t sent;                  /* datagrams sent in this attempt */
    /* authentication (auth set; see above) */
    const struct mx_hs_auth *auth;  /* params->auth at init */
    uint8_t fail;                   /* enum mx_hs_fail, when FAILED by it */
    bool r_auth;                    /* the peer proved the secret (sticky) */
    bool r_nonce_set;
    uint8_t l_nonce[MX_NONCE_LEN];  /* of our current QP */
    uint8_t r_nonce[MX_NONCE_LEN];  /* the peer's, which our proofs answer */
    uint8_t l_ident[MX_IDENT_LEN];  /* mx_ident() of our NIC ... */
    uint8_t r_ident[MX_IDENT_LEN];  /* ... and of the peer's: set by the
                                       caller after mx_hs_init() */
    /* A proven HELLO that made us replace our QP: fed again right after
     * the renewal, it is accepted once although it answers the old nonce. */
    bool pv_set;
    uint32_t pv_qpn, pv_psn, pv_epoch;
    uint8_t pv_nonce[MX_NONCE_LEN];
};

/*
 * Start a connection with a fresh QP. initiator: send at once (peer_add);
 * else (created by an incoming datagram) the first answer comes from
 * mx_hs_on_msg() and retransmissions start after retry_ns. nonce: the QP's
 * fresh nonce (MX_NONCE_LEN bytes) when p->auth is set, else ignored (may
 * be NULL). With p->auth the caller then fills h->l_ident and h->r_ident.
 */
void mx_hs_init(struct mx_hs *h, uint32_t qpn, uint32_t psn, uint32_t epoch,
                const uint8_t *nonce, bool initiator, uint64_t now,
                const struct mx_hs_params *p);

/* A datagram from the remote whose SipHash MAC verified and that is
 * addressed to us. MX_HS_DOWN with h->fail set: authentication failed
 * (with MX_HS_SEND: send the REFUSE in *out first). */
unsigned mx_hs_on_msg(struct mx_hs *h, const struct mx_hs_wire *m,
                      uint64_t now, const struct mx_hs_params *p,
                      struct mx_hs_wire *out);

/* Time passed: retransmit or fail. Call at or after mx_hs_next_event(). */
unsigned mx_hs_on_timer(struct mx_hs *h, uint64_t now,
                        const struct mx_hs_params *p, struct mx_hs_wire *out);

/* Our QP went to the error state: returns MX_HS_RENEW (0 if FAILED). */
unsigned mx_hs_on_error(struct mx_hs *h);

/* Restart a FAILED connection (the peer was added again): MX_HS_RENEW. */
unsigned mx_hs_restart(struct mx_hs *h);

/* Our QP was replaced by (qpn, psn, epoch) with a fresh nonce (as for
 * mx_hs_init): a new attempt begins. Its deadline is fresh unless the old
 * attempt was still connecting. */
void mx_hs_renewed(struct mx_hs *h, uint32_t qpn, uint32_t psn, uint32_t epoch,
                   const uint8_t *nonce, uint64_t now,
                   const struct mx_hs_params *p);

/* Fill a datagram describing our side (type HELLO or BYE); with a secret,
 * with our nonce and our proof over the peer's nonce, when we know it. */
void mx_hs_fill(const struct mx_hs *h, uint8_t type, struct mx_hs_wire *out);

/* The reason of h->fail, completing "peer NIC X ...": "failed
 * authentication: ..." or "refused the connection: ...". */
const char *mx_hs_fail_str(uint8_t fail);

/* When mx_hs_on_timer() has something to do; UINT64_MAX if never. */
uint64_t mx_hs_next_event(const struct mx_hs *h);

#endif
