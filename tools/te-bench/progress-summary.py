#!/usr/bin/env python3
"""Tables of progress-compare.sh's runs: medians over the runs of each
p50/p99 and GB/s, UCX's p50 (run in the same te-bench invocation) and the
ratio te-bench / UCX of each run, medians of those ratios."""
import glob
import json
import os
import re
import statistics
import sys

out = sys.argv[1]
med = statistics.median


def rows(path):
    try:
        with open(path) as f:
            return json.load(f)["results"]
    except (OSError, ValueError, KeyError):
        return []


def ucx_p50(note):
    m = re.search(r"reference ucx: p50 ([0-9.]+)", note or "")
    return float(m.group(1)) if m else None


lat, bw = {}, {}
for p in sorted(glob.glob(os.path.join(out, "lat.*.json"))):
    _, plug, mode, _run, _ = os.path.basename(p).split(".")
    for r in rows(p):
        if not r.get("ok"):
            continue
        key = "submit_to_callback_us" if r["test"] == "immlat" else None
        series = r["latency"].get(key) if key else next(
            iter(r["latency"].values()), None)
        if not series:
            continue
        u = ucx_p50(r.get("note"))
        lat.setdefault((r["test"], plug, mode), []).append(
            (series["p50"], series["p99"], u, series["p50"] / u if u else None))
for p in sorted(glob.glob(os.path.join(out, "bw.*.json"))):
    _, plug, mode, _run, _ = os.path.basename(p).split(".")
    for r in rows(p):
        if not r.get("ok"):
            continue
        refs = [x for x in r.get("references", []) if x.get("gbs", {}).get("median")]
        u = refs[0]["gbs"]["median"] if refs else None
        ratio = refs[0].get("ratio") if refs else None
        bw.setdefault((r["size"], plug, mode), []).append(
            (r["gbs"]["median"], u, ratio))

print("| test | plugin | mode | runs | p50 us | p99 us | UCX p50 us | p50 / UCX |")
print("|---|---|---|---|---|---|---|---|")
for (t, plug, mode), v in sorted(lat.items()):
    us = [x[2] for x in v if x[2]]
    rs = [x[3] for x in v if x[3]]
    print("| %s | %s | %s | %d | %.2f | %.1f | %s | %s |" % (
        t, plug, mode, len(v), med([x[0] for x in v]), med([x[1] for x in v]),
        "%.2f" % med(us) if us else "-", "%.1f" % med(rs) if rs else "-"))
print()
print("| size | plugin | mode | runs | GB/s | UCX GB/s | ratio (median of pairs) |")
print("|---|---|---|---|---|---|---|")
for (size, plug, mode), v in sorted(bw.items()):
    us = [x[1] for x in v if x[1]]
    rs = [x[2] for x in v if x[2]]
    print("| %d KiB | %s | %s | %d | %.2f | %s | %s |" % (
        size // 1024, plug, mode, len(v), med([x[0] for x in v]),
        "%.2f" % med(us) if us else "-", "%.2f" % med(rs) if rs else "-"))
for iw in ("block", "sleep"):
    try:
        vals = [float(x) for x in open(os.path.join(out, "idle.%s.txt" % iw))]
        print("\nidle CPU per engine, idle_wait = %s: median %.4f of a core "
              "(%s)" % (iw, med(vals), ", ".join("%.4f" % x for x in vals)))
    except OSError:
        pass
