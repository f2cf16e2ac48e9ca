/*
 * Wait objects (plugin ABI 1.3): what lets an idle worker block instead of
 * sleep-polling.
 *
 * Each NIC has an epoll set holding every fd whose readiness means poll()
 * has work: its listening socket and accepted connections (new channels),
 * its own eventfd (an in-process channel was added), per channel the
 * doorbell it waits on, and peer pidfds (a target process died). The
 * epoll fd itself is the NIC's wait_fd: epoll sets nest.
 *
 * Doorbells: a side about to block sets its armed flag in every channel
 * (tgt_armed on its inbound channels, init_armed on its peers), fences,
 * and looks at the rings once more (wait_arm). The other side pushes its
 * entries (lb_ring.h), fences, and rings only if the flag is set, clearing it, so a
 * busy pair makes no system call and a sleeping side is rung once. In one
 * process a doorbell is one of the channel's two eventfds; across
 * processes it is one byte on the channel's socket, which both sides
 * already poll for hang-ups.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lb_internal.h"

int lb_wait_open(lb_nic *nic)
{
    nic->epfd = epoll_create1(EPOLL_CLOEXEC);
    nic->bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (nic->epfd < 0 || nic->bell < 0 || lb_wait_add(nic, nic->bell) < 0) {
        int e = errno;
        lb_err(nic, "cannot create its wait object: %s", strerror(e));
        lb_wait_close(nic);
        return -e;
    }
    return 0;
}

void lb_wait_close(lb_nic *nic)
{
    if (nic->epfd >= 0)
        close(nic->epfd);
    if (nic->bell >= 0)
        close(nic->bell);
    nic->epfd = nic->bell = -1;
}

int lb_wait_add(lb_nic *nic, int fd)
{
    if (fd < 0 || nic->epfd < 0)
        return 0;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (epoll_ctl(nic->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 && errno != EEXIST) {
        lb_err(nic, "cannot add fd %d to its wait object: %s", fd,
               strerror(errno));
        return -errno;
    }
    return 0;
}

void lb_wait_del(lb_nic *nic, int fd)
{
    if (fd >= 0 && nic->epfd >= 0)
        epoll_ctl(nic->epfd, EPOLL_CTL_DEL, fd, NULL);
}

int lb_wait_fd(te_plugin_nic *nic)
{
    return nic->epfd >= 0 ? nic->epfd : -EOPNOTSUPP;
}

static void bell_ring(int fd, bool sock)
{
    if (fd < 0)
        return;
    if (sock) {
        char b = 'b';
        /* EAGAIN: the socket holds unread bells, so it is readable. */
        ssize_t rc = send(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)rc;
    } else {
        uint64_t one = 1;
        ssize_t rc = write(fd, &one, sizeof(one));
        (void)rc;
    }
}

void lb_bell_ring(int fd)
{
    bell_ring(fd, false);
}

void lb_fd_close(lb_nic *nic, int fd)
{
    if (fd < 0)
        return;
    lb_wait_del(nic, fd);
    close(fd);
}

static void bell_clear(int fd)
{
    uint64_t v;
    ssize_t rc = read(fd, &v, sizeof(v)); /* EAGAIN: not rung */
    (void)rc;
}

int lb_sock_drain(int fd)
{
    char buf[64];
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r > 0)
            continue;
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    }
}

