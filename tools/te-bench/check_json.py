#!/usr/bin/env python3
"""Smoke check of te-bench --json output (tests/bench.cmake).

Runs te-bench with the given arguments plus --json, then checks that the
output is one well-formed JSON document of the documented shape and that
every case ran. It checks form, never speed: benchmarks are not tests.

usage: check_json.py TE_BENCH [te-bench arguments...]
"""
import json
import subprocess
import sys

REQUIRED = ["test", "plugin", "ok", "error", "size", "page", "nics", "window",
            "gbs", "mops", "reference", "reference_latency", "latency",
            "link_gbps", "probe"]


def fail(msg, out=""):
    print("check_json: FAIL: " + msg)
    if out:
        print(out[-4000:])
    sys.exit(1)


def check_immlat_series(r):
    """immlat splits its end-to-end time: the te_submit() call always,
    submit -> arrival whenever both the probe's arrival and the shared
    clock's end to end are there."""
    lat = r["latency"]
    want = ["submit_call_us"]
    if "arrival_to_callback_us" in lat and "submit_to_callback_us" in lat:
        want.append("submit_to_arrival_us")
    for k in want:
        if k not in lat or not lat[k].get("samples"):
            fail("immlat lacks the %s series: %r" % (k, lat))


def main():
    if len(sys.argv) < 2:
        fail("usage: check_json.py TE_BENCH [args...]")
    cmd = sys.argv[1:] + ["--json"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        fail("te-bench did not finish within 600 s")
    try:
        doc = json.loads(p.stdout)
    except ValueError as e:
        fail("output is not JSON: %s" % e, p.stdout + p.stderr)
    if doc.get("tool") != "te-bench" or not isinstance(doc.get("results"), list):
        fail("missing tool/results", p.stdout)
    if not doc["results"]:
        fail("no results", p.stdout)
    for r in doc["results"]:
        missing = [k for k in REQUIRED if k not in r]
        if missing:
            fail("result lacks %s: %r" % (missing, r))
        if not r["ok"]:
            fail("case %s size %s failed: %s" % (r["test"], r["size"], r["error"]),
                 p.stderr)
        if not r["plugin"]:
            fail("case %s reports no plugin" % r["test"])
        for k in ("median", "min", "max", "reps"):
            if k not in r["gbs"] or k not in r["mops"]:
                fail("case %s: series lacks %s" % (r["test"], k))
        if r["test"] == "immlat":
            check_immlat_series(r)
    if p.returncode != 0:
        fail("te-bench exited with %d" % p.returncode, p.stderr)
    tests = sorted({r["test"] for r in doc["results"]})
    print("check_json: OK: %d cases (%s), plugin %s" %
          (len(doc["results"]), ", ".join(tests), doc["results"][0]["plugin"]))


if __name__ == "__main__":
    main()
