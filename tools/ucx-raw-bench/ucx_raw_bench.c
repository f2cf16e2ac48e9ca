/*
 * ucx-raw-bench: the raw UCX (UCP API) reference for te-bench. The same
 * transfers te-bench's tests make through the engine, written straight
 * against UCP with no engine in between, in two processes on one host
 * (a forked child is the target; worker addresses and rkeys travel over a
 * socketpair). One invocation = one repetition, so that te-bench can run it
 * as a reference before each of its own repetitions (`--reference ucx`).
 *
 *   write   bandwidth: `window` requests in flight, request w on slot w of
 *           the footprint (bytes [w*size, (w+1)*size) on both sides), a
 *           slot resubmitted as soon as its request completes. A request =
 *           ucp_put_nbx(size) [+ ucp_worker_fence + one 4-byte active
 *           message carrying the immediate: the WriteImm equivalent, unless
 *           --no-imm] + ucp_ep_flush_nbx, whose completion is the request's
 *           completion (data placed remotely: what a te-bench completion
 *           means). Ramp-up (the first `window` completions) not counted,
 *           then completed bytes are counted until --ms has passed and
 *           --min-iters requests were seen; drain not counted. GB/s =
 *           counted bytes / (last counted completion - start of counting).
 *   paged   the same with size/chunk puts of --chunk bytes per request (one
 *           fence, then one immediate AM per page).
 *   read    the same with ucp_get_nbx (no immediate).
 *   immlat  zero-length WriteImm + ImmCounter callback: an 8-byte active
 *           message (the 4-byte immediate and a sequence number) whose
 *           handler on the target is the callback; with --size > 0, a put of
 *           --size bytes, ucp_worker_fence, then the AM. One at a time: send,
 *           flush (remote completion, as te-bench waits for the write's
 *           completion), 20 us gap, next. Measured: submit -> AM handler
 *           (both stamps CLOCK_MONOTONIC on one host), as te-bench's
 *           "submit -> ImmCounter callback (end to end)".
 *   send    two-sided: rate (--window ucp_tag_send_nbx in flight, the
 *           target counts receives, rate on its clock) and ping-pong
 *           (ucp_tag_send_nbx / ucp_tag_recv_nbx of --size bytes; half the
 *           round trip).
 *
 * Buffers: allocated by ucp_mem_map (--alloc ucx, default; on shm a put is
 * then one copy into the peer's shared mapping), or application memory
 * registered with ucp_mem_map as te-bench's (--alloc user; on shm UCX 1.13
 * then emulates puts with active messages).
 *
 * Both sides busy-poll ucp_worker_progress() (UCX's own mode, as
 * ucx_perftest). Transport: --tls shm (UCX_TLS=posix,sysv,cma,self) or tcp
 * (UCX_TLS=tcp, UCX_NET_DEVICES=lo); UCX_TLS / UCX_NET_DEVICES in the
 * environment win. Every wait is bounded (--timeout) and checks that the
 * peer process is alive: a dead peer is an error, never a hang.
 *
 * Output: one line per result. Bandwidth tests end with
 * "<test> <size> B window W: X GB/s ..." (te-bench reads the last
 * "<number> GB/s"); latency tests end with a line that starts with the p50
 * in microseconds (te-bench reads the last line starting with a number).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <sched.h>
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

#include <ucp/api/ucp.h>

#define AM_IMM 17
#define IMM_GAP_US 20
#define MAX_WINDOW 4096
#define SEND_TAG 0x5e4d000000000000ull

enum { T_WRITE, T_PAGED, T_READ, T_IMMLAT, T_SEND };
static const char *const test_names[] = {"write", "paged", "read", "immlat",
                                         "send"};

struct opts {
    int test;
    const char *tls;
    uint64_t size, chunk, window, ms, region_mib, iters, warmup, min_iters;
    uint64_t timeout_s;
    int no_imm, ucx_alloc, pin;
};

static struct opts o;
static pid_t peer_pid;      /* initiator: the child; target: the parent */
static int is_child;
static int reaped, reaped_status; /* initiator: the target has exited */
static int ctl_readable(void);

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ucx-raw-bench%s: ", is_child ? " (target)" : "");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    if (!is_child && peer_pid > 0 && !reaped)
        kill(peer_pid, SIGKILL);
    _exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t deadline_ns(void)
{
    return now_ns() + o.timeout_s * 1000000000ull;
}

