/*
 * Configuration keys of section [loopback] and the fault injection they
 * drive: reordering, delay, failing every Nth op, killing a NIC, and the
 * per-NIC bandwidth cap. All randomness comes from fault_seed so a failing
 * run can be replayed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "lb_internal.h"

const struct te_plugin_config_key lb_config_keys[] = {
    {"devices", "8", "number of virtual NICs, named lo0..loN-1 (1-256)"},
    {"queue_depth", "1024",
     "send ops that may be outstanding per NIC (1-65536); a non-zero "
     "queue_depth of nic_open overrides it"},
    {"link_gbps", "0",
     "bandwidth cap of each virtual NIC in Gbit/s, charged on the bytes it "
     "moves as a target (WRITE/SEND into it, READ out of it); 0 = uncapped; "
     "a comma list gives NIC i entry i mod count (e.g. \"8,2\": lo0 8, "
     "lo1 2, lo2 8, ...), also reported as each NIC's link speed"},
    {"fault_seed", "1", "seed of every random fault decision (reordering)"},
    {"fault_reorder", "false",
     "targets execute the requests of one poll, and initiators return the "
     "LOCAL completions of one poll, in shuffled order"},
    {"fault_delay_us", "0",
     "hold every request at least this many microseconds before the target "
     "executes it"},
    {"fault_fail_every", "0",
     "N > 0: every Nth WRITE/READ/SEND posted on a NIC fails with -EIO and "
     "delivers nothing (no data, no imm)"},
    {"fault_kill_after", "0",
     "N > 0: posting a WRITE/READ/SEND after the first N kills the NIC: its "
     "ops fail with -ENETDOWN and peers see it as dead"},
    {"ptracer_any", "false",
     "call prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) at init so peers in "
     "other processes may copy to/from this one under yama ptrace_scope=1"},
    {NULL, NULL, NULL},
};

/* ----------------------------------------------------------------- config */

static int lb_cfg_u64(lb_ctx *ctx, const char *key, uint64_t def, uint64_t min,
                      uint64_t max, uint64_t *out)
{
    const char *v = ctx->host.config_get ? ctx->host.config_get(ctx->host.host_ctx, key)
                                         : NULL;
    if (!v) {
        *out = def;
        return 0;
    }
    const char *s = v;
    while (*s == ' ' || *s == '\t')
        s++;
    char *end = NULL;
    errno = 0;
    unsigned long long x = (*s >= '0' && *s <= '9') ? strtoull(s, &end, 0) : 0;
    if (end)
        while (*end == ' ' || *end == '\t')
            end++;
    if (!end || *end || errno || x < min || x > max) {
        lb_ctx_err(ctx, "invalid value '%s' for key %s: expected an integer "
                        "in [%llu, %llu]",
                   v, key, (unsigned long long)min, (unsigned long long)max);
        return -EINVAL;
    }
    *out = x;
    return 0;
}

static int lb_cfg_bool(lb_ctx *ctx, const char *key, bool def, bool *out)
{
    const char *v = ctx->host.config_get ? ctx->host.config_get(ctx->host.host_ctx, key)
                                         : NULL;
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    if (!v) {
        *out = def;
        return 0;
    }
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) {
            *out = true;
            return 0;
        }
        if (!strcasecmp(v, no[i])) {
            *out = false;
            return 0;
        }
    }
    lb_ctx_err(ctx, "invalid value '%s' for key %s: expected true or false",
               v, key);
    return -EINVAL;
}

