/* The dead-peer lock release of shm regions (efa_shm_guard.h says why). */
#define _GNU_SOURCE
#include "efa_shm_guard.h"

#include "tpc_clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#define GUARD_NAME "efa"
/* libfabric 1.17's struct smr_region: version byte, then at 4 the owner's
 * pid, at 0x18 its lock (read from live regions: docs/efa.md). */
#define SMR_LAYOUT_VERSION 4
#define SMR_PID_OFF 4
#define SMR_LOCK_OFF 0x18
/* A dead peer's lock held on every read (one per millisecond) for this
 * long is the dead process's: a live holder keeps it for microseconds. */
#define EFA_GUARD_HELD_NS 10000000ull
/* Our own region's lock after a peer died: a live holder may be another
 * process, preempted on a loaded host, so the bar is higher (a wrong
 * release here would let two writers into a live queue). */
#define EFA_GUARD_OWN_HELD_NS 100000000ull
/* How long after a death our own regions are looked at. */
#define EFA_GUARD_OWN_CHECK_NS 500000000ull
#define EFA_GUARD_READ_MS 1

struct efa_guard_watch {
    const void *owner;    /* the NIC whose endpoint may touch the region */
    char name[64];        /* the region */
    const struct te_plugin_host *host;
    char nic[64];
    uint32_t pid;
    int pidfd;            /* our duplicate */
    uint8_t *page;        /* the region's first page, our own mapping */
    bool dead;
    uint64_t held_since_ns; /* first read after its death found it held */
    bool settled;         /* dead and released, or dead and found free */
    bool own;             /* our own endpoint's region: never dead; looked
                           * at for a while after any peer of it died */
    uint64_t suspect_until_ns; /* own: look until then (0: not now) */
    struct efa_guard_watch *next;
};

static struct {
    pthread_mutex_t mu;
    struct efa_guard_watch *list;
    uint64_t changes;     /* list edits by other threads: `who` is stale */
    int wake_fd;
    bool running;
    uint64_t gen;         /* a thread of another generation exits */
    pthread_t thread;
    bool told_unknown;
} G = {.mu = PTHREAD_MUTEX_INITIALIZER, .wake_fd = -1};

/* Watched processes seen dead (efa_shm_guard_deaths). */
static _Atomic uint64_t deaths;

uint64_t efa_shm_guard_deaths(void)
{
    return atomic_load_explicit(&deaths, memory_order_acquire);
}

static volatile int *lock_of(struct efa_guard_watch *w)
{
    return (volatile int *)(void *)(w->page + SMR_LOCK_OFF);
}

/* The representation of a free lock, as this libc writes it (x86-64: 1,
 * the generic one: 0). */
static int free_value(void)
{
    pthread_spinlock_t l;
    pthread_spin_init(&l, PTHREAD_PROCESS_SHARED);
    int v;
    memcpy(&v, (const void *)&l, sizeof(v));
    pthread_spin_destroy(&l);
    return v;
}

enum held { HELD_FREE, HELD_STILL, HELD_RELEASED };

/* One read of w's lock: free; held, but for less than `bar` of reads that
 * all found it held; or held that long, and so released now. A store, not
 * pthread_spin_unlock: the lock is not ours (and sanitizers intercept the
 * call). */
static enum held check_held(struct efa_guard_watch *w, int freev,
                            uint64_t now, uint64_t bar)
{
    if (__atomic_load_n(lock_of(w), __ATOMIC_ACQUIRE) == freev) {
        w->held_since_ns = 0;
        return HELD_FREE;
    }
    if (!w->held_since_ns)
        w->held_since_ns = now;
    if (now - w->held_since_ns < bar)
        return HELD_STILL;
    __atomic_store_n(lock_of(w), freev, __ATOMIC_RELEASE);
    w->held_since_ns = 0;
    return HELD_RELEASED;
}

static void watch_free(struct efa_guard_watch *w)
{
    if (w->pidfd >= 0)
        close(w->pidfd);
    munmap(w->page, (size_t)sysconf(_SC_PAGESIZE));
    free(w);
}