/* Called every so often inside every wait loop. */
static void check_alive(uint64_t deadline, const char *what)
{
    if (now_ns() > deadline)
        die("%s: no progress within %llu s", what,
            (unsigned long long)o.timeout_s);
    if (is_child) {
        if (getppid() != peer_pid)
            die("%s: the initiator exited", what);
    } else if (peer_pid > 0 && !reaped) {
        if (waitpid(peer_pid, &reaped_status, WNOHANG) == peer_pid)
            reaped = 1;
    }
    /* Its last words may still be in the socket (the final barrier). */
    if (reaped && !ctl_readable())
        die("%s: the target process exited", what);
}

/* ------------------------------------------------------ control channel */

static int ctl = -1;

static void xwrite(const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = write(ctl, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            die("control channel write: %s", strerror(errno));
        b += k;
        n -= (size_t)k;
    }
}

static void xread(void *p, size_t n)
{
    uint8_t *b = p;
    uint64_t deadline = deadline_ns();
    while (n) {
        struct pollfd pfd = {.fd = ctl, .events = POLLIN};
        if (poll(&pfd, 1, 100) == 0) {
            check_alive(deadline, "control channel");
            continue;
        }
        ssize_t k = read(ctl, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            die("control channel closed (peer exited?)");
        b += k;
        n -= (size_t)k;
    }
}

static int ctl_readable(void)
{
    struct pollfd pfd = {.fd = ctl, .events = POLLIN};
    return poll(&pfd, 1, 0) == 1;
}

/* ------------------------------------------------------------ UCX state */

static ucp_context_h ctx;
static ucp_worker_h worker;
static ucp_ep_h ep;
static ucp_mem_h memh;
static ucp_rkey_h rkey;
static uint8_t *buf;
static size_t buf_len;
static uint64_t rbase;

/* Target: immediates received (AM handler), with the arrival stamps of
 * immlat. */
static volatile uint64_t imms;
static uint64_t *stamps;
static uint64_t nstamps;

static void ck(ucs_status_t st, const char *what)
{
    if (st != UCS_OK)
        die("%s: %s", what, ucs_status_string(st));
}

static ucs_status_t on_am(void *arg, const void *header, size_t header_len,
                          void *data, size_t len,
                          const ucp_am_recv_param_t *param)
{
    (void)arg, (void)header, (void)header_len, (void)param;
    uint64_t t = now_ns();
    if (stamps && len >= 8) {
        uint32_t seq;
        memcpy(&seq, (const uint8_t *)data + 4, 4);
        if (seq < nstamps && !stamps[seq])
            stamps[seq] = t;
    }
    imms++;
    return UCS_OK;
}

static void ucx_open(void)
{
    ucp_config_t *cfg;
    ck(ucp_config_read(NULL, NULL, &cfg), "ucp_config_read");
    int shm = strcmp(o.tls, "shm") == 0;
    if (!getenv("UCX_TLS"))
        ck(ucp_config_modify(cfg, "TLS", shm ? "posix,sysv,cma,self" : "tcp"),
           "UCX_TLS");
    if (!shm && !getenv("UCX_NET_DEVICES"))
        ck(ucp_config_modify(cfg, "NET_DEVICES", "lo"), "UCX_NET_DEVICES");
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                      .features = UCP_FEATURE_RMA | UCP_FEATURE_AM |
                                  UCP_FEATURE_TAG};
    ck(ucp_init(&p, cfg, &ctx), "ucp_init");
    ucp_config_release(cfg);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ck(ucp_worker_create(ctx, &wp, &worker), "ucp_worker_create");
    ucp_am_handler_param_t ap = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                      UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = AM_IMM, .cb = on_am, .arg = NULL};
    ck(ucp_worker_set_am_recv_handler(worker, &ap), "am handler");
    /* The footprint: window x size (as te-bench's slots), at least
     * --region-mib, and 4 KiB for the latency tests. */
    uint64_t fp = o.window * o.size, region = o.region_mib << 20;
    buf_len = fp > region ? fp : region;
    if (buf_len < 4096)
        buf_len = 4096;
    buf_len = (buf_len + 4095) & ~(size_t)4095;
    if (o.ucx_alloc) {
        /* UCX allocates (shared memory on shm: its puts are then plain
         * copies into the peer's mapping). */
        ucp_mem_map_params_t mp = {
            .field_mask = UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                          UCP_MEM_MAP_PARAM_FIELD_FLAGS,
            .length = buf_len, .flags = UCP_MEM_MAP_ALLOCATE};
        ck(ucp_mem_map(ctx, &mp, &memh), "ucp_mem_map (allocate)");
        ucp_mem_attr_t ma = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
        ck(ucp_mem_query(memh, &ma), "ucp_mem_query");
        buf = ma.address;
    } else {
        /* Application memory registered, as te-bench's buffers. */
        if (posix_memalign((void **)&buf, 2u << 20, buf_len))
            die("out of memory for %zu bytes", buf_len);
        ucp_mem_map_params_t mp = {
            .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                          UCP_MEM_MAP_PARAM_FIELD_LENGTH,
            .address = buf, .length = buf_len};
        ck(ucp_mem_map(ctx, &mp, &memh), "ucp_mem_map");
    }
    memset(buf, is_child ? 0x3c : 0x5a, buf_len); /* touched, like tb_alloc */
}

