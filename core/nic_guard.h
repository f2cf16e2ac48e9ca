/*
 * The plugin contract guard (worker only; docs/plugin-guide.md, "What the
 * core checks"). Every post() and poll() of the worker goes through here:
 * contexts are swapped for checked ones (op_table.h), counts, kinds,
 * statuses and lengths are checked, and a NIC whose plugin breaks the
 * contract is failed: one error line, its requests fail with -EPROTO, and
 * it is never posted to again. The engine goes on with its other NICs.
 */
#ifndef TE_CORE_NIC_GUARD_H
#define TE_CORE_NIC_GUARD_H

#include "worker.h"

/* Statuses are 0 or a negative errno value (te_strerror's range). */
#define TE_ERRNO_MAX 4095

/**
 * post() of ops[0..cnt) on NIC n through the guard: the ops' contexts are
 * handed to the plugin as checked ones and restored in ops[] for those not
 * posted. Returns what post() returned (the number posted or -errno), 0
 * when the NIC has failed, the table is full, or post() broke the contract
 * (the NIC is failed then). The thread's last error is cleared first, so a
 * refusal's text (te_last_error()) is the plugin's own.
 */
int te_guard_post(struct te_engine *e, struct te_group *g, struct te_nic *n,
                  struct te_plugin_op *ops, size_t cnt);

/**
 * Checks the count poll() returned for max entries: 0 if it is one, else
 * the NIC is failed (and te_guard_sweep must follow).
 */
int te_guard_poll_count(struct te_engine *e, struct te_group *g,
                        struct te_nic *n, int got, int max);

/** te_guard_entry's whole check (every kind and case). */
int te_guard_entry_full(struct te_engine *e, struct te_group *g,
                        struct te_nic *n, struct te_plugin_cq_entry *ce);

/**
 * Checks one entry poll() returned and, for LOCAL and RECV, gives it back
 * the core's own context: 0 if it may be handled, else the NIC is failed
 * (the entry and those after it are not handled; te_guard_sweep follows).
 * Inline for the common entries (an immediate; a write/read/send's LOCAL
 * with 0 or -errno and an outstanding context): a few compares, no call
 * (measured with callgrind on te-bench --test imm: the out-of-line check
 * cost 25 instructions per entry).
 */
static inline int te_guard_entry(struct te_engine *e, struct te_group *g,
                                 struct te_nic *n,
                                 struct te_plugin_cq_entry *ce)
{
    if (ce->kind == TE_PCQ_IMM)
        return 0; /* nothing of ours to check: status and len are unused */
    struct te_op_slot *s = te_op_table_peek(&n->posted, ce->context);
    if (ce->kind == TE_PCQ_LOCAL && s && TE_CTX_TAG(s->ctx) != TE_CTX_RECV &&
        ce->status <= 0 && ce->status >= -TE_ERRNO_MAX) {
        ce->context = te_op_table_release(&n->posted, s);
        return 0;
    }
    return te_guard_entry_full(e, g, n, ce);
}

/**
 * Fail NIC n for a broken contract: logs one error line naming the plugin,
 * NIC and misbehaviour (printf format), once. Its requests are failed by
 * te_guard_sweep.
 */
void te_guard_fail(struct te_engine *e, struct te_group *g, struct te_nic *n,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/**
 * After te_guard_fail: every request with work queued or posted on the NIC
 * fails with -EPROTO and gives that work up (it is freed once its other
 * NICs' operations have come back); peers' counts on it are reset. Runs
 * once per failed NIC, at a point where no caller holds its queues.
 */
void te_guard_sweep(struct te_engine *e, struct te_group *g, struct turn *t,
                    uint32_t nic);

/**
 * te_post_accept's check: 1 if q has work for a failed NIC (q is then
 * failed with -EPROTO and all its operations skipped), else 0.
 */
int te_guard_refuse(struct te_group *g, struct te_req *q);

#endif
