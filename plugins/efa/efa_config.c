/*
 * Configuration keys of section [efa] (te-info shows this table; docs/efa.md
 * repeats it): typed keys of plugin ABI 1.4, validated by the core when
 * the engine is created; only the text keys are checked here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "efa_internal.h"

const struct te_plugin_config_param efa_config_params[] = {
    TE_PCFG_STRING_KEY(
        "provider", "efa",
        "libfabric provider: efa on AWS; shm (same host) or tcp;ofi_rxm "
        "(also across hosts) for tests; any FI_EP_RDM provider with RMA"),
    TE_PCFG_U64_KEY(
        "devices", "0", 0, EFA_MAX_DEVICES,
        "NICs to expose; 0 = one per distinct fi_info domain of the provider; "
        "more than that opens several endpoints per domain (virtual NICs, "
        "e.g. to exercise multi-NIC sharding over shm or tcp)"),
    TE_PCFG_STRING_KEY(
        "node", "",
        "source address given to fi_getinfo with FI_SOURCE, e.g. 127.0.0.1 "
        "for tcp;ofi_rxm (which otherwise picks the first interface); "
        "empty = the provider's choice"),
    TE_PCFG_STRING_KEY(
        "domain", "",
        "use only fi_info entries of this domain name (e.g. rdmap16s27-rdm, "
        "lo); empty = all"),
    TE_PCFG_U64_KEY(
        "queue_depth", "0", 0, 1u << 20,
        "operations outstanding per NIC; 0 = the provider's tx_attr->size; a "
        "non-zero queue_depth of nic_open overrides it"),
    TE_PCFG_BOOL_KEY(
        "require_native_rma", "false",
        "refuse a provider whose RMA is emulated by messages (e.g. udp;ofi_rxd, "
        "or efa without device RDMA write) instead of running with a warning"),
    TE_PCFG_ENUM_KEY(
        "inject", "auto", "auto|on|off",
        "small writes with fi_inject_write[data] (no completion to read); "
        "auto = only where the probe found inject correct and the provider "
        "reports no remote errors anyway"),
    TE_PCFG_ENUM_KEY(
        "completion", "auto", "auto|default|transmit|delivery",
        "completion level of writes; auto = the cheapest level the probe "
        "found to complete imm-only writes and to report a bad remote key"),
    TE_PCFG_ENUM_KEY(
        "av_insert", "first_use", "first_use|at_add",
        "when a peer enters the address vector: on its first operation or the "
        "next poll (all peers added since in one fi_av_insert), or inside "
        "peer_add"),
    TE_PCFG_ENUM_KEY(
        "hmem", "auto", "auto|on|off",
        "ask for FI_HMEM so CUDA memory can be registered; auto = when built "
        "with CUDA and /dev/nvidiactl exists (FI_HMEM changes the paths of "
        "some providers, e.g. shm stops injecting)"),
    TE_PCFG_BOOL_KEY(
        "watch_peers", "true",
        "watch peers on this host (same boot id, matching process start time) "
        "with a pidfd: a dead peer's operations fail at once instead of "
        "waiting for the provider (shm never reports it)"),
    TE_PCFG_BOOL_KEY(
        "shm_lock_repair", "true",
        "shm: when a watched peer process dies holding the spin lock of its "
        "shared-memory region (libfabric 1.17 would spin on it forever, "
        "freezing the worker), release it; one thread per process, blocked "
        "in poll(2) on the peers' pidfds while any is watched"),
    TE_PCFG_BOOL_KEY(
        "shm_bell", "true",
        "shm: give each NIC a doorbell (a shared word and a socket in "
        "/dev/shm) that same-host peers ring after posting to it while it "
        "sleeps, so its idle worker blocks instead of napping between polls; "
        "false = nap (engine.idle_sleep_us growing to idle_sleep_max_us). "
        "Peers are rung whatever this says (docs/efa.md, Doorbell)"),
    TE_PCFG_U64_KEY(
        "stall_timeout_ms", "5000", 0, 3600000,
        "declare a peer down when the provider refuses every operation to it "
        "(-FI_EAGAIN) this long while none is in flight (tcp;ofi_rxm after "
        "the peer died); 0 = never"),
    TE_PCFG_U64_KEY(
        "probe_timeout_ms", "200", 1, 60000,
        "bound of each probe wait for an event a broken provider never "
        "delivers (events a working one delivers at once get 8x, >= 2 s)"),
    TE_PCFG_U64_KEY(
        "auth_forget_idle_ms", "600000", 0, 2592000000ull,
        "with engine.auth_key: a remote that no peer of this engine refers "
        "to and that sent nothing this long is asked to forget its "
        "authentication and prove itself again before its next operation "
        "(its record and address vector entry are freed); 0 = keep every "
        "record for the NIC's life (docs/efa.md, Authentication)"),
    TE_PCFG_U64_KEY(
        "bye_wait_ms", "100", 0, 10000,
        "as a NIC closes it sends each live peer a goodbye, so the peer "
        "reports it down as an orderly close (-ESHUTDOWN) at once; the "
        "longest each NIC waits for those sends; 0 = no goodbyes, sent or "
        "received (peers then learn of a close from a failed write, the "
        "process's exit or engine.peer_timeout_ms; docs/efa.md, Orderly "
        "close)"),
    TE_PCFG_END};

/* A text key into a fixed buffer (the core has checked nothing of it). */
static int cfg_str(efa_ctx *ctx, const char *key, char *out, size_t len)
{
    const char *v = ctx->host.config_get(ctx->host.host_ctx, key);
    if (!v)
        v = "";
    if (strlen(v) >= len) {
        efa_ctx_err(ctx, "value of key %s is too long (%zu bytes, at most "
                    "%zu)", key, strlen(v), len - 1);
        return -EINVAL;
    }
    snprintf(out, len, "%s", v);
    return 0;
}

