#!/usr/bin/python3
"""Idle CPU of an engine: two engines of this process exchange 10 writes,
then sit idle for 2 s; prints their CPU time over that wall time, per
engine, as a fraction of one core ("%.4f"). Used by progress-compare.sh
and ab-compare.sh (docs/benchmarks.md). Not a test.

usage: PYTHONPATH=build/python TE_PLUGIN_PATH=build/plugins
       idle-cpu.py [IDLE_WAIT] [SECTION.KEY=VALUE...]
       (IDLE_WAIT: engine.idle_wait, default the engine's; e.g.
        idle-cpu.py block engine.plugin=efa efa.provider=shm)"""
import resource
import sys
import time

import transferengine as te


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    args = sys.argv[1:]
    cfg = {}
    if args and "=" not in args[0]:
        cfg["engine.idle_wait"] = args.pop(0)
    for a in args:
        key, sep, value = a.partition("=")
        if not sep or "." not in key:
            sys.exit("idle-cpu.py: expected SECTION.KEY=VALUE, got %r" % a)
        cfg[key] = value
    with te.Engine(cfg) as a, te.Engine(cfg) as b:
        p = a.add_peer(b.address())
        src = a.register(bytearray(4096), access=0)
        dst = b.register(bytearray(4096))
        for _ in range(10):
            a.submit(te.write(p, src, dst.descriptor(), 64)).result(10)
        time.sleep(0.2)
        c0, t0 = cpu_s(), time.monotonic()
        time.sleep(2)
        c1, t1 = cpu_s(), time.monotonic()
        print("%.4f" % ((c1 - c0) / (t1 - t0) / 2))


if __name__ == "__main__":
    main()
