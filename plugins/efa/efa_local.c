/* The list of this process's open endpoints (see efa_local.h for why). */
#include "efa_local.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define LOCAL_NAME_MAX 256
#define LOCAL_PROV_MAX 64

struct efa_local {
    pthread_rwlock_t lock; /* read: a post to it; write: its close */
    int open;              /* under lock */
    int refs;              /* under list_lock */
    size_t len;
    char prov[LOCAL_PROV_MAX];
    uint8_t raw[LOCAL_NAME_MAX];
    struct efa_local *next; /* list, open entries only */
};

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct efa_local *list_head;

static void unref_locked(struct efa_local *l)
{
    if (--l->refs == 0) {
        pthread_rwlock_destroy(&l->lock);
        free(l);
    }
}

struct efa_local *efa_local_open(const char *prov, const uint8_t *raw,
                                 size_t len)
{
    if (len > LOCAL_NAME_MAX || strlen(prov) >= LOCAL_PROV_MAX)
        return NULL;
    struct efa_local *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    pthread_rwlock_init(&l->lock, NULL);
    l->open = 1;
    l->refs = 1;
    l->len = len;
    memcpy(l->raw, raw, len);
    strcpy(l->prov, prov);
    pthread_mutex_lock(&list_lock);
    l->next = list_head;
    list_head = l;
    pthread_mutex_unlock(&list_lock);
    return l;
}

void efa_local_close(struct efa_local *l)
{
    if (!l)
        return;
    pthread_rwlock_wrlock(&l->lock);
    l->open = 0;
    pthread_rwlock_unlock(&l->lock);
    pthread_mutex_lock(&list_lock);
    for (struct efa_local **pp = &list_head; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    unref_locked(l);
    pthread_mutex_unlock(&list_lock);
}

struct efa_local *efa_local_find(const char *prov, const uint8_t *raw,
                                 size_t len)
{
    struct efa_local *found = NULL;
    pthread_mutex_lock(&list_lock);
    for (struct efa_local *l = list_head; l && !found; l = l->next)
        if (l->len == len && !memcmp(l->raw, raw, len) &&
            !strcmp(l->prov, prov)) {
            l->refs++;
            found = l;
        }
    pthread_mutex_unlock(&list_lock);
    return found;
}

void efa_local_put(struct efa_local *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&list_lock);
    unref_locked(l);
    pthread_mutex_unlock(&list_lock);
}

int efa_local_enter(struct efa_local *l)
{
    pthread_rwlock_rdlock(&l->lock);
    if (l->open)
        return 1;
    pthread_rwlock_unlock(&l->lock);
    return 0;
}

void efa_local_leave(struct efa_local *l)
{
    pthread_rwlock_unlock(&l->lock);
}
