#!/usr/bin/python3
"""Medians of ab-compare.sh's runs: one line per measure, A then B, with
every run's value (docs/benchmarks.md). usage: ab-summary.py OUTDIR"""
import glob
import os
import re
import statistics
import sys

# (label, file kind, regular expression whose first group is the value)
MEASURES = [
    ("loopback immlat submit->callback p50 us", "immlat-lb",
     r"end to end\): p50 ([\d.]+)"),
    ("loopback immlat submit->callback p99 us", "immlat-lb",
     r"end to end\): p50 [\d.]+\s+p99 ([\d.]+)"),
    ("loopback immlat arrival->callback p50 us", "immlat-lb",
     r"latency = imm arrival -> ImmCounter callback: p50 ([\d.]+)"),
    ("UCX immlat p50 us (same runs)", "immlat-lb",
     r"reference ucx: p50 ([\d.]+) us"),
    ("efa/shm immlat submit->callback p50 us", "immlat-efa",
     r"end to end\): p50 ([\d.]+)"),
    ("efa/shm immlat submit->callback p99 us", "immlat-efa",
     r"end to end\): p50 [\d.]+\s+p99 ([\d.]+)"),
    ("loopback send 64 B half round trip p50 us", "send",
     r"half round trip: p50 ([\d.]+)"),
    ("loopback write 64 KiB GB/s", "write", r"write\s+64 KiB.*?\|\s+([\d.]+)"),
    ("loopback write 1 MiB GB/s", "write", r"write\s+1 MiB.*?\|\s+([\d.]+)"),
    ("loopback write 16 MiB GB/s", "write", r"write\s+16 MiB.*?\|\s+([\d.]+)"),
    ("kv notify (libte-kv) p50 us", "kv",
     r"decoder callback \(libte-kv\)\s+p50\s+([\d.]+)"),
    ("kv raw core p50 us", "kv", r"\(raw core\)\s+p50\s+([\d.]+)"),
    ("kv layer note p50 us", "kv", r"\(LAYER msg\)\s+p50\s+([\d.]+)"),
    ("idle CPU per engine (of a core)", "idle", r"^([\d.]+)$"),
]


def values(out, side, kind, rx):
    got = []
    for path in sorted(glob.glob(os.path.join(out, "%s.*.%s.txt" % (side, kind)))):
        m = re.search(rx, open(path, errors="replace").read())
        if m:
            got.append(float(m.group(1)))
    return got


def show(v):
    if not v:
        return "-"
    return "%.4g (%s)" % (statistics.median(v), ", ".join("%.4g" % x for x in v))


def main():
    out = sys.argv[1]
    print("| measure | A: median (runs) | B: median (runs) |")
    print("|---|---|---|")
    for label, kind, rx in MEASURES:
        print("| %s | %s | %s |" % (label, show(values(out, "A", kind, rx)),
                                   show(values(out, "B", kind, rx))))


if __name__ == "__main__":
    main()
