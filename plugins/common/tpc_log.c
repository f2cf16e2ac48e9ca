/* Error reports and log lines of a plugin (tpc_log.h). */
#include <stdio.h>

#include "tpc_log.h"

void tpc_verr(const struct te_plugin_host *host, const char *plugin,
              const char *nic, const char *fmt, va_list ap)
{
    char prefix[96], msg[TPC_MSG_MAX];
    if (nic)
        snprintf(prefix, sizeof(prefix), "%s %s: ", plugin, nic);
    else
        snprintf(prefix, sizeof(prefix), "%s: ", plugin);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (host->set_error)
        host->set_error(host->host_ctx, "%s%s", prefix, msg);
    if (host->log)
        host->log(host->host_ctx, TPC_ERR_LOG_LEVEL, "%s%s", prefix, msg);
}

void tpc_err(const struct te_plugin_host *host, const char *plugin,
             const char *nic, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tpc_verr(host, plugin, nic, fmt, ap);
    va_end(ap);
}

void tpc_log(const struct te_plugin_host *host, const char *plugin, int level,
             const char *fmt, ...)
{
    if (!host->log)
        return;
    char msg[TPC_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    host->log(host->host_ctx, level, "%s: %s", plugin, msg);
}
