/*
 * Engine life cycle: configuration, plugin loading, NIC groups, workers and
 * the callback thread; plus the small accessors of te.h.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "auth.h"
#include "cuda_copy.h"
#include "engine_internal.h"
#include "paths.h"
#include "layout.h"
#include "te_clock.h"
#include "wait.h"
#include "te_error.h"
#include "te_hot.h"

#define TE_MAX_PEERS_PER_GROUP 1024

TE_HOT
struct te_peer_entry *te_group_peer(struct te_group *g, te_peer p)
{
    uint32_t slot = p & TE_PEER_SLOT_MASK;
    if (slot >= atomic_load_explicit(&g->peer_count, memory_order_acquire))
        return NULL;
    struct te_peer_entry *pe = &g->peers[slot];
    if (atomic_load_explicit(&pe->state, memory_order_acquire) == TE_PEER_FREE)
        return NULL;
    /* A handle of the slot's earlier peer (removed, slot reused). */
    if (atomic_load_explicit(&pe->id, memory_order_acquire) != p)
        return NULL;
    return pe;
}

/* ------------------------------------------------------- plugin host */

static const char *host_config_get(void *ctx, const char *key)
{
    struct te_engine *e = ctx;
    const char *v = te_config_get(e->cfg, e->plugin.ops->name, key);
    return v ? v : te_pcfg_default(&e->pcfg, key);
}

/* The typed getters of ABI 1.4: values were validated at engine
 * creation, so these fail only on a key the plugin did not declare. */
static int host_config_u64(void *ctx, const char *key, uint64_t *out)
{
    struct te_engine *e = ctx;
    return te_pcfg_u64(e->cfg, &e->pcfg, key, out);
}

static int host_config_bool(void *ctx, const char *key, int *out)
{
    struct te_engine *e = ctx;
    return te_pcfg_bool(e->cfg, &e->pcfg, key, out);
}

static int host_config_double(void *ctx, const char *key, double *out)
{
    struct te_engine *e = ctx;
    return te_pcfg_double(e->cfg, &e->pcfg, key, out);
}

static int host_config_enum(void *ctx, const char *key, int *out)
{
    struct te_engine *e = ctx;
    return te_pcfg_enum(e->cfg, &e->pcfg, key, out);
}

static void host_set_error(void *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    te_vfail(-EIO, fmt, ap);
    va_end(ap);
}

static void host_log(void *ctx, int level, const char *fmt, ...)
{
    struct te_engine *e = ctx;
    if (!te_log_enabled(e, level))
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    /* The sink gets the plugin's name as the origin (core/log.c). Plugins
     * often name themselves already ("loopback: ..."): do not say it twice
     * (the stderr line stays "transferengine <level>: loopback: ..."). */
    const char *name = e->plugin.ops->name;
    size_t nl = strlen(name);
    const char *msg = buf;
    if (strncmp(buf, name, nl) == 0 && buf[nl] == ':' && buf[nl + 1] == ' ')
        msg = buf + nl + 2;
    te_log_emit(level, name, msg);
}

/* ------------------------------------------------------- settings */

/* Defaults live in one place: the documented key table. */
static uint64_t te_default_u64(const char *key)
{
    for (const struct te_config_key *k = te_engine_keys; k->name; k++)
        if (strcmp(k->name, key) == 0 && k->default_value)
            return strtoull(k->default_value, NULL, 0);
    return 0;
}

/* A key of [engine] that is one of two words: *out = 0 for off, 1 for
 * on; the default is the key table's. */
static int two_way(const te_config *cfg, const char *key, const char *off,
                   const char *on, int *out)
{
    const char *def = "";
    for (const struct te_config_key *k = te_engine_keys; k->name; k++)
        if (strcmp(k->name, key) == 0 && k->default_value)
            def = k->default_value;
    const char *v = te_config_get_str(cfg, "engine", key, def);
    if (strcmp(v, off) != 0 && strcmp(v, on) != 0)
        return te_fail(-EINVAL, "engine.%s = \"%s\": must be %s or %s", key,
                       v, off, on);
    *out = strcmp(v, on) == 0;
    return 0;
}

