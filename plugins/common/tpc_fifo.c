/* The plugins' growable FIFO (tpc_fifo.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tpc_fifo.h"

int tpc_fifo_init(struct tpc_fifo *f, uint32_t esize, uint32_t cap)
{
    uint32_t c = 16;
    while (c < cap)
        c <<= 1;
    memset(f, 0, sizeof(*f));
    f->buf = calloc(c, esize);
    if (!f->buf)
        return -ENOMEM;
    f->esize = esize;
    f->cap = c;
    return 0;
}

void tpc_fifo_free(struct tpc_fifo *f)
{
    free(f->buf);
    f->buf = NULL;
    f->head = f->count = 0;
}

int tpc_fifo_push(struct tpc_fifo *f, const void *e)
{
    if (f->count == f->cap) {
        /* Unwrap into a buffer twice as large. */
        unsigned char *nb = malloc((size_t)f->cap * 2 * f->esize);
        if (!nb)
            return -ENOMEM;
        size_t head = (size_t)f->head * f->esize;
        size_t first = (size_t)(f->cap - f->head) * f->esize;
        memcpy(nb, f->buf + head, first);
        memcpy(nb + first, f->buf, head);
        free(f->buf);
        f->buf = nb;
        f->head = 0;
        f->cap *= 2;
    }
    memcpy(tpc_fifo_at(f, f->count), e, f->esize);
    f->count++;
    return 0;
}
