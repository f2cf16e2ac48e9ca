/* Why the core declared a peer down, read from its log (cases_peer.c).
 * The core logs each peer-down once, "group G: peer P is down: WHY", where
 * WHY names the source: a PEER_DOWN with -ESHUTDOWN ("it closed its NIC X
 * in order"), any other PEER_DOWN ("the transport reported it unreachable
 * on NIC X"), a heartbeat, peer_timeout_ms or te_peer_remove. */
#ifndef TE_CONFORMANCE_DOWNLOG_H
#define TE_CONFORMANCE_DOWNLOG_H

#include <stddef.h>
#include "te/te.h"

/* Install the sink (process-wide). Warnings and errors still reach stderr,
 * info and debug only when verbose. */
void conf_downlog_start(int verbose);
/* Record the cause for this peer handle from now on (forgets the last). */
void conf_downlog_watch(te_peer peer);
/* The recorded cause, "" if none yet. */
void conf_downlog_why(char *out, size_t cap);
/* Whether a cause is the plugin's orderly close (-ESHUTDOWN). */
int conf_downlog_orderly(const char *why);
/* Restore the default log output; no-op when not started. */
void conf_downlog_stop(void);

#endif
