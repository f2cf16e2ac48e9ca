/*
 * Channel memory layout (header + two rings) and the growable FIFO used for
 * the slow paths (overflow completions, receive buffers, pending sends).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lb_internal.h"

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

int lb_fifo_init(struct lb_fifo *f, uint32_t esize, uint32_t cap)
{
    uint32_t c = 16;
    while (c < cap)
        c <<= 1;
    f->buf = calloc(c, esize);
    if (!f->buf)
        return -ENOMEM;
    f->esize = esize;
    f->cap = c;
    f->head = 0;
    f->count = 0;
    return 0;
}

void lb_fifo_free(struct lb_fifo *f)
{
    free(f->buf);
    f->buf = NULL;
    f->count = 0;
}

int lb_fifo_push(struct lb_fifo *f, const void *e)
{
    if (f->count == f->cap) {
        /* Unwrap into a buffer twice as large; rare by construction. */
        unsigned char *nb = malloc((size_t)f->cap * 2 * f->esize);
        if (!nb)
            return -ENOMEM;
        uint32_t first = f->cap - f->head;
        memcpy(nb, f->buf + (size_t)f->head * f->esize, (size_t)first * f->esize);
        memcpy(nb + (size_t)first * f->esize, f->buf, (size_t)f->head * f->esize);
        free(f->buf);
        f->buf = nb;
        f->head = 0;
        f->cap *= 2;
    }
    memcpy(lb_fifo_at(f, f->count), e, f->esize);
    f->count++;
    return 0;
}
