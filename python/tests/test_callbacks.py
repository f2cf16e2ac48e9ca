import asyncio
import concurrent.futures
import errno
import logging
import threading

import pytest

import transferengine as te


def _setup(e, peer):
    src = e.register(bytearray(b"s" * 4096), access=0)
    dst = e.register(bytearray(4096))
    return src, dst


def test_transfer_callback_runs_on_callback_thread(self_peer):
    e, peer = self_peer
    src, dst = _setup(e, peer)
    seen = []
    done = threading.Event()

    def cb(comp):
        seen.append((comp.status, threading.current_thread()))
        done.set()

    t = e.submit(te.write(peer, src, dst.descriptor(), 10), callback=cb)
    assert done.wait(10)
    assert t.result(10).status == 0
    assert seen[0][1] is not threading.main_thread()


def test_callback_that_raises_is_logged_not_fatal(self_peer, caplog):
    e, peer = self_peer
    src, dst = _setup(e, peer)

    def bad(*_):
        raise RuntimeError("user bug")

    with caplog.at_level(logging.ERROR, logger="transferengine"):
        x = e.expect(5, 1, callback=bad)
        e.submit(te.write(peer, src, dst.descriptor(), 1, imm=5)).result(10)
        assert x.result(10) == 5
        for _ in range(100):
            if "user bug" in caplog.text:
                break
            threading.Event().wait(0.01)
    assert "user bug" in caplog.text
    # The engine still works.
    e.submit(te.write(peer, src, dst.descriptor(), 1)).result(10)


def test_expectation_deadline_and_close_cancel():
    with te.Engine() as e:
        x = e.expect(11, 3, timeout_ms=50)
        with pytest.raises(te.TEError) as ei:
            x.result(10)
        assert ei.value.errno == errno.ETIMEDOUT
        y = e.expect(12, 1)
    with pytest.raises(te.TEError) as ei:
        y.result(10)
    assert ei.value.errno == errno.ECANCELED


def test_expect_twice_is_ebusy(engine):
    engine.expect(20, 1)
    with pytest.raises(te.TEError) as ei:
        engine.expect(20, 1)
    assert ei.value.errno == errno.EBUSY
    with pytest.raises(te.TEError):
        engine.expect(21, 0)


def test_asyncio_await(self_peer):
    e, peer = self_peer
    src, dst = _setup(e, peer)

    async def main():
        x = e.expect(30, 2, timeout_ms=10000)
        t1 = e.submit(te.write(peer, src, dst.descriptor(), 8, imm=30))
        t2 = e.submit(te.write(peer, src, dst.descriptor(), 8, imm=30))
        c1, c2 = await asyncio.gather(t1, t2)
        return c1.status, c2.status, await x

    assert asyncio.run(main()) == (0, 0, 30)


def test_futures_wait(self_peer):
    e, peer = self_peer
    src, dst = _setup(e, peer)
    ts = [e.submit(te.write(peer, src, dst.descriptor(), 8)) for _ in range(20)]
    done, pending = concurrent.futures.wait(ts, timeout=10)
    assert not pending and all(t.result().status == 0 for t in done)
    assert len(e._keeper) == 0  # nothing kept alive after completion


def test_imm_poll_remove(self_peer):
    e, peer = self_peer
    src, dst = _setup(e, peer)
    for _ in range(3):
        e.submit(te.write(peer, src, dst.descriptor(), 1, imm=40)).result(10)
    for _ in range(100):
        if e.imm_poll(40)[0] == 3:
            break
        threading.Event().wait(0.01)
    assert e.imm_poll(40) == (3, False)
    assert e.imm_remove(40) == 3
    with pytest.raises(te.TEError) as ei:
        e.imm_wait(40, 1, 10)
    assert ei.value.errno == errno.ETIMEDOUT


