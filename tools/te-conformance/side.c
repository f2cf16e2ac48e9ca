/* Serving side of a remote engine (see side.h) and its child-process
 * command loop. */
#define _GNU_SOURCE
#include "side.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "wire_cmd.h"

static void on_msg(int group, te_peer from, const void *data, size_t len,
                   void *arg)
{
    struct side *s = arg;
    struct side_msg *m = malloc(sizeof(*m) + len);
    if (!m)
        return;
    m->next = NULL;
    m->len = len;
    m->from_known = from != TE_PEER_UNKNOWN;
    memcpy(m->data, data, len);
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = m;
    else
        s->head = m;
    s->tail = m;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

int side_open(struct side *s, const te_config *cfg)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    int rc = conf_engine_create(cfg, &s->e);
    if (rc)
        return rc;
    if ((rc = conf_mem_alloc(&s->mem, CONF_REGION, conf_mem_dst_cuda)))
        return rc;
    s->buf = s->mem.host;
    rc = te_mr_reg(s->e, 0, conf_mem_region(&s->mem), CONF_REGION,
                   TE_MR_REMOTE_WRITE | TE_MR_REMOTE_READ,
                   conf_mem_kind(&s->mem), &s->mr);
    if (rc)
        return rc;
    rc = te_mr_describe(s->mr, &s->desc);
    if (rc)
        return rc;
    return te_set_recv_handler(s->e, 0, on_msg, s);
}

void side_close(struct side *s)
{
    if (s->e) {
        if (s->mr)
            te_mr_dereg(s->e, s->mr);
        conf_engine_destroy(s->e);
    }
    conf_mem_free(&s->mem);
    while (s->head) {
        struct side_msg *m = s->head;
        s->head = m->next;
        free(m);
    }
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    memset(s, 0, sizeof(*s));
}

int side_recv_wait(struct side *s, void *buf, size_t cap, size_t *len,
                   int *from_known, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* s->cond's clock */
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&s->lock);
    while (!s->head) {
        if (pthread_cond_timedwait(&s->cond, &s->lock, &ts) == ETIMEDOUT) {
            pthread_mutex_unlock(&s->lock);
            return -ETIMEDOUT;
        }
    }
    struct side_msg *m = s->head;
    s->head = m->next;
    if (!s->head)
        s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    int rc = 0;
    if (m->len > cap)
        rc = -EMSGSIZE;
    else
        memcpy(buf, m->data, m->len);
    *len = m->len;
    *from_known = m->from_known;
    free(m);
    return rc;
}

int side_space(struct side *s, uint32_t cmd, uint32_t slot, uint64_t a,
               uint64_t *v)
{
    static const char *const names[SIDE_SPACES] = {"conf-A", "conf-B"};
    *v = 0;
    if (slot >= SIDE_SPACES)
        return -EINVAL;
    int rc = 0;
    uint32_t raw = 0;
    te_imm_space_stats st;
    switch (cmd) {
    case CMD_SPACE_CREATE:
        if (s->space[slot] || a == 0 || a > UINT32_MAX)
            return -EINVAL;
        rc = te_imm_space_create(s->e, names[slot], (uint32_t)a, 0, 0, 0,
                                 &s->space[slot]);
        break;
    case CMD_SPACE_RETIRE:
        rc = s->space[slot] ? te_imm_space_retire(s->space[slot]) : -EINVAL;
        break;
    case CMD_SPACE_STALE:
        if (!s->space[slot])
            return -EINVAL;
        rc = te_imm_space_stats_get(s->space[slot], &st);
        *v = st.stale_arrivals;
        return rc;
    default:
        return -EINVAL;
    }
    if (!rc)
        rc = te_imm_space_value(s->space[slot], 0, &raw);
    *v = raw;
    return rc;
}

int side_serve(const te_config *cfg, int fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 1;
    struct side s;
    int rc = side_open(&s, cfg);
    struct cmd_hello h;
    memset(&h, 0, sizeof(h));
    h.rc = rc;
    if (rc) {
        snprintf(h.error, sizeof(h.error), "%s", te_last_error());
    } else {
        h.addr_len = sizeof(h.addr);
        rc = te_engine_address(s.e, 0, h.addr, &h.addr_len);
        h.rc = rc;
        h.desc_len = sizeof(h.desc);
        if (!rc)
            h.rc = te_desc_serialize(&s.desc, h.desc, &h.desc_len);
    }
    if (cmd_write(fd, &h, sizeof(h)) || h.rc) {
        side_close(&s);
        return 1;
    }
    /* The parent's address, so messages from it name a known peer. */
    struct cmd_addr pa;
    if (cmd_read(fd, &pa, sizeof(pa), CONF_TIMEOUT_MS)) {
        side_close(&s);
        return 1;
    }
    te_peer back;
    struct cmd_peer_reply pr;
    memset(&pr, 0, sizeof(pr));
    pr.rc = te_peer_add(s.e, 0, pa.addr, pa.len, &back);
    if (pr.rc)
        snprintf(pr.error, sizeof(pr.error), "%s", te_last_error());
    cmd_write(fd, &pr, sizeof(pr));

    uint8_t *scratch = malloc(CONF_REGION);
    int status = 0;
    for (;;) {
        struct cmd_req q;
        /* No timeout: the parent's death closes fd (and PDEATHSIG). */
        if (cmd_read(fd, &q, sizeof(q), -1))
            break;
        struct cmd_reply rep = {0};
        const void *payload = NULL;
        switch (q.cmd) {
        case CMD_FILL:
            if (q.a > CONF_REGION || q.b > CONF_REGION - q.a) {
                rep.rc = -ERANGE;
                break;
            }
            conf_fill(s.buf, q.a, q.b, q.imm);
            rep.rc = conf_mem_push(&s.mem, q.a, q.b);
            break;
        case CMD_FETCH:
            if (q.a > CONF_REGION || q.b > CONF_REGION - q.a) {
                rep.rc = -ERANGE;
                break;
            }
            rep.rc = conf_mem_pull(&s.mem, q.a, q.b);
            rep.len = rep.rc ? 0 : q.b;
            payload = s.buf + q.a;
            break;
        case CMD_IMM_WAIT:
            rep.rc = te_imm_wait(s.e, q.imm, q.a, (int)q.b);
            break;
        case CMD_IMM_BANKED:
            rep.rc = te_imm_poll(s.e, q.imm, &rep.v, NULL);
            break;
        case CMD_IMM_REMOVE:
            rep.rc = te_imm_remove(s.e, q.imm, &rep.v);
            break;
        case CMD_RECV_WAIT: {
            size_t len = 0;
            int known = 0;
            rep.rc = side_recv_wait(&s, scratch, CONF_REGION, &len, &known,
                                    (int)q.b);
            rep.len = rep.rc ? 0 : len;
            rep.v = (uint64_t)known;
            payload = scratch;
            break;
        }
        case CMD_SPACE_CREATE:
        case CMD_SPACE_RETIRE:
        case CMD_SPACE_STALE:
            rep.rc = side_space(&s, q.cmd, q.imm, q.a, &rep.v);
            break;
        case CMD_QUIT:
            goto out;
        default:
            rep.rc = -EINVAL;
        }
        if (cmd_write(fd, &rep, sizeof(rep)) ||
            (rep.len && cmd_write(fd, payload, rep.len))) {
            status = 1;
            break;
        }
    }
out:
    free(scratch);
    side_close(&s);
    return status;
}
