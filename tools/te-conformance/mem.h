/*
 * Where the suite's test regions live: host memory, or CUDA device memory
 * with a host mirror (--mem cuda, --mem-src, --mem-dst). Cases keep reading
 * and writing the host mirror; the mirror is pushed to the device before a
 * request is submitted and pulled back after completions, whenever nothing
 * is in flight, so every case runs unchanged on device memory.
 */
#ifndef TE_CONFORMANCE_MEM_H
#define TE_CONFORMANCE_MEM_H

#include <stddef.h>
#include <stdint.h>

/** --mem-src / --mem-dst: 1 = CUDA device memory, 0 = host. */
extern int conf_mem_src_cuda, conf_mem_dst_cuda;

struct conf_mem {
    int cuda;
    uint8_t *host;  /* what cases read and write */
    void *dev;      /* the registered region when cuda */
    size_t len;
};

/** Allocate len bytes (zeroed) of host or device memory. Prints why not. */
int conf_mem_alloc(struct conf_mem *m, size_t len, int cuda);
/** The address to register, and its TE_MEM_* kind. */
void *conf_mem_region(const struct conf_mem *m);
uint32_t conf_mem_kind(const struct conf_mem *m);
/** Copy [off, off+len) host mirror -> device (no-op for host memory). */
int conf_mem_push(struct conf_mem *m, size_t off, size_t len);
/** Copy [off, off+len) device -> host mirror (no-op for host memory). */
int conf_mem_pull(struct conf_mem *m, size_t off, size_t len);
void conf_mem_free(struct conf_mem *m);

#endif
