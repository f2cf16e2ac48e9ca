/* Log sink that records why a watched peer went down (downlog.h). */
#include "downlog.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int started, verbose_;
static unsigned watched;
static int watching;
static char cause[256];

static void sink(int level, const char *origin, const char *msg, void *arg)
{
    (void)arg;
    unsigned g, p;
    int off = 0;
    if (strcmp(origin, "core") == 0 &&
        sscanf(msg, "group %u: peer %u is down: %n", &g, &p, &off) == 2 &&
        off > 0) {
        pthread_mutex_lock(&lock);
        /* A destroyed engine's own removals are not the watched cause. */
        if (watching && p == watched && !cause[0] &&
            strcmp(msg + off, "peer removed") != 0)
            snprintf(cause, sizeof(cause), "%s", msg + off);
        pthread_mutex_unlock(&lock);
    }
    /* From inside the sink te_log_printf goes to the default output. */
    if (level <= TE_LOG_WARN || verbose_)
        te_log_printf(level, origin, "%s", msg);
}

void conf_downlog_start(int verbose)
{
    verbose_ = verbose;
    pthread_mutex_lock(&lock);
    watching = 0;
    cause[0] = 0;
    pthread_mutex_unlock(&lock);
    te_set_log_fn(sink, NULL);
    started = 1;
}

void conf_downlog_watch(te_peer peer)
{
    pthread_mutex_lock(&lock);
    watched = peer;
    watching = 1;
    cause[0] = 0;
    pthread_mutex_unlock(&lock);
}

void conf_downlog_why(char *out, size_t cap)
{
    pthread_mutex_lock(&lock);
    snprintf(out, cap, "%s", cause);
    pthread_mutex_unlock(&lock);
}

int conf_downlog_orderly(const char *why)
{
    /* core/poll.c's wording for a PEER_DOWN whose status is -ESHUTDOWN. */
    return strstr(why, " in order") != NULL;
}

void conf_downlog_stop(void)
{
    if (!started)
        return;
    te_set_log_fn(NULL, NULL);
    started = 0;
}