/* Exchange worker addresses, buffer bases and packed rkeys; connect. */
static void ucx_connect(void)
{
    ucp_address_t *addr;
    size_t alen;
    ck(ucp_worker_get_address(worker, &addr, &alen), "worker address");
    void *rk;
    size_t rklen;
    ck(ucp_rkey_pack(ctx, memh, &rk, &rklen), "ucp_rkey_pack");
    uint64_t mine[3] = {alen, rklen, (uint64_t)(uintptr_t)buf}, theirs[3];
    xwrite(mine, sizeof(mine));
    xwrite(addr, alen);
    xwrite(rk, rklen);
    xread(theirs, sizeof(theirs));
    if (theirs[0] > (1u << 20) || theirs[1] > (1u << 20))
        die("peer sent an address of %llu bytes", (unsigned long long)theirs[0]);
    void *paddr = malloc(theirs[0]), *prk = malloc(theirs[1]);
    if (!paddr || !prk)
        die("out of memory");
    xread(paddr, theirs[0]);
    xread(prk, theirs[1]);
    rbase = theirs[2];
    ucp_ep_params_t ep_p = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                            .address = paddr};
    ck(ucp_ep_create(worker, &ep_p, &ep), "ucp_ep_create");
    ck(ucp_ep_rkey_unpack(ep, prk, &rkey), "ucp_ep_rkey_unpack");
    ucp_rkey_buffer_release(rk);
    ucp_worker_release_address(worker, addr);
    free(paddr);
    free(prk);
}

static void wait_req(void *req, const char *what);

/* Finish the wire-up before anything is timed (UCX connects lazily; over
 * tcp the first operations would otherwise pay milliseconds of connection
 * set-up): both sides flush their endpoint, progressing until the other
 * has too. */
static void ucx_wireup(void)
{
    ucp_request_param_t p = {0};
    wait_req(ucp_ep_flush_nbx(ep, &p), "wire-up flush");
    if (getenv("TE_UCX_RAW_BENCH_INFO") && !is_child) /* lanes and transports */
        ucp_ep_print_info(ep, stderr);
}

/* Wait for one request (NULL: done already), progressing the worker. */
static ucs_status_t wait_req_status(void *req, const char *what)
{
    if (req == NULL)
        return UCS_OK;
    if (UCS_PTR_IS_ERR(req))
        return UCS_PTR_STATUS(req);
    uint64_t deadline = deadline_ns();
    ucs_status_t st;
    for (unsigned n = 1; (st = ucp_request_check_status(req)) == UCS_INPROGRESS;
         n++) {
        ucp_worker_progress(worker);
        if ((n & 4095) == 0)
            check_alive(deadline, what);
    }
    ucp_request_free(req);
    return st;
}

static void wait_req(void *req, const char *what)
{
    ucs_status_t st = wait_req_status(req, what);
    if (st != UCS_OK)
        die("%s: %s", what, ucs_status_string(st));
}

/* Progress the worker (the peer may need us) until the control channel has
 * a message; the channel is looked at every 256 progress calls only (a
 * poll(2) per call took a quarter of the target's time). */
static void progress_until_ctl(const char *what)
{
    uint64_t deadline = deadline_ns();
    for (unsigned k = 1;; k++) {
        ucp_worker_progress(worker);
        if ((k & 255) == 0 && ctl_readable())
            return;
        if ((k & 4095) == 0)
            check_alive(deadline, what);
    }
}

/* Both sides progress until the other end is done with the endpoint (a
 * force close with operations still to be acknowledged would be an error
 * on the peer). */
static void barrier(void)
{
    uint32_t x = 1;
    wait_req(ucp_worker_flush_nbx(worker, &(ucp_request_param_t){0}),
             "worker flush");
    xwrite(&x, sizeof(x));
    progress_until_ctl("barrier");
    xread(&x, sizeof(x));
}

