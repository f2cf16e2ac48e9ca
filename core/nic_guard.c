/*
 * The plugin contract guard (see nic_guard.h; docs/plugin-guide.md, "What
 * the core checks"). A plugin is trusted code in our process, but a
 * vendor's plugin under development reports what it reports: a second
 * completion for one operation, a context the core never posted, counts
 * beyond the array it was given. Each of those would have the core free a
 * request twice or follow a wild pointer. The checks cost a bounds test and
 * a compare per completion (op_table.h); what fails them fails the NIC,
 * never the process.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "nic_guard.h"
#include "te_error.h"
#include "te_hot.h"

void te_guard_fail(struct te_engine *e, struct te_group *g, struct te_nic *n,
                   const char *fmt, ...)
{
    if (n->failed)
        return;
    n->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->failed_why, sizeof(n->failed_why), fmt, ap);
    va_end(ap);
    te_log(e, 0, "group %d NIC %s: plugin %s broke its contract: %s; the NIC "
           "is failed: its requests fail with EPROTO and it is not used "
           "again", g->index, n->info.name, e->plugin.ops->name,
           n->failed_why);
}

/* Restore the core's contexts of ops[from..cnt) (not posted) and free
 * their slots. */
static void unpost(struct te_nic *n, struct te_plugin_op *ops, size_t from,
                   size_t cnt)
{
    for (size_t i = from; i < cnt; i++) {
        uint64_t ctx = 0;
        te_op_table_complete(&n->posted, ops[i].context, &ctx);
        ops[i].context = ctx;
    }
}

TE_HOT
int te_guard_post(struct te_engine *e, struct te_group *g, struct te_nic *n,
                  struct te_plugin_op *ops, size_t cnt)
{
    if (n->failed)
        return 0;
    cnt = te_op_table_room(&n->posted, (uint32_t)cnt);
    if (!cnt)
        return 0; /* as a full queue: the rest waits for completions */
    for (size_t i = 0; i < cnt; i++)
        ops[i].context = te_op_table_take(&n->posted, ops[i].context);
    te_error_clear(); /* a refusal's text is then the plugin's own */
    int rc = e->plugin.ops->post(n->pn, ops, cnt);
    if (rc > (int)cnt || rc < -TE_ERRNO_MAX) {
        /* Which ops the plugin holds is unknown: none is counted posted,
         * and the sweep fails their requests. */
        te_guard_fail(e, g, n, "post() returned %d for %zu operations", rc,
                      cnt);
        rc = 0;
    }
    unpost(n, ops, rc > 0 ? (size_t)rc : 0, cnt);
    return rc;
}

TE_HOT
int te_guard_poll_count(struct te_engine *e, struct te_group *g,
                        struct te_nic *n, int got, int max)
{
    if (got <= max && got >= -TE_ERRNO_MAX)
        return 0;
    te_guard_fail(e, g, n, "poll() returned %d for at most %d entries", got,
                  max);
    return -1;
}

static const char *kind_word(uint32_t kind)
{
    return kind == TE_PCQ_LOCAL ? "LOCAL" : kind == TE_PCQ_RECV ? "RECV"
                                                                : "PEER_DOWN";
}

