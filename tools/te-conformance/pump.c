/*
 * Engines in caller-driven progress (engine.progress = caller) have no
 * threads of their own: the suite then gives each engine it creates one
 * "application" thread that calls te_progress_wait() in a loop, as a
 * latency-bound application's progress thread would, while the cases run
 * on the main thread exactly as in thread mode (their blocking calls
 * progress too, or find the group busy and wait).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "conformance.h"

#define PUMPS_MAX 64

struct pump {
    te_engine *e;
    pthread_t thread;
    atomic_int stop;
};

static pthread_mutex_t pumps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pump *pumps[PUMPS_MAX];

static void *pump_main(void *arg)
{
    struct pump *p = arg;
    while (!atomic_load(&p->stop))
        te_progress_wait(p->e, -1, 20);
    return NULL;
}

int conf_engine_create(const te_config *cfg, te_engine **out)
{
    int rc = te_engine_create(cfg, out);
    if (rc)
        return rc;
    /* Thread mode refuses te_progress with -EINVAL: nothing to pump. */
    if (te_progress(*out, -1, 0) == -EINVAL)
        return 0;
    struct pump *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->e = *out;
    pthread_mutex_lock(&pumps_lock);
    int slot = -1;
    for (int i = 0; i < PUMPS_MAX && slot < 0; i++)
        if (!pumps[i])
            slot = i;
    if (slot >= 0)
        pumps[slot] = p;
    pthread_mutex_unlock(&pumps_lock);
    if (slot < 0 || pthread_create(&p->thread, NULL, pump_main, p)) {
        if (slot >= 0)
            pumps[slot] = NULL;
        free(p);
        te_engine_destroy(*out);
        *out = NULL;
        return -EAGAIN;
    }
    return 0;
}

void conf_engine_destroy(te_engine *e)
{
    struct pump *p = NULL;
    pthread_mutex_lock(&pumps_lock);
    for (int i = 0; i < PUMPS_MAX; i++)
        if (pumps[i] && pumps[i]->e == e) {
            p = pumps[i];
            pumps[i] = NULL;
        }
    pthread_mutex_unlock(&pumps_lock);
    if (p) {
        atomic_store(&p->stop, 1);
        pthread_join(p->thread, NULL);
        free(p);
    }
    te_engine_destroy(e);
}
