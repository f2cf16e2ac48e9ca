/*
 * Job authentication of the efa transport (docs/security.md, docs/efa.md
 * "Authentication"): when the engine has a secret, every remote NIC
 * address is authenticated by the challenge-response of efa_auth_wire.h
 * before operations go to it or anything from it reaches the core.
 *
 * FI_EP_RDM is connectionless, so the state is kept per remote address in
 * a record (one address vector entry per address, shared by the core's
 * peers of that address and by a remote that only writes to us):
 *   rx_ok  its MAC verified: its immediates and SENDs are delivered
 *          (before, they are dropped and counted);
 *   tx_ok  it verified ours and said so: operations may be posted to it
 *          (before, post() holds them; on failure they fail with -EACCES).
 * A record no core peer refers to is freed when its process exits (same
 * host) or, after engine efa.auth_forget_idle_ms without an event from it,
 * by the FORGET / FORGOT exchange (efa_auth_wire.h): the remote proves
 * itself again before its next operation, so nothing it sends later is
 * dropped for want of a record.
 * Inbound data is attributed with FI_SOURCE, so authentication requires
 * it. The provider executes a remote write with a valid key whoever sends
 * it; what keeps strangers out of memory is that keys are random under a
 * secret (efa_mr.c), not this gate.
 */
#ifndef EFA_AUTH_H
#define EFA_AUTH_H

#include <stdbool.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include "efa_auth_wire.h"
#include "efa_msgpool.h"

struct efa_bell_remote;

struct efa_local;

#define EFA_AUTH_TIMEOUT_NS 5000000000ull /* every wait of a handshake */
#define EFA_AUTH_NRECV 16     /* tagged receives posted for messages */
#define EFA_AUTH_NSEND 64     /* messages in flight at once */
#define EFA_AUTH_MAX_STRANGERS 256 /* unauthenticated records at once */
#define EFA_AUTH_FORGET_TRIES 2 /* unanswered FORGETs before freeing anyway */

enum efa_auth_ini { EFA_AI_NONE = 0, EFA_AI_HELLO, EFA_AI_PROOF };

struct efa_auth_rec {
    uint8_t used;
    uint8_t ini;         /* enum efa_auth_ini: our handshake as initiator */
    uint8_t challenged;  /* we answered its HELLO, wait for its PROOF */
    uint8_t rx_ok, tx_ok;
    uint8_t failed;      /* refused; freed at deadline_ns if refs == 0 */
    uint8_t due;         /* message type waiting for a send buffer, or 0 */
    uint8_t due_reason;
    uint8_t alive_seen;  /* its process was visible here, start time and
                          * all: its exit can be told (efa_auth.c) */
    uint8_t seen;        /* an event of it accepted since the last scan */
    uint8_t forgetting;  /* FORGET sent, its FORGOT awaited (deadline_ns) */
    uint8_t forgot;      /* its FORGOT came: freed at deadline_ns */
    uint8_t owe_forgot;  /* it asked us to FORGET: FORGOT once our
                          * operations to it are done; no HELLO before */
    uint8_t unanswered;  /* FORGETs in a row without an answer */
    uint64_t idle_since_ns; /* last scan that saw it active */
    uint32_t refs;       /* the core's peers on this address */
    fi_addr_t fi_addr;
    uint64_t deadline_ns;
    uint64_t peer_key_secret; /* its rkey-check secret (PROOF/ACK) */
    uint8_t n_i[EFA_AUTH_NONCE_LEN], n_t[EFA_AUTH_NONCE_LEN];
    struct efa_local *local;  /* an endpoint of this process, or NULL */
    struct efa_bell_remote *bell; /* its doorbell, opened at the first ring
                                   * (efa_auth_bell) */
    uint8_t bell_tried;
    uint32_t addr_len;
    uint32_t pid;
    uint8_t addr[TE_PLUGIN_MAX_ADDR_LEN]; /* its NIC address */
};

struct efa_auth {
    bool on;
    struct efa_auth_rec *recs;
    uint32_t nrecs, cap;
    uint32_t *map;            /* fi_addr -> record index + 1 */
    size_t map_cap;
    struct efa_msgpool msgs;  /* tag EFA_AUTH_TAG: NRECV + NSEND */
    uint32_t busy;            /* handshakes in progress */
    uint32_t due;             /* records with a message waiting */
    uint64_t dropped;         /* events of unauthenticated senders */
    uint64_t next_exit_scan_ns; /* next look for exited and idle remotes */
    uint64_t forgotten;       /* records of exited remotes freed */
    uint64_t forget_idle_ns;  /* efa.auth_forget_idle_ms; 0 = never */
    uint64_t idle_forgotten;  /* records of idle remotes freed */
    uint32_t owed;            /* records with owe_forgot set */
};

#endif
