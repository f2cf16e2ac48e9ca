/*
 * Per-thread last-error message, errno names and the version string.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "te/te.h"
#include "te_error.h"
#include "te_hot.h"

#ifndef TE_VERSION_STRING
#define TE_VERSION_STRING "0.1.0"
#endif

/* Long enough for the loader's "every place tried" messages. */
#define TE_ERRMSG_MAX 2048

static __thread char te_errmsg[TE_ERRMSG_MAX];
static __thread char te_strerror_buf[64];

int te_vfail(int err, const char *fmt, va_list ap)
{
    int saved = errno;
    /* Format into a temporary first: the arguments may point into
     * te_errmsg itself (e.g. te_fail(e, "loading x: %s", te_last_error())). */
    char tmp[TE_ERRMSG_MAX];

    if (fmt == NULL) {
        snprintf(tmp, sizeof tmp, "%s", te_strerror(err));
    } else {
        int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
        if (n < 0) {
            snprintf(tmp, sizeof tmp, "%s (message formatting failed)",
                     te_strerror(err));
        } else if ((size_t)n >= sizeof tmp) {
            memcpy(tmp + sizeof tmp - 4, "...", 4); /* mark the truncation */
        }
    }
    memcpy(te_errmsg, tmp, sizeof tmp);
    errno = saved;
    return err;
}

int te_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    te_vfail(err, fmt, ap);
    va_end(ap);
    return err;
}

TE_HOT
void te_error_clear(void)
{
    te_errmsg[0] = '\0';
}

const char *te_last_error(void)
{
    return te_errmsg;
}

const char *te_strerror(int err)
{
    long e = err; /* -INT_MIN does not fit an int */
    if (e < 0)
        e = -e;
    if (e == 0)
        return "Success";
    if (e <= 4095) {
        /* glibc >= 2.32: static, locale-independent, thread-safe. */
        const char *s = strerrordesc_np((int)e);
        if (s != NULL)
            return s;
    }
    snprintf(te_strerror_buf, sizeof te_strerror_buf, "Unknown error %ld", e);
    return te_strerror_buf;
}

const char *te_version(void)
{
    return TE_VERSION_STRING;
}
