/*
 * Quirk probing (see efa_probe.h). Two endpoints of this process, A and B,
 * each with its own fabric/domain like two NICs, write to each other over
 * the provider under test. Every wait is bounded: events a working provider
 * delivers at once get a long bound, events that a broken provider never
 * delivers (and that may wedge the endpoint) a short one; a wedged pair is
 * thrown away and the next measurement gets a fresh one.
 *
 * Measured on libfabric 1.17 (docs/efa.md has the table): shm completes
 * nothing, and wedges the endpoint, for zero-length or forged-key writes
 * with FI_DELIVERY_COMPLETE; shm never reports a forged key to the
 * initiator; tcp;ofi_rxm reports it only with FI_TRANSMIT_COMPLETE or
 * FI_DELIVERY_COMPLETE.
 */
#define _GNU_SOURCE
#include "efa_probe.h"
#include "efa_shm_name.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#ifdef TE_EFA_HAVE_EMULATED_WRITE_OPT
#include <rdma/fi_ext.h>
#endif

#define PROBE_BUF (64u * 1024u)
#define PROBE_IMM 0x5ea1c0deu

struct probe_ep {
    struct fi_info *info;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fid_mr *mr;
    uint8_t *buf;
    void *desc;
    uint64_t key, base;
    uint8_t name[256];
    size_t nlen;
};

struct pair {
    struct probe_ep a, b;
    fi_addr_t b_at_a, a_at_b;
    int source;
    int open;
    struct fi_context2 ctx[8];
};

/* What one wait observed. */
struct seen {
    int done;        /* A's completion of the op arrived */
    int status;      /* its status: 0 or -FI_ error */
    int data;        /* B reported remote CQ data equal to `want` */
    int other_data;  /* B reported some other remote CQ data */
    int recvs;       /* B's receives completed (messages arrived) */
    fi_addr_t src;   /* source B saw with the data */
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void note(struct efa_probe_result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void note(struct efa_probe_result *r, const char *fmt, ...)
{
    size_t used = strlen(r->notes);
    if (used + 3 >= sizeof(r->notes))
        return;
    if (used) {
        strcat(r->notes, "; ");
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->notes + used, sizeof(r->notes) - used, fmt, ap);
    va_end(ap);
}

uint64_t efa_completion_flag(int completion)
{
    switch (completion) {
    case EFA_COMPL_TRANSMIT: return FI_TRANSMIT_COMPLETE;
    case EFA_COMPL_DELIVERY: return FI_DELIVERY_COMPLETE;
    default: return 0;
    }
}

const char *efa_completion_name(int completion)
{
    switch (completion) {
    case EFA_COMPL_TRANSMIT: return "transmit";
    case EFA_COMPL_DELIVERY: return "delivery";
    case EFA_COMPL_DEFAULT: return "default";
    default: return "auto";
    }
}

/* ------------------------------------------------------------ endpoints */

static void ep_close(struct probe_ep *e)
{
    if (e->ep)
        fi_close(&e->ep->fid);
    if (e->mr)
        fi_close(&e->mr->fid);
    if (e->av)
        fi_close(&e->av->fid);
    if (e->cq)
        fi_close(&e->cq->fid);
    if (e->dom)
        fi_close(&e->dom->fid);
    if (e->fab)
        fi_close(&e->fab->fid);
    if (e->info)
        fi_freeinfo(e->info);
    free(e->buf);
    memset(e, 0, sizeof(*e));
}

static int ep_open(struct probe_ep *e, const struct fi_info *info,
                   uint64_t key, char *err, size_t errlen)
{
    const char *what = "fi_dupinfo";
    int rc = -FI_ENOMEM;
    memset(e, 0, sizeof(*e));
    e->info = fi_dupinfo(info);
    if (!e->info)
        goto fail;
    struct fi_info *i = e->info;
    /* A handful of operations is all we post: small queues keep the pair
     * cheap (ofi_rxm fills a 16 KiB bounce buffer per rx queue entry). */
    if (i->tx_attr->size > 64)
        i->tx_attr->size = 64;
    if (i->rx_attr->size > 64)
        i->rx_attr->size = 64;
    what = "fi_fabric";
    if ((rc = fi_fabric(i->fabric_attr, &e->fab, NULL)))
        goto fail;
    what = "fi_domain";
    if ((rc = fi_domain(e->fab, i, &e->dom, NULL)))
        goto fail;
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .count = 4};
    what = "fi_av_open";
    if ((rc = fi_av_open(e->dom, &aa, &e->av, NULL)))
        goto fail;
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_DATA, .size = 256,
                            .wait_obj = FI_WAIT_NONE};
    what = "fi_cq_open";
    if ((rc = fi_cq_open(e->dom, &ca, &e->cq, NULL)))
        goto fail;
    what = "fi_endpoint";
    if ((rc = fi_endpoint(e->dom, i, &e->ep, NULL)))
        goto fail;
    what = "fi_setname";
    if ((rc = efa_shm_name_endpoint(e->ep, i)))
        goto fail;
    what = "fi_ep_bind";
    if ((rc = fi_ep_bind(e->ep, &e->av->fid, 0)) ||
        (rc = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV)))
        goto fail;
    what = "fi_enable";
    if ((rc = fi_enable(e->ep)))
        goto fail;
    e->nlen = sizeof(e->name);
    what = "fi_getname";
    if ((rc = fi_getname(&e->ep->fid, e->name, &e->nlen)))
        goto fail;
    rc = -FI_ENOMEM;
    what = "buffer";
    if (posix_memalign((void **)&e->buf, 4096, PROBE_BUF))
        goto fail;
    memset(e->buf, 0, PROBE_BUF);
    uint64_t mode = i->domain_attr->mr_mode;
    what = "fi_mr_reg";
    if ((rc = fi_mr_reg(e->dom, e->buf, PROBE_BUF,
                        FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
                            FI_SEND | FI_RECV,
                        0, key, 0, &e->mr, NULL)))
        goto fail;
    if (mode & FI_MR_ENDPOINT) {
        what = "fi_mr_bind";
        if ((rc = fi_mr_bind(e->mr, &e->ep->fid, 0)))
            goto fail;
    }
    if (mode & (FI_MR_ENDPOINT | FI_MR_RMA_EVENT)) {
        what = "fi_mr_enable";
        if ((rc = fi_mr_enable(e->mr)))
            goto fail;
    }
    e->key = fi_mr_key(e->mr);
    e->desc = fi_mr_desc(e->mr);
    e->base = (mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)e->buf : 0;
    return 0;