static void *guard_main(void *arg)
{
    uint64_t gen = (uint64_t)(uintptr_t)arg;
    pthread_setname_np(pthread_self(), "te-efa-guard");
    int freev = free_value();
    struct pollfd *fds = NULL;
    struct efa_guard_watch **who = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&G.mu);
    while (G.gen == gen) {
        size_t n = 1, live = 0;
        bool pending = false;
        for (struct efa_guard_watch *w = G.list; w; w = w->next)
            live += !w->dead && !w->own,
                pending |= (w->dead && !w->settled) || w->suspect_until_ns;
        if (live + 1 > cap) {
            size_t nc = live + 8;
            struct pollfd *f = realloc(fds, nc * sizeof(*f));
            if (f)
                fds = f;
            struct efa_guard_watch **h = f ? realloc(who, nc * sizeof(*h))
                                           : NULL;
            if (h)
                who = h;
            if (!f || !h) { /* out of memory: again in a while */
                pthread_mutex_unlock(&G.mu);
                usleep(10000);
                pthread_mutex_lock(&G.mu);
                continue;
            }
            cap = nc;
        }
        fds[0] = (struct pollfd){.fd = G.wake_fd, .events = POLLIN};
        for (struct efa_guard_watch *w = G.list; w && n < cap; w = w->next)
            if (!w->dead && !w->own) {
                fds[n] = (struct pollfd){.fd = w->pidfd, .events = POLLIN};
                who[n++] = w;
            }
        uint64_t seen = G.changes;
        pthread_mutex_unlock(&G.mu);
        int r = poll(fds, (nfds_t)n, pending ? EFA_GUARD_READ_MS : -1);
        pthread_mutex_lock(&G.mu);
        if (r > 0 && (fds[0].revents & POLLIN)) {
            uint64_t v;
            ssize_t got = read(G.wake_fd, &v, sizeof(v));
            (void)got;
        }
        /* A watch forgotten meanwhile may be freed already (its pidfd
         * closed: POLLNVAL); the list is looked at again. */
        if (G.changes != seen)
            continue;
        uint64_t now = tpc_now_ns();
        for (size_t i = 1; r > 0 && i < n; i++)
            if (fds[i].revents) {
                who[i]->dead = true;
                atomic_fetch_add_explicit(&deaths, 1, memory_order_release);
                /* It may have died in our region's lock too. */
                for (struct efa_guard_watch *o = G.list; o; o = o->next)
                    if (o->own && o->owner == who[i]->owner)
                        o->suspect_until_ns = now + EFA_GUARD_OWN_CHECK_NS;
            }
        for (struct efa_guard_watch *o = G.list; o; o = o->next) {
            if (!o->suspect_until_ns)
                continue;
            /* Held that long after a peer's death: the dead peer took it
             * to queue a command to us. */
            enum held h = check_held(o, freev, now, EFA_GUARD_OWN_HELD_NS);
            if (h == HELD_RELEASED) {
                o->suspect_until_ns = 0;
                tpc_log(o->host, GUARD_NAME, 1,
                        "%s: our shm region's lock stayed held %llu ms after "
                        "a peer process died: released it (the peer died "
                        "queueing a command to us; else libfabric's shm "
                        "would spin on it forever)", o->nic,
                        (unsigned long long)(EFA_GUARD_OWN_HELD_NS /
                                             1000000u));
            } else if (h == HELD_FREE && now >= o->suspect_until_ns) {
                o->suspect_until_ns = 0;
            }
        }
        for (struct efa_guard_watch **pp = &G.list; *pp;) {
            struct efa_guard_watch *w = *pp;
            enum held h = w->dead && !w->settled
                              ? check_held(w, freev, now, EFA_GUARD_HELD_NS)
                              : HELD_STILL;
            /* Free once after its death: nobody can take it dead any
             * more. */
            w->settled |= h != HELD_STILL;
            if (h == HELD_RELEASED)
                /* Logged with the list locked: forget() waits, so the
                 * NIC and its host stay valid. */
                tpc_log(w->host, GUARD_NAME, 1,
                        "%s: peer process %u died holding the lock of its "
                        "shm region (held %llu ms after its death): "
                        "released it, else libfabric's shm would spin on "
                        "it forever", w->nic, w->pid,
                        (unsigned long long)(EFA_GUARD_HELD_NS / 1000000u));
            if (w->dead && w->settled) {
                /* Dead and its lock free: nobody can hold it any more. */
                *pp = w->next;
                watch_free(w);
            } else {
                pp = &w->next;
            }
        }
    }
    pthread_mutex_unlock(&G.mu);
    free(fds);
    free(who);
    return NULL;
}

/* The region's first page, mapped by us: 0, -errno, or -ENOTSUP when it
 * does not read as a layout we know with pid as its owner. */
static int map_region(const char *name, uint32_t pid, uint8_t **out)
{
    char path[128];
    if ((size_t)snprintf(path, sizeof(path), "/%s", name) >= sizeof(path))
        return -ENAMETOOLONG;
    int fd = shm_open(path, O_RDWR, 0);
    if (fd < 0)
        return -errno;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *p = mmap(NULL, pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED)
        return -err;
    int32_t owner;
    memcpy(&owner, p + SMR_PID_OFF, sizeof(owner));
    if (p[0] != SMR_LAYOUT_VERSION || (uint32_t)owner != pid) {
        munmap(p, pg);
        return -ENOTSUP;
    }
    *out = p;
    return 0;
}

/* fork(): the child has no guard thread and none of the parent's peers;
 * the list is not freed there (its pidfds, pages and eventfd are the
 * child's copies of the parent's, left as they are: close-on-exec). */
static void fork_prepare(void)
{
    pthread_mutex_lock(&G.mu);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&G.mu);
}

static void fork_child(void)
{
    G.list = NULL;
    G.running = false;
    G.wake_fd = -1; /* the parent's eventfd: not ours to ring */
    pthread_mutex_init(&G.mu, NULL);
}

