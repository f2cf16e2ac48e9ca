/*
 * mlx5 plugin wire formats: the NIC address published by nic_address() and
 * the connection handshake datagram, both in explicit little-endian byte
 * order, plus the SipHash-2-4 MAC that authenticates handshake datagrams
 * and the message the job secret's HMAC covers (mx_auth_bind).
 *
 * Pure code (no verbs, no clock, no allocation): the handshake unit test
 * compiles it directly (tests/unit/test_mlx5_handshake.c).
 */
#ifndef MX_WIRE_H
#define MX_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define MX_ADDR_MAGIC 0x584d4554u /* "TEMX" */
#define MX_ADDR_VERSION 1u
#define MX_ADDR_LEN 64u

#define MX_HS_MAGIC 0x53484554u /* "TEHS" */
/* Version 1: the datagram of an engine without a job secret, unchanged
 * since the first release. Version 2: the same fields, then the job
 * authentication's nonces and proof (engine.auth_key, docs/security.md);
 * also the REFUSE and CHALLENGE types. A version-1 receiver drops version 2
 * as foreign, so it never misreads one. */
#define MX_HS_VERSION 1u
#define MX_HS_VERSION_AUTH 2u
#define MX_HS_LEN 88u     /* version 1 bytes, MAC included */
#define MX_HS_MAC_OFF 80u /* the MAC covers bytes [0, MX_HS_MAC_OFF) */
#define MX_HS_LEN_AUTH 152u     /* version 2 bytes, MAC included */
#define MX_HS_MAC_OFF_AUTH 144u /* its SipHash MAC covers [0, 144) */
#define MX_HS_MAX MX_HS_LEN_AUTH

#define MX_NONCE_LEN 16u /* fresh per local QP, from getrandom */
#define MX_PROOF_LEN 32u /* HMAC-SHA256: TE_PLUGIN_AUTH_MAC_LEN */

#define MX_SECRET_LEN 16u

/* Link layers, as in the address (not verbs' constants: the wire is ours). */
#define MX_LL_IB 1u
#define MX_LL_ETH 2u

/* Everything a peer needs to reach one opened NIC. */
struct mx_addr {
    uint64_t nic_id;     /* random per nic_open(); never 0 */
    uint8_t gid[16];     /* GID of the chosen port and index */
    uint16_t lid;        /* IB only; 0 on RoCE */
    uint8_t port;        /* port number (informative) */
    uint8_t link_layer;  /* MX_LL_* */
    uint32_t ud_qpn;     /* handshake UD QP */
    uint32_t msg_size;   /* largest SEND this NIC accepts */
    uint8_t mtu;         /* active MTU as enum ibv_mtu (1..5) */
    uint8_t gid_index;   /* informative */
    uint8_t secret[MX_SECRET_LEN]; /* authenticates handshakes to this NIC */
};

/* Datagram types and flags. */
#define MX_HS_T_HELLO 1u /* "this is my QP; connect to it" */
#define MX_HS_T_BYE 2u   /* "my NIC is closing; forget me" (best effort) */
#define MX_HS_T_REFUSE 3u /* version 2: "I refuse you" (reason); never MACed
                             with the job secret: the refuser may have none */
#define MX_HS_T_CHALLENGE 4u /* version 2: "my nonce, and my proof over
                                yours: prove your QP over mine" */
#define MX_HS_F_ACKREQ 0x1u /* sender is not established: please answer */
#define MX_HS_F_AUTH 0x2u   /* version 2: the sender has a job secret and
                               requires authentication; nonce is valid */
#define MX_HS_F_PROOF 0x4u  /* version 2: proof is the sender's HMAC over
                               mx_auth_bind(), answering echo_nonce */

/* Why a REFUSE was sent (its reason byte). */
#define MX_REFUSE_NO_KEY 1u    /* the refuser has no secret; you asked for
                                  authentication */
#define MX_REFUSE_NEED_KEY 2u  /* the refuser requires authentication; your
                                  datagram had none (you have no secret) */
#define MX_REFUSE_BAD_PROOF 3u /* your proof does not verify under the
                                  refuser's secret */

/* Which secret keys the MAC: the receiver's (the sender holds its address)
 * or the sender's (the receiver holds the sender's address). */
#define MX_KEY_RECEIVER 0u
#define MX_KEY_SENDER 1u

