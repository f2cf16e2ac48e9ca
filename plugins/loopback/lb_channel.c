/*
 * Channel setup, initiator side: the process-wide registry of open NICs,
 * NIC addresses, and peers (channels this NIC owns towards a target).
 *
 * In-process the channel memory is a refcounted heap block handed to the
 * target through its in_new list. Across processes it is a sealed memfd sent
 * over the target's abstract unix socket with a hello; the connection then
 * only serves to notice that either side went away.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lb_auth.h"

/* ---------------------------------------------------------------- registry */

static pthread_mutex_t lb_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static lb_nic *lb_registry_head;

int lb_registry_add(lb_nic *nic)
{
    pthread_mutex_lock(&lb_registry_lock);
    nic->reg_next = lb_registry_head;
    lb_registry_head = nic;
    pthread_mutex_unlock(&lb_registry_lock);
    return 0;
}

void lb_registry_remove(lb_nic *nic)
{
    pthread_mutex_lock(&lb_registry_lock);
    for (lb_nic **pp = &lb_registry_head; *pp; pp = &(*pp)->reg_next) {
        if (*pp == nic) {
            *pp = nic->reg_next;
            break;
        }
    }
    pthread_mutex_unlock(&lb_registry_lock);
}

/* ---------------------------------------------------------------- address */

static socklen_t lb_sockaddr(struct sockaddr_un *sa, const char *name)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    size_t n = strnlen(name, LB_SOCK_NAME_LEN - 1);
    memcpy(sa->sun_path + 1, name, n); /* sun_path[0] = 0: abstract */
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

int lb_listen(lb_nic *nic)
{
    struct lb_addr *a = &nic->addr;
    lb_addr_fill(a, (uint32_t)getpid(), nic->index, nic->id);

    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        lb_err(nic, "socket: %s", strerror(e));
        return -e;
    }
    struct sockaddr_un sa;
    socklen_t sl = lb_sockaddr(&sa, a->sock_name);
    if (bind(fd, (struct sockaddr *)&sa, sl) < 0 || listen(fd, 256) < 0) {
        int e = errno;
        lb_err(nic, "cannot listen on abstract socket @%s: %s", a->sock_name,
               strerror(e));
        close(fd);
        return -e;
    }
    nic->listen_fd = fd;
    return 0;
}

int lb_addr_parse(lb_nic *nic, const void *buf, size_t len, struct lb_addr *out)
{
    if (!buf || len != sizeof(*out)) {
        lb_err(nic, "peer address has %zu bytes, a loopback address has %zu",
               buf ? len : 0, sizeof(*out));
        return -EINVAL;
    }
    memcpy(out, buf, sizeof(*out));
    if (out->magic != LB_ADDR_MAGIC) {
        lb_err(nic, "peer address is not a loopback address (magic 0x%08x)",
               out->magic);
        return -EINVAL;
    }
    if (out->version != LB_ADDR_VERSION || out->size != sizeof(*out)) {
        lb_err(nic, "peer address version %u (size %u) is not supported; "
                    "this plugin speaks version %u",
               out->version, out->size, LB_ADDR_VERSION);
        return -EINVAL;
    }
    if (!memchr(out->sock_name, 0, sizeof(out->sock_name)) ||
        strncmp(out->sock_name, "te-lb-", 6) != 0 || out->nic_id == 0 ||
        out->pid == 0) {
        lb_err(nic, "peer address is corrupt (bad socket name or ids)");
        return -EINVAL;
    }
    return 0;
}

/* ------------------------------------------------------------ peer table */

static int lb_peer_insert(lb_nic *nic, struct lb_peer *p)
{
    uint32_t idx = 0;
    while (idx < nic->npeers && nic->peers[idx])
        idx++;
    if (idx == nic->npeers) {
        if (nic->npeers == nic->peers_cap) {
            uint32_t cap = nic->peers_cap ? nic->peers_cap * 2 : 16;
            struct lb_peer **np = realloc(nic->peers, cap * sizeof(*np));
            if (!np)
                return -ENOMEM;
            nic->peers = np;
            nic->peers_cap = cap;
        }
        nic->npeers++;
    }
    nic->peers[idx] = p;
    p->handle = ((uint64_t)++nic->peer_seq << 32) | (idx + 1);
    nic->peers_gen++;
    return 0;
}

static void lb_peer_unlink(lb_nic *nic, struct lb_peer *p)
{
    nic->peers[(uint32_t)p->handle - 1] = NULL;
    while (nic->npeers && !nic->peers[nic->npeers - 1])
        nic->npeers--;
    nic->peers_gen++;
}

