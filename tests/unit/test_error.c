/* Unit tests of core/error.c: per-thread messages, errno names, version. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/te.h"
#include "te_error.h"
#include "te_test.h"

START_TEST(fail_returns_err_and_sets_message)
{
    te_error_clear();
    ck_assert_str_eq(te_last_error(), "");
    int rc = te_fail(-EINVAL, "descriptor truncated: %d of %d bytes", 12, 40);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_str_eq(te_last_error(), "descriptor truncated: 12 of 40 bytes");
    te_error_clear();
    ck_assert_str_eq(te_last_error(), "");
}
END_TEST

START_TEST(fail_keeps_errno)
{
    errno = EAGAIN;
    te_fail(-EIO, "x %s", "y");
    ck_assert_int_eq(errno, EAGAIN);
}
END_TEST

START_TEST(fail_may_quote_previous_message)
{
    te_fail(-ENOENT, "inner %d", 1);
    te_fail(-ENOENT, "outer: %s", te_last_error());
    ck_assert_str_eq(te_last_error(), "outer: inner 1");
}
END_TEST

START_TEST(fail_truncates_long_message)
{
    char *big = malloc(10000);
    memset(big, 'a', 9999);
    big[9999] = '\0';
    te_fail(-E2BIG, "%s", big);
    size_t n = strlen(te_last_error());
    ck_assert_uint_gt(n, 500);
    ck_assert_uint_lt(n, 9999);
    ck_assert_str_eq(te_last_error() + n - 3, "...");
    free(big);
}
END_TEST

static int vwrap(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = te_vfail(err, fmt, ap);
    va_end(ap);
    return rc;
}

START_TEST(vfail_works)
{
    ck_assert_int_eq(vwrap(-EPROTO, "v%d", 7), -EPROTO);
    ck_assert_str_eq(te_last_error(), "v7");
}
END_TEST

/* Two threads set messages at the same time; each sees only its own. */
static pthread_barrier_t bar;

static void *thread_fn(void *arg)
{
    long id = (long)arg;
    char want[64];
    snprintf(want, sizeof want, "thread %ld message", id);
    /* No ck_assert here: only the test's own thread may fail a test. */
    int ok = strcmp(te_last_error(), "") == 0; /* fresh thread: nothing */
    te_fail(-EIO, "thread %ld message", id);
    pthread_barrier_wait(&bar); /* both have written */
    ok = ok && strcmp(te_last_error(), want) == 0;
    pthread_barrier_wait(&bar);
    if (id == 1)
        te_error_clear(); /* must not clear the other thread's */
    pthread_barrier_wait(&bar);
    if (id == 2)
        ok = ok && strcmp(te_last_error(), want) == 0;
    else
        ok = ok && strcmp(te_last_error(), "") == 0;
    return (void *)(long)ok;
}

START_TEST(messages_are_per_thread)
{
    pthread_t t1, t2;
    void *r1, *r2;
    te_fail(-EINVAL, "main thread");
    pthread_barrier_init(&bar, NULL, 2);
    ck_assert_int_eq(pthread_create(&t1, NULL, thread_fn, (void *)1L), 0);
    ck_assert_int_eq(pthread_create(&t2, NULL, thread_fn, (void *)2L), 0);
    pthread_join(t1, &r1);
    pthread_join(t2, &r2);
    pthread_barrier_destroy(&bar);
    ck_assert_int_eq((int)(long)r1, 1);
    ck_assert_int_eq((int)(long)r2, 1);
    ck_assert_str_eq(te_last_error(), "main thread");
}
END_TEST

START_TEST(strerror_names)
{
    ck_assert_str_eq(te_strerror(0), "Success");
    ck_assert_str_eq(te_strerror(-ENOENT), "No such file or directory");
    ck_assert_str_eq(te_strerror(ENOENT), "No such file or directory");
    ck_assert_str_eq(te_strerror(-EINVAL), "Invalid argument");
    ck_assert_str_eq(te_strerror(-EAGAIN), te_strerror(EAGAIN));
    ck_assert_str_eq(te_strerror(-EBADMSG), "Bad message");
    ck_assert_str_eq(te_strerror(-EPROTO), "Protocol error");
    ck_assert_str_eq(te_strerror(-ENOSPC), "No space left on device");
    ck_assert_str_eq(te_strerror(-ETIMEDOUT), "Connection timed out");
    ck_assert_str_eq(te_strerror(-ECANCELED), "Operation canceled");
    ck_assert_ptr_nonnull(te_strerror(-ECONNABORTED));
}
END_TEST

START_TEST(strerror_unknown)
{
    ck_assert_str_eq(te_strerror(-9999), "Unknown error 9999");
    ck_assert_str_eq(te_strerror(9999), "Unknown error 9999");
    ck_assert_str_eq(te_strerror(4000), "Unknown error 4000");
    ck_assert_ptr_nonnull(te_strerror(INT_MIN));
    ck_assert_ptr_nonnull(te_strerror(INT_MAX));
    ck_assert_str_eq(te_strerror(INT_MIN), "Unknown error 2147483648");
}
END_TEST

START_TEST(strerror_does_not_clear_message)
{
    te_fail(-EIO, "kept");
    (void)te_strerror(-EIO);
    (void)te_version();
    ck_assert_str_eq(te_last_error(), "kept");
}
END_TEST

START_TEST(version_string)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", TE_VERSION_MAJOR, TE_VERSION_MINOR,
             TE_VERSION_PATCH);
    ck_assert_str_eq(te_version(), want);
}
END_TEST

TE_TEST_MAIN("error",
             TE_TCASE("core",
               fail_returns_err_and_sets_message, fail_keeps_errno,
               fail_may_quote_previous_message, fail_truncates_long_message,
               vfail_works, messages_are_per_thread, strerror_names,
               strerror_unknown, strerror_does_not_clear_message,
               version_string))
