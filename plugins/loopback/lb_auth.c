/*
 * Peer authentication of the loopback transport: the challenge-response
 * of lb_auth.h, for in-process and cross-process channels.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lb_auth.h"

#define LB_AUTH_MAGIC 0x6c626175u /* "lbau" */
#define LB_ROLE_INITIATOR 1u
#define LB_ROLE_TARGET 2u

enum { LB_AUTH_CHALLENGE = 1, LB_AUTH_PROOF = 2, LB_AUTH_REFUSE = 3 };

/* One authentication message on the channel socket. */
struct lb_auth_wire {
    uint32_t magic;
    uint32_t type;
    uint8_t nonce[LB_AUTH_NONCE_LEN];   /* CHALLENGE: N_t */
    uint8_t mac[TE_PLUGIN_AUTH_MAC_LEN]; /* CHALLENGE, PROOF */
};

/* What a MAC covers: a label that keeps these MACs from meaning anything
 * to another protocol under the same secret, the role (a target's MAC is
 * no initiator's), both fresh nonces (no replay) and both addresses (a
 * MAC made for one pair of NICs does not open a channel between others). */
struct lb_auth_bind {
    char label[16];
    uint32_t role;
    uint32_t zero;
    uint8_t n_i[LB_AUTH_NONCE_LEN];
    uint8_t n_t[LB_AUTH_NONCE_LEN];
    struct lb_addr ia, ta;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const struct te_plugin_host *host_of(lb_nic *nic)
{
    const struct te_plugin_host *h = &nic->ctx->host;
    /* A core older than ABI 1.4 has no secret to offer. */
    if (h->struct_size < offsetof(struct te_plugin_host, auth_verify) +
                             sizeof(h->auth_verify) ||
        !h->auth_required)
        return NULL;
    return h;
}

bool lb_auth_on(lb_nic *nic)
{
    const struct te_plugin_host *h = host_of(nic);
    return h && h->auth_required(h->host_ctx) == 1;
}

void lb_addr_fill(struct lb_addr *a, uint32_t pid, uint32_t nic_index,
                  uint64_t nic_id)
{
    memset(a, 0, sizeof(*a));
    a->magic = LB_ADDR_MAGIC;
    a->version = LB_ADDR_VERSION;
    a->size = sizeof(*a);
    a->pid = pid;
    a->nic_index = nic_index;
    a->nic_id = nic_id;
    snprintf(a->sock_name, sizeof(a->sock_name), "te-lb-%u-%016llx", pid,
             (unsigned long long)nic_id);
}

static void bind_fill(struct lb_auth_bind *b, uint32_t role,
                      const uint8_t *n_i, const uint8_t *n_t,
                      const struct lb_addr *ia, const struct lb_addr *ta)
{
    memset(b, 0, sizeof(*b));
    memcpy(b->label, "te-lb-auth-v1", 14);
    b->role = role;
    memcpy(b->n_i, n_i, LB_AUTH_NONCE_LEN);
    memcpy(b->n_t, n_t, LB_AUTH_NONCE_LEN);
    b->ia = *ia;
    b->ta = *ta;
}

static int mac_of(lb_nic *nic, uint32_t role, const uint8_t *n_i,
                  const uint8_t *n_t, const struct lb_addr *ia,
                  const struct lb_addr *ta, uint8_t *mac)
{
    const struct te_plugin_host *h = host_of(nic);
    struct lb_auth_bind b;
    bind_fill(&b, role, n_i, n_t, ia, ta);
    return h ? h->auth_mac(h->host_ctx, &b, sizeof b, mac) : -ENOKEY;
}

static int verify_of(lb_nic *nic, uint32_t role, const uint8_t *n_i,
                     const uint8_t *n_t, const struct lb_addr *ia,
                     const struct lb_addr *ta, const uint8_t *mac)
{
    const struct te_plugin_host *h = host_of(nic);
    struct lb_auth_bind b;
    bind_fill(&b, role, n_i, n_t, ia, ta);
    return h ? h->auth_verify(h->host_ctx, &b, sizeof b, mac) : -ENOKEY;
}

static int nonce(uint8_t *n)
{
    return getrandom(n, LB_AUTH_NONCE_LEN, 0) == LB_AUTH_NONCE_LEN ? 0 : -EIO;
}

/* ------------------------------------------------------------ in-process */

/* Both sides of an in-process refusal: t logs what it saw of nic, nic's
 * last error says what it saw of t. */
static int refuse_local(lb_nic *nic, lb_nic *t, const struct lb_addr *ta,
                        const char *t_saw, const char *nic_saw)
{
    lb_log(t->ctx, 1, "%s: peer lo%u of this process %s", t->name,
           nic->index, t_saw);
    lb_err(nic, "peer lo%u of this process %s", ta->nic_index, nic_saw);
    return -EACCES;
}

int lb_auth_local(lb_nic *nic, lb_nic *t, const struct lb_addr *ta)
{
    bool mine = lb_auth_on(nic), theirs = lb_auth_on(t);
    if (!mine && !theirs)
        return 0;
    if (!mine)
        return refuse_local(nic, t, ta,
                            "failed authentication: it has no key "
                            "(engine.auth_key unset in its engine)",
                            "refused the connection: it requires "
                            "authentication and this engine has no key "
                            "(engine.auth_key)");
    if (!theirs)
        return refuse_local(nic, t, ta,
                            "asks for authentication and this engine has "
                            "no key (engine.auth_key): refused",
                            "failed authentication: it has no key "
                            "(engine.auth_key unset in its engine)");
    uint8_t n_i[LB_AUTH_NONCE_LEN], n_t[LB_AUTH_NONCE_LEN];
    uint8_t mac_t[TE_PLUGIN_AUTH_MAC_LEN], mac_i[TE_PLUGIN_AUTH_MAC_LEN];
    if (nonce(n_i) || nonce(n_t) ||
        mac_of(t, LB_ROLE_TARGET, n_i, n_t, &nic->addr, &t->addr, mac_t)) {
        lb_err(nic, "authentication with peer lo%u: no randomness or MAC",
               ta->nic_index);
        return -EIO;
    }
    if (verify_of(nic, LB_ROLE_TARGET, n_i, n_t, &nic->addr, ta, mac_t))
        return refuse_local(nic, t, ta,
                            "failed authentication: it refused our proof "
                            "(a different engine.auth_key)",
                            "failed authentication: its proof does not "
                            "verify under our key (a different "
                            "engine.auth_key)");
    if (mac_of(nic, LB_ROLE_INITIATOR, n_i, n_t, &nic->addr, ta, mac_i) ||
        verify_of(t, LB_ROLE_INITIATOR, n_i, n_t, &nic->addr, &t->addr,
                  mac_i))
        return refuse_local(nic, t, ta,
                            "failed authentication: its proof does not "
                            "verify under our key",
                            "refused our authentication proof");
    return 0;
}

/* ------------------------------------------------------ initiator, remote */

int lb_auth_hello_fill(lb_nic *nic, struct lb_hello *h)
{
    h->auth = lb_auth_on(nic);
    if (h->auth && nonce(h->nonce)) {
        lb_err(nic, "getrandom failed: no nonce for authentication");
        return -EIO;
    }
    return 0;
}

/* The next authentication message on fd, within the deadline; while
 * waiting, answer hellos to our own NIC (its worker is this thread). */
static int wait_msg(lb_nic *nic, int fd, uint64_t deadline,
                    struct lb_auth_wire *w)
{
    for (;;) {
        ssize_t r = recv(fd, w, sizeof(*w), MSG_DONTWAIT);
        if (r == (ssize_t)sizeof(*w) && w->magic == LB_AUTH_MAGIC)
            return 0;
        if (r == 0)
            return -ECONNRESET;
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
            errno != EINTR)
            return -errno;
        if (r > 0)
            return -EPROTO;
        if (now_ns() > deadline)
            return -ETIMEDOUT;
        lb_hellos_service(nic);
        struct pollfd pf = {fd, POLLIN, 0};
        poll(&pf, 1, 1);
    }
}

