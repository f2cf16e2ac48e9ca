/*
 * "hostile": a small in-process transport that breaks the plugin contract
 * on purpose, for tests/unit/test_hostile_plugin.c (the core's guard,
 * docs/plugin-guide.md "What the core checks").
 *
 * Without a misbehaviour it is a real transport: two NICs (h0, h1) per
 * engine, writes/reads copied with memcpy into regions it registered
 * (keys and bounds checked), immediates and messages delivered to the
 * target NIC's completion queue, in this process only. Key [hostile] mode
 * picks one way to misbehave, on NIC [hostile] bad_nic only (default 0),
 * so that the test can check that the other NIC keeps working:
 *   none         behave
 *   dup_local    report every LOCAL completion twice
 *   unknown_ctx  report LOCAL completions with a context never posted
 *   poll_over    poll() returns max + 1 once an op was posted
 *   poll_neg     poll() returns -5000 once an op was posted
 *   post_over    post() returns n + 1
 *   bad_kind     LOCAL completions carry kind 9
 *   pos_status   LOCAL completions carry status +5
 *   recv_len     a write also completes a posted RECV with len > its buffer
 *   post_refuse  post() refuses a write, read or send outright: -EINVAL and
 *                a set_error text (allowed: a refusal, not a breach)
 *   post_quiet   the same without a text
 *   recv_lerr    a write also ends a posted RECV with a LOCAL -ECANCELED
 *                (allowed by plugin.h: not a breach; the core must take it
 *                as the failed receive, not as a write's completion)
 *   refuse_peer  peer_add() refuses with -EHOSTUNREACH and a set_error text
 *   refuse_late  peer_add() succeeds; the next poll() refuses the peer
 *                (set_error text, PEER_DOWN) and fails what was posted
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "te/plugin.h"

#define HP_NICS 2
#define HP_CQ 8192   /* entries a NIC's queue holds */
#define HP_RECVS 1024
#define HP_MRS 64
#define HP_MAGIC 0x484f5354u /* "HOST" */

enum hp_mode {
    HP_NONE, HP_DUP_LOCAL, HP_UNKNOWN_CTX, HP_POLL_OVER, HP_POLL_NEG,
    HP_POST_OVER, HP_BAD_KIND, HP_POS_STATUS, HP_RECV_LEN, HP_REFUSE_PEER,
    HP_REFUSE_LATE, HP_RECV_LERR, HP_POST_REFUSE, HP_POST_QUIET
};
static const char *const hp_modes[] = {
    "none", "dup_local", "unknown_ctx", "poll_over", "poll_neg", "post_over",
    "bad_kind", "pos_status", "recv_len", "refuse_peer", "refuse_late",
    "recv_lerr", "post_refuse", "post_quiet", NULL};

struct te_plugin_mr {
    uint8_t *addr;
    size_t len;
    int used;
};

struct hp_recv {
    uint64_t context;
    uint8_t *buf;
    uint64_t len;
};

struct te_plugin_nic {
    te_plugin_ctx *ctx;
    int idx;
    int bad; /* this NIC misbehaves */
    pthread_mutex_t lock; /* cq, recvs, mrs: other NICs deliver into them */
    struct te_plugin_cq_entry cq[HP_CQ];
    size_t cq_head, cq_len;
    struct hp_recv recvs[HP_RECVS];
    size_t nrecv;
    struct te_plugin_mr mrs[HP_MRS];
    int posted;          /* an op was posted (poll_over, poll_neg) */
    te_plugin_peer late; /* refuse_late: the peer to refuse at next poll */
};

struct te_plugin_ctx {
    const struct te_plugin_host *host;
    enum hp_mode mode;
    int bad_nic;
};

/* What a peer_add() address holds: this process's NIC object. */
struct hp_addr {
    uint32_t magic;
    uint32_t pid;
    uint64_t nic;
};

static void hp_error(te_plugin_nic *n, const char *fmt, const char *arg)
{
    const struct te_plugin_host *h = n->ctx->host;
    h->set_error(h->host_ctx, fmt, n->idx, arg);
}

