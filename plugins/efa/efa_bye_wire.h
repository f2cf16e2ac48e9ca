/*
 * The efa plugin's goodbye (docs/efa.md "Orderly close"): the message an
 * endpoint sends each of its live peers as it closes, so that they report
 * it down as an orderly close (TE_PCQ_PEER_DOWN with -ESHUTDOWN) at once
 * instead of when a write to it fails or the core's peer timeout expires.
 * Pure functions of bytes, no libfabric: tests/unit/test_efa_bye.c tests
 * them directly, tests/fuzz/fuzz_efa_bye_parse.c fuzzes the parser.
 *
 * A tagged message (tag EFA_BYE_TAG, apart from the authentication's and
 * from the application's untagged SENDs), sent once, not answered. It
 * carries the sender's endpoint name (what its receiver compares with its
 * peers' addresses when the provider does not name a message's sender).
 * With a job secret it also carries a MAC over the nonces of the handshake
 * that authenticated the pair and both NIC addresses (efa_auth_bind, role
 * EFA_AUTH_ROLE_BYE): a goodbye cannot be forged without the secret, nor
 * replayed from an earlier handshake.
 */
#ifndef EFA_BYE_WIRE_H
#define EFA_BYE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "te/plugin.h"

#define EFA_BYE_TAG 0x5445464142594531ull /* "TEFABYE1" */
#define EFA_BYE_MAGIC 0x79626674u         /* "tfby" */
#define EFA_BYE_VERSION 1u
#define EFA_BYE_RAW_MAX 56 /* endpoint name bytes (EFA_RAW_MAX) */

/* One message; every field is sent, host byte order like the address. */
struct efa_bye_msg {
    uint32_t magic;
    uint8_t version;
    uint8_t keyed;    /* 1: mac is set (the sender has a job secret) */
    uint8_t raw_len;  /* bytes of raw, 1..EFA_BYE_RAW_MAX */
    uint8_t reserved; /* 0 */
    uint8_t mac[TE_PLUGIN_AUTH_MAC_LEN];
    uint8_t raw[EFA_BYE_RAW_MAX]; /* the sender's endpoint name */
};

/* Fill *m for a sender whose endpoint name is raw (raw_len bytes); the
 * caller sets the MAC of a keyed one. 0, or -EINVAL for a name that does
 * not fit. */
int efa_bye_msg_build(struct efa_bye_msg *m, const void *raw, size_t raw_len,
                      int keyed);

/* Check a received message of len bytes and copy it to *out: 0, or
 * -EPROTO (wrong size, magic, version, keyed flag or name length, a
 * reserved byte or a name byte past the name's length set, or a MAC in an
 * unkeyed message): a message parses only in the one encoding
 * efa_bye_msg_build gives it. */
int efa_bye_msg_parse(const void *buf, size_t len, struct efa_bye_msg *out);

#endif
