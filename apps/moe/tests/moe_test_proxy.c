/*
 * moe_proxy: the proxy thread driven by a CPU producer thread in place of
 * a GPU kernel (same ring protocol): 256 writes through an 8-entry ring
 * (wrap-around and back-pressure), the receiver's flag raised by its
 * ImmCounter, the bytes checked; an entry after a pause (the proxy
 * dozing) still taken; a bad entry (unknown target, out of
 * bounds) stops the ring with a reason and writes nothing; a watch that
 * times out raises TE_MOE_FLAG_FAILED; a write that fails is counted as
 * failed (not completed) and stops the ring; a watch still armed at
 * destroy and met afterwards does not write into the ring.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "te/moe_proxy.h"

#define N 256 /* N * CHUNK: a multiple of 4096 (aligned_alloc) */
#define CHUNK 256

static int failures;
#define CHECK(c, ...) do { if (!(c)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
    printf(__VA_ARGS__); printf("\n"); } } while (0)

/* The producer's side of the ring: what a kernel does with a volatile
 * store after __threadfence_system(). */
static int post(te_moe_ring *r, uint64_t *posted, te_moe_ring_entry e)
{
    te_moe_ring_entry *ents = te_moe_ring_entries(r);
    for (int spins = 0; *posted - __atomic_load_n(&r->consumed, __ATOMIC_ACQUIRE) >= r->entries;
         spins++) {
        if (__atomic_load_n(&r->error, __ATOMIC_ACQUIRE) || spins > 2000000)
            return -1;
        usleep(1);
    }
    te_moe_ring_entry *slot = &ents[*posted & (r->entries - 1)];
    uint32_t seq = (uint32_t)(*posted + 1);
    e.seq = 0;
    memcpy((void *)slot, &e, sizeof(e));
    __atomic_store_n(&slot->seq, seq, __ATOMIC_RELEASE);
    (*posted)++;
    return 0;
}

static int wait_flag(volatile uint32_t *f, uint32_t want, int ms)
{
    for (int i = 0; i < ms * 10; i++) {
        if (__atomic_load_n(f, __ATOMIC_ACQUIRE) == want)
            return 0;
        usleep(100);
    }
    return -1;
}

/* Writes through a proxy on an engine whose every write fails: counted as
 * failures, and the ring's error says so. */
static void failed_write_counted(te_engine *b, const te_mr_desc *dd, const void *addr,
                                 size_t alen)
{
    te_config *cfg = te_config_new();
    te_engine *c;
    te_config_set(cfg, "loopback", "fault_fail_every", "1");
    int rc = te_engine_create(cfg, &c);
    te_config_free(cfg);
    CHECK(rc == 0, "engine c: %s", te_last_error());
    if (rc)
        return;
    static uint8_t src[4096];
    te_mr *mr;
    te_peer peer;
    void *mem = calloc(1, te_moe_ring_bytes(8, 1));
    te_moe_proxy *p;
    CHECK(te_mr_reg(c, 0, src, sizeof(src), TE_MR_LOCAL, TE_MEM_HOST, &mr) == 0 &&
          te_peer_add(c, 0, addr, alen, &peer) == 0, "setup c: %s", te_last_error());
    CHECK(te_moe_proxy_create(c, mem, 8, 1, &p) == 0, "proxy c");
    CHECK(te_moe_proxy_target(p, 0, peer, mr, dd) == 0, "target c");
    uint64_t posted = 0, sub = 0, done = 0;
    te_moe_ring_entry e = {.target = 0, .imm = 0x5200, .len = 64};
    CHECK(post(mem, &posted, e) == 0, "post to c");
    for (int i = 0; i < 100000 && te_moe_proxy_failed(p) < 1; i++)
        usleep(100);
    te_moe_proxy_counts(p, &sub, &done);
    te_moe_ring *r = mem;
    CHECK(sub == 1 && done == 0 && te_moe_proxy_failed(p) == 1,
          "a failed write: submitted %llu, completed %llu, failed %llu",
          (unsigned long long)sub, (unsigned long long)done,
          (unsigned long long)te_moe_proxy_failed(p));
    CHECK(__atomic_load_n(&r->error, __ATOMIC_ACQUIRE) != 0 &&
          strstr(te_moe_proxy_error(p), "failed"), "ring error %d: %s", r->error,
          te_moe_proxy_error(p));
    te_moe_proxy_destroy(p);
    te_mr_dereg(c, mr);
    te_engine_destroy(c);
    free(mem);
}

