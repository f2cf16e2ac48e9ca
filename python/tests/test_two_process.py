"""The README's exchange across two processes: the receiver publishes its
address and descriptor, the sender writes with an immediate, the
receiver's expectation fires and it checks the bytes."""
import multiprocessing as mp
import os

import numpy as np
import pytest

import transferengine as te

N = 1 << 20


def receiver(conn):
    with te.Engine() as e:
        buf = np.zeros(N, dtype=np.uint8)
        mr = e.register(buf, access=te.REMOTE_WRITE)
        x = e.expect(77, 1, timeout_ms=20000)
        conn.send((e.address(), bytes(mr.descriptor())))
        x.result(30)
        ok = bool((buf == np.arange(N, dtype=np.uint64).astype(np.uint8)).all())
        conn.send(ok)
        conn.recv()  # the sender is done with us


def test_two_processes():
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=receiver, args=(child,))
    p.start()
    try:
        assert parent.poll(30)
        addr, desc = parent.recv()
        with te.Engine() as e:
            peer = e.add_peer(addr)
            src = e.register(np.arange(N, dtype=np.uint64).astype(np.uint8),
                             access=0)
            req = te.write(peer, src, desc, N, imm=77)
            assert e.expected_imms(req) == 1
            e.submit(req).result(30)
            assert parent.poll(30)
            assert parent.recv() is True
            parent.send("bye")
    finally:
        p.join(30)
        if p.is_alive():
            p.kill()
    assert p.exitcode == 0


def dying_receiver(conn):
    e = te.Engine()
    buf = np.zeros(N, dtype=np.uint8)
    mr = e.register(buf, access=te.REMOTE_WRITE)
    conn.send((e.address(), bytes(mr.descriptor())))
    conn.recv()
    os._exit(3)  # dies with its engine open: no orderly close


def test_dead_peer_is_an_error_not_a_hang():
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=dying_receiver, args=(child,))
    p.start()
    try:
        assert parent.poll(30)
        addr, desc = parent.recv()
        with te.Engine() as e:
            peer = e.add_peer(addr)
            src = e.register(np.ones(N, dtype=np.uint8), access=0)
            e.submit(te.write(peer, src, desc, 4096)).result(30)  # alive
            parent.send("die")
            p.join(30)
            assert p.exitcode == 3
            with pytest.raises(te.TEError) as ei:
                # The request fails (dead peer, or its own deadline):
                # either way an error with the library's reason.
                e.submit(te.write(peer, src, desc, N, timeout_ms=5000)).result(30)
            assert ei.value.errno != 0 and str(ei.value)
            print("dead peer:", ei.value)
    finally:
        p.join(30)
        if p.is_alive():
            p.kill()