static void ucx_close(void)
{
    ucp_request_param_t p = {0}; /* a flushing close: both sides are done */
    if (rkey)
        ucp_rkey_destroy(rkey);
    /* Both sides measured and met at the barrier: a close that the peer's
     * own close resets (tcp) is not an error. */
    if (ep)
        (void)wait_req_status(ucp_ep_close_nbx(ep, &p), "ucp_ep_close_nbx");
    ep = NULL;
    barrier(); /* neither worker goes away while the other still closes */
    if (memh)
        ucp_mem_unmap(ctx, memh);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    if (!o.ucx_alloc)
        free(buf);
}


/* --------------------------------------------------------- bandwidth */

struct slot {
    void *req;            /* the flush (or get) request in flight */
    volatile int done;
    uint32_t imm[2];      /* AM payload: immediate, sequence */
    uint64_t t_submit;
};

static struct slot *slots;

static void on_done(void *request, ucs_status_t status, void *user_data)
{
    struct slot *s = user_data;
    if (status != UCS_OK)
        die("request failed: %s", ucs_status_string(status));
    (void)request;
    s->done = 1;
}

static void free_req(void *req, const char *what)
{
    if (UCS_PTR_IS_ERR(req))
        die("%s: %s", what, ucs_status_string(UCS_PTR_STATUS(req)));
    if (req)
        ucp_request_free(req); /* released when it completes */
}

/* Post one request of slot w: returns when posted (completion in s->done). */
static void submit(uint32_t w)
{
    struct slot *s = &slots[w];
    uint64_t off = (uint64_t)w * o.size;
    ucp_request_param_t plain = {0};
    ucp_request_param_t cb = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = on_done, .user_data = s};
    s->done = 0;
    s->t_submit = now_ns();
    if (o.test == T_READ) {
        s->req = ucp_get_nbx(ep, buf + off, o.size, rbase + off, rkey, &cb);
    } else {
        uint64_t chunk = o.test == T_PAGED ? o.chunk : o.size;
        for (uint64_t p = 0; p < o.size; p += chunk)
            free_req(ucp_put_nbx(ep, buf + off + p, chunk, rbase + off + p,
                                 rkey, &plain), "ucp_put_nbx");
        if (!o.no_imm) {
            ck(ucp_worker_fence(worker), "ucp_worker_fence");
            s->imm[0] = 0x7b000000u + (uint32_t)o.test;
            s->imm[1] = UINT32_MAX;
            for (uint64_t p = 0; p < o.size; p += chunk)
                free_req(ucp_am_send_nbx(ep, AM_IMM, NULL, 0, s->imm, 8,
                                         &plain), "ucp_am_send_nbx");
        }
        s->req = ucp_ep_flush_nbx(ep, &cb);
    }
    if (UCS_PTR_IS_ERR(s->req))
        die("%s: %s", o.test == T_READ ? "ucp_get_nbx" : "ucp_ep_flush_nbx",
            ucs_status_string(UCS_PTR_STATUS(s->req)));
    if (!s->req)
        s->done = 1;
}

static double run_bw(void)
{
    slots = calloc(o.window, sizeof(*slots));
    if (!slots)
        die("out of memory");
    uint64_t deadline = deadline_ns();
    for (uint32_t w = 0; w < o.window; w++)
        submit(w);
    uint64_t done = 0, counted = 0, inflight = o.window;
    uint64_t t_start = 0, t_last = 0;
    int stopping = 0;
    for (unsigned n = 1; inflight; n++) {
        ucp_worker_progress(worker);
        if ((n & 4095) == 0)
            check_alive(deadline, "write requests in flight");
        for (uint32_t i = 0; i < o.window && inflight; i++) {
            struct slot *s = &slots[i];
            if (!s->done)
                continue; /* in flight, or idle once stopping */
            if (s->req)
                ucp_request_free(s->req);
            s->req = NULL;
            s->done = 0;
            inflight--;
            uint64_t now = now_ns();
            done++;
            if (done == o.window) {
                t_start = now; /* ramp-up over: the window is full */
            } else if (done > o.window && !stopping) {
                counted++;
                t_last = now;
            }
            if (!stopping && t_start && counted >= o.min_iters &&
                now - t_start >= o.ms * 1000000ull)
                stopping = 1;
            if (!stopping) {
                submit(i);
                inflight++;
            }
        }
    }
    free(slots);
    slots = NULL;
    if (!counted || t_last <= t_start)
        die("no completion measured");
    return (double)counted * (double)o.size / (double)(t_last - t_start);
}

/* ------------------------------------------------------------ latency */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, uint64_t n, double p)
{
    uint64_t r = (uint64_t)(p / 100.0 * (double)n + 0.999999);
    return v[(r ? r : 1) - 1] / 1e3;
}

