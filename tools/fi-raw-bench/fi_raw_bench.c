/*
 * fi-raw-bench: the raw libfabric reference for the efa plugin's numbers.
 * The same traffic the plugin produces through the engine, written straight
 * against libfabric with no engine in between: FI_EP_RDM, fi_writemsg with
 * FI_REMOTE_CQ_DATA carrying a 32-bit immediate, manual progress.
 *
 *   pingpong  A writes `size` bytes + imm to B; B, on the imm, writes the
 *             same back; one-way latency = round trip / 2 (p50, p99, avg).
 *   stream    A keeps `window` writes + imm in flight; B counts the imms and
 *             answers the last with a zero-length write; bandwidth and
 *             message rate from A's first post to that answer.
 *   immlat    te-bench's immlat loop: A writes `size` bytes + imm, waits
 *             for its own completion, sleeps --gap-us, and writes the next;
 *             B stamps each imm when its CQ hands it over. Latency = A's
 *             stamp before the post -> B's stamp (one clock: same host),
 *             the provider's floor under te-bench's "submit -> imm
 *             arrival" of the efa plugin (docs/benchmarks.md).
 *
 * B is a child process (this binary re-executed with --child FD, through
 * --remote-wrapper, e.g. "ip netns exec ns-b", for two hosts); addresses
 * and parameters travel over a socketpair.
 *
 *   fi-raw-bench --provider shm|tcp;ofi_rxm|efa [--node A] [--peer-node B]
 *                [--mode pingpong,stream,immlat] [--sizes 8,4096,65536]
 *                [--gap-us G]
 *                [--iters N] [--warmup N] [--window W] [--stream-mib M]
 *                [--region-mib R] [--ms T]
 *                [--completion default|transmit|delivery]
 *                [--inject] [--remote-wrapper CMD] [--json]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define MAX_SIZES 32
#define ACK_IMM 0xffffffffu
#define DEADLINE_NS (60ull * 1000000000ull) /* any single test */

struct opts {
    const char *provider, *node, *peer_node, *wrapper, *completion;
    int pingpong, stream, immlat, json, inject, child_fd;
    uint64_t sizes[MAX_SIZES];
    int nsizes;
    uint64_t iters, warmup, window, stream_mib, region_mib, ms;
    uint64_t spin_us, sleep_us;
    uint64_t gap_us; /* immlat: the client's sleep between writes */
};

/* The engine's idle policy (engine.idle_spin_us / idle_sleep_us): busy-poll,
 * and only after spin_us without an event sleep sleep_us. On a quiet machine
 * a stream never gets there; on an oversubscribed one two pure spinners can
 * share a core and pay a scheduler tick per round trip (measured: 7 ms),
 * which would make the reference meaningless next to the engine. */
static uint64_t idle_spin_ns, idle_sleep_ns;

struct ep {
    struct fi_info *info;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fid_mr *mr;
    void *desc;
    uint8_t *buf;
    size_t buf_len;
    uint64_t key, base;  /* ours */
    uint64_t rkey, rbase; /* the peer's */
    fi_addr_t peer;
    uint64_t wflags;
    struct fi_context2 ctx;
    uint64_t outstanding; /* local write completions due */
    uint64_t imms;        /* remote CQ data received */
    uint32_t last_imm;
};

/* Sent A -> B before each test; B answers with a status. */
struct cmd {
    uint32_t mode; /* 1 pingpong, 2 stream, 3 immlat, 0 quit */
    uint32_t pad;
    uint64_t size, count, window;
};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fi-raw-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void xwrite(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            die("control channel write: %s", strerror(errno));
        b += k;
        n -= (size_t)k;
    }
}

static void xread(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    uint64_t deadline = now_ns() + DEADLINE_NS;
    while (n) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 1000) == 0) {
            if (now_ns() > deadline)
                die("control channel: peer silent for 60 s");
            continue;
        }
        ssize_t k = read(fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            die("control channel closed (peer exited?)");
        b += k;
        n -= (size_t)k;
    }
}

