/*
 * The log sink (te.h "logging", docs/logging.md): one process-wide sink
 * (te_set_log_fn) and one process-wide threshold (te_set_log_level) for the
 * core (te_log), the plugins (the host table's log, engine.c) and the apps
 * (te_log_printf).
 *
 * Swapping the sink while other threads log: the sink and its argument are
 * read, and the sink called, under the read side of a rwlock; te_set_log_fn
 * takes the write side. So when te_set_log_fn returns no thread is still
 * inside the old sink and none will call it again: the application may
 * free what the old argument points to. What that costs: te_set_log_fn
 * waits for the sink calls in flight (the lock prefers writers, so a steady
 * stream of messages cannot starve it), and a sink that calls
 * te_set_log_fn itself cannot be waited for: that swap is applied when the
 * sink returns (see te_set_log_fn in te.h). A message logged from inside
 * the sink on the same thread (the sink logging through te_log_printf, or
 * calling into the engine) goes to the default stderr output instead of
 * recursing. Messages below the thresholds cost an atomic load and are
 * never formatted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "engine_internal.h"

#if defined(PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP)
static pthread_rwlock_t sink_lock =
    PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
#else
static pthread_rwlock_t sink_lock = PTHREAD_RWLOCK_INITIALIZER;
#endif
static te_log_fn sink_fn;   /* NULL: the default stderr output */
static void *sink_arg;
static atomic_int process_level = TE_LOG_DEBUG;

/* This thread is inside the sink (depth), and the swap it asked for there. */
static _Thread_local int in_sink;
static _Thread_local int deferred_set;
static _Thread_local te_log_fn deferred_fn;
static _Thread_local void *deferred_arg;

static const char *const level_names[] = {"error", "warning", "info", "debug"};

static int clamp_level(int level)
{
    return level < TE_LOG_ERROR ? TE_LOG_ERROR
           : level > TE_LOG_DEBUG ? TE_LOG_DEBUG : level;
}

/* Today's stderr format, byte for byte: "transferengine <level>: <msg>" for
 * the core, "transferengine <level>: <origin>: <msg>" for anyone else (the
 * whole line after the level limited to 511 bytes, as it always was). */
static void default_output(int level, const char *origin, const char *msg)
{
    if (origin[0] && strcmp(origin, "core") != 0) {
        char line[512];
        snprintf(line, sizeof(line), "%s: %s", origin, msg);
        fprintf(stderr, "transferengine %s: %s\n", level_names[level], line);
    } else {
        fprintf(stderr, "transferengine %s: %s\n", level_names[level], msg);
    }
}

int te_log_enabled(const struct te_engine *e, int level)
{
    level = clamp_level(level);
    if (level > atomic_load_explicit(&process_level, memory_order_relaxed))
        return 0;
    return !e || level <= (int)e->s.log_level;
}

void te_log_emit(int level, const char *origin, const char *msg)
{
    int saved_errno = errno;
    level = clamp_level(level);
    if (!origin)
        origin = "";
    if (in_sink) {
        /* From inside the sink, on its own thread: no recursion, and no
         * second read lock (a waiting writer would deadlock it). */
        default_output(level, origin, msg);
        errno = saved_errno;
        return;
    }
    pthread_rwlock_rdlock(&sink_lock);
    te_log_fn fn = sink_fn;
    void *arg = sink_arg;
    if (fn) {
        in_sink = 1;
        fn(level, origin, msg, arg);
        in_sink = 0;
    } else {
        default_output(level, origin, msg);
    }
    pthread_rwlock_unlock(&sink_lock);
    if (deferred_set) {
        deferred_set = 0;
        te_set_log_fn(deferred_fn, deferred_arg);
    }
    errno = saved_errno;
}

void te_log(const struct te_engine *e, int level, const char *fmt, ...)
{
    if (!te_log_enabled(e, level))
        return;
    char buf[512];
    int saved_errno = errno;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    errno = saved_errno;
    te_log_emit(level, "core", buf);
}

TE_API void te_log_printf(int level, const char *origin, const char *fmt, ...)
{
    if (!te_log_enabled(NULL, level) || !fmt)
        return;
    char buf[1024];
    int saved_errno = errno;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    errno = saved_errno;
    te_log_emit(level, origin, buf);
}

TE_API void te_set_log_fn(te_log_fn fn, void *arg)
{
    if (in_sink) {
        /* Waiting here would wait for ourselves: apply it once the sink
         * this thread is in has returned (te_log_emit). */
        deferred_fn = fn;
        deferred_arg = arg;
        deferred_set = 1;
        return;
    }
    pthread_rwlock_wrlock(&sink_lock);
    sink_fn = fn;
    sink_arg = arg;
    pthread_rwlock_unlock(&sink_lock);
}

TE_API void te_set_log_level(int level)
{
    if (level > TE_LOG_DEBUG)
        level = TE_LOG_DEBUG;
    if (level < -1)
        level = -1;
    atomic_store_explicit(&process_level, level, memory_order_relaxed);
}
