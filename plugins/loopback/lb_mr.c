/*
 * Registration table of a NIC. An rkey is (salt << 32 | slot + 1): lookup
 * is one array index plus a compare, and a reused slot gets a new salt, so
 * a stale key of a deregistered region does not match its successor.
 *
 * The table is guarded by exec_lock, which the target also holds while it
 * copies into or out of a region: dereg therefore returns only once no copy
 * into the region is in progress, and later requests miss the key.
 */
#include <errno.h>
#include <stdlib.h>

#include "lb_internal.h"

#define LB_ACCESS_ALL (TE_PMR_LOCAL_WRITE | TE_PMR_REMOTE_WRITE | TE_PMR_REMOTE_READ)

static int lb_mr_grow(lb_nic *nic)
{
    uint32_t cap = nic->mrs_cap ? nic->mrs_cap * 2 : 64;
    lb_mr **m = realloc(nic->mrs, cap * sizeof(*m));
    if (!m)
        return -ENOMEM;
    nic->mrs = m;
    uint32_t *f = realloc(nic->mr_next_free, cap * sizeof(*f));
    if (!f)
        return -ENOMEM;
    nic->mr_next_free = f;
    nic->mrs_cap = cap;
    return 0;
}

int lb_mr_reg(te_plugin_nic *nic, void *addr, size_t len, uint32_t access,
              uint32_t mem_type, int device_id, te_plugin_mr **out,
              struct te_plugin_mr_info *info)
{
    if (!out || !info)
        return -EINVAL;
    if (mem_type != TE_PMEM_HOST && mem_type != TE_PMEM_CUDA) {
        lb_err(nic, "memory type %u (device %d) is not supported",
               mem_type, device_id);
        return -ENOTSUP;
    }
    if (mem_type == TE_PMEM_CUDA && !lb_dev_supported(nic)) {
        lb_err(nic, "CUDA memory (device %d) needs the core's device copy "
                    "service: this core was built without CUDA",
               device_id);
        return -ENOTSUP;
    }
    if (!addr || len == 0 || (uintptr_t)addr + len < (uintptr_t)addr) {
        lb_err(nic, "cannot register %zu bytes at %p: empty or wrapping range",
               len, addr);
        return -EINVAL;
    }
    if (access & ~LB_ACCESS_ALL) {
        lb_err(nic, "unknown access flags 0x%x", access & ~LB_ACCESS_ALL);
        return -EINVAL;
    }
    lb_mr *mr = malloc(sizeof(*mr));
    if (!mr)
        return -ENOMEM;
    mr->nic = nic;
    mr->addr = addr;
    mr->len = len;
    mr->access = access;
    mr->device = mem_type == TE_PMEM_CUDA;

    lb_mr_lock(nic);
    uint32_t idx;
    if (nic->mr_free != UINT32_MAX) {
        idx = nic->mr_free;
        nic->mr_free = nic->mr_next_free[idx];
    } else {
        if (nic->nmrs == nic->mrs_cap && lb_mr_grow(nic) < 0) {
            lb_mr_unlock(nic);
            free(mr);
            lb_err(nic, "out of memory registering %zu bytes", len);
            return -ENOMEM;
        }
        if (nic->nmrs == UINT32_MAX - 1) {
            lb_mr_unlock(nic);
            free(mr);
            return -ENOSPC;
        }
        idx = nic->nmrs++;
    }
    nic->rkey_seq += 0x9e3779b97f4a7c15ull;
    mr->index = idx;
    mr->rkey = (nic->rkey_seq & 0xffffffff00000000ull) | (uint64_t)(idx + 1);
    nic->mrs[idx] = mr;
    lb_mr_unlock(nic);

    info->rkey = mr->rkey;
    info->remote_base = (uint64_t)(uintptr_t)addr;
    *out = mr;
    return 0;
}

int lb_mr_dereg(te_plugin_nic *nic, te_plugin_mr *mr)
{
    if (!mr)
        return -EINVAL;
    lb_mr_lock(nic);
    if (mr->nic != nic || mr->index >= nic->nmrs || nic->mrs[mr->index] != mr) {
        lb_mr_unlock(nic);
        lb_err(nic, "mr_dereg: region is not registered on this NIC");
        return -EINVAL;
    }
    nic->mrs[mr->index] = NULL;
    nic->mr_next_free[mr->index] = nic->mr_free;
    nic->mr_free = mr->index;
    lb_mr_unlock(nic);
    free(mr);
    return 0;
}

void lb_mr_free_all(lb_nic *nic)
{
    for (uint32_t i = 0; i < nic->nmrs; i++)
        free(nic->mrs[i]);
    free(nic->mrs);
    free(nic->mr_next_free);
    nic->mrs = NULL;
    nic->mr_next_free = NULL;
    nic->nmrs = nic->mrs_cap = 0;
}
