/* The doorbell of shm NICs (efa_shm_bell.h says why and how). */
#define _GNU_SOURCE
#include "efa_shm_bell.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#define BELL_MAGIC 0x4c4c4542u /* "BELL" */
#define BELL_VERSION 1u
#define BELL_PAGE 4096u
/* epoll tokens: 0 = a ring, TIMER = the timer, others = a peer's pidfd. */
#define TOKEN_TIMER UINT32_MAX

/* The shared page. Only `sleeping` moves; it has its line to itself. */
struct bell_page {
    uint32_t magic;
    uint32_t version;
    uint32_t pid;
    uint32_t reserved;
    _Alignas(64) _Atomic uint32_t sleeping;
};

struct efa_bell {
    struct bell_page *page;
    int sock;  /* bound to NAME.sock: rings arrive here */
    int epfd;  /* sock + timer + watched pidfds: the NIC's wait fd */
    int timer; /* timerfd: the plugin's deadlines */
    uint64_t timer_due;
    char page_path[96];
    char sock_path[96];
};

struct efa_bell_remote {
    struct bell_page *page;
    struct sockaddr_un to;
    socklen_t to_len;
};

/* "/dev/shm/NAME.SUFFIX" for an endpoint name raw (NUL within raw_len, no
 * '/'); false if raw is not such a name or the path does not fit. */
static bool bell_path(const uint8_t *raw, size_t raw_len, const char *suffix,
                      char *out, size_t len)
{
    size_t n = strnlen((const char *)raw, raw_len);
    if (n == 0 || n == raw_len || memchr(raw, '/', n))
        return false;
    int w = snprintf(out, len, "/dev/shm/%s.%s", (const char *)raw, suffix);
    return w > 0 && (size_t)w < len &&
           (size_t)w < sizeof(((struct sockaddr_un *)0)->sun_path);
}

static int fail(char *why, size_t len, int err, const char *what,
                const char *path)
{
    snprintf(why, len, "%s %s: %s", what, path, strerror(err));
    return -err;
}

int efa_bell_open(struct efa_bell **out, const uint8_t *raw, size_t raw_len,
                  char *why, size_t why_len)
{
    struct efa_bell *b = calloc(1, sizeof(*b));
    if (!b)
        return fail(why, why_len, ENOMEM, "allocating", "the bell");
    b->sock = b->epfd = b->timer = -1;
    int rc;
    if (!bell_path(raw, raw_len, "bell", b->page_path, sizeof(b->page_path)) ||
        !bell_path(raw, raw_len, "sock", b->sock_path, sizeof(b->sock_path))) {
        rc = fail(why, why_len, EINVAL, "naming", "the bell files");
        goto out;
    }
    int fd = open(b->page_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = fail(why, why_len, errno, "creating", b->page_path);
        b->page_path[0] = '\0'; /* not ours to remove */
        goto out;
    }
    void *m = MAP_FAILED;
    if (ftruncate(fd, BELL_PAGE) == 0)
        m = mmap(NULL, BELL_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (m == MAP_FAILED) {
        rc = fail(why, why_len, err, "mapping", b->page_path);
        goto out;
    }
    b->page = m;
    b->page->pid = (uint32_t)getpid();
    b->page->version = BELL_VERSION;
    atomic_store(&b->page->sleeping, 0);
    __atomic_store_n(&b->page->magic, BELL_MAGIC, __ATOMIC_RELEASE);

    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, b->sock_path, strlen(b->sock_path) + 1);
    b->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (b->sock < 0) {
        rc = fail(why, why_len, errno, "opening a socket for", b->sock_path);
        goto out;
    }
    if (bind(b->sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        rc = fail(why, why_len, errno, "binding", b->sock_path);
        b->sock_path[0] = '\0';
        goto out;
    }
    b->epfd = epoll_create1(EPOLL_CLOEXEC);
    b->timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
    struct epoll_event tev = {.events = EPOLLIN, .data.u32 = TOKEN_TIMER};
    if (b->epfd < 0 || b->timer < 0 ||
        epoll_ctl(b->epfd, EPOLL_CTL_ADD, b->sock, &ev) < 0 ||
        epoll_ctl(b->epfd, EPOLL_CTL_ADD, b->timer, &tev) < 0) {
        rc = fail(why, why_len, errno, "an epoll set for", b->sock_path);
        goto out;
    }
    *out = b;
    return 0;
out:
    efa_bell_close(b);
    return rc;
}

void efa_bell_close(struct efa_bell *b)
{
    if (!b)
        return;
    if (b->epfd >= 0)
        close(b->epfd);
    if (b->timer >= 0)
        close(b->timer);
    if (b->sock >= 0)
        close(b->sock);
    if (b->sock_path[0])
        unlink(b->sock_path);
    if (b->page)
        munmap(b->page, BELL_PAGE);
    if (b->page_path[0])
        unlink(b->page_path);
    free(b);
}

int efa_bell_fd(const struct efa_bell *b)
{
    return b->epfd;
}

int efa_bell_watch(struct efa_bell *b, int pidfd, uint32_t token)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = token};
    return epoll_ctl(b->epfd, EPOLL_CTL_ADD, pidfd, &ev) < 0 ? -errno : 0;
}

