/*
 * Paths (te.h "paths", docs/paths.md): what each NIC's plugin says about
 * how it carries out each kind of operation and registration, the policy
 * engine.require, and the once-only warnings of degraded paths.
 */
#ifndef TE_CORE_PATHS_H
#define TE_CORE_PATHS_H

#include <stdint.h>

#include "te/plugin.h"
#include "te/te.h"

struct te_engine;
struct te_group;
struct te_nic;

/** Parse engine.require ("any", "fast", or capability names, comma
 * separated) into TE_CAP_* bits; -EINVAL naming the bad word. */
int te_paths_parse_require(const char *text, uint32_t *caps);

/**
 * After a NIC is open: ask the plugin for its paths, then apply the policy
 * to the operation and host-memory paths: -ENOTSUP naming the capability,
 * NIC and path when a required one is missing; otherwise warn once per
 * degraded path (capabilities of TE_CAP_FAST; the others at info level).
 */
int te_paths_open_nic(struct te_engine *e, struct te_group *g,
                      struct te_nic *n);

/**
 * Before registering memory of kind mem_kind (TE_MEM_*) on g: refuse it
 * (-ENOTSUP naming what is missing) when engine.require asks for a
 * capability its path lacks; warn once per engine and kind otherwise.
 */
int te_paths_check_mem(struct te_engine *e, struct te_group *g,
                       uint32_t mem_kind);

#endif
