/* The version check of a plugin's entry symbol (tpc_entry.h). */
#include <stdio.h>

#include "tpc_entry.h"

const struct te_plugin_ops *tpc_entry(const struct te_plugin_ops *ops,
                                      uint32_t min_core_minor,
                                      uint32_t core_major, uint32_t core_minor,
                                      char *err, size_t errlen)
{
    if (core_major == ops->abi_major && core_minor >= min_core_minor)
        return ops;
    if (err && errlen)
        snprintf(err, errlen, "%s plugin speaks plugin ABI %u.%u, core speaks "
                 "%u.%u", ops->name, ops->abi_major, ops->abi_minor,
                 core_major, core_minor);
    return NULL;
}
