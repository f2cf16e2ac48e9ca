/*
 * Orderly close of the efa transport (docs/efa.md "Orderly close"): as a
 * NIC closes it says goodbye (efa_bye_wire.h) to each of its live peers,
 * and a goodbye received turns the core's peers of that address down with
 * -ESHUTDOWN, the plugin ABI's orderly close. Without it a peer learns of
 * the close only when a write to it fails, from its process's exit (same
 * host), or from the core's peer timeout; shm reports nothing at all.
 *
 * Best effort: the goodbyes are sent and their completions awaited at most
 * efa.bye_wait_ms per NIC; a peer that misses one still learns of the
 * close in those other ways. Needs tagged messages (FI_TAGGED); a provider
 * without them closes without goodbyes, as before.
 */
#ifndef EFA_BYE_H
#define EFA_BYE_H

#include <stdbool.h>
#include <stdint.h>

#include "efa_bye_wire.h"
#include "efa_msgpool.h"

#define EFA_BYE_NRECV 4  /* tagged receives kept posted for goodbyes */
#define EFA_BYE_NSEND 32 /* goodbyes in flight at once while closing */

struct efa_bye {
    bool on;                 /* receives posted; goodbyes sent at close */
    struct efa_msgpool msgs; /* tag EFA_BYE_TAG */
    uint64_t dropped;        /* malformed, unverified, or keyed amiss */
};

#endif