/* ------------------------------------------------------------ endpoint */

#define CK(call)                                                               \
    do {                                                                       \
        int rc_ = (int)(call);                                                 \
        if (rc_)                                                               \
            die("%s: %s", #call, fi_strerror(-rc_));                           \
    } while (0)

static void ep_open(struct ep *e, const struct opts *o, const char *node)
{
    static const uint64_t base_caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE |
                                      FI_REMOTE_READ | FI_REMOTE_WRITE |
                                      FI_SEND | FI_RECV;
    int rc = -FI_ENODATA;
    /* FI_REMOTE_CQ_DATA first; shm refuses it as a capability but delivers
     * the data (cq_data_size checked below). */
    for (int pass = 0; pass < 2 && rc; pass++) {
        struct fi_info *h = fi_allocinfo();
        h->ep_attr->type = FI_EP_RDM;
        h->caps = base_caps | (pass ? 0 : FI_REMOTE_CQ_DATA);
        h->mode = FI_CONTEXT | FI_CONTEXT2;
        h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR |
                                  FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                  FI_MR_ENDPOINT;
        h->domain_attr->cq_data_size = 4;
        h->domain_attr->threading = FI_THREAD_DOMAIN;
        h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
        h->fabric_attr->prov_name = strdup(o->provider);
        rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), node,
                        NULL, node ? FI_SOURCE : 0, h, &e->info);
        fi_freeinfo(h);
    }
    if (rc)
        die("provider %s%s%s: fi_getinfo: %s", o->provider, node ? " at " : "",
            node ? node : "", fi_strerror(-rc));
    struct fi_info *i = e->info;
    if (i->domain_attr->cq_data_size < 4)
        die("provider %s: cq_data_size %zu < 4", o->provider,
            i->domain_attr->cq_data_size);
    /* Same receive queue as the plugin asks for (ofi_rxm fills a bounce
     * buffer per entry); RMA needs none. */
    if (i->rx_attr->size > 192)
        i->rx_attr->size = 192;
    CK(fi_fabric(i->fabric_attr, &e->fab, NULL));
    CK(fi_domain(e->fab, i, &e->dom, NULL));
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .count = 4};
    CK(fi_av_open(e->dom, &aa, &e->av, NULL));
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_DATA,
                            .size = 2 * i->tx_attr->size + 1024,
                            .wait_obj = FI_WAIT_NONE};
    CK(fi_cq_open(e->dom, &ca, &e->cq, NULL));
    CK(fi_endpoint(e->dom, i, &e->ep, NULL));
    CK(fi_ep_bind(e->ep, &e->av->fid, 0));
    CK(fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV));
    CK(fi_enable(e->ep));
    uint64_t region = o->region_mib << 20, max = 0;
    for (int k = 0; k < o->nsizes; k++)
        max = o->sizes[k] > max ? o->sizes[k] : max;
    e->buf_len = (region > max ? region : max) + 4096;
    if (posix_memalign((void **)&e->buf, 4096, e->buf_len))
        die("out of memory for %zu bytes", e->buf_len);
    memset(e->buf, 0x5a, e->buf_len);
    uint64_t mode = i->domain_attr->mr_mode;
    CK(fi_mr_reg(e->dom, e->buf, e->buf_len,
                 FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |
                     FI_SEND | FI_RECV,
                 0, 0x7e5700, 0, &e->mr, NULL));
    if (mode & FI_MR_ENDPOINT) {
        CK(fi_mr_bind(e->mr, &e->ep->fid, 0));
        CK(fi_mr_enable(e->mr));
    }
    e->key = fi_mr_key(e->mr);
    e->desc = fi_mr_desc(e->mr);
    e->base = (mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)e->buf : 0;
    const char *c = o->completion;
    e->wflags = !strcmp(c, "transmit") ? FI_TRANSMIT_COMPLETE
                : !strcmp(c, "delivery") ? FI_DELIVERY_COMPLETE : 0;
}

