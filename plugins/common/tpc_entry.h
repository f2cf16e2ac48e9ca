/*
 * The version check of a plugin's entry symbol, te_plugin_entry()
 * (include/te/plugin.h): the core passes the ABI version it speaks, the
 * plugin answers with its ops table or refuses with a message.
 */
#ifndef TPC_ENTRY_H
#define TPC_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "te/plugin.h"

/*
 * The body of te_plugin_entry(): ops when the core speaks ops' major ABI
 * version with at least minor version min_core_minor (the oldest core
 * whose host table has what the plugin needs), else NULL with "NAME
 * plugin speaks plugin ABI x.y, core speaks u.v" in err (when err and
 * errlen are given).
 */
const struct te_plugin_ops *tpc_entry(const struct te_plugin_ops *ops,
                                      uint32_t min_core_minor,
                                      uint32_t core_major, uint32_t core_minor,
                                      char *err, size_t errlen);

#endif