static int hp_init(const struct te_plugin_host *host, te_plugin_ctx **out)
{
    te_plugin_ctx *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->host = host;
    const char *m = host->config_get(host->host_ctx, "mode");
    for (int i = 0; m && hp_modes[i]; i++)
        if (!strcmp(m, hp_modes[i]))
            c->mode = (enum hp_mode)i;
    if (m && strcmp(m, hp_modes[c->mode])) {
        host->set_error(host->host_ctx, "hostile: unknown mode \"%s\"", m);
        free(c);
        return -EINVAL;
    }
    const char *b = host->config_get(host->host_ctx, "bad_nic");
    c->bad_nic = b ? atoi(b) : 0;
    *out = c;
    return 0;
}

static void hp_fini(te_plugin_ctx *c) { free(c); }
static int hp_device_count(te_plugin_ctx *c) { return HP_NICS; }

static int hp_query_device(te_plugin_ctx *c, int idx,
                           struct te_plugin_device_info *info)
{
    snprintf(info->name, sizeof(info->name), "h%d", idx);
    info->pci_path[0] = 0;
    info->numa_node = -1;
    info->link_gbps = 100;
    info->queue_depth = 1024;
    info->max_msg_size = 1ull << 30;
    return 0;
}

static int hp_nic_open(te_plugin_ctx *c, int idx,
                       const struct te_plugin_nic_attr *attr,
                       te_plugin_nic **out)
{
    te_plugin_nic *n = calloc(1, sizeof(*n));
    if (!n)
        return -ENOMEM;
    n->ctx = c;
    n->idx = idx;
    n->bad = idx == c->bad_nic && c->mode != HP_NONE;
    pthread_mutex_init(&n->lock, NULL);
    *out = n;
    return 0;
}

static void hp_nic_close(te_plugin_nic *n)
{
    pthread_mutex_destroy(&n->lock);
    free(n);
}

static int hp_nic_address(te_plugin_nic *n, void *buf, size_t *len)
{
    struct hp_addr a = {HP_MAGIC, (uint32_t)getpid(), (uint64_t)(uintptr_t)n};
    if (*len < sizeof(a))
        return -ENOSPC;
    memcpy(buf, &a, sizeof(a));
    *len = sizeof(a);
    return 0;
}

static int hp_mr_reg(te_plugin_nic *n, void *addr, size_t len,
                     uint32_t access, uint32_t mem_type, int device_id,
                     te_plugin_mr **mr, struct te_plugin_mr_info *info)
{
    pthread_mutex_lock(&n->lock);
    for (int i = 0; i < HP_MRS; i++) {
        if (n->mrs[i].used)
            continue;
        n->mrs[i] = (struct te_plugin_mr){addr, len, 1};
        pthread_mutex_unlock(&n->lock);
        *mr = &n->mrs[i];
        info->rkey = (uint64_t)i + 1;
        info->remote_base = (uint64_t)(uintptr_t)addr;
        return 0;
    }
    pthread_mutex_unlock(&n->lock);
    hp_error(n, "hostile h%d: no free registration slot%s", "");
    return -ENOSPC;
}

static int hp_mr_dereg(te_plugin_nic *n, te_plugin_mr *mr)
{
    pthread_mutex_lock(&n->lock);
    mr->used = 0;
    pthread_mutex_unlock(&n->lock);
    return 0;
}

static int hp_peer_add(te_plugin_nic *n, const void *addr, size_t len,
                       te_plugin_peer *out)
{
    struct hp_addr a;
    if (len != sizeof(a))
        return -EINVAL;
    memcpy(&a, addr, sizeof(a));
    if (a.magic != HP_MAGIC || a.pid != (uint32_t)getpid()) {
        hp_error(n, "hostile h%d: %s", "not an address of this process");
        return -EHOSTUNREACH;
    }
    if (n->bad && n->ctx->mode == HP_REFUSE_PEER) {
        hp_error(n, "hostile h%d: peer refused: %s",
                 "credentials rejected by the fabric manager");
        return -EHOSTUNREACH;
    }
    *out = a.nic;
    if (n->bad && n->ctx->mode == HP_REFUSE_LATE)
        n->late = a.nic;
    return 0;
}

