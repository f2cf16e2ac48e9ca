/* Choosing the engine's NIC groups and worker CPUs (see layout.c). */
#ifndef TE_CORE_LAYOUT_H
#define TE_CORE_LAYOUT_H

#include <stdio.h>

struct te_engine;

/**
 * Fill e->s.groups, group_nics, group_nic_count and worker_cpu for the
 * plugin's ndev devices (after plugin init), and e->topo / e->topo_note.
 */
int te_layout_choose(struct te_engine *e, int ndev);

/** What was found and what is used, for te-info --topology. */
void te_layout_describe(const struct te_engine *e, FILE *f);

#endif
