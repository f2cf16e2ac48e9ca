/*
 * The proxy thread: polls the shared ring, validates each entry (target
 * known, bounds inside both regions, reserved fields zero) and submits it
 * as a WriteImm; a bad entry stops the ring with an error instead of
 * writing anywhere. Watches raise flags from ImmCounter callbacks.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "te/moe_proxy.h"

#define PROXY_TARGETS 64
/* A write's deadline in the engine, and destroy's wait for the callbacks
 * of writes in flight: longer, so that normally all of them are in. */
#define PROXY_WRITE_TIMEOUT_MS 5000
#define PROXY_DESTROY_WAIT_MS (2 * PROXY_WRITE_TIMEOUT_MS)
/* An idle proxy's naps: 20 us, and PROXY_DOZE_US once nothing came for
 * PROXY_DOZE_NS (proxy_main). */
#define PROXY_DOZE_NS 100000000ull
#define PROXY_DOZE_US 1000

static uint64_t proxy_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct proxy_target {
    atomic_int set; /* published last: the proxy thread reads the rest after it */
    te_peer peer;
    te_mr *local;
    te_mr_desc remote;
};

struct proxy_watch {
    te_moe_proxy *p;
    uint32_t flag, value, imm;
    atomic_int armed; /* destroy disarms what is still armed */
};

struct te_moe_proxy {
    te_engine *e;
    te_moe_ring *ring;
    te_moe_ring_entry *ent;
    volatile uint32_t *flags;
    struct proxy_target targets[PROXY_TARGETS];
    struct proxy_watch *watches;
    pthread_t thread;
    atomic_int stop;
    atomic_uint_fast64_t submitted, completed, failed;
    /* One reference for the owner, one per write in flight and per armed
     * watch: callbacks can come after destroy (a watch's at its deadline
     * or te_engine_destroy), so the last one frees. */
    atomic_int refs;
    pthread_mutex_t mu;
    int dead; /* under mu: destroyed, the ring may be gone */
    char error[256];
};

static void proxy_unref(te_moe_proxy *p)
{
    if (atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&p->mu);
    free(p->watches);
    free(p);
}

size_t te_moe_ring_bytes(uint32_t entries, uint32_t flags)
{
    return sizeof(te_moe_ring) + (size_t)entries * sizeof(te_moe_ring_entry) + 4u * (size_t)flags;
}

te_moe_ring_entry *te_moe_ring_entries(te_moe_ring *r) { return (te_moe_ring_entry *)(r + 1); }

volatile uint32_t *te_moe_ring_flags(te_moe_ring *r)
{
    return (volatile uint32_t *)(te_moe_ring_entries(r) + r->entries);
}

