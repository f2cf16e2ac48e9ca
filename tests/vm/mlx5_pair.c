/*
 * te-mlx5-pair: two engines in two processes on two DIFFERENT verbs devices
 * (default rxe0 and rxe1 of the test guest), so every packet crosses the
 * veth between them as real RoCEv2. The conformance suite cannot do this:
 * its remotes share one configuration, hence one device.
 *
 * Both sides add each other at the same moment (a simultaneous open), then
 * A writes with immediates (0 B .. 1 MiB), reads, sends a message; B writes
 * back with an immediate over the same QP pair. Every byte is checked.
 *   --expect-down  the handshake cannot succeed (run.sh's caller drops every
 *                  handshake datagram): a write must fail within the
 *                  deadline, not hang.
 *   --key-a K, --key-b K
 *                  engine.auth_key of side A / B (job authentication,
 *                  docs/security.md); the same on both: the test above runs
 *                  authenticated.
 *   --expect-refused
 *                  the keys differ (or one side has none): both sides must
 *                  see the peer refused, with a reason naming
 *                  engine.auth_key, within a few seconds; a write to it
 *                  fails and nothing lands in the other side's memory.
 *   --setup-runs N set-up time instead: N rounds of fresh engines on both
 *                  sides, both add each other at once (--passive-b: only A
 *                  adds B), and A times te_peer_add until its first write
 *                  (0 bytes, with an immediate) completed; prints each round
 *                  and the median.
 *   --block        idle workers block on the NIC with every timed wake-up
 *                  off (idle_spin_us, idle_block_max_ms, heartbeats, peer
 *                  and request timeouts, busy_wait = block): a missed
 *                  wake-up is a hang (the write's 30 s bound), not a delay.
 *                  With --setup-runs, A's first write is queued while the
 *                  connection is still being set up, so this checks that
 *                  the plugin wakes the worker to post it once connected.
 *   --sender-killed  B writes one immediate to A, which never writes to B,
 *                  and is then SIGKILLed: A must find B down by its
 *                  heartbeats alone (keyless zero-length writes,
 *                  engine.heartbeat_keyless; heartbeat_ms = 100), after
 *                  keeping it live for a second of answered probes.
 *                  With --no-keyless (heartbeat_keyless = false) A must
 *                  still have B live 5 s after the kill: nothing probes it.
 * Public API only. Exit 0 on success.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "te/te.h"

#define REGION (4u << 20)
#define TIMEOUT_MS 30000

static const uint64_t sizes[] = {0, 1, 4097, (1u << 20) + 3};
enum { NSIZES = sizeof(sizes) / sizeof(sizes[0]) };

struct hello {
    uint8_t addr[TE_ADDR_MAX];
    size_t addr_len;
    uint8_t desc[TE_DESC_MAX];
    size_t desc_len;
};

struct side {
    const char *name;
    te_engine *e;
    uint8_t *buf;
    te_mr *mr;
    te_mr_desc remote;
    te_peer peer;
    int fd;
    int no_add;                   /* setup() stops before te_peer_add */
    uint8_t raddr[TE_ADDR_MAX];   /* the other side's address */
    size_t raddr_len;
    int got_msg;
    uint8_t msg[64];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t pat(uint64_t o, uint32_t seed)
{
    uint64_t x = o * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
    return (uint8_t)(x >> 56 ^ x >> 23);
}

static int fail(struct side *s, const char *what, int rc)
{
    fprintf(stderr, "te-mlx5-pair %s: %s: %s (%s)\n", s->name, what,
            te_strerror(rc), te_last_error());
    return 1;
}