int lb_auth_initiate(lb_nic *nic, int fd, const struct lb_hello *h,
                     const struct lb_addr *ta, struct lb_shm *shm)
{
    if (!h->auth)
        return 0; /* a target that wants a key refuses us through shm */
    struct lb_auth_wire w;
    int rc = wait_msg(nic, fd, now_ns() + LB_AUTH_TIMEOUT_NS, &w);
    const char *who = "peer";
    if (rc == -ETIMEDOUT) {
        lb_err(nic, "%s lo%u of pid %u did not answer the authentication "
               "challenge within %llu ms (is its engine progressing?)", who,
               ta->nic_index, ta->pid, LB_AUTH_TIMEOUT_NS / 1000000);
        return rc;
    }
    if (rc == -ECONNRESET) {
        lb_err(nic, "%s lo%u of pid %u closed the connection during "
               "authentication", who, ta->nic_index, ta->pid);
        return rc;
    }
    if (rc) {
        lb_err(nic, "%s lo%u of pid %u: authentication: %s", who,
               ta->nic_index, ta->pid,
               rc == -EPROTO ? "malformed message" : strerror(-rc));
        return rc;
    }
    if (w.type == LB_AUTH_REFUSE) {
        lb_err(nic, "%s lo%u of pid %u failed authentication: it has no key "
               "(engine.auth_key unset there) and refused us", who,
               ta->nic_index, ta->pid);
        return -EACCES;
    }
    if (w.type != LB_AUTH_CHALLENGE ||
        verify_of(nic, LB_ROLE_TARGET, h->nonce, w.nonce, &nic->addr, ta,
                  w.mac)) {
        atomic_store(&shm->init_state, LB_ST_REFUSED);
        lb_err(nic, "%s lo%u of pid %u failed authentication: its proof "
               "does not verify under our key (a different engine.auth_key)",
               who, ta->nic_index, ta->pid);
        return -EACCES;
    }
    struct lb_auth_wire p = {.magic = LB_AUTH_MAGIC, .type = LB_AUTH_PROOF};
    if (mac_of(nic, LB_ROLE_INITIATOR, h->nonce, w.nonce, &nic->addr, ta,
               p.mac) ||
        send(fd, &p, sizeof p, MSG_DONTWAIT | MSG_NOSIGNAL) != sizeof p) {
        lb_err(nic, "%s lo%u of pid %u: cannot send our authentication "
               "proof: %s", who, ta->nic_index, ta->pid, strerror(errno));
        return -ECONNRESET;
    }
    return 0;
}

