/* Queued completions to the core, one PEER_DOWN per poll (tpc_cq.h). */
#include "tpc_cq.h"
#include "tpc_hot.h"

TPC_HOT /* every poll of every plugin */
int tpc_cq_take(struct tpc_fifo *q, struct te_plugin_cq_entry *out, int n,
                int max, bool *down_said,
                void (*taking)(void *nic, const struct te_plugin_cq_entry *e),
                void *nic)
{
    while (n < max && q->count) {
        const struct te_plugin_cq_entry *e = tpc_fifo_at(q, 0);
        if (e->kind == TE_PCQ_PEER_DOWN) {
            if (*down_said)
                break;
            *down_said = true;
        }
        taking(nic, e);
        out[n++] = *e;
        tpc_fifo_pop(q);
    }
    return n;
}
