/*
 * Channel setup, target side: the list of inbound channels a NIC executes,
 * fed by in-process initiators (in_new, signalled through in_gen so poll()
 * takes no lock unless something changed) and by hellos on the listening
 * socket; and the rate-limited housekeeping that accepts connections and
 * notices peers that went away.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lb_auth.h"

static int lb_inbound_new(lb_nic *nic, struct lb_shm *shm, uint32_t cap,
                          size_t map_len, int fd, uint32_t pid,
                          uint32_t nic_index, uint64_t nic_id, bool local)
{
    if (nic->nin == nic->in_cap) {
        uint32_t c = nic->in_cap ? nic->in_cap * 2 : 16;
        struct lb_inbound **ni = realloc(nic->in, c * sizeof(*ni));
        if (!ni)
            return -ENOMEM;
        nic->in = ni;
        nic->in_cap = c;
    }
    struct lb_inbound *in = calloc(1, sizeof(*in));
    if (!in)
        return -ENOMEM;
    in->shm = shm;
    in->map_len = map_len;
    in->fd = fd;
    in->pid = pid;
    in->nic_index = nic_index;
    in->nic_id = nic_id;
    in->local = local;
    in->peer_gen = nic->peers_gen - 1;
    in->bell = local ? shm->bell_init : fd;
    in->wait = local ? shm->bell_tgt : fd;
    if (lb_wait_add(nic, in->wait) < 0) {
        free(in);
        return -ENOMEM;
    }
    lb_shm_req_ring(shm, cap, &in->req, 0);
    lb_shm_resp_ring(shm, cap, &in->resp, 1);
    nic->in[nic->nin++] = in;
    return 0;
}

static void lb_inbound_release(lb_nic *nic, struct lb_inbound *in,
                               uint32_t state)
{
    if (state != LB_ST_OK)
        atomic_store(&in->shm->tgt_state, state);
    if (in->map_len) {
        munmap(in->shm, in->map_len);
    } else {
        /* The eventfd outlives our use while the initiator holds it. */
        lb_wait_del(nic, in->wait);
        lb_bell_ring(in->bell); /* its initiator sees tgt_state at once */
        lb_shm_local_unref(in->shm);
    }
    lb_fd_close(nic, in->fd);
    free(in);
}

void lb_inbound_drop(lb_nic *nic, struct lb_inbound *in)
{
    lb_pending_purge(nic, in);
    for (uint32_t i = 0; i < nic->nin; i++) {
        if (nic->in[i] == in) {
            nic->in[i] = nic->in[--nic->nin];
            break;
        }
    }
    lb_inbound_release(nic, in, LB_ST_CLOSED);
}

void lb_inbound_refresh(lb_nic *nic)
{
    uint32_t gen = atomic_load_explicit(&nic->in_gen, memory_order_acquire);
    bool dead = atomic_load(&nic->dead);
    pthread_mutex_lock(&nic->in_lock);
    for (uint32_t i = 0; i < nic->nin_new; i++) {
        struct lb_shm *shm = nic->in_new[i];
        /* In-process channel memory is our own heap: shm->cap is trusted. */
        if (dead || lb_inbound_new(nic, shm, shm->cap, 0, -1, shm->init_pid,
                                   shm->init_nic_index, shm->init_nic_id,
                                   true) < 0) {
            /* The initiator sees the channel as down and fails its ops. */
            atomic_store(&shm->tgt_state, dead ? LB_ST_DEAD : LB_ST_CLOSED);
            lb_bell_ring(shm->bell_init);
            lb_shm_local_unref(shm);
        }
    }
    nic->nin_new = 0;
    pthread_mutex_unlock(&nic->in_lock);
    nic->in_seen = gen;
}

void lb_inbound_free_all(lb_nic *nic, uint32_t state)
{
    pthread_mutex_lock(&nic->in_lock);
    for (uint32_t i = 0; i < nic->nin_new; i++) {
        atomic_store(&nic->in_new[i]->tgt_state, state);
        lb_bell_ring(nic->in_new[i]->bell_init); /* its initiator looks */
        lb_shm_local_unref(nic->in_new[i]);
    }
    nic->nin_new = 0;
    pthread_mutex_unlock(&nic->in_lock);
    for (uint32_t i = 0; i < nic->nin; i++) {
        lb_pending_purge(nic, nic->in[i]);
        lb_inbound_release(nic, nic->in[i], state);
    }
    nic->nin = 0;
    lb_auth_free_all(nic); /* before their fds close below */
    for (uint32_t i = 0; i < nic->nhello; i++)
        lb_fd_close(nic, nic->hello_fds[i]);
    nic->nhello = 0;
}