static int hp_peer_remove(te_plugin_nic *n, te_plugin_peer p) { return 0; }

/* Append to n's queue (the caller holds n->lock). */
static void cq_put(te_plugin_nic *n, const struct te_plugin_cq_entry *e)
{
    if (n->cq_len < HP_CQ)
        n->cq[(n->cq_head + n->cq_len++) % HP_CQ] = *e;
}

/* A registration of t covering [a, a+len) under rkey, or NULL. */
static te_plugin_mr *find_mr(te_plugin_nic *t, uint64_t rkey, uint64_t a,
                             uint64_t len)
{
    if (!rkey || rkey > HP_MRS)
        return NULL;
    te_plugin_mr *m = &t->mrs[rkey - 1];
    uint64_t base = (uint64_t)(uintptr_t)m->addr;
    if (!m->used || a < base || len > m->len || a - base > m->len - len)
        return NULL;
    return m;
}

/* Carry out one op; returns its LOCAL status. */
static int execute(te_plugin_nic *n, const struct te_plugin_op *op)
{
    te_plugin_nic *t = (te_plugin_nic *)(uintptr_t)op->peer;
    if (op->kind == TE_POP_SEND) {
        pthread_mutex_lock(&t->lock);
        int rc = -ENOBUFS;
        if (t->nrecv) {
            struct hp_recv r = t->recvs[0];
            memmove(t->recvs, t->recvs + 1, --t->nrecv * sizeof(r));
            rc = r.len < op->len ? -EMSGSIZE : 0;
            if (!rc)
                memcpy(r.buf, op->local_addr, op->len);
            struct te_plugin_cq_entry e = {.kind = TE_PCQ_RECV, .status = rc,
                                           .context = r.context,
                                           .len = op->len,
                                           .peer = (uint64_t)(uintptr_t)n};
            cq_put(t, &e);
            rc = 0;
        }
        pthread_mutex_unlock(&t->lock);
        return rc;
    }
    pthread_mutex_lock(&t->lock);
    int rc = 0;
    if (op->len && !find_mr(t, op->rkey, op->remote_addr, op->len))
        rc = -EACCES;
    else if (op->kind == TE_POP_WRITE)
        memcpy((void *)(uintptr_t)op->remote_addr, op->local_addr, op->len);
    else
        memcpy(op->local_addr, (void *)(uintptr_t)op->remote_addr, op->len);
    if (!rc && op->kind == TE_POP_WRITE && (op->flags & TE_POP_F_IMM)) {
        struct te_plugin_cq_entry e = {.kind = TE_PCQ_IMM, .imm = op->imm,
                                       .peer = (uint64_t)(uintptr_t)n};
        cq_put(t, &e);
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

/* The LOCAL completion of op, misreported as the mode says. */
static void complete(te_plugin_nic *n, const struct te_plugin_op *op, int st)
{
    struct te_plugin_cq_entry e = {.kind = TE_PCQ_LOCAL, .status = st,
                                   .context = op->context};
    enum hp_mode m = n->bad ? n->ctx->mode : HP_NONE;
    if (m == HP_UNKNOWN_CTX)
        e.context ^= 0xdead0000dead0000ull;
    if (m == HP_BAD_KIND)
        e.kind = 9;
    if (m == HP_POS_STATUS)
        e.status = 5;
    pthread_mutex_lock(&n->lock);
    cq_put(n, &e);
    if (m == HP_DUP_LOCAL)
        cq_put(n, &e);
    if ((m == HP_RECV_LEN || m == HP_RECV_LERR) && n->nrecv) {
        struct hp_recv r = n->recvs[--n->nrecv];
        struct te_plugin_cq_entry re = {.kind = TE_PCQ_RECV,
                                        .context = r.context,
                                        .len = r.len + 1};
        if (m == HP_RECV_LERR)
            re = (struct te_plugin_cq_entry){.kind = TE_PCQ_LOCAL,
                                             .status = -ECANCELED,
                                             .context = r.context};
        cq_put(n, &re);
    }
    pthread_mutex_unlock(&n->lock);
}

static int hp_post(te_plugin_nic *n, const struct te_plugin_op *ops, size_t cnt)
{
    for (size_t i = 0; i < cnt; i++) {
        const struct te_plugin_op *op = &ops[i];
        if (op->kind == TE_POP_RECV) {
            pthread_mutex_lock(&n->lock);
            int full = n->nrecv == HP_RECVS;
            if (!full)
                n->recvs[n->nrecv++] = (struct hp_recv){
                    op->context, op->local_addr, op->len};
            pthread_mutex_unlock(&n->lock);
            if (full)
                return (int)i;
            continue;
        }
        if (op->kind < TE_POP_WRITE || op->kind > TE_POP_SEND) {
            if (i)
                return (int)i;
            hp_error(n, "hostile h%d: %s", "unknown op kind");
            return -EINVAL;
        }
        enum hp_mode m = n->bad ? n->ctx->mode : HP_NONE;
        if (m == HP_POST_REFUSE || m == HP_POST_QUIET) {
            if (i)
                return (int)i; /* the refused op comes first next time */
            if (m == HP_POST_REFUSE)
                hp_error(n, "hostile h%d: %s", "no route for this key");
            return -EINVAL;
        }
        n->posted = 1;
        complete(n, op, n->late ? -ECONNREFUSED : execute(n, op));
    }
    if (n->bad && n->ctx->mode == HP_POST_OVER)
        return (int)cnt + 1;
    return (int)cnt;
}

static int hp_poll(te_plugin_nic *n, struct te_plugin_cq_entry *out, int max)
{
    enum hp_mode m = n->bad ? n->ctx->mode : HP_NONE;
    if (n->posted && m == HP_POLL_OVER)
        return max + 1;
    if (n->posted && m == HP_POLL_NEG)
        return -5000;
    int got = 0;
    if (n->late) {
        /* The handshake's answer came: the peer is refused, with a reason. */
        hp_error(n, "hostile h%d: peer refused after the handshake: %s",
                 "credentials rejected by the fabric manager");
        out[got++] = (struct te_plugin_cq_entry){
            .kind = TE_PCQ_PEER_DOWN, .status = -ECONNREFUSED,
            .peer = n->late};
        n->late = 0;
    }
    pthread_mutex_lock(&n->lock);
    while (got < max && n->cq_len) {
        out[got++] = n->cq[n->cq_head];
        n->cq_head = (n->cq_head + 1) % HP_CQ;
        n->cq_len--;
    }
    pthread_mutex_unlock(&n->lock);
    return got;
}

static const struct te_plugin_config_key hp_keys[] = {
    {"mode", "none", "how to break the contract (tests/hostile/)"},
    {"bad_nic", "0", "the NIC that misbehaves"},
    {NULL, NULL, NULL}};

static const struct te_plugin_ops hp_ops = {
    .abi_major = TE_PLUGIN_ABI_MAJOR,
    .abi_minor = 0,
    .struct_size = TE_PLUGIN_OPS_MIN_SIZE_1_0,
    .name = "hostile",
    .version = "1.0",
    .description = "test transport that breaks the plugin contract on purpose",
    .config_keys = hp_keys,
    .init = hp_init,
    .fini = hp_fini,
    .device_count = hp_device_count,
    .query_device = hp_query_device,
    .nic_open = hp_nic_open,
    .nic_close = hp_nic_close,
    .nic_address = hp_nic_address,
    .mr_reg = hp_mr_reg,
    .mr_dereg = hp_mr_dereg,
    .peer_add = hp_peer_add,
    .peer_remove = hp_peer_remove,
    .post = hp_post,
    .poll = hp_poll,
};

TE_PLUGIN_EXPORT const struct te_plugin_ops *
te_plugin_entry(uint32_t core_major, uint32_t core_minor, char *err,
                size_t errlen)
{
    if (core_major != TE_PLUGIN_ABI_MAJOR) {
        snprintf(err, errlen, "hostile speaks ABI %d.x", TE_PLUGIN_ABI_MAJOR);
        return NULL;
    }
    return &hp_ops;
}
