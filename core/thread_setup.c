/*
 * Thread names, timer slack and the idle spin's pause for the engine's
 * threads (thread_setup.h).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/prctl.h>

#include "thread_setup.h"

void te_thread_name(const char *name)
{
    char short_name[16];
    strncpy(short_name, name, sizeof(short_name) - 1);
    short_name[sizeof(short_name) - 1] = '\0';
    (void)pthread_setname_np(pthread_self(), short_name);
}

uint64_t te_thread_tighten_slack(uint32_t sleep_us)
{
    int current = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (current < 0)
        return 0;
    uint64_t want = (uint64_t)sleep_us * 1000u / 10u;
    if (want < 1000u)
        want = 1000u;
    if (want >= (uint64_t)current)
        return (uint64_t)current;
    if (prctl(PR_SET_TIMERSLACK, (unsigned long)want, 0, 0, 0) != 0)
        return (uint64_t)current;
    return want;
}

void te_thread_spin_pause(void)
{
    /* sched_yield, not a pause instruction: see thread_setup.h. Without
     * another runnable thread it is one cheap system call, which a loop
     * that found nothing to do can afford. */
    sched_yield();
}