static int read_settings(const te_config *cfg, struct te_settings *s)
{
    uint64_t v;
    int rc;
#define U32(key, min, max, field)                                              \
    do {                                                                       \
        if ((rc = te_config_get_u64(cfg, "engine", key,                        \
                                    te_default_u64(key), min, max, &v)))       \
            return rc;                                                         \
        s->field = (uint32_t)v;                                                \
    } while (0)
    U32("groups", 1, 64, groups);
    U32("nics_per_group", 1, TE_MAX_NICS, nics_per_group);
    U32("submit_queue_depth", 2, 1u << 24, submit_queue_depth);
    U32("completion_queue_depth", 16, 1u << 26, completion_queue_depth);
    U32("nic_queue_depth", 0, 1u << 20, nic_queue_depth);
    U32("recv_depth", 1, 1u << 16, recv_depth);
    U32("max_msg_size", 1, 1u << 20, max_msg_size);
    U32("imm_table_size", 16, 1u << 26, imm_table_size);
    U32("idle_spin_us", 0, 10000000, idle_spin_us);
    U32("idle_spin_max_us", 0, 10000000, idle_spin_max_us);
    U32("idle_sleep_us", 0, 1000000, idle_sleep_us);
    U32("idle_sleep_max_us", 0, 1000000, idle_sleep_max_us);
    U32("idle_block_max_ms", 0, 3600000, idle_block_max_ms);
    U32("request_timeout_ms", 0, 1u << 31, request_timeout_ms);
    U32("peer_timeout_ms", 0, 1u << 31, peer_timeout_ms);
    U32("callback_spin_us", 0, 10000000, callback_spin_us);
    U32("log_level", 0, 3, log_level);
    U32("heartbeat_ms", 0, 1u << 31, heartbeat_ms);
#undef U32
    if ((rc = two_way(cfg, "progress", "thread", "caller",
                      &s->caller_progress)) ||
        (rc = two_way(cfg, "busy_wait", "block", "nap", &s->busy_nap)) ||
        (rc = two_way(cfg, "idle_wait", "sleep", "block", &s->idle_block)))
        return rc;
    if ((rc = te_config_get_bool(cfg, "engine", "shard_by_speed", 1,
                                 &s->shard_by_speed)) ||
        (rc = te_config_get_bool(cfg, "engine", "waiter_progress", 0,
                                 &s->waiter_progress)) ||
        (rc = te_config_get_bool(cfg, "engine", "heartbeat_keyless", 1,
                                 &s->heartbeat_keyless)))
        return rc;
    if ((rc = te_config_get_u64(cfg, "engine", "shard_min_bytes",
                                te_default_u64("shard_min_bytes"), 0,
                                1ull << 40, &s->shard_min_bytes)))
        return rc;
    const char *cc = te_config_get_str(cfg, "engine", "callback_cpu", "");
    s->callback_cpu = -1;
    if (*cc) {
        char *end;
        long cpu = strtol(cc, &end, 10);
        if (end == cc || *end || cpu < 0 || cpu >= CPU_SETSIZE)
            return te_fail(-EINVAL, "engine.callback_cpu = \"%s\": not a CPU "
                           "number (0..%d, or empty for not pinned)", cc,
                           CPU_SETSIZE - 1);
        s->callback_cpu = (int)cpu;
    }
    if ((rc = te_paths_parse_require(
             te_config_get_str(cfg, "engine", "require", "any"),
             &s->require_caps)))
        return rc;
    snprintf(s->plugin, sizeof(s->plugin), "%s",
             te_config_get_str(cfg, "engine", "plugin", "loopback"));
    snprintf(s->plugin_path, sizeof(s->plugin_path), "%s",
             te_config_get_str(cfg, "engine", "plugin_path", ""));

    return 0;
}

/* ------------------------------------------------------- groups */

