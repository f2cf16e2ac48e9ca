/* The shm guard's count of watched processes seen dead
 * (plugins/efa/efa_shm_guard.h, efa_shm_guard_deaths): what lets a post to
 * a guarded same-host peer skip reading its pidfd (efa_post.c). The guard
 * is compiled in here, without libfabric: a region of the layout it knows
 * (version 4, owner pid) is made by hand in /dev/shm for a forked child.
 * The count must not move while the child lives, and must move once it
 * exits, without anybody polling but the guard. "twoproc": a forked child
 * (the tsan-twoproc pass, docs/reliability.md). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "efa_shm_guard.h"
#include "te_test.h"

enum { DEADLINE_MS = 10000 };

static const struct te_plugin_host no_host; /* no log(): lines dropped */

/* A region named like the plugin's, of pid's, in the layout the guard
 * knows: version 4 at 0, the owner's pid at 4, a free lock at 0x18. */
static void make_region(const char *name, pid_t pid)
{
    char path[96];
    snprintf(path, sizeof(path), "/%s", name);
    int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    ck_assert_msg(fd >= 0, "shm_open %s", path);
    ck_assert_int_eq(ftruncate(fd, 4096), 0);
    uint8_t *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert(p != MAP_FAILED);
    close(fd);
    p[0] = 4;
    int32_t owner = (int32_t)pid;
    memcpy(p + 4, &owner, sizeof(owner));
    pthread_spin_init((pthread_spinlock_t *)(void *)(p + 0x18),
                      PTHREAD_PROCESS_SHARED);
    munmap(p, 4096);
}

START_TEST(a_watched_death_moves_the_count)
{
    int wr, rd;
    pid_t child = te_test_fork(&wr, &rd);
    if (child == 0) {
        char go;
        te_test_read_all(rd, &go, 1); /* lives until told */
        _exit(0);
    }
    char name[64];
    snprintf(name, sizeof(name), "te-guard-test-%d", (int)getpid());
    make_region(name, child);
    int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
    ck_assert_msg(pidfd >= 0, "pidfd_open");
    static const char owner = 0;
    uint64_t before = efa_shm_guard_deaths();
    ck_assert_int_eq(efa_shm_guard_watch(&owner, &no_host, "test", name,
                                         strlen(name), (uint32_t)child,
                                         pidfd), 0);
    te_test_sleep_ms(100); /* the guard polls the live child's pidfd */
    ck_assert_msg(efa_shm_guard_deaths() == before,
                  "the count moved while the watched process lived");

    char go = 'g';
    ck_assert_int_eq(te_test_write_all(wr, &go, 1), 0);
    ck_assert_int_eq(waitpid(child, NULL, 0), child);
    int64_t t0 = te_test_now_ms();
    while (efa_shm_guard_deaths() == before &&
           te_test_now_ms() - t0 < DEADLINE_MS)
        te_test_sleep_ms(1);
    ck_assert_msg(efa_shm_guard_deaths() == before + 1,
                  "the count is %llu after the death, was %llu",
                  (unsigned long long)efa_shm_guard_deaths(),
                  (unsigned long long)before);
    efa_shm_guard_forget(&owner);
    close(pidfd);
    close(wr);
    close(rd);
    char path[96];
    snprintf(path, sizeof(path), "/%s", name);
    shm_unlink(path);
}
END_TEST

int main(void)
{
    return TE_TEST_RUN("efa_shm_guard_deaths",
                       TE_TCASE_FULL("deaths", 30, NULL, NULL,
                                     a_watched_death_moves_the_count));
}
