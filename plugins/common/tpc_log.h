/*
 * Error reports and log lines of a plugin, through the host's set_error()
 * and log() (include/te/plugin.h). Every line starts with the plugin's name
 * and, for a NIC's error, the NIC's name: "loopback lo0: rkey ... ".
 *
 * A plugin usually binds its name with macros (lb_internal.h):
 *     #define lb_err(nic, ...) \
 *         tpc_err(&(nic)->ctx->host, LB_NAME, (nic)->name, __VA_ARGS__)
 */
#ifndef TPC_LOG_H
#define TPC_LOG_H

#include <stdarg.h>

#include "te/plugin.h"

/* Longest message kept (the rest is cut): the longest the plugins write,
 * a provider's error text included, fits. */
#define TPC_MSG_MAX 768

/* The log level of error reports (3, debug): the core reports the failure
 * itself, at its own level, so the plugin's copy is for diagnosis. */
#define TPC_ERR_LOG_LEVEL 3

/*
 * An error of plugin `plugin` on NIC `nic` (NULL: of the context): the
 * engine's last error (set_error) and a debug log line, both reading
 * "PLUGIN NIC: message" ("PLUGIN: message" without a NIC). Either host
 * callback may be NULL. Thread-safe as the host's callbacks are.
 */
void tpc_err(const struct te_plugin_host *host, const char *plugin,
             const char *nic, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), cold));
/* tpc_err with a va_list, for a plugin's own variadic wrappers. (Both
 * `cold`: the branches that report an error leave the hot functions.) */
void tpc_verr(const struct te_plugin_host *host, const char *plugin,
              const char *nic, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0), cold));

/*
 * A log line "PLUGIN: message" at `level` (0 error .. 3 debug); nothing
 * when the host has no log().
 */
void tpc_log(const struct te_plugin_host *host, const char *plugin, int level,
             const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
