/*
 * cold-branch-bench: what a thread's sleep costs the code it runs next.
 *
 * A latency-bound thread (te-bench's immlat client, a decode loop between
 * steps) sleeps between operations; on this project's VMs the submit after
 * a sleep took ~4 x as long as back to back. This program separates the
 * candidate causes with four synthetic bodies, each run once right after a
 * short nanosleep ("after sleep") and once again at once ("right after"):
 *
 *   straight   1500 straight-line ALU instructions (about 10 KB of code)
 *   not-taken  300 conditional branches that are never taken, 900 ALU
 *   taken      the same 300 branches, always taken
 *   mixed      the same, taken by a fixed 64-bit pattern (half of them)
 *
 * and two data bodies (16 dependent loads, each on its own page, or all
 * in one page 256 bytes apart). Mean ns per
 * run over --rounds rounds, clock overhead included in both columns
 * (docs/benchmarks.md, "Cold submits: taken branches"). x86-64 only: the
 * bodies are inline assembly, so that the compiler cannot reshape them.
 *
 * usage: cold-branch-bench [--rounds N] [--sleep-us U]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "te_args.h"

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

#define X3(s) s s s
#define X5(s) s s s s s
#define X10(s) X5(s) X5(s)
#define X100(s) X10(X10(s))
#define X300(s) X3(X100(s))

/* One branch on bit 0 of %1, then the pattern rotates by one; local label
 * 1 is redefined by every copy (`1f` is the next one). */
#define BRANCH "btq $0, %1\n\tjc 1f\n\taddq $7, %0\n1:\n\txorq $3, %0\n\t" \
               "addq $5, %0\n\trorq $1, %1\n\t"
#define ALU5 "addq $1, %0\n\txorq $3, %1\n\tsubq $5, %2\n\taddq $7, %3\n\t" \
             "xorq $11, %0\n\t"

__attribute__((noinline)) static uint64_t body_straight(uint64_t a)
{
    uint64_t b = a + 1, c = a + 2, d = a + 3;
    __asm__ volatile(X300(ALU5) : "+r"(a), "+r"(b), "+r"(c), "+r"(d));
    return a ^ b ^ c ^ d;
}

__attribute__((noinline)) static uint64_t body_branches(uint64_t a,
                                                         uint64_t pattern)
{
    __asm__ volatile(X300(BRANCH) : "+r"(a), "+r"(pattern) : : "cc");
    return a;
}

/* 16 dependent loads `stride` bytes apart (8 KiB: one per page, every
 * other page; 256: one page): each holds the next one's address. */
static void **chain_build(size_t stride)
{
    enum { N = 16 };
    char *m = mmap(NULL, (size_t)N * stride, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    for (int i = 0; i < N; i++) {
        void **slot = (void **)(m + (size_t)i * stride);
        *slot = i + 1 < N ? (void *)(m + (size_t)(i + 1) * stride) : NULL;
    }
    return (void **)m;
}

__attribute__((noinline)) static uint64_t body_chain(void **p)
{
    uint64_t n = 0;
    while (p) {
        p = (void **)*(void *volatile *)p;
        n++;
    }
    return n;
}

struct series {
    const char *name;
    double cold, warm;
};

static void nap(uint32_t us)
{
    struct timespec t = {us / 1000000, (long)(us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv)
{
    const char *tool = "cold-branch-bench";
    uint32_t rounds = 3000, sleep_us = 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            printf("usage: %s [--rounds N (1..10000000, 3000)] "
                   "[--sleep-us U (0..1000000, 20)]\n"
                   "Runs synthetic bodies once after a nanosleep and once "
                   "at once; docs/benchmarks.md, \"Cold submits\".\n", tool);
            return 0;
        }
        int rounds_opt = !strcmp(argv[i], "--rounds");
        if (!rounds_opt && strcmp(argv[i], "--sleep-us")) {
            te_arg_bad_option(tool, argv[i], 0);
            return TE_ARGS_EXIT;
        }
        if (i + 1 >= argc) {
            te_arg_bad_option(tool, argv[i], 1);
            return TE_ARGS_EXIT;
        }
        if (rounds_opt ? te_arg_u32(tool, "--rounds", argv[i + 1], 1,
                                    10000000, &rounds)
                       : te_arg_u32(tool, "--sleep-us", argv[i + 1], 0,
                                    1000000, &sleep_us))
            return TE_ARGS_EXIT;
        i++;
    }
    void **chain = chain_build(8192), **chain1 = chain_build(256);
    if (!chain || !chain1) {
        perror("cold-branch-bench: mmap");
        return 1;
    }
    struct series s[] = {{"straight (1500 ALU)", 0, 0},
                         {"300 branches, never taken", 0, 0},
                         {"300 branches, always taken", 0, 0},
                         {"300 branches, taken by pattern", 0, 0},
                         {"16 dependent loads, 16 pages", 0, 0},
                         {"16 dependent loads, 1 page", 0, 0}};
    enum { NBODY = sizeof(s) / sizeof(s[0]) };
    const uint64_t patterns[] = {0, ~0ull, 0x9e3779b97f4a7c15ull};
    volatile uint64_t sink = 0;
    for (uint32_t r = 0; r < rounds; r++) {
        for (int k = 0; k < NBODY; k++) {
            uint64_t t[3]; /* before the cold run, the warm run, after */
            nap(sleep_us);
            for (int pass = 0; pass < 2; pass++) {
                t[pass] = now_ns();
                if (k == 0)
                    sink += body_straight((uint64_t)r);
                else if (k < 4)
                    sink += body_branches((uint64_t)r, patterns[k - 1]);
                else
                    sink += body_chain(k == 4 ? chain : chain1);
            }
            t[2] = now_ns();
            s[k].cold += (double)(t[1] - t[0]);
            s[k].warm += (double)(t[2] - t[1]);
        }
    }
    printf("cold-branch-bench: %u rounds, %u us sleep; mean ns per run "
           "(clock read included)\n", rounds, sleep_us);
    printf("%-34s %12s %12s %10s\n", "body", "after sleep", "right after",
           "sleep adds");
    for (int k = 0; k < NBODY; k++)
        printf("%-34s %12.0f %12.0f %10.0f\n", s[k].name, s[k].cold / rounds,
               s[k].warm / rounds, (s[k].cold - s[k].warm) / rounds);
    return 0;
}
