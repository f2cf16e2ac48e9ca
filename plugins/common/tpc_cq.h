/*
 * Handing a plugin's queued completions (tpc_fifo of struct
 * te_plugin_cq_entry: a peer found down, failures found at post time,
 * entries that did not fit in poll()'s array) to the core, in order and
 * at most one TE_PCQ_PEER_DOWN per poll(). The core reads one error
 * message per poll and quotes it as the reason of every peer that poll
 * reports down, so each PEER_DOWN gets a poll of its own, its words said
 * (set_error) when it is handed out; the caller's poll then sets no other
 * error (docs/plugin-guide.md, "Refusing a peer").
 */
#ifndef TPC_CQ_H
#define TPC_CQ_H

#include <stdbool.h>

#include "te/plugin.h"
#include "tpc_fifo.h"

/*
 * Move entries from q to out[n..max) and return the new n. `taking` runs
 * for each entry as it is handed out (a plugin's counts; for a PEER_DOWN,
 * its words), with `nic`. A PEER_DOWN when *down_said is already true
 * stays queued for the next poll; handing one out sets *down_said (false
 * at the start of each poll).
 */
int tpc_cq_take(struct tpc_fifo *q, struct te_plugin_cq_entry *out, int n,
                int max, bool *down_said,
                void (*taking)(void *nic, const struct te_plugin_cq_entry *e),
                void *nic);

#endif
