/* te-moe bench: the protocol against the naive exchange (docs/moe.md). */
#ifndef TE_MOE_BENCH_H
#define TE_MOE_BENCH_H

#include <te/moe.h>

/*
 * Measure `repeat` times the protocol and the naive exchange (a head, then
 * one write per row): two jobs of R ranks in this process, their batches
 * run in turn (protocol, naive, naive, protocol, ...) so that both see the
 * same machine; `batches` measured batches after 2 warm-up batches, every
 * rank sending c->max_tokens tokens. Prints one
 * JSON object per repeat and, with repeat > 1, one with the medians.
 * settings: engine settings ("section.key=value", NULL-terminated).
 * inplace: the protocol's ranks register their x (te_moe_rank_input); the
 * naive exchange stages its rows as always.
 * Returns 0, or 1 with the reason on stderr.
 */
int moe_bench(const te_moe_config *c, uint32_t batches, uint32_t repeat,
              const char *const *settings, int inplace);

#endif