static void print_lat(const char *what, uint64_t *v, uint64_t n, double div)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    printf("%s: p50 %.3f  p99 %.3f  p99.9 %.3f  min %.3f us (%llu samples)\n",
           what, pct(v, n, 50) / div, pct(v, n, 99) / div,
           pct(v, n, 99.9) / div, v[0] / 1e3 / div, (unsigned long long)n);
}

static void sleep_us(unsigned us)
{
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
}

static void run_immlat(void)
{
    uint64_t n = o.warmup + o.iters;
    uint64_t *t_sub = calloc(n, sizeof(*t_sub));
    if (!t_sub)
        die("out of memory");
    uint32_t msg[2] = {0x7e000000u, 0};
    ucp_request_param_t plain = {0};
    for (uint64_t i = 0; i < n; i++) {
        msg[1] = (uint32_t)i;
        t_sub[i] = now_ns();
        if (o.size) {
            free_req(ucp_put_nbx(ep, buf, o.size, rbase, rkey, &plain),
                     "ucp_put_nbx");
            ck(ucp_worker_fence(worker), "ucp_worker_fence");
        }
        free_req(ucp_am_send_nbx(ep, AM_IMM, NULL, 0, msg, 8, &plain),
                 "ucp_am_send_nbx");
        wait_req(ucp_ep_flush_nbx(ep, &plain), "ucp_ep_flush_nbx");
        sleep_us(IMM_GAP_US);
    }
    /* The target's arrival stamps, in order. */
    uint64_t *cb = malloc(n * sizeof(*cb));
    if (!cb)
        die("out of memory");
    uint32_t ask = 1;
    xwrite(&ask, sizeof(ask));
    uint64_t got;
    progress_until_ctl("immlat stamps"); /* the target may need us */
    xread(&got, sizeof(got));
    if (got != n)
        die("the target saw %llu of %llu immediates", (unsigned long long)got,
            (unsigned long long)n);
    xread(cb, n * sizeof(*cb));
    uint64_t *e2e = calloc(o.iters, sizeof(*e2e));
    uint64_t m = 0;
    for (uint64_t i = o.warmup; i < n; i++)
        if (cb[i] >= t_sub[i])
            e2e[m++] = cb[i] - t_sub[i];
    if (!m)
        die("no sample");
    printf("ucx-raw-bench immlat %llu B (%s): submit -> AM handler on the "
           "target (end to end)\n", (unsigned long long)o.size, o.tls);
    print_lat("  latency", e2e, m, 1);
    printf("%.3f us p50 submit -> AM handler\n", pct(e2e, m, 50));
    free(t_sub);
    free(cb);
    free(e2e);
}

/* Before the start barrier: the first immediate may come right after it. */
static void target_immlat_prepare(uint64_t n)
{
    stamps = calloc(n, sizeof(*stamps));
    if (!stamps)
        die("out of memory");
    nstamps = n;
    imms = 0;
}

static void target_immlat(uint64_t n)
{
    progress_until_ctl("immlat");
    uint32_t ask;
    xread(&ask, sizeof(ask));
    /* The initiator's flush may complete before our handler ran (tcp: the
     * bytes are here, not yet dispatched): progress until all arrived. */
    uint64_t deadline = deadline_ns();
    for (unsigned k = 1; imms < n; k++) {
        ucp_worker_progress(worker);
        if ((k & 4095) == 0)
            check_alive(deadline, "immlat: the last immediates");
    }
    uint64_t got = imms;
    xwrite(&got, sizeof(got));
    if (got == n)
        xwrite(stamps, n * sizeof(*stamps));
    free(stamps);
    stamps = NULL;
}

static void tag_send(void *p, uint64_t len, const char *what)
{
    ucp_request_param_t plain = {0};
    wait_req(ucp_tag_send_nbx(ep, p, len, SEND_TAG, &plain), what);
}

static void tag_recv(void *p, uint64_t len, const char *what)
{
    ucp_request_param_t plain = {0};
    wait_req(ucp_tag_recv_nbx(worker, p, len, SEND_TAG, ~0ull, &plain), what);
}