fail:
    snprintf(err, errlen, "probe endpoint: %s: %s", what, fi_strerror(-rc));
    ep_close(e);
    return rc ? rc : -FI_EOTHER;
}

static void pair_close(struct pair *p)
{
    if (!p->open)
        return;
    ep_close(&p->a);
    ep_close(&p->b);
    p->open = 0;
}

static int pair_open(struct pair *p, const struct fi_info *info, char *err,
                     size_t errlen)
{
    memset(p, 0, sizeof(*p));
    int rc = ep_open(&p->a, info, 0x7e5701, err, errlen);
    if (rc)
        return rc;
    if ((rc = ep_open(&p->b, info, 0x7e5702, err, errlen))) {
        ep_close(&p->a);
        return rc;
    }
    p->open = 1;
    p->source = (info->caps & FI_SOURCE) != 0;
    if (fi_av_insert(p->a.av, p->b.name, 1, &p->b_at_a, 0, NULL) != 1 ||
        fi_av_insert(p->b.av, p->a.name, 1, &p->a_at_b, 0, NULL) != 1) {
        snprintf(err, errlen, "probe endpoint: fi_av_insert failed");
        pair_close(p);
        return -FI_EINVAL;
    }
    return 0;
}

/* ------------------------------------------------------------ progress */

/* Read one entry of ep's CQ into *s (matching ctx on A, data on B). */
static void drain(struct pair *p, struct probe_ep *e, void *ctx,
                  uint64_t want, struct seen *s)
{
    struct fi_cq_data_entry ce[8];
    fi_addr_t src[8];
    for (int round = 0; round < 4; round++) {
        ssize_t n = p->source ? fi_cq_readfrom(e->cq, ce, 8, src)
                              : fi_cq_read(e->cq, ce, 8);
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry ee;
            memset(&ee, 0, sizeof(ee));
            if (fi_cq_readerr(e->cq, &ee, 0) == 1 && ctx &&
                ee.op_context == ctx) {
                s->done = 1;
                s->status = -(ee.err ? ee.err : FI_EOTHER);
            }
            continue;
        }
        if (n <= 0)
            return;
        for (ssize_t i = 0; i < n; i++) {
            /* Remote entries first: shm fills their op_context with junk. */
            if (ce[i].flags & FI_REMOTE_CQ_DATA) {
                if ((uint32_t)ce[i].data == (uint32_t)want) {
                    s->data = 1;
                    s->src = p->source ? src[i] : FI_ADDR_NOTAVAIL;
                } else {
                    s->other_data++;
                }
            } else if (ctx && ce[i].op_context == ctx) {
                s->done = 1;
                s->status = 0;
            } else if (ce[i].flags & FI_RECV) {
                s->recvs++;
            }
        }
    }
}

