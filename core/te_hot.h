/*
 * The latency path's placement. A lone small write from a thread that
 * slept (the common case of a decode loop or a MoE proxy between steps)
 * finds its code cold: on this project's VMs te_submit then took ~0.85 us
 * against ~0.19 us hot, and the difference was instruction fetch, not
 * data (prefetching the data lines changed nothing; docs/benchmarks.md).
 * TE_HOT groups the functions a submit, a poll and a callback pass run
 * into .text.hot, so they share fewer lines and pages; the error paths go
 * the other way (te_fail and te_req_fail are `cold`, so GCC moves the
 * branches that call them out of the hot functions).
 */
#ifndef TE_CORE_HOT_H
#define TE_CORE_HOT_H

#define TE_HOT __attribute__((hot))

#endif