TPC_HOT
void lb_peer_publish(struct lb_peer *p)
{
    /* The requests are visible since their push: only the doorbell. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&p->shm->tgt_armed, memory_order_relaxed) &&
        atomic_exchange(&p->shm->tgt_armed, 0))
        bell_ring(p->bell, p->map_len != 0);
}

TPC_HOT
void lb_bell_initiator(struct lb_inbound *in)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&in->shm->init_armed, memory_order_relaxed) &&
        atomic_exchange(&in->shm->init_armed, 0))
        bell_ring(in->bell, !in->local);
}

void lb_wait_disarm(lb_nic *nic)
{
    nic->armed = false;
    for (uint32_t i = 0; i < nic->nin; i++)
        atomic_store_explicit(&nic->in[i]->shm->tgt_armed, 0,
                              memory_order_relaxed);
    for (uint32_t i = 0; i < nic->npeers; i++) {
        struct lb_peer *p = nic->peers[i];
        if (p && p->shm)
            atomic_store_explicit(&p->shm->init_armed, 0,
                                  memory_order_relaxed);
    }
}

/* Clear every doorbell; 1 when a channel socket hung up (housekeeping
 * must look at once). */
static int clear_bells(lb_nic *nic)
{
    int hung = 0;
    bell_clear(nic->bell);
    for (uint32_t i = 0; i < nic->nin; i++) {
        struct lb_inbound *in = nic->in[i];
        if (in->gone)
            continue;
        if (in->local)
            bell_clear(in->wait);
        else if (lb_sock_drain(in->wait) < 0)
            hung = 1;
    }
    for (uint32_t i = 0; i < nic->npeers; i++) {
        struct lb_peer *p = nic->peers[i];
        if (!p || p->dead || !p->shm)
            continue;
        if (!p->map_len)
            bell_clear(p->wait);
        else if (lb_sock_drain(p->wait) < 0)
            hung = 1;
    }
    return hung;
}

/* Anything poll() would do now. Called after the armed flags are set. */
static bool has_work(lb_nic *nic)
{
    if (nic->cq.count ||
        atomic_load_explicit(&nic->in_gen, memory_order_acquire) !=
            nic->in_seen ||
        (nic->pending.count && nic->recvq.count))
        return true;
    bool hk = false; /* the other side left: housekeeping's job */
    for (uint32_t i = 0; i < nic->nin; i++) {
        struct lb_inbound *in = nic->in[i];
        if (in->gone)
            continue;
        if (lb_ring_cons_avail(&in->req, 1))
            return true;
        hk |= atomic_load_explicit(&in->shm->init_state,
                                   memory_order_relaxed) != LB_ST_OK;
    }
    for (uint32_t i = 0; i < nic->npeers; i++) {
        struct lb_peer *p = nic->peers[i];
        if (!p || p->dead || !p->shm)
            continue;
        if (lb_ring_cons_avail(&p->resp, 1))
            return true;
        hk |= atomic_load_explicit(&p->shm->tgt_state,
                                   memory_order_relaxed) != LB_ST_OK;
    }
    if (hk) {
        nic->hk_next_ns = 0;
        nic->hk_polls |= LB_HK_NOW;
    }
    return hk;
}

int lb_wait_arm(te_plugin_nic *nic)
{
    if (nic->epfd < 0)
        return -EOPNOTSUPP;
    if (atomic_load_explicit(&nic->dead, memory_order_relaxed)) {
        /* fault_kill_after: nothing will come; drain what may have rung
         * so the set does not stay readable. */
        clear_bells(nic);
        return 0;
    }
    if (clear_bells(nic)) {
        nic->hk_next_ns = 0; /* the next poll looks at the sockets */
        nic->hk_polls |= LB_HK_NOW;
        return -EAGAIN;
    }
    for (uint32_t i = 0; i < nic->nin; i++)
        atomic_store_explicit(&nic->in[i]->shm->tgt_armed, 1,
                              memory_order_relaxed);
    for (uint32_t i = 0; i < nic->npeers; i++) {
        struct lb_peer *p = nic->peers[i];
        if (p && !p->dead && p->shm)
            atomic_store_explicit(&p->shm->init_armed, 1,
                                  memory_order_relaxed);
    }
    nic->armed = true;
    atomic_thread_fence(memory_order_seq_cst);
    if (has_work(nic)) {
        lb_wait_disarm(nic);
        return -EAGAIN;
    }
    nic->hk_polls |= LB_HK_NOW; /* what wakes us may be housekeeping's */
    return 0;
}

int lb_shm_local_bells(struct lb_shm *shm)
{
    shm->bell_tgt = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    shm->bell_init = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (shm->bell_tgt >= 0 && shm->bell_init >= 0)
        return 0;
    int e = errno;
    if (shm->bell_tgt >= 0)
        close(shm->bell_tgt);
    if (shm->bell_init >= 0)
        close(shm->bell_init);
    shm->bell_tgt = shm->bell_init = -1;
    errno = e;
    return -1;
}

void lb_shm_local_unref(struct lb_shm *shm)
{
    if (atomic_fetch_sub(&shm->refs, 1) != 1)
        return;
    if (shm->bell_tgt >= 0)
        close(shm->bell_tgt);
    if (shm->bell_init >= 0)
        close(shm->bell_init);
    free(shm);
}
