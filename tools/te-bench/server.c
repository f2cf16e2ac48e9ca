/*
 * The server: owns the receiving side of every case. Per case (SETUP) it
 * builds `engines` engines of one group each, registers a region on each,
 * publishes their addresses and descriptors, and then answers the client's
 * bookkeeping: arm an ImmCounter expectation and report when it is met,
 * count or echo messages, checksum a region. It measures only on its own
 * clock (durations from its ACK), so it also serves a client on another host.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

struct srv_engine {
    te_engine *e;
    uint8_t *buf;
    te_mr *mr;
    /* engine.progress = caller: the server's application thread that
     * progresses it (spinning, then te_progress_wait when idle) */
    pthread_t pump;
    int pumping;
    atomic_int pump_stop;
};

/* A caller-driven engine has no threads: the server gives it one, as a
 * latency-bound application would (busy while there is work, blocking on
 * the engine's wait objects after 200 us without any). */
static void *pump_main(void *arg)
{
    struct srv_engine *x = arg;
    uint64_t idle_since = 0;
    uint32_t empty = 0;
    while (!atomic_load_explicit(&x->pump_stop, memory_order_relaxed)) {
        if (te_progress(x->e, -1, 0) > 0) {
            idle_since = 0;
            empty = 0;
            continue;
        }
        /* The clock every 64 empty calls: read on each, it was a sixth of
         * the loop (arrivals wait for the loop to come round). */
        if (++empty & 63)
            continue;
        uint64_t now = tb_now_ns();
        if (!idle_since)
            idle_since = now;
        else if (now - idle_since > 200000 &&
                 te_progress_wait(x->e, -1, 5) > 0)
            idle_since = 0; /* woken by work: spin again */
    }
    return NULL;
}

/* cpu >= 0 (--pin with one engine): the last CPU, where thread mode
 * pins the receiving worker. */
static int pump_start(struct srv_engine *x, long cpu)
{
    if (te_progress(x->e, -1, 0) == -EINVAL) /* thread mode */
        return 0;
    atomic_store(&x->pump_stop, 0);
    int rc = pthread_create(&x->pump, NULL, pump_main, x);
    x->pumping = rc == 0;
    if (!rc && cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET((int)cpu, &set);
        pthread_setaffinity_np(x->pump, sizeof(set), &set);
    }
    return -rc;
}

static void pump_stop(struct srv_engine *x)
{
    if (!x->pumping)
        return;
    atomic_store(&x->pump_stop, 1);
    pthread_join(x->pump, NULL);
    x->pumping = 0;
}

/* Latency stamps of one TB_ARM_LAT window. */
struct lat_slot {
    _Atomic uint64_t cb_ns;
};

struct srv {
    const struct tb_opts *o;
    struct tb_chan ch;
    /* hello */
    char *config_text;
    struct tb_sets hello_sets;
    const char *base[TB_MAX_SETS];
    int nbase;
    /* case */
    struct srv_engine *eng;
    uint32_t nengines;
    uint64_t region;
    int probe;
    const struct te_bench_probe_api *papi;
    te_peer client_peer;
    int have_client_peer;
    uint32_t recv_mode;
    /* armed measurement */
    _Atomic int met;
    _Atomic uint64_t met_ns;
    uint64_t ack_ns;
    uint32_t lat_base, lat_n;
    struct lat_slot *lat_cb;
    _Atomic uint64_t *lat_arr;
    /* messages */
    _Atomic uint64_t msgs, msg_target, msg_last_ns;
    _Atomic int echo;
};

static void on_count_met(uint32_t imm, int status, void *arg)
{
    struct srv *s = arg;
    atomic_store_explicit(&s->met_ns, tb_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&s->met, status == 0 ? 1 : -1, memory_order_release);
}

static void on_lat(uint32_t imm, int status, void *arg)
{
    uint64_t t = tb_now_ns(); /* first thing: this is the measured end */
    struct lat_slot *l = arg;
    atomic_store_explicit(&l->cb_ns, t, memory_order_release);
}

static void on_echo_sent(const te_completion *c, void *arg) {}

