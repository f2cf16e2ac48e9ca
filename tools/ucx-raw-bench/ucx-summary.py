#!/usr/bin/env python3
"""Table of ucx-compare.sh's output (docs/benchmarks.md, "UCX side by side").

For every case: the median over runs of te-bench's result (loopback and
efa/shm), of ucx-raw-bench's in-run reference (shm, tcp: measured by te-bench
right before each repetition) and of ucx-raw-bench alone (adjacent in the
same round), and the ratios te / ucx as the median over runs of each run's
ratio (for bandwidth the in-run ratio is te-bench's own median of
per-repetition ratios). usage: ucx-summary.py OUTDIR"""
import glob
import json
import os
import re
import statistics
import sys

out = sys.argv[1]


def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def runs(pattern):
    found = {}
    for p in glob.glob(os.path.join(out, pattern)):
        m = re.search(r"\.(\d+)\.(json|txt)$", p)
        if m:
            found[int(m.group(1))] = p
    return found


def te_rows(plug, test):
    """run -> list of result rows"""
    res = {}
    for i, p in runs("te.%s.%s.*.json" % (plug, test)).items():
        try:
            with open(p) as f:
                res[i] = json.load(f)["results"]
        except (ValueError, KeyError, OSError):
            pass
    return res


def ucx_alone(tls, test, size=None):
    """run -> GB/s (write) or p50 us (immlat, send)"""
    name = "ucx.%s.%s.%s*.txt" % (tls, test, size + "." if size else "")
    res = {}
    for i, p in runs(name).items():
        with open(p) as f:
            text = f.read()
        if test == "write":
            m = re.findall(r"([0-9.]+) GB/s", text)
        else:
            m = re.findall(r"^([0-9.]+) us p50", text, re.M)
        if m:
            res[i] = float(m[-1])
    return res


def fmt(x, d=3):
    return "-" if x is None else ("%.*f" % (d, x))


print("| case | plugin | te-bench | UCX shm in-run | ratio | UCX shm alone | "
      "ratio | UCX tcp in-run | ratio | UCX tcp alone | ratio | runs |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
sizes = [("64K", 65536), ("1M", 1 << 20), ("16M", 16 << 20)]
for plug in ("loopback", "efa"):
    rows = te_rows(plug, "write")
    for label, size in sizes:
        te, ref_in, rat_in, rat_alone = [], {0: [], 1: []}, {0: [], 1: []}, {0: [], 1: []}
        alone = [ucx_alone("shm", "write", label), ucx_alone("tcp", "write", label)]
        n = 0
        for i, rs in rows.items():
            for r in rs:
                if r["test"] != "write" or r["size"] != size or not r["ok"]:
                    continue
                n += 1
                g = r["gbs"]["median"]
                te.append(g)
                for k in (0, 1):
                    refs = r.get("references", [])
                    if k < len(refs) and refs[k].get("gbs"):
                        ref_in[k].append(refs[k]["gbs"]["median"])
                        rat_in[k].append(refs[k].get("ratio"))
                    if i in alone[k] and alone[k][i] > 0:
                        rat_alone[k].append(g / alone[k][i])
        cells = [fmt(med(te)) + " GB/s"]
        for k in (0, 1):
            cells += [fmt(med(ref_in[k])), fmt(med(rat_in[k])),
                      fmt(med(list(alone[k].values()))), fmt(med(rat_alone[k]))]
        print("| write %s | %s | %s | %d |" % (label, plug, " | ".join(cells), n))
    for test, key, what in (("immlat", "submit_to_callback_us",
                             "immlat end to end p50 (us)"),
                            ("send", "half_rtt_us", "send 8 B half RTT p50 (us)")):
        rows = te_rows(plug, test)
        alone = [ucx_alone("shm", test), ucx_alone("tcp", test)]
        te, ref_in, rat_in, rat_alone = [], {0: [], 1: []}, {0: [], 1: []}, {0: [], 1: []}
        n = 0
        for i, rs in rows.items():
            for r in rs:
                if r["test"] != test or not r["ok"]:
                    continue
                lat = r["latency"].get(key)
                if not lat or lat.get("p50") is None:
                    continue
                n += 1
                t = lat["p50"]
                te.append(t)
                for k, name in ((0, "ucx"), (1, "ucx-tcp")):
                    m = re.search(r"reference %s: p50 ([0-9.]+) us" % name,
                                  r.get("note", ""))
                    if m and float(m.group(1)) > 0:
                        ref_in[k].append(float(m.group(1)))
                        rat_in[k].append(t / float(m.group(1)))
                    if i in alone[k] and alone[k][i] > 0:
                        rat_alone[k].append(t / alone[k][i])
        cells = [fmt(med(te), 2)]
        for k in (0, 1):
            cells += [fmt(med(ref_in[k]), 2), fmt(med(rat_in[k]), 1),
                      fmt(med(list(alone[k].values())), 2), fmt(med(rat_alone[k]), 1)]
        print("| %s | %s | %s | %d |" % (what, plug, " | ".join(cells), n))
