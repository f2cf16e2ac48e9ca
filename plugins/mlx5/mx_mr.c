/*
 * Memory registration. Host memory: ibv_reg_mr with relaxed ordering where
 * the device supports it (an optional access flag: rdma-core drops it
 * elsewhere). CUDA memory: a dma-buf exported by the CUDA driver
 * (cuMemGetHandleForAddressRange, found with dlopen so the plugin needs no
 * CUDA at build time) registered with ibv_reg_dmabuf_mr; if that is not
 * possible, plain ibv_reg_mr on the device pointer, which works only with
 * the nvidia-peermem kernel module.
 *
 * Quiescence (plugin ABI: mr_dereg returns only when no remote access can
 * still land): ibv_dereg_mr returns after the device has invalidated the
 * key; a remote write or read that arrives later fails with a remote access
 * error at its initiator and touches nothing here.
 *
 * mr_reg/mr_dereg run on any thread: verbs calls are thread-safe, and the
 * only shared state is the list nic_close() uses, under mr_lock.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mx_internal.h"

/* CUDA driver API, the two entry points we need (cuda.h values). */
typedef int (*mx_cu_get_handle_fn)(void *handle, unsigned long long dptr,
                                   size_t size, int type,
                                   unsigned long long flags);
#define MX_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

static mx_cu_get_handle_fn mx_cu_get_handle;
static pthread_once_t mx_cuda_once = PTHREAD_ONCE_INIT;

static void mx_cuda_resolve(void)
{
    /* The application's own libcuda if loaded, else load it (kept loaded:
     * the plugin may be unloaded, the driver library must not be). */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!h)
        h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h)
        mx_cu_get_handle = (mx_cu_get_handle_fn)dlsym(
            h, "cuMemGetHandleForAddressRange");
}

static mx_cu_get_handle_fn mx_cuda_get_handle(void)
{
    pthread_once(&mx_cuda_once, mx_cuda_resolve);
    return mx_cu_get_handle;
}