static void at_fork_once(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static int start_locked(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, at_fork_once);
    if (G.running)
        return 0;
    if (G.wake_fd < 0 &&
        (G.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        G.wake_fd = -1;
        return -errno;
    }
    int rc = pthread_create(&G.thread, NULL, guard_main,
                            (void *)(uintptr_t)++G.gen);
    if (rc)
        return -rc;
    G.running = true;
    return 0;
}

static void ring(void)
{
    uint64_t one = 1;
    ssize_t rc = write(G.wake_fd, &one, sizeof(one));
    (void)rc;
}

/* A watch of the region named by an endpoint name of raw_len bytes (NUL
 * included or not), owned by pid, mapped and checked: 0 and *out, or a
 * negative errno (-ENOTSUP: a layout we do not know). */
static int watch_new(const void *owner, const struct te_plugin_host *host,
                     const char *nic, const void *raw, size_t raw_len,
                     uint32_t pid, struct efa_guard_watch **out)
{
    struct efa_guard_watch *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    if (raw_len >= sizeof(w->name)) {
        free(w);
        return -ENAMETOOLONG;
    }
    memcpy(w->name, raw, raw_len); /* calloc'd: NUL-terminated */
    int rc = map_region(w->name, pid, &w->page);
    if (rc) {
        free(w);
        return rc;
    }
    w->owner = owner;
    w->host = host;
    snprintf(w->nic, sizeof(w->nic), "%s", nic);
    w->pid = pid;
    w->pidfd = -1;
    *out = w;
    return 0;
}

static void insert_locked(struct efa_guard_watch *w)
{
    w->next = G.list;
    G.list = w;
    G.changes++;
}

int efa_shm_guard_watch(const void *owner, const struct te_plugin_host *host,
                        const char *nic, const void *raw, size_t raw_len,
                        uint32_t pid, int pidfd)
{
    struct efa_guard_watch *w;
    int rc = watch_new(owner, host, nic, raw, raw_len, pid, &w);
    if (rc == -ENOTSUP) {
        pthread_mutex_lock(&G.mu);
        bool tell = !G.told_unknown;
        G.told_unknown = true;
        pthread_mutex_unlock(&G.mu);
        if (tell)
            tpc_log(host, GUARD_NAME, 2, "%s: shm region %.*s does not read "
                    "as libfabric 1.17's layout (version %d, owner pid %u): "
                    "the release of a dead peer's lock is off for such "
                    "regions", nic, (int)raw_len, (const char *)raw,
                    SMR_LAYOUT_VERSION, pid);
    } else if (rc) {
        tpc_log(host, GUARD_NAME, 3, "%s: shm region %.*s of pid %u not "
                "watched: %s", nic, (int)raw_len, (const char *)raw, pid,
                strerror(-rc));
    }
    if (rc)
        return rc;
    if ((w->pidfd = fcntl(pidfd, F_DUPFD_CLOEXEC, 0)) < 0) {
        rc = -errno;
        watch_free(w);
        return rc;
    }
    pthread_mutex_lock(&G.mu);
    bool known = false;
    for (struct efa_guard_watch *o = G.list; o && !known; o = o->next)
        known = o->owner == owner && !strcmp(o->name, w->name);
    rc = known ? 0 : start_locked();
    if (!known && rc == 0) {
        insert_locked(w);
        ring();
        w = NULL;
    }
    pthread_mutex_unlock(&G.mu);
    if (w) /* added again (one watch per NIC and region), or no thread */
        watch_free(w);
    return rc;
}

int efa_shm_guard_own(const void *owner, const struct te_plugin_host *host,
                      const char *nic, const void *raw, size_t raw_len)
{
    struct efa_guard_watch *w;
    int rc = watch_new(owner, host, nic, raw, raw_len, (uint32_t)getpid(),
                       &w);
    if (rc)
        return rc;
    w->own = true;
    pthread_mutex_lock(&G.mu);
    /* No thread for it alone: it is looked at only after a watched peer
     * of the same NIC died. */
    insert_locked(w);
    pthread_mutex_unlock(&G.mu);
    return 0;
}

void efa_shm_guard_forget(const void *owner)
{
    struct efa_guard_watch *gone = NULL;
    pthread_mutex_lock(&G.mu);
    for (struct efa_guard_watch **pp = &G.list; *pp;) {
        struct efa_guard_watch *w = *pp;
        if (w->owner == owner) {
            *pp = w->next;
            w->next = gone;
            gone = w;
        } else {
            pp = &w->next;
        }
    }
    /* The last watch ends the thread (the plugin may be unloaded next); a
     * watch added meanwhile starts one of a new generation. */
    G.changes++;
    bool last = !G.list && G.running;
    pthread_t th = G.thread;
    if (last) {
        G.gen++;
        G.running = false;
    }
    if (G.running || last)
        ring();
    pthread_mutex_unlock(&G.mu);
    if (last)
        pthread_join(th, NULL);
    while (gone) {
        struct efa_guard_watch *w = gone;
        gone = w->next;
        watch_free(w);
    }
}
