/* The growth rule of the public request structs (te.h, docs/abi.md). */
#ifndef TE_REQUEST_ABI_H
#define TE_REQUEST_ABI_H

#include <te/te.h>

/**
 * *out = r as a te_request of this library's layout: r itself when the
 * caller was built against this header, else tmp filled from r's `size`
 * bytes. Fails (te_last_error set, prefixed with fn) when size is 0, below
 * the first published layout, or longer with non-zero bytes this library
 * does not know.
 */
int te_request_view(const te_request *r, te_request *tmp,
                    const te_request **out, const char *fn);

/** 0, or -EINVAL naming `what` when a reserved field is not zero. */
int te_route_check(const te_route *rt, const char *what);
int te_scatter_dst_check(const te_scatter_dst *d, uint32_t i, const char *what);
int te_barrier_dst_check(const te_barrier_dst *d, uint32_t i, const char *what);

#endif
