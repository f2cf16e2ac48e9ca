/*
 * Job authentication (core/auth.c, plugins/loopback/lb_auth.c,
 * docs/security.md): where the secret comes from (text, file, environment,
 * refused files), the MAC itself (RFC 4231 vector, wrong key, bit flip),
 * and loopback connection set-up with the same key (transfers work), a
 * different key and no key on one side (refused on both sides, with the
 * reason, and nothing written), in one process and across two; and a raw
 * client that cannot prove the key, which the target must drop; efa (shm,
 * tcp;ofi_rxm), which cannot authenticate yet, must refuse to start.
 */
#define _GNU_SOURCE /* memmem, memfd_create, file seals */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth.h"
#include "te_test.h"

#define KEY_A "job-secret-aaaaaaaaaaaaaaaa"
#define KEY_B "job-secret-bbbbbbbbbbbbbbbb"

/* --------------------------------------------------------- key sources */

static struct te_auth *load_ini(const char *ini, int *rc)
{
    te_config *c = te_config_new();
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(te_config_load_string(c, ini), 0);
    struct te_auth *a = NULL;
    *rc = te_auth_load(c, &a);
    te_config_free(c);
    return a;
}

static void mac_eq(struct te_auth *x, struct te_auth *y, int want_equal)
{
    uint8_t mx[TE_PLUGIN_AUTH_MAC_LEN], my[TE_PLUGIN_AUTH_MAC_LEN];
    ck_assert_int_eq(te_auth_mac(x, "msg", 3, mx), 0);
    ck_assert_int_eq(te_auth_mac(y, "msg", 3, my), 0);
    ck_assert_int_eq(memcmp(mx, my, sizeof mx) == 0, want_equal);
}

/* A key file of the given text and mode; returns its path (static). */
static const char *key_file(const char *text, mode_t mode)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/te-auth-test-%d", (int)getpid());
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(te_test_write_all(fd, text, strlen(text)), 0);
    ck_assert_int_eq(fchmod(fd, mode), 0);
    close(fd);
    return path;
}

START_TEST(no_key_no_auth)
{
    int rc;
    ck_assert_ptr_null(load_ini("[engine]\n", &rc));
    ck_assert_int_eq(rc, 0);
    uint8_t mac[TE_PLUGIN_AUTH_MAC_LEN];
    ck_assert_int_eq(te_auth_mac(NULL, "x", 1, mac), -ENOKEY);
    ck_assert_int_eq(te_auth_verify(NULL, "x", 1, mac), -ENOKEY);
}
END_TEST

START_TEST(text_key_and_env_override)
{
    int rc;
    struct te_auth *a = load_ini("[engine]\nauth_key = " KEY_A "\n", &rc);
    ck_assert_msg(a, "%s", te_last_error());
    struct te_auth *ref = te_auth_new(KEY_A, strlen(KEY_A));
    mac_eq(a, ref, 1);
    setenv("TE_ENGINE_AUTH_KEY", KEY_B, 1);
    struct te_auth *b = load_ini("[engine]\nauth_key = " KEY_A "\n", &rc);
    unsetenv("TE_ENGINE_AUTH_KEY");
    ck_assert_ptr_nonnull(b);
    mac_eq(b, ref, 0); /* the environment's key, not the file's */
    te_auth_free(a);
    te_auth_free(b);
    te_auth_free(ref);
}
END_TEST

START_TEST(short_key_and_both_refused)
{
    int rc;
    ck_assert_ptr_null(load_ini("[engine]\nauth_key = short\n", &rc));
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "at least 16"));
    ck_assert_ptr_null(strstr(te_last_error(), "short")); /* never shown */
    ck_assert_ptr_null(load_ini("[engine]\nauth_key = " KEY_A
                                "\nauth_key_file = /nonexistent\n", &rc));
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_ptr_nonnull(strstr(te_last_error(), "both set"));
}
END_TEST

START_TEST(key_from_file)
{
    char ini[128];
    int rc;
    const char *path = key_file(KEY_A "\n", 0600);
    snprintf(ini, sizeof ini, "[engine]\nauth_key_file = %s\n", path);
    struct te_auth *a = load_ini(ini, &rc);
    ck_assert_msg(a, "%s", te_last_error());
    struct te_auth *ref = te_auth_new(KEY_A, strlen(KEY_A));
    mac_eq(a, ref, 1); /* the newline is not part of the secret */
    te_auth_free(a);
    te_auth_free(ref);

    path = key_file(KEY_A, 0640);
    ck_assert_ptr_null(load_ini(ini, &rc));
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(te_last_error(), "chmod 600") &&
                  strstr(te_last_error(), "0640"), "%s", te_last_error());
    path = key_file(KEY_A, 0604);
    ck_assert_ptr_null(load_ini(ini, &rc));
    ck_assert_int_eq(rc, -EINVAL);
    unlink(path);
    ck_assert_ptr_null(load_ini(ini, &rc));
    ck_assert_int_eq(rc, -ENOENT);
    ck_assert_ptr_nonnull(strstr(te_last_error(), path));
}
END_TEST

