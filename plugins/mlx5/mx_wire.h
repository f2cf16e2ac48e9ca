/*
 * mlx5 plugin wire formats: the NIC address published by nic_address() and
 * the connection handshake datagram, both in explicit little-endian byte
 * order, plus the SipHash-2-4 MAC that authenticates handshake datagrams.
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
#define MX_HS_VERSION 1u
#define MX_HS_LEN 88u     /* datagram bytes, MAC included */
#define MX_HS_MAC_OFF 80u /* the MAC covers bytes [0, MX_HS_MAC_OFF) */

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
#define MX_HS_F_ACKREQ 0x1u /* sender is not established: please answer */

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
    uint32_t echo_qpn;  /* receiver's QP the sender is connected to, or 0 */
    uint32_t echo_epoch;
};

/* SipHash-2-4 of msg[0..len) under a 16-byte key. */
uint64_t mx_siphash24(const uint8_t key[16], const void *msg, size_t len);

/* Address: encode into exactly MX_ADDR_LEN bytes. */
void mx_addr_encode(const struct mx_addr *a, uint8_t out[MX_ADDR_LEN]);
/* Decode untrusted bytes; 0, or -EINVAL with a reason in why. */
int mx_addr_decode(const void *buf, size_t len, struct mx_addr *a,
                   const char **why);

/* Datagram: encode and MAC with key into exactly MX_HS_LEN bytes. */
void mx_hs_encode(const struct mx_hs_wire *m, const uint8_t key[16],
                  uint8_t out[MX_HS_LEN]);
/* Decode untrusted bytes without checking the MAC; 0 or -EINVAL (why). */
int mx_hs_decode(const void *buf, size_t len, struct mx_hs_wire *m,
                 const char **why);
/* 1 if the datagram's MAC verifies under key. buf holds MX_HS_LEN bytes. */
int mx_hs_verify(const void *buf, const uint8_t key[16]);

#endif