/* Counts messages; after TB_ARM_ECHO also sends each one back. */
static void on_msg(int group, te_peer from, const void *data, size_t len,
                   void *arg)
{
    struct srv *s = arg;
    uint64_t n = atomic_fetch_add_explicit(&s->msgs, 1, memory_order_relaxed) + 1;
    if (atomic_load_explicit(&s->echo, memory_order_relaxed)) {
        te_request r;
        te_request_init(&r, TE_OP_SEND);
        r.u.send.peer = s->client_peer;
        r.u.send.buf = data;
        r.u.send.len = (uint32_t)len;
        r.done = on_echo_sent; /* nobody polls the server's queue */
        uint64_t deadline = tb_now_ns() + 1000000000ull;
        while (te_submit(s->eng[0].e, &r) == -EAGAIN && tb_now_ns() < deadline)
            tb_cpu_relax();
    }
    if (n >= atomic_load_explicit(&s->msg_target, memory_order_relaxed)) {
        atomic_store_explicit(&s->msg_last_ns, tb_now_ns(), memory_order_relaxed);
        atomic_store_explicit(&s->met, 1, memory_order_release);
    }
}

static void teardown(struct srv *s)
{
    if (s->papi)
        s->papi->imm_disarm();
    if (s->have_client_peer) /* see tb_env_close */
        te_peer_remove(s->eng[0].e, 0, s->client_peer);
    for (uint32_t i = 0; i < s->nengines; i++) {
        struct srv_engine *x = &s->eng[i];
        if (x->e) {
            pump_stop(x);
            if (x->mr)
                te_mr_dereg(x->e, x->mr);
            te_engine_destroy(x->e);
        }
        free(x->buf);
    }
    free(s->eng);
    s->eng = NULL;
    s->nengines = 0;
    free(s->lat_cb);
    free((void *)s->lat_arr);
    s->lat_cb = NULL;
    s->lat_arr = NULL;
    s->papi = NULL;
    s->have_client_peer = 0;
}

static int reply_error(struct srv *s, uint32_t type, int rc, const char *msg)
{
    if (type == TB_MSG_READY) {
        struct tb_ready r;
        memset(&r, 0, sizeof(r));
        r.rc = rc;
        snprintf(r.error, sizeof(r.error), "server: %s", msg);
        return tb_chan_send(&s->ch, type, &r, sizeof(r), NULL, 0);
    }
    if (type == TB_MSG_RESULT) {
        struct tb_result r;
        memset(&r, 0, sizeof(r));
        r.rc = rc;
        snprintf(r.error, sizeof(r.error), "server: %s", msg);
        return tb_chan_send(&s->ch, type, &r, sizeof(r), NULL, 0);
    }
    struct tb_ack a;
    memset(&a, 0, sizeof(a));
    a.rc = rc;
    snprintf(a.error, sizeof(a.error), "server: %s", msg);
    return tb_chan_send(&s->ch, TB_MSG_ACK, &a, sizeof(a), NULL, 0);
}

/* Split NUL-separated strings into sets. */
static void parse_sets(const char *p, size_t len, uint32_t n, struct tb_sets *out)
{
    const char *end = p + len;
    for (uint32_t i = 0; i < n && p < end; i++) {
        size_t l = strnlen(p, (size_t)(end - p));
        tb_sets_add(out, "%.*s", (int)l, p);
        p += l + 1;
    }
}

