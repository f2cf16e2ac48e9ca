/* A same-host shm peer that dies holding the spin lock of its own shared
 * region (libfabric 1.17 keeps one there; plugins/efa/efa_shm_guard.h).
 * The peer is a forked engine over efa/shm; once peered, it takes its
 * region's lock itself (the state a SIGKILL in the middle of its provider's
 * progress leaves), or ours (a SIGKILL while it queued a command to us),
 * and kills itself 300 ms later. The write the parent
 * submits meanwhile enters the provider and spins on that lock; without the
 * plugin's guard it would spin forever (and te_engine_destroy never
 * return). With it: the lock is released after the death, the write fails
 * (the peer is down), the guard says so in one warning, and the engine
 * closes. Skipped (77) where the efa plugin or libfabric's shm is absent,
 * or the region is not the layout the guard knows. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "te/te.h"
#include "te_test.h"

enum { LEN = 64 << 10, DEADLINE_MS = 20000, SUICIDE_MS = 300 };

/* libfabric 1.17 shm region: version 4, owner pid at 4, lock at 0x18. */
enum { SMR_VERSION = 4, SMR_PID_OFF = 4, SMR_LOCK_OFF = 0x18 };

/* No timers of the core: only the transport may end the write. */
static const char *const INI =
    "[engine]\nplugin = efa\nheartbeat_ms = 0\npeer_timeout_ms = 0\n"
    "request_timeout_ms = 0\nlog_level = 1\n[efa]\nprovider = shm\n";

/* The first page of process pid's (only) shm region, or NULL. */
static uint8_t *region_of(pid_t pid)
{
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "te-%010u-", (unsigned)pid);
    DIR *d = opendir("/dev/shm");
    struct dirent *de;
    uint8_t *p = NULL;
    while (d && !p && (de = readdir(d))) {
        if (strncmp(de->d_name, prefix, strlen(prefix)))
            continue;
        char path[300];
        snprintf(path, sizeof(path), "/%s", de->d_name);
        int fd = shm_open(path, O_RDWR, 0);
        if (fd < 0)
            continue;
        p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED)
            p = NULL;
    }
    if (d)
        closedir(d);
    int32_t owner = 0;
    if (p)
        memcpy(&owner, p + SMR_PID_OFF, sizeof(owner));
    if (p && (p[0] != SMR_VERSION || owner != (int32_t)pid)) {
        munmap(p, 4096);
        p = NULL;
    }
    return p;
}

/* The peer: serves one write, then takes the lock of its own region
 * (whose = 'p') or of the parent's (whose = 't': as if it died queueing a
 * command to the parent), says so ('l', or 's' when the region is not the
 * known layout), and dies. */
static int peer(int to_parent, int from_parent, char whose)
{
    te_engine *e;
    uint8_t *buf = aligned_alloc(4096, LEN);
    te_mr *mr = NULL;
    te_mr_desc d;
    if (te_test_engine_try(INI, &e) || !buf ||
        te_mr_reg(e, 0, buf, LEN, TE_MR_REMOTE_WRITE, TE_MEM_HOST, &mr) ||
        te_mr_describe(mr, &d) || te_test_send_endpoint(to_parent, e, &d)) {
        fprintf(stderr, "peer: %s\n", te_last_error());
        return 2;
    }
    char go;
    if (te_test_read_all(from_parent, &go, 1))
        return 2;
    uint8_t *region = region_of(whose == 'p' ? getpid() : getppid());
    char said = region ? 'l' : 's';
    if (region)
        pthread_spin_lock((pthread_spinlock_t *)(void *)(region + SMR_LOCK_OFF));
    te_test_write_all(to_parent, &said, 1);
    if (!region)
        return 0;
    te_test_sleep_ms(SUICIDE_MS);
    raise(SIGKILL);
    return 2;
}

static atomic_int released_theirs, released_ours;

