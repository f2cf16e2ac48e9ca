/*
 * Peers: parsing remote NIC addresses, the address vector, and liveness.
 *
 * peer_add() only records the address (it runs on the worker and must not
 * block). The address vector insert happens on first use: the first post to
 * the peer, or the next poll(), whichever comes first; all peers added since
 * the last poll go in ONE fi_av_insert call, so a group of peers added
 * together (e.g. every rank of an expert-parallel group) is pre-resolved in
 * one batch before its first transfer. efa.av_insert = at_add inserts inside
 * peer_add instead.
 *
 * Liveness: providers report a broken connection as error completions
 * (efa_cq.c turns those into PEER_DOWN), but a dead shm peer never answers
 * at all. A peer on the same host (same boot id) whose process start time
 * matches its address is watched with a pidfd; its death fails its
 * operations at once.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "efa_internal.h"


static int pidfd_open_(uint32_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/* ---------------------------------------------------------- table */

int efa_addr_map_set(uint32_t **map, size_t *cap, fi_addr_t fa, uint32_t v)
{
    if (fa == FI_ADDR_NOTAVAIL)
        return -EINVAL;
    if (fa >= *cap) {
        size_t n = *cap ? *cap : 64;
        while (n <= fa)
            n *= 2;
        uint32_t *m = realloc(*map, n * sizeof(*m));
        if (!m)
            return -ENOMEM;
        memset(m + *cap, 0, (n - *cap) * sizeof(*m));
        *map = m;
        *cap = n;
    }
    (*map)[fa] = v;
    return 0;
}

static int av_map_set(efa_nic *nic, fi_addr_t fa, uint32_t v)
{
    return efa_addr_map_set(&nic->av_map, &nic->av_map_cap, fa, v);
}

te_plugin_peer efa_peer_of_src(efa_nic *nic, fi_addr_t src)
{
    if (src == FI_ADDR_NOTAVAIL || src >= nic->av_map_cap || !nic->av_map[src])
        return 0;
    struct efa_peer *p = &nic->peers[nic->av_map[src] - 1];
    return p->state == EFA_PEER_LIVE || p->state == EFA_PEER_DOWN ? p->handle
                                                                  : 0;
}

static struct efa_peer *peer_new(efa_nic *nic)
{
    for (uint32_t i = 0; i < nic->npeers; i++)
        if (nic->peers[i].state == EFA_PEER_FREE)
            return &nic->peers[i];
    if (nic->npeers == nic->peers_cap) {
        uint32_t cap = nic->peers_cap ? 2 * nic->peers_cap : 16;
        struct efa_peer *p = realloc(nic->peers, cap * sizeof(*p));
        if (!p)
            return NULL;
        nic->peers = p;
        nic->peers_cap = cap;
    }
    return &nic->peers[nic->npeers++];
}

/* Release a peer whose provider operations have all come back. */
static void peer_release(efa_nic *nic, struct efa_peer *p)
{
    if (p->auth) {
        /* The address belongs to its record (efa_auth.c): stays in the
         * AV; the map points at another peer of it, if any. */
        uint32_t me = (uint32_t)(p - nic->peers) + 1, other = 0;
        for (uint32_t i = 0; i < nic->npeers && !other; i++)
            if (i + 1 != me && nic->peers[i].auth == p->auth &&
                nic->peers[i].state != EFA_PEER_FREE)
                other = i + 1;
        if (p->fi_addr < nic->av_map_cap && nic->av_map[p->fi_addr] == me)
            av_map_set(nic, p->fi_addr, other);
        efa_auth_peer_detach(nic, p);
    } else if (p->fi_addr != FI_ADDR_NOTAVAIL) {
        fi_av_remove(nic->av, &p->fi_addr, 1, 0);
        av_map_set(nic, p->fi_addr, 0);
    }
    if (p->pidfd >= 0) {
        if (nic->bell)
            efa_bell_unwatch(nic->bell, p->pidfd);
        close(p->pidfd);
    }
    if (p->bell) {
        efa_bell_remote_close(p->bell);
        nic->bell_peers--;
    }
    if (p->exit_seen)
        nic->exits_seen--;
    efa_local_put(p->local);
    memset(p, 0, sizeof(*p));
    p->state = EFA_PEER_FREE;
    p->pidfd = -1;
}

