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
 * replace its QP too: a QP in the error state is never reused.
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

struct mx_hs_params {
    uint64_t timeout_ns;   /* deadline of one connection attempt */
    uint64_t retry_ns;     /* first retransmission interval */
    uint64_t retry_max_ns; /* back-off cap */
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
};

/*
 * Start a connection with a fresh QP. initiator: send at once (peer_add);
 * else (created by an incoming datagram) the first answer comes from
 * mx_hs_on_msg() and retransmissions start after retry_ns.
 */
void mx_hs_init(struct mx_hs *h, uint32_t qpn, uint32_t psn, uint32_t epoch,
                bool initiator, uint64_t now, const struct mx_hs_params *p);

/* An accepted (authenticated, addressed to us) datagram from the remote. */
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

/* Our QP was replaced by (qpn, psn, epoch): a new attempt begins. Its
 * deadline is fresh unless the old attempt was still connecting. */
void mx_hs_renewed(struct mx_hs *h, uint32_t qpn, uint32_t psn, uint32_t epoch,
                   uint64_t now, const struct mx_hs_params *p);

/* Fill a datagram describing our side (type HELLO or BYE). */
void mx_hs_fill(const struct mx_hs *h, uint8_t type, struct mx_hs_wire *out);

/* When mx_hs_on_timer() has something to do; UINT64_MAX if never. */
uint64_t mx_hs_next_event(const struct mx_hs *h);

#endif