int main(void)
{
    te_engine *a, *b;
    if (te_engine_create(NULL, &a) || te_engine_create(NULL, &b)) {
        printf("engine: %s\n", te_last_error());
        return 1;
    }
    uint8_t *src = aligned_alloc(4096, N * CHUNK), *dst = aligned_alloc(4096, N * CHUNK);
    for (int i = 0; i < N * CHUNK; i++)
        src[i] = (uint8_t)(i * 7 + 3);
    memset(dst, 0, N * CHUNK);
    te_mr *smr, *dmr;
    te_mr_desc dd;
    uint8_t addr[TE_ADDR_MAX];
    size_t alen = sizeof(addr);
    te_peer peer;
    if (te_mr_reg(a, 0, src, N * CHUNK, TE_MR_LOCAL, TE_MEM_HOST, &smr) ||
        te_mr_reg(b, 0, dst, N * CHUNK, TE_MR_REMOTE_WRITE, TE_MEM_HOST, &dmr) ||
        te_mr_describe(dmr, &dd) || te_engine_address(b, 0, addr, &alen) ||
        te_peer_add(a, 0, addr, alen, &peer)) {
        printf("setup: %s\n", te_last_error());
        return 1;
    }
    void *ma = calloc(1, te_moe_ring_bytes(8, 4)), *mb = calloc(1, te_moe_ring_bytes(8, 4));
    te_moe_proxy *pa, *pb;
    CHECK(te_moe_proxy_create(a, ma, 8, 4, &pa) == 0, "proxy a");
    CHECK(te_moe_proxy_create(b, mb, 8, 4, &pb) == 0, "proxy b");
    CHECK(te_moe_proxy_target(pa, 1, peer, smr, &dd) == 0, "target");
    const uint32_t imm = 0x5100;
    CHECK(te_moe_proxy_watch(pb, imm, N, 2, 77, 10000) == 0, "watch");
    uint64_t posted = 0;
    /* Chunks in reverse order, so an offset mix-up cannot go unnoticed. */
    for (int i = 0; i < N; i++) {
        uint64_t k = N - 1 - (uint64_t)i;
        te_moe_ring_entry e = {.target = 1, .imm = imm, .src_off = k * CHUNK,
                               .dst_off = k * CHUNK, .len = CHUNK};
        CHECK(post(ma, &posted, e) == 0, "post %d", i);
    }
    volatile uint32_t *fb = te_moe_ring_flags(mb);
    CHECK(wait_flag(&fb[2], 77, 10000) == 0, "flag not raised: %u", fb[2]);
    CHECK(memcmp(src, dst, N * CHUNK) == 0, "bytes differ");
    uint64_t sub, done;
    /* A write is counted submitted before its callback can run, so once
     * the flag rose every write is counted (no waiting for the count). */
    te_moe_proxy_counts(pa, &sub, &done);
    CHECK(sub == N, "submitted %llu", (unsigned long long)sub);

    /* An entry after a pause longer than the proxy's doze threshold
     * (100 ms without entries: it then naps 1 ms at a time) is still
     * taken and written. */
    usleep(250000);
    memset(dst, 0, CHUNK);
    CHECK(te_moe_proxy_watch(pb, imm + 5, 1, 0, 41, 10000) == 0, "watch after a pause");
    te_moe_ring_entry late = {.target = 1, .imm = imm + 5, .len = CHUNK};
    CHECK(post(ma, &posted, late) == 0, "post after a pause");
    CHECK(wait_flag(&fb[0], 41, 10000) == 0, "flag after a pause: %u", fb[0]);
    CHECK(memcmp(src, dst, CHUNK) == 0, "bytes after a pause");
    fb[0] = 0; /* the watch is spent; flag 0 serves again below */

    /* A watch nobody satisfies fails its flag at the deadline. */
    CHECK(te_moe_proxy_watch(pb, imm + 1, 1, 3, 5, 200) == 0, "watch 2");
    CHECK(wait_flag(&fb[3], TE_MOE_FLAG_FAILED, 5000) == 0, "timeout flag %u", fb[3]);

    /* Out-of-bounds entry: refused, ring stopped, nothing written. */
    memset(dst, 0, N * CHUNK);
    te_moe_ring_entry bad = {.target = 1, .imm = imm, .src_off = 0,
                             .dst_off = (N - 1) * CHUNK, .len = 2 * CHUNK};
    post(ma, &posted, bad);
    te_moe_ring *ra = ma;
    for (int i = 0; i < 50000 && !__atomic_load_n(&ra->error, __ATOMIC_ACQUIRE); i++)
        usleep(100);
    CHECK(__atomic_load_n(&ra->error, __ATOMIC_ACQUIRE) != 0 && strstr(te_moe_proxy_error(pa), "outside"), "bounds: %d %s",
          ra->error, te_moe_proxy_error(pa));
    te_moe_proxy_destroy(pa);

    /* Unknown target on a fresh ring. */
    CHECK(te_moe_proxy_create(a, ma, 8, 4, &pa) == 0, "proxy a again");
    posted = 0;
    te_moe_ring_entry unknown = {.target = 9, .imm = imm, .len = CHUNK};
    post(ma, &posted, unknown);
    for (int i = 0; i < 50000 && !__atomic_load_n(&ra->error, __ATOMIC_ACQUIRE); i++)
        usleep(100);
    CHECK(__atomic_load_n(&ra->error, __ATOMIC_ACQUIRE) != 0 && strstr(te_moe_proxy_error(pa), "unknown target"), "target: %s",
          te_moe_proxy_error(pa));
    usleep(100000);
    int zero = 1;
    for (int i = 0; i < N * CHUNK; i++)
        zero &= dst[i] == 0;
    CHECK(zero, "a refused entry wrote bytes");
    te_moe_proxy_destroy(pa);
    failed_write_counted(b, &dd, addr, alen);
    /* Watches still armed at destroy are taken away (te_imm_disarm): a
     * later arrival of their imm is banked for whoever comes next, not
     * consumed by a dead proxy; neither may reach freed memory (ASan) nor
     * write into the ring, which the owner may reuse. */
    CHECK(te_moe_proxy_watch(pb, imm + 2, 1, 0, 1, 60000) == 0, "watch 3");
    CHECK(te_moe_proxy_watch(pb, imm + 3, 1, 0, 1, 60000) == -EBUSY, "second watch on a flag");
    CHECK(te_moe_proxy_watch(pb, imm + 4, 1, 1, 9, 60000) == 0, "watch 4");
    te_moe_proxy_destroy(pb);
    te_request q;
    te_request_init(&q, TE_OP_WRITE);
    q.flags = TE_F_IMM;
    q.imm = imm + 4;
    q.u.xfer.peer = peer;
    q.u.xfer.local = smr;
    q.u.xfer.remote = &dd;
    q.u.xfer.len = 64;
    te_completion qc;
    CHECK(te_submit(a, &q) > 0, "write after destroy: %s", te_last_error());
    /* In caller mode (TE_ENGINE_PROGRESS=caller, ctest moe_proxy_caller)
     * the proxies that progressed the engines are gone: this thread
     * progresses b, the write's target, while it waits. */
    int caller = te_engine_progress_mode(b) == TE_PROGRESS_CALLER, got = 0;
    for (int i = 0; i < 100000 && got == 0; i++) {
        if (caller)
            te_progress(b, -1, 0);
        got = te_poll_completions(a, &qc, 1, caller ? 0 : 10000);
        if (caller && got == 0)
            usleep(100);
    }
    CHECK(got == 1 && qc.status == 0, "its completion");
    /* The initiator's completion can come before the target's worker has
     * banked the imm (loopback answers a write once it has executed it,
     * the imm is counted when the target's poll reports it): wait for the
     * bank, bounded, then look at the watch. */
    uint64_t banked = 0;
    int armed = 1;
    int prc = 0;
    for (int i = 0; i < 10000; i++) {
        if (caller)
            te_progress(b, -1, 0);
        if ((prc = te_imm_poll(b, imm + 4, &banked, &armed)) != 0 || banked)
            break;
        usleep(1000);
    }
    CHECK(prc == 0, "te_imm_poll: %s", te_last_error());
    CHECK(banked == 1 && !armed,
          "watch 4 not disarmed at destroy: banked %llu armed %d", (unsigned long long)banked, armed);
    te_mr_dereg(a, smr);
    te_mr_dereg(b, dmr);
    te_engine_destroy(a);
    te_engine_destroy(b); /* every callback has run */
    CHECK(fb[0] == 0 && fb[1] == 0, "flags written after destroy: %u %u", fb[0], fb[1]);
    free(src), free(dst), free(ma), free(mb);
    printf("%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
