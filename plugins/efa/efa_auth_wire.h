/*
 * The efa plugin's authentication messages (docs/security.md, docs/efa.md
 * "Authentication"): their layout, their validation and what their MACs
 * cover. Pure functions of bytes, no libfabric: tests/unit/test_efa_auth_wire.c
 * tests them directly.
 *
 * The exchange, over tagged messages (tag EFA_AUTH_TAG; the application's
 * SENDs are untagged, so the two never meet in a receive queue):
 *   initiator -> target  HELLO     N_i, the initiator's NIC address
 *   target -> initiator  CHALLENGE N_t, MAC_t
 *   initiator -> target  PROOF     MAC_i, the initiator's key-check secret
 *   target -> initiator  ACK       the target's key-check secret
 * or REFUSE (with a reason) in place of any answer. The ACK exists because
 * an RDM endpoint does not order a message before later writes (EFA's SRD
 * orders nothing): the initiator's first write must not overtake its proof.
 *
 * Forgetting an authenticated remote that has been idle (efa_auth.c), with
 * the nonces of the handshake that authenticated it:
 *   forgetter -> remote  FORGET    MAC_f: "forget me, and prove yourself
 *                                  again before your next operation"
 *   remote -> forgetter  FORGOT    MAC_g, once none of its operations to
 *                                  the forgetter is in flight
 * The MACs bind the sender's and the receiver's addresses in that order.
 */
#ifndef EFA_AUTH_WIRE_H
#define EFA_AUTH_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "te/plugin.h"

#define EFA_AUTH_TAG 0x5445464155544831ull /* "TEFAUTH1" */
#define EFA_AUTH_MAGIC 0x75616674u         /* "tfau" */
#define EFA_AUTH_VERSION 1u
#define EFA_AUTH_NONCE_LEN 16
#define EFA_AUTH_ROLE_INITIATOR 1u
#define EFA_AUTH_ROLE_TARGET 2u
#define EFA_AUTH_ROLE_FORGET 3u /* MAC of a FORGET */
#define EFA_AUTH_ROLE_FORGOT 4u /* MAC of a FORGOT */
#define EFA_AUTH_ROLE_BYE 5u    /* MAC of a goodbye (efa_bye_wire.h) */

enum efa_auth_type {
    EFA_AUTH_HELLO = 1,
    EFA_AUTH_CHALLENGE = 2,
    EFA_AUTH_PROOF = 3,
    EFA_AUTH_ACK = 4,
    EFA_AUTH_REFUSE = 5,
    EFA_AUTH_FORGET = 6,
    EFA_AUTH_FORGOT = 7,
};

/* Why a REFUSE was sent (its receiver words the reason from it). */
enum efa_auth_reason {
    EFA_AUTH_R_NONE = 0,
    EFA_AUTH_R_BAD_MAC = 1, /* the receiver's MAC did not verify */
    EFA_AUTH_R_BUSY = 2,    /* too many handshakes in progress */
};

/* One message; every field is sent, host byte order like the address. */
struct efa_auth_msg {
    uint32_t magic;
    uint8_t version;
    uint8_t type;     /* enum efa_auth_type */
    uint8_t reason;   /* REFUSE: enum efa_auth_reason */
    uint8_t reserved;
    uint32_t addr_len; /* HELLO: bytes of addr */
    uint32_t reserved2;
    uint64_t key_secret; /* PROOF, ACK: the sender's rkey-check secret */
    uint8_t n_i[EFA_AUTH_NONCE_LEN];
    uint8_t n_t[EFA_AUTH_NONCE_LEN];
    uint8_t mac[TE_PLUGIN_AUTH_MAC_LEN];
    uint8_t addr[TE_PLUGIN_MAX_ADDR_LEN]; /* HELLO: the initiator's address */
};

/* Bytes a MAC covers at most (efa_auth_bind). */
#define EFA_AUTH_BIND_MAX (16 + 8 + 2 * EFA_AUTH_NONCE_LEN + \
                           2 * (4 + TE_PLUGIN_MAX_ADDR_LEN))

/* Check a received message of len bytes and copy it to *out: 0, or
 * -EPROTO (wrong size, magic, version, type or address length). */
int efa_auth_msg_parse(const void *buf, size_t len, struct efa_auth_msg *out);

/* The MAC input of role (EFA_AUTH_ROLE_*) over both nonces and both NIC
 * addresses (initiator's ia, target's ta; for FORGET and FORGOT the
 * sender's and the receiver's) into buf (EFA_AUTH_BIND_MAX
 * bytes): a label of this protocol, so the MAC means nothing to another one
 * under the same secret; the role, so a target's MAC is no initiator's;
 * the fresh nonces (no replay); the addresses (no relaying a proof made
 * for one pair of NICs to another). Returns the length, 0 if an address
 * is too long. */
size_t efa_auth_bind(uint8_t *buf, uint32_t role, const uint8_t *n_i,
                     const uint8_t *n_t, const void *ia, size_t ia_len,
                     const void *ta, size_t ta_len);

/* Two NICs that send each other a HELLO at once: the one whose address
 * sorts lower answers as target, the other stays initiator (both decide
 * the same from the same two addresses). True when `mine` stays initiator.
 * Equal addresses (a NIC that is its own peer) never get here. */
bool efa_auth_keeps_initiator(const void *mine, size_t mine_len,
                              const void *theirs, size_t theirs_len);

/* The reason a REFUSE carries, in words for the refused side. */
const char *efa_auth_reason_text(uint8_t reason);

#endif
