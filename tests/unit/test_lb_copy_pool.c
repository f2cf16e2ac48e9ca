/*
 * Unit tests for the loopback target's copy engines
 * (plugins/loopback/lb_copy_pool.h), driven alone. Checked: every byte of
 * copies of every size lands and nothing past them, in both directions,
 * within this process and across processes (process_vm_readv/writev);
 * helpers take chunks (also after sleeping past their spin); a copy that
 * fails reports its own -errno while the others of its run land; two
 * threads running jobs at once (one gets the helpers, the other copies
 * alone) both get their bytes; helpers start at the first job of more
 * than one chunk; a pool is freed with helpers asleep or awake.
 */
#define _GNU_SOURCE /* process_vm_readv, before any system header */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../plugins/loopback/lb_copy_pool.c"
#include "te_test.h"

enum { K = 1 << 10, MB = 1 << 20 };

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 13 + seed + (i >> 12));
}

/* Sizes around the chunk (256 KiB) and a copy of nothing among them. */
static const uint64_t sizes[] = {1,           4095,        LB_COPY_CHUNK - 1,
                                 0,           LB_COPY_CHUNK, LB_COPY_CHUNK + 1,
                                 3 * MB + 123, 17 * K,      2 * LB_COPY_CHUNK};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Offsets of each size's bytes in a buffer, a page of margin between. */
static size_t layout(size_t *off)
{
    size_t at = 0;
    for (size_t i = 0; i < NSIZES; i++) {
        off[i] = at;
        at += (sizes[i] + 2 * 4096) & ~(size_t)4095;
    }
    return at;
}

/* Copies of every size between `here` and `there` (in process pid, or
 * this one when local), in direction out, one job. */
static void run_sizes(struct lb_copy_pool *p, unsigned char *here,
                      uint64_t there, pid_t pid, bool local, bool out)
{
    size_t off[NSIZES];
    layout(off);
    struct lb_copy c[NSIZES];
    for (size_t i = 0; i < NSIZES; i++)
        c[i] = (struct lb_copy){.here = here + off[i], .there = there + off[i],
                                .len = sizes[i], .pid = pid, .local = local,
                                .out = out};
    lb_copy_run(p, c, NSIZES);
    for (size_t i = 0; i < NSIZES; i++)
        ck_assert_msg(atomic_load(&c[i].status) == 0, "copy %zu: %d", i,
                      atomic_load(&c[i].status));
}

/* The bytes of every size equal between a and b, and b untouched (0)
 * past each. */
static void check_sizes(const unsigned char *a, const unsigned char *b)
{
    size_t off[NSIZES];
    layout(off);
    for (size_t i = 0; i < NSIZES; i++) {
        ck_assert_msg(memcmp(a + off[i], b + off[i], sizes[i]) == 0,
                      "copy of %llu bytes differs",
                      (unsigned long long)sizes[i]);
        ck_assert_uint_eq(b[off[i] + sizes[i]], 0);
    }
}

START_TEST(test_local_both_directions)
{
    struct lb_copy_pool *p = NULL;
    ck_assert_int_eq(lb_copy_pool_new(2, &p), 0);
    size_t off[NSIZES], n = layout(off);
    unsigned char *src = calloc(1, n), *dst = calloc(1, n), *back = calloc(1, n);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    ck_assert_ptr_nonnull(back);
    for (int round = 0; round < 20; round++) {
        fill(src, n, (unsigned)round);
        memset(dst, 0, n);
        memset(back, 0, n);
        for (size_t i = 0; i < NSIZES; i++)
            memset(src + off[i] + sizes[i], 0, 1); /* the byte past */
        /* In: there -> here; out: here -> there. */
        run_sizes(p, dst, (uint64_t)(uintptr_t)src, getpid(), true, false);
        check_sizes(src, dst);
        run_sizes(p, dst, (uint64_t)(uintptr_t)back, getpid(), true, true);
        check_sizes(dst, back);
    }
    ck_assert_uint_gt(lb_copy_pool_helped(p), 0);
    lb_copy_pool_free(p);
    free(src);
    free(dst);
    free(back);
}
END_TEST

/* Helpers asleep (past their spin) are woken by the next job; p NULL
 * copies alone. */