static void sink(int level, const char *origin, const char *msg, void *arg)
{
    (void)arg;
    if (level <= 1 && !strcmp(origin, "efa") &&
        strstr(msg, "died holding the lock of its shm region"))
        atomic_fetch_add(&released_theirs, 1);
    if (level <= 1 && !strcmp(origin, "efa") &&
        strstr(msg, "our shm region's lock stayed held"))
        atomic_fetch_add(&released_ours, 1);
    fprintf(stderr, "%s: %s\n", origin, msg);
}

/* whose: 'p' the peer's region, 't' this process's. */
static void dead_holder(char whose)
{
    atomic_store(&released_theirs, 0);
    atomic_store(&released_ours, 0);
    int wr, rd;
    pid_t child = te_test_fork(&wr, &rd);
    if (child == 0)
        _exit(peer(wr, rd, whose));
    uint8_t addr[TE_ADDR_MAX];
    size_t alen;
    te_mr_desc d;
    ck_assert_int_eq(te_test_recv_endpoint(rd, addr, &alen, &d), 0);
    te_set_log_fn(sink, NULL);
    te_engine *e = te_test_engine(INI);
    uint8_t *src = aligned_alloc(4096, LEN);
    memset(src, 7, LEN);
    te_mr *mr = te_test_reg(e, src, LEN, 0, NULL);
    te_peer p;
    ck_assert_msg(te_peer_add(e, 0, addr, alen, &p) == 0, "%s",
                  te_last_error());
    /* Peered for real: its region is mapped here before it locks. */
    te_request r = te_test_write(p, mr, &d, LEN, 0);
    ck_assert_msg(te_submit(e, &r) > 0, "%s", te_last_error());
    te_completion c = te_test_completion(e, DEADLINE_MS);
    ck_assert_msg(c.status == 0, "first write: %s", c.reason);

    char go = 'g', said = 0;
    ck_assert_int_eq(te_test_write_all(wr, &go, 1), 0);
    ck_assert_int_eq(te_test_read_all(rd, &said, 1), 0);
    if (said == 's') {
        waitpid(child, NULL, 0);
        te_engine_destroy(e);
        te_set_log_fn(NULL, NULL);
        free(src);
        printf("SKIP: the shm region is not libfabric 1.17's layout\n");
        return;
    }
    ck_assert_int_eq(said, 'l');
    /* 'p': enters the provider (from this thread or the worker) and spins
     * on the peer's lock; 't': our own progress spins on our lock. Until
     * the guard releases it after the death. */
    int64_t t0 = te_test_now_ms();
    int64_t id = te_submit(e, &r);
    int st = 0;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
                  "the peer did not die by its SIGKILL (status 0x%x)", st);
    if (id > 0) {
        c = te_test_completion(e, DEADLINE_MS);
        /* 't': the peer could serve it before it died (its own lock was
         * free); only our completions waited for our lock. */
        ck_assert_msg(c.status < 0 || whose == 't',
                      "a write to a dead peer succeeded");
    } else {
        ck_assert_msg(id == -ECONNRESET, "submit: %lld (%s)", (long long)id,
                      te_last_error());
    }
    ck_assert_msg(te_test_now_ms() - t0 < DEADLINE_MS, "the write took %lld ms",
                  (long long)(te_test_now_ms() - t0));
    ck_assert_int_eq(te_test_wait_int(whose == 'p' ? &released_theirs
                                                   : &released_ours,
                                      1, DEADLINE_MS), 1);
    ck_assert_int_eq(te_mr_dereg(e, mr), 0);
    te_engine_destroy(e);
    te_set_log_fn(NULL, NULL);
    free(src);
    close(rd);
    close(wr);
}

START_TEST(dead_peer_own_lock_is_released)
{
    dead_holder('p');
}
END_TEST

START_TEST(dead_peer_holding_our_lock_is_released)
{
    dead_holder('t');
}
END_TEST

int main(void)
{
    te_test_require(INI,
                    "efa plugin over libfabric shm");
    return TE_TEST_RUN("efa_shm_dead_lock",
                       TE_TCASE_FULL("dead_lock", 60, NULL, NULL,
                                     dead_peer_own_lock_is_released,
                                     dead_peer_holding_our_lock_is_released));
}