/* ---------------------------------------------------------- add */

static int parse(efa_nic *nic, const void *buf, size_t len,
                 struct efa_wire_addr *hdr, const uint8_t **raw)
{
    if (!buf || len < sizeof(*hdr)) {
        efa_err(nic, "peer address of %zu bytes is shorter than the %zu-byte "
                "header", len, sizeof(*hdr));
        return -EINVAL;
    }
    memcpy(hdr, buf, sizeof(*hdr));
    if (hdr->magic != EFA_ADDR_MAGIC || hdr->version != EFA_ADDR_VERSION) {
        efa_err(nic, "not an efa plugin address (magic 0x%08x, version %u)",
                hdr->magic, hdr->version);
        return -EINVAL;
    }
    if (hdr->raw_len > EFA_RAW_MAX || len != sizeof(*hdr) + hdr->raw_len) {
        efa_err(nic, "peer address length %zu does not match its endpoint "
                "name of %u bytes", len, hdr->raw_len);
        return -EINVAL;
    }
    char mine[EFA_PROV_LEN + 1] = "", theirs[EFA_PROV_LEN + 1] = "";
    strncpy(mine, nic->info->fabric_attr->prov_name, EFA_PROV_LEN);
    memcpy(theirs, hdr->prov, EFA_PROV_LEN);
    if (strcmp(mine, theirs) != 0) {
        efa_err(nic, "peer uses libfabric provider '%s', this NIC '%s'",
                theirs, mine);
        return -EPROTO;
    }
    if (hdr->raw_len != nic->raw_len) {
        efa_err(nic, "peer endpoint name is %u bytes, ours %zu: another "
                "address format (e.g. IPv6 vs IPv4)", hdr->raw_len,
                nic->raw_len);
        return -EPROTO;
    }
    *raw = (const uint8_t *)buf + sizeof(*hdr);
    return 0;
}

static void watch(efa_nic *nic, struct efa_peer *p,
                  const struct efa_wire_addr *a)
{
    p->pidfd = -1;
    p->guarded = false;
    if (!nic->ctx->cfg.watch_peers || a->pid == (uint32_t)getpid() ||
        !efa_proc_running(nic->ctx->host_id, a->host_id, a->pid,
                          a->start_time))
        return;
    int fd = pidfd_open_(a->pid);
    if (fd < 0)
        return;
    if (!efa_proc_running(nic->ctx->host_id, a->host_id, a->pid,
                          a->start_time)) {
        close(fd); /* exited and reused in between */
        return;
    }
    p->pidfd = fd;
    p->pid = a->pid;
    p->monitored = 1;
    /* shm: a peer killed holding its region's lock would freeze us inside
     * the provider (efa_shm_guard.h). Its endpoint name is its region's. */
    if (efa_shm_guarded(nic)) {
        p->deaths_seen = efa_shm_guard_deaths(); /* before: none missed */
        p->guarded = efa_shm_guard_watch(nic, &nic->ctx->host, nic->name,
                                         p->raw, p->raw_len, a->pid,
                                         fd) == 0;
    }
}

struct efa_bell_remote *efa_bell_of(efa_nic *nic,
                                    const struct efa_wire_addr *a,
                                    const uint8_t *raw, int *err)
{
    *err = 0;
    if (!(a->flags & EFA_AF_BELL) || a->host_id != nic->ctx->host_id)
        return NULL;
    return efa_bell_remote_open(raw, a->raw_len, err);
}

/* A same-host peer with a doorbell is rung after every post to it
 * (efa_shm_bell.h); with a bell of our own, its death wakes our worker. */
