#!/usr/bin/env python3
"""Summarize the runs of tools/te-bench/targets.sh: for every target, the
median over runs of each run's median (every run is itself a median of
--reps repetitions), printed as a Markdown table next to the goal of the
issue. A report, not a test: nothing fails on a slow number.

usage: summarize.py OUTDIR
"""
import glob
import json
import os
import statistics
import sys


def load(outdir):
    runs = {}
    for path in sorted(glob.glob(os.path.join(outdir, "*.json"))):
        target = os.path.basename(path).split(".")[0]
        try:
            with open(path) as f:
                runs.setdefault(target, []).append(json.load(f))
        except ValueError:
            print("warning: %s is not JSON (run failed?)" % path, file=sys.stderr)
    return runs


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def results(docs, test, size=None):
    for d in docs:
        for r in d["results"]:
            if r["test"] == test and (size is None or r["size"] == size) and r["ok"]:
                yield r


def ratio(r, kind):
    for ref in r["references"]:
        if ref["kind"] == kind:
            return ref["ratio"]
    return None


def fmt(x, p=3):
    return "-" if x is None else ("%.*f" % (p, x))


def row(name, value, goal, ok, runs, detail=""):
    status = "-" if ok is None else ("met" if ok else "NOT met")
    print("| %s | %s | %s | %s | %d | %s |" % (name, value, goal, status, runs, detail))


def load_efa(outdir):
    """efa-compare.sh output: {(kind, provider, size label): [doc per run]}."""
    out = {}
    for path in sorted(glob.glob(os.path.join(outdir, "efa_*.json"))):
        parts = os.path.basename(path).split(".")
        kind, prov = parts[0], parts[1]
        label = parts[2] if kind == "efa_raw_stream" else None
        try:
            with open(path) as f:
                out.setdefault((kind, prov, label), []).append(json.load(f))
        except ValueError:
            print("warning: %s is not JSON (run failed?)" % path, file=sys.stderr)
    return out


def lat(doc, test, key, field="p50"):
    for r in doc.get("results", []):
        if r["test"] == test and r["ok"]:
            return r["latency"].get(key, {}).get(field)
    return None


