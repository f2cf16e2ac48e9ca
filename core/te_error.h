/* Per-thread last-error message shared by every core module. */
#ifndef TE_CORE_ERROR_H
#define TE_CORE_ERROR_H

#include <stdarg.h>

/**
 * Record a message for te_last_error() on this thread and return err
 * unchanged, so callers can write `return te_fail(-EINVAL, "...", ...)`.
 */
int te_fail(int err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), cold));

/** Same as te_fail() with a va_list. */
int te_vfail(int err, const char *fmt, va_list ap) __attribute__((cold));

/** Clear this thread's message (start of every public call). */
void te_error_clear(void);

#endif