void efa_bell_unwatch(struct efa_bell *b, int pidfd)
{
    epoll_ctl(b->epfd, EPOLL_CTL_DEL, pidfd, NULL);
}

int efa_bell_exits(struct efa_bell *b, uint32_t *tokens, int max)
{
    struct epoll_event ev[16];
    int n = epoll_wait(b->epfd, ev, 16, 0), k = 0;
    for (int i = 0; i < n && k < max; i++)
        if (ev[i].data.u32 && ev[i].data.u32 != TOKEN_TIMER)
            tokens[k++] = ev[i].data.u32;
    return k;
}

void efa_bell_timer(struct efa_bell *b, uint64_t due_ns)
{
    if (due_ns == b->timer_due)
        return; /* set already (an expiry since is read by efa_bell_sleep) */
    b->timer_due = due_ns;
    struct itimerspec its = {0};
    its.it_value.tv_sec = (time_t)(due_ns / 1000000000ull);
    its.it_value.tv_nsec = (long)(due_ns % 1000000000ull);
    timerfd_settime(b->timer, TFD_TIMER_ABSTIME, &its, NULL);
}

void efa_bell_sleep(struct efa_bell *b)
{
    char buf[64];
    while (recv(b->sock, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        ;
    uint64_t expiries;
    if (read(b->timer, &expiries, sizeof(expiries)) > 0)
        b->timer_due = 0; /* fired: the next efa_bell_timer sets it anew */
    atomic_store_explicit(&b->page->sleeping, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
}

void efa_bell_awake(struct efa_bell *b)
{
    if (atomic_load_explicit(&b->page->sleeping, memory_order_relaxed))
        atomic_store_explicit(&b->page->sleeping, 0, memory_order_relaxed);
}

struct efa_bell_remote *efa_bell_remote_open(const uint8_t *raw,
                                             size_t raw_len, int *err)
{
    char page_path[96], sock_path[96];
    if (!bell_path(raw, raw_len, "bell", page_path, sizeof(page_path)) ||
        !bell_path(raw, raw_len, "sock", sock_path, sizeof(sock_path))) {
        *err = -EINVAL;
        return NULL;
    }
    int fd = open(page_path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        *err = -errno;
        return NULL;
    }
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)BELL_PAGE)
        m = mmap(NULL, BELL_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    else
        errno = EPROTO; /* not (yet) a bell page */
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        *err = -e;
        return NULL;
    }
    struct bell_page *pg = m;
    if (__atomic_load_n(&pg->magic, __ATOMIC_ACQUIRE) != BELL_MAGIC ||
        pg->version != BELL_VERSION) {
        munmap(m, BELL_PAGE);
        *err = -EPROTO;
        return NULL;
    }
    struct efa_bell_remote *r = calloc(1, sizeof(*r));
    if (!r) {
        munmap(m, BELL_PAGE);
        *err = -ENOMEM;
        return NULL;
    }
    r->page = pg;
    r->to.sun_family = AF_UNIX;
    memcpy(r->to.sun_path, sock_path, strlen(sock_path) + 1);
    r->to_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
                            strlen(sock_path) + 1);
    return r;
}

void efa_bell_remote_close(struct efa_bell_remote *r)
{
    if (!r)
        return;
    munmap(r->page, BELL_PAGE);
    free(r);
}

void efa_bell_fence(void)
{
    atomic_thread_fence(memory_order_seq_cst);
}

void efa_bell_ring_fenced(struct efa_bell_remote *r, int *tx_fd)
{
    if (!atomic_load_explicit(&r->page->sleeping, memory_order_relaxed) ||
        !atomic_exchange(&r->page->sleeping, 0))
        return;
    if (*tx_fd < 0)
        *tx_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    /* A full queue (EAGAIN) is rung already; a closed one (ECONNREFUSED,
     * ENOENT) has no sleeper. */
    if (*tx_fd >= 0)
        (void)sendto(*tx_fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL,
                     (struct sockaddr *)&r->to, r->to_len);
}

void efa_bell_ring(struct efa_bell_remote *r, int *tx_fd)
{
    atomic_thread_fence(memory_order_seq_cst);
    efa_bell_ring_fenced(r, tx_fd);
}
