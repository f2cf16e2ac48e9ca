/*
 * Wait objects (plugin ABI 1.3): one completion channel per NIC, shared by
 * its three CQs (RC sends, SRQ receives, handshake UD). The channel's fd,
 * non-blocking, is the NIC's wait_fd.
 *
 * wait_arm follows the verbs rule for not missing an event: acknowledge
 * the events read so far, request notification on every CQ
 * (ibv_req_notify_cq), then poll each CQ once more. A completion that
 * arrived before the request is found by that poll, one after it raises an
 * event. What that poll finds cannot be handed back from wait_arm, so it is
 * stashed per CQ and mx_cq_poll() returns it before polling the CQ again.
 *
 * A NIC with connections being set up keeps its worker polling (their
 * retransmit timers are time-based), as does one with replacements pending.
 * The poll() in which a connection becomes established reports progress
 * (mx_conn_act), so the worker posts what post() held back for it before
 * it arms again: that transition raises no CQ event of its own.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "mx_internal.h"

int mx_wait_open(mx_nic *nic)
{
    nic->chan = ibv_create_comp_channel(nic->vctx);
    if (!nic->chan) {
        int e = errno ? errno : ENOMEM;
        mx_err(nic, "ibv_create_comp_channel failed: %s (errno %d)",
               strerror(e), e);
        return -e;
    }
    int fl = fcntl(nic->chan->fd, F_GETFL);
    if (fl < 0 || fcntl(nic->chan->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int e = errno;
        mx_err(nic, "completion channel: cannot make it non-blocking: %s",
               strerror(e));
        return -e;
    }
    return 0;
}

void mx_wait_close(mx_nic *nic)
{
    /* After the CQs: each event read was acknowledged at once. */
    if (nic->chan)
        ibv_destroy_comp_channel(nic->chan);
    nic->chan = NULL;
}

static struct mx_stash *stash_of(mx_nic *nic, struct ibv_cq *cq)
{
    return cq == nic->scq ? &nic->stash[0]
                          : cq == nic->rcq ? &nic->stash[1] : &nic->stash[2];
}

int mx_cq_poll(mx_nic *nic, struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    struct mx_stash *s = stash_of(nic, cq);
    int got = 0;
    while (got < n && s->head < s->count)
        wc[got++] = s->wc[s->head++];
    if (s->head == s->count)
        s->head = s->count = 0;
    if (got == n)
        return got;
    int more = ibv_poll_cq(cq, n - got, wc + got);
    if (more < 0)
        return got ? got : more;
    return got + more;
}

int mx_wait_fd(te_plugin_nic *nic)
{
    return nic->chan ? nic->chan->fd : -EOPNOTSUPP;
}

int mx_wait_arm(te_plugin_nic *nic)
{
    if (!nic->chan)
        return -EOPNOTSUPP;
    if (nic->cq.count || nic->connecting || nic->broken)
        return -EAGAIN;
    struct ibv_cq *cqs[3] = {nic->scq, nic->rcq, nic->ucq};
    /* Read (and acknowledge) the events so far: the fd stops being
     * readable. */
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    while (ibv_get_cq_event(nic->chan, &ev_cq, &ev_ctx) == 0)
        ibv_ack_cq_events(ev_cq, 1);
    int work = 0;
    for (int i = 0; i < 3; i++) {
        struct mx_stash *s = &nic->stash[i];
        if (s->count > s->head) {
            work = 1;
            continue;
        }
        int rc = ibv_req_notify_cq(cqs[i], 0);
        if (rc) {
            /* The core then stops blocking on this NIC's group (and says
             * so once) and sleep-polls: never sleep through events. */
            mx_err(nic, "ibv_req_notify_cq failed: %s", strerror(rc));
            return -rc;
        }
        int got = ibv_poll_cq(cqs[i], MX_STASH, s->wc);
        if (got > 0) {
            s->head = 0;
            s->count = got;
            work = 1;
        }
    }
    return work ? -EAGAIN : 0;
}