START_TEST(test_sleeping_helpers_wake)
{
    struct lb_copy_pool *p = NULL;
    ck_assert_int_eq(lb_copy_pool_new(1, &p), 0);
    size_t len = 32 * MB;
    unsigned char *src = malloc(len), *dst = malloc(len);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    fill(src, len, 5);
    uint64_t before = 0;
    int woke = 0;
    for (int round = 0; round < 20 && woke < 3; round++) {
        /* Well past LB_COPY_SPIN_NS: the helper went to sleep. */
        struct timespec nap = {0, 5 * 1000 * 1000};
        nanosleep(&nap, NULL);
        memset(dst, 0, len);
        struct lb_copy c = {.here = dst, .there = (uint64_t)(uintptr_t)src,
                            .len = len, .pid = getpid(), .local = true};
        lb_copy_run(p, &c, 1);
        ck_assert_int_eq(atomic_load(&c.status), 0);
        ck_assert_int_eq(memcmp(src, dst, len), 0);
        uint64_t now = lb_copy_pool_helped(p);
        woke += now > before;
        before = now;
    }
    ck_assert_msg(woke >= 3, "a sleeping helper took chunks after %d of the "
                  "jobs", woke);
    memset(dst, 0, len);
    struct lb_copy c = {.here = dst, .there = (uint64_t)(uintptr_t)src,
                        .len = len, .pid = getpid(), .local = true};
    lb_copy_run(NULL, &c, 1);
    ck_assert_int_eq(memcmp(src, dst, len), 0);
    lb_copy_pool_free(p);
    free(src);
    free(dst);
}
END_TEST

/* A child holding a buffer, whose address comes through a pipe; it
 * exits when the parent closes its end of the other pipe. */
