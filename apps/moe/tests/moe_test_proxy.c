/*
 * moe_proxy: the proxy thread driven by a CPU producer thread in place of
 * a GPU kernel (same ring protocol): 256 writes through an 8-entry ring
 * (wrap-around and back-pressure), the receiver's flag raised by its
 * ImmCounter, the bytes checked; a bad entry (unknown target, out of
 * bounds) stops the ring with a reason and writes nothing; a watch that
 * times out raises TE_MOE_FLAG_FAILED.
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
    te_moe_proxy_counts(pa, &sub, &done);
    CHECK(sub == N, "submitted %llu", (unsigned long long)sub);

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
    /* A watch still armed at destroy is disarmed there: the engine's
     * -ECANCELED at te_engine_destroy must not reach freed memory (ASan). */
    CHECK(te_moe_proxy_watch(pb, imm + 2, 1, 0, 1, 60000) == 0, "watch 3");
    CHECK(te_moe_proxy_watch(pb, imm + 3, 1, 0, 1, 60000) == -EBUSY, "second watch on a flag");
    te_moe_proxy_destroy(pb);
    te_mr_dereg(a, smr);
    te_mr_dereg(b, dmr);
    te_engine_destroy(a);
    te_engine_destroy(b);
    free(src), free(dst), free(ma), free(mb);
    printf("%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