static int do_setup(struct srv *s, const void *msg, size_t len)
{
    teardown(s);
    const struct tb_setup *su = msg;
    if (len < sizeof(*su) || su->engines == 0 || su->engines > TB_MAX_PEERS ||
        sizeof(*su) + (uint64_t)su->sets_len + su->client_addr_len > len)
        return reply_error(s, TB_MSG_READY, -EPROTO, "malformed setup");
    struct tb_sets extra = {0};
    parse_sets((const char *)(su + 1), su->sets_len, su->nsets, &extra);
    const uint8_t *caddr = (const uint8_t *)(su + 1) + su->sets_len;
    /* The server's own --set options win over the client's. */
    for (int i = 0; i < s->o->nsets; i++)
        tb_sets_add(&extra, "%s", s->o->sets[i]);

    s->eng = calloc(su->engines, sizeof(*s->eng));
    s->nengines = su->engines;
    s->region = su->region ? su->region : 4096;
    s->recv_mode = su->recv_mode;
    s->probe = (int)su->probe;
    char err[512] = "";
    int rc = s->eng ? 0 : -ENOMEM;
    for (uint32_t i = 0; !rc && i < su->engines; i++) {
        struct srv_engine *x = &s->eng[i];
        rc = tb_engine_create(s->config_text, s->base, s->nbase, &extra,
                              s->probe, &x->e, err, sizeof(err));
        if (rc)
            break;
        long last = sysconf(_SC_NPROCESSORS_ONLN) - 1;
        if ((rc = pump_start(x, s->o->pin && su->engines == 1 && last > 0
                                    ? last : -1))) {
            snprintf(err, sizeof(err), "progress thread: %s", strerror(-rc));
            break;
        }
        x->buf = tb_alloc(s->region);
        if (!x->buf) {
            rc = -ENOMEM;
            snprintf(err, sizeof(err), "cannot allocate %llu bytes",
                     (unsigned long long)s->region);
            break;
        }
        tb_fill(x->buf, s->region, su->seed + 1000 + i);
        if ((rc = te_mr_reg(x->e, 0, x->buf, s->region, su->access,
                            TE_MEM_HOST, &x->mr)))
            snprintf(err, sizeof(err), "registration: %s", te_last_error());
    }
    if (!rc && su->recv_mode) {
        if (su->client_addr_len) {
            rc = te_peer_add(s->eng[0].e, 0, caddr, su->client_addr_len,
                             &s->client_peer);
            if (rc)
                snprintf(err, sizeof(err), "adding the client: %s",
                         te_last_error());
            else
                s->have_client_peer = 1;
        }
        if (!rc)
            rc = te_set_recv_handler(s->eng[0].e, 0, on_msg, s);
    }
    tb_sets_free(&extra);
    if (!rc && s->probe && !(s->papi = tb_probe_api())) {
        rc = -ENOENT;
        snprintf(err, sizeof(err), "probe loaded but its API is not reachable");
    }
    if (rc) {
        int r2 = reply_error(s, TB_MSG_READY, rc, err);
        teardown(s);
        return r2;
    }

    /* READY: header, then per engine its address and descriptor. */
    size_t cap = s->nengines * (8 + TE_ADDR_MAX + TE_DESC_MAX);
    uint8_t *body = malloc(cap), *p = body;
    if (!body)
        return reply_error(s, TB_MSG_READY, -ENOMEM, "out of memory");
    struct tb_ready rd;
    memset(&rd, 0, sizeof(rd));
    snprintf(rd.plugin, sizeof(rd.plugin), "%s",
             te_engine_plugin_name(s->eng[0].e));
    rd.engines = s->nengines;
    rd.nic_count = (uint32_t)te_engine_nic_count(s->eng[0].e, 0);
    rd.probe_active = s->papi != NULL;
    rd.pid = (uint32_t)getpid();
    if (su->self) /* in-process only: the client checks the pid */
        rd.engine_ptr = (uint64_t)(uintptr_t)s->eng[0].e;
    for (uint32_t n = 0; n < rd.nic_count; n++) {
        te_nic_info ni;
        if (te_engine_nic_info(s->eng[0].e, 0, (int)n, &ni) == 0)
            rd.link_gbps_sum += ni.link_gbps;
    }
    for (uint32_t i = 0; i < s->nengines; i++) {
        size_t al = TE_ADDR_MAX, dl = TE_DESC_MAX;
        te_mr_desc d;
        te_engine_address(s->eng[i].e, 0, p + 4, &al);
        memcpy(p, &(uint32_t){(uint32_t)al}, 4);
        p += 4 + al;
        te_mr_describe(s->eng[i].mr, &d);
        te_desc_serialize(&d, p + 4, &dl);
        memcpy(p, &(uint32_t){(uint32_t)dl}, 4);
        p += 4 + dl;
    }
    rc = tb_chan_send(&s->ch, TB_MSG_READY, &rd, sizeof(rd), body,
                      (size_t)(p - body));
    free(body);
    return rc;
}