static void open_bell(efa_nic *nic, struct efa_peer *p,
                      const struct efa_wire_addr *a)
{
    uint32_t token = (uint32_t)(p - nic->peers) + 1;
    if (nic->bell && p->pidfd >= 0 &&
        efa_bell_watch(nic->bell, p->pidfd, token) < 0)
        efa_log(nic->ctx, 1, "%s: the death of peer pid %u will not wake "
                "an idle worker at once (epoll: %s)", nic->name, a->pid,
                strerror(errno));
    int err = 0;
    p->bell = efa_bell_of(nic, a, p->raw, &err);
    if (!p->bell && err) {
        efa_log(nic->ctx, 1, "%s: peer of pid %u has a doorbell that cannot "
                "be opened (%s): while its worker sleeps, our operations to "
                "it wait for its next timed look (engine.idle_block_max_ms)",
                nic->name, a->pid, strerror(-err));
        return;
    }
    pthread_mutex_lock(&nic->lock);
    nic->bell_peers++;
    pthread_mutex_unlock(&nic->lock);
}

int efa_peer_add(te_plugin_nic *nic, const void *addr, size_t len,
                 te_plugin_peer *out)
{
    struct efa_wire_addr a;
    const uint8_t *raw;
    if (!out)
        return -EINVAL;
    int rc = parse(nic, addr, len, &a, &raw);
    if (rc)
        return rc;
    /* With a secret, peers authenticate (efa_auth.h); without, a peer
     * that asks for it is refused, which tells it why (docs/security.md). */
    bool theirs = (a.flags & EFA_AF_AUTH) != 0;
    if (nic->auth.on != theirs) {
        const char *why = theirs
            ? "requires authentication (engine.auth_key set in its engine) "
              "and this engine has no key"
            : "failed authentication: it has no key (engine.auth_key unset "
              "in its engine)";
        efa_log(nic->ctx, 1, "%s: peer of pid %u %s: refused", nic->name,
                a.pid, why);
        efa_err(nic, "peer of pid %u %s", a.pid, why);
        return -EACCES;
    }
    /* Another endpoint of this very process: hold it (efa_local.h). */
    struct efa_local *local = NULL;
    if (a.host_id && a.host_id == nic->ctx->host_id &&
        a.pid == (uint32_t)getpid() && a.start_time == nic->ctx->start_time) {
        local = efa_local_find(nic->info->fabric_attr->prov_name, raw,
                               a.raw_len);
        if (!local) {
            efa_err(nic, "the address names an endpoint of this process "
                    "that is closed (its engine was destroyed)");
            return -ECONNREFUSED;
        }
    }
    struct efa_peer *p = peer_new(nic);
    if (!p) {
        efa_local_put(local);
        return -ENOMEM;
    }
    memset(p, 0, sizeof(*p));
    p->local = local;
    uint32_t idx = (uint32_t)(p - nic->peers);
    p->handle = ((uint64_t)++nic->peer_gen << 32) | (idx + 1);
    p->state = EFA_PEER_PENDING;
    p->flags = a.flags;
    p->fi_addr = FI_ADDR_NOTAVAIL;
    p->raw_len = a.raw_len;
    memcpy(p->raw, raw, a.raw_len);
    p->landing_key = a.landing_key;
    p->landing_addr = a.landing_addr;
    p->key_secret = a.key_secret;
    watch(nic, p, &a);
    open_bell(nic, p, &a);
    if (nic->auth.on) {
        /* Its address is inserted now, by its record, and authenticated
         * before operations go to it (efa_auth.c). */
        pthread_mutex_lock(&nic->lock);
        rc = efa_auth_peer_attach(nic, p, addr, len);
        if (rc == 0) {
            p->state = EFA_PEER_LIVE;
            rc = av_map_set(nic, p->fi_addr, idx + 1);
        }
        if (rc)
            peer_release(nic, p);
        pthread_mutex_unlock(&nic->lock);
        if (rc)
            return rc;
        *out = p->handle;
        return 0;
    }
    nic->pending++;
    if (nic->ctx->cfg.av_insert == EFA_AV_AT_ADD) {
        pthread_mutex_lock(&nic->lock);
        rc = efa_peers_resolve(nic);
        pthread_mutex_unlock(&nic->lock);
        if (rc) {
            peer_release(nic, &nic->peers[idx]);
            return rc;
        }
    }
    *out = nic->peers[idx].handle;
    return 0;
}

