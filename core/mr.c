/* Memory registration across every NIC of a group. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cuda_pointer.h"
#include "engine_internal.h"
#include "paths.h"
#include "te_clock.h"
#include "te_error.h"
#include "te_hot.h"

static uint32_t plugin_access(uint32_t access)
{
    uint32_t a = TE_PMR_LOCAL_WRITE;
    if (access & TE_MR_REMOTE_WRITE)
        a |= TE_PMR_REMOTE_WRITE;
    if (access & TE_MR_REMOTE_READ)
        a |= TE_PMR_REMOTE_READ;
    return a;
}

TE_API int te_mr_reg(te_engine *e, int group, void *addr, size_t len,
                     uint32_t access, uint32_t mem_kind, te_mr **out)
{
    te_error_clear();
    if (!e || group < 0 || (uint32_t)group >= e->ngroups || !out)
        return te_fail(-EINVAL, "te_mr_reg: bad engine, group %d or out",
                       group);
    if (!addr || len == 0)
        return te_fail(-EINVAL, "te_mr_reg: empty region (addr %p, len %zu)",
                       addr, len);
    if (access & ~(TE_MR_REMOTE_WRITE | TE_MR_REMOTE_READ))
        return te_fail(-EINVAL, "te_mr_reg: unknown access bits 0x%x",
                       access);
    if (mem_kind != TE_MEM_HOST && mem_kind != TE_MEM_CUDA)
        return te_fail(-EINVAL, "te_mr_reg: unknown memory kind %u",
                       mem_kind);
    if ((uintptr_t)addr + len < (uintptr_t)addr)
        return te_fail(-EINVAL, "te_mr_reg: region wraps the address space");
    int device_id = 0; /* CUDA ordinal of TE_MEM_CUDA, from the driver */
    int crc = te_cuda_check_registration(addr, len, mem_kind, &device_id);
    if (crc)
        return crc;
    struct te_group *g = &e->groups[group];
    int prc = te_paths_check_mem(e, g, mem_kind);
    if (prc)
        return prc;
    struct te_mr *mr = calloc(1, sizeof(*mr));
    if (!mr)
        return te_fail(-ENOMEM, "te_mr_reg: out of memory");
    mr->e = e;
    mr->g = g;
    mr->addr = addr;
    mr->len = len;
    mr->access = access;
    mr->mem_kind = mem_kind;
    const struct te_plugin_ops *P = e->plugin.ops;
    for (uint32_t i = 0; i < g->nic_count; i++) {
        te_error_clear();
        int rc = P->mr_reg(g->nics[i].pn, addr, len, plugin_access(access),
                           mem_kind == TE_MEM_CUDA ? TE_PMEM_CUDA
                                                   : TE_PMEM_HOST,
                           device_id, &mr->pmr[i], &mr->info[i]);
        if (rc) {
            char why[256];
            snprintf(why, sizeof(why), "%s", te_last_error());
            for (uint32_t j = 0; j < i; j++)
                P->mr_dereg(g->nics[j].pn, mr->pmr[j]);
            free(mr);
            return te_fail(rc, "te_mr_reg: NIC %s refused %zu bytes at %p: "
                           "%s%s%s", g->nics[i].info.name, len, addr,
                           te_strerror(rc), why[0] ? ": " : "", why);
        }
    }
    pthread_mutex_lock(&g->mr_lock);
    mr->link.next = &g->mrs;
    mr->link.prev = g->mrs.prev;
    g->mrs.prev->next = &mr->link;
    g->mrs.prev = &mr->link;
    pthread_mutex_unlock(&g->mr_lock);
    *out = mr;
    return 0;
}

/*
 * A request holds its registration from before te_submit reads it until
 * te_req_free; te_mr_dereg and te_mr_revoke claim it only when nobody
 * holds it, in one compare-and-swap of users from 0 to TE_MR_CLAIMED. So
 * either the submit's hold comes first (the claim fails: -EBUSY) or the
 * claim does (the hold fails: -EBUSY): never a request on a registration
 * being freed or re-keyed. A submit that finds the claim backs its
 * increment out; the claimer waits for those few instructions before it
 * touches the registration.
 */
TE_HOT
int te_mr_hold(struct te_mr *mr, const char *what)
{
    int64_t old = atomic_fetch_add_explicit(&mr->users, 1,
                                            memory_order_acquire);
    if (!(old & TE_MR_CLAIMED))
        return 0;
    atomic_fetch_sub_explicit(&mr->users, 1, memory_order_release);
    return te_fail(-EBUSY, "%s: the registration at %p is being "
                   "deregistered or revoked by another thread", what,
                   (void *)mr->addr);
}

TE_HOT
void te_mr_unhold(struct te_mr *mr)
{
    atomic_fetch_sub_explicit(&mr->users, 1, memory_order_release);
}