/* Progress both sides until A completed ctx (if ctx) and B saw `want` (if
 * want_data), or timeout_ms passed. Returns 1 when everything arrived. */
static int wait_for(struct pair *p, void *ctx, int want_data, uint64_t want,
                    uint32_t timeout_ms, struct seen *s)
{
    uint64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        drain(p, &p->a, ctx, want, s);
        drain(p, &p->b, NULL, want, s);
        if ((!ctx || s->done) && (!want_data || s->data))
            return 1;
        if (now_ms() > deadline)
            return 0;
    }
}

/* Post with retries on -FI_EAGAIN (progressing both sides meanwhile). */
#define POST_RETRY(p, timeout_ms, call)                                        \
    ({                                                                         \
        ssize_t rc_;                                                           \
        uint64_t dl_ = now_ms() + (timeout_ms);                                \
        struct seen junk_ = {0};                                               \
        while ((rc_ = (call)) == -FI_EAGAIN && now_ms() <= dl_) {              \
            drain((p), &(p)->a, NULL, 0, &junk_);                              \
            drain((p), &(p)->b, NULL, 0, &junk_);                              \
        }                                                                      \
        rc_;                                                                   \
    })

/* One write of len bytes from A+loff to B+roff with key, CQ data `data`
 * (if with_data) and completion flags. */
static ssize_t post_write(struct pair *p, void *ctx, uint64_t loff,
                          uint64_t len, uint64_t roff, uint64_t key,
                          int with_data, uint64_t data, uint64_t flags,
                          uint32_t timeout_ms)
{
    struct iovec iov = {.iov_base = p->a.buf + loff, .iov_len = len};
    void *desc = p->a.desc;
    struct fi_rma_iov rma = {.addr = p->b.base + roff, .len = len, .key = key};
    struct fi_msg_rma m = {.msg_iov = &iov, .desc = &desc, .iov_count = 1,
                           .addr = p->b_at_a, .rma_iov = &rma,
                           .rma_iov_count = 1, .context = ctx, .data = data};
    uint64_t f = flags | FI_COMPLETION | (with_data ? FI_REMOTE_CQ_DATA : 0);
    return POST_RETRY(p, timeout_ms, fi_writemsg(p->a.ep, &m, f));
}

/* ------------------------------------------------------------ measurements */

static void probe_imm_write(struct pair *p, struct efa_probe_result *r,
                            uint32_t long_ms)
{
    for (int i = 0; i < 8; i++)
        p->a.buf[i] = (uint8_t)(0xa0 + i);
    struct seen s = {0};
    ssize_t rc = post_write(p, &p->ctx[0], 0, 8, 64, p->b.key, 1, PROBE_IMM,
                            0, long_ms);
    int ok = rc == 0 && wait_for(p, &p->ctx[0], 1, PROBE_IMM, long_ms, &s) &&
             s.status == 0 && memcmp(p->b.buf + 64, p->a.buf, 8) == 0;
    r->imm_write = ok;
    if (!ok)
        note(r, "write with remote CQ data not delivered (post %zd, "
             "completion %d/%d, data %d)", rc, s.done, s.status, s.data);
    r->source = !p->source ? -1 : (s.data && s.src == p->a_at_b);
    if (p->source && s.data && s.src != p->a_at_b)
        note(r, "remote CQ entries do not name the sender although "
             "FI_SOURCE was granted");
}

/* Zero-length write with CQ data at a completion level; 0 if it did not
 * complete (the pair may be wedged then). */
static int probe_zero(struct pair *p, struct efa_probe_result *r, int level,
                      uint32_t ms, int *delivered)
{
    struct seen s = {0};
    uint64_t data = PROBE_IMM + 0x10 + (uint64_t)level;
    ssize_t rc = post_write(p, &p->ctx[1], 0, 0, 128, p->b.key, 1, data,
                            efa_completion_flag(level), ms);
    int ok = rc == 0 && wait_for(p, &p->ctx[1], 1, data, ms, &s) &&
             s.status == 0;
    *delivered = s.data;
    r->zero[level] = ok;
    return ok;
}