/* Release everything ep_open() created (LeakSanitizer: the shm provider's
 * objects are otherwise reported as leaked at exit). */
static void ep_close(struct ep *e)
{
    if (e->mr)
        fi_close(&e->mr->fid);
    if (e->ep)
        fi_close(&e->ep->fid);
    if (e->cq)
        fi_close(&e->cq->fid);
    if (e->av)
        fi_close(&e->av->fid);
    if (e->dom)
        fi_close(&e->dom->fid);
    if (e->fab)
        fi_close(&e->fab->fid);
    fi_freeinfo(e->info);
    free(e->buf);
    memset(e, 0, sizeof(*e));
}

/* Exchange names and keys over fd; insert the peer. */
static void ep_connect(struct ep *e, int fd)
{
    uint8_t name[256];
    size_t len = sizeof(name);
    CK(fi_getname(&e->ep->fid, name, &len));
    uint64_t mine[3] = {len, e->key, e->base}, theirs[3];
    xwrite(fd, mine, sizeof(mine));
    xwrite(fd, name, len);
    xread(fd, theirs, sizeof(theirs));
    if (theirs[0] > sizeof(name))
        die("peer name of %llu bytes", (unsigned long long)theirs[0]);
    xread(fd, name, theirs[0]);
    e->rkey = theirs[1];
    e->rbase = theirs[2];
    if (fi_av_insert(e->av, name, 1, &e->peer, 0, NULL) != 1)
        die("fi_av_insert of the peer failed");
}

static uint64_t now_ns(void);

/* Read the CQ: count local completions and remote imms; entries read. */
static int progress(struct ep *e)
{
    struct fi_cq_data_entry ce[64];
    ssize_t n = fi_cq_read(e->cq, ce, 64);
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry ee;
        memset(&ee, 0, sizeof(ee));
        fi_cq_readerr(e->cq, &ee, 0);
        char buf[256];
        die("error completion: %s (provider: %s)", fi_strerror(ee.err),
            fi_cq_strerror(e->cq, ee.prov_errno, ee.err_data, buf,
                           sizeof(buf)));
    }
    for (ssize_t k = 0; k < n; k++) {
        if (ce[k].flags & FI_REMOTE_CQ_DATA) {
            e->imms++;
            e->last_imm = (uint32_t)ce[k].data;
        } else {
            e->outstanding--;
        }
    }
    return n > 0 ? (int)n : 0;
}

/* progress() inside a wait loop, with the idle policy above. */
static void progress_wait(struct ep *e, uint64_t *idle_since)
{
    if (progress(e) || !idle_sleep_ns) {
        *idle_since = 0;
        return;
    }
    uint64_t now = now_ns();
    if (!*idle_since)
        *idle_since = now;
    else if (now - *idle_since >= idle_spin_ns) {
        struct timespec ts = {0, (long)idle_sleep_ns};
        nanosleep(&ts, NULL);
    }
}

/* One write + imm of len bytes from/to offset off; retries -FI_EAGAIN. */
static void write_imm(struct ep *e, const struct opts *o, uint64_t off,
                      uint64_t len, uint32_t imm)
{
    uint64_t deadline = now_ns() + DEADLINE_NS, idle = 0;
    for (;;) {
        ssize_t rc;
        if (o->inject && len && len <= e->info->tx_attr->inject_size) {
            rc = fi_inject_writedata(e->ep, e->buf + off, len, imm, e->peer,
                                     e->rbase + off, e->rkey);
            if (rc == 0)
                return; /* no completion for injects */
        } else {
            struct iovec iov = {.iov_base = e->buf + off, .iov_len = len};
            struct fi_rma_iov rma = {.addr = e->rbase + off, .len = len,
                                     .key = e->rkey};
            struct fi_msg_rma m = {.msg_iov = &iov, .desc = &e->desc,
                                   .iov_count = 1, .addr = e->peer,
                                   .rma_iov = &rma, .rma_iov_count = 1,
                                   .context = &e->ctx, .data = imm};
            rc = fi_writemsg(e->ep, &m,
                             FI_COMPLETION | FI_REMOTE_CQ_DATA | e->wflags);
            if (rc == 0) {
                e->outstanding++;
                return;
            }
        }
        if (rc != -FI_EAGAIN)
            die("write of %llu bytes: %s", (unsigned long long)len,
                fi_strerror((int)-rc));
        progress_wait(e, &idle);
        if (now_ns() > deadline)
            die("write stuck on -FI_EAGAIN for 60 s");
    }
}