static int claim(struct te_mr *mr, const char *fn)
{
    int64_t seen = 0;
    if (!atomic_compare_exchange_strong_explicit(
            &mr->users, &seen, TE_MR_CLAIMED, memory_order_acq_rel,
            memory_order_acquire)) {
        if (seen & TE_MR_CLAIMED)
            return te_fail(-EBUSY, "%s: another thread is deregistering or "
                           "revoking this registration", fn);
        return te_fail(-EBUSY, "%s: %lld requests in flight still use this "
                       "registration", fn, (long long)seen);
    }
    /* Submits that incremented after the claim are backing out. */
    for (unsigned spins = 0; atomic_load_explicit(&mr->users,
                                                  memory_order_acquire) !=
                             TE_MR_CLAIMED;
         spins++) {
        if (spins < 64)
            te_cpu_relax();
        else
            sched_yield();
    }
    return 0;
}

TE_API int te_mr_dereg(te_engine *e, te_mr *mr)
{
    te_error_clear();
    if (!e || !mr || mr->e != e)
        return te_fail(-EINVAL, "te_mr_dereg: bad engine or registration");
    int rc = claim(mr, "te_mr_dereg");
    if (rc)
        return rc;
    pthread_mutex_lock(&mr->g->mr_lock);
    mr->link.prev->next = mr->link.next;
    mr->link.next->prev = mr->link.prev;
    pthread_mutex_unlock(&mr->g->mr_lock);
    return te_mr_release(mr);
}

int te_mr_release(struct te_mr *mr)
{
    const struct te_plugin_ops *P = mr->e->plugin.ops;
    int first = 0;
    for (uint32_t i = 0; i < mr->g->nic_count; i++) {
        int rc = P->mr_dereg(mr->g->nics[i].pn, mr->pmr[i]);
        if (rc && !first)
            first = te_fail(rc, "te_mr_dereg: NIC %s: %s",
                            mr->g->nics[i].info.name, te_strerror(rc));
    }
    free(mr);
    return first;
}

static int rekey(te_engine *e, te_mr *mr, te_mr_desc *new_desc);

TE_API int te_mr_revoke(te_engine *e, te_mr *mr, te_mr_desc *new_desc)
{
    te_error_clear();
    if (!e || !mr || mr->e != e)
        return te_fail(-EINVAL, "te_mr_revoke: bad engine or registration");
    int rc = claim(mr, "te_mr_revoke");
    if (rc)
        return rc;
    rc = rekey(e, mr, new_desc);
    /* Not a store of 0: a submit may be between its increment and its
     * backing out right now, and its decrement must still balance. */
    atomic_fetch_sub_explicit(&mr->users, TE_MR_CLAIMED, memory_order_release);
    return rc;
}

/* te_mr_revoke's work, on a claimed registration. */
static int rekey(te_engine *e, te_mr *mr, te_mr_desc *new_desc)
{
    const struct te_plugin_ops *P = e->plugin.ops;
    struct te_group *g = mr->g;
    te_plugin_mr *fresh[TE_MAX_NICS];
    struct te_plugin_mr_info info[TE_MAX_NICS];
    int device_id = 0;
    int crc = te_cuda_check_registration(mr->addr, mr->len, mr->mem_kind,
                                         &device_id);
    if (crc)
        return crc;
    /* New keys first on every NIC, so a failure leaves the old ones valid
     * and the registration unchanged. */
    for (uint32_t i = 0; i < g->nic_count; i++) {
        te_error_clear();
        int rc = P->mr_reg(g->nics[i].pn, mr->addr, mr->len,
                           plugin_access(mr->access),
                           mr->mem_kind == TE_MEM_CUDA ? TE_PMEM_CUDA
                                                       : TE_PMEM_HOST,
                           device_id, &fresh[i], &info[i]);
        if (rc) {
            char why[256];
            snprintf(why, sizeof(why), "%s", te_last_error());
            for (uint32_t j = 0; j < i; j++)
                P->mr_dereg(g->nics[j].pn, fresh[j]);
            return te_fail(rc, "te_mr_revoke: NIC %s: %s%s%s",
                           g->nics[i].info.name, te_strerror(rc),
                           why[0] ? ": " : "", why);
        }
    }
    int first = 0;
    for (uint32_t i = 0; i < g->nic_count; i++) {
        /* Quiescent: returns when no access with the old key can land. */
        int rc = P->mr_dereg(g->nics[i].pn, mr->pmr[i]);
        if (rc && !first)
            first = te_fail(rc, "te_mr_revoke: NIC %s: old key: %s",
                            g->nics[i].info.name, te_strerror(rc));
        mr->pmr[i] = fresh[i];
        mr->info[i] = info[i];
    }
    if (new_desc)
        te_mr_describe(mr, new_desc);
    return first;
}

TE_API void *te_mr_addr(const te_mr *mr)
{
    return mr ? mr->addr : NULL;
}

TE_API size_t te_mr_len(const te_mr *mr)
{
    return mr ? mr->len : 0;
}

TE_API int te_mr_describe(const te_mr *mr, te_mr_desc *out)
{
    te_error_clear();
    if (!mr || !out)
        return te_fail(-EINVAL, "te_mr_describe: NULL argument");
    memset(out, 0, sizeof(*out));
    out->addr = (uint64_t)(uintptr_t)mr->addr;
    out->len = mr->len;
    out->access = mr->access;
    out->nic_count = mr->g->nic_count;
    for (uint32_t i = 0; i < mr->g->nic_count; i++) {
        out->nic[i].rkey = mr->info[i].rkey;
        out->nic[i].remote_base = mr->info[i].remote_base;
    }
    return 0;
}
