/* te_peer_add / te_peer_remove: validated here, executed on the worker that
 * owns the group's NICs (the plugin's threading contract). */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "engine_internal.h"
#include "te_error.h"

#define TE_CONTROL_TIMEOUT_MS 10000

static struct te_group *group_of(te_engine *e, int group, const char *fn)
{
    if (!e || group < 0 || (uint32_t)group >= e->ngroups) {
        te_fail(-EINVAL, "%s: bad engine or group %d", fn, group);
        return NULL;
    }
    return &e->groups[group];
}

static int run(struct te_group *g, struct te_control *c, const char *fn)
{
    /* From a callback that te_engine_destroy() runs: the worker (or, in
     * caller mode, its loop state) is gone. */
    if (atomic_load_explicit(&g->e->stopping, memory_order_acquire))
        return te_fail(-ESHUTDOWN, "%s: the engine is being destroyed", fn);
    int rc = te_group_control(g, c, TE_CONTROL_TIMEOUT_MS);
    if (rc == -ETIMEDOUT)
        return te_fail(rc, "%s: group %d's worker did not answer within "
                       "%d ms", fn, g->index, TE_CONTROL_TIMEOUT_MS);
    rc = c->result;
    if (rc)
        te_fail(rc, "%s: %s", fn, c->reason);
    return rc;
}

TE_API int te_peer_add(te_engine *e, int group, const void *addr, size_t len,
                       te_peer *out)
{
    te_error_clear();
    struct te_group *g = group_of(e, group, "te_peer_add");
    if (!g)
        return -EINVAL;
    if (!out)
        return te_fail(-EINVAL, "te_peer_add: out is NULL");
    struct te_control *c = calloc(1, sizeof(*c));
    if (!c)
        return te_fail(-ENOMEM, "te_peer_add: out of memory");
    int rc = te_wire_addr_decode(addr, len, &c->addr);
    if (rc) {
        free(c);
        return rc;
    }
    if (strcmp(c->addr.transport, e->plugin.ops->name) != 0) {
        rc = te_fail(-EPROTO, "te_peer_add: address is for transport \"%s\" "
                     "but this engine uses \"%s\"", c->addr.transport,
                     e->plugin.ops->name);
        free(c);
        return rc;
    }
    c->kind = TE_CTL_ADD;
    rc = run(g, c, "te_peer_add");
    if (rc == -ETIMEDOUT)
        return rc; /* c is now owned by the worker */
    if (rc == 0)
        *out = c->peer;
    free(c);
    return rc;
}

TE_API int te_peer_remove(te_engine *e, int group, te_peer peer)
{
    te_error_clear();
    struct te_group *g = group_of(e, group, "te_peer_remove");
    if (!g)
        return -EINVAL;
    struct te_control *c = calloc(1, sizeof(*c));
    if (!c)
        return te_fail(-ENOMEM, "te_peer_remove: out of memory");
    c->kind = TE_CTL_REMOVE;
    c->peer = peer;
    int rc = run(g, c, "te_peer_remove");
    if (rc != -ETIMEDOUT)
        free(c);
    return rc;
}

TE_API int te_peer_status(te_engine *e, int group, te_peer peer)
{
    te_error_clear();
    struct te_group *g = group_of(e, group, "te_peer_status");
    if (!g)
        return -EINVAL;
    struct te_peer_entry *pe = te_group_peer(g, peer);
    if (!pe)
        return te_fail(-ENOENT, "te_peer_status: peer %u is not a peer of "
                       "group %d", peer, group);
    if (atomic_load_explicit(&pe->state, memory_order_acquire) ==
        TE_PEER_DOWN)
        return te_fail(-ECONNRESET, "te_peer_status: peer %u of group %d "
                       "is down: %s", peer, group, pe->down_why);
    return 0;
}
