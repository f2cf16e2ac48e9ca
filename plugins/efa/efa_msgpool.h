/*
 * A pool of the plugin's own control messages on one tag (the
 * authentication's, efa_auth.h; the goodbyes, efa_bye.h): one registered
 * buffer of fixed-size slots, the first `nrecv` tagged receives kept
 * posted, the others sends handed out from a free list. Their completions
 * come through poll() with the slot's context (efa_msgpool_index tells a
 * pool's own apart). Callers hold nic->lock.
 */
#ifndef EFA_MSGPOOL_H
#define EFA_MSGPOOL_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

struct te_plugin_nic;

/* A slot's provider context. */
struct efa_msg_op {
    struct fi_context2 fctx;
    uint32_t next_free;
};

struct efa_msgpool {
    uint8_t *buf;             /* nops slots of msg_len bytes, registered */
    struct fid_mr *mr;
    void *desc;
    struct efa_msg_op *ops;   /* nops */
    uint64_t tag;
    size_t msg_len;
    uint32_t nrecv, nops;     /* receives first (nrecv <= 32), then sends */
    uint32_t send_free;       /* free send slot, or nops */
    uint32_t recv_due;        /* receives to post again (bit i) */
};

/* Allocate, register and post the receives; `what` names the messages in
 * errors ("authentication", "goodbyes"). 0 or a negative errno (the NIC's
 * error set). Takes nic->lock. */
int efa_msgpool_open(struct te_plugin_nic *nic, struct efa_msgpool *p,
                     uint64_t tag, size_t msg_len, uint32_t nrecv,
                     uint32_t nsend, const char *what);
/* Release what open made (after the endpoint is closed); safe on a pool
 * never opened (zeroed). */
void efa_msgpool_close(struct efa_msgpool *p);

/* The slot whose context op_context is, or -1 when it is none of p's. */
int efa_msgpool_index(const struct efa_msgpool *p, const void *op_context);

static inline uint8_t *efa_msgpool_buf(const struct efa_msgpool *p,
                                       uint32_t i)
{
    return p->buf + (size_t)i * p->msg_len;
}

/* Receive slot i completed (its message read): post it again, or mark it
 * due for efa_msgpool_repost. */
void efa_msgpool_recv_done(struct te_plugin_nic *nic, struct efa_msgpool *p,
                           uint32_t i);
/* Post the receives marked due (from poll()). */
void efa_msgpool_repost(struct te_plugin_nic *nic, struct efa_msgpool *p);

/* Send slot i (the free list's head, p->send_free < p->nops), its message
 * already in efa_msgpool_buf(p, i), to addr with a completion: 0 (the slot
 * leaves the free list until efa_msgpool_send_done), or the provider's
 * negative error (-FI_EAGAIN: try again later; the slot stays free). */
ssize_t efa_msgpool_send(struct te_plugin_nic *nic, struct efa_msgpool *p,
                         uint32_t i, fi_addr_t addr);
/* Send slot i completed: back to the free list. */
void efa_msgpool_send_done(struct efa_msgpool *p, uint32_t i);

#endif