static void wait_imms(struct ep *e, uint64_t want)
{
    uint64_t deadline = now_ns() + DEADLINE_NS, idle = 0;
    while (e->imms < want) {
        progress_wait(e, &idle);
        if (now_ns() > deadline)
            die("waited 60 s for immediates (%llu of %llu)",
                (unsigned long long)e->imms, (unsigned long long)want);
    }
}

/* Until every local write completion is in (same bound as wait_imms). */
static void wait_outstanding(struct ep *e)
{
    uint64_t deadline = now_ns() + DEADLINE_NS, idle = 0;
    while (e->outstanding) {
        progress_wait(e, &idle);
        if (now_ns() > deadline)
            die("waited 60 s for %llu write completions",
                (unsigned long long)e->outstanding);
    }
}

static uint64_t offset_of(const struct opts *o, uint64_t i, uint64_t size)
{
    uint64_t region = o->region_mib << 20;
    if (!region || size >= region)
        return 0;
    uint64_t slots = region / (size < 64 ? 64 : size);
    return (i % slots) * (size < 64 ? 64 : size);
}

/* ------------------------------------------------------------ target */

static int run_child(const struct opts *o)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct ep e;
    memset(&e, 0, sizeof(e));
    ep_open(&e, o, o->peer_node ? o->peer_node : o->node);
    ep_connect(&e, o->child_fd);
    for (;;) {
        struct cmd c;
        xread(o->child_fd, &c, sizeof(c));
        if (c.mode == 0)
            break;
        uint32_t ok = 0;
        xwrite(o->child_fd, &ok, sizeof(ok));
        uint64_t base = e.imms;
        if (c.mode == 1) {
            for (uint64_t i = 0; i < c.count; i++) {
                wait_imms(&e, base + i + 1);
                write_imm(&e, o, offset_of(o, i, c.size), c.size, (uint32_t)i);
            }
        } else if (c.mode == 3) {
            /* Stamp each arrival; the stamps go back when all are in. */
            uint64_t *arr = calloc(c.count, sizeof(*arr));
            if (!arr)
                die("out of memory");
            for (uint64_t i = 0; i < c.count; i++) {
                wait_imms(&e, base + i + 1);
                arr[i] = now_ns();
            }
            xwrite(o->child_fd, arr, c.count * sizeof(*arr));
            free(arr);
        } else {
            wait_imms(&e, base + c.count);
            write_imm(&e, o, 0, 0, ACK_IMM);
        }
        wait_outstanding(&e);
    }
    ep_close(&e);
    return 0;
}

/* ------------------------------------------------------------ initiator */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void send_cmd(int fd, uint32_t mode, uint64_t size, uint64_t count,
                     uint64_t window)
{
    struct cmd c = {.mode = mode, .size = size, .count = count,
                    .window = window};
    xwrite(fd, &c, sizeof(c));
    if (mode == 0)
        return; /* quit: no answer */
    uint32_t ok;
    xread(fd, &ok, sizeof(ok));
}

