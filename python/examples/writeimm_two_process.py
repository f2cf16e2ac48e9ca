#!/usr/bin/python3
"""The README's exchange in two processes: the receiver registers a buffer,
publishes its address and descriptor (any channel will do: here a pipe),
and expects one immediate; the sender writes 1 MiB with that immediate. The
count is the signal: no "done" message.

    PYTHONPATH=build/python TE_PLUGIN_PATH=build/plugins \\
        /usr/bin/python3 python/examples/writeimm_two_process.py
"""
import multiprocessing as mp

import numpy as np

import transferengine as te

N, IMM = 1 << 20, 7


def receiver(conn):
    with te.Engine() as e:
        buf = np.zeros(N, dtype=np.uint8)
        mr = e.register(buf, access=te.REMOTE_WRITE)
        arrived = e.expect(IMM, 1, timeout_ms=30000)
        conn.send((e.address(), bytes(mr.descriptor())))
        arrived.result()
        print(f"receiver: imm {IMM} counted, first bytes {buf[:4].tolist()}")
        conn.send("ok")


def main():
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    p = ctx.Process(target=receiver, args=(there,))
    p.start()
    addr, desc = here.recv()
    with te.Engine() as e:
        peer = e.add_peer(addr)
        src = e.register(np.full(N, 42, dtype=np.uint8), access=0)
        done = e.submit(te.write(peer, src, desc, N, imm=IMM)).result(30)
        print(f"sender: request {done.req_id} completed")
        print(here.recv())
    p.join(30)


if __name__ == "__main__":
    main()