int efa_peers_resolve(efa_nic *nic)
{
    if (!nic->pending)
        return 0;
    uint32_t n = nic->pending, k = 0;
    uint8_t *buf = calloc(n, nic->raw_len);
    fi_addr_t *fa = malloc((size_t)n * sizeof(*fa));
    uint32_t *who = malloc((size_t)n * sizeof(*who));
    if (!buf || !fa || !who) {
        free(buf);
        free(fa);
        free(who);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < nic->npeers && k < n; i++)
        if (nic->peers[i].state == EFA_PEER_PENDING) {
            memcpy(buf + (size_t)k * nic->raw_len, nic->peers[i].raw,
                   nic->raw_len);
            fa[k] = FI_ADDR_NOTAVAIL;
            who[k++] = i;
        }
    int ret = k ? fi_av_insert(nic->av, buf, k, fa, 0, NULL) : 0;
    int rc = 0;
    for (uint32_t j = 0; j < k; j++) {
        struct efa_peer *p = &nic->peers[who[j]];
        if (fa[j] == FI_ADDR_NOTAVAIL || av_map_set(nic, fa[j], who[j] + 1)) {
            /* The address itself is bad: its operations fail. */
            efa_err(nic, "fi_av_insert of a peer address failed (%d of %u "
                    "inserted): %s", ret, k, fi_strerror(ret < 0 ? -ret
                                                                 : FI_EINVAL));
            p->state = EFA_PEER_LIVE;
            efa_peer_down(nic, p, -EHOSTUNREACH, "address not insertable");
            rc = -EHOSTUNREACH;
            continue;
        }
        p->fi_addr = fa[j];
        p->state = EFA_PEER_LIVE;
    }
    nic->pending = 0;
    free(buf);
    free(fa);
    free(who);
    return rc;
}

/* ---------------------------------------------------------- down, remove */

/* Fail p's operations still held by the provider with status: their slots
 * become orphans whose late completions are swallowed (exactly once). */
static void orphan_ops(efa_nic *nic, struct efa_peer *p, int status)
{
    uint32_t idx = (uint32_t)(p - nic->peers) + 1;
    for (uint32_t i = 0; i < nic->nslots && p->live_ops; i++) {
        struct efa_slot *s = &nic->slots[i];
        if (s->state != EFA_SLOT_LIVE || s->peer != idx)
            continue;
        s->state = EFA_SLOT_ORPHAN;
        p->live_ops--;
        p->orphans++;
        struct te_plugin_cq_entry e = {.kind = TE_PCQ_LOCAL, .status = status,
                                       .context = s->context,
                                       .peer = p->handle};
        efa_cq_push(nic, &e);
    }
}

void efa_peer_down(efa_nic *nic, struct efa_peer *p, int status,
                   const char *why)
{
    if (p->state != EFA_PEER_LIVE && p->state != EFA_PEER_PENDING)
        return;
    p->state = EFA_PEER_DOWN;
    p->down_status = status;
    snprintf(p->down_why, sizeof(p->down_why), "%s", why);
    /* Gone for good: whoever answers at its address proves itself anew. */
    if (p->auth && status != -EACCES)
        efa_auth_peer_lost(nic, p);
    /* An orderly close fails what was in flight like a lost peer; the
     * PEER_DOWN alone says it was orderly. */
    orphan_ops(nic, p, status == -ESHUTDOWN ? -ECONNRESET : status);
    struct te_plugin_cq_entry e = {.kind = TE_PCQ_PEER_DOWN,
                                   .status = status, .peer = p->handle};
    efa_cq_push(nic, &e);
    efa_log(nic->ctx, 1, "%s: peer 0x%llx is down: %s", nic->name,
            (unsigned long long)p->handle, why);
}

