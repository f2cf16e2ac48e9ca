/*
 * The plugin's control-message pools (efa_msgpool.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_tagged.h>

#include "efa_internal.h"

static int post_recv(efa_nic *nic, struct efa_msgpool *p, uint32_t i)
{
    struct iovec iov = {.iov_base = efa_msgpool_buf(p, i),
                        .iov_len = p->msg_len};
    void *desc = p->desc;
    struct fi_msg_tagged m = {.msg_iov = &iov, .desc = &desc, .iov_count = 1,
                              .addr = FI_ADDR_UNSPEC, .tag = p->tag,
                              .ignore = 0, .context = &p->ops[i].fctx};
    return (int)fi_trecvmsg(nic->ep, &m, 0);
}

int efa_msgpool_open(efa_nic *nic, struct efa_msgpool *p, uint64_t tag,
                     size_t msg_len, uint32_t nrecv, uint32_t nsend,
                     const char *what)
{
    memset(p, 0, sizeof(*p));
    p->tag = tag;
    p->msg_len = msg_len;
    p->nrecv = nrecv < 32 ? nrecv : 32; /* recv_due's bits */
    p->nops = p->nrecv + nsend;
    p->ops = calloc(p->nops, sizeof(*p->ops));
    if (!p->ops || posix_memalign((void **)&p->buf, 64, p->nops * msg_len)) {
        efa_err(nic, "out of memory for %s messages", what);
        return -ENOMEM;
    }
    memset(p->buf, 0, p->nops * msg_len);
    for (uint32_t i = p->nrecv; i < p->nops; i++)
        p->ops[i].next_free = i + 1;
    p->send_free = p->nrecv;
    uint64_t key;
    pthread_mutex_lock(&nic->lock);
    int rc = efa_mr_register_locked(nic, p->buf, p->nops * msg_len,
                                    FI_SEND | FI_RECV, TE_PMEM_HOST, 0,
                                    &p->mr, &key);
    if (!rc) {
        p->desc = fi_mr_desc(p->mr);
        for (uint32_t i = 0; i < p->nrecv && !rc; i++)
            rc = post_recv(nic, p, i);
        if (rc) {
            efa_err(nic, "fi_trecvmsg (%s): %s", what, fi_strerror(-rc));
            rc = efa_errno(rc);
        }
    }
    pthread_mutex_unlock(&nic->lock);
    return rc;
}

void efa_msgpool_close(struct efa_msgpool *p)
{
    if (p->mr)
        fi_close(&p->mr->fid);
    free(p->buf);
    free(p->ops);
    memset(p, 0, sizeof(*p));
}

int efa_msgpool_index(const struct efa_msgpool *p, const void *op_context)
{
    uintptr_t c = (uintptr_t)op_context, b = (uintptr_t)p->ops;
    if (!p->ops || c < b || c >= b + p->nops * sizeof(*p->ops) ||
        (c - b) % sizeof(*p->ops))
        return -1;
    return (int)((c - b) / sizeof(*p->ops));
}

void efa_msgpool_recv_done(efa_nic *nic, struct efa_msgpool *p, uint32_t i)
{
    if (post_recv(nic, p, i))
        p->recv_due |= 1u << i;
}

void efa_msgpool_repost(efa_nic *nic, struct efa_msgpool *p)
{
    for (uint32_t i = 0; p->recv_due && i < p->nrecv; i++)
        if ((p->recv_due & (1u << i)) && post_recv(nic, p, i) == 0)
            p->recv_due &= ~(1u << i);
}

ssize_t efa_msgpool_send(efa_nic *nic, struct efa_msgpool *p, uint32_t i,
                         fi_addr_t addr)
{
    struct iovec iov = {.iov_base = efa_msgpool_buf(p, i),
                        .iov_len = p->msg_len};
    void *desc = p->desc;
    struct fi_msg_tagged tm = {.msg_iov = &iov, .desc = &desc, .iov_count = 1,
                               .addr = addr, .tag = p->tag,
                               .context = &p->ops[i].fctx};
    ssize_t s = fi_tsendmsg(nic->ep, &tm, FI_COMPLETION);
    efa_bell_ring_addr(nic, addr);
    if (s == 0)
        p->send_free = p->ops[i].next_free;
    return s;
}

void efa_msgpool_send_done(struct efa_msgpool *p, uint32_t i)
{
    p->ops[i].next_free = p->send_free;
    p->send_free = i;
}
