/* Process identity (efa_proc.c). */
#ifndef TE_EFA_PROC_H
#define TE_EFA_PROC_H

#include <stdbool.h>
#include <stdint.h>

/* A hash of this boot's id: equal on the same host, 0 if unknown. */
uint64_t efa_host_id(void);

/* Start time of process `pid` (field 22 of /proc/PID/stat), 0 if gone:
 * with the pid, it names one process for the whole boot. */
uint64_t efa_proc_start_time(uint32_t pid);

/* Whether host_id, pid and start_time (as an address carries them) name a
 * process that runs now on this host (our_host: efa_host_id()'s value)
 * and that this process can see: a pid of another pid namespace names
 * another process here, which the start time rules out. */
bool efa_proc_running(uint64_t our_host, uint64_t host_id, uint32_t pid,
                      uint64_t start_time);

/* Whether the process of pidfd (a pidfd_open descriptor, or -1: false)
 * has exited: the fd is readable then. One poll(2), no wait. */
bool efa_pidfd_exited(int pidfd);

#endif
