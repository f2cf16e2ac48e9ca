/* The clock plugins measure timeouts and intervals with. */
#ifndef TPC_CLOCK_H
#define TPC_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds: never jumps with the wall clock. */
uint64_t tpc_now_ns(void);

#endif