static int open_group(struct te_engine *e, struct te_group *g, int index,
                      int ndev)
{
    const struct te_plugin_ops *P = e->plugin.ops;
    g->e = e;
    g->index = index;
    g->cpu = e->s.worker_cpu[index];
    g->nic_count = e->s.group_nic_count[index];
    g->inflight.next = g->inflight.prev = &g->inflight;
    g->epfd = g->wake_fd = -1;
    pthread_mutex_init(&g->ctl_lock, NULL);
    pthread_mutex_init(&g->progress_lock, NULL);
    te_cond_init_monotonic(&g->ctl_cond);
    pthread_mutex_init(&g->mr_lock, NULL);
    int src = te_recv_slot_init(&g->recv);
    if (src)
        return te_fail(-src, "group %d: receive handler lock: %s", index,
                       strerror(src));
    g->mrs.next = g->mrs.prev = &g->mrs;
    g->peer_cap = TE_MAX_PEERS_PER_GROUP;
    g->peers = calloc(g->peer_cap, sizeof(*g->peers));
    g->subq = te_mpsc_new(e->s.submit_queue_depth);
    if (!g->peers || !g->subq)
        return te_fail(-ENOMEM, "group %d: out of memory", index);

    snprintf(g->addr.transport, sizeof(g->addr.transport), "%s", P->name);
    g->addr.engine_id = e->engine_id;
    g->addr.group = (uint32_t)index;
    g->addr.nic_count = g->nic_count;
    for (uint32_t i = 0; i < g->nic_count; i++) {
        struct te_nic *n = &g->nics[i];
        int dev = e->s.group_nics[index][i];
        if (dev >= ndev)
            return te_fail(-ENODEV, "group %d NIC %u: device %d does not "
                           "exist (plugin %s has %d devices)", index, i, dev,
                           P->name, ndev);
        n->device = dev;
        n->info.struct_size = sizeof(n->info);
        int rc = P->query_device(e->pctx, dev, &n->info);
        if (rc)
            return te_fail(rc, "group %d: query of device %d failed: %s",
                           index, dev, te_strerror(rc));
        struct te_plugin_nic_attr attr = {
            .struct_size = sizeof(attr),
            .queue_depth = e->s.nic_queue_depth,
            .recv_depth = e->s.recv_depth,
        };
        te_error_clear();
        rc = P->nic_open(e->pctx, dev, &attr, &n->pn);
        if (rc)
            return te_fail(rc, "group %d: cannot open NIC %s: %s%s%s", index,
                           n->info.name, te_strerror(rc),
                           te_last_error()[0] ? ": " : "", te_last_error());
        if ((rc = te_paths_open_nic(e, g, n)))
            return rc;
        n->addr_len = sizeof(n->addr);
        rc = P->nic_address(n->pn, n->addr, &n->addr_len);
        if (rc)
            return te_fail(rc, "NIC %s: no address: %s", n->info.name,
                           te_strerror(rc));
        g->addr.nic_addr_len[i] = (uint16_t)n->addr_len;
        memcpy(g->addr.nic_addr[i], n->addr, n->addr_len);

        /* Message slabs: registered once, reused for every SEND/RECV. */
        size_t msz = e->s.max_msg_size;
        uint32_t nsend = e->s.recv_depth; /* same depth both ways */
        n->send_slab = calloc(nsend, msz);
        n->recv_slab = calloc(e->s.recv_depth, msz);
        n->send_slots = calloc(nsend, sizeof(struct te_msg_slot));
        n->recv_slots = calloc(e->s.recv_depth, sizeof(struct te_msg_slot));
        n->recv_repost = calloc(e->s.recv_depth, sizeof(struct te_msg_slot *));
        if (!n->send_slab || !n->recv_slab || !n->send_slots ||
            !n->recv_slots || !n->recv_repost)
            return te_fail(-ENOMEM, "NIC %s: out of memory for message "
                           "buffers", n->info.name);
        struct te_plugin_mr_info mi;
        rc = P->mr_reg(n->pn, n->send_slab, (size_t)nsend * msz, 0,
                       TE_PMEM_HOST, 0, &n->send_mr, &mi);
        if (!rc)
            rc = P->mr_reg(n->pn, n->recv_slab, (size_t)e->s.recv_depth * msz,
                           TE_PMR_LOCAL_WRITE, TE_PMEM_HOST, 0, &n->recv_mr,
                           &mi);
        if (rc)
            return te_fail(rc, "NIC %s: cannot register message buffers: %s",
                           n->info.name, te_strerror(rc));
        for (uint32_t s = 0; s < nsend; s++) {
            n->send_slots[s].buf = n->send_slab + (size_t)s * msz;
            n->send_slots[s].nic = i;
            n->send_slots[s].next_free = n->send_free;
            n->send_free = &n->send_slots[s];
        }
        for (uint32_t s = 0; s < e->s.recv_depth; s++) {
            n->recv_slots[s].buf = n->recv_slab + (size_t)s * msz;
            n->recv_slots[s].nic = i;
            n->recv_repost[n->recv_to_post++] = &n->recv_slots[s];
        }
    }
    /* Weighted shards only where every NIC knows its speed and they
     * differ: equal NICs keep the plain equal split. */
    int known = 1, differ = 0;
    for (uint32_t i = 0; i < g->nic_count; i++) {
        g->shard_weight[i] = g->nics[i].info.link_gbps;
        known &= g->shard_weight[i] != 0;
        differ |= g->shard_weight[i] != g->shard_weight[0];
    }
    g->shard_weights = e->s.shard_by_speed && known && differ
                           ? g->shard_weight : NULL;
    return te_group_wait_open(e, g);
}

