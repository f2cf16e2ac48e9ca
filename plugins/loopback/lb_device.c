/*
 * CUDA device memory on the loopback transport.
 *
 * The plugin has no CUDA of its own: it copies through the core's
 * device_copy service (cuMemcpyAsync on this NIC's stream, returning once
 * the copy has completed, so a write still completes only after its bytes
 * are in place). Keys, access and bounds are checked before any copy, by the
 * same code as for host memory (lb_engine.c).
 *
 * Across processes the initiator's memory is reached with process_vm_*,
 * which cannot touch device memory: a device region of OURS is staged
 * through a host buffer (process_vm_readv into it, then a device copy; and
 * the reverse for reads), while a device buffer of the INITIATOR in another
 * process would need CUDA IPC handles over the channel, which is not built
 * yet: such an op fails with -ENOTSUP and a message saying so.
 */
#include <errno.h>
#include <stdlib.h>

#include "lb_internal.h"

#define LB_BOUNCE_BYTES (1u << 20) /* staging chunk, per NIC */

bool lb_dev_supported(const lb_nic *nic)
{
    return nic->ctx->host.device_copy != NULL &&
           nic->ctx->host.device_stream_free != NULL;
}

static int lb_dev_copy(lb_nic *nic, void *dst, const void *src, uint64_t len)
{
    if (!lb_dev_supported(nic))
        return -ENOTSUP;
    return nic->ctx->host.device_copy(nic->ctx->host.host_ctx,
                                      &nic->cuda_stream, dst, src, len);
}

static int lb_dev_remote_unsupported(lb_nic *nic, struct lb_inbound *in)
{
    lb_err(nic, "device memory of another process (initiator pid %u): "
                "cross-process CUDA buffers of the initiator need CUDA IPC, "
                "which the loopback transport does not implement yet",
           in->pid);
    return -ENOTSUP;
}

static int lb_bounce(lb_nic *nic)
{
    if (!nic->bounce && !(nic->bounce = malloc(LB_BOUNCE_BYTES)))
        return -ENOMEM;
    return 0;
}

int lb_dev_copy_from(lb_nic *nic, struct lb_inbound *in, void *dst,
                     bool dst_dev, uint64_t src, bool src_dev, uint64_t len)
{
    if (in->local)
        return lb_dev_copy(nic, dst, (const void *)(uintptr_t)src, len);
    if (src_dev)
        return lb_dev_remote_unsupported(nic, in);
    int rc = lb_bounce(nic);
    for (uint64_t done = 0; !rc && done < len;) {
        uint64_t n = len - done < LB_BOUNCE_BYTES ? len - done : LB_BOUNCE_BYTES;
        rc = lb_copy_from(in, nic->bounce, src + done, n);
        if (!rc)
            rc = lb_dev_copy(nic, (unsigned char *)dst + done, nic->bounce, n);
        done += n;
    }
    return rc;
}

int lb_dev_copy_to(lb_nic *nic, struct lb_inbound *in, uint64_t dst,
                   bool dst_dev, const void *src, bool src_dev, uint64_t len)
{
    if (in->local)
        return lb_dev_copy(nic, (void *)(uintptr_t)dst, src, len);
    if (dst_dev)
        return lb_dev_remote_unsupported(nic, in);
    int rc = lb_bounce(nic);
    for (uint64_t done = 0; !rc && done < len;) {
        uint64_t n = len - done < LB_BOUNCE_BYTES ? len - done : LB_BOUNCE_BYTES;
        rc = lb_dev_copy(nic, nic->bounce, (const unsigned char *)src + done, n);
        if (!rc)
            rc = lb_copy_to(in, dst + done, nic->bounce, n);
        done += n;
    }
    return rc;
}

void lb_dev_free(lb_nic *nic)
{
    if (nic->cuda_stream && lb_dev_supported(nic))
        nic->ctx->host.device_stream_free(nic->ctx->host.host_ctx,
                                          nic->cuda_stream);
    nic->cuda_stream = NULL;
    free(nic->bounce);
    nic->bounce = NULL;
}