def test_expectation_cancel_disarms_and_nothing_fires_late(self_peer, caplog):
    e, peer = self_peer
    src, dst = _setup(e, peer)
    fired = []
    with caplog.at_level(logging.ERROR, logger="transferengine"):
        x = e.expect(21, 1, callback=lambda *a: fired.append(a))
        assert e.imm_poll(21) == (0, True)
        assert x.cancel() is True and x.cancelled()
        assert x.surplus == 0
        assert e.imm_poll(21) == (0, False)  # disarmed in C too
        # The arrival after the cancel is banked, not delivered to x.
        e.submit(te.write(peer, src, dst.descriptor(), 1, imm=21)).result(10)
        e.imm_wait(21, 1, 10000)
        assert x.cancel() is True  # idempotent
    assert fired == []
    assert "InvalidStateError" not in caplog.text
    # A met expectation cannot be cancelled any more.
    y = e.expect(22, 1)
    e.submit(te.write(peer, src, dst.descriptor(), 1, imm=22)).result(10)
    assert y.result(10) == 22
    assert y.cancel() is False


def test_cancel_of_a_met_expectation_keeps_its_handle_until_called(self_peer):
    """An expectation met just before cancel(): its C callback is already
    queued behind a slow one. cancel() must not free the handle that
    callback will use (te_imm_disarm says 0); the callback releases it."""
    e, peer = self_peer
    src, dst = _setup(e, peer)
    gate, entered = threading.Event(), threading.Event()

    def slow(*_):
        entered.set()
        gate.wait(10)  # holds the callback thread

    def write_polled(imm):  # its completion must not need that thread
        e.submit(te.write(peer, src, dst.descriptor(), 1, imm=imm),
                 future=False)
        comps = e.poll_completions(1, 10000)
        assert len(comps) == 1 and comps[0].status == 0

    a = e.expect(30, 1, callback=slow)
    write_polled(30)
    assert entered.wait(10)
    held = len(e._keeper)  # a's handle already went, as its call began
    b = e.expect(31, 1)
    write_polled(31)
    for _ in range(1000):  # met in C: the arrival is consumed
        if e.imm_poll(31) == (0, False):
            break
        threading.Event().wait(0.01)
    assert e.imm_poll(31) == (0, False)
    assert b.cancel() is True  # the future was not done yet
    assert len(e._keeper) == held + 1  # b's handle is still held
    gate.set()
    assert a.result(10) == 30
    for _ in range(1000):
        if len(e._keeper) <= held:
            break
        threading.Event().wait(0.01)
    assert len(e._keeper) == held  # b's handle went once its call ran
    assert b.cancelled()


def test_transfer_is_not_cancellable(self_peer):
    e, peer = self_peer
    src, dst = _setup(e, peer)
    t = e.submit(te.write(peer, src, dst.descriptor(), 16))
    assert t.cancel() is False  # already handed to the engine
    assert t.result(10).status == 0


def test_asyncio_wait_for_cancels_the_expectation(self_peer):
    e, peer = self_peer
    src, dst = _setup(e, peer)

    async def main():
        x = e.expect(23, 1)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(x, 0.05)
        return x

    x = asyncio.run(main())
    for _ in range(200):  # the cancel reaches x from the loop's thread
        if x.cancelled():
            break
        threading.Event().wait(0.01)
    assert x.cancelled()
    assert e.imm_poll(23) == (0, False)
    # The immediate can be expected again at once.
    z = e.expect(23, 1)
    e.submit(te.write(peer, src, dst.descriptor(), 1, imm=23)).result(10)
    assert z.result(10) == 23


def test_callback_may_cancel_its_own_expectation_without_deadlock(self_peer):
    e, peer = self_peer
    src, dst = _setup(e, peer)
    box = {}

    def cb(imm, status):
        box["cancel"] = box["x"].cancel()

    box["x"] = e.expect(24, 1, callback=cb)
    e.submit(te.write(peer, src, dst.descriptor(), 1, imm=24)).result(10)
    assert box["x"].result(10) == 24
    for _ in range(200):
        if "cancel" in box:
            break
        threading.Event().wait(0.01)
    assert box["cancel"] is False


def test_exit_with_an_open_engine_runs_the_last_callbacks_cleanly():
    # An engine left open at interpreter exit is closed by the atexit hook
    # while Python is whole: its pending expectation gets ECANCELED through
    # the callback, and the interpreter exits normally (no crash, no hang).
    import subprocess
    import sys
    code = ("import transferengine as te\n"
            "e = te.Engine()\n"
            "e.expect(5, 1, timeout_ms=60000, callback=lambda i, s: "
            "print('last callback', i, s, flush=True))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"last callback 5 {-errno.ECANCELED}" in r.stdout
