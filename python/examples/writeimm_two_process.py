#!/usr/bin/python3
"""WriteImm and ImmCounter in two processes, correct for any NIC count.

The receiver registers a buffer and publishes its address and descriptor
(any channel will do: here a pipe). The sender writes 1 MiB with immediate
7. A write is split over the NICs of the group, one immediate per shard
(4 NICs: 4 immediates), and only the sender can compute how many: it asks
te_expected_imms (Engine.expected_imms) and sends the count; the receiver
expects exactly that many. The count is the signal: no "done" message.
(Without sending it, both sides must agree on a route, e.g. pin=0 or
engine.shard_min_bytes above the size: then the count is 1.)

    PYTHONPATH=build/python TE_PLUGIN_PATH=build/plugins \\
        TE_LOOPBACK_DEVICES=4 TE_ENGINE_NICS_PER_GROUP=4 \\
        /usr/bin/python3 python/examples/writeimm_two_process.py
"""
import multiprocessing as mp

import numpy as np

import transferengine as te

N, IMM = 1 << 20, 7


def receiver(conn):
    with te.Engine() as e:                     # $TE_CONFIG, TE_* variables
        buf = np.zeros(N, dtype=np.uint8)
        mr = e.register(buf, access=te.REMOTE_WRITE)
        conn.send((e.address(), bytes(mr.descriptor())))
        count = conn.recv()                    # te_expected_imms, from the sender
        e.expect(IMM, count, timeout_ms=30000).result()   # banked ones count
        assert (buf == 42).all(), "the expectation fired before the last shard"
        assert e.imm_poll(IMM)[0] == 0         # no immediate left over
        print(f"receiver: imm {IMM} counted {count} time(s), {N} bytes in")
        conn.send("ok")
        conn.recv()        # stay up until the sender has its completion


def main():
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    p = ctx.Process(target=receiver, args=(there,))
    p.start()
    there.close()                              # EOFError if the receiver dies
    addr, desc = here.recv()
    with te.Engine() as e:
        peer = e.add_peer(addr)
        src = e.register(np.full(N, 42, dtype=np.uint8), access=0)
        req = te.write(peer, src, desc, N, imm=IMM)
        count = e.expected_imms(req)           # one per shard: 1 per NIC used
        here.send(count)
        done = e.submit(req).result(30)
        print(f"sender: request {done.req_id} completed, {count} immediate(s)")
        print(here.recv())
        here.send("done")                      # now the receiver may close
    p.join(30)
    return p.exitcode


if __name__ == "__main__":
    raise SystemExit(main())
