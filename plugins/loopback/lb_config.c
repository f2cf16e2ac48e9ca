/*
 * Configuration keys of section [loopback] (plugin ABI 1.4 typed keys: the
 * core validates them when the engine is created and hands back the
 * values; docs/loopback.md repeats this table). Only link_gbps, a list,
 * is parsed here.
 */
#include <errno.h>
#include <stdlib.h>

#include "lb_internal.h"

const struct te_plugin_config_param lb_config_params[] = {
    TE_PCFG_U64_KEY("devices", "8", 1, LB_MAX_DEVICES,
                    "number of virtual NICs, named lo0..loN-1"),
    TE_PCFG_U64_KEY("queue_depth", "1024", 1, LB_MAX_QUEUE_DEPTH,
                    "send ops that may be outstanding per NIC; a non-zero "
                    "queue_depth of nic_open overrides it"),
    TE_PCFG_STRING_KEY(
        "link_gbps", "0",
        "bandwidth cap of each virtual NIC in Gbit/s (0-1000000), charged on "
        "the bytes it moves as a target (WRITE/SEND into it, READ out of "
        "it); 0 = uncapped; a comma list gives NIC i entry i mod count (e.g. "
        "\"8,2\": lo0 8, lo1 2, lo2 8, ...), also reported as each NIC's "
        "link speed"),
    TE_PCFG_U64_KEY("fault_seed", "1", 0, UINT64_MAX,
                    "seed of every random fault decision (reordering)"),
    TE_PCFG_BOOL_KEY("fault_reorder", "false",
                     "targets execute the requests of one poll, and "
                     "initiators return the LOCAL completions of one poll, in "
                     "shuffled order"),
    TE_PCFG_U64_KEY("fault_delay_us", "0", 0, 60000000,
                    "hold every request at least this many microseconds "
                    "before the target executes it"),
    TE_PCFG_U64_KEY("fault_fail_every", "0", 0, UINT64_MAX,
                    "N > 0: every Nth WRITE/READ/SEND posted on a NIC fails "
                    "with -EIO and delivers nothing (no data, no imm)"),
    TE_PCFG_U64_KEY("fault_kill_after", "0", 0, UINT64_MAX,
                    "N > 0: posting a WRITE/READ/SEND after the first N kills "
                    "the NIC: its ops fail with -ENETDOWN and peers see it as "
                    "dead"),
    TE_PCFG_BOOL_KEY("ptracer_any", "false",
                     "call prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) at init "
                     "so peers in other processes may copy to/from this one "
                     "under yama ptrace_scope=1"),
    TE_PCFG_U64_KEY("copy_threads", "2", 1, LB_COPY_MAX_HELPERS + 1,
                    "threads that copy the bytes of a target's writes of 16 "
                    "KiB or more: the thread polling the NIC plus "
                    "copy_threads - 1 helpers of the plugin, started at the "
                    "first such write and asleep after 200 us without one; "
                    "1 = the polling thread alone"),
    TE_PCFG_END};

/* link_gbps: one value, or a comma list (NIC i: entry i mod count). */
static int lb_cfg_speeds(lb_ctx *ctx, struct lb_cfg *c)
{
    const char *v = ctx->host.config_get(ctx->host.host_ctx, "link_gbps");
    c->n_link_gbps = 1;
    c->link_gbps_list[0] = 0;
    if (v) {
        const char *s = v;
        uint32_t n = 0;
        for (;;) {
            while (*s == ' ' || *s == '\t')
                s++;
            char *end = NULL;
            errno = 0;
            unsigned long long x = (*s >= '0' && *s <= '9') ? strtoull(s, &end, 10) : 0;
            if (!end || errno || x > 1000000 || n == LB_MAX_LINK_SPEEDS) {
                lb_ctx_err(ctx, "invalid value '%s' for key link_gbps: expected "
                                "Gbit/s in [0, 1000000], or a comma list of at "
                                "most %d of them", v, LB_MAX_LINK_SPEEDS);
                return -EINVAL;
            }
            c->link_gbps_list[n++] = x;
            while (*end == ' ' || *end == '\t')
                end++;
            if (*end == 0)
                break;
            if (*end != ',') {
                lb_ctx_err(ctx, "invalid value '%s' for key link_gbps: "
                                "unexpected '%c'", v, *end);
                return -EINVAL;
            }
            s = end + 1;
        }
        c->n_link_gbps = n;
    }
    c->link_gbps = c->link_gbps_list[0];
    return 0;
}

uint64_t lb_link_gbps(const lb_ctx *ctx, int idx)
{
    return ctx->cfg.link_gbps_list[(uint32_t)idx % ctx->cfg.n_link_gbps];
}

int lb_config_parse(lb_ctx *ctx)
{
    /* The entry point refused cores older than 1.4: the getters exist. */
    const struct te_plugin_host *h = &ctx->host;
    struct lb_cfg *c = &ctx->cfg;
    void *hc = h->host_ctx;
    uint64_t devices, qd, copy_threads;
    int reorder, ptracer, rc;
    if ((rc = h->config_u64(hc, "devices", &devices)) ||
        (rc = h->config_u64(hc, "queue_depth", &qd)) ||
        (rc = lb_cfg_speeds(ctx, c)) ||
        (rc = h->config_u64(hc, "fault_seed", &c->fault_seed)) ||
        (rc = h->config_bool(hc, "fault_reorder", &reorder)) ||
        (rc = h->config_u64(hc, "fault_delay_us", &c->fault_delay_us)) ||
        (rc = h->config_u64(hc, "fault_fail_every", &c->fault_fail_every)) ||
        (rc = h->config_u64(hc, "fault_kill_after", &c->fault_kill_after)) ||
        (rc = h->config_bool(hc, "ptracer_any", &ptracer)) ||
        (rc = h->config_u64(hc, "copy_threads", &copy_threads)))
        return rc;
    c->copy_threads = (uint32_t)copy_threads;
    c->devices = (uint32_t)devices;
    c->queue_depth = (uint32_t)qd;
    c->fault_reorder = reorder;
    c->ptracer_any = ptracer;
    return 0;
}