/* --------------------------------------------------------- target, remote */

static void refuse_msg(int fd)
{
    struct lb_auth_wire w = {.magic = LB_AUTH_MAGIC, .type = LB_AUTH_REFUSE};
    ssize_t r = send(fd, &w, sizeof w, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)r; /* best effort: the initiator also sees the hang-up */
}

int lb_auth_hello(lb_nic *nic, int fd, const struct lb_hello *h, void *map,
                  uint32_t cap, uint32_t cred_pid)
{
    bool mine = lb_auth_on(nic);
    if (!mine && !h->auth)
        return 0;
    if (!mine) {
        lb_log(nic->ctx, 1, "%s: peer lo%u of pid %u asks for authentication "
               "and this engine has no key (engine.auth_key): refused",
               nic->name, h->nic_index, cred_pid);
        refuse_msg(fd);
        return -EACCES;
    }
    if (!h->auth) {
        atomic_store(&((struct lb_shm *)map)->tgt_state, LB_ST_REFUSED);
        lb_log(nic->ctx, 1, "%s: peer lo%u of pid %u failed authentication: "
               "it has no key (engine.auth_key unset there): refused",
               nic->name, h->nic_index, cred_pid);
        return -EACCES;
    }
    if (nic->nauth_pend == nic->auth_pend_cap) {
        uint32_t c = nic->auth_pend_cap ? nic->auth_pend_cap * 2 : 8;
        struct lb_auth_pend *np = realloc(nic->auth_pend, c * sizeof(*np));
        if (!np)
            return -ENOMEM;
        nic->auth_pend = np;
        nic->auth_pend_cap = c;
    }
    struct lb_auth_pend *q = &nic->auth_pend[nic->nauth_pend];
    *q = (struct lb_auth_pend){.fd = fd, .map = map, .cap = cap,
                               .cred_pid = cred_pid, .h = *h,
                               .deadline_ns = now_ns() + LB_AUTH_TIMEOUT_NS};
    struct lb_addr ia;
    lb_addr_fill(&ia, h->pid, h->nic_index, h->nic_id);
    struct lb_auth_wire w = {.magic = LB_AUTH_MAGIC,
                             .type = LB_AUTH_CHALLENGE};
    if (nonce(q->n_t) ||
        mac_of(nic, LB_ROLE_TARGET, h->nonce, q->n_t, &ia, &nic->addr,
               w.mac))
        return -EIO;
    memcpy(w.nonce, q->n_t, sizeof w.nonce);
    if (send(fd, &w, sizeof w, MSG_DONTWAIT | MSG_NOSIGNAL) != sizeof w)
        return -errno;
    nic->nauth_pend++;
    return 1;
}

