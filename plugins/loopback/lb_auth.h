/*
 * Peer authentication of the loopback transport (docs/security.md): when
 * the engine has a job secret (host auth_required), a channel is executed
 * only after a challenge-response proves that both ends hold it.
 *
 * Across processes, on the channel's unix socket:
 *   initiator -> target  hello {auth = 1, nonce N_i} + channel memfd
 *   target -> initiator  CHALLENGE {N_t, MAC_t}      (or REFUSE)
 *   initiator -> target  PROOF {MAC_i}
 * MAC_x = HMAC(secret, label | role x | N_i | N_t | initiator address |
 * target address). The initiator checks MAC_t inside peer_add (bounded
 * wait, answering hellos to its own NIC meanwhile, so two NICs that add
 * each other at once do not wait on each other); the target keeps the
 * channel out of its executed set until MAC_i verifies, so nothing of an
 * unauthenticated initiator is ever executed. A side that refuses stores
 * LB_ST_REFUSED in the channel memory before closing, so the other side
 * reports the reason, not a bare hang-up. In-process the same messages
 * are computed by direct calls with each engine's own secret.
 */
#ifndef LB_AUTH_H
#define LB_AUTH_H

#include "lb_internal.h"

#define LB_AUTH_NONCE_LEN 16
/* How long a side waits for the other's next authentication message. */
#define LB_AUTH_TIMEOUT_NS 5000000000ull

/* A hello answered with a challenge, waiting for the initiator's proof. */
struct lb_auth_pend {
    int fd;
    void *map;          /* the channel memory, mapped */
    uint32_t cap;
    uint32_t cred_pid;  /* the pid the kernel vouches for */
    struct lb_hello h;
    uint8_t n_t[LB_AUTH_NONCE_LEN];
    uint64_t deadline_ns;
};

/* Whether this NIC's engine has a job secret. */
bool lb_auth_on(lb_nic *nic);

/* The address a NIC of (pid, index, id) publishes (lb_listen's). */
void lb_addr_fill(struct lb_addr *a, uint32_t pid, uint32_t nic_index,
                  uint64_t nic_id);

/* In-process: the whole exchange between nic and target t (registry lock
 * held). 0, or -EACCES with the cause set on nic and logged on t. */
int lb_auth_local(lb_nic *nic, lb_nic *t, const struct lb_addr *ta);

/* Initiator, across processes: fill the hello's auth fields. */
int lb_auth_hello_fill(lb_nic *nic, struct lb_hello *h);

/* Initiator, after the hello went out on fd: wait for the challenge, check
 * it, send the proof. 0, or -EACCES / -ETIMEDOUT / -ECONNRESET with the
 * cause set (shm->init_state = LB_ST_REFUSED when we refuse the target). */
int lb_auth_initiate(lb_nic *nic, int fd, const struct lb_hello *h,
                     const struct lb_addr *ta, struct lb_shm *shm);

/* Target, on a valid hello: 0 = no authentication involved, adopt now;
 * 1 = challenge sent, pending (the fd stays in hello_fds); <0 = refused
 * (logged; the caller unmaps and closes). */
int lb_auth_hello(lb_nic *nic, int fd, const struct lb_hello *h, void *map,
                  uint32_t cap, uint32_t cred_pid);

/* Target: fd has a pending challenge? Then read its proof: 1 when fd was
 * consumed (adopted or refused), 0 to wait, -1 when fd is not pending. */
int lb_auth_proof(lb_nic *nic, int fd);

/* Target: drop fd's pending challenge if its deadline passed (1 = fd was
 * consumed). */
int lb_auth_expire(lb_nic *nic, int fd);

/* Drop every pending challenge (NIC close). */
void lb_auth_free_all(lb_nic *nic);

/* Accept connections to nic and read the hellos that arrived (the part of
 * housekeeping an initiator runs while it waits for a challenge). */
void lb_hellos_service(lb_nic *nic);

/* The target refused us (LB_ST_REFUSED): fail p's ops with -EACCES and
 * report PEER_DOWN, naming why. */
void lb_peer_refused(lb_nic *nic, struct lb_peer *p, const char *why);

/* Adopt a channel whose hello (and proof) passed (lb_inbound.c). */
int lb_inbound_adopt(lb_nic *nic, int fd, const struct lb_hello *h,
                     void *map, uint32_t cap, uint32_t cred_pid);

#endif
