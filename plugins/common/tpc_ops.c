/* Checks of posted operations (tpc_ops.h). */
#include <errno.h>

#include "tpc_hot.h"
#include "tpc_log.h"
#include "tpc_ops.h"

const char *tpc_op_name(uint32_t kind)
{
    static const char *const names[] = {"op", "WRITE", "READ", "SEND", "RECV"};
    return kind <= TE_POP_RECV ? names[kind] : "op";
}

TPC_HOT /* every plugin's post checks each op with it */
const char *tpc_op_malformed(const struct te_plugin_op *op, const void *mr_nic,
                             const void *nic)
{
    if (op->kind < TE_POP_WRITE || op->kind > TE_POP_RECV)
        return "unknown op kind";
    if (op->len && !op->mr)
        return "no local registration for a non-empty buffer";
    if (op->mr && mr_nic != nic)
        return "local registration belongs to another NIC";
    return NULL;
}

int tpc_op_local_check(const struct te_plugin_host *host, const char *plugin,
                       const char *nic, const struct te_plugin_op *op,
                       const void *base, uint64_t len, uint32_t access)
{
    uint64_t a = (uint64_t)(uintptr_t)op->local_addr;
    uint64_t b = (uint64_t)(uintptr_t)base;
    if (a < b || a - b > len || op->len > len - (a - b)) {
        tpc_err(host, plugin, nic, "%s: local buffer of %llu bytes at %+lld "
                "is outside its region of %llu bytes", tpc_op_name(op->kind),
                (unsigned long long)op->len, (long long)(a - b),
                (unsigned long long)len);
        return -EACCES;
    }
    if ((op->kind == TE_POP_READ || op->kind == TE_POP_RECV) &&
        !(access & TE_PMR_LOCAL_WRITE)) {
        tpc_err(host, plugin, nic, "%s: local region lacks TE_PMR_LOCAL_WRITE",
                tpc_op_name(op->kind));
        return -EACCES;
    }
    return 0;
}

struct te_plugin_cq_entry tpc_op_completion(const struct te_plugin_op *op,
                                            int status, te_plugin_peer peer)
{
    struct te_plugin_cq_entry e = {
        .kind = op->kind == TE_POP_RECV ? TE_PCQ_RECV : TE_PCQ_LOCAL,
        .status = status, .context = op->context, .peer = peer};
    return e;
}
