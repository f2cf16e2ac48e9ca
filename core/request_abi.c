/*
 * The growth rule of te_request (te.h, docs/abi.md): the caller says how
 * big its te_request is; the library reads that many bytes, zero-fills a
 * shorter (older) layout and refuses a longer (newer) one whose extra bytes
 * are not zero. Reserved fields of embedded and array structs must be zero.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "request_abi.h"
#include "te_error.h"
#include "te_hot.h"

_Static_assert(sizeof(te_request) >= TE_REQUEST_SIZE_V0_2,
               "te_request shrank below its first published layout");
_Static_assert(offsetof(te_request, size) == 0,
               "te_request.size must stay the first field");

TE_HOT
int te_request_view(const te_request *r, te_request *tmp,
                    const te_request **out, const char *fn)
{
    uint32_t size = r->size;
    *out = r;
    if (size == sizeof(te_request))
        return 0; /* the caller was built against this header */
    if (size == 0) {
        return te_fail(-EINVAL, "%s: te_request.size is 0: start requests with "
                "te_request_init() (or set size = sizeof(te_request))", fn);
    }
    if (size < TE_REQUEST_SIZE_V0_2) {
        return te_fail(-EINVAL, "%s: te_request.size %u is smaller than the first "
                "published layout (%u bytes): not a te_request", fn, size,
                TE_REQUEST_SIZE_V0_2);
    }
    if (size > sizeof(te_request)) {
        /* A newer header: acceptable only if it sets nothing we lack. */
        const unsigned char *extra = (const unsigned char *)r;
        for (size_t i = sizeof(te_request); i < size; i++)
            if (extra[i]) {
                return te_fail(-E2BIG, "%s: te_request of %u bytes sets byte %zu, a "
                        "field this library (%zu-byte layout, version %s) "
                        "does not know: upgrade libtransferengine", fn, size,
                        i, sizeof(te_request), te_version());
            }
        memcpy(tmp, r, sizeof(te_request));
    } else {
        /* An older header: the fields it lacks are zero. */
        memset(tmp, 0, sizeof(*tmp));
        memcpy(tmp, r, size);
    }
    tmp->size = sizeof(te_request);
    *out = tmp;
    return 0;
}

TE_HOT
int te_route_check(const te_route *rt, const char *what)
{
    if (rt->reserved)
        return te_fail(-EINVAL, "%s: te_route.reserved is %u, must be zero",
                       what, rt->reserved);
    return 0;
}

int te_scatter_dst_check(const te_scatter_dst *d, uint32_t i, const char *what)
{
    if (d->reserved0 || d->reserved[0] || d->reserved[1])
        return te_fail(-EINVAL, "%s: destination %u has a non-zero reserved "
                       "field (zero-initialise te_scatter_dst)", what, i);
    return 0;
}

int te_barrier_dst_check(const te_barrier_dst *d, uint32_t i, const char *what)
{
    if (d->reserved0 || d->reserved)
        return te_fail(-EINVAL, "%s: target %u has a non-zero reserved field "
                       "(zero-initialise te_barrier_dst)", what, i);
    return 0;
}