static void close_group(struct te_engine *e, struct te_group *g)
{
    const struct te_plugin_ops *P = e->plugin.ops;
    /* Registrations the application did not release. */
    while (g->mrs.next && g->mrs.next != &g->mrs) {
        struct te_mr *mr = (struct te_mr *)g->mrs.next;
        g->mrs.next = mr->link.next;
        te_mr_release(mr);
    }
    for (uint32_t i = 0; i < g->nic_count; i++) {
        struct te_nic *n = &g->nics[i];
        if (n->pn) {
            if (n->send_mr)
                P->mr_dereg(n->pn, n->send_mr);
            if (n->recv_mr)
                P->mr_dereg(n->pn, n->recv_mr);
            P->nic_close(n->pn);
        }
        free(n->send_slab);
        free(n->recv_slab);
        free(n->send_slots);
        free(n->recv_slots);
        free(n->recv_repost);
    }
    te_group_wait_close(g);
    if (g->subq)
        te_mpsc_free(g->subq);
    free(g->peers);
    pthread_mutex_destroy(&g->ctl_lock);
    pthread_mutex_destroy(&g->progress_lock);
    pthread_cond_destroy(&g->ctl_cond);
    te_recv_slot_destroy(&g->recv);
    pthread_mutex_destroy(&g->mr_lock);
}

TE_HOT
static void fire_to_callbacks(void *sink, uint32_t imm, te_imm_fn cb,
                              void *arg)
{
    struct te_engine *e = sink;
    if (te_imm_cb_runs_inline(cb)) {
        cb(imm, 0, arg);
        return;
    }
    struct te_cb_event ev = {.kind = TE_CB_IMM};
    ev.u.imm.fn = cb;
    ev.u.imm.arg = arg;
    ev.u.imm.imm = imm;
    ev.u.imm.status = 0;
    if (te_callbacks_push(&e->cb, &ev, 1))
        te_log(e, 0, "imm %u: callback lost: out of memory", imm);
}

/* An expectation disarmed by an immediate space's retirement. */
static void cancel_to_callbacks(void *sink, uint32_t imm, te_imm_fn cb,
                                void *arg, int status)
{
    struct te_engine *e = sink;
    struct te_cb_event ev = {.kind = TE_CB_IMM};
    ev.u.imm.fn = cb;
    ev.u.imm.arg = arg;
    ev.u.imm.imm = imm;
    ev.u.imm.status = status;
    if (te_callbacks_push(&e->cb, &ev, 1))
        te_log(e, 0, "imm %u: cancellation callback lost: out of memory", imm);
}

/* ------------------------------------------------------- create/destroy */

static int validate_config(struct te_engine *e)
{
    return te_config_validate_section(e->cfg, "engine", te_engine_keys);
}

static void warn_unused_section(void *arg, const char *section,
                                const char *origin)
{
    struct te_engine *e = arg;
    te_log(e, 1, "section [%s] (%s) is ignored: no plugin named %s is "
           "loaded (this engine uses %s)", section, origin, section,
           e->plugin.ops->name);
}

/* The loaded plugin's section against its declared keys; other plugins'
 * sections are warned about and ignored (one config file may serve several
 * transports), a near miss of [engine] or of the plugin's name refused. */
static int validate_plugin_section(struct te_engine *e)
{
    char why[256];
    int rc = te_pcfg_read(e->plugin.ops, &e->pcfg, why, sizeof why);
    if (rc)
        return te_fail(rc, "plugin %s: %s", e->plugin.ops->name, why);
    rc = te_pcfg_check_sections(e->cfg, e->plugin.ops->name,
                                warn_unused_section, e);
    return rc ? rc : te_pcfg_validate(e->cfg, &e->pcfg);
}

