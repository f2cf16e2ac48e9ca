/*
 * Memory registration, honouring the domain's mr_mode:
 *  - FI_MR_PROV_KEY: the provider picks the key (fi_mr_key). Otherwise we
 *    request one. A requested key may be used once per domain (a second
 *    fi_mr_reg with it fails with -FI_ENOKEY), so keys come from a per-NIC
 *    sequence; with 8-byte keys the low half is a check of the sequence
 *    under the NIC's key_secret, published in its address, so an initiator
 *    can refuse a corrupted or foreign key before sending (shm drops such a
 *    write silently: docs/efa.md, "Keys").
 *  - FI_MR_VIRT_ADDR: peers address the region by virtual address; without
 *    it by offset, so remote_base is 0 (tcp;ofi_rxm logs a warning and
 *    hangs the transfer when sent a virtual address).
 *  - FI_MR_ENDPOINT / FI_MR_RMA_EVENT: bind to the endpoint and enable.
 *  - FI_MR_LOCAL: every operation passes fi_mr_desc() (we always do).
 *  - FI_MR_ALLOCATED: the application's memory is allocated by definition.
 *  - FI_MR_HMEM: CUDA memory is registered with iface FI_HMEM_CUDA (builds
 *    with TE_WITH_CUDA, providers granting FI_HMEM).
 *
 * Quiescence: fi_close(mr) runs under the NIC lock, so no progress call of
 * this NIC (where shm and tcp copy inbound data) runs meanwhile, and later
 * accesses with the key fail at this side ("accesses to a closed MR from a
 * remote peer will result in an error at the peer", fi_mr(3)). What
 * libfabric does not promise: a tcp write whose header was accepted before
 * the close keeps streaming into the region; wait for its immediate first.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "efa_internal.h"

int efa_mr_register_locked(efa_nic *nic, void *addr, size_t len,
                           uint64_t fi_access, uint32_t mem_type,
                           int device_id, struct fid_mr **out, uint64_t *key)
{
    struct iovec iov = {.iov_base = addr, .iov_len = len};
    struct fi_mr_attr a;
    memset(&a, 0, sizeof(a));
    a.mr_iov = &iov;
    a.iov_count = 1;
    a.access = fi_access;
    a.iface = FI_HMEM_SYSTEM;
    if (mem_type == TE_PMEM_CUDA) {
#ifdef TE_EFA_WITH_HMEM
        if (!nic->hmem) {
            efa_err(nic, "CUDA memory: provider %s did not grant FI_HMEM",
                    nic->info->fabric_attr->prov_name);
            return -ENOTSUP;
        }
        a.iface = FI_HMEM_CUDA;
        a.device.cuda = device_id;
#else
        efa_err(nic, "CUDA memory: the efa plugin was built without CUDA "
                "(TE_WITH_CUDA)");
        return -ENOTSUP;
#endif
    } else if (mem_type != TE_PMEM_HOST) {
        efa_err(nic, "unknown memory type %u", mem_type);
        return -EINVAL;
    }
    int rc = -FI_ENOKEY;
    /* A key can be taken already (e.g. by the provider's own regions):
     * move on to the next few. */
    for (int attempt = 0; attempt < 8 && rc == -FI_ENOKEY; attempt++) {
        if (!nic->prov_key && nic->auth.on) {
            /* With a secret keys must not be guessable (docs/security.md):
             * 32 random bits, then the check under a secret that only
             * authenticated peers learn; random bits alone without one. */
            uint32_t r = (uint32_t)tpc_random64();
            r = r ? r : 1;
            size_t ks = nic->info->domain_attr->mr_key_size;
            a.requested_key = nic->mint_keys
                                  ? ((uint64_t)r << 32) |
                                        efa_key_check(nic->key_secret, r)
                              : ks && ks < 8
                                  ? tpc_random64() & ((1ull << (8 * ks)) - 1)
                                  : tpc_random64();
        } else if (!nic->prov_key) {
            uint32_t seq = ++nic->key_seq;
            if (!seq)
                seq = ++nic->key_seq;
            a.requested_key = nic->mint_keys
                                  ? ((uint64_t)seq << 32) |
                                        efa_key_check(nic->key_secret, seq)
                                  : seq;
        }
        rc = fi_mr_regattr(nic->domain, &a, 0, out);
        if (nic->prov_key)
            break;
    }
    if (rc) {
        efa_err(nic, "fi_mr_regattr of %zu bytes at %p: %s", len, addr,
                fi_strerror(-rc));
        return efa_errno(rc);
    }
    const char *what = NULL;
    if (nic->mr_endpoint && (rc = fi_mr_bind(*out, &nic->ep->fid, 0)))
        what = "fi_mr_bind";
    else if ((nic->mr_endpoint || nic->mr_rma_event) &&
             (rc = fi_mr_enable(*out)))
        what = "fi_mr_enable";
    if (what) {
        efa_err(nic, "%s: %s", what, fi_strerror(-rc));
        fi_close(&(*out)->fid);
        return efa_errno(rc);
    }
    *key = fi_mr_key(*out);
    if (*key == FI_KEY_NOTAVAIL) {
        efa_err(nic, "provider %s has no 64-bit key for the region "
                "(FI_MR_RAW keys are not supported)",
                nic->info->fabric_attr->prov_name);
        fi_close(&(*out)->fid);
        return -ENOTSUP;
    }
    return 0;
}

int efa_mr_reg(te_plugin_nic *nic, void *addr, size_t len, uint32_t access,
               uint32_t mem_type, int device_id, te_plugin_mr **out,
               struct te_plugin_mr_info *info)
{
    if (!out || !info || !addr || !len) {
        efa_err(nic, "mr_reg: %s", !len ? "empty region" : "NULL argument");
        return -EINVAL;
    }
    efa_mr *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    /* Local access always (source of writes and sends, sink of reads and
     * receives); remote access as asked, enforced by the target. */
    uint64_t fa = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
    if (access & TE_PMR_REMOTE_WRITE)
        fa |= FI_REMOTE_WRITE;
    if (access & TE_PMR_REMOTE_READ)
        fa |= FI_REMOTE_READ;
    pthread_mutex_lock(&nic->lock);
    int rc = efa_mr_register_locked(nic, addr, len, fa, mem_type, device_id,
                                    &m->mr, &m->key);
    if (rc == 0) {
        m->next = nic->mrs;
        if (nic->mrs)
            nic->mrs->prev = m;
        nic->mrs = m;
    }
    pthread_mutex_unlock(&nic->lock);
    if (rc) {
        free(m);
        return rc;
    }
    m->desc = fi_mr_desc(m->mr);
    m->addr = addr;
    m->len = len;
    m->access = access;
    info->rkey = m->key;
    info->remote_base = nic->virt_addr ? (uint64_t)(uintptr_t)addr : 0;
    *out = m;
    return 0;
}

int efa_mr_dereg(te_plugin_nic *nic, te_plugin_mr *m)
{
    if (!m)
        return -EINVAL;
    pthread_mutex_lock(&nic->lock);
    int rc = fi_close(&m->mr->fid);
    if (m->prev)
        m->prev->next = m->next;
    else
        nic->mrs = m->next;
    if (m->next)
        m->next->prev = m->prev;
    pthread_mutex_unlock(&nic->lock);
    if (rc)
        efa_err(nic, "fi_close of a registration: %s", fi_strerror(-rc));
    free(m);
    return rc ? efa_errno(rc) : 0;
}
