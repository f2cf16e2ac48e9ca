/*
 * Checks of the operations the core posts (struct te_plugin_op) that every
 * transport makes the same way, and the completion of an op that fails
 * before it reaches the wire.
 */
#ifndef TPC_OPS_H
#define TPC_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "te/plugin.h"

/* "WRITE", "READ", "SEND", "RECV", or "op" for any other kind: messages. */
const char *tpc_op_name(uint32_t kind);

/*
 * What makes op malformed whatever the transport, in this order: a kind
 * that is not WRITE/READ/SEND/RECV, a non-empty buffer without a
 * registration, a registration of another NIC. mr_nic is the NIC op->mr
 * belongs to (anything where op->mr is NULL), nic the posting NIC. NULL
 * when op is none of these, else the reason (a constant string); post()
 * refuses such an op with -EINVAL.
 */
const char *tpc_op_malformed(const struct te_plugin_op *op, const void *mr_nic,
                             const void *nic);

/*
 * The local protection check a NIC makes with the lkey, for an op with a
 * non-empty buffer (len > 0): the buffer lies inside its registration
 * [base, base + len) and, where the op writes into it (READ, RECV), the
 * registration has TE_PMR_LOCAL_WRITE. 0, or -EACCES reported as
 * tpc_err(host, plugin, nic, ...) does, naming the op.
 */
int tpc_op_local_check(const struct te_plugin_host *host, const char *plugin,
                       const char *nic, const struct te_plugin_op *op,
                       const void *base, uint64_t len, uint32_t access);

/*
 * The completion of an op that failed (or finished) without the wire:
 * TE_PCQ_RECV for a RECV, else TE_PCQ_LOCAL, with the op's context.
 */
struct te_plugin_cq_entry tpc_op_completion(const struct te_plugin_op *op,
                                            int status, te_plugin_peer peer);

#endif