static void pingpong(struct ep *e, const struct opts *o, int fd, uint64_t size,
                     int first)
{
    uint64_t n = o->warmup + o->iters;
    uint64_t *rtt = calloc(o->iters ? o->iters : 1, sizeof(*rtt));
    /* The post call alone (fi_writemsg / fi_inject_writedata returning):
     * the provider's own share of what te-bench's post test measures. */
    uint64_t *post = calloc(o->iters ? o->iters : 1, sizeof(*post));
    if (!rtt || !post)
        die("out of memory");
    send_cmd(fd, 1, size, n, 1);
    uint64_t base = e->imms;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        write_imm(e, o, offset_of(o, i, size), size, (uint32_t)i);
        uint64_t t1 = now_ns();
        wait_imms(e, base + i + 1);
        if (i >= o->warmup) {
            rtt[i - o->warmup] = now_ns() - t0;
            post[i - o->warmup] = t1 - t0;
        }
    }
    wait_outstanding(e);
    qsort(rtt, o->iters, sizeof(*rtt), cmp_u64);
    qsort(post, o->iters, sizeof(*post), cmp_u64);
    double post50 = post[o->iters / 2] / 1e3;
    double sum = 0;
    for (uint64_t i = 0; i < o->iters; i++)
        sum += (double)rtt[i];
    double p50 = rtt[o->iters / 2] / 2e3, p99 = rtt[o->iters * 99 / 100] / 2e3;
    double avg = sum / (double)o->iters / 2e3, min = rtt[0] / 2e3;
    if (o->json)
        printf("%s    {\"mode\": \"pingpong\", \"size\": %llu, \"iters\": %llu, "
               "\"lat_us_p50\": %.3f, \"lat_us_p99\": %.3f, "
               "\"lat_us_avg\": %.3f, \"lat_us_min\": %.3f, "
               "\"post_us_p50\": %.3f}",
               first ? "" : ",\n", (unsigned long long)size,
               (unsigned long long)o->iters, p50, p99, avg, min, post50);
    else
        printf("pingpong %10llu B  one-way p50 %8.2f us  p99 %8.2f us  "
               "avg %8.2f us  post call p50 %6.2f us  (%llu iters)\n",
               (unsigned long long)size, p50, p99, avg, post50,
               (unsigned long long)o->iters);
    free(rtt);
    free(post);
}

/* te-bench's immlat loop against raw libfabric (see the top comment). */
static void immlat(struct ep *e, const struct opts *o, int fd, uint64_t size,
                   int first)
{
    uint64_t n = o->warmup + o->iters;
    uint64_t *t0 = calloc(n, sizeof(*t0)), *arr = calloc(n, sizeof(*arr));
    uint64_t *lat = calloc(o->iters, sizeof(*lat));
    uint64_t *post = calloc(o->iters, sizeof(*post));
    if (!t0 || !arr || !lat || !post)
        die("out of memory");
    send_cmd(fd, 3, size, n, 1);
    struct timespec gap = {(time_t)(o->gap_us / 1000000),
                           (long)(o->gap_us % 1000000) * 1000};
    for (uint64_t i = 0; i < n; i++) {
        t0[i] = now_ns();
        write_imm(e, o, offset_of(o, i, size), size, (uint32_t)i);
        uint64_t t1 = now_ns();
        if (i >= o->warmup)
            post[i - o->warmup] = t1 - t0[i];
        wait_outstanding(e);
        if (o->gap_us)
            nanosleep(&gap, NULL);
    }
    xread(fd, arr, n * sizeof(*arr));
    for (uint64_t i = 0; i < o->iters; i++) {
        uint64_t k = o->warmup + i;
        lat[i] = arr[k] > t0[k] ? arr[k] - t0[k] : 0;
    }
    qsort(lat, o->iters, sizeof(*lat), cmp_u64);
    qsort(post, o->iters, sizeof(*post), cmp_u64);
    double p50 = lat[o->iters / 2] / 1e3, p99 = lat[o->iters * 99 / 100] / 1e3;
    double post50 = post[o->iters / 2] / 1e3;
    if (o->json)
        printf("%s    {\"mode\": \"immlat\", \"size\": %llu, \"iters\": %llu, "
               "\"gap_us\": %llu, \"lat_us_p50\": %.3f, \"lat_us_p99\": %.3f, "
               "\"post_us_p50\": %.3f}",
               first ? "" : ",\n", (unsigned long long)size,
               (unsigned long long)o->iters, (unsigned long long)o->gap_us,
               p50, p99, post50);
    else
        printf("immlat   %10llu B  post -> imm seen p50 %6.2f us  p99 %8.2f us  "
               "post call p50 %6.2f us  (gap %llu us, %llu iters)\n",
               (unsigned long long)size, p50, p99, post50,
               (unsigned long long)o->gap_us, (unsigned long long)o->iters);
    free(t0);
    free(arr);
    free(lat);
    free(post);
}