int te_guard_entry_full(struct te_engine *e, struct te_group *g,
                        struct te_nic *n, struct te_plugin_cq_entry *ce)
{
    if (ce->kind == TE_PCQ_IMM)
        return 0; /* nothing of ours to check: status and len are unused */
    if (ce->kind < TE_PCQ_LOCAL || ce->kind > TE_PCQ_PEER_DOWN) {
        te_guard_fail(e, g, n, "completion of unknown kind %u", ce->kind);
        return -1;
    }
    if (ce->status > 0 || ce->status < -TE_ERRNO_MAX) {
        te_guard_fail(e, g, n, "%s completion with status %d (not 0 or "
                      "-errno)", kind_word(ce->kind), ce->status);
        return -1;
    }
    if (ce->kind == TE_PCQ_PEER_DOWN)
        return 0;
    uint64_t ctx = 0;
    switch (te_op_table_complete(&n->posted, ce->context, &ctx)) {
    case TE_OP_OK:
        break;
    case TE_OP_DUPLICATE:
        te_guard_fail(e, g, n, "second %s completion for context 0x%" PRIx64,
                      kind_word(ce->kind), ce->context);
        return -1;
    default:
        te_guard_fail(e, g, n, "%s completion for unknown context 0x%" PRIx64,
                      kind_word(ce->kind), ce->context);
        return -1;
    }
    int recv_op = TE_CTX_TAG(ctx) == TE_CTX_RECV;
    /* A RECV may also end with a LOCAL error (plugin.h): it is handled as
     * the failed receive it is. */
    if (recv_op && ce->kind == TE_PCQ_LOCAL && ce->status)
        ce->kind = TE_PCQ_RECV;
    if (recv_op != (ce->kind == TE_PCQ_RECV)) {
        te_guard_fail(e, g, n, "%s completion for a posted %s",
                      kind_word(ce->kind), recv_op ? "RECV" : "write/read/send");
        return -1;
    }
    if (recv_op && ce->status == 0 && ce->len > e->s.max_msg_size) {
        te_guard_fail(e, g, n, "RECV of %" PRIu64 " bytes into a %u-byte "
                      "buffer", ce->len, e->s.max_msg_size);
        return -1;
    }
    ce->context = ctx;
    return 0;
}

/* Give up q's work on NIC k; 1 if it had any. */
static int drop_nic_work(struct te_req *q, uint32_t k)
{
    int hit = 0;
    for (uint32_t i = 0; i < q->ncursors; i++) {
        struct te_cursor *c = &q->cursors[i];
        if (c->nic != k || !(c->remaining || c->inflight))
            continue;
        q->ops_skipped += (uint64_t)c->remaining + c->inflight;
        c->remaining = c->inflight = 0;
        hit = 1;
    }
    return hit;
}

void te_guard_sweep(struct te_engine *e, struct te_group *g, struct turn *t,
                    uint32_t k)
{
    struct te_nic *n = &g->nics[k];
    if (!n->failed || n->swept)
        return;
    n->swept = 1;
    /* Queued cursors leave the NIC's queues (their requests are failed
     * below); operations the plugin holds are written off: their
     * completions are never looked at again. */
    uint32_t np = atomic_load_explicit(&g->peer_count, memory_order_relaxed);
    for (uint32_t p = 0; p < np; p++) {
        struct te_peer_entry *pe = &g->peers[p];
        memset(&pe->q[k], 0, sizeof(pe->q[k]));
        pe->outstanding[k] = 0;
        pe->hb_inflight[k] = 0;
        pe->hb_known[k] = 0;
    }
    n->active = n->active_tail = NULL;
    n->pending_cursors = 0;
    n->recv_to_post = 0;
    for (struct te_link *l = g->inflight.next; l != &g->inflight;) {
        struct te_req *q = (struct te_req *)l;
        l = l->next; /* q may be freed below */
        if (!drop_nic_work(q, k))
            continue;
        te_req_fail(q, -EPROTO, "NIC %s failed: plugin %s: %s", n->info.name,
                    e->plugin.ops->name, n->failed_why);
        te_req_deliver(e, t, q);
        te_req_settle(e, t, q);
    }
}

TE_HOT
int te_guard_refuse(struct te_group *g, struct te_req *q)
{
    for (uint32_t i = 0; i < q->ncursors; i++) {
        struct te_nic *n = &g->nics[q->cursors[i].nic];
        if (!q->cursors[i].remaining || !n->failed)
            continue;
        te_req_fail(q, -EPROTO, "NIC %s failed earlier: plugin %s: %s",
                    n->info.name, g->e->plugin.ops->name, n->failed_why);
        for (uint32_t j = 0; j < q->ncursors; j++) {
            q->ops_skipped += q->cursors[j].remaining;
            q->cursors[j].remaining = 0;
        }
        return 1;
    }
    return 0;
}