START_TEST(mac_rfc4231_and_verify)
{
    /* RFC 4231, test case 2 (te_auth_new skips the length floor). */
    static const uint8_t want[32] = {
        0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24,
        0x26, 0x08, 0x95, 0x75, 0xc7, 0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27,
        0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
    const char *msg = "what do ya want for nothing?";
    struct te_auth *a = te_auth_new("Jefe", 4);
    uint8_t mac[32];
    ck_assert_int_eq(te_auth_mac(a, msg, strlen(msg), mac), 0);
    ck_assert_mem_eq(mac, want, 32);
    ck_assert_int_eq(te_auth_verify(a, msg, strlen(msg), mac), 0);
    mac[31] ^= 1;
    ck_assert_int_eq(te_auth_verify(a, msg, strlen(msg), mac), -EACCES);
    mac[31] ^= 1;
    struct te_auth *b = te_auth_new("Jeff", 4);
    ck_assert_int_eq(te_auth_verify(b, msg, strlen(msg), mac), -EACCES);
    te_auth_free(a);
    te_auth_free(b);
}
END_TEST

/* ------------------------------------------------- loopback, one process */

static const char *ini_with(const char *key)
{
    static char buf[2][128];
    static int k;
    char *b = buf[k++ & 1];
    snprintf(b, sizeof buf[0], "[engine]\nplugin = loopback\n%s%s\n",
             key ? "auth_key = " : "", key ? key : "");
    return b;
}

START_TEST(inprocess_same_key_writes)
{
    te_test_pair x;
    te_test_pair_open(&x, ini_with(KEY_A), ini_with(KEY_A), 4096);
    memset(x.src, 0x5a, x.size);
    te_request r = te_test_pair_write(&x, x.size, 5000);
    ck_assert_int_ge(te_submit(x.a, &r), 0);
    te_test_complete(x.a, 1, 5000);
    ck_assert_int_eq(x.dst[100], 0x5a);
    te_test_pair_close(&x);
}
END_TEST

/* Key pairs that must be refused: (a's, b's). */
static const char *const refused[][2] = {
    {KEY_A, KEY_B}, {KEY_A, NULL}, {NULL, KEY_A}};

START_TEST(inprocess_refused)
{
    te_engine *a = te_test_engine(ini_with(refused[_i][0]));
    te_engine *b = te_test_engine(ini_with(refused[_i][1]));
    uint8_t addr[TE_ADDR_MAX];
    size_t len = sizeof addr;
    ck_assert_int_eq(te_engine_address(b, 0, addr, &len), 0);
    te_peer p;
    ck_assert_int_eq(te_peer_add(a, 0, addr, len, &p), -EACCES);
    ck_assert_msg(strstr(te_last_error(), "authentication"), "%s",
                  te_last_error());
    te_engine_destroy(a);
    te_engine_destroy(b);
}
END_TEST

/* ------------------------------------------------ loopback, two processes */

static atomic_int auth_logged;

static void watch_log(int level, const char *origin, const char *msg,
                      void *arg)
{
    (void)level;
    (void)origin;
    (void)arg;
    if (strstr(msg, "authentication"))
        atomic_store(&auth_logged, 1);
}

/* The child: an engine with key (or none), a zeroed writable region, its
 * endpoint to the parent; after the parent's byte, it answers whether its
 * region holds the parent's bytes (1) or zeros (0), and whether it logged
 * an authentication failure. */
static void target_child(const char *key, int wr, int rd)
{
    te_set_log_fn(watch_log, NULL);
    te_engine *e;
    static uint8_t buf[4096];
    if (te_test_engine_try(ini_with(key), &e))
        _exit(2);
    te_mr *mr;
    te_mr_desc d;
    if (te_mr_reg(e, 0, buf, sizeof buf, TE_MR_REMOTE_WRITE, TE_MEM_HOST,
                  &mr) || te_mr_describe(mr, &d) ||
        te_test_send_endpoint(wr, e, &d))
        _exit(2);
    char go;
    if (te_test_read_all(rd, &go, 1))
        _exit(2);
    /* A refusal is logged by the worker: give it a bounded while. */
    if (go == 'r')
        te_test_wait_int(&auth_logged, 1, 10000);
    uint8_t res[2] = {buf[100] == 0x5a, (uint8_t)atomic_load(&auth_logged)};
    if (te_test_write_all(wr, res, 2))
        _exit(2);
    te_mr_dereg(e, mr);
    te_engine_destroy(e);
    _exit(0);
}

/* Parent with key a, child with key b; expect = 0: transfers work, else
 * refused on both sides. */
static void two_process(const char *ka, const char *kb, int expect_ok)
{
    int wr, rd;
    pid_t pid = te_test_fork(&wr, &rd);
    if (pid == 0)
        target_child(kb, wr, rd);
    atomic_store(&auth_logged, 0);
    te_set_log_fn(watch_log, NULL);
    uint8_t addr[TE_ADDR_MAX];
    size_t alen;
    te_mr_desc d;
    ck_assert_int_eq(te_test_recv_endpoint(rd, addr, &alen, &d), 0);
    te_engine *e = te_test_engine(ini_with(ka));
    static uint8_t src[4096];
    memset(src, 0x5a, sizeof src);
    te_mr *smr = te_test_reg(e, src, sizeof src, TE_MR_LOCAL, NULL);
    te_peer p;
    int rc = te_peer_add(e, 0, addr, alen, &p);
    if (expect_ok || rc == 0) {
        ck_assert_msg(rc == 0, "%s", te_last_error());
        te_request r = te_test_write(p, smr, &d, sizeof src, 5000);
        int64_t id = te_submit(e, &r);
        if (expect_ok) {
            ck_assert_msg(id >= 0, "%s", te_last_error());
            te_completion c = te_test_completion(e, 10000);
            ck_assert_msg(c.status == 0, "%s", te_strerror(c.status));
        } else if (id >= 0) { /* no key here: refused after peer_add */
            ck_assert_int_ne(te_test_completion(e, 10000).status, 0);
        }
        /* The peer's reason names the refusal, not just its failed ops. */
        if (!expect_ok) {
            ck_assert_int_eq(te_test_wait_peer_down(e, 0, p, 10000),
                             -ECONNRESET);
            ck_assert_msg(strstr(te_last_error(), "failed authentication"),
                          "%s", te_last_error());
        }
    } else {
        ck_assert_int_eq(rc, -EACCES);
        ck_assert_msg(strstr(te_last_error(), "authentication"), "%s",
                      te_last_error());
    }
    if (!expect_ok) /* our side named the refusal too */
        ck_assert(te_test_wait_int(&auth_logged, 1, 10000) ||
                  strstr(te_last_error(), "authentication"));
    char go = expect_ok ? 'k' : 'r';
    ck_assert_int_eq(te_test_write_all(wr, &go, 1), 0);
    uint8_t res[2];
    ck_assert_int_eq(te_test_read_all(rd, res, 2), 0);
    ck_assert_int_eq(res[0], expect_ok); /* nothing landed when refused */
    ck_assert_int_eq(res[1], !expect_ok);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    te_set_log_fn(NULL, NULL);
    te_mr_dereg(e, smr);
    te_engine_destroy(e);
    close(wr);
    close(rd);
}

START_TEST(twoproc_same_key) { two_process(KEY_A, KEY_A, 1); }
END_TEST

START_TEST(twoproc_refused)
{
    two_process(refused[_i][0], refused[_i][1], 0);
}
END_TEST

/* ------------------------------------------- a hostile loopback initiator */

/* The loopback wire formats as the plugin defines them (lb_internal.h,
 * lb_auth.c), written out here as an outsider would. */
struct rogue_hello {
    uint32_t magic, version, pid, nic_index;
    uint64_t nic_id, target_nic_id, shm_size;
    uint32_t auth, reserved;
    uint8_t nonce[16];
};
struct rogue_auth {
    uint32_t magic, type;
    uint8_t nonce[16];
    uint8_t mac[32];
};

/* A raw client that follows the protocol up to the proof, which it cannot
 * make without the key: the target must drop it (not adopt the channel,
 * whose requests it would then execute) and say why. */
START_TEST(rogue_initiator_refused)
{
    atomic_store(&auth_logged, 0);
    te_set_log_fn(watch_log, NULL);
    te_engine *t = te_test_engine(ini_with(KEY_A));
    uint8_t addr[TE_ADDR_MAX];
    size_t len = sizeof addr;
    ck_assert_int_eq(te_engine_address(t, 0, addr, &len), 0);
    /* the plugin's address inside: its socket name and, 24 bytes before
     * the name, the lb_addr whose nic_id is at offset 16 */
    const uint8_t *name = memmem(addr, len, "te-lb-", 6);
    ck_assert_ptr_nonnull(name);
    uint64_t nic_id;
    memcpy(&nic_id, name - 24 + 16, sizeof nic_id);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t nl = strnlen((const char *)name, sizeof sa.sun_path - 2);
    memcpy(sa.sun_path + 1, name, nl);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa,
                             (socklen_t)(offsetof(struct sockaddr_un,
                                                  sun_path) + 1 + nl)), 0);
    /* channel memory that passes the target's checks (magic, version,
     * ring capacity 16 within the size), sealed like the plugin's */
    const size_t size = 64 << 10;
    int mfd = memfd_create("rogue", MFD_ALLOW_SEALING);
    ck_assert_int_ge(mfd, 0);
    ck_assert_int_eq(ftruncate(mfd, (off_t)size), 0);
    uint32_t *hdr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED,
                         mfd, 0);
    ck_assert(hdr != MAP_FAILED);
    hdr[0] = 0x4d484c54u; /* LB_SHM_MAGIC */
    hdr[1] = 3;           /* LB_SHM_VERSION */
    hdr[2] = 16;          /* cap */
    ck_assert_int_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
                                                 F_SEAL_SEAL), 0);
    struct rogue_hello h = {.magic = 0x4c484c54u, .version = 1,
                            .pid = (uint32_t)getpid(), .nic_id = 77,
                            .target_nic_id = nic_id, .shm_size = size,
                            .auth = 1};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    memset(&cm, 0, sizeof cm);
    struct iovec iov = {&h, sizeof h};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &mfd, sizeof(int));
    ck_assert_int_eq(sendmsg(fd, &msg, 0), (ssize_t)sizeof h);
    close(mfd);

    struct pollfd pf = {fd, POLLIN, 0};
    struct rogue_auth w;
    ck_assert_int_eq(poll(&pf, 1, 10000), 1);
    ck_assert_int_eq(recv(fd, &w, sizeof w, 0), (ssize_t)sizeof w);
    ck_assert_int_eq(w.type, 1); /* a challenge */
    w.type = 2;                  /* a proof it cannot compute */
    memset(w.mac, 0xa5, sizeof w.mac);
    ck_assert_int_eq(send(fd, &w, sizeof w, 0), (ssize_t)sizeof w);
    /* refused: the target closes the connection and marks the memory */
    ck_assert_int_eq(poll(&pf, 1, 10000), 1);
    char ch;
    ck_assert_int_eq(recv(fd, &ch, 1, 0), 0);
    ck_assert_uint_eq(hdr[7], 3); /* tgt_state = LB_ST_REFUSED */
    ck_assert(te_test_wait_int(&auth_logged, 1, 10000));
    close(fd);
    munmap(hdr, size);
    te_set_log_fn(NULL, NULL);
    te_engine_destroy(t);
}
END_TEST