static void stream(struct ep *e, const struct opts *o, int fd, uint64_t size,
                   int first)
{
    uint64_t count = (o->stream_mib << 20) / (size ? size : 1);
    if (count < o->iters)
        count = o->iters;
    if (count > 200000)
        count = 200000; /* bounded run time on small sizes */
    uint64_t secs_ns = 0;
    for (int pass = 0; pass < 2; pass++) { /* warmup pass, then measured */
        uint64_t n = pass ? count : (o->warmup < count ? o->warmup : count);
        if (pass && o->ms && secs_ns) {
            /* --ms: as many messages as the warmup rate fits in ms. */
            uint64_t want = o->warmup * o->ms * 1000000ull / secs_ns;
            count = n = want < o->iters ? o->iters
                        : want > 10000000 ? 10000000 : want;
        }
        if (!n)
            continue;
        send_cmd(fd, 2, size, n, o->window);
        uint64_t base = e->imms;
        uint64_t t0 = now_ns();
        for (uint64_t i = 0; i < n; i++) {
            uint64_t idle = 0;
            while (e->outstanding >= o->window)
                progress_wait(e, &idle);
            write_imm(e, o, offset_of(o, i, size), size, (uint32_t)i);
        }
        wait_imms(e, base + 1); /* B's zero-length answer to the last */
        secs_ns = now_ns() - t0;
        wait_outstanding(e);
    }
    double s = (double)secs_ns / 1e9;
    double bytes = (double)count * (double)size;
    double gbps = bytes * 8 / s / 1e9, GBps = bytes / s / 1e9;
    double mmsg = (double)count / s / 1e6;
    if (o->json)
        printf("%s    {\"mode\": \"stream\", \"size\": %llu, \"msgs\": %llu, "
               "\"window\": %llu, \"seconds\": %.6f, \"gbps\": %.3f, "
               "\"GBps\": %.3f, \"mmsg_s\": %.4f}",
               first ? "" : ",\n", (unsigned long long)size,
               (unsigned long long)count, (unsigned long long)o->window, s,
               gbps, GBps, mmsg);
    else
        printf("stream   %10llu B  %9.3f Gbit/s  %8.3f GB/s  %8.4f Mmsg/s  "
               "(%llu msgs, window %llu)\n", (unsigned long long)size, gbps,
               GBps, mmsg, (unsigned long long)count,
               (unsigned long long)o->window);
}

static pid_t spawn(const struct opts *o, char **argv, int *fd)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
        die("socketpair: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        int cfd = dup(sv[1]); /* without CLOEXEC */
        char fdstr[16], exe[4096];
        snprintf(fdstr, sizeof(fdstr), "%d", cfd);
        ssize_t el = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        exe[el > 0 ? el : 0] = 0;
        char *args[128];
        int n = 0;
        char *wrap = o->wrapper ? strdup(o->wrapper) : NULL, *save = NULL;
        for (char *t = wrap ? strtok_r(wrap, " ", &save) : NULL; t && n < 32;
             t = strtok_r(NULL, " ", &save))
            args[n++] = t;
        args[n++] = exe;
        for (int i = 1; argv[i] && n < 124; i++)
            args[n++] = argv[i];
        args[n++] = "--child";
        args[n++] = fdstr;
        args[n] = NULL;
        execvp(args[0], args);
        _exit(127);
    }
    close(sv[1]);
    *fd = sv[0];
    return pid;
}