static void run_send(void)
{
    /* Rate: `window` sends in flight; the target counts and times. */
    uint64_t n = o.iters * 10 > o.min_iters ? o.iters * 10 : o.min_iters;
    void **reqs = calloc(o.window, sizeof(*reqs));
    if (!reqs)
        die("out of memory");
    ucp_request_param_t plain = {0};
    uint32_t go;
    xread(&go, sizeof(go)); /* the target's receives are posted */
    uint64_t deadline = deadline_ns();
    for (uint64_t i = 0; i < n; i++) {
        uint32_t w = (uint32_t)(i % o.window);
        if (reqs[w]) {
            wait_req(reqs[w], "ucp_tag_send_nbx");
            reqs[w] = NULL;
        }
        void *r = ucp_tag_send_nbx(ep, buf + (uint64_t)w * o.size, o.size,
                                   SEND_TAG, &plain);
        if (UCS_PTR_IS_ERR(r))
            die("ucp_tag_send_nbx: %s", ucs_status_string(UCS_PTR_STATUS(r)));
        reqs[w] = r;
        if ((i & 1023) == 0)
            check_alive(deadline, "send rate");
    }
    for (uint32_t w = 0; w < o.window; w++)
        wait_req(reqs[w], "ucp_tag_send_nbx");
    free(reqs);
    uint64_t ns;
    progress_until_ctl("send rate result");
    xread(&ns, sizeof(ns));
    printf("ucx-raw-bench send %llu B (%s): rate %.3f M msg/s (%llu msgs, "
           "window %llu, receiver-timed)\n", (unsigned long long)o.size,
           o.tls, (double)n * 1e3 / (double)ns, (unsigned long long)n,
           (unsigned long long)o.window);
    /* Ping-pong. */
    uint64_t total = o.warmup + o.iters, m = 0;
    uint64_t *rtt = calloc(o.iters, sizeof(*rtt));
    if (!rtt)
        die("out of memory");
    uint8_t *pong = buf + (buf_len / 2);
    for (uint64_t i = 0; i < total; i++) {
        uint64_t t0 = now_ns();
        tag_send(buf, o.size, "ping");
        tag_recv(pong, o.size, "pong");
        uint64_t t1 = now_ns();
        if (i >= o.warmup)
            rtt[m++] = t1 - t0;
    }
    print_lat("  ping-pong half round trip", rtt, m, 2);
    printf("%.3f us p50 half round trip (ucp_tag_send_nbx/ucp_tag_recv_nbx)\n",
           pct(rtt, m, 50) / 2);
    free(rtt);
}

static void target_send(void)
{
    uint64_t n = o.iters * 10 > o.min_iters ? o.iters * 10 : o.min_iters;
    /* Keep `window` receives posted: each completes in order of posting. */
    void **reqs = calloc(o.window, sizeof(*reqs));
    if (!reqs)
        die("out of memory");
    ucp_request_param_t plain = {0};
    uint64_t posted = 0, got = 0;
    for (; posted < n && posted < o.window; posted++)
        reqs[posted % o.window] = ucp_tag_recv_nbx(
            worker, buf + (posted % o.window) * o.size, o.size, SEND_TAG, ~0ull,
            &plain);
    uint32_t go = 1;
    uint64_t t0 = now_ns();
    xwrite(&go, sizeof(go));
    uint64_t deadline = deadline_ns();
    for (unsigned k = 1; got < n; k++) {
        uint32_t w = (uint32_t)(got % o.window);
        void *r = reqs[w];
        if (UCS_PTR_IS_ERR(r))
            die("ucp_tag_recv_nbx: %s", ucs_status_string(UCS_PTR_STATUS(r)));
        if (r && ucp_request_check_status(r) == UCS_INPROGRESS) {
            ucp_worker_progress(worker);
            if ((k & 4095) == 0)
                check_alive(deadline, "send rate receives");
            continue;
        }
        if (r)
            ucp_request_free(r);
        got++;
        if (posted < n) {
            reqs[w] = ucp_tag_recv_nbx(worker, buf + w * o.size, o.size,
                                       SEND_TAG, ~0ull, &plain);
            posted++;
        } else {
            reqs[w] = NULL;
        }
    }
    uint64_t ns = now_ns() - t0;
    xwrite(&ns, sizeof(ns));
    free(reqs);
    uint64_t total = o.warmup + o.iters;
    for (uint64_t i = 0; i < total; i++) {
        tag_recv(buf, o.size, "ping");
        tag_send(buf, o.size, "pong");
    }
}

/* ------------------------------------------------------------ target */

static void pin_to(int last)
{
    if (!o.pin)
        return;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(last && n > 1 ? (int)n - 1 : 0, &set);
    if (sched_setaffinity(0, sizeof(set), &set))
        die("--pin: sched_setaffinity: %s", strerror(errno));
}