/* dma-buf registration of CUDA memory; NULL (errno, *why) on failure. */
static struct ibv_mr *mx_reg_dmabuf(mx_nic *nic, void *addr, size_t len,
                                    int flags, const char **why)
{
    mx_cu_get_handle_fn get = mx_cuda_get_handle();
    if (!get) {
        *why = "libcuda.so.1 with cuMemGetHandleForAddressRange (CUDA >= 11.7) "
               "not found";
        errno = ENOTSUP;
        return NULL;
    }
    long page = sysconf(_SC_PAGESIZE);
    uint64_t a = (uint64_t)(uintptr_t)addr;
    uint64_t base = a & ~((uint64_t)page - 1);
    uint64_t end = (a + len + (uint64_t)page - 1) & ~((uint64_t)page - 1);
    int fd = -1;
    int cr = get(&fd, base, (size_t)(end - base),
                 MX_CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (cr != 0 || fd < 0) {
        *why = "cuMemGetHandleForAddressRange failed (is the pointer from "
               "cuMemAlloc/cudaMalloc and dma-buf supported by the driver?)";
        errno = ENOTSUP;
        return NULL;
    }
    struct ibv_mr *mr = ibv_reg_dmabuf_mr(nic->pd, a - base, len, a, fd, flags);
    int e = errno;
    close(fd); /* the registration holds its own reference */
    if (!mr) {
        *why = "ibv_reg_dmabuf_mr failed";
        errno = e;
    }
    return mr;
}

int mx_mr_reg(te_plugin_nic *nic, void *addr, size_t len, uint32_t access,
              uint32_t mem_type, int device_id, te_plugin_mr **out,
              struct te_plugin_mr_info *info)
{
    if (!out || !info || !addr || !len) {
        mx_err(nic, "mr_reg: bad arguments (addr %p, len %zu)", addr, len);
        return -EINVAL;
    }
    if (mem_type != TE_PMEM_HOST && mem_type != TE_PMEM_CUDA) {
        mx_err(nic, "mr_reg: unknown memory type %u", mem_type);
        return -ENOTSUP;
    }
#ifdef MX_NO_CUDA
    if (mem_type == TE_PMEM_CUDA) {
        mx_err(nic, "mr_reg: CUDA memory: plugin built with TE_WITH_CUDA=OFF");
        return -ENOTSUP;
    }
#endif
    int flags = 0;
    if (access & (TE_PMR_LOCAL_WRITE | TE_PMR_REMOTE_WRITE))
        flags |= IBV_ACCESS_LOCAL_WRITE; /* verbs: remote write needs it */
    if (access & TE_PMR_REMOTE_WRITE)
        flags |= IBV_ACCESS_REMOTE_WRITE;
    if (access & TE_PMR_REMOTE_READ)
        flags |= IBV_ACCESS_REMOTE_READ;
    if (nic->ctx->cfg.relaxed_ordering)
        flags |= IBV_ACCESS_RELAXED_ORDERING;

    struct ibv_mr *vmr = NULL;
    const char *why = NULL;
    int e0 = 0;
    if (mem_type == TE_PMEM_CUDA && nic->ctx->cfg.cuda_dmabuf) {
        vmr = mx_reg_dmabuf(nic, addr, len, flags, &why);
        e0 = vmr ? 0 : errno;
    }
    if (!vmr) {
        /* Host memory, or CUDA memory through nvidia-peermem. */
        vmr = ibv_reg_mr_iova2(nic->pd, addr, len, (uint64_t)(uintptr_t)addr,
                               (unsigned int)flags);
        if (!vmr && (flags & IBV_ACCESS_RELAXED_ORDERING))
            vmr = ibv_reg_mr_iova2(nic->pd, addr, len,
                                   (uint64_t)(uintptr_t)addr,
                                   (unsigned int)(flags &
                                                  ~IBV_ACCESS_RELAXED_ORDERING));
        if (!vmr) {
            int e = errno ? errno : EIO;
            if (mem_type == TE_PMEM_CUDA)
                mx_err(nic, "cannot register %zu bytes of CUDA memory (device "
                            "%d) at %p: dma-buf: %s (errno %d); ibv_reg_mr: %s "
                            "(errno %d; needs the nvidia-peermem module)",
                       len, device_id, addr,
                       why ? why : "disabled (cuda_dmabuf = false)", e0,
                       strerror(e), e);
            else
                mx_err(nic, "ibv_reg_mr of %zu bytes at %p failed: %s (errno "
                            "%d)%s",
                       len, addr, strerror(e), e,
                       e == ENOMEM || e == EPERM
                           ? "; raise the locked-memory limit (ulimit -l)"
                           : "");
            return mem_type == TE_PMEM_CUDA && e == EFAULT ? -ENOTSUP : -e;
        }
    }
    mx_mr *mr = calloc(1, sizeof(*mr));
    if (!mr) {
        ibv_dereg_mr(vmr);
        return -ENOMEM;
    }
    mr->nic = nic;
    mr->mr = vmr;
    mr->addr = addr;
    mr->len = len;
    mr->access = access;
    pthread_mutex_lock(&nic->mr_lock);
    mr->next = nic->mrs;
    if (nic->mrs)
        nic->mrs->prev = mr;
    nic->mrs = mr;
    pthread_mutex_unlock(&nic->mr_lock);
    info->rkey = vmr->rkey;
    info->remote_base = (uint64_t)(uintptr_t)addr; /* VA-based addressing */
    *out = mr;
    return 0;
}

static void mx_mr_unlink(mx_nic *nic, mx_mr *mr)
{
    if (mr->prev)
        mr->prev->next = mr->next;
    else
        nic->mrs = mr->next;
    if (mr->next)
        mr->next->prev = mr->prev;
}

int mx_mr_dereg(te_plugin_nic *nic, te_plugin_mr *mr)
{
    if (!mr || mr->nic != nic) {
        mx_err(nic, "mr_dereg: registration %p does not belong to this NIC",
               (void *)mr);
        return -EINVAL;
    }
    int rc = ibv_dereg_mr(mr->mr);
    if (rc) {
        mx_err(nic, "ibv_dereg_mr (rkey 0x%x, %llu bytes) failed: %s (errno "
                    "%d)",
               mr->mr->rkey, (unsigned long long)mr->len, strerror(rc), rc);
        return -rc;
    }
    pthread_mutex_lock(&nic->mr_lock);
    mx_mr_unlink(nic, mr);
    pthread_mutex_unlock(&nic->mr_lock);
    free(mr);
    return 0;
}

void mx_mr_free_all(mx_nic *nic)
{
    pthread_mutex_lock(&nic->mr_lock);
    while (nic->mrs) {
        mx_mr *mr = nic->mrs;
        mx_mr_unlink(nic, mr);
        int rc = ibv_dereg_mr(mr->mr);
        if (rc)
            mx_log(nic->ctx, 1, "%s: ibv_dereg_mr at close failed: %s (errno "
                                "%d)",
                   nic->name, strerror(rc), rc);
        free(mr);
    }
    pthread_mutex_unlock(&nic->mr_lock);
}
