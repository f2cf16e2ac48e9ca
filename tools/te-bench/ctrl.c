/*
 * The control channel between client and server: length-prefixed messages
 * over a stream socket (a socketpair in one process, TCP across processes).
 * Every read is bounded by the channel's timeout, so a dead or stuck peer
 * ends the run with an error instead of a hang. Only the bootstrap and the
 * bookkeeping between measurements travel here, never the measured data.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"

#define TB_MAGIC 0x54424348u /* "TBCH" */

struct frame {
    uint32_t magic, type;
    uint64_t len;
};

static int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -EPIPE;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len, int timeout_ms)
{
    uint8_t *p = buf;
    uint64_t deadline = tb_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    while (len) {
        uint64_t now = tb_now_ns();
        if (now >= deadline)
            return -ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, (int)((deadline - now) / 1000000ull) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0)
            return -ETIMEDOUT;
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return -EPIPE;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int tb_chan_send(struct tb_chan *c, uint32_t type, const void *a, size_t alen,
                 const void *b, size_t blen)
{
    struct frame f = {TB_MAGIC, type, (uint64_t)(alen + blen)};
    int rc = write_all(c->fd, &f, sizeof(f));
    if (!rc && alen)
        rc = write_all(c->fd, a, alen);
    if (!rc && blen)
        rc = write_all(c->fd, b, blen);
    return rc;
}

int tb_chan_recv(struct tb_chan *c, uint32_t *type, void **buf, size_t *len)
{
    struct frame f;
    *buf = NULL;
    *len = 0;
    int rc = read_all(c->fd, &f, sizeof(f), c->timeout_ms);
    if (rc)
        return rc;
    if (f.magic != TB_MAGIC || f.len > TB_MSG_MAX)
        return -EPROTO;
    void *p = malloc(f.len + 1); /* +1: text payloads get a terminator */
    if (!p)
        return -ENOMEM;
    rc = read_all(c->fd, p, f.len, c->timeout_ms);
    if (rc) {
        free(p);
        return rc;
    }
    ((char *)p)[f.len] = 0;
    *type = f.type;
    *buf = p;
    *len = f.len;
    return 0;
}

int tb_chan_expect(struct tb_chan *c, uint32_t type, size_t min, void **buf,
                   size_t *len)
{
    uint32_t t;
    int rc = tb_chan_recv(c, &t, buf, len);
    if (rc)
        return rc;
    if (t != type || *len < min) {
        free(*buf);
        *buf = NULL;
        return -EPROTO;
    }
    return 0;
}

static int make_sockaddr(const char *addr, uint16_t port, struct sockaddr_in *sa)
{
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons(port);
    return inet_pton(AF_INET, addr, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

int tb_tcp_listen(const char *addr, uint16_t port, uint16_t *bound)
{
    struct sockaddr_in sa;
    if (make_sockaddr(addr, port, &sa))
        return -EINVAL;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    socklen_t sl = sizeof(sa);
    if (bound && getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        *bound = ntohs(sa.sin_port);
    return fd;
}

static void tcp_tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int tb_tcp_accept(int lfd, int timeout_ms)
{
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    int pr;
    do {
        pr = poll(&pfd, 1, timeout_ms);
    } while (pr < 0 && errno == EINTR);
    if (pr == 0)
        return -ETIMEDOUT;
    if (pr < 0)
        return -errno;
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return -errno;
    tcp_tune(fd);
    return fd;
}

/* Retries until the deadline: the server may still be starting. */
int tb_tcp_connect(const char *addr, uint16_t port, int timeout_ms)
{
    struct sockaddr_in sa;
    if (make_sockaddr(addr, port, &sa))
        return -EINVAL;
    uint64_t deadline = tb_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            tcp_tune(fd);
            return fd;
        }
        int e = errno;
        close(fd);
        if ((e != ECONNREFUSED && e != EINTR) || tb_now_ns() >= deadline)
            return -e;
        tb_sleep_us(20000);
    }
}