static int run_target(void)
{
    pin_to(1);
    ucx_open();
    ucx_connect();
    ucx_wireup();
    imms = 0;
    if (o.test == T_IMMLAT)
        target_immlat_prepare(o.warmup + o.iters);
    barrier();
    if (o.test == T_IMMLAT) {
        target_immlat(o.warmup + o.iters);
    } else if (o.test == T_SEND) {
        target_send();
    } else {
        /* Bandwidth: progress (the AM handler counts the immediates)
         * until the initiator says it is done. */
        progress_until_ctl("bandwidth target");
        uint32_t x;
        xread(&x, sizeof(x));
        uint64_t got = imms;
        xwrite(&got, sizeof(got));
    }
    barrier();
    ucx_close();
    return 0;
}

/* ------------------------------------------------------------ options */

static void usage(FILE *f)
{
    fprintf(f,
        "usage: ucx-raw-bench [options]   (raw UCX reference for te-bench)\n"
        "  --test T           write | paged | read | immlat | send (write)\n"
        "  --tls shm|tcp      shm: UCX_TLS=posix,sysv,cma,self; tcp: UCX_TLS=tcp,\n"
        "                     UCX_NET_DEVICES=lo (127.0.0.1). The environment's\n"
        "                     UCX_TLS / UCX_NET_DEVICES win. Default shm\n"
        "  --size N           bytes per request (K/M suffixes; write 64K,\n"
        "                     immlat 0, send 8)\n"
        "  --chunk N          paged: bytes per page (default 16K)\n"
        "  --window W         requests in flight (default: 16 MiB / size,\n"
        "                     2..64, as te-bench; send: 32)\n"
        "  --region-mib R     at least R MiB of buffer on each side (default 0:\n"
        "                     window x size, the te-bench footprint)\n"
        "  --ms T             bandwidth: count for at least T ms (200)\n"
        "  --min-iters N      bandwidth: and at least N requests (16)\n"
        "  --iters N          latency samples (1000); send rate: 10 x N msgs\n"
        "  --warmup N         untimed latency samples first (100)\n"
        "  --no-imm           write/paged: no immediate active message\n"
        "  --alloc ucx|user   ucx (default): ucp_mem_map allocates the buffers\n"
        "                     (shared memory on shm: a put is one copy into\n"
        "                     the peer's mapping); user: registered\n"
        "                     application memory (on shm UCX 1.13 then\n"
        "                     emulates puts with active messages: two\n"
        "                     copies and the target's CPU)\n"
        "  --timeout S        bound of every wait, seconds (30)\n"
        "  --pin              initiator on CPU 0, target on the last CPU (two\n"
        "                     busy-polling processes never share a core)\n"
        "Bandwidth results end with \"X GB/s\"; latency results with a line\n"
        "that starts with the p50 in us (what te-bench --reference reads).\n");
}

static uint64_t parse_size(const char *s, const char *opt)
{
    char *end;
    errno = 0;
    uint64_t v = strtoull(s, &end, 10);
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    else if (*end == 'G' || *end == 'g')
        v <<= 30, end++;
    if (errno || end == s || *end) {
        fprintf(stderr, "ucx-raw-bench: %s %s: not a size\n", opt, s);
        exit(2);
    }
    return v;
}