/* Forged-key write at a level: 1 = error completion, 0 = success or
 * nothing. Sets *landed when the forged bytes or data reached B. */
static int probe_forged(struct pair *p, struct efa_probe_result *r, int level,
                        uint32_t ms, int *completed, int *landed)
{
    struct seen s = {0};
    uint64_t data = PROBE_IMM + 0x20 + (uint64_t)level;
    memset(p->a.buf + 256, 0x5a, 8);
    memset(p->b.buf + 256, 0, 8);
    ssize_t rc = post_write(p, &p->ctx[2], 256, 8, 256,
                            p->b.key ^ 0x5bd1e995u, 1, data,
                            efa_completion_flag(level), ms);
    if (rc) {
        /* Refused at post: that is a reported error too. */
        *completed = 1;
        *landed = 0;
        return r->key_error[level] = 1;
    }
    wait_for(p, &p->ctx[2], 0, data, ms, &s);
    *completed = s.done;
    *landed = s.data || p->b.buf[256] == 0x5a;
    return r->key_error[level] = s.done && s.status != 0;
}

static void probe_read(struct pair *p, struct efa_probe_result *r,
                       uint32_t long_ms)
{
    for (int i = 0; i < 8; i++)
        p->b.buf[512 + i] = (uint8_t)(0x30 + i);
    memset(p->a.buf + 512, 0, 8);
    struct iovec iov = {.iov_base = p->a.buf + 512, .iov_len = 8};
    void *desc = p->a.desc;
    struct fi_rma_iov rma = {.addr = p->b.base + 512, .len = 8,
                             .key = p->b.key};
    struct fi_msg_rma m = {.msg_iov = &iov, .desc = &desc, .iov_count = 1,
                           .addr = p->b_at_a, .rma_iov = &rma,
                           .rma_iov_count = 1, .context = &p->ctx[3]};
    struct seen s = {0};
    ssize_t rc = POST_RETRY(p, long_ms,
                            fi_readmsg(p->a.ep, &m, FI_COMPLETION));
    int ok = rc == 0 && wait_for(p, &p->ctx[3], 0, 0, long_ms, &s) &&
             s.status == 0 && memcmp(p->a.buf + 512, p->b.buf + 512, 8) == 0;
    r->read = ok;
    if (!ok)
        note(r, "fi_read failed (post %zd, completion %d/%d)", rc, s.done,
             s.status);
}

/* Progress both sides until `posted` arrivals (B's remote CQ data other
 * than an awaited one, or B's receives when `recvs`), or long_ms passed:
 * how many arrived. */
static int arrivals(struct pair *p, int posted, int recvs, uint32_t long_ms)
{
    int arrived = 0;
    uint64_t deadline = now_ms() + long_ms;
    while (arrived < posted && now_ms() <= deadline) {
        struct seen s = {0};
        drain(p, &p->a, NULL, 0, &s);
        drain(p, &p->b, NULL, 0, &s);
        arrived += recvs ? s.recvs : s.other_data;
    }
    return arrived;
}

static int bytes_wrong(const uint8_t *got, const uint8_t *want, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += got[i] != want[i];
    return bad;
}

/* fi_inject_writedata: the source is clobbered right after each call,
 * which inject semantics allow; the target must still see the old bytes. */