static void ring_fail(te_moe_proxy *p, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ring_fail(te_moe_proxy *p, int err, const char *fmt, ...)
{
    pthread_mutex_lock(&p->mu);
    if (!p->dead && __atomic_load_n(&p->ring->error, __ATOMIC_RELAXED) == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->error, sizeof(p->error), fmt, ap);
        va_end(ap);
        __atomic_store_n(&p->ring->error, err, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&p->mu);
}

static void on_done(const te_completion *c, void *arg)
{
    te_moe_proxy *p = arg;
    if (c->status < 0) {
        ring_fail(p, c->status, "proxy write %llu failed: %s (%s)",
                  (unsigned long long)c->user_data, te_strerror(c->status), c->reason);
        atomic_fetch_add(&p->failed, 1);
    } else {
        atomic_fetch_add(&p->completed, 1);
    }
    proxy_unref(p);
}

/* Validate and submit one entry; -errno stops the ring. */
static int submit_entry(te_moe_proxy *p, uint64_t pos, const te_moe_ring_entry *en)
{
    if (en->target >= PROXY_TARGETS || !atomic_load(&p->targets[en->target].set)) {
        ring_fail(p, -EINVAL, "ring entry %llu: unknown target %u", (unsigned long long)pos,
                  en->target);
        return -EINVAL;
    }
    if (en->reserved0 || en->reserved[0] || en->reserved[1] || en->reserved[2]) {
        ring_fail(p, -EINVAL, "ring entry %llu: reserved fields not zero", (unsigned long long)pos);
        return -EINVAL;
    }
    const struct proxy_target *t = &p->targets[en->target];
    size_t llen = te_mr_len(t->local);
    if (en->len == 0 || en->src_off > llen || en->len > llen - en->src_off ||
        en->dst_off > t->remote.len || en->len > t->remote.len - en->dst_off) {
        ring_fail(p, -ERANGE, "ring entry %llu: %llu bytes at %llu -> %llu outside the regions "
                  "(%zu local, %llu remote)", (unsigned long long)pos,
                  (unsigned long long)en->len, (unsigned long long)en->src_off,
                  (unsigned long long)en->dst_off, llen, (unsigned long long)t->remote.len);
        return -ERANGE;
    }
    te_request r;
    te_request_init(&r, TE_OP_WRITE);
    r.flags = TE_F_IMM;
    r.imm = en->imm;
    r.route.kind = TE_ROUTE_PIN;
    r.timeout_ms = PROXY_WRITE_TIMEOUT_MS;
    r.user_data = pos;
    r.done = on_done;
    r.done_arg = p;
    r.u.xfer.peer = t->peer;
    r.u.xfer.local = t->local;
    r.u.xfer.local_off = en->src_off;
    r.u.xfer.remote = &t->remote;
    r.u.xfer.remote_off = en->dst_off;
    r.u.xfer.len = en->len;
    int64_t id;
    /* Both before te_submit: its callback may run (and count the write
     * completed or failed) before te_submit returns. */
    atomic_fetch_add(&p->refs, 1);
    atomic_fetch_add(&p->submitted, 1);
    for (int tries = 0; (id = te_submit(p->e, &r)) == -EAGAIN && tries < 100000; tries++)
        usleep(10);
    if (id < 0) {
        atomic_fetch_sub(&p->submitted, 1);
        atomic_fetch_sub(&p->refs, 1); /* ours is still held */
        ring_fail(p, (int)id, "ring entry %llu: te_submit: %s", (unsigned long long)pos,
                  te_last_error());
        return (int)id;
    }
    return 0;
}

static void *proxy_main(void *arg)
{
    te_moe_proxy *p = arg;
    int caller = te_engine_progress_mode(p->e) == TE_PROGRESS_CALLER;
    uint32_t mask = p->ring->entries - 1;
    uint64_t head = __atomic_load_n(&p->ring->consumed, __ATOMIC_RELAXED);
    unsigned idle = 0;
    uint64_t idle_since = 0; /* when the naps began */
    while (!atomic_load(&p->stop)) {
        te_moe_ring_entry *en = &p->ent[head & mask];
        /* The words both sides touch are accessed atomically (a GPU
         * producer's volatile store after __threadfence_system() pairs
         * with the acquire load), so the protocol is also checkable by
         * ThreadSanitizer with a CPU producer. */
        if (__atomic_load_n(&en->seq, __ATOMIC_ACQUIRE) != (uint32_t)(head + 1) ||
            __atomic_load_n(&p->ring->error, __ATOMIC_ACQUIRE)) {
            /* In caller mode this thread is the engine's progress: the
             * completions and watches of its writes happen here. */
            if (caller && te_progress(p->e, -1, 0) > 0) {
                idle = 0;
                idle_since = 0; /* the engine has work: a step is on */
                continue;
            }
            /* The producer posts in bursts (a layer's writes): spin a
             * little with yields, then nap. A GPU kernel cannot signal a
             * wait object, so an idle proxy must poll: 20 us naps cost
             * 0.07-0.08 of a core for ever; after PROXY_DOZE_NS without
             * an entry (no MoE step in flight: the rank is idle) it naps
             * PROXY_DOZE_US, and the first entry after such a pause
             * waits up to that long. */
            if (++idle <= 2000) {
                sched_yield();
                continue;
            }
            uint64_t now = proxy_now_ns();
            if (!idle_since)
                idle_since = now;
            usleep(now - idle_since >= PROXY_DOZE_NS ? PROXY_DOZE_US : 20);
            continue;
        }
        idle = 0;
        idle_since = 0;
        te_moe_ring_entry copy = *en;
        __atomic_store_n(&en->seq, 0, __ATOMIC_RELAXED);
        if (submit_entry(p, head, &copy))
            continue; /* ring stopped; the producer sees ring->error */
        head++;
        __atomic_store_n(&p->ring->consumed, head, __ATOMIC_RELEASE);
    }
    return NULL;
}

int te_moe_proxy_create(te_engine *e, void *mem, uint32_t entries, uint32_t flags,
                        te_moe_proxy **out)
{
    if (!e || !mem || !out || entries == 0 || (entries & (entries - 1)) || entries > (1u << 20))
        return -EINVAL;
    te_moe_proxy *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->watches = calloc(flags ? flags : 1, sizeof(*p->watches));
    if (!p->watches) {
        free(p);
        return -ENOMEM;
    }
    memset(mem, 0, te_moe_ring_bytes(entries, flags));
    atomic_init(&p->refs, 1);
    p->e = e;
    p->ring = mem;
    p->ring->entries = entries;
    p->ring->flags = flags;
    p->ent = te_moe_ring_entries(p->ring);
    p->flags = te_moe_ring_flags(p->ring);
    pthread_mutex_init(&p->mu, NULL);
    if (pthread_create(&p->thread, NULL, proxy_main, p)) {
        free(p->watches);
        free(p);
        return -EAGAIN;
    }
    *out = p;
    return 0;
}

int te_moe_proxy_target(te_moe_proxy *p, uint32_t index, te_peer peer, te_mr *local,
                        const te_mr_desc *remote)
{
    if (index >= PROXY_TARGETS || !local || !remote)
        return -EINVAL;
    struct proxy_target *t = &p->targets[index];
    t->peer = peer;
    t->local = local;
    t->remote = *remote;
    atomic_store(&t->set, 1);
    return 0;
}

static void on_watch(uint32_t imm, int status, void *arg)
{
    struct proxy_watch *w = arg;
    te_moe_proxy *p = w->p;
    (void)imm;
    pthread_mutex_lock(&p->mu);
    if (!p->dead) {
        atomic_thread_fence(memory_order_release); /* the data before the flag */
        __atomic_store_n(&p->flags[w->flag], status == 0 ? w->value : TE_MOE_FLAG_FAILED,
                         __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&p->mu);
    atomic_store(&w->armed, 0);
    proxy_unref(p);
}

int te_moe_proxy_watch(te_moe_proxy *p, uint32_t imm, uint64_t count, uint32_t flag,
                       uint32_t value, int timeout_ms)
{
    if (flag >= p->ring->flags)
        return -EINVAL;
    struct proxy_watch *w = &p->watches[flag];
    if (atomic_load(&w->armed))
        return -EBUSY; /* one watch per flag at a time */
    w->p = p, w->flag = flag, w->value = value, w->imm = imm;
    atomic_store(&w->armed, 1);
    atomic_fetch_add(&p->refs, 1); /* before: the callback may run first */
    int rc = te_imm_expect_timeout(p->e, imm, count, timeout_ms, on_watch, w);
    if (rc) {
        atomic_store(&w->armed, 0);
        atomic_fetch_sub(&p->refs, 1); /* ours is still held */
    }
    return rc;
}

void te_moe_proxy_counts(const te_moe_proxy *p, uint64_t *submitted, uint64_t *completed)
{
    /* Completed first: submitted is counted before a write can complete,
     * so read in this order completed <= submitted. */
    *completed = atomic_load(&((te_moe_proxy *)p)->completed);
    *submitted = atomic_load(&((te_moe_proxy *)p)->submitted);
}

uint64_t te_moe_proxy_failed(const te_moe_proxy *p)
{
    return atomic_load(&((te_moe_proxy *)p)->failed);
}

const char *te_moe_proxy_error(const te_moe_proxy *p) { return p->error; }

/* Writes whose callback has not run yet. */
static uint64_t proxy_in_flight(te_moe_proxy *p)
{
    uint64_t ended = atomic_load(&p->completed) + atomic_load(&p->failed);
    return atomic_load(&p->submitted) - ended; /* read last: never below ended */
}

void te_moe_proxy_destroy(te_moe_proxy *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, 1);
    pthread_join(p->thread, NULL);
    for (int i = 0; i < PROXY_DESTROY_WAIT_MS * 2 && proxy_in_flight(p); i++)
        if (te_engine_progress_mode(p->e) != TE_PROGRESS_CALLER ||
            te_progress_wait(p->e, -1, 1) == -EBUSY)
            usleep(500); /* caller mode: its thread is gone, progress here */
    uint64_t left = proxy_in_flight(p);
    if (left)
        te_log_printf(TE_LOG_ERROR, "te-moe",
                "proxy: %llu writes still in flight after %d ms: "
                "the proxy's memory stays until their callbacks have run",
                (unsigned long long)left, PROXY_DESTROY_WAIT_MS);
    /* Watches still armed: take them away, or they would linger in the
     * engine and consume arrivals of their imm meant for a later user.
     * te_imm_disarm says 1 only when the callback can no longer come, so
     * only then is the watch's reference dropped here. */
    for (uint32_t f = 0; f < p->ring->flags; f++) {
        struct proxy_watch *w = &p->watches[f];
        if (atomic_load(&w->armed) && te_imm_disarm(p->e, w->imm, NULL) == 1) {
            atomic_store(&w->armed, 0);
            proxy_unref(p);
        }
    }
    /* Callbacks still to come (late writes; a watch met just before) must
     * not touch the ring: the owner may free it once this returns. */
    pthread_mutex_lock(&p->mu);
    p->dead = 1;
    pthread_mutex_unlock(&p->mu);
    proxy_unref(p);
}