static struct lb_auth_pend *pend_find(lb_nic *nic, int fd)
{
    for (uint32_t i = 0; i < nic->nauth_pend; i++)
        if (nic->auth_pend[i].fd == fd)
            return &nic->auth_pend[i];
    return NULL;
}

/* Forget q; with refuse, also unmap its memory and close its fd. */
static void pend_drop(lb_nic *nic, struct lb_auth_pend *q, bool refuse)
{
    if (refuse) {
        atomic_store(&((struct lb_shm *)q->map)->tgt_state, LB_ST_REFUSED);
        munmap(q->map, q->h.shm_size);
        lb_fd_close(nic, q->fd);
    }
    *q = nic->auth_pend[--nic->nauth_pend];
}

int lb_auth_proof(lb_nic *nic, int fd)
{
    struct lb_auth_pend *q = pend_find(nic, fd);
    if (!q)
        return -1;
    struct lb_auth_wire w;
    ssize_t r = recv(fd, &w, sizeof w, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    uint32_t lo = q->h.nic_index, pid = q->cred_pid;
    const char *why = NULL;
    struct lb_addr ia;
    lb_addr_fill(&ia, q->h.pid, q->h.nic_index, q->h.nic_id);
    if (r <= 0)
        why = atomic_load(&((struct lb_shm *)q->map)->init_state) ==
                      LB_ST_REFUSED
                  ? "it refused our proof (a different engine.auth_key)"
                  : "it closed the connection before proving its key";
    else if (r != (ssize_t)sizeof w || w.magic != LB_AUTH_MAGIC ||
             w.type != LB_AUTH_PROOF)
        why = "malformed authentication message";
    else if (verify_of(nic, LB_ROLE_INITIATOR, q->h.nonce, q->n_t, &ia,
                       &nic->addr, w.mac))
        why = "its proof does not verify under our key (a different "
              "engine.auth_key)";
    if (why) {
        lb_log(nic->ctx, 1, "%s: peer lo%u of pid %u failed authentication: "
               "%s", nic->name, lo, pid, why);
        pend_drop(nic, q, true);
        return 1;
    }
    struct lb_auth_pend ok = *q;
    pend_drop(nic, q, false);
    if (lb_inbound_adopt(nic, ok.fd, &ok.h, ok.map, ok.cap, ok.cred_pid) < 0) {
        munmap(ok.map, ok.h.shm_size);
        lb_fd_close(nic, ok.fd);
    }
    return 1;
}

int lb_auth_expire(lb_nic *nic, int fd)
{
    struct lb_auth_pend *q = pend_find(nic, fd);
    if (!q || now_ns() <= q->deadline_ns)
        return 0;
    lb_log(nic->ctx, 1, "%s: peer lo%u of pid %u failed authentication: no "
           "proof within %llu ms", nic->name, q->h.nic_index, q->cred_pid,
           LB_AUTH_TIMEOUT_NS / 1000000);
    pend_drop(nic, q, true);
    return 1;
}

/* The fds are closed with the other hello fds (lb_inbound_free_all). */
void lb_auth_free_all(lb_nic *nic)
{
    for (uint32_t i = 0; i < nic->nauth_pend; i++)
        munmap(nic->auth_pend[i].map, nic->auth_pend[i].h.shm_size);
    nic->nauth_pend = 0;
    free(nic->auth_pend);
    nic->auth_pend = NULL;
    nic->auth_pend_cap = 0;
}
