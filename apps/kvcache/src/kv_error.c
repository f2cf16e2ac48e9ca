/* Per-thread last error of libte-kv. */
#include <stdarg.h>
#include <stdio.h>

#include "kv_internal.h"

static __thread char kv_msg[256];

int kv_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kv_msg, sizeof(kv_msg), fmt, ap);
    va_end(ap);
    return err;
}

void kv_clear(void) { kv_msg[0] = 0; }

const char *te_kv_last_error(void) { return kv_msg; }