static int do_arm(struct srv *s, const struct tb_arm *a)
{
    if (!s->nengines)
        return reply_error(s, TB_MSG_ACK, -EPROTO, "arm without a setup");
    atomic_store(&s->met, 0);
    atomic_store(&s->met_ns, 0);
    int rc = 0;
    char err[256] = "";
    if (a->kind == TB_ARM_COUNT) {
        /* Leftovers of an earlier repetition must not count towards this. */
        te_imm_remove(s->eng[0].e, a->imm, NULL);
        rc = te_imm_expect(s->eng[0].e, a->imm, a->count, on_count_met, s);
    } else if (a->kind == TB_ARM_LAT) {
        if (a->count == 0 || a->count > 1000000)
            return reply_error(s, TB_MSG_ACK, -EINVAL, "bad sample count");
        free(s->lat_cb);
        free((void *)s->lat_arr);
        s->lat_cb = calloc(a->count, sizeof(*s->lat_cb));
        s->lat_arr = calloc(a->count, sizeof(*s->lat_arr));
        if (!s->lat_cb || !s->lat_arr)
            return reply_error(s, TB_MSG_ACK, -ENOMEM, "out of memory");
        s->lat_base = a->imm;
        s->lat_n = (uint32_t)a->count;
        if (s->papi)
            s->papi->imm_arm(a->imm, (uint32_t)a->count, s->lat_arr);
        for (uint32_t i = 0; !rc && i < s->lat_n; i++) {
            te_imm_remove(s->eng[0].e, a->imm + i, NULL);
            rc = te_imm_expect(s->eng[0].e, a->imm + i, 1, on_lat,
                               &s->lat_cb[i]);
        }
    } else if (a->kind == TB_ARM_RECV || a->kind == TB_ARM_ECHO) {
        if (!s->have_client_peer && a->kind == TB_ARM_ECHO)
            return reply_error(s, TB_MSG_ACK, -EINVAL, "echo without client");
        atomic_store(&s->echo, a->kind == TB_ARM_ECHO);
        atomic_store(&s->msgs, 0);
        atomic_store(&s->msg_target, a->count ? a->count : UINT64_MAX);
    } else {
        rc = -EINVAL;
    }
    if (rc) {
        snprintf(err, sizeof(err), "arm: %s", te_last_error());
        return reply_error(s, TB_MSG_ACK, rc, err);
    }
    struct tb_ack ack;
    memset(&ack, 0, sizeof(ack));
    s->ack_ns = ack.t_ns = tb_now_ns();
    return tb_chan_send(&s->ch, TB_MSG_ACK, &ack, sizeof(ack), NULL, 0);
}

static int do_collect(struct srv *s, const struct tb_arm *a)
{
    struct tb_result r;
    memset(&r, 0, sizeof(r));
    uint64_t deadline = tb_now_ns() + (uint64_t)a->timeout_ms * 1000000ull;
    if (a->kind == TB_ARM_COUNT || a->kind == TB_ARM_RECV) {
        /* Sleep-poll: the waiting server must not take a CPU from the
         * engines it measures. */
        while (!atomic_load_explicit(&s->met, memory_order_acquire) &&
               tb_now_ns() < deadline)
            tb_sleep_us(200);
        int met = atomic_load_explicit(&s->met, memory_order_acquire);
        uint64_t end = a->kind == TB_ARM_RECV ? atomic_load(&s->msg_last_ns)
                                              : atomic_load(&s->met_ns);
        if (a->kind == TB_ARM_COUNT) {
            uint64_t banked = 0;
            te_imm_poll(s->eng[0].e, a->imm, &banked, NULL);
            r.count = met == 1 ? a->count : banked;
        } else {
            r.count = atomic_load(&s->msgs);
        }
        if (met != 1) {
            r.rc = met < 0 ? -ECANCELED : -ETIMEDOUT;
            snprintf(r.error, sizeof(r.error), "server: %llu of %llu arrivals "
                     "after %u ms", (unsigned long long)r.count,
                     (unsigned long long)a->count, a->timeout_ms);
        } else {
            r.done_ns = end;
            r.elapsed_ns = end - s->ack_ns;
        }
        return tb_chan_send(&s->ch, TB_MSG_RESULT, &r, sizeof(r), NULL, 0);
    }
    if (a->kind != TB_ARM_LAT || !s->lat_cb)
        return reply_error(s, TB_MSG_RESULT, -EPROTO, "nothing armed");
    /* Wait (bounded) until every armed imm has had its callback. */
    uint32_t seen = 0;
    while (tb_now_ns() < deadline) {
        seen = 0;
        for (uint32_t i = 0; i < s->lat_n; i++)
            seen += atomic_load_explicit(&s->lat_cb[i].cb_ns,
                                         memory_order_acquire) != 0;
        if (seen == s->lat_n)
            break;
        tb_sleep_us(500);
    }
    if (s->papi)
        s->papi->imm_disarm();
    uint64_t *pairs = malloc((size_t)s->lat_n * 16);
    if (!pairs)
        return reply_error(s, TB_MSG_RESULT, -ENOMEM, "out of memory");
    for (uint32_t i = 0; i < s->lat_n; i++) {
        pairs[2 * i] = atomic_load(&s->lat_arr[i]);
        pairs[2 * i + 1] = atomic_load(&s->lat_cb[i].cb_ns);
    }
    r.count = seen;
    r.nsamples = s->lat_n;
    r.probe_active = s->papi != NULL;
    if (seen != s->lat_n) {
        r.rc = -ETIMEDOUT;
        snprintf(r.error, sizeof(r.error), "server: %u of %u callbacks after "
                 "%u ms", seen, s->lat_n, a->timeout_ms);
    }
    int rc = tb_chan_send(&s->ch, TB_MSG_RESULT, &r, sizeof(r), pairs,
                          (size_t)s->lat_n * 16);
    free(pairs);
    return rc;
}