/* ------------------------------------------------------------ options */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: fi-raw-bench [options]   (raw libfabric reference, no engine)\n"
        "  --provider NAME      libfabric provider (default shm)\n"
        "  --node ADDR          source address (FI_SOURCE), e.g. 127.0.0.1\n"
        "  --peer-node ADDR     the target's source address (default --node)\n"
        "  --mode LIST          pingpong,stream,immlat (default pingpong,stream)\n"
        "  --gap-us G           immlat: sleep between writes (20, as te-bench)\n"
        "  --sizes LIST         bytes, e.g. 8,4096,65536,1048576 (K/M suffixes)\n"
        "  --iters N            pingpong iterations; stream minimum (1000)\n"
        "  --warmup N           untimed iterations first (100)\n"
        "  --window W           stream: writes in flight (64)\n"
        "  --stream-mib M       stream: MiB per size (64; at most 200000 msgs)\n"
        "  --ms T               stream: size the run to last about T ms (from\n"
        "                       the warmup's rate) instead of --stream-mib\n"
        "  --region-mib R       cycle buffers over R MiB (64); 0 = one hot buffer\n"
        "  --completion C       default|transmit|delivery (transmit, as the plugin\n"
        "                       picks on shm and tcp;ofi_rxm)\n"
        "  --inject             fi_inject_writedata up to inject_size\n"
        "  --idle-spin-us N     busy-poll this long without an event before\n"
        "  --idle-sleep-us N    sleeping this long (50 / 20: the engine's\n"
        "                       defaults; --idle-sleep-us 0 = pure spinning)\n"
        "  --remote-wrapper CMD launch the target through CMD (split on spaces),\n"
        "                       e.g. \"ip netns exec te-ns-b\"\n"
        "  --json               one JSON object on stdout\n");
}

static uint64_t parse_size(const char *s)
{
    char *end;
    uint64_t v = strtoull(s, &end, 10);
    if (*end == 'K' || *end == 'k')
        v <<= 10;
    else if (*end == 'M' || *end == 'm')
        v <<= 20;
    return v;
}

