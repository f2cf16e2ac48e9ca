#!/usr/bin/python3
"""Python binding benchmark (docs/python.md), both measured against C in
the same run:

1. per-request submit overhead: p50 time of one ``engine.submit(req,
   future=False)`` of an 8-byte write with immediate (a prepared Request,
   completions polled), and of ``engine.submit(req)`` returning a Transfer
   future, against te_submit() of the same request in C (te-py-bench-c);
2. paged-write bandwidth of 16 KiB pages, 1 MiB and 4 MiB per request,
   one Python call per request with numpy index arrays, against
   ``te-bench --test paged`` on the same sizes, measured the same way
   (ramp-up excluded, 200 ms repetitions, median of 3); each run is one
   pair (te-bench then Python) and the ratio is the median of the pairs'
   ratios, so load from other processes hits both sides of a pair alike.

usage: bench_submit.py [--runs N] [--json FILE]
Environment: TE_PY_BENCH_C (the C program), TE_BENCH (te-bench),
TE_PLUGIN_PATH. Results: medians of N runs (default 5) and their ratios.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import transferengine as te

WINDOW = 64


def python_submit_p50(samples=20000, future=False, paged=False):
    """p50 ns of one submit of a prepared 8-byte write with immediate, 64
    in flight. future=False: completions polled (the fastest form);
    future=True: each submit returns a Transfer future (the usual form).
    paged=True: each sample builds a new paged request (64 pages of 64
    bytes, numpy index arrays) and submits it, like te-py-bench-c paged."""
    with te.Engine() as a, te.Engine() as b:
        src, dst = bytearray(4096), bytearray(4096)
        smr = a.register(src, access=0)
        dmr = b.register(dst, access=te.REMOTE_WRITE)
        peer = a.add_peer(b.address())
        desc = dmr.descriptor()
        req = te.write(peer, smr, desc, 8, imm=1)
        idx = np.arange(64, dtype=np.uint32)
        times = []
        pending = collections.deque()
        inflight = 0
        clock = time.perf_counter_ns
        submit = a.submit
        deadline = time.monotonic() + 60
        while len(times) < samples:
            if time.monotonic() > deadline:
                raise RuntimeError("deadline")
            if inflight < WINDOW:
                t0 = clock()
                try:
                    if paged:
                        req = te.paged(peer, smr, desc, idx, idx, 64, imm=1)
                    t = submit(req, future=future)
                except te.TEError as e:
                    if e.errno != 11:  # EAGAIN
                        raise
                else:
                    times.append(clock() - t0)
                    inflight += 1
                    if future:
                        pending.append(t)
                    continue
            if future:
                pending.popleft().result(10)
                inflight -= 1
            else:
                inflight -= len(a.poll_completions(
                    WINDOW, 100 if inflight == WINDOW else 0))
        while pending:
            pending.popleft().result(10)
            inflight -= 1
        while inflight:
            got = a.poll_completions(WINDOW, 1000)
            if not got:
                raise RuntimeError("drain")
            inflight -= len(got)
        smr.deregister()
        dmr.deregister()
    times.sort()
    return times[len(times) // 2]


def c_submit_p50(exe, *mode):
    out = subprocess.run([exe, "20000", *mode], check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[1])


def python_paged_gbps(total, page=16384, reps=3, rep_ms=200, min_iters=16):
    """Median GB/s of `reps` repetitions of paged writes of `total` bytes
    per request (pages of `page`), measured the way te-bench measures
    (docs/benchmarks.md): as many in flight as te-bench keeps (16 MiB /
    size, 2..64), the first `window` completions ignored (ramp-up), then
    bytes counted until the repetition lasted rep_ms and saw min_iters
    requests; bandwidth = counted bytes / (last counted completion - start
    of counting); completion waits batched like te-bench's. One Python
    submit per request, numpy index arrays."""
    npages = total // page
    window = max(2, min(64, (16 << 20) // total))
    region = total * window
    with te.Engine() as a, te.Engine() as b:
        # Page-aligned (and huge-page backed from 2 MiB), like te-bench's
        # own buffers: numpy's 64-byte-aligned arrays copy 10-20 % slower.
        src = te.aligned_empty(region)
        src.fill(1)
        dst = te.aligned_empty(region)
        dst.fill(1)  # fault every page in now, not in the first repetition
        smr = a.register(src, access=0)
        dmr = b.register(dst, access=te.REMOTE_WRITE)
        desc = dmr.descriptor()
        peer = a.add_peer(b.address())
        reqs = []
        for s in range(window):  # slot s = bytes [s*total, (s+1)*total)
            idx = np.arange(s * npages, (s + 1) * npages, dtype=np.uint32)
            reqs.append(te.paged(peer, smr, desc, idx, idx, page, imm=2,
                                 user_data=s))
        submit, poll, clock = a.submit, a.poll_completions, time.perf_counter
        results, cpu_us = [], []
        for _ in range(reps):
            cpu0 = time.thread_time()
            for r in reqs:
                submit(r, future=False)
            inflight, seen, counted = window, 0, 0
            t_start = t_last = None
            hard_stop = clock() + 30  # bounded even if something stalls
            while inflight:
                # te-bench's completion batching (tools/te-bench/test_bw.c),
                # so both sides leave the workers the same CPU: when
                # requests are long, nap about a quarter of the window's
                # worth of them (50 us .. 1 ms) instead of waking per
                # completion; else block for the next one.
                got = poll(64, 0)
                if not got and counted > 8 and inflight > 3:
                    nap = (clock() - t_start) / counted * (inflight // 4)
                    if nap >= 50e-6:
                        time.sleep(min(nap, 1e-3))
                        continue
                if not got:
                    got = poll(64, 1000)
                if not got or clock() > hard_stop:
                    raise RuntimeError("paged: no completion within 1 s")
                now = clock()
                for c in got:
                    if c.status:
                        raise RuntimeError(c.reason)
                    inflight -= 1
                    seen += 1
                    if seen == window:
                        t_start = now  # ramp-up over: start counting
                    elif t_start is not None:
                        counted += 1
                        t_last = now
                    running = (t_start is None or counted < min_iters or
                               now - t_start < rep_ms / 1e3)
                    if running:
                        submit(reqs[c.user_data], future=False)
                        inflight += 1
            results.append(counted * total / (t_last - t_start) / 1e9)
            cpu_us.append((time.thread_time() - cpu0) * 1e6 / (seen or 1))
        smr.deregister()
        dmr.deregister()
    return statistics.median(results), statistics.median(cpu_us)


def tebench_paged_gbps(exe, total):
    """te-bench's own median GB/s of the same paged workload (one process,
    two engines, as here)."""
    out = subprocess.run([exe, "--test", "paged", "--size", str(total),
                          "--page", "16K", "--reps", "3", "--json"],
                         check=True, capture_output=True, text=True).stdout
    row = json.loads(out)["results"][0]
    if not row["ok"]:
        raise RuntimeError(f"te-bench: {row['error']}")
    return float(row["gbs"]["median"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    cexe = os.environ.get("TE_PY_BENCH_C", "build/python/te-py-bench-c")
    bexe = os.environ.get("TE_BENCH", "build/tools/te-bench/te-bench")
    sub = {"c": [], "python": [], "python_future": [], "c_paged_build": [],
           "python_paged_build": []}
    res = {"submit_ns": sub}
    for _ in range(args.runs):
        sub["c"].append(c_submit_p50(cexe))
        sub["python"].append(python_submit_p50())
        sub["python_future"].append(python_submit_p50(future=True))
        sub["c_paged_build"].append(c_submit_p50(cexe, "paged"))
        sub["python_paged_build"].append(python_submit_p50(paged=True))
    for form, ref in (("python", "c"), ("python_future", "c"),
                      ("python_paged_build", "c_paged_build")):
        py, c = statistics.median(sub[form]), statistics.median(sub[ref])
        print(f"submit p50 ({form}): {py / 1e3:.2f} us, {ref} "
              f"{c / 1e3:.2f} us, python adds {(py - c) / 1e3:.2f} us "
              f"(median of {args.runs})")
    for total in (1 << 20, 4 << 20):
        pys, cs, cpus = [], [], []
        for _ in range(args.runs):
            cs.append(tebench_paged_gbps(bexe, total))
            gbs, cpu = python_paged_gbps(total)
            pys.append(gbs)
            cpus.append(cpu)
        ratios = [p / q for p, q in zip(pys, cs)]
        res[f"paged_{total}"] = {"python": pys, "te-bench": cs,
                                 "ratios": ratios,
                                 "python_cpu_us_per_request": cpus}
        p, q = statistics.median(pys), statistics.median(cs)
        print(f"paged 16 KiB pages, {total >> 20} MiB/request: python "
              f"{p:.2f} GB/s, te-bench {q:.2f} GB/s, ratio (median of "
              f"pairs) {statistics.median(ratios):.2f} "
              f"[{min(ratios):.2f}..{max(ratios):.2f}], ratio of medians "
              f"{p / q:.2f}; the Python thread's CPU: "
              f"{statistics.median(cpus):.1f} us per request")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