static void probe_inject(struct pair *p, const struct fi_info *info,
                         struct efa_probe_result *r, uint32_t long_ms)
{
    enum { N = 32, SZ = 8 };
    if (info->tx_attr->inject_size < SZ) {
        r->inject_data = -1;
        return;
    }
    uint8_t want[N * SZ];
    for (int i = 0; i < N * SZ; i++)
        want[i] = (uint8_t)(i * 13 + 7);
    memset(p->b.buf + 1024, 0, N * SZ);
    int posted = 0, arrived = 0;
    for (int i = 0; i < N; i++) {
        uint8_t *src = p->a.buf + 1024 + i * SZ;
        memcpy(src, want + i * SZ, SZ);
        ssize_t rc = POST_RETRY(p, long_ms, fi_inject_writedata(
            p->a.ep, src, SZ, PROBE_IMM + 0x100 + (uint64_t)i, p->b_at_a,
            p->b.base + 1024 + (uint64_t)i * SZ, p->b.key));
        memset(src, 0xee, SZ);
        if (rc)
            break;
        posted++;
    }
    arrived = arrivals(p, posted, 0, long_ms);
    int good = posted == N && arrived == N &&
               memcmp(p->b.buf + 1024, want, N * SZ) == 0;
    r->inject_data = good;
    if (good) {
        /* The imm-only write (len 0) as an inject: no completion entry to
         * produce and read. Used only when its immediate arrives. */
        ssize_t rc = POST_RETRY(p, long_ms, fi_inject_writedata(
            p->a.ep, p->a.buf + 1024, 0, PROBE_IMM + 0x180, p->b_at_a,
            p->b.base + 128, p->b.key));
        int got = 0;
        uint64_t deadline = now_ms() + long_ms;
        while (rc == 0 && !got && now_ms() <= deadline) {
            struct seen s = {0};
            drain(p, &p->a, NULL, PROBE_IMM + 0x180, &s);
            drain(p, &p->b, NULL, PROBE_IMM + 0x180, &s);
            got = s.data;
        }
        r->inject_zero = got;
        if (!got)
            note(r, "zero-length fi_inject_writedata: %s",
                 rc ? fi_strerror((int)-rc) : "immediate never arrived");
    }
    if (!good)
        note(r, "fi_inject_writedata: %d of %d posted, %d arrived, %d of %d "
             "bytes wrong", posted, N, arrived,
             bytes_wrong(p->b.buf + 1024, want, N * SZ), N * SZ);
}

/* fi_inject of small messages (what SENDs up to inject_size use): B posts
 * N receives, A injects N messages clobbering each source right after the
 * call; every message must arrive with the old bytes. */
static void probe_inject_send(struct pair *p, const struct fi_info *info,
                              struct efa_probe_result *r, uint32_t long_ms)
{
    enum { N = 16, SZ = 8, AT = 2048 };
    if (info->tx_attr->inject_size < SZ || !(info->caps & FI_MSG)) {
        r->inject_send = -1;
        return;
    }
    uint8_t want[N * SZ];
    for (int i = 0; i < N * SZ; i++)
        want[i] = (uint8_t)(i * 29 + 3);
    memset(p->b.buf + AT, 0, N * SZ);
    int posted = 0, recvs = 0, arrived = 0;
    for (int i = 0; i < N; i++) {
        ssize_t rc = POST_RETRY(p, long_ms, fi_recv(
            p->b.ep, p->b.buf + AT + i * SZ, SZ, p->b.desc, FI_ADDR_UNSPEC,
            &p->ctx[i % 8]));
        if (rc)
            break;
        recvs++;
    }
    for (int i = 0; i < recvs; i++) {
        uint8_t *src = p->a.buf + AT + i * SZ;
        memcpy(src, want + i * SZ, SZ);
        ssize_t rc = POST_RETRY(p, long_ms, fi_inject(p->a.ep, src, SZ,
                                                      p->b_at_a));
        memset(src, 0xee, SZ);
        if (rc)
            break;
        posted++;
    }
    arrived = arrivals(p, posted, 1, long_ms);
    /* One receive per message, in order on one pair of endpoints. */
    int good = posted == N && arrived == N &&
               memcmp(p->b.buf + AT, want, N * SZ) == 0;
    r->inject_send = good;
    if (!good)
        note(r, "fi_inject (messages): %d of %d receives posted, %d of %d "
             "sent, %d arrived, %d of %d bytes wrong", recvs, N, posted, N,
             arrived, bytes_wrong(p->b.buf + AT, want, N * SZ), N * SZ);
}

static void probe_emulated(struct pair *p, const struct fi_info *info,
                           struct efa_probe_result *r)
{
    r->emulated_write = -1;
#ifdef TE_EFA_HAVE_EMULATED_WRITE_OPT
    if (info->fabric_attr->prov_name &&
        strncmp(info->fabric_attr->prov_name, "efa", 3) == 0) {
        bool emulated = true;
        size_t len = sizeof(emulated);
        if (fi_getopt(&p->a.ep->fid, FI_OPT_ENDPOINT,
                      FI_OPT_EFA_EMULATED_WRITE, &emulated, &len) == 0)
            r->emulated_write = emulated ? 1 : 0;
    }
#else
    (void)p;
    (void)info;
#endif
}

/* ------------------------------------------------------------ entry */