static int do_checksum(struct srv *s, const struct tb_sum_req *q)
{
    if (q->engine >= s->nengines || q->off > s->region ||
        q->len > s->region - q->off)
        return reply_error(s, TB_MSG_ACK, -ERANGE, "checksum out of range");
    struct tb_ack a;
    memset(&a, 0, sizeof(a));
    a.value = tb_checksum(s->eng[q->engine].buf + q->off, q->len);
    return tb_chan_send(&s->ch, TB_MSG_ACK, &a, sizeof(a), NULL, 0);
}

static int do_hello(struct srv *s, const void *msg, size_t len)
{
    const struct tb_hello *h = msg;
    if (len < sizeof(*h) || strncmp(h->version, TB_VERSION, sizeof(h->version)))
        return -EPROTO;
    struct tb_sets *sets = &s->hello_sets;
    const char *p = (const char *)(h + 1), *end = (const char *)msg + len;
    size_t slen = 0;
    for (uint32_t i = 0; i < h->nsets && p + slen < end; i++)
        slen += strnlen(p + slen, (size_t)(end - p - slen)) + 1;
    parse_sets(p, slen, h->nsets, sets);
    for (int i = 0; i < sets->n && s->nbase < TB_MAX_SETS; i++)
        s->base[s->nbase++] = sets->v[i];
    if (p + slen + h->text_len <= end && h->text_len)
        s->config_text = strndup(p + slen, h->text_len);
    /* The probe wraps what the client asked for (no engine exists yet, so
     * no thread reads the environment while it changes). */
    const char *all[2 * TB_MAX_SETS];
    int nall = 0;
    for (int i = 0; i < s->nbase; i++)
        all[nall++] = s->base[i];
    for (int i = 0; i < s->o->nsets; i++)
        all[nall++] = s->o->sets[i];
    char plugin[4096], ppath[4096];
    tb_effective_plugin(s->config_text, all, nall, plugin, sizeof(plugin),
                        ppath, sizeof(ppath));
    tb_probe_env(plugin, ppath);
    struct tb_ack a;
    memset(&a, 0, sizeof(a));
    a.value = (uint64_t)getpid();
    gethostname(a.error, sizeof(a.error) - 1);
    return tb_chan_send(&s->ch, TB_MSG_ACK, &a, sizeof(a), NULL, 0);
}

int tb_server_run(const struct tb_opts *o, int fd)
{
    struct srv s;
    memset(&s, 0, sizeof(s));
    s.o = o;
    s.ch.fd = fd;
    /* Idle between cases can be long (the client measures its reference):
     * the bound is generous but finite. */
    s.ch.timeout_ms = (int)(o->timeout_s * 1000u) * 4;
    int rc = 0;
    for (;;) {
        uint32_t type;
        void *msg;
        size_t len;
        if ((rc = tb_chan_recv(&s.ch, &type, &msg, &len)))
            break;
        switch (type) {
        case TB_MSG_HELLO:
            rc = do_hello(&s, msg, len);
            break;
        case TB_MSG_SETUP:
            rc = do_setup(&s, msg, len);
            break;
        case TB_MSG_ARM:
            rc = len >= sizeof(struct tb_arm) ? do_arm(&s, msg) : -EPROTO;
            break;
        case TB_MSG_COLLECT:
            rc = len >= sizeof(struct tb_arm) ? do_collect(&s, msg) : -EPROTO;
            break;
        case TB_MSG_CHECKSUM:
            rc = len >= sizeof(struct tb_sum_req) ? do_checksum(&s, msg)
                                                  : -EPROTO;
            break;
        case TB_MSG_TEARDOWN: {
            teardown(&s);
            struct tb_ack a;
            memset(&a, 0, sizeof(a));
            rc = tb_chan_send(&s.ch, TB_MSG_ACK, &a, sizeof(a), NULL, 0);
            break;
        }
        case TB_MSG_QUIT:
            free(msg);
            goto out;
        default:
            rc = -EPROTO;
        }
        free(msg);
        if (rc)
            break;
    }
out:
    teardown(&s);
    tb_sets_free(&s.hello_sets);
    free(s.config_text);
    close(fd);
    return rc == -EPIPE ? 0 : rc; /* a client that went away is not an error */
}
