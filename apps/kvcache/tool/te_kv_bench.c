/*
 * te-kv bench: a decoder and --prefillers prefillers as engines of one
 * process: transfer vs compute overlap, last layer -> decoder notified
 * latency, aggregate Gbit/s against the loopback link caps (docs/kvcache.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "te_kv_tool.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One run: `requests` requests spread over the prefillers, one at a time
 * per prefiller; per request the exposed transfer time (end - start - the
 * layers' compute) as a fraction of one layer's compute. */
int kv_tool_run_bench(const struct opts *o)
{
    te_kv_shape s;
    if (kv_tool_shape_of(o, &s))
        return 2;
    uint32_t np = o->prefillers ? o->prefillers : 1;
    if (np > 16)
        np = 16;
    uint32_t per = te_kv_pages_for(&s, o->tokens);
    te_engine *pe[16];
    te_kv_prefiller *pf[16];
    te_engine *de = kv_tool_engine(o);
    te_kv_decoder_opts dopt = {.shape = s, .pool_pages = per * (np + 1),
                               .max_requests = np + 1};
    if (te_kv_decoder_new(de, &dopt, &g_dec)) {
        fprintf(stderr, "te-kv bench: %s\n", te_kv_last_error());
        return 1;
    }
    uint32_t ids[16];
    for (uint32_t i = 0; i < np; i++) {
        pe[i] = kv_tool_engine(o);
        te_kv_prefiller_opts po = {.shape = s, .max_pages = per,
                                   .layer_us = o->layer_us,
                                   .ref_tokens = o->ref_tokens,
                                   .no_fill = o->no_fill};
        uint8_t addr[TE_ADDR_MAX];
        size_t alen = sizeof(addr);
        te_engine_address(pe[i], 0, addr, &alen);
        if (te_kv_prefiller_new(pe[i], &po, &pf[i]) ||
            te_kv_decoder_add_prefiller(g_dec, addr, alen, &ids[i])) {
            fprintf(stderr, "te-kv bench: %s\n", te_kv_last_error());
            return 1;
        }
    }
    struct tally t = {0};
    t.no_verify = o->no_fill;
    uint32_t R = o->requests;
    t.t_end = calloc(R + 1, sizeof(double));
    double *t_start = calloc(R + 1, sizeof(double));
    double compute = (double)o->layer_us * 1e-6 * o->tokens /
                     (o->ref_tokens ? o->ref_tokens : 1);
    double t0 = kv_tool_now_s();
    uint32_t next = 1;
    while (atomic_load(&t.done) < (int)R && kv_tool_now_s() < t0 + 300) {
        /* keep one request per prefiller in flight */
        while (next <= R && te_kv_decoder_inflight(g_dec) < np) {
            t_start[next] = kv_tool_now_s();
            if (te_kv_decoder_submit(g_dec, ids[next % np], next, o->tokens,
                                     120000, kv_tool_on_done, &t))
                break;
            next++;
        }
        usleep(100);
    }
    double dt = kv_tool_now_s() - t0;
    /* Per request: decoder notified - last layer computed (prefiller's
     * clock = ours: one process, CLOCK_MONOTONIC). That is the transfer
     * time not hidden behind compute (the last layer's own bytes, the
     * hidden state, the notification), in us and in layers' compute. */
    double *exposed = calloc(R, sizeof(double)), *lat = calloc(R, sizeof(double));
    uint32_t ne = 0;
    for (uint32_t r = 1; r <= R; r++) {
        uint64_t tl = te_kv_prefiller_last_layer_ns(pf[r % np], r);
        if (t.t_end[r] <= 0 || !tl)
            continue;
        double gap = t.t_end[r] - (double)tl * 1e-9;
        exposed[ne] = gap / (compute > 0 ? compute : 1e-9);
        lat[ne++] = gap * 1e6;
    }
    qsort(exposed, ne, sizeof(double), cmp_double);
    qsort(lat, ne, sizeof(double), cmp_double);
    uint64_t bytes = (uint64_t)atomic_load(&t.ok) * s.layers * per *
                     te_kv_page_bytes(&s);
    double gbps = (double)bytes * 8 / dt / 1e9;
    /* The binding cap: the decoder's ingress or the prefillers' egress. */
    double cap_in = o->link_gbps * te_engine_nic_count(de, 0);
    double cap_out = o->link_gbps * np * te_engine_nic_count(pe[0], 0);
    double caps = cap_in < cap_out ? cap_in : cap_out;
    printf("{\"model\": \"%s\", \"layers\": %u, \"tokens\": %u, \"pages\": %u, "
           "\"page_bytes\": %" PRIu64 ", \"prefillers\": %u, \"requests\": %u, "
           "\"ok\": %d, \"layer_ms\": %.3f, \"exposed_p50_of_layer\": %.4f, "
           "\"exposed_p99_of_layer\": %.4f, \"notify_p50_us\": %.1f, "
           "\"notify_p99_us\": %.1f, \"gbit_per_s\": %.2f, "
           "\"link_gbps\": %g, \"caps_gbit\": %g, \"of_caps\": %.3f, "
           "\"verified\": %s}\n",
           s.name, s.layers, o->tokens, per, te_kv_page_bytes(&s), np, R,
           atomic_load(&t.ok), compute * 1e3, ne ? exposed[ne / 2] : -1,
           ne ? exposed[ne * 99 / 100] : -1, ne ? lat[ne / 2] : -1,
           ne ? lat[ne * 99 / 100] : -1, gbps, o->link_gbps, caps,
           caps > 0 ? gbps / caps : 0,
           o->no_fill ? "\"skipped (--no-fill)\"" :
           /* nothing that did not arrive is claimed verified */
           t.verify_bad || !atomic_load(&t.ok) ? "false" : "true");
    free(lat);
    te_kv_decoder_free(g_dec);
    for (uint32_t i = 0; i < np; i++) {
        te_kv_prefiller_free(pf[i]);
        kv_tool_engine_destroy(pe[i]);
    }
    kv_tool_engine_destroy(de);
    free(exposed);
    free(t_start);
    free(t.t_end);
    return atomic_load(&t.ok) == (int)R && !t.verify_bad ? 0 : 1;
}