int efa_peer_remove(te_plugin_nic *nic, te_plugin_peer h)
{
    struct efa_peer *p = efa_peer_get(nic, h);
    if (!p || p->state == EFA_PEER_REMOVED) {
        efa_err(nic, "peer_remove: 0x%llx is not a peer", (unsigned long long)h);
        return -ENOENT;
    }
    pthread_mutex_lock(&nic->lock);
    if (p->state == EFA_PEER_PENDING)
        nic->pending--;
    orphan_ops(nic, p, -ECONNABORTED);
    if (p->orphans == 0)
        peer_release(nic, p);
    else
        p->state = EFA_PEER_REMOVED; /* released when the orphans drain */
    pthread_mutex_unlock(&nic->lock);
    return 0;
}

/* Called by efa_cq.c when an orphan's provider completion finally comes. */
void efa_peer_orphan_done(efa_nic *nic, uint32_t peer_idx)
{
    if (!peer_idx || peer_idx > nic->npeers)
        return;
    struct efa_peer *p = &nic->peers[peer_idx - 1];
    if (p->orphans && --p->orphans == 0 && p->state == EFA_PEER_REMOVED)
        peer_release(nic, p);
}

/* ---------------------------------------------------------- liveness */

void efa_peers_housekeeping(efa_nic *nic)
{
    struct pollfd fds[64];
    uint32_t who[64];
    for (uint32_t i = 0; i < nic->npeers;) {
        nfds_t n = 0;
        for (; i < nic->npeers && n < 64; i++) {
            struct efa_peer *p = &nic->peers[i];
            if (p->pidfd >= 0 && (p->state == EFA_PEER_LIVE ||
                                  p->state == EFA_PEER_PENDING)) {
                fds[n].fd = p->pidfd;
                fds[n].events = POLLIN;
                fds[n].revents = 0;
                who[n++] = i;
            }
        }
        if (!n || poll(fds, n, 0) <= 0)
            continue;
        for (nfds_t k = 0; k < n; k++)
            if (fds[k].revents)
                efa_peer_exit_seen(nic, &nic->peers[who[k]]);
    }
}

void efa_peer_exit_seen(efa_nic *nic, struct efa_peer *p)
{
    if (p->exit_seen)
        return;
    p->exit_seen = 1;
    /* Readable from now on: it must not keep waking an idle worker. */
    if (nic->bell && p->pidfd >= 0)
        efa_bell_unwatch(nic->bell, p->pidfd);
    if (!nic->exits_seen++)
        nic->exits_since_ns = tpc_now_ns();
}

void efa_peers_exited(efa_nic *nic)
{
    for (uint32_t i = 0; nic->exits_seen && i < nic->npeers; i++) {
        struct efa_peer *p = &nic->peers[i];
        if (!p->exit_seen)
            continue;
        p->exit_seen = 0;
        nic->exits_seen--;
        char why[64];
        snprintf(why, sizeof(why), "its process %u exited", p->pid);
        efa_peer_down(nic, p, -ECONNRESET, why); /* unless down already */
    }
}

void efa_peers_free(efa_nic *nic)
{
    for (uint32_t i = 0; i < nic->npeers; i++) {
        if (nic->peers[i].state == EFA_PEER_FREE)
            continue;
        if (nic->peers[i].pidfd >= 0)
            close(nic->peers[i].pidfd);
        efa_bell_remote_close(nic->peers[i].bell);
        efa_local_put(nic->peers[i].local);
    }
    nic->bell_peers = 0;
    free(nic->peers);
    nic->peers = NULL;
    nic->npeers = nic->peers_cap = 0;
}
