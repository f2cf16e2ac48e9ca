/*
 * Shared harness of the loopback plugin fuzz targets. The plugin's sources
 * are compiled into each target (tests/fuzz.cmake), so the harness reaches
 * the plugin through its ops table (te_plugin_entry) and, where a test
 * needs determinism or inspection, through lb_internal.h.
 *
 * Isolation and determinism:
 *  - the process moves into a private network namespace when it may
 *    (root): abstract unix sockets are per namespace, so fuzzed socket names
 *    can only reach the harness's own sockets;
 *  - NIC ids and rkey salts are reset to fixed values after nic_open, and
 *    the memory the fuzzed requests address lives at a fixed virtual
 *    address (FZ_BASE), so inputs mean the same thing in every run;
 *  - a sacrificial child process (forked once, same memory image) plays the
 *    "other process" whose memory cross-process copies read and write.
 */
#ifndef TE_FUZZ_LB_COMMON_H
#define TE_FUZZ_LB_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_config.h"
#include "lb_internal.h"
#include "fuzz_check.h"

/* ---------------------------------------------------------- input reader */

struct fz_in {
    const uint8_t *p;
    size_t n;
};

static inline uint8_t fz_u8(struct fz_in *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

static inline uint16_t fz_u16(struct fz_in *in)
{
    uint16_t v = fz_u8(in);
    return (uint16_t)(v | (uint16_t)fz_u8(in) << 8);
}

static inline uint32_t fz_u32(struct fz_in *in)
{
    uint32_t v = fz_u16(in);
    return v | (uint32_t)fz_u16(in) << 16;
}

static inline uint64_t fz_u64(struct fz_in *in)
{
    uint64_t v = fz_u32(in);
    return v | (uint64_t)fz_u32(in) << 32;
}

/* Copy up to len bytes (zero fill when the input runs out). */
static inline void fz_bytes(struct fz_in *in, void *dst, size_t len)
{
    size_t k = len < in->n ? len : in->n;
    memcpy(dst, in->p, k);
    memset((uint8_t *)dst + k, 0, len - k);
    in->p += k;
    in->n -= k;
}

/* ------------------------------------------------------------ fake host */

static char fz_last_err[1024];
static unsigned fz_nerr;
/* The plugin's section as an engine would serve it (fake_config.h). */
static struct te_fake_config fz_cfg;

static __attribute__((unused)) void fz_err(void *c, const char *fmt, ...)
{
    (void)c;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fz_last_err, sizeof fz_last_err, fmt, ap);
    va_end(ap);
    fz_nerr++;
}

static __attribute__((unused)) void fz_log(void *c, int level, const char *fmt, ...)
{
    (void)c;
    if (!getenv("FUZZ_LB_VERBOSE"))
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[lb %d] ", level);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static struct te_plugin_host fz_host = {
    .struct_size = sizeof(struct te_plugin_host), .host_ctx = &fz_cfg,
    .set_error = fz_err, .log = fz_log};
static const struct te_plugin_ops *fz_ops;
static te_plugin_ctx *fz_ctx;
static pid_t fz_child = -1;

/* --------------------------------------------------------- fixed memory */

/* Below 2 GiB: application memory under ASan, TSan and valgrind alike. */
#define FZ_BASE ((uintptr_t)0x3f000000u)
#define FZ_SIZE ((size_t)1 << 20)
#define FZ_CANARY 0xc5
/* Layout inside [FZ_BASE, FZ_BASE + FZ_SIZE): regions with canary gaps. */
#define FZ_MR0_OFF 0x1000u   /* 4096 bytes, REMOTE_WRITE | REMOTE_READ */
#define FZ_MR0_LEN 0x1000u
#define FZ_MR1_OFF 0x3000u   /* 256 bytes, REMOTE_WRITE only */
#define FZ_MR1_LEN 0x100u
#define FZ_MR2_OFF 0x4000u   /* 512 bytes, REMOTE_READ only */
#define FZ_MR2_LEN 0x200u
#define FZ_RECV_OFF 0x5000u  /* receive buffers: 4 x 256 bytes */
#define FZ_RECV_LEN 0x100u
#define FZ_SRC_OFF 0x8000u   /* the other process's source/dest memory */
#define FZ_SRC_LEN 0x10000u