static void parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"provider", 1, 0, 'p'}, {"node", 1, 0, 'n'}, {"peer-node", 1, 0, 'N'},
        {"mode", 1, 0, 'm'},     {"sizes", 1, 0, 's'}, {"iters", 1, 0, 'i'},
        {"warmup", 1, 0, 'w'},   {"window", 1, 0, 'W'},
        {"stream-mib", 1, 0, 'S'}, {"region-mib", 1, 0, 'R'},
        {"completion", 1, 0, 'c'}, {"inject", 0, 0, 'I'},
        {"remote-wrapper", 1, 0, 'r'}, {"json", 0, 0, 'j'},
        {"ms", 1, 0, 'T'}, {"idle-spin-us", 1, 0, 'P'},
        {"idle-sleep-us", 1, 0, 'L'}, {"gap-us", 1, 0, 'G'},
        {"child", 1, 0, 'C'},    {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    memset(o, 0, sizeof(*o));
    o->provider = "shm";
    o->completion = "transmit";
    o->pingpong = o->stream = 1;
    o->iters = 1000;
    o->warmup = 100;
    o->window = 64;
    o->stream_mib = 64;
    o->region_mib = 64;
    o->child_fd = -1;
    o->spin_us = 50;
    o->sleep_us = 20;
    o->gap_us = 20;
    static const uint64_t def[] = {8, 64, 512, 4096, 65536, 1 << 20, 8 << 20};
    for (size_t k = 0; k < sizeof(def) / sizeof(def[0]); k++)
        o->sizes[o->nsizes++] = def[k];
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'p': o->provider = optarg; break;
        case 'n': o->node = optarg; break;
        case 'N': o->peer_node = optarg; break;
        case 'm':
            o->pingpong = strstr(optarg, "pingpong") != NULL;
            o->stream = strstr(optarg, "stream") != NULL;
            o->immlat = strstr(optarg, "immlat") != NULL;
            break;
        case 's': {
            o->nsizes = 0;
            char *copy = strdup(optarg), *save = NULL;
            for (char *t = strtok_r(copy, ",", &save); t && o->nsizes < MAX_SIZES;
                 t = strtok_r(NULL, ",", &save))
                o->sizes[o->nsizes++] = parse_size(t);
            free(copy);
            break;
        }
        case 'i': o->iters = strtoull(optarg, NULL, 10); break;
        case 'w': o->warmup = strtoull(optarg, NULL, 10); break;
        case 'W': o->window = strtoull(optarg, NULL, 10); break;
        case 'S': o->stream_mib = strtoull(optarg, NULL, 10); break;
        case 'R': o->region_mib = strtoull(optarg, NULL, 10); break;
        case 'c': o->completion = optarg; break;
        case 'I': o->inject = 1; break;
        case 'r': o->wrapper = optarg; break;
        case 'j': o->json = 1; break;
        case 'C': o->child_fd = atoi(optarg); break;
        case 'T': o->ms = strtoull(optarg, NULL, 10); break;
        case 'P': o->spin_us = strtoull(optarg, NULL, 10); break;
        case 'L': o->sleep_us = strtoull(optarg, NULL, 10); break;
        case 'G': o->gap_us = strtoull(optarg, NULL, 10); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (!o->iters || !o->window || !o->nsizes || o->gap_us > 1000000 ||
        (!o->pingpong && !o->stream && !o->immlat)) {
        usage(stderr);
        exit(2);
    }
    idle_spin_ns = o->spin_us * 1000u;
    idle_sleep_ns = o->sleep_us * 1000u;
    if (strcmp(o->completion, "default") && strcmp(o->completion, "transmit") &&
        strcmp(o->completion, "delivery"))
        die("--completion: default, transmit or delivery");
}

int main(int argc, char **argv)
{
    struct opts o;
    parse(argc, argv, &o);
    if (o.child_fd >= 0)
        return run_child(&o);
    int fd;
    pid_t pid = spawn(&o, argv, &fd);
    struct ep e;
    memset(&e, 0, sizeof(e));
    ep_open(&e, &o, o.node);
    ep_connect(&e, fd);
    struct fi_info *i = e.info;
    if (o.json)
        printf("{\"tool\": \"fi-raw-bench\", \"provider\": \"%s\", "
               "\"fabric\": \"%s\", \"domain\": \"%s\", \"api\": \"%u.%u\", "
               "\"completion\": \"%s\", \"inject\": %s, \"window\": %llu, "
               "\"region_mib\": %llu,\n  \"results\": [\n",
               i->fabric_attr->prov_name, i->fabric_attr->name,
               i->domain_attr->name, FI_MAJOR(fi_version()),
               FI_MINOR(fi_version()), o.completion,
               o.inject ? "true" : "false", (unsigned long long)o.window,
               (unsigned long long)o.region_mib);
    else
        printf("fi-raw-bench: provider %s, domain %s, libfabric %u.%u, "
               "completion %s%s\n", i->fabric_attr->prov_name,
               i->domain_attr->name, FI_MAJOR(fi_version()),
               FI_MINOR(fi_version()), o.completion,
               o.inject ? ", inject" : "");
    int first = 1;
    for (int k = 0; k < o.nsizes; k++) {
        if (o.pingpong) {
            pingpong(&e, &o, fd, o.sizes[k], first);
            first = 0;
        }
        if (o.stream) {
            stream(&e, &o, fd, o.sizes[k], first);
            first = 0;
        }
        if (o.immlat) {
            immlat(&e, &o, fd, o.sizes[k], first);
            first = 0;
        }
        fflush(stdout);
    }
    if (o.json)
        printf("\n  ]\n}\n");
    send_cmd(fd, 0, 0, 0, 0);
    int status = 0;
    waitpid(pid, &status, 0);
    ep_close(&e);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
