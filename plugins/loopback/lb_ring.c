/* Channel memory layout: a header, then two rings. */
#include <errno.h>
#include <string.h>

#include "lb_internal.h"

uint32_t lb_ring_cap(uint32_t qd)
{
    uint32_t cap = 1;
    while (cap < qd)
        cap <<= 1;
    return cap;
}

size_t lb_shm_size(uint32_t cap)
{
    return sizeof(struct lb_shm) + 2 * (size_t)cap * LB_RING_ENTRY;
}

void lb_shm_init(struct lb_shm *shm, uint32_t cap, size_t size)
{
    memset(shm, 0, sizeof(*shm));
    shm->magic = LB_SHM_MAGIC;
    shm->version = LB_SHM_VERSION;
    shm->cap = cap;
    shm->size = size;
    shm->bell_tgt = shm->bell_init = -1; /* in-process channels set them */
}

int lb_shm_check(const struct lb_shm *shm, size_t size, uint32_t *cap_out)
{
    if (size < sizeof(*shm))
        return -EPROTO;
    /* One read: the value checked is the value used. */
    uint32_t cap = *(const volatile uint32_t *)&shm->cap;
    if (shm->magic != LB_SHM_MAGIC || shm->version != LB_SHM_VERSION ||
        cap == 0 || cap > LB_MAX_QUEUE_DEPTH || (cap & (cap - 1)) ||
        lb_shm_size(cap) > size)
        return -EPROTO;
    *cap_out = cap;
    return 0;
}

void lb_shm_req_ring(struct lb_shm *shm, uint32_t cap, struct lb_ring *r,
                     int producer)
{
    lb_ring_view(r, &shm->req, (unsigned char *)(shm + 1), cap, producer);
}

void lb_shm_resp_ring(struct lb_shm *shm, uint32_t cap, struct lb_ring *r,
                      int producer)
{
    lb_ring_view(r, &shm->resp,
                 (unsigned char *)(shm + 1) + (size_t)cap * LB_RING_ENTRY, cap,
                 producer);
}