static inline uint8_t *fz_mem(size_t off) { return (uint8_t *)(FZ_BASE + off); }

/* Bulk fills and compares only (memset/memcmp): byte loops here would be
 * coverage-instrumented and dominate the run time. */
static uint8_t fz_image[FZ_SRC_OFF];

/* Everything below FZ_SRC_OFF outside a region is canary; regions hold a
 * pattern. */
static __attribute__((unused)) void fz_mem_reset(void)
{
    static int ready;
    if (!ready) {
        memset(fz_image, FZ_CANARY, sizeof fz_image);
        for (size_t i = 0; i < FZ_MR0_LEN; i++)
            fz_image[FZ_MR0_OFF + i] = (uint8_t)i;
        memset(fz_image + FZ_MR1_OFF, 0x11, FZ_MR1_LEN);
        memset(fz_image + FZ_MR2_OFF, 0x22, FZ_MR2_LEN);
        memset(fz_image + FZ_RECV_OFF, 0x33, 4 * FZ_RECV_LEN);
        ready = 1;
    }
    memcpy(fz_mem(0), fz_image, sizeof fz_image);
}

/* No byte outside a region (below FZ_SRC_OFF) may have changed. */
static __attribute__((unused)) void fz_mem_check(void)
{
    static const struct { size_t off, len; } r[] = {
        {FZ_MR0_OFF, FZ_MR0_LEN}, {FZ_MR1_OFF, FZ_MR1_LEN},
        {FZ_MR2_OFF, FZ_MR2_LEN}, {FZ_RECV_OFF, 4 * FZ_RECV_LEN},
        {FZ_SRC_OFF, 0}};
    size_t pos = 0;
    for (size_t k = 0; k < sizeof r / sizeof r[0]; k++) {
        if (memcmp(fz_mem(pos), fz_image + pos, r[k].off - pos) != 0) {
            fprintf(stderr, "canary between +0x%zx and +0x%zx overwritten\n",
                    pos, r[k].off);
            FUZZ_CHECK(!"a copy went outside its region");
        }
        pos = r[k].off + r[k].len;
    }
}

/* The sacrificial "other process" (same image, so FZ_BASE exists there). */
static __attribute__((unused)) void fz_child_spawn(void)
{
    pid_t parent = getpid();
    fz_child = fork();
    FUZZ_CHECK(fz_child >= 0);
    if (fz_child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(0);
        for (;;)
            pause();
    }
}

/* The child died (a fuzzed READ may scribble on it): replace it. */
static __attribute__((unused)) void fz_child_ensure(void)
{
    if (fz_child > 0 && kill(fz_child, 0) == 0 &&
        waitpid(fz_child, NULL, WNOHANG) == 0)
        return;
    fz_child_spawn();
}