def efa_table(outdir):
    runs = load_efa(outdir)
    if not runs:
        return
    print()
    print("| provider | size | te-bench (efa plugin) GB/s | raw libfabric GB/s | ratio (median of pairs) | goal | status | runs |")
    print("|---|---|---|---|---|---|---|---|")
    sizes = (("64K", 65536), ("1M", 1 << 20), ("8M", 8 << 20))
    for prov in ("shm", "tcp"):
        te = runs.get(("efa_te_write", prov, None), [])
        for label, size in sizes:
            raw = runs.get(("efa_raw_stream", prov, label), [])
            tes = [next((r["gbs"]["median"] for r in d["results"]
                         if r["test"] == "write" and r["size"] == size and r["ok"]), None)
                   for d in te]
            raws = [d["results"][0]["GBps"] if d.get("results") else None for d in raw]
            pairs = [t / r for t, r in zip(tes, raws) if t and r]
            m = med(pairs)
            # Issue 16 asks >= 0.90 at 64 KiB on shm; the benchmark issue
            # before it asked >= 0.95 everywhere else.
            goal = 0.90 if (prov, label) == ("shm", "64K") else 0.95
            print("| %s | %s | %s | %s | %s | >= %.2f | %s | %d |" % (
                prov, label, fmt(med(tes), 2), fmt(med(raws), 2), fmt(m), goal,
                "-" if m is None else ("met" if m >= goal else "NOT met"), len(pairs)))
    print()
    # engine total = te_submit -> post() returned (which contains the
    # provider's own post call) + poll() returned -> callback; goal of
    # issue 16: <= 1.5 us on shm. The raw post call is fi-raw-bench's
    # fi_writemsg call in its ping-pong, shown so that the engine's own
    # share can be read off.
    print("| provider | raw one-way p50 (8 B ping-pong) | raw post call p50 | engine: te_submit -> post() returned p50 | engine: poll() -> callback p50 | engine total | goal | status | runs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for prov in ("shm", "tcp"):
        pp = [d["results"][0] for d in runs.get(("efa_raw_pingpong", prov, None), [])
              if d.get("results")]
        raw = [r["lat_us_p50"] for r in pp]
        rawpost = [r.get("post_us_p50") for r in pp]
        docs = runs.get(("efa_te_lat", prov, None), [])
        post = med([lat(d, "post", "post_us") for d in docs])
        arr = med([lat(d, "immlat", "arrival_to_callback_us") for d in docs])
        tot = None if post is None or arr is None else post + arr
        goal = 1.5 if prov == "shm" else None
        status = "-" if tot is None or goal is None else (
            "met" if tot <= goal else "NOT met")
        print("| %s | %s us | %s us | %s us | %s us | %s us | %s | %s | %d |" % (
            prov, fmt(med(raw), 2), fmt(med(rawpost), 2), fmt(post, 2),
            fmt(arr, 2), fmt(tot, 2),
            "<= 1.5 us" if goal else "-", status, len(docs)))


def main():
    runs = load(sys.argv[1])
    if not any(not k.startswith("efa_") for k in runs):
        efa_table(sys.argv[1])
        return
    print("| target | median of runs | goal | status | runs | detail |")
    print("|---|---|---|---|---|---|")
    MiB = 1 << 20
    for tgt, label in (("write_1p", "one process"), ("write_2p", "two processes")):
        docs = runs.get(tgt, [])
        for size in (1 * MiB, 4 * MiB, 16 * MiB):
            rs = list(results(docs, "write", size))
            m = med([ratio(r, "memcpy") for r in rs])
            c = med([ratio(r, "cma") for r in rs])
            g = med([r["gbs"]["median"] for r in rs])
            row("single write %d MiB, %s" % (size // MiB, label),
                "%s x memcpy" % fmt(m), ">= 0.90 x memcpy",
                None if m is None else m >= 0.90, len(docs),
                "%s GB/s; %s x cma" % (fmt(g, 2), fmt(c)))
    docs = runs.get("paged_16k", [])
    for size in (1 * MiB, 4 * MiB, 16 * MiB):
        rs = list(results(docs, "paged", size))
        w = med([ratio(r, "write") for r in rs])
        m = med([ratio(r, "memcpy") for r in rs])
        row("paged 16 KiB pages, %d MiB total" % (size // MiB),
            "%s x single write" % fmt(w), ">= 0.90 x single write",
            None if w is None else w >= 0.90, len(docs), "%s x memcpy" % fmt(m))
    for tgt, label in (("imm_rate", "one worker (--self)"),
                       ("imm_rate_2e", "two engines (sender + receiver worker)")):
        docs = runs.get(tgt, [])
        rs = list(results(docs, "imm"))
        m = med([r["mops"]["median"] for r in rs])
        row("zero-length WriteImm rate, %s" % label, "%s M op/s" % fmt(m, 2),
            ">= 10 M op/s", None if m is None else m >= 10, len(docs))
    docs = runs.get("post_56", [])
    rs = list(results(docs, "post"))
    p50 = med([r["latency"].get("post_us", {}).get("p50") for r in rs])
    p99 = med([r["latency"].get("post_us", {}).get("p99") for r in rs])
    sub = med([r["latency"].get("submit_call_us", {}).get("p50") for r in rs])
    cold = med([r["latency"].get("post_cold_us", {}).get("p50") for r in rs])
    row("scatter to 56 peers, submit -> all posted", "p50 %s us" % fmt(p50, 2),
        "p50 <= 4 us", None if p50 is None else p50 <= 4, len(docs),
        "p99 %s us; te_submit() call p50 %s us; cold caches p50 %s us"
        % (fmt(p99, 2), fmt(sub, 2), fmt(cold, 2)))
    docs = runs.get("imm_lat", [])
    rs = list(results(docs, "immlat"))
    p50 = med([r["latency"].get("arrival_to_callback_us", {}).get("p50") for r in rs])
    p99 = med([r["latency"].get("arrival_to_callback_us", {}).get("p99") for r in rs])
    row("imm arrival -> ImmCounter callback", "p50 %s us, p99 %s us" % (fmt(p50, 2), fmt(p99, 2)),
        "p50 <= 2 us, p99 <= 10 us",
        None if p50 is None or p99 is None else (p50 <= 2 and p99 <= 10), len(docs))
    for tgt, k in (("nics_1", 1), ("nics_2", 2), ("nics_4", 4)):
        docs = runs.get(tgt, [])
        for test in ("write", "paged"):
            for size in (1 * MiB, 4 * MiB, 16 * MiB):
                rs = list(results(docs, test, size))
                m = med([r["ratio_links"] for r in rs])
                caps = med([r["link_gbps"] for r in rs])
                row("%d NIC%s capped, %s %d MiB" % (k, "" if k == 1 else "s", test, size // MiB),
                    "%s x sum of caps" % fmt(m), ">= 0.95 x caps",
                    None if m is None else m >= 0.95, len(docs),
                    "caps %s Gbps" % fmt(caps, 0))
    efa_table(sys.argv[1])


if __name__ == "__main__":
    main()
