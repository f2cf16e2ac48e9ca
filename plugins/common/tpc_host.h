/*
 * The host table init() receives (struct te_plugin_host,
 * include/te/plugin.h): whether it can be used, and the plugin's own copy
 * of it, which older and newer cores alike fill correctly.
 */
#ifndef TPC_HOST_H
#define TPC_HOST_H

#include <stdbool.h>

#include "te/plugin.h"

/* Whether init() may use host: not NULL, and its struct_size covers every
 * field before log (config_get, set_error). */
bool tpc_host_ok(const struct te_plugin_host *host);

/*
 * Copy the host table into the plugin's context: as much as both sides
 * know. Fields an older core lacks stay as they are in dst (zero in a
 * calloc'd context, so such a callback reads NULL).
 */
void tpc_host_copy(struct te_plugin_host *dst,
                   const struct te_plugin_host *host);

#endif
