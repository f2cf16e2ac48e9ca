/* Remotes of the suite: another engine in this process, or one served by a
 * child process (this same binary re-executed with --serve FD). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conformance.h"
#include "side.h"
#include "wire_cmd.h"

extern char **conf_argv; /* main.c: our own command line, for --serve */
extern const char *conf_remote_wrapper; /* main.c: --remote-wrapper */

int cmd_write(int fd, const void *buf, size_t len)
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

int cmd_read(int fd, void *buf, size_t len, int timeout_ms)
{
    uint8_t *p = buf;
    uint64_t deadline = conf_now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    while (len) {
        int wait = -1;
        if (timeout_ms >= 0) {
            uint64_t now = conf_now_ms();
            if (now >= deadline)
                return -ETIMEDOUT;
            wait = (int)(deadline - now);
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, wait);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr == 0)
            return -ETIMEDOUT;
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -EPIPE;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* ---------------------------------------------------------- in-process */

static struct side *S(struct remote *r) { return r->impl; }

static int ip_fill(struct remote *r, uint64_t off, uint64_t len, uint32_t seed)
{
    if (off > CONF_REGION || len > CONF_REGION - off)
        return -ERANGE;
    conf_fill(S(r)->buf, off, len, seed);
    return conf_mem_push(&S(r)->mem, off, len);
}

static int ip_fetch(struct remote *r, uint64_t off, uint64_t len, void *out)
{
    if (off > CONF_REGION || len > CONF_REGION - off)
        return -ERANGE;
    int rc = conf_mem_pull(&S(r)->mem, off, len);
    if (!rc)
        memcpy(out, S(r)->buf + off, len);
    return rc;
}

static int ip_imm_wait(struct remote *r, uint32_t imm, uint64_t count, int ms)
{
    return te_imm_wait(S(r)->e, imm, count, ms);
}

static int ip_imm_banked(struct remote *r, uint32_t imm, uint64_t *banked)
{
    return te_imm_poll(S(r)->e, imm, banked, NULL);
}

static int ip_imm_remove(struct remote *r, uint32_t imm, uint64_t *surplus)
{
    return te_imm_remove(S(r)->e, imm, surplus);
}

static int ip_recv_wait(struct remote *r, void *buf, size_t cap, size_t *len,
                        int *from_known, int ms)
{
    return side_recv_wait(S(r), buf, cap, len, from_known, ms);
}

static int ip_space(struct remote *r, uint32_t cmd, uint32_t slot, uint64_t a,
                    uint64_t *v)
{
    return side_space(S(r), cmd, slot, a, v);
}

static void ip_close(struct remote *r)
{
    side_close(S(r));
    free(r->impl);
    r->impl = NULL;
}

static const struct remote_ops inproc_ops = {
    ip_fill, ip_fetch, ip_imm_wait, ip_imm_banked, ip_imm_remove,
    ip_recv_wait, ip_space, ip_close, NULL};

/* ---------------------------------------------------------- child */

struct child {
    pid_t pid; /* -1 once reaped (ch_kill) */
    int fd;
};

static struct child *C(struct remote *r) { return r->impl; }

static int call(struct remote *r, uint32_t cmd, uint32_t imm, uint64_t a,
                uint64_t b, struct cmd_reply *rep, void *payload, size_t cap,
                int timeout_ms)
{
    struct cmd_req q = {.cmd = cmd, .imm = imm, .a = a, .b = b};
    if (cmd_write(C(r)->fd, &q, sizeof(q)))
        return -EPIPE;
    int rc = cmd_read(C(r)->fd, rep, sizeof(*rep), timeout_ms);
    if (rc)
        return rc;
    if (rep->len) {
        if (rep->len > cap)
            return -EMSGSIZE;
        rc = cmd_read(C(r)->fd, payload, rep->len, timeout_ms);
        if (rc)
            return rc;
    }
    return rep->rc;
}

static int ch_fill(struct remote *r, uint64_t off, uint64_t len, uint32_t seed)
{
    struct cmd_reply rep;
    return call(r, CMD_FILL, seed, off, len, &rep, NULL, 0, CONF_TIMEOUT_MS);
}

static int ch_fetch(struct remote *r, uint64_t off, uint64_t len, void *out)
{
    struct cmd_reply rep;
    return call(r, CMD_FETCH, 0, off, len, &rep, out, len, CONF_TIMEOUT_MS);
}

static int ch_imm_wait(struct remote *r, uint32_t imm, uint64_t count, int ms)
{
    struct cmd_reply rep;
    return call(r, CMD_IMM_WAIT, imm, count, (uint64_t)ms, &rep, NULL, 0,
                ms + CONF_TIMEOUT_MS);
}

static int ch_imm_banked(struct remote *r, uint32_t imm, uint64_t *banked)
{
    struct cmd_reply rep;
    int rc = call(r, CMD_IMM_BANKED, imm, 0, 0, &rep, NULL, 0, CONF_TIMEOUT_MS);
    *banked = rep.v;
    return rc;
}

static int ch_imm_remove(struct remote *r, uint32_t imm, uint64_t *surplus)
{
    struct cmd_reply rep;
    int rc = call(r, CMD_IMM_REMOVE, imm, 0, 0, &rep, NULL, 0, CONF_TIMEOUT_MS);
    if (surplus)
        *surplus = rep.v;
    return rc;
}

static int ch_recv_wait(struct remote *r, void *buf, size_t cap, size_t *len,
                        int *from_known, int ms)
{
    struct cmd_reply rep = {0};
    int rc = call(r, CMD_RECV_WAIT, 0, 0, (uint64_t)ms, &rep, buf, cap,
                  ms + CONF_TIMEOUT_MS);
    *len = rep.len;
    *from_known = (int)rep.v;
    return rc;
}

static int ch_space(struct remote *r, uint32_t cmd, uint32_t slot, uint64_t a,
                    uint64_t *v)
{
    struct cmd_reply rep = {0};
    int rc = call(r, cmd, slot, a, 0, &rep, NULL, 0, CONF_TIMEOUT_MS);
    *v = rep.v;
    return rc;
}

static void ch_close(struct remote *r)
{
    struct child *ch = C(r);
    struct cmd_req q = {.cmd = CMD_QUIT};
    cmd_write(ch->fd, &q, sizeof(q));
    close(ch->fd);
    if (ch->pid < 0)
        goto done; /* killed and reaped already */
    /* Bounded wait for a clean exit, then kill. */
    for (int i = 0; i < 500; i++) {
        if (waitpid(ch->pid, NULL, WNOHANG) == ch->pid)
            goto done;
        usleep(10000);
    }
    kill(ch->pid, SIGKILL);
    waitpid(ch->pid, NULL, 0);
done:
    free(ch);
    r->impl = NULL;
}

/* Returns once the child is dead (reaped): what is submitted after it
 * goes to a dead process, however fast the caller is (a caller-progress
 * engine over shm had completed all 300 writes of peer_killed before a
 * bare SIGKILL had taken effect). */
static int ch_kill(struct remote *r)
{
    struct child *ch = C(r);
    if (ch->pid < 0)
        return 0;
    if (kill(ch->pid, SIGKILL))
        return -errno;
    waitpid(ch->pid, NULL, 0);
    ch->pid = -1;
    return 0;
}

static const struct remote_ops child_ops = {
    ch_fill, ch_fetch, ch_imm_wait, ch_imm_banked, ch_imm_remove,
    ch_recv_wait, ch_space, ch_close, ch_kill};

#define NO_MESSAGE "(no message: neither the core nor the plugin set one)"

/* te_last_error(), or a placeholder that says it was empty. */
static const char *last_error(void)
{
    const char *m = te_last_error();
    return m && *m ? m : NO_MESSAGE;
}

static int open_child(struct conf *c, te_engine *local, struct remote *r,
                      uint8_t *addr, size_t *addr_len, te_mr_desc *desc)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int err = -errno;
        close(sv[0]);
        close(sv[1]);
        return err;
    }
    if (pid == 0) {
        close(sv[0]);
        int fd = dup(sv[1]); /* without CLOEXEC */
        char fdstr[16];
        snprintf(fdstr, sizeof(fdstr), "%d", fd);
        int n = 0;
        while (conf_argv[n])
            n++;
        /* --remote-wrapper "ip netns exec ns": its words, then this binary
         * by its real path (the wrapper's /proc/self/exe is not us). */
        char *wrap = conf_remote_wrapper ? strdup(conf_remote_wrapper) : NULL;
        int w = 0;
        char *words[32], *save = NULL;
        for (char *t = wrap ? strtok_r(wrap, " ", &save) : NULL; t && w < 31;
             t = strtok_r(NULL, " ", &save))
            words[w++] = t;
        static char exe[4096];
        ssize_t el = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        exe[el > 0 ? el : 0] = 0;
        char **argv = calloc((size_t)(n + w) + 3, sizeof(char *));
        for (int i = 0; i < w; i++)
            argv[i] = words[i];
        argv[w] = w ? exe : conf_argv[0];
        for (int i = 1; i < n; i++)
            argv[w + i] = conf_argv[i];
        argv[w + n] = "--serve";
        argv[w + n + 1] = fdstr;
        if (w)
            execvp(argv[0], argv);
        else /* the real path: under valgrind /proc/self/exe is valgrind */
            execv(exe[0] ? exe : "/proc/self/exe", argv);
        _exit(127);
    }
    close(sv[1]);
    struct child *ch = calloc(1, sizeof(*ch));
    ch->pid = pid;
    ch->fd = sv[0];
    r->impl = ch;
    r->ops = &child_ops;
    struct cmd_hello *h = malloc(sizeof(*h));
    int rc = cmd_read(ch->fd, h, sizeof(*h), CONF_TIMEOUT_MS);
    if (rc)
        snprintf(c->err, sizeof(c->err), "the remote process did not start "
                 "(no hello within %d ms: %s)", CONF_TIMEOUT_MS,
                 te_strerror(rc));
    else if (h->rc)
        snprintf(c->err, sizeof(c->err), "the remote process could not set "
                 "up its engine: %s", h->error);
    if (!rc && !(rc = h->rc)) {
        memcpy(addr, h->addr, h->addr_len);
        *addr_len = h->addr_len;
        rc = te_desc_parse(h->desc, h->desc_len, desc);
    }
    free(h);
    if (rc)
        return rc;
    struct cmd_addr pa;
    memset(&pa, 0, sizeof(pa)); /* all of it is sent, not just len bytes */
    pa.len = sizeof(pa.addr);
    if ((rc = te_engine_address(local, 0, pa.addr, &pa.len)) ||
        (rc = cmd_write(ch->fd, &pa, sizeof(pa))))
        return rc;
    struct cmd_peer_reply pr;
    if ((rc = cmd_read(ch->fd, &pr, sizeof(pr), CONF_TIMEOUT_MS)))
        return rc;
    pr.error[sizeof(pr.error) - 1] = 0;
    if (pr.rc)
        snprintf(c->err, sizeof(c->err), "the remote refused this engine "
                 "as a peer: %s", pr.error[0] ? pr.error : NO_MESSAGE);
    return pr.rc;
}

