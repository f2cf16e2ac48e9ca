/* Helpers shared by the suite's cases. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "conformance.h"

uint64_t conf_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void conf_fill(uint8_t *buf, uint64_t off, uint64_t len, uint32_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        buf[off + i] = conf_pattern(off + i, seed);
}

int conf_skip(struct conf *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof(c->why), fmt, ap);
    va_end(ap);
    return CONF_SKIP;
}

int conf_note(struct conf *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->note, sizeof(c->note), fmt, ap);
    va_end(ap);
    return c->strict ? CONF_FAIL : CONF_PASS;
}

uint32_t conf_imm(void)
{
    /* Distinct values per case and per process run, away from 0. */
    static uint32_t next;
    if (!next)
        next = 0x1000u + ((uint32_t)getpid() & 0xffu) * 0x10000u;
    return next++;
}

te_request conf_req(uint32_t op)
{
    te_request r;
    te_request_init(&r, op);
    r.group = 0;
    r.route.kind = TE_ROUTE_SHARD;
    return r;
}

int64_t conf_submit(struct conf *c, te_request *r)
{
    uint64_t deadline = conf_now_ms() + CONF_TIMEOUT_MS;
    for (;;) {
        /* Device memory: the cases wrote the host mirror (mem.h). */
        if (c->inflight == 0 &&
            conf_mem_push(&c->src_mem, 0, c->src_mem.len))
            return -EIO;
        int64_t id = te_submit(c->e, r);
        if (id >= 0)
            c->inflight++;
        if (id != -EAGAIN || conf_now_ms() > deadline)
            return id;
        usleep(100);
    }
}

int conf_wait_completions(struct conf *c, te_completion *out, int n)
{
    uint64_t deadline = conf_now_ms() + CONF_TIMEOUT_MS;
    int got = 0;
    while (got < n) {
        uint64_t now = conf_now_ms();
        if (now >= deadline)
            return -ETIMEDOUT;
        int k = te_poll_completions(c->e, out + got, n - got,
                                    (int)(deadline - now));
        if (k < 0)
            return k;
        got += k;
        c->inflight = c->inflight > k ? c->inflight - k : 0;
    }
    /* Reads landed in device memory: show them in the mirror. */
    if (c->inflight == 0 && conf_mem_pull(&c->src_mem, 0, c->src_mem.len))
        return -EIO;
    return 0;
}

int64_t conf_submit_to(te_engine *e, te_request *r)
{
    uint64_t deadline = conf_now_ms() + CONF_TIMEOUT_MS;
    int64_t id;
    while ((id = te_submit(e, r)) == -EAGAIN && conf_now_ms() < deadline)
        usleep(100);
    return id;
}

int conf_wait_engine(te_engine *e, te_completion *out, int n)
{
    uint64_t deadline = conf_now_ms() + CONF_TIMEOUT_MS;
    int got = 0;
    while (got < n && conf_now_ms() < deadline) {
        int k = te_poll_completions(e, out + got, n - got, 100);
        if (k < 0)
            return k;
        got += k;
    }
    return got;
}

int conf_run(struct conf *c, te_request *r, te_completion *out)
{
    int64_t id = conf_submit(c, r);
    if (id < 0)
        return (int)id;
    int rc = conf_wait_completions(c, out, 1);
    if (rc)
        return rc;
    if (out->req_id != (uint64_t)id)
        return -EPROTO;
    return 0;
}

int conf_expect_remote(struct remote *r, uint64_t off, uint64_t len,
                       uint32_t seed, uint64_t pattern_base)
{
    uint8_t *got = malloc(len ? len : 1);
    if (!got)
        return -ENOMEM;
    int rc = r->ops->fetch(r, off, len, got);
    if (rc) {
        free(got);
        fprintf(stderr, "    fetch of remote bytes failed: %s\n",
                te_strerror(rc));
        return rc;
    }
    for (uint64_t i = 0; i < len; i++) {
        uint8_t want = conf_pattern(pattern_base + i, seed);
        if (got[i] != want) {
            fprintf(stderr, "    remote byte +%llu: got 0x%02x, want 0x%02x "
                    "(%llu bytes checked from +%llu)\n",
                    (unsigned long long)(off + i), got[i], want,
                    (unsigned long long)len, (unsigned long long)off);
            free(got);
            return -EILSEQ;
        }
    }
    free(got);
    return 0;
}

te_config *conf_config_with(const struct conf *c, const char *const *extra)
{
    te_config *cfg = te_config_new();
    if (!cfg)
        return NULL;
    if (c->config_file && te_config_load_file(cfg, c->config_file)) {
        fprintf(stderr, "te-conformance: %s\n", te_last_error());
        te_config_free(cfg);
        return NULL;
    }
    const char *all[128];
    int n = 0;
    for (int i = 0; i < c->nsets; i++)
        all[n++] = c->sets[i];
    for (int i = 0; extra && extra[i] && n < 127; i++)
        all[n++] = extra[i];
    for (int i = 0; i < n; i++) {
        char buf[512];
        snprintf(buf, sizeof(buf), "%s", all[i]);
        char *dot = strchr(buf, '.');
        char *eq = strchr(buf, '=');
        if (!dot || !eq || dot > eq) {
            fprintf(stderr, "te-conformance: --set \"%s\": expected "
                    "section.key=value\n", all[i]);
            te_config_free(cfg);
            return NULL;
        }
        *dot = 0;
        *eq = 0;
        if (te_config_set(cfg, buf, dot + 1, eq + 1)) {
            fprintf(stderr, "te-conformance: %s\n", te_last_error());
            te_config_free(cfg);
            return NULL;
        }
    }
    return cfg;
}