static __attribute__((unused)) void fz_setup(const char *queue_depth)
{
    /* Root: a network namespace; others: inside a new user namespace. */
    if (unshare(CLONE_NEWNET) != 0 &&
        unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0 && !getenv("FUZZ_LB_QUIET"))
        fprintf(stderr, "fuzz: no private network namespace (%s); abstract "
                "sockets are shared with the host\n", strerror(errno));
    void *m = mmap((void *)FZ_BASE, FZ_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    FUZZ_CHECK(m == (void *)FZ_BASE);
    fz_mem_reset();
    for (size_t i = 0; i < FZ_SRC_LEN; i++) /* once, before the fork */
        fz_mem(FZ_SRC_OFF)[i] = (uint8_t)(i * 7 + 1);
    char err[256] = "";
    fz_ops = te_plugin_entry(TE_PLUGIN_ABI_MAJOR, TE_PLUGIN_ABI_MINOR, err,
                             sizeof err);
    FUZZ_CHECK(fz_ops != NULL);
    const char *const kv[] = {"devices", "4", "queue_depth", queue_depth, NULL};
    FUZZ_CHECK(te_fake_config_init(&fz_cfg, fz_ops, kv) == 0);
    te_fake_config_install(&fz_host);
    FUZZ_CHECK(fz_ops->init(&fz_host, &fz_ctx) == 0);
    fz_child_spawn();
}

/* Open NIC idx with a fixed id and rkey salt. */
static __attribute__((unused)) lb_nic *fz_nic_open(int idx, uint32_t qd, uint64_t id)
{
    struct te_plugin_nic_attr attr = {sizeof attr, qd, 0, 0};
    te_plugin_nic *nic;
    FUZZ_CHECK(fz_ops->nic_open(fz_ctx, idx, &attr, &nic) == 0);
    nic->id = id;
    nic->addr.nic_id = id;
    nic->rkey_seq = 0x5eed000000000000ull;
    return nic;
}

static __attribute__((unused)) int fz_connect_abstract(const char *name)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t n = strlen(name);
    FUZZ_CHECK(n < sizeof sa.sun_path - 1);
    memcpy(sa.sun_path + 1, name, n);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0);
    if (connect(fd, (struct sockaddr *)&sa,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static __attribute__((unused)) int fz_listen_abstract(const char *name)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t n = strlen(name);
    FUZZ_CHECK(n < sizeof sa.sun_path - 1);
    memcpy(sa.sun_path + 1, name, n);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0);
    if (bind(fd, (struct sockaddr *)&sa,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) != 0) {
        /* Only without a private namespace: another run holds the name. */
        fprintf(stderr, "fuzz: cannot listen on @%s (%s): another fuzz run "
                "without a private network namespace? skipping\n", name,
                strerror(errno));
        exit(77);
    }
    FUZZ_CHECK(listen(fd, 64) == 0);
    return fd;
}

/* Send a message with 0..2 file descriptors. */
static __attribute__((unused)) ssize_t fz_send_fds(int fd, const void *buf, size_t len, const int *fds,
                           int nfds)
{
    struct iovec iov = {(void *)buf, len};
    union {
        char b[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } cm;
    memset(&cm, 0, sizeof cm);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        msg.msg_control = cm.b;
        msg.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    }
    return sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* A sealed memfd of `size` bytes holding a valid channel of capacity cap,
 * mapped at *map. */
static __attribute__((unused)) int fz_channel_memfd(uint32_t cap, size_t size, unsigned seals,
                            struct lb_shm **map)
{
    int mfd = memfd_create("fuzz-channel", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    FUZZ_CHECK(mfd >= 0);
    FUZZ_CHECK(ftruncate(mfd, (off_t)size) == 0);
    *map = NULL;
    if (size) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        FUZZ_CHECK(m != MAP_FAILED);
        *map = m;
        if (cap && size >= lb_shm_size(cap))
            lb_shm_init(*map, cap, size);
    }
    if (seals)
        FUZZ_CHECK(fcntl(mfd, F_ADD_SEALS, seals) == 0);
    return mfd;
}

/* The harness's views of a channel's rings (its own trusted cap).
 * initiator: 1 when the harness plays the initiator (produces requests). */
static __attribute__((unused)) void fz_views(struct lb_shm *shm, uint32_t cap,
                                             struct lb_ring *req,
                                             struct lb_ring *resp, int initiator)
{
    unsigned char *slots = (unsigned char *)(shm + 1);
    lb_ring_view(req, &shm->req, slots, cap, initiator);
    lb_ring_view(resp, &shm->resp, slots + (size_t)cap * LB_RING_ENTRY, cap,
                 !initiator);
}

/* Poll a NIC a bounded number of times, collecting completions. */
static __attribute__((unused)) int fz_poll(lb_nic *nic, struct te_plugin_cq_entry *ev, int cap, int rounds)
{
    int n = 0;
    for (int r = 0; r < rounds && n < cap; r++) {
        int k = fz_ops->poll(nic, ev + n, cap - n);
        FUZZ_CHECK(k >= 0);
        n += k;
    }
    return n;
}

#endif