int efa_config_parse(efa_ctx *ctx)
{
    /* The entry point refused cores older than 1.4: the getters exist. */
    const struct te_plugin_host *h = &ctx->host;
    void *hc = h->host_ctx;
    struct efa_cfg *c = &ctx->cfg;
    uint64_t devices, qd, stall, probe, forget, bye;
    int native, watch, repair, bell, rc;
    if ((rc = cfg_str(ctx, "provider", c->provider, sizeof(c->provider))) ||
        (rc = cfg_str(ctx, "node", c->node, sizeof(c->node))) ||
        (rc = cfg_str(ctx, "domain", c->domain, sizeof(c->domain))) ||
        (rc = h->config_u64(hc, "devices", &devices)) ||
        (rc = h->config_u64(hc, "queue_depth", &qd)) ||
        (rc = h->config_bool(hc, "require_native_rma", &native)) ||
        (rc = h->config_enum(hc, "inject", &c->inject)) ||
        (rc = h->config_enum(hc, "completion", &c->completion)) ||
        (rc = h->config_enum(hc, "av_insert", &c->av_insert)) ||
        (rc = h->config_enum(hc, "hmem", &c->hmem)) ||
        (rc = h->config_bool(hc, "watch_peers", &watch)) ||
        (rc = h->config_bool(hc, "shm_lock_repair", &repair)) ||
        (rc = h->config_bool(hc, "shm_bell", &bell)) ||
        (rc = h->config_u64(hc, "stall_timeout_ms", &stall)) ||
        (rc = h->config_u64(hc, "probe_timeout_ms", &probe)) ||
        (rc = h->config_u64(hc, "auth_forget_idle_ms", &forget)) ||
        (rc = h->config_u64(hc, "bye_wait_ms", &bye)))
        return rc;
    /* The choices' order is the enums' (efa_tristate, efa_completion,
     * efa_av_mode); the ranges fit 32 bits. */
    c->devices = (uint32_t)devices;
    c->queue_depth = (uint32_t)qd;
    c->require_native_rma = native;
    c->watch_peers = watch;
    c->shm_lock_repair = repair;
    c->shm_bell = bell;
    c->stall_timeout_ms = (uint32_t)stall;
    c->probe_timeout_ms = (uint32_t)probe;
    c->auth_forget_idle_ms = forget;
    c->bye_wait_ms = (uint32_t)bye;
    if (!c->provider[0]) {
        efa_ctx_err(ctx, "key provider is empty: name a libfabric provider "
                    "(efa, shm, tcp;ofi_rxm, ...)");
        return -EINVAL;
    }
    return 0;
}