/* ------------------------------------------------- efa: authenticates */

/* efa authenticates its peers (docs/security.md; tests/unit/test_efa_auth.c
 * and the efa_conformance_*_auth runs test the handshake): an engine with a
 * secret starts over libfabric's shm and tcp;ofi_rxm (before, it refused
 * to, -ENOTSUP); a provider that cannot start here is skipped. */
START_TEST(efa_starts_with_secret)
{
    static const char *const prov[] = {
        "provider = shm\n",
        "provider = tcp;ofi_rxm\nnode = 127.0.0.1\n"};
    char ini[256];
    snprintf(ini, sizeof ini, "[engine]\nplugin = efa\n[efa]\n%s", prov[_i]);
    te_engine *e;
    if (te_test_engine_try(ini, &e)) {
        printf("SKIP: efa %s not available: %s\n", prov[_i], te_last_error());
        return;
    }
    te_engine_destroy(e);
    snprintf(ini, sizeof ini, "[engine]\nplugin = efa\nauth_key = " KEY_A
             "\n[efa]\n%s", prov[_i]);
    ck_assert_msg(te_test_engine_try(ini, &e) == 0, "%s", te_last_error());
    te_engine_destroy(e);
}
END_TEST

int main(void)
{
    return TE_TEST_RUN(
        "auth",
        TE_TCASE("keys", no_key_no_auth, text_key_and_env_override,
                 short_key_and_both_refused, key_from_file,
                 mac_rfc4231_and_verify),
        {"loopback", TE_TESTS(inprocess_same_key_writes,
                              rogue_initiator_refused), 30, NULL, NULL,
         TE_TESTS(inprocess_refused), 3},
        {"loopback_twoproc", TE_TESTS(twoproc_same_key), 60, NULL, NULL,
         TE_TESTS(twoproc_refused), 3},
        {"efa", NULL, 30, NULL, NULL, TE_TESTS(efa_starts_with_secret), 2});
}
