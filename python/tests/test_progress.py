"""Caller-driven progress (engine.progress = caller, docs/progress.md): no
engine threads; Engine.progress()/progress_wait() move the engine and run
its callbacks on the calling thread."""
import errno
import selectors
import threading
import time

import pytest

import transferengine as te

CALLER = {"engine.progress": "caller"}


def _progress_until(engines, pred, timeout=20.0):
    end = time.monotonic() + timeout
    while not pred() and time.monotonic() < end:
        for e in engines:
            e.progress()
    return pred()


def test_progress_mode_is_reported():
    with te.Engine() as t, te.Engine(CALLER) as c:
        assert t.progress_mode == "thread"
        assert c.progress_mode == "caller"


def test_thread_mode_refuses():
    with te.Engine() as e:
        with pytest.raises(te.TEError) as ei:
            e.progress()
        assert ei.value.errno == errno.EINVAL
        assert "engine.progress" in str(ei.value)


def test_callbacks_run_inside_progress_on_this_thread():
    with te.Engine(CALLER) as a, te.Engine(CALLER) as b:
        peer = a.add_peer(b.address())
        src = a.register(bytearray(b"p" * 4096), access=0)
        dbuf = bytearray(4096)
        dst = b.register(dbuf)
        threads = []
        x = b.expect(7, 1, callback=lambda imm, st: threads.append(
            threading.current_thread()))
        a.submit(te.write(peer, src, dst.descriptor(), 64, imm=7),
                 callback=lambda c: threads.append(threading.current_thread()))
        assert _progress_until([a, b], lambda: len(threads) == 2)
        assert all(t is threading.main_thread() for t in threads)
        assert x.result(1) == 7
        assert bytes(dbuf[:64]) == b"p" * 64


def test_progress_wait_and_own_selector():
    # a: thread mode writer; b: caller-driven, woken through its fd only.
    with te.Engine() as a, te.Engine(CALLER) as b:
        peer = a.add_peer(b.address())
        src = a.register(bytearray(b"q" * 4096), access=0)
        dst = b.register(bytearray(4096))
        got = []
        b.expect(9, 1, callback=lambda imm, st: got.append(imm))
        a.submit(te.write(peer, src, dst.descriptor(), 16, imm=9))
        end = time.monotonic() + 20
        while not got and time.monotonic() < end:
            b.progress_wait(1000)
        assert got == [9]
        b.expect(10, 1, callback=lambda imm, st: got.append(imm))
        a.submit(te.write(peer, src, dst.descriptor(), 16, imm=10))
        sel = selectors.DefaultSelector()
        sel.register(b.progress_fd(), selectors.EVENT_READ)
        end = time.monotonic() + 20
        while len(got) < 2 and time.monotonic() < end:
            if b.progress_arm():
                sel.select(1.0)
            b.progress()
        sel.close()
        assert got == [9, 10]