te_plugin_peer lb_inbound_peer(lb_nic *nic, struct lb_inbound *in)
{
    if (in->peer_gen != nic->peers_gen) {
        in->peer = 0;
        for (uint32_t i = 0; i < nic->npeers; i++) {
            struct lb_peer *p = nic->peers[i];
            if (p && p->nic_id == in->nic_id) {
                in->peer = p->handle;
                if (!p->dead)
                    break;
            }
        }
        in->peer_gen = nic->peers_gen;
    }
    return in->peer;
}

/* ------------------------------------------------------------------ hello */

/* Returns 1 when fd was consumed (adopted or closed), 0 to wait for more. */
int lb_inbound_adopt(lb_nic *nic, int fd, const struct lb_hello *h,
                     void *map, uint32_t cap, uint32_t cred_pid)
{
    return lb_inbound_new(nic, map, cap, h->shm_size, fd, cred_pid,
                          h->nic_index, h->nic_id, false);
}

static int lb_hello_recv(lb_nic *nic, int fd)
{
    int pr = lb_auth_proof(nic, fd); /* fd answered with a challenge */
    if (pr >= 0)
        return pr;
    struct lb_hello h = {0};
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct iovec iov = {&h, sizeof(h)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf)};
    ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;

    int mfd = -1;
    for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&msg) : NULL; c;
         c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int x;
            memcpy(&x, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (mfd < 0)
                mfd = x;
            else
                close(x);
        }
    }
    const char *why = NULL;
    struct stat st;
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    void *map = MAP_FAILED;
    uint32_t cap = 0;
    int auth = 0;
    /* A hello without the auth fields (an initiator built before them)
     * reads as one without a key. */
    if ((n != (ssize_t)sizeof(h) &&
         n != (ssize_t)offsetof(struct lb_hello, auth)) ||
        (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
        why = "malformed hello";
    else if (h.magic != LB_HELLO_MAGIC || h.version != LB_ADDR_VERSION)
        why = "hello of another protocol version";
    else if (h.target_nic_id != nic->id)
        why = "hello meant for another NIC";
    else if (mfd < 0 || fstat(mfd, &st) < 0 || (uint64_t)st.st_size != h.shm_size ||
             h.shm_size > lb_shm_size(LB_MAX_QUEUE_DEPTH) ||
             h.shm_size < sizeof(struct lb_shm))
        why = "hello without valid channel memory";
    else if ((fcntl(mfd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_SEAL)) !=
             (F_SEAL_SHRINK | F_SEAL_SEAL))
        why = "channel memory not sealed";
    else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0)
        why = "no peer credentials";
    else if ((map = mmap(NULL, h.shm_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                         mfd, 0)) == MAP_FAILED)
        why = "cannot map channel memory";
    else if (lb_shm_check(map, h.shm_size, &cap) < 0)
        why = "corrupt channel memory";
    /* Not executed before the initiator proves the job key (lb_auth.h). */
    else if ((auth = lb_auth_hello(nic, fd, &h, map, cap,
                                   (uint32_t)cred.pid)) < 0)
        why = auth == -EACCES ? "authentication refused" : "authentication "
                                                           "failed";
    /* process_vm_* go to the pid the kernel vouches for, not the claimed one. */
    else if (auth == 0 &&
             lb_inbound_adopt(nic, fd, &h, map, cap, (uint32_t)cred.pid) < 0)
        why = "out of memory";
    if (mfd >= 0)
        close(mfd);
    if (auth == 1)
        return 0; /* the proof comes on fd */
    if (why) {
        if ((n > 0 || n < 0) && auth != -EACCES) /* that one was logged */
            lb_log(nic->ctx, 1, "%s: rejected a connection: %s", nic->name, why);
        if (map != MAP_FAILED)
            munmap(map, h.shm_size);
        lb_fd_close(nic, fd); /* added when it waited for its hello */
    }
    return 1;
}

static void lb_hello_add(lb_nic *nic, int fd)
{
    if (lb_hello_recv(nic, fd))
        return;
    if (nic->nhello == nic->hello_cap) {
        uint32_t c = nic->hello_cap ? nic->hello_cap * 2 : 8;
        int *nf = realloc(nic->hello_fds, c * sizeof(*nf));
        if (!nf) {
            close(fd);
            return;
        }
        nic->hello_fds = nf;
        nic->hello_cap = c;
    }
    nic->hello_fds[nic->nhello++] = fd;
    lb_wait_add(nic, fd); /* its hello wakes the worker */
}

/* ------------------------------------------------------------ housekeeping */

