/* Process identity (efa_proc.c). */
#ifndef TE_EFA_PROC_H
#define TE_EFA_PROC_H

#include <stdint.h>

/* A hash of this boot's id: equal on the same host, 0 if unknown. */
uint64_t efa_host_id(void);

/* Start time of process `pid` (field 22 of /proc/PID/stat), 0 if gone:
 * with the pid, it names one process for the whole boot. */
uint64_t efa_proc_start_time(uint32_t pid);

#endif
