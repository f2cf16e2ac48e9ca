/* The CUDA services the core offers plugins (te_plugin_host.device_copy). */
#ifndef TE_CORE_CUDA_COPY_H
#define TE_CORE_CUDA_COPY_H

#include "te/plugin.h"

/**
 * Fill the CUDA entries of the plugin host table: the device copy service
 * where the core is built with CUDA (it loads the driver on first use and
 * fails with the reason where there is none), NULL otherwise.
 */
void te_cuda_host_install(struct te_plugin_host *h);

#endif