TE_API int te_engine_create(const te_config *cfg, te_engine **out)
{
    te_error_clear();
    if (!out)
        return te_fail(-EINVAL, "te_engine_create: out is NULL");
    *out = NULL;
    struct te_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return te_fail(-ENOMEM, "te_engine_create: out of memory");
    e->s.log_level = 1;
    int rc;
    if (cfg) {
        e->cfg = te_config_clone(cfg);
    } else {
        e->cfg = te_config_new();
        const char *path = getenv("TE_CONFIG");
        if (e->cfg && path && path[0] &&
            (rc = te_config_load_file(e->cfg, path))) {
            te_config_free(e->cfg);
            free(e);
            return rc;
        }
    }
    if (!e->cfg) {
        free(e);
        return te_fail(-ENOMEM, "te_engine_create: out of memory");
    }
    if ((rc = validate_config(e)) || (rc = read_settings(e->cfg, &e->s)))
        goto fail_cfg;
    if ((rc = te_auth_load(e->cfg, &e->auth)))
        goto fail_cfg;
    if ((rc = te_plugin_load(e->s.plugin, e->s.plugin_path, &e->plugin)))
        goto fail_cfg;
    if ((rc = validate_plugin_section(e)))
        goto fail_plugin;
    if (getrandom(&e->engine_id, sizeof(e->engine_id), 0) !=
        sizeof(e->engine_id))
        e->engine_id = (uint64_t)(uintptr_t)e ^ (uint64_t)getpid() << 32;
    atomic_store(&e->next_req_id, 1);

    e->host.struct_size = sizeof(e->host);
    e->host.host_ctx = e;
    e->host.config_get = host_config_get;
    e->host.set_error = host_set_error;
    e->host.log = host_log;
    e->host.progressed = te_worker_progressed;
    e->host.config_u64 = host_config_u64;
    e->host.config_bool = host_config_bool;
    e->host.config_double = host_config_double;
    e->host.config_enum = host_config_enum;
    te_auth_host_install(&e->host);
    te_cuda_host_install(&e->host); /* device copies (loopback) */
    te_error_clear();
    rc = e->plugin.ops->init(&e->host, &e->pctx);
    if (rc) {
        rc = te_fail(rc, "plugin %s: init failed: %s%s%s",
                     e->plugin.ops->name, te_strerror(rc),
                     te_last_error()[0] ? ": " : "", te_last_error());
        goto fail_plugin;
    }
    int ndev = e->plugin.ops->device_count(e->pctx);
    if (ndev <= 0) {
        rc = te_fail(ndev < 0 ? ndev : -ENODEV, "plugin %s found no device",
                     e->plugin.ops->name);
        goto fail_init;
    }
    if ((rc = te_layout_choose(e, ndev)))
        goto fail_init;
    e->imms = te_imm_table_new(e->s.imm_table_size, fire_to_callbacks, e);
    if (!e->imms) {
        rc = te_fail(-ENOMEM, "ImmCounter table: out of memory");
        goto fail_init;
    }
    te_imm_spaces_init(&e->spaces, e->imms, cancel_to_callbacks, e);
    if ((rc = te_callbacks_start(&e->cb, e->s.callback_spin_us,
                                 e->s.idle_spin_max_us,
                                 e->s.callback_cpu,
                                 e->s.completion_queue_depth,
                                 !e->s.caller_progress))) {
        rc = te_fail(rc, "cannot start the callback thread: %s",
                     te_strerror(rc));
        goto fail_imms;
    }
    if (e->cb.pin_error)
        te_log(e, 1, "cannot pin the callback thread to CPU %d "
               "(engine.callback_cpu): %s; it runs unpinned",
               e->s.callback_cpu, strerror(e->cb.pin_error));
    if (te_req_pool_init(&e->req_pool, TE_REQ_POOL_BLOCKS,
                         TE_REQ_POOL_BLOCK_SIZE)) {
        rc = te_fail(-ENOMEM, "request pool: out of memory");
        goto fail_cb;
    }
    e->groups = calloc(e->s.groups, sizeof(*e->groups));
    if (!e->groups) {
        rc = te_fail(-ENOMEM, "out of memory");
        goto fail_pool;
    }
    e->ngroups = e->s.groups;
    e->epfd_all = -1;
    for (uint32_t g = 0; g < e->ngroups; g++) /* close_group of any group */
        e->groups[g].epfd = e->groups[g].wake_fd = -1;
    for (uint32_t g = 0; g < e->ngroups; g++) {
        if ((rc = open_group(e, &e->groups[g], (int)g, ndev)))
            goto fail_groups;
    }
    for (uint32_t g = 0; g < e->ngroups; g++) {
        if ((rc = te_worker_start(&e->groups[g]))) {
            rc = te_fail(rc, "group %u: cannot start worker: %s", g,
                         te_strerror(rc));
            goto fail_groups;
        }
    }
    if ((rc = te_progress_open(e)))
        goto fail_groups;
    *out = e;
    return 0;

fail_groups: {
    char msg[512];
    snprintf(msg, sizeof(msg), "%s", te_last_error());
    atomic_store(&e->stopping, 1);
    for (uint32_t g = 0; g < e->ngroups; g++) {
        te_group_wake(&e->groups[g]);
        te_worker_stop(&e->groups[g]);
    }
    for (uint32_t g = 0; g < e->ngroups; g++)
        close_group(e, &e->groups[g]);
    free(e->groups);
    te_fail(rc, "%s", msg);
}
fail_pool:
    te_req_pool_destroy(&e->req_pool);
fail_cb:
    te_callbacks_stop(&e->cb);
fail_imms:
    te_imm_spaces_fini(&e->spaces);
    te_imm_table_free(e->imms);
fail_init:
    e->plugin.ops->fini(e->pctx);
fail_plugin:
    te_pcfg_free(&e->pcfg);
    te_plugin_unload(&e->plugin);
fail_cfg:
    te_auth_free(e->auth);
    te_config_free(e->cfg);
    free(e->topo);
    free(e);
    return rc;
}