/* ------------------------------------------------------------ in-process */

static int lb_peer_connect_local(lb_nic *nic, const struct lb_addr *a,
                                 struct lb_peer *p)
{
    uint32_t cap = lb_ring_cap(nic->qd);
    size_t size = lb_shm_size(cap);

    pthread_mutex_lock(&lb_registry_lock);
    lb_nic *t = lb_registry_head;
    while (t && t->id != a->nic_id)
        t = t->reg_next;
    if (!t) {
        pthread_mutex_unlock(&lb_registry_lock);
        lb_err(nic, "peer NIC lo%u (id %016llx) of this process is not open",
               a->nic_index, (unsigned long long)a->nic_id);
        return -ECONNREFUSED;
    }
    int arc = lb_auth_local(nic, t, a); /* t cannot close: registry lock */
    if (arc) {
        pthread_mutex_unlock(&lb_registry_lock);
        return arc;
    }
    struct lb_shm *shm = aligned_alloc(64, (size + 63) & ~(size_t)63);
    if (!shm) {
        pthread_mutex_unlock(&lb_registry_lock);
        return -ENOMEM;
    }
    memset(shm, 0, size);
    lb_shm_init(shm, cap, size);
    if (lb_shm_local_bells(shm) < 0) {
        int e = errno;
        pthread_mutex_unlock(&lb_registry_lock);
        free(shm);
        lb_err(nic, "cannot create the channel's doorbells: %s", strerror(e));
        return -e;
    }
    shm->init_pid = (uint32_t)getpid();
    shm->init_nic_index = nic->index;
    shm->init_nic_id = nic->id;
    atomic_store(&shm->refs, 2); /* ours and the target's */

    /* dead is set under in_lock too: a killed target never strands shm. */
    pthread_mutex_lock(&t->in_lock);
    int rc = 0;
    if (atomic_load(&t->dead)) {
        rc = -ECONNREFUSED;
        lb_err(nic, "peer NIC lo%u of this process is dead (fault_kill_after)",
               a->nic_index);
    } else if (t->nin_new == t->in_new_cap) {
        uint32_t c = t->in_new_cap ? t->in_new_cap * 2 : 8;
        struct lb_shm **nn = realloc(t->in_new, c * sizeof(*nn));
        if (nn) {
            t->in_new = nn;
            t->in_new_cap = c;
        } else {
            rc = -ENOMEM;
        }
    }
    if (rc == 0) {
        t->in_new[t->nin_new++] = shm;
        atomic_fetch_add_explicit(&t->in_gen, 1, memory_order_release);
        lb_bell_ring(t->bell); /* wake its worker: alive under in_lock */
    }
    pthread_mutex_unlock(&t->in_lock);
    pthread_mutex_unlock(&lb_registry_lock);
    if (rc < 0) {
        atomic_store(&shm->refs, 1);
        lb_shm_local_unref(shm);
        return rc;
    }
    p->shm = shm;
    p->cap = cap;
    p->map_len = 0;
    p->fd = -1;
    p->bell = shm->bell_tgt;
    p->wait = shm->bell_init;
    lb_wait_add(nic, p->wait);
    return 0;
}

/* ---------------------------------------------------------- cross-process */

static int lb_peer_connect_remote(lb_nic *nic, const struct lb_addr *a,
                                  struct lb_peer *p)
{
    uint32_t cap = lb_ring_cap(nic->qd);
    size_t size = lb_shm_size(cap);
    int e, mfd = -1, fd = -1;
    struct lb_shm *shm = MAP_FAILED;

