/*
 * Fault injection, driven by the fault_* keys of section [loopback]
 * (lb_config.c): reordering, delay, failing every Nth op, killing a NIC.
 * All randomness comes from fault_seed so a failing run can be replayed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "lb_internal.h"

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
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(lb_rand(nic) % (i + 1));
        if (j == i)
            continue;
        /* Swap elements i and j, a slice of tmp's size at a time. */
        for (size_t off = 0; off < esize; off += sizeof(tmp)) {
            size_t k = esize - off < sizeof(tmp) ? esize - off : sizeof(tmp);
            memcpy(tmp, b + i * esize + off, k);
            memcpy(b + i * esize + off, b + j * esize + off, k);
            memcpy(b + j * esize + off, tmp, k);
        }
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
        uint64_t now = tpc_now_ns(), dt = now - nic->tok_last_ns;
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