TE_API void te_engine_destroy(te_engine *e)
{
    if (!e)
        return;
    /* Destroying joins the callback thread and frees its queues: from that
     * thread it would join itself and then return into freed memory. */
    if (te_callbacks_on_thread(&e->cb)) {
        te_log(e, 0, "te_engine_destroy called from one of the engine's "
               "callbacks: refused (the engine stays alive; destroy it from "
               "another thread)");
        return;
    }
    atomic_store_explicit(&e->stopping, 1, memory_order_release);
    for (uint32_t g = 0; g < e->ngroups; g++) {
        te_group_wake(&e->groups[g]);
        te_worker_stop(&e->groups[g]);
    }
    /* Every request has completed (or failed) by now; run their callbacks
     * before the NICs and the plugin go away. */
    te_callbacks_stop(&e->cb);
    te_progress_close(e);
    for (uint32_t g = 0; g < e->ngroups; g++)
        close_group(e, &e->groups[g]);
    free(e->groups);
    te_req_pool_destroy(&e->req_pool); /* every request was freed above */
    te_imm_spaces_fini(&e->spaces);
    te_imm_table_free(e->imms);
    e->plugin.ops->fini(e->pctx);
    te_pcfg_free(&e->pcfg);
    te_plugin_unload(&e->plugin);
    te_auth_free(e->auth); /* wipes the secret */
    te_config_free(e->cfg);
    free(e->topo);
    free(e);
}

TE_API int te_engine_group_count(const te_engine *e)
{
    return e ? (int)e->ngroups : -EINVAL;
}

TE_API int te_engine_nic_count(const te_engine *e, int group)
{
    if (!e || group < 0 || (uint32_t)group >= e->ngroups)
        return -EINVAL;
    return (int)e->groups[group].nic_count;
}

TE_API const char *te_engine_plugin_name(const te_engine *e)
{
    return e ? e->plugin.ops->name : "";
}

TE_API int te_engine_progress_mode(const te_engine *e)
{
    if (!e)
        return -EINVAL;
    return e->s.caller_progress ? TE_PROGRESS_CALLER : TE_PROGRESS_THREAD;
}

TE_API int te_engine_address(te_engine *e, int group, void *buf, size_t *len)
{
    te_error_clear();
    if (!e || !len || group < 0 || (uint32_t)group >= e->ngroups)
        return te_fail(-EINVAL, "te_engine_address: bad engine, group %d or "
                       "len", group);
    return te_wire_addr_encode(&e->groups[group].addr, buf, len);
}

TE_API int te_engine_nic_info(const te_engine *e, int group, int nic,
                              te_nic_info *out)
{
    te_error_clear();
    if (!e || !out || group < 0 || (uint32_t)group >= e->ngroups || nic < 0 ||
        (uint32_t)nic >= e->groups[group].nic_count)
        return te_fail(-EINVAL, "te_engine_nic_info: bad group %d or NIC %d",
                       group, nic);
    const struct te_nic *n = &e->groups[group].nics[nic];
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", n->info.name);
    snprintf(out->pci_path, sizeof(out->pci_path), "%s", n->info.pci_path);
    out->numa_node = n->info.numa_node;
    out->device = n->device;
    out->link_gbps = n->info.link_gbps;
    out->queue_depth = n->info.queue_depth;
    return 0;
}