static void lb_accept_all(lb_nic *nic)
{
    for (;;) {
        int fd = accept4(nic->listen_fd, NULL, NULL,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            break;
        lb_hello_add(nic, fd);
    }
}

void lb_housekeeping(lb_nic *nic)
{
    if (atomic_load(&nic->dead))
        return;
    uint32_t need = 1 + nic->nhello + nic->nin + 2 * nic->npeers;
    if (need > nic->pfds_cap) {
        void *np = realloc(nic->pfds, need * 2 * sizeof(struct pollfd));
        if (!np)
            return;
        nic->pfds = np;
        nic->pfds_cap = need * 2;
    }
    struct pollfd *pf = nic->pfds;
    uint32_t k = 0, nhello = nic->nhello, nin = nic->nin, npeers = nic->npeers;
    pf[k++] = (struct pollfd){nic->listen_fd, POLLIN, 0};
    for (uint32_t i = 0; i < nhello; i++)
        pf[k++] = (struct pollfd){nic->hello_fds[i], POLLIN, 0};
    for (uint32_t i = 0; i < nin; i++)
        pf[k++] = (struct pollfd){nic->in[i]->fd, POLLIN, 0};
    for (uint32_t i = 0; i < npeers; i++) {
        struct lb_peer *p = nic->peers[i];
        bool live = p && !p->dead;
        pf[k++] = (struct pollfd){live ? p->fd : -1, POLLIN, 0};
        pf[k++] = (struct pollfd){live ? p->pidfd : -1, POLLIN, 0};
    }
    if (poll(pf, k, 0) < 0)
        return;

    /* Peers first: the slots they free are not needed by the rest. */
    k = 1 + nhello + nin;
    for (uint32_t i = 0; i < npeers; i++, k += 2) {
        struct lb_peer *p = nic->peers[i];
        if (!p || p->dead)
            continue;
        short rev = pf[k].revents;
        /* POLLIN alone is doorbells (lb_wait.c), unless it is the EOF. */
        if (rev && !(rev & (POLLHUP | POLLERR | POLLNVAL)) &&
            lb_sock_drain(p->fd) == 0)
            rev = 0;
        bool exited = !rev &&
                      (pf[k + 1].revents ||
                       /* No pidfds (kernel < 5.3, valgrind): ask the pid. */
                       (p->fd >= 0 && p->pidfd < 0 &&
                        kill((pid_t)p->pid, 0) < 0 && errno == ESRCH));
        /* The channel's state last: a target that refused us or closed
         * its NIC in order says so there before its socket closes or its
         * process ends, so read after the hang-up was seen it names the
         * cause. Read before the hang-up, a refusal landing in between
         * was reported as "NIC dead" (test_auth's twoproc_refused, seen
         * under qemu-user). */
        uint32_t st = p->shm ? atomic_load(&p->shm->tgt_state) : LB_ST_OK;
        bool closed = st == LB_ST_CLOSED;
        if (st == LB_ST_REFUSED)
            lb_peer_refused(nic, p, "it requires authentication and this "
                            "engine has no key (engine.auth_key) or a "
                            "different one");
        else if (rev)
            lb_peer_down(nic, p, closed ? "NIC closed, connection closed"
                                        : "connection closed", closed);
        else if (exited)
            lb_peer_down(nic, p, closed ? "NIC closed, process exited"
                                        : "process exited", closed);
        else if (st != LB_ST_OK)
            lb_peer_down(nic, p, closed ? "NIC closed" : "NIC dead", closed);
    }

    /* Inbound channels whose initiator went away. */
    for (uint32_t i = 0; i < nin; i++) {
        struct lb_inbound *in = nic->in[i];
        short rev = pf[1 + nhello + i].revents;
        if (rev & (POLLHUP | POLLERR | POLLNVAL)) {
            in->gone = true;
        } else if (rev & POLLIN) {
            if (lb_sock_drain(in->fd) < 0)
                in->gone = true;
        }
        if (atomic_load(&in->shm->init_state) != LB_ST_OK)
            in->gone = true;
    }
    for (uint32_t i = 0; i < nic->nin;) {
        if (nic->in[i]->gone)
            lb_inbound_drop(nic, nic->in[i]); /* moves the last entry to i */
        else
            i++;
    }

    /* Hellos of connections accepted earlier. */
    uint32_t keep = 0;
    for (uint32_t i = 0; i < nhello; i++) {
        int fd = nic->hello_fds[i];
        if (!pf[1 + i].revents ? !lb_auth_expire(nic, fd)
                               : !lb_hello_recv(nic, fd))
            nic->hello_fds[keep++] = fd;
    }
    nic->nhello = keep; /* nothing was accepted since pf was built */

    if (pf[0].revents & POLLIN)
        lb_accept_all(nic);
    /* A proof answers our challenge within a round trip: look at the next
     * poll rather than after LB_HK_INTERVAL_NS (which cost every
     * authenticated channel a millisecond before its first operation). */
    if (nic->nauth_pend) {
        nic->hk_next_ns = 0;
        nic->hk_polls |= LB_HK_NOW;
    }
}

void lb_hellos_service(lb_nic *nic)
{
    lb_accept_all(nic);
    for (uint32_t i = 0; i < nic->nhello;) {
        int fd = nic->hello_fds[i];
        if (lb_hello_recv(nic, fd))
            nic->hello_fds[i] = nic->hello_fds[--nic->nhello];
        else
            i++;
    }
}