static pid_t spawn_holder(size_t n, uint64_t *addr, int *release)
{
    int up[2], down[2];
    ck_assert_int_eq(pipe(up), 0);
    ck_assert_int_eq(pipe(down), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        unsigned char *buf = calloc(1, n);
        uint64_t a = (uint64_t)(uintptr_t)buf;
        if (!buf || write(up[1], &a, sizeof(a)) != sizeof(a))
            _exit(1);
        char x;
        while (read(down[0], &x, 1) > 0)
            ;
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    ck_assert_int_eq(read(up[0], addr, sizeof(*addr)), (ssize_t)sizeof(*addr));
    close(up[0]);
    *release = down[1];
    return pid;
}

START_TEST(test_cross_process)
{
    struct lb_copy_pool *p = NULL;
    ck_assert_int_eq(lb_copy_pool_new(1, &p), 0);
    size_t off[NSIZES], n = layout(off);
    uint64_t there;
    int release;
    pid_t pid = spawn_holder(n, &there, &release);
    unsigned char *src = calloc(1, n), *back = calloc(1, n);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(back);
    for (int round = 0; round < 5; round++) {
        fill(src, n, 40 + (unsigned)round);
        for (size_t i = 0; i < NSIZES; i++)
            src[off[i] + sizes[i]] = 0;
        memset(back, 0, n);
        run_sizes(p, src, there, pid, false, true);   /* into the child */
        run_sizes(p, back, there, pid, false, false); /* and back */
        check_sizes(src, back);
    }

    /* A copy from an address the child has not mapped fails alone. */
    unsigned char *dst = calloc(1, 4 * MB);
    ck_assert_ptr_nonnull(dst);
    fill(src, 3 * MB, 77);
    struct lb_copy whole = {.here = src, .there = there, .len = 3 * MB,
                            .pid = pid, .out = true};
    lb_copy_run(p, &whole, 1);
    ck_assert_int_eq(atomic_load(&whole.status), 0);
    struct lb_copy c[3] = {
        {.here = dst, .there = there, .len = MB, .pid = pid},
        {.here = dst + MB, .there = 4096, .len = MB, .pid = pid},
        {.here = dst + 2 * MB, .there = there + MB, .len = MB, .pid = pid},
    };
    lb_copy_run(p, c, 3);
    ck_assert_int_eq(atomic_load(&c[0].status), 0);
    ck_assert_int_eq(atomic_load(&c[1].status), -EFAULT);
    ck_assert_int_eq(atomic_load(&c[2].status), 0);
    ck_assert_int_eq(memcmp(dst, src, MB), 0);
    ck_assert_int_eq(memcmp(dst + 2 * MB, src + MB, MB), 0);

    /* A process that is gone: every copy says so. */
    close(release);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    c[1].there = there + 2 * MB;
    lb_copy_run(p, c, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(atomic_load(&c[i].status), -ESRCH);
    lb_copy_pool_free(p);
    free(src);
    free(back);
    free(dst);
}
END_TEST

struct job_thread {
    struct lb_copy_pool *p;
    unsigned seed;
    int bad;
};

static void *job_main(void *arg)
{
    struct job_thread *t = arg;
    size_t len = 3 * MB + 77;
    unsigned char *src = malloc(len), *dst = malloc(len);
    if (!src || !dst) {
        t->bad = -1;
        return NULL;
    }
    for (int round = 0; round < 40; round++) {
        fill(src, len, t->seed + (unsigned)round);
        memset(dst, 0, len);
        struct lb_copy c[2] = {
            {.here = dst, .there = (uint64_t)(uintptr_t)src, .len = len / 2,
             .pid = getpid(), .local = true},
            {.here = dst + len / 2, .there = (uint64_t)(uintptr_t)src + len / 2,
             .len = len - len / 2, .pid = getpid(), .local = true},
        };
        lb_copy_run(t->p, c, 2);
        if (atomic_load(&c[0].status) || atomic_load(&c[1].status) ||
            memcmp(src, dst, len))
            t->bad++;
    }
    free(src);
    free(dst);
    return NULL;
}

START_TEST(test_two_callers)
{
    struct lb_copy_pool *p = NULL;
    ck_assert_int_eq(lb_copy_pool_new(2, &p), 0);
    struct job_thread t[2] = {{p, 1, 0}, {p, 101, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, job_main, &t[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(t[i].bad == 0, "caller %d: %d bad jobs", i, t[i].bad);
    }
    lb_copy_pool_free(p);
}
END_TEST

START_TEST(test_start_and_stop)
{
    struct lb_copy_pool *p = NULL;
    ck_assert_int_eq(lb_copy_pool_new(0, &p), -EINVAL);
    ck_assert_int_eq(lb_copy_pool_new(LB_COPY_MAX_HELPERS + 1, &p), -EINVAL);
    ck_assert_ptr_null(p);
    size_t len = 2 * MB;
    unsigned char *src = calloc(1, len), *dst = calloc(1, len);
    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    struct lb_copy c = {.here = dst, .there = (uint64_t)(uintptr_t)src,
                        .pid = getpid(), .local = true};
    /* Helpers start at the first job of more than one chunk, not before;
     * freed at once (helpers spinning), and after they slept. */
    ck_assert_int_eq(lb_copy_pool_new(LB_COPY_MAX_HELPERS, &p), 0);
    c.len = LB_COPY_CHUNK;
    ck_assert_int_eq(lb_copy_run(p, &c, 1), 0);
    ck_assert_int_eq(te_test_threads_named("te-lb-copy", NULL), 0);
    c.len = len;
    ck_assert_int_eq(lb_copy_run(p, &c, 1), 0);
    ck_assert_int_eq(te_test_threads_named_settle("te-lb-copy",
                                                  LB_COPY_MAX_HELPERS, 5000),
                     LB_COPY_MAX_HELPERS);
    lb_copy_pool_free(p);
    ck_assert_int_eq(te_test_threads_named_settle("te-lb-copy", 0, 5000), 0);
    ck_assert_int_eq(lb_copy_pool_new(3, &p), 0);
    ck_assert_int_eq(lb_copy_run(p, &c, 1), 0);
    struct timespec nap = {0, 20 * 1000 * 1000};
    nanosleep(&nap, NULL);
    lb_copy_pool_free(p);
    lb_copy_pool_free(NULL);
    ck_assert_uint_eq(lb_copy_pool_helped(NULL), 0);
    free(src);
    free(dst);
}
END_TEST

TE_TEST_MAIN("lb_copy_pool",
             TE_TCASE("pool", test_local_both_directions,
                      test_sleeping_helpers_wake, test_cross_process,
                      test_two_callers, test_start_and_stop))