    mfd = memfd_create("te-lb-channel", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (mfd < 0 || ftruncate(mfd, (off_t)size) < 0 ||
        /* The target maps it too: sealing the size spares it SIGBUS. */
        fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        e = errno;
        lb_err(nic, "cannot create channel memory (memfd): %s", strerror(e));
        goto fail;
    }
    shm = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (shm == MAP_FAILED) {
        e = errno;
        lb_err(nic, "cannot map channel memory: %s", strerror(e));
        goto fail;
    }
    lb_shm_init(shm, cap, size);
    shm->init_pid = (uint32_t)getpid();
    shm->init_nic_index = nic->index;
    shm->init_nic_id = nic->id;

    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        e = errno;
        lb_err(nic, "socket: %s", strerror(e));
        goto fail;
    }
    struct sockaddr_un sa;
    socklen_t sl = lb_sockaddr(&sa, a->sock_name);
    /* A full backlog answers EAGAIN; give the target a moment to accept. */
    uint64_t deadline = tpc_now_ns() + 1000000000ull;
    while (connect(fd, (struct sockaddr *)&sa, sl) < 0) {
        e = errno;
        if ((e != EAGAIN && e != EINTR) || tpc_now_ns() > deadline) {
            lb_err(nic, "cannot reach peer NIC lo%u of pid %u at @%s: %s",
                   a->nic_index, a->pid, a->sock_name,
                   e == ECONNREFUSED ? "not listening (NIC closed or process gone)"
                                     : strerror(e));
            goto fail;
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }

    struct lb_hello h = {
        .magic = LB_HELLO_MAGIC, .version = LB_ADDR_VERSION,
        .pid = (uint32_t)getpid(), .nic_index = nic->index,
        .nic_id = nic->id, .target_nic_id = a->nic_id, .shm_size = size,
    };
    if ((e = -lb_auth_hello_fill(nic, &h)))
        goto fail;
    struct iovec iov = {&h, sizeof(h)};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    memset(&cm, 0, sizeof(cm));
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &mfd, sizeof(int));
    while (sendmsg(fd, &msg, MSG_NOSIGNAL) < 0) {
        e = errno;
        if ((e != EAGAIN && e != EINTR) || tpc_now_ns() > deadline) {
            lb_err(nic, "cannot send hello to peer NIC lo%u of pid %u: %s",
                   a->nic_index, a->pid, strerror(e));
            goto fail;
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    close(mfd);
    mfd = -1;
    if ((e = -lb_auth_initiate(nic, fd, &h, a, shm)))
        goto fail;
    /*
     * The socket alone misses a target whose fds live on in a forked child;
     * a pidfd of the listener (as the kernel recorded it) does not.
     */
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0) {
        p->pid = (uint32_t)cred.pid;
        p->pidfd = (int)syscall(SYS_pidfd_open, cred.pid, 0);
    }
    p->shm = shm;
    p->cap = cap;
    p->map_len = size;
    p->fd = fd;
    p->bell = p->wait = fd;
    lb_wait_add(nic, fd);       /* responses' doorbells and the hang-up */
    lb_wait_add(nic, p->pidfd); /* the target process's end */
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    if (shm != MAP_FAILED)
        munmap(shm, size);
    if (mfd >= 0)
        close(mfd);
    return -e;
}

/* ------------------------------------------------------------------ peers */

int lb_peer_add(te_plugin_nic *nic, const void *addr, size_t len,
                te_plugin_peer *out)
{
    struct lb_addr a;
    if (!out)
        return -EINVAL;
    int rc = lb_addr_parse(nic, addr, len, &a);
    if (rc < 0)
        return rc;
    if (atomic_load(&nic->dead)) {
        lb_err(nic, "NIC is dead (fault_kill_after)");
        return -ENETDOWN;
    }
    struct lb_peer *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->nic_id = a.nic_id;
    p->pid = a.pid;
    p->nic_index = a.nic_index;
    p->fd = -1;
    p->pidfd = -1;

    if (a.pid == (uint32_t)getpid())
        rc = lb_peer_connect_local(nic, &a, p);
    else
        rc = lb_peer_connect_remote(nic, &a, p);
    if (rc == 0 && (rc = lb_peer_insert(nic, p)) < 0)
        lb_peer_detach(nic, p);
    if (rc < 0) {
        free(p);
        return rc;
    }
    /* Our cap, not shm->cap: the target may have rewritten the header. */
    lb_shm_req_ring(p->shm, p->cap, &p->req, 1);
    lb_shm_resp_ring(p->shm, p->cap, &p->resp, 0);
    *out = p->handle;
    return 0;
}

/*
 * After this the target executes nothing more of the channel: it marks
 * itself busy before it checks init_state and executes a batch, we store
 * init_state before we check busy (both seq_cst), so one of us sees the
 * other. The wait is bounded in case the target process is stopped.
 */
bool lb_peer_hung_up(const struct lb_peer *p)
{
    struct pollfd pf[2] = {{p->fd, POLLIN, 0}, {p->pidfd, POLLIN, 0}};
    return p->fd >= 0 && poll(pf, 2, 0) > 0;
}

static void lb_chan_quiesce(lb_nic *nic, struct lb_peer *p, uint32_t state)
{
    atomic_store(&p->shm->init_state, state);
    uint64_t deadline = 0;
    while (atomic_load(&p->shm->tgt_busy)) {
        if (!deadline)
            deadline = tpc_now_ns() + 2000000000ull;
        else if (tpc_now_ns() > deadline || lb_peer_hung_up(p)) {
            lb_log(nic->ctx, 1, "%s: target lo%u of pid %u stays busy; "
                   "closing the channel anyway", nic->name, p->nic_index, p->pid);
            break;
        }
        sched_yield();
    }
}

static void lb_chan_release(lb_nic *nic, struct lb_peer *p)
{
    if (!p->shm)
        return;
    if (p->map_len) {
        munmap(p->shm, p->map_len);
    } else {
        /* The eventfd outlives our use while the target holds it. */
        lb_wait_del(nic, p->wait);
        lb_bell_ring(p->bell); /* its target sees init_state at once */
        lb_shm_local_unref(p->shm);
    }
    lb_fd_close(nic, p->fd);
    lb_fd_close(nic, p->pidfd);
    p->fd = -1;
    p->pidfd = -1;
    p->shm = NULL;
    p->map_len = 0;
}

void lb_peer_detach(lb_nic *nic, struct lb_peer *p)
{
    if (!p->shm)
        return;
    if (!p->dead)
        lb_chan_quiesce(nic, p, LB_ST_CLOSED);
    lb_chan_release(nic, p);
}

int lb_peer_remove(te_plugin_nic *nic, te_plugin_peer h)
{
    struct lb_peer *p = lb_peer_get(nic, h);
    if (!p) {
        lb_err(nic, "peer_remove: unknown peer handle 0x%llx",
               (unsigned long long)h);
        return -EINVAL;
    }
    if (p->shm && !p->dead)
        lb_chan_quiesce(nic, p, LB_ST_CLOSED);
    /* The target is quiet: what it finished is in the ring, the rest never ran. */
    lb_peer_fail(nic, p, -ECONNABORTED, true);
    lb_chan_release(nic, p);
    lb_peer_unlink(nic, p);
    free(p);
    return 0;
}

/* The target went away (or refused us): finish what it did, fail the rest
 * with status, report it once: in the log, and as this poll's error, which
 * the core quotes in the peer's reason (te_peer_status, the log). */
static void peer_down(lb_nic *nic, struct lb_peer *p, const char *why,
                      int op_status, int status, int level)
{
    if (p->dead)
        return;
    if (p->shm)
        atomic_store(&p->shm->init_state, LB_ST_CLOSED);
    lb_peer_fail(nic, p, op_status, true);
    lb_chan_release(nic, p);
    p->dead = true;
    nic->peers_gen++;
    /* The handle tells apart two NICs lo0 of one process (in-process
     * engines): the words must say which peer they are about. */
    snprintf(p->down_why, sizeof(p->down_why),
             "peer lo%u of pid %u (0x%llx) is down (%s)", p->nic_index, p->pid,
             (unsigned long long)p->handle, why);
    lb_log(nic->ctx, level, "%s: %s", nic->name, p->down_why);
    struct te_plugin_cq_entry e = {.kind = TE_PCQ_PEER_DOWN, .status = status,
                                   .peer = p->handle};
    lb_cq_push(nic, &e);
}

void lb_peer_down(lb_nic *nic, struct lb_peer *p, const char *why, bool orderly)
{
    peer_down(nic, p, why, -ECONNRESET, orderly ? -ESHUTDOWN : -ECONNRESET,
              orderly ? 2 : 1);
}

void lb_peer_refused(lb_nic *nic, struct lb_peer *p, const char *why)
{
    char msg[256];
    snprintf(msg, sizeof msg, "failed authentication: %s", why);
    peer_down(nic, p, msg, -EACCES, -EACCES, 0);
}

/* fault_kill_after: this NIC died; its ops to p fail, p's target forgets us. */
void lb_peer_kill(lb_nic *nic, struct lb_peer *p)
{
    if (p->shm && !p->dead)
        lb_chan_quiesce(nic, p, LB_ST_DEAD);
    lb_peer_fail(nic, p, -ENETDOWN, false);
    lb_chan_release(nic, p);
    p->dead = true;
}

void lb_peers_free_all(lb_nic *nic)
{
    for (uint32_t i = 0; i < nic->npeers; i++) {
        struct lb_peer *p = nic->peers[i];
        if (!p)
            continue;
        lb_peer_detach(nic, p);
        free(p);
        nic->peers[i] = NULL;
    }
    nic->npeers = 0;
}