/* A remote engine in this process, peered both ways with `local`. */
static int open_inproc(struct conf *c, te_engine *local, struct remote *r,
                       uint8_t *addr, size_t *addr_len)
{
    struct side *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    r->impl = s;
    r->ops = &inproc_ops;
    te_config *rcfg = c->remote_sets[0] ? conf_config_with(c, c->remote_sets)
                                        : NULL;
    if (c->remote_sets[0] && !rcfg)
        return -EINVAL;
    int rc = side_open(s, rcfg ? rcfg : c->cfg);
    te_config_free(rcfg);
    if (rc) {
        snprintf(c->err, sizeof(c->err), "its engine: %s", last_error());
        return rc;
    }
    r->desc = s->desc;
    if ((rc = te_engine_address(s->e, 0, addr, addr_len)))
        return rc;
    uint8_t la[TE_ADDR_MAX];
    size_t la_len = sizeof(la);
    if ((rc = te_engine_address(local, 0, la, &la_len)))
        return rc;
    if ((rc = te_peer_add(s->e, 0, la, la_len, &r->back)))
        snprintf(c->err, sizeof(c->err), "the remote refused this engine "
                 "as a peer: %s", last_error());
    return rc;
}

int conf_remote_attach(struct conf *c, te_engine *local, struct remote *r)
{
    memset(r, 0, sizeof(*r));
    c->err[0] = 0;
    uint8_t addr[TE_ADDR_MAX];
    size_t addr_len = sizeof(addr);
    int rc = c->two_process ? open_child(c, local, r, addr, &addr_len, &r->desc)
                            : open_inproc(c, local, r, addr, &addr_len);
    if (!rc && (rc = te_peer_add(local, 0, addr, addr_len, &r->peer)))
        snprintf(c->err, sizeof(c->err), "this engine refused the remote as "
                 "a peer: %s", last_error());
    if (rc && !c->err[0])
        snprintf(c->err, sizeof(c->err), "%s", last_error());
    return rc;
}

int conf_remote_open(struct conf *c, int i)
{
    return conf_remote_attach(c, c->e, &c->rem[i]);
}