static void choose(struct efa_probe_result *r)
{
    /* A level that completes imm-only writes and reports key errors; the
     * cheapest such one first (transmit: no extra round trip on most
     * providers that honour it). */
    static const int pref[] = {EFA_COMPL_TRANSMIT, EFA_COMPL_DELIVERY,
                               EFA_COMPL_DEFAULT};
    static const int fallback[] = {EFA_COMPL_TRANSMIT, EFA_COMPL_DEFAULT,
                                   EFA_COMPL_DELIVERY};
    for (int i = 0; i < 3; i++)
        if (r->zero[pref[i]] == 1 && r->key_error[pref[i]] == 1) {
            r->completion = pref[i];
            r->key_errors_reported = 1;
            return;
        }
    for (int i = 0; i < 3; i++)
        if (r->zero[fallback[i]] == 1) {
            r->completion = fallback[i];
            r->key_errors_reported = 0;
            return;
        }
    r->completion = EFA_COMPL_DEFAULT;
    r->key_errors_reported = 0;
}

/* Measure zero-length completion and forged-key reporting at one level,
 * on a pair that may wedge (it is closed then). */
static int probe_level(struct pair *p, const struct fi_info *info,
                       struct efa_probe_result *r, int level, uint32_t ms,
                       char *err, size_t errlen)
{
    const char *name = efa_completion_name(level);
    if (!p->open && pair_open(p, info, err, errlen))
        return -1;
    int delivered = 0, completed = 0, landed = 0;
    if (!probe_zero(p, r, level, ms, &delivered)) {
        note(r, "zero-length write with %s completion: %s", name,
             delivered ? "data delivered but the initiator never completes "
                         "(endpoint wedged)"
                       : "not completed");
        pair_close(p);
        return 0;
    }
    if (!probe_forged(p, r, level, ms, &completed, &landed)) {
        note(r, "forged key with %s completion: %s", name,
             completed ? "reported as success" : "never completed");
        if (!completed)
            pair_close(p); /* may be wedged */
    }
    if (landed)
        note(r, "forged key with %s completion: bytes or data LANDED", name);
    return 0;
}

int efa_probe_run(const struct fi_info *info, uint32_t timeout_ms,
                  int completion, struct efa_probe_result *r, char *err,
                  size_t errlen)
{
    memset(r, 0, sizeof(*r));
    r->imm_write = r->imm_zero = r->read = r->inject_data = r->source = -1;
    r->inject_zero = r->inject_send = -1;
    for (int i = 0; i < 4; i++)
        r->zero[i] = r->key_error[i] = -1;
    r->emulated_write = -1;
    if (!timeout_ms)
        timeout_ms = 1;
    /* Events that must arrive get a generous bound: a loaded machine must
     * not make a working provider look broken. */
    uint32_t long_ms = timeout_ms * 8 < 2000 ? 2000 : timeout_ms * 8;

    struct pair p;
    int rc = pair_open(&p, info, err, errlen);
    if (rc)
        return rc < 0 ? -EIO : rc;
    probe_emulated(&p, info, r);
    probe_imm_write(&p, r, long_ms);
    if (r->imm_write != 1) {
        pair_close(&p);
        r->completion = EFA_COMPL_DEFAULT;
        return 0;
    }
    int delivered = 0;
    r->imm_zero = probe_zero(&p, r, EFA_COMPL_DEFAULT, long_ms, &delivered);
    if (!r->imm_zero) {
        note(r, "zero-length write with remote CQ data %s",
             delivered ? "delivered but never completed" : "not delivered");
        pair_close(&p);
    }
    if (!p.open && pair_open(&p, info, err, errlen))
        return -EIO;
    probe_read(&p, r, long_ms);
    probe_inject(&p, info, r, long_ms);
    if (r->inject_data && p.open)
        probe_inject_send(&p, info, r, long_ms);
    if (!r->inject_data || r->inject_send == 0 || !p.open) {
        pair_close(&p);
    }

    if (completion != EFA_COMPL_AUTO) {
        /* Forced: measure that level only. */
        if (probe_level(&p, info, r, completion, timeout_ms, err, errlen) < 0)
            return -EIO;
        r->completion = completion;
        r->key_errors_reported = r->key_error[completion] == 1;
        pair_close(&p);
        return 0;
    }
    static const int order[] = {EFA_COMPL_TRANSMIT, EFA_COMPL_DEFAULT,
                                EFA_COMPL_DELIVERY};
    for (int i = 0; i < 3; i++) {
        if (probe_level(&p, info, r, order[i], timeout_ms, err, errlen) < 0)
            return -EIO;
        if (r->zero[order[i]] == 1 && r->key_error[order[i]] == 1)
            break; /* good enough: no need to try the riskier levels */
    }
    pair_close(&p);
    choose(r);
    return 0;
}
