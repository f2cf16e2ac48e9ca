#!/usr/bin/python3
"""Python binding benchmark (docs/python.md), both measured against C in
the same run:

1. per-request submit overhead: p50 time of one ``engine.submit(req,
   future=False)`` of an 8-byte write with immediate (a prepared Request,
   completions polled), against te_submit() of the same request in C
   (te-py-bench-c);
2. paged-write bandwidth of 16 KiB pages, 1 MiB and 4 MiB per request,
   one Python call per request with numpy index arrays, against
   ``te-bench --test paged`` on the same sizes.

usage: bench_submit.py [--runs N] [--json FILE]
Environment: TE_PY_BENCH_C (the C program), TE_BENCH (te-bench),
TE_PLUGIN_PATH. Results: medians of N runs (default 5) and their ratios.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import transferengine as te

WINDOW = 64


def python_submit_p50(samples=20000):
    with te.Engine() as a, te.Engine() as b:
        src, dst = bytearray(4096), bytearray(4096)
        smr = a.register(src, access=0)
        dmr = b.register(dst, access=te.REMOTE_WRITE)
        peer = a.add_peer(b.address())
        req = te.write(peer, smr, dmr.descriptor(), 8, imm=1)
        times = []
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
                    submit(req, future=False)
                except te.TEError as e:
                    if e.errno != 11:  # EAGAIN
                        raise
                else:
                    times.append(clock() - t0)
                    inflight += 1
                    continue
            inflight -= len(a.poll_completions(WINDOW,
                                               100 if inflight == WINDOW else 0))
        while inflight:
            got = a.poll_completions(WINDOW, 1000)
            if not got:
                raise RuntimeError("drain")
            inflight -= len(got)
        smr.deregister()
        dmr.deregister()
    times.sort()
    return times[len(times) // 2]


def c_submit_p50(exe):
    out = subprocess.run([exe, "20000"], check=True, capture_output=True,
                         text=True).stdout.split()
    return int(out[1])


def python_paged_gbps(total, page=16384, seconds=1.0):
    """GB/s of paged writes of `total` bytes per request (pages of `page`),
    as many in flight as te-bench keeps (16 MiB / size, 2..64), one Python
    submit per request."""
    npages = total // page
    window = max(2, min(64, (16 << 20) // total))
    region = max(16 << 20, total * 2)
    with te.Engine() as a, te.Engine() as b:
        src = np.ones(region, dtype=np.uint8)
        dst = np.zeros(region, dtype=np.uint8)
        smr = a.register(src, access=0)
        dmr = b.register(dst, access=te.REMOTE_WRITE)
        desc = dmr.descriptor()
        peer = a.add_peer(b.address())
        slots = region // total
        reqs = []
        for s in range(min(slots, window)):
            idx = np.arange(s * npages, (s + 1) * npages, dtype=np.uint32)
            reqs.append(te.paged(peer, smr, desc, idx, idx, page, imm=2))
        inflight = done = 0
        t0 = time.perf_counter()
        end = t0 + seconds
        i = 0
        while time.perf_counter() < end or inflight:
            while inflight < len(reqs) and time.perf_counter() < end:
                a.submit(reqs[i % len(reqs)], future=False)
                i += 1
                inflight += 1
            got = a.poll_completions(WINDOW, 1000)
            for c in got:
                if c.status:
                    raise RuntimeError(c.reason)
            inflight -= len(got)
            done += len(got)
        dt = time.perf_counter() - t0
        smr.deregister()
        dmr.deregister()
    return done * total / dt / 1e9


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
    res = {"submit_ns": {"python": [], "c": []}}
    for _ in range(args.runs):
        res["submit_ns"]["c"].append(c_submit_p50(cexe))
        res["submit_ns"]["python"].append(python_submit_p50())
    py = statistics.median(res["submit_ns"]["python"])
    c = statistics.median(res["submit_ns"]["c"])
    print(f"submit p50: python {py / 1e3:.2f} us, C {c / 1e3:.2f} us, "
          f"python adds {(py - c) / 1e3:.2f} us (median of {args.runs})")
    for total in (1 << 20, 4 << 20):
        pys, cs = [], []
        for _ in range(args.runs):
            cs.append(tebench_paged_gbps(bexe, total))
            pys.append(python_paged_gbps(total))
        res[f"paged_{total}"] = {"python": pys, "te-bench": cs}
        p, q = statistics.median(pys), statistics.median(cs)
        print(f"paged 16 KiB pages, {total >> 20} MiB/request: python "
              f"{p:.2f} GB/s, te-bench {q:.2f} GB/s, ratio {p / q:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