/* link_gbps: one value, or a comma list (NIC i: entry i mod count). */
static int lb_cfg_speeds(lb_ctx *ctx, struct lb_cfg *c)
{
    const char *v = ctx->host.config_get
                        ? ctx->host.config_get(ctx->host.host_ctx, "link_gbps")
                        : NULL;
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
    struct lb_cfg *c = &ctx->cfg;
    uint64_t devices, qd;
    int rc;
    if ((rc = lb_cfg_u64(ctx, "devices", 8, 1, LB_MAX_DEVICES, &devices)) ||
        (rc = lb_cfg_u64(ctx, "queue_depth", 1024, 1, LB_MAX_QUEUE_DEPTH, &qd)) ||
        (rc = lb_cfg_speeds(ctx, c)) ||
        (rc = lb_cfg_u64(ctx, "fault_seed", 1, 0, UINT64_MAX, &c->fault_seed)) ||
        (rc = lb_cfg_bool(ctx, "fault_reorder", false, &c->fault_reorder)) ||
        (rc = lb_cfg_u64(ctx, "fault_delay_us", 0, 0, 60000000,
                         &c->fault_delay_us)) ||
        (rc = lb_cfg_u64(ctx, "fault_fail_every", 0, 0, UINT64_MAX,
                         &c->fault_fail_every)) ||
        (rc = lb_cfg_u64(ctx, "fault_kill_after", 0, 0, UINT64_MAX,
                         &c->fault_kill_after)) ||
        (rc = lb_cfg_bool(ctx, "ptracer_any", false, &c->ptracer_any)))
        return rc;
    c->devices = (uint32_t)devices;
    c->queue_depth = (uint32_t)qd;
    return 0;
}

/* ------------------------------------------------------------- randomness */

uint64_t lb_rand(lb_nic *nic)
{
    /* splitmix64: any seed, including 0, gives a full-period sequence. */
    uint64_t z = (nic->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void lb_shuffle(lb_nic *nic, void *base, size_t n, size_t esize)
{
    unsigned char tmp[128], *b = base;
    if (esize > sizeof(tmp))
        return;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(lb_rand(nic) % (i + 1));
        if (j == i)
            continue;
        memcpy(tmp, b + i * esize, esize);
        memcpy(b + i * esize, b + j * esize, esize);
        memcpy(b + j * esize, tmp, esize);
    }
}

/* ----------------------------------------------------------------- faults */

bool lb_fault_fail_now(lb_nic *nic)
{
    uint64_t n = nic->ctx->cfg.fault_fail_every;
    if (!n || nic->wrs_posted % n)
        return false;
    lb_err(nic, "fault_fail_every=%llu: failing op #%llu with -EIO",
           (unsigned long long)n, (unsigned long long)nic->wrs_posted);
    return true;
}

bool lb_fault_kill_now(lb_nic *nic)
{
    uint64_t n = nic->ctx->cfg.fault_kill_after;
    return n && nic->wrs_posted > n;
}

void lb_nic_kill(lb_nic *nic)
{
    lb_log(nic->ctx, 1, "%s: fault_kill_after=%llu reached: the NIC is dead",
           nic->name, (unsigned long long)nic->ctx->cfg.fault_kill_after);
    pthread_mutex_lock(&nic->in_lock);
    atomic_store(&nic->dead, true);
    pthread_mutex_unlock(&nic->in_lock);
    for (uint32_t i = 0; i < nic->npeers; i++) {
        if (nic->peers[i])
            lb_peer_kill(nic, nic->peers[i]);
    }
    lb_recvq_fail(nic, -ENETDOWN);
    /* Initiators see DEAD in the channel (or the hangup) and fail their ops. */
    lb_inbound_free_all(nic, LB_ST_DEAD);
    nic->pending.count = 0;
    if (nic->listen_fd >= 0) {
        close(nic->listen_fd);
        nic->listen_fd = -1;
    }
    lb_err(nic, "NIC killed by fault injection (fault_kill_after=%llu)",
           (unsigned long long)nic->ctx->cfg.fault_kill_after);
}

bool lb_link_admit(lb_nic *nic, uint64_t len)
{
    uint64_t gbps = nic->link_gbps;
    if (!gbps || !len)
        return true;
    if (nic->tokens <= 0) {
        uint64_t now = lb_now_ns(), dt = now - nic->tok_last_ns;
        if (dt > 1000000000ull)
            dt = 1000000000ull;
        nic->tok_last_ns = now;
        /* gbps Gbit/s = gbps/8 bytes per ns; burst: 1 ms of traffic. */
        int64_t burst = (int64_t)(gbps * 125000);
        if (burst < 65536)
            burst = 65536;
        nic->tokens += (int64_t)(dt * gbps / 8);
        if (nic->tokens > burst)
            nic->tokens = burst;
        if (nic->tokens <= 0)
            return false;
    }
    /* Debt is allowed: a 16 MiB write must not wait for a 16 MiB bucket. */
    nic->tokens -= (int64_t)len;
    return true;
}
