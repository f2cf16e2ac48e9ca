/*
 * The small-operation path of a plugin (post, poll, a completion's way to
 * the core) placed together in .text.hot: a lone write from a thread that
 * slept finds its code cold, and fewer code lines and pages to fetch is
 * what shortens it (the core's core/te_hot.h, docs/benchmarks.md). The
 * error reporters (tpc_err, tpc_verr) are `cold` for the same reason.
 */
#ifndef TPC_HOT_H
#define TPC_HOT_H

#define TPC_HOT __attribute__((hot))

#endif
