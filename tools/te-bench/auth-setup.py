#!/usr/bin/python3
"""Connection set-up time of the efa plugin over libfabric's shm, with and
without a job secret (docs/security.md, "efa (shm and tcp;ofi_rxm)"). A
long-lived target (a child process) and fresh initiator engines; per
set-up, timed: te_peer_add and one 8-byte write until it completed (the
engine's creation and destruction are not timed). Runs alternate without
and with a secret; each run starts a new target. Prints the run medians
and the median of them per variant. Not a test.

usage: PYTHONPATH=build/python TE_PLUGIN_PATH=build/plugins
       auth-setup.py [RUNS [SET_UPS_PER_RUN]]   (default 6 20)"""
import statistics
import subprocess
import sys
import time

import transferengine as te

KEY = "auth-setup-bench-secret-0123456789"


def config(secret):
    c = {"engine.plugin": "efa", "efa.provider": "shm"}
    if secret:
        c["engine.auth_key"] = KEY
    return c


def target(secret):
    """The child: an engine with a 4 KiB region, its address and descriptor
    on stdout, alive until a line comes on stdin."""
    with te.Engine(config(secret)) as t:
        buf = t.register(bytearray(4096))
        print(t.address().hex(), bytes(buf.descriptor()).hex(), flush=True)
        sys.stdin.readline()


def one_run(secret, per):
    child = subprocess.Popen([sys.executable, __file__, "target", str(secret)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    a, d = child.stdout.readline().split()
    addr, desc = bytes.fromhex(a), te.Descriptor.from_bytes(bytes.fromhex(d))
    times = []
    for _ in range(per):
        with te.Engine(config(secret)) as e:
            src = e.register(bytearray(64), access=0)
            t0 = time.perf_counter()
            peer = e.add_peer(addr)
            e.submit(te.write(peer, src, desc, 8)).result(10)
            times.append((time.perf_counter() - t0) * 1e6)
    child.stdin.write("\n")
    child.stdin.flush()
    child.wait()
    return statistics.median(times)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "target":
        target(sys.argv[2] == "1")
        return
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    per = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    res = {0: [], 1: []}
    for _ in range(runs):
        for secret in (0, 1):
            res[secret].append(one_run(secret, per))
    for secret in (0, 1):
        print("%-9s run medians us: %s; median %.0f" % (
            "secret" if secret else "no secret",
            " ".join("%.0f" % x for x in res[secret]),
            statistics.median(res[secret])))
    print("change %+.0f %%" % (100 * (statistics.median(res[1]) /
                                      statistics.median(res[0]) - 1)))


if __name__ == "__main__":
    main()
