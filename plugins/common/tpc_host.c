/* The host table a plugin receives (tpc_host.h). */
#include <stddef.h>
#include <string.h>

#include "tpc_host.h"

bool tpc_host_ok(const struct te_plugin_host *host)
{
    return host && host->struct_size >= offsetof(struct te_plugin_host, log);
}

void tpc_host_copy(struct te_plugin_host *dst,
                   const struct te_plugin_host *host)
{
    memcpy(dst, host, host->struct_size < sizeof(*dst) ? host->struct_size
                                                        : sizeof(*dst));
}
