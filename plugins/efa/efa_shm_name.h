/*
 * Names of shm endpoints.
 *
 * libfabric's shm names an endpoint's shared memory after the process id
 * ("PID:EP:DOMAIN" in /dev/shm). A process killed with SIGKILL leaves its
 * regions behind (16 MiB each); once its pid comes back (pid_max is 32768
 * here), the new process's fi_enable fails with EBUSY on the old name
 * (measured: conformance runs failed so after a day of killed peers on
 * this machine, 202 regions left). So the plugin names its shm endpoints
 * itself, "te-PID-STARTTIME-N", unique per process incarnation, and removes
 * such regions whose process is gone. The fields are zero-padded to a fixed
 * width, so every name has the same length (efa_peer.c compares them).
 */
#ifndef TE_EFA_SHM_NAME_H
#define TE_EFA_SHM_NAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>

/* Before fi_enable: give a shm endpoint our own unique name (other
 * providers are left alone). 0 or a negative libfabric error. */
int efa_shm_name_endpoint(struct fid_ep *ep, const struct fi_info *info);

/* Remove "te-PID-STARTTIME-N" regions in /dev/shm whose process is gone
 * (no process PID, or one with another start time), and their doorbells'
 * ".bell" and ".sock" files (efa_shm_bell.h). Returns how many. */
int efa_shm_reap_stale(void);

/* Whether the shm region of endpoint name raw (raw_len bytes, as
 * fi_getname gives it) is gone from /dev/shm: true only for one of our
 * names whose region is missing (its endpoint was closed: libfabric's shm
 * unlinks it then). Our names only: another name may live elsewhere. */
bool efa_shm_region_gone(const uint8_t *raw, size_t raw_len);

/* Whether this endpoint's own region is where efa_shm_region_gone looks
 * (checked once at open: false turns the check off). */
bool efa_shm_region_visible(const uint8_t *raw, size_t raw_len);

#endif
