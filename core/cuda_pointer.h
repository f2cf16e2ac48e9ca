/* The one place that decides what kind of memory a registration is. */
#ifndef TE_CORE_CUDA_POINTER_H
#define TE_CORE_CUDA_POINTER_H

#include <stddef.h>
#include <stdint.h>

/**
 * Check [addr, addr+len) against mem_kind (TE_MEM_HOST / TE_MEM_CUDA)
 * before any NIC sees it. TE_MEM_CUDA: CUDA must be usable, the range must
 * be device memory inside one allocation; *device_id = its ordinal.
 * TE_MEM_HOST: refused only if CUDA is already loaded in the process and
 * says the range is device memory (host-only users never load the driver).
 * Returns 0 or -errno with te_last_error() naming the cause.
 */
int te_cuda_check_registration(void *addr, size_t len, uint32_t mem_kind,
                               int *device_id);

#endif