static void parse(int argc, char **argv)
{
    static const struct option lo[] = {
        {"test", 1, 0, 't'},      {"tls", 1, 0, 'l'},
        {"size", 1, 0, 's'},      {"chunk", 1, 0, 'c'},
        {"window", 1, 0, 'W'},    {"region-mib", 1, 0, 'R'},
        {"ms", 1, 0, 'T'},        {"min-iters", 1, 0, 'm'},
        {"iters", 1, 0, 'i'},     {"warmup", 1, 0, 'w'},
        {"no-imm", 0, 0, 'n'},    {"timeout", 1, 0, 'o'},
        {"alloc", 1, 0, 'a'},     {"pin", 0, 0, 'P'},
        {"help", 0, 0, 'h'},      {0, 0, 0, 0}};
    int size_set = 0, c;
    o.test = T_WRITE;
    o.tls = "shm";
    o.chunk = 16 << 10;
    o.ms = 200;
    o.min_iters = 16;
    o.iters = 1000;
    o.warmup = 100;
    o.timeout_s = 30;
    o.ucx_alloc = 1;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 't': {
            o.test = -1;
            for (int i = 0; i < 5; i++)
                if (strcmp(optarg, test_names[i]) == 0)
                    o.test = i;
            if (o.test < 0) {
                fprintf(stderr, "ucx-raw-bench: --test %s: write, paged, read, "
                        "immlat or send (no UCX equivalent here)\n", optarg);
                exit(2);
            }
            break;
        }
        case 'l':
            if (strcmp(optarg, "shm") && strcmp(optarg, "tcp")) {
                fprintf(stderr, "ucx-raw-bench: --tls shm or tcp\n");
                exit(2);
            }
            o.tls = optarg;
            break;
        case 's': o.size = parse_size(optarg, "--size"); size_set = 1; break;
        case 'c': o.chunk = parse_size(optarg, "--chunk"); break;
        case 'W': o.window = parse_size(optarg, "--window"); break;
        case 'R': o.region_mib = parse_size(optarg, "--region-mib"); break;
        case 'T': o.ms = parse_size(optarg, "--ms"); break;
        case 'm': o.min_iters = parse_size(optarg, "--min-iters"); break;
        case 'i': o.iters = parse_size(optarg, "--iters"); break;
        case 'w': o.warmup = parse_size(optarg, "--warmup"); break;
        case 'n': o.no_imm = 1; break;
        case 'P': o.pin = 1; break;
        case 'a':
            if (strcmp(optarg, "user") && strcmp(optarg, "ucx")) {
                fprintf(stderr, "ucx-raw-bench: --alloc user or ucx\n");
                exit(2);
            }
            o.ucx_alloc = strcmp(optarg, "ucx") == 0;
            break;
        case 'o': o.timeout_s = parse_size(optarg, "--timeout"); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ucx-raw-bench: unexpected argument '%s'\n",
                argv[optind]);
        exit(2);
    }
    int bw = o.test <= T_READ;
    if (!size_set)
        o.size = bw ? 64 << 10 : o.test == T_SEND ? 8 : 0;
    if (!o.window)
        o.window = o.test == T_SEND ? 32
                   : !bw ? 1
                   : o.size && (16u << 20) / o.size < 2 ? 2
                   : o.size && (16u << 20) / o.size < 64 ? (16u << 20) / o.size
                                                         : 64;
    const char *bad = NULL;
    if (bw && !o.size)
        bad = "--size must be > 0 for bandwidth tests";
    else if (o.test == T_PAGED && (!o.chunk || o.size % o.chunk))
        bad = "--size must be a multiple of --chunk (pages)";
    else if (o.test == T_SEND && !o.size)
        bad = "--size must be > 0 for send";
    else if (o.window < 1 || o.window > MAX_WINDOW)
        bad = "--window 1..4096";
    else if (o.window * (o.size ? o.size : 1) > (8ull << 30))
        bad = "window x size exceeds 8 GiB";
    else if (!o.iters || !o.timeout_s || !o.ms || !o.min_iters)
        bad = "--iters, --ms, --min-iters and --timeout must be > 0";
    else if (o.test == T_SEND && o.size > (64u << 20))
        bad = "send messages up to 64 MiB";
    if (bad) {
        fprintf(stderr, "ucx-raw-bench: %s\n", bad);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    parse(argc, argv);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
        die("socketpair: %s", strerror(errno));
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork(); /* before any UCX state exists */
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        is_child = 1;
        peer_pid = parent;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        close(sv[0]);
        ctl = sv[1];
        _exit(run_target());
    }
    peer_pid = pid;
    pin_to(0);
    close(sv[1]);
    ctl = sv[0];
    ucx_open();
    ucx_connect();
    ucx_wireup();
    barrier();
    if (o.test == T_IMMLAT) {
        run_immlat();
    } else if (o.test == T_SEND) {
        run_send();
    } else {
        double gbs = run_bw();
        uint32_t x = 1;
        uint64_t got;
        xwrite(&x, sizeof(x));
        xread(&got, sizeof(got));
        /* Small requests: enough digits that the value is never "0.000". */
        printf("ucx-raw-bench %s %llu B window %llu (%s%s): %.*f GB/s "
               "(%.4f M req/s; footprint %llu MiB; target counted %llu "
               "immediates)\n", test_names[o.test], (unsigned long long)o.size,
               (unsigned long long)o.window, o.tls,
               o.no_imm || o.test == T_READ ? ", no imm" : ", put+fence+AM imm",
               gbs >= 1 ? 3 : 6, gbs, gbs * 1e3 / (double)o.size,
               (unsigned long long)(buf_len >> 20), (unsigned long long)got);
    }
    fflush(stdout);
    barrier();
    ucx_close();
    int st = reaped_status;
    uint64_t deadline = deadline_ns();
    while (!reaped && waitpid(pid, &st, WNOHANG) == 0) {
        if (now_ns() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        sleep_us(1000);
    }
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
