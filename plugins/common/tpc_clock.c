/* The plugins' clock (tpc_clock.h). */
#include <time.h>

#include "tpc_clock.h"

uint64_t tpc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