static int xfer(int fd, void *p, size_t n, int out)
{
    uint8_t *b = p;
    while (n) {
        ssize_t k = out ? write(fd, b, n) : read(fd, b, n);
        if (k <= 0)
            return -EPIPE;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static void on_msg(int group, te_peer from, const void *data, size_t len,
                   void *arg)
{
    struct side *s = arg;
    if (len <= sizeof(s->msg)) {
        memcpy(s->msg, data, len);
        __atomic_store_n(&s->got_msg, (int)len + 1, __ATOMIC_RELEASE);
    }
}

/* --block: the settings of guest-mlx5.sh's first conformance step. */
static int block_mode;
/* --sender-killed [--no-keyless]: heartbeats every 100 ms. */
static int probe_mode, no_keyless, b_reaped;
static const char *const block_keys[][2] = {
    {"idle_spin_us", "0"},       {"idle_block_max_ms", "0"},
    {"heartbeat_ms", "0"},       {"peer_timeout_ms", "0"},
    {"request_timeout_ms", "0"}, {"busy_wait", "block"}};

static int setup(struct side *s, const char *dev, const char *timeout,
                 const char *key)
{
    te_config *cfg = te_config_new();
    int rc = te_config_set(cfg, "engine", "plugin", "mlx5");
    if (!rc && key)
        rc = te_config_set(cfg, "engine", "auth_key", key);
    if (!rc)
        rc = te_config_set(cfg, "mlx5", "devices", dev);
    if (!rc)
        rc = te_config_set(cfg, "mlx5", "connect_timeout_ms", timeout);
    if (!rc)
        rc = te_config_set(cfg, "engine", "idle_spin_us", "10");
    for (size_t i = 0; block_mode && !rc &&
                       i < sizeof(block_keys) / sizeof(block_keys[0]); i++)
        rc = te_config_set(cfg, "engine", block_keys[i][0], block_keys[i][1]);
    if (!rc && probe_mode)
        rc = te_config_set(cfg, "engine", "heartbeat_ms", "100");
    if (!rc && no_keyless)
        rc = te_config_set(cfg, "engine", "heartbeat_keyless", "false");
    if (!rc)
        rc = te_engine_create(cfg, &s->e);
    te_config_free(cfg);
    if (rc)
        return fail(s, "engine", rc);
    s->buf = aligned_alloc(4096, REGION);
    memset(s->buf, 0, REGION);
    if ((rc = te_mr_reg(s->e, 0, s->buf, REGION,
                        TE_MR_REMOTE_WRITE | TE_MR_REMOTE_READ, TE_MEM_HOST,
                        &s->mr)) ||
        (rc = te_set_recv_handler(s->e, 0, on_msg, s)))
        return fail(s, "register", rc);
    /* Exchange address and descriptor, then add each other at once. */
    struct hello me, them;
    te_mr_desc d;
    me.addr_len = sizeof(me.addr);
    me.desc_len = sizeof(me.desc);
    if ((rc = te_engine_address(s->e, 0, me.addr, &me.addr_len)) ||
        (rc = te_mr_describe(s->mr, &d)) ||
        (rc = te_desc_serialize(&d, me.desc, &me.desc_len)))
        return fail(s, "address", rc);
    if (xfer(s->fd, &me, sizeof(me), 1) || xfer(s->fd, &them, sizeof(them), 0))
        return fail(s, "exchange", -EPIPE);
    if ((rc = te_desc_parse(them.desc, them.desc_len, &s->remote)))
        return fail(s, "descriptor", rc);
    memcpy(s->raddr, them.addr, them.addr_len);
    s->raddr_len = them.addr_len;
    if (s->no_add)
        return 0;
    if ((rc = te_peer_add(s->e, 0, them.addr, them.addr_len, &s->peer)))
        return fail(s, "peer_add", rc);
    return 0;
}

static void teardown(struct side *s)
{
    if (s->e) {
        if (s->mr)
            te_mr_dereg(s->e, s->mr);
        te_engine_destroy(s->e);
    }
    free(s->buf);
    s->e = NULL;
    s->mr = NULL;
    s->buf = NULL;
}

static int run(struct side *s, te_request *q, te_completion *c)
{
    int64_t id;
    double end = now_s() + TIMEOUT_MS / 1000.0;
    while ((id = te_submit(s->e, q)) == -EAGAIN && now_s() < end)
        usleep(100);
    if (id < 0)
        return (int)id;
    int k = te_poll_completions(s->e, c, 1, TIMEOUT_MS);
    return k == 1 ? 0 : -ETIMEDOUT;
}

static te_request req(struct side *s, uint32_t op, uint64_t loff,
                      uint64_t roff, uint64_t len)
{
    te_request q;
    te_request_init(&q, op);
    q.u.xfer.peer = s->peer;
    q.u.xfer.local = s->mr;
    q.u.xfer.local_off = loff;
    q.u.xfer.remote = &s->remote;
    q.u.xfer.remote_off = roff;
    q.u.xfer.len = len;
    return q;
}

/* A WRITE with an immediate. */
static te_request req_imm(struct side *s, uint64_t loff, uint64_t roff,
                          uint64_t len, uint32_t imm)
{
    te_request q = req(s, TE_OP_WRITE, loff, roff, len);
    q.flags = TE_F_IMM;
    q.imm = imm;
    return q;
}

/* run() a request that must succeed: 0, or 1 after saying what failed. */
static int run_ok(struct side *s, te_request *q, const char *what)
{
    te_completion c;
    int rc = run(s, q, &c);
    return rc || c.status ? fail(s, what, rc ? rc : c.status) : 0;
}

static int side_a(struct side *s)
{
    double t0 = now_s();
    int rc;
    for (int i = 0; i < NSIZES; i++) {
        for (uint64_t b = 0; b < sizes[i]; b++)
            s->buf[b] = pat(b, 10 + (uint32_t)i);
        te_request q = req_imm(s, 0, 0, sizes[i], 100 + (uint32_t)i);
        if (run_ok(s, &q, "write"))
            return 1;
        if (i == 0)
            printf("te-mlx5-pair: connected and first write done after "
                   "%.3f s\n", now_s() - t0);
        char ok;
        if (xfer(s->fd, &ok, 1, 0) || ok != 'y') /* B checked the bytes */
            return fail(s, "B's check of the write", -EILSEQ);
    }
    /* Read B's second half (B filled it with seed 77). */
    memset(s->buf, 0, 8192);
    te_request q = req(s, TE_OP_READ, 0, REGION / 2, 8000);
    if (run_ok(s, &q, "read"))
        return 1;
    for (uint64_t b = 0; b < 8000; b++)
        if (s->buf[b] != pat(REGION / 2 + b, 77))
            return fail(s, "read bytes", -EILSEQ);
    /* A message. */
    te_request_init(&q, TE_OP_SEND);
    q.u.send.peer = s->peer;
    q.u.send.buf = "hello over the veth";
    q.u.send.len = 20;
    if (run_ok(s, &q, "send"))
        return 1;
    /* B writes back with an immediate. */
    if ((rc = te_imm_wait(s->e, 555, 1, TIMEOUT_MS)))
        return fail(s, "imm from B", rc);
    for (uint64_t b = 0; b < 65536; b++)
        if (s->buf[REGION / 2 + b] != pat(b, 99))
            return fail(s, "B's write", -EILSEQ);
    printf("te-mlx5-pair: %d writes, a read, a message and a reverse write "
           "across the devices: OK (%.3f s)\n", NSIZES, now_s() - t0);
    return 0;
}

static int side_b(struct side *s)
{
    for (uint64_t b = 0; b < REGION / 2; b++)
        s->buf[REGION / 2 + b] = pat(REGION / 2 + b, 77);
    for (int i = 0; i < NSIZES; i++) {
        int rc = te_imm_wait(s->e, 100 + (uint32_t)i, 1, TIMEOUT_MS);
        char ok = 'y';
        if (rc) {
            fail(s, "imm", rc);
            ok = 'n';
        }
        for (uint64_t b = 0; b < sizes[i] && ok == 'y'; b++)
            if (s->buf[b] != pat(b, 10 + (uint32_t)i))
                ok = 'n';
        if (xfer(s->fd, &ok, 1, 1) || ok != 'y')
            return 1;
    }
    double end = now_s() + TIMEOUT_MS / 1000.0;
    while (!__atomic_load_n(&s->got_msg, __ATOMIC_ACQUIRE) && now_s() < end)
        usleep(1000);
    if (s->got_msg != 21 || memcmp(s->msg, "hello over the veth", 20))
        return fail(s, "message", -EILSEQ);
    uint8_t *src = s->buf + 8192;
    for (uint64_t b = 0; b < 65536; b++)
        src[b] = pat(b, 99);
    te_request q = req_imm(s, 8192, REGION / 2, 65536, 555);
    if (run_ok(s, &q, "reverse write"))
        return 1;
    char done;
    xfer(s->fd, &done, 1, 0); /* A finished */
    return 0;
}

/* Both sides: the peer is refused (a different key, or none), with the
 * reason; a write to it fails and the other side's memory stays
 * untouched. */
static int side_refused(struct side *s)
{
    double t0 = now_s(), end = t0 + 10;
    int st;
    while ((st = te_peer_status(s->e, 0, s->peer)) == 0 && now_s() < end)
        usleep(1000);
    if (st != -ECONNRESET)
        return fail(s, "peer not refused within 10 s", st ? st : -ETIMEDOUT);
    char why[512];
    snprintf(why, sizeof(why), "%s", te_last_error());
    printf("te-mlx5-pair %s: peer refused after %.3f s: %s\n", s->name,
           now_s() - t0, why);
    if (!strstr(why, "engine.auth_key"))
        return fail(s, "the refusal does not name engine.auth_key", -EPROTO);
    for (uint64_t b = 0; b < 4096; b++)
        s->buf[b] = 0xa5;
    te_request q = req_imm(s, 0, REGION / 2, 4096, 9);
    int64_t id = te_submit(s->e, &q);
    if (id >= 0) {
        te_completion c;
        if (te_poll_completions(s->e, &c, 1, TIMEOUT_MS) != 1)
            return fail(s, "write to a refused peer did not complete",
                        -ETIMEDOUT);
        if (c.status == 0)
            return fail(s, "write to a refused peer succeeded", -EPROTO);
    }
    /* Both sides tried to write 0xa5 into the other's second half; wait
     * for the other side's attempt to end, then look at ours. */
    char ok = 'y', theirs = 0;
    if (xfer(s->fd, &ok, 1, 1) || xfer(s->fd, &theirs, 1, 0))
        return fail(s, "exchange", -EPIPE);
    for (uint64_t b = REGION / 2; b < REGION / 2 + 4096; b++)
        if (s->buf[b] != 0)
            return fail(s, "a refused peer wrote into our memory", -EPROTO);
    return 0;
}

/* The handshake cannot complete: a write fails within the deadline. */
static int side_a_down(struct side *s)
{
    double t0 = now_s();
    te_request q = req_imm(s, 0, 0, 4096, 7);
    te_completion c;
    int rc = run(s, &q, &c);
    if (rc)
        return fail(s, "write to an unreachable peer did not complete", rc);
    if (c.status == 0)
        return fail(s, "write to an unreachable peer succeeded", -EPROTO);
    printf("te-mlx5-pair: unreachable peer: write failed after %.3f s: %s\n",
           now_s() - t0, c.reason);
    /* The peer is down, and its reason is the plugin's own words (said
     * in the poll that reported it, mx_plugin.c taking). */
    int st = te_peer_status(s->e, 0, s->peer);
    if (st != -ECONNRESET)
        return fail(s, "unreachable peer not down after its write failed",
                    st ? st : -EPROTO);
    printf("te-mlx5-pair: unreachable peer: %s\n", te_last_error());
    if (!strstr(te_last_error(), "not connected within connect_timeout_ms"))
        return fail(s, "the peer's reason does not name the connect timeout",
                    -EPROTO);
    return 0;
}

/* --sender-killed, B: one zero-length immediate to A, then wait for the
 * kill. */
static int side_b_sender(struct side *s)
{
    te_request q = req_imm(s, 0, 0, 0, 42);
    if (run_ok(s, &q, "write"))
        return 1;
    char w = 'w';
    if (xfer(s->fd, &w, 1, 1))
        return fail(s, "exchange", -EPIPE);
    xfer(s->fd, &w, 1, 0); /* the kill comes first; EOF if A gave up */
    return 1;
}

/* --sender-killed, A: takes B's immediate, never writes to B, kills it. */
static int side_a_receiver(struct side *s, pid_t b)
{
    int rc = te_imm_wait(s->e, 42, 1, TIMEOUT_MS);
    char w;
    if (rc || xfer(s->fd, &w, 1, 0))
        return fail(s, "B's immediate", rc ? rc : -EPIPE);
    usleep(1000 * 1000); /* ten heartbeat periods, B alive */
    if ((rc = te_peer_status(s->e, 0, s->peer)))
        return fail(s, "B down while alive", rc);
    kill(b, SIGKILL);
    waitpid(b, NULL, 0);
    b_reaped = 1;
    double t0 = now_s(), end = t0 + (no_keyless ? 5 : 30);
    int st;
    while ((st = te_peer_status(s->e, 0, s->peer)) == 0 && now_s() < end)
        usleep(1000);
    if (no_keyless) {
        if (st)
            return fail(s, "B found down without keyless heartbeats", st);
        printf("te-mlx5-pair: heartbeat_keyless = false: killed sender "
               "still live for its receiver after 5 s (as expected)\n");
        return 0;
    }
    if (st != -ECONNRESET)
        return fail(s, "killed sender not found down within 30 s",
                    st ? st : -ETIMEDOUT);
    printf("te-mlx5-pair: killed sender found down by its receiver's "
           "heartbeats after %.3f s: %s\n", now_s() - t0, te_last_error());
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/*
 * --setup-runs: fresh engines each round (a new NIC, so a real handshake);
 * both ready, then at once A (and B, unless passive) add each other, and A
 * times te_peer_add until its first write, 0 bytes with an immediate,
 * completed: the handshake plus one RC round trip.
 */
static int timing(struct side *s, int is_a, const char *dev, const char *tmo,
                  const char *key, int runs, int passive_b)
{
    double t[1000];
    if (runs > 1000)
        runs = 1000;
    for (int r = 0; r < runs; r++) {
        s->no_add = 1;
        if (setup(s, dev, tmo, key))
            return 1;
        char go = 'g';
        if (xfer(s->fd, &go, 1, 1) || xfer(s->fd, &go, 1, 0))
            return fail(s, "barrier", -EPIPE);
        double t0 = now_s();
        int rc = 0;
        if (is_a || !passive_b)
            rc = te_peer_add(s->e, 0, s->raddr, s->raddr_len, &s->peer);
        if (rc)
            return fail(s, "peer_add", rc);
        if (is_a) {
            te_request q = req_imm(s, 0, 0, 0, 1000 + (uint32_t)r);
            if (run_ok(s, &q, "first write"))
                return 1;
            t[r] = now_s() - t0;
            printf("te-mlx5-pair: set-up round %d: %.3f ms\n", r + 1,
                   t[r] * 1e3);
        }
        char done = 'd';
        if (xfer(s->fd, &done, 1, is_a))
            return fail(s, "round end", -EPIPE);
        teardown(s);
    }
    if (is_a) {
        qsort(t, (size_t)runs, sizeof(t[0]), cmp_double);
        double med = runs % 2 ? t[runs / 2]
                              : (t[runs / 2 - 1] + t[runs / 2]) / 2;
        printf("te-mlx5-pair: set-up (te_peer_add to first write done, %s, "
               "%s): median %.3f ms of %d runs, min %.3f, max %.3f\n",
               key ? "with engine.auth_key" : "no secret",
               passive_b ? "A adds B" : "both add each other", med * 1e3,
               runs, t[0] * 1e3, t[runs - 1] * 1e3);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *da = "rxe0", *db = "rxe1", *tmo = "10000";
    const char *ka = NULL, *kb = NULL;
    int expect_down = 0, expect_refused = 0, runs = 0, passive_b = 0, o;
    static const struct option opts[] = {{"dev-a", 1, 0, 'a'},
                                         {"dev-b", 1, 0, 'b'},
                                         {"connect-timeout-ms", 1, 0, 't'},
                                         {"expect-down", 0, 0, 'd'},
                                         {"key-a", 1, 0, 'A'},
                                         {"key-b", 1, 0, 'B'},
                                         {"expect-refused", 0, 0, 'r'},
                                         {"setup-runs", 1, 0, 'n'},
                                         {"passive-b", 0, 0, 'p'},
                                         {"block", 0, 0, 'w'},
                                         {"sender-killed", 0, 0, 'k'},
                                         {"no-keyless", 0, 0, 'K'},
                                         {0, 0, 0, 0}};
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'a': da = optarg; break;
        case 'b': db = optarg; break;
        case 't': tmo = optarg; break;
        case 'd': expect_down = 1; break;
        case 'A': ka = optarg; break;
        case 'B': kb = optarg; break;
        case 'r': expect_refused = 1; break;
        case 'n': runs = atoi(optarg); break;
        case 'p': passive_b = 1; break;
        case 'w': block_mode = 1; break;
        case 'k': probe_mode = 1; break;
        case 'K': no_keyless = 1; break;
        default:
            fprintf(stderr, "usage: te-mlx5-pair [--dev-a D] [--dev-b D] "
                            "[--connect-timeout-ms N] [--expect-down] "
                            "[--key-a K] [--key-b K] [--expect-refused] "
                            "[--setup-runs N [--passive-b]] [--block] "
                            "[--sender-killed [--no-keyless]]\n");
            return 2;
        }
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        return 1;
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    struct side s = {.name = pid ? "A" : "B", .fd = pid ? sv[0] : sv[1]};
    int rc;
    if (probe_mode) {
        if (!(rc = setup(&s, pid ? da : db, tmo, NULL)))
            rc = pid ? side_a_receiver(&s, pid) : side_b_sender(&s);
        if (!pid)
            _exit(rc); /* B reaches here only on failure */
        if (!b_reaped) { /* A failed before the kill */
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        teardown(&s);
        close(s.fd);
        return rc;
    }
    if (runs > 0)
        rc = timing(&s, pid != 0, pid ? da : db, tmo, pid ? ka : kb, runs,
                    passive_b);
    else if (!(rc = setup(&s, pid ? da : db, tmo, pid ? ka : kb)))
        rc = expect_refused ? side_refused(&s)
             : pid ? (expect_down ? side_a_down(&s) : side_a(&s))
                   : (expect_down ? 0 : side_b(&s));
    if (pid) {
        char done = 'x';
        xfer(s.fd, &done, 1, 1);
    } else if (expect_down) {
        char done; /* keep B alive (and unreachable) until A is done */
        xfer(s.fd, &done, 1, 0);
    }
    teardown(&s);
    if (pid) {
        close(s.fd); /* B, if still waiting on A (A failed), reads EOF */
        int st = 0;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st))
            rc = 1;
    }
    return rc;
}