/* One handshake datagram, decoded. */
struct mx_hs_wire {
    uint8_t type;
    uint8_t flags;
    uint8_t keysel;     /* MX_KEY_* */
    uint64_t src_id;    /* sender NIC id */
    uint64_t dst_id;    /* receiver NIC id */
    uint8_t src_gid[16];
    uint16_t src_lid;
    uint8_t src_mtu;
    uint8_t src_link_layer;
    uint32_t src_ud_qpn;
    uint32_t src_msg_size;
    uint32_t qpn;       /* sender's RC QP towards the receiver */
    uint32_t psn;       /* its initial send PSN */
    uint32_t epoch;     /* its incarnation (NIC-wide monotonic) */
    uint32_t echo_qpn;  /* receiver's QP the sender is connected to, or 0;
                           REFUSE: the refused QP */
    uint32_t echo_epoch;
    uint8_t reason;     /* REFUSE: MX_REFUSE_* */
    /* version 2 (flags & MX_HS_F_AUTH) */
    uint8_t nonce[MX_NONCE_LEN];      /* sender's, for its current QP */
    uint8_t echo_nonce[MX_NONCE_LEN]; /* receiver's nonce the proof answers */
    uint8_t proof[MX_PROOF_LEN];      /* flags & MX_HS_F_PROOF */
};

/* What identifies a NIC in the job MAC: id, GID, LID, handshake QP, link
 * layer, as in its address and in its datagrams' src_* fields. */
#define MX_IDENT_LEN 32u
void mx_ident(const struct mx_addr *a, uint8_t out[MX_IDENT_LEN]);
/* The same from a datagram's sender fields. */
void mx_ident_src(const struct mx_hs_wire *m, uint8_t out[MX_IDENT_LEN]);

/*
 * The message a job-secret proof (HMAC-SHA256, host auth_mac) covers:
 *   label "te-mlx5-auth-v1" | type | role | the maker's announced QP
 *   (qpn, psn, epoch) and the receiver's QP it echoes | both nonces and
 *   both NIC identities, in a fixed order (the lower NIC id first).
 * role says which of the two made it: MX_ROLE_LOW (the NIC with the lower
 * id), MX_ROLE_HIGH, or MX_ROLE_SELF (a NIC connected to itself). mlx5 has
 * no initiator and target (both sides may open at once and are then
 * alike), so the role is the maker's place in the pair: a proof is never
 * valid as the other side's, nor as another type's (HELLO, BYE,
 * CHALLENGE), nor for another QP, nonce or pair of NICs.
 */
#define MX_AUTH_LABEL "te-mlx5-auth-v1"
#define MX_ROLE_LOW 1u
#define MX_ROLE_HIGH 2u
#define MX_ROLE_SELF 3u
#define MX_BIND_LEN 136u
void mx_auth_bind(const struct mx_hs_wire *m, const uint8_t *maker_nonce,
                  const uint8_t *other_nonce, const uint8_t *maker_ident,
                  const uint8_t *other_ident, uint8_t out[MX_BIND_LEN]);

/* SipHash-2-4 of msg[0..len) under a 16-byte key. */
uint64_t mx_siphash24(const uint8_t key[16], const void *msg, size_t len);

/* Address: encode into exactly MX_ADDR_LEN bytes. */
void mx_addr_encode(const struct mx_addr *a, uint8_t out[MX_ADDR_LEN]);
/* Decode untrusted bytes; 0, or -EINVAL with a reason in why. */
int mx_addr_decode(const void *buf, size_t len, struct mx_addr *a,
                   const char **why);

/* Datagram: encode and MAC with key into out (MX_HS_MAX bytes of room);
 * returns its length: MX_HS_LEN (version 1: HELLO or BYE without
 * MX_HS_F_AUTH, as without a job secret) or MX_HS_LEN_AUTH (version 2). */
size_t mx_hs_encode(const struct mx_hs_wire *m, const uint8_t key[16],
                    uint8_t out[MX_HS_MAX]);
/* Decode untrusted bytes without checking the MAC; 0 or -EINVAL (why). */
int mx_hs_decode(const void *buf, size_t len, struct mx_hs_wire *m,
                 const char **why);
/* 1 if the datagram's MAC verifies under key. buf holds a datagram that
 * mx_hs_decode() accepted. */
int mx_hs_verify(const void *buf, const uint8_t key[16]);

#endif
