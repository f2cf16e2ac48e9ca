#!/usr/bin/python3
"""Summary of ab-immlat.sh's runs (docs/benchmarks.md, "Cold submits"):
for each latency series te-bench's immlat reports (p50 per run, us) and
for the UCX reference of the same runs, the median and range of A and of
B, in how many rounds B is lower, and the median of the per-round B/A
ratios. Only rounds where both builds produced the series count.

usage: ab-immlat-summary.py OUTDIR"""
import glob
import json
import os
import re
import statistics
import sys

SERIES = [
    ("te_submit() call", "submit_call_us"),
    ("submit -> imm arrival", "submit_to_arrival_us"),
    ("imm arrival -> callback", "arrival_to_callback_us"),
    ("end to end", "submit_to_callback_us"),
]


def run_values(path):
    """{series key: p50} of one run, with "ucx" for the reference; None if
    the run failed or its output is not te-bench's JSON."""
    try:
        with open(path) as f:
            doc = json.load(f)
        row = doc["results"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    if not row.get("ok"):
        return None
    vals = {k: v.get("p50") for k, v in row.get("latency", {}).items()}
    for ref in row.get("reference_latency", []):
        vals[ref["kind"]] = ref["p50_us"]
    # Builds before "reference_latency" word it in the note only.
    m = re.search(r"reference ucx: p50 ([\d.]+) us", row.get("note", ""))
    if m and "ucx" not in vals:
        vals["ucx"] = float(m.group(1))
    return vals


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    rounds = {}
    for path in glob.glob(os.path.join(out, "[AB].*.json")):
        m = re.match(r"([AB])\.(\d+)\.json$", os.path.basename(path))
        if m:
            rounds.setdefault(int(m.group(2)), {})[m.group(1)] = run_values(path)
    pairs = [(v["A"], v["B"]) for _, v in sorted(rounds.items())
             if v.get("A") and v.get("B")]
    failed = sum(1 for v in rounds.values() if not (v.get("A") and v.get("B")))
    print("ab-immlat: %d rounds with both builds (%d incomplete), p50 in us"
          % (len(pairs), failed))
    print("%-24s %-24s %-24s %-9s %s" % ("series", "A median (range)",
                                         "B median (range)", "B lower",
                                         "per-pair B/A"))
    for label, key in SERIES + [("UCX (same runs)", "ucx")]:
        ab = [(a[key], b[key]) for a, b in pairs
              if a.get(key) and b.get(key)]
        if not ab:
            continue
        xa = [a for a, _ in ab]
        xb = [b for _, b in ab]
        lower = sum(1 for a, b in ab if b < a)
        ratio = statistics.median(b / a for a, b in ab)
        print("%-24s %-24s %-24s %-9s %.3f" % (
            label,
            "%.3f (%.2f-%.2f)" % (statistics.median(xa), min(xa), max(xa)),
            "%.3f (%.2f-%.2f)" % (statistics.median(xb), min(xb), max(xb)),
            "%d of %d" % (lower, len(ab)), ratio))
    return 0 if pairs else 1


if __name__ == "__main__":
    sys.exit(main())
