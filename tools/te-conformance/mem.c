/* Host or device test regions (mem.h). Device memory needs the CUDA
 * runtime, linked where the build has CUDA (TE_CONF_HAVE_CUDA). */
#include "mem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "te/te.h"

#ifdef TE_CONF_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int conf_mem_src_cuda, conf_mem_dst_cuda;

int conf_mem_alloc(struct conf_mem *m, size_t len, int cuda)
{
    memset(m, 0, sizeof(*m));
    m->len = len;
    m->cuda = cuda;
    m->host = aligned_alloc(4096, len);
    if (!m->host)
        return -ENOMEM;
    memset(m->host, 0, len);
    if (!cuda)
        return 0;
#ifdef TE_CONF_HAVE_CUDA
    char why[512];
    if (te_cuda_status(why, sizeof(why))) {
        fprintf(stderr, "te-conformance: --mem cuda: %s\n", why);
        conf_mem_free(m);
        return -ENOTSUP;
    }
    cudaError_t e = cudaMalloc(&m->dev, len);
    if (e == cudaSuccess)
        e = cudaMemset(m->dev, 0, len);
    if (e == cudaSuccess) /* asynchronous: done before any transfer */
        e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        fprintf(stderr, "te-conformance: cudaMalloc of %zu bytes: %s\n", len,
                cudaGetErrorString(e));
        conf_mem_free(m);
        return -ENOMEM;
    }
    return 0;
#else
    fprintf(stderr, "te-conformance: --mem cuda: this build has no CUDA "
            "(configure with TE_WITH_CUDA=ON)\n");
    conf_mem_free(m);
    return -ENOTSUP;
#endif
}

void *conf_mem_region(const struct conf_mem *m)
{
    return m->cuda ? m->dev : m->host;
}

uint32_t conf_mem_kind(const struct conf_mem *m)
{
    return m->cuda ? TE_MEM_CUDA : TE_MEM_HOST;
}

int conf_mem_push(struct conf_mem *m, size_t off, size_t len)
{
#ifdef TE_CONF_HAVE_CUDA
    if (m->cuda && len &&
        (cudaMemcpy((uint8_t *)m->dev + off, m->host + off, len,
                    cudaMemcpyHostToDevice) != cudaSuccess ||
         /* From pageable memory cudaMemcpy may return before the bytes
          * land; the library's copies run on a stream of their own. */
         cudaDeviceSynchronize() != cudaSuccess))
        return -EIO;
#endif
    return 0;
}

int conf_mem_pull(struct conf_mem *m, size_t off, size_t len)
{
#ifdef TE_CONF_HAVE_CUDA
    if (m->cuda && len &&
        cudaMemcpy(m->host + off, (uint8_t *)m->dev + off, len,
                   cudaMemcpyDeviceToHost) != cudaSuccess)
        return -EIO;
#endif
    return 0;
}

void conf_mem_free(struct conf_mem *m)
{
#ifdef TE_CONF_HAVE_CUDA
    if (m->dev)
        cudaFree(m->dev);
#endif
    free(m->host);
    memset(m, 0, sizeof(*m));
}
