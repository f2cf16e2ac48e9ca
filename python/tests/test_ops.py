import errno
import threading

import numpy as np
import pytest

import transferengine as te

PAGE = 4096


@pytest.fixture
def regions(pair):
    a, b, peer = pair
    src = np.random.default_rng(1).integers(0, 255, 64 * PAGE, dtype=np.uint8)
    dst = np.zeros(64 * PAGE, dtype=np.uint8)
    smr, dmr = a.register(src), b.register(dst)
    yield a, b, peer, src, dst, smr, dmr


def test_write_with_imm_and_expectation(regions):
    a, b, peer, src, dst, smr, dmr = regions
    req = te.write(peer, smr, bytes(dmr.descriptor()), 5000, local_offset=7,
                   remote_offset=100, imm=42)
    x = b.expect(42, a.expected_imms(req), timeout_ms=10000)
    comp = a.submit(req).result(10)
    assert comp.status == 0 and comp.op == te.lib.TE_OP_WRITE
    assert x.result(10) == 42
    assert (dst[100:5100] == src[7:5007]).all()


def test_paged_with_numpy_indices(regions):
    a, b, peer, src, dst, smr, dmr = regions
    si = np.array([5, 0, 9, 3], dtype=np.uint32)
    di = np.array([1, 60, 2, 33], dtype=np.uint32)
    req = te.paged(peer, smr, dmr.descriptor(), si, di, PAGE, imm=7)
    n = a.expected_imms(req)
    assert n == 4
    a.submit(req).result(10)
    b.imm_wait(7, n, 10000)
    for s, d in zip(si, di):
        assert (dst[d * PAGE:(d + 1) * PAGE] == src[s * PAGE:(s + 1) * PAGE]).all()


def test_paged_bad_input(regions):
    a, b, peer, src, dst, smr, dmr = regions
    with pytest.raises(TypeError, match="uint32"):
        te.paged(peer, smr, dmr.descriptor(), np.array([1], dtype=np.int64),
                 np.array([1], dtype=np.uint32), PAGE)
    idx = np.arange(8, dtype=np.uint32)[::2]
    with pytest.raises(ValueError, match="contiguous"):
        te.paged(peer, smr, dmr.descriptor(), idx, idx, PAGE)
    with pytest.raises(ValueError, match="indexes"):
        te.paged(peer, smr, dmr.descriptor(), [1, 2], [1], PAGE)
    req = te.paged(peer, smr, dmr.descriptor(), [0], [1000], PAGE)
    with pytest.raises(te.TEError) as ei:
        a.submit(req)
    assert ei.value.errno == errno.ERANGE
    assert "page 0" in str(ei.value)


def test_scatter_barrier_read(regions):
    a, b, peer, src, dst, smr, dmr = regions
    d = dmr.descriptor()
    req = te.scatter(smr, [(peer, d, 0, 0, 100), (peer, d, 1000, 500, 200)],
                     imm=8)
    total = a.expected_imms(req, 0) + a.expected_imms(req, 1)
    a.submit(req).result(10)
    b.imm_wait(8, total, 10000)
    assert (dst[1000:1200] == src[500:700]).all()
    a.submit(te.barrier([peer, (peer, d)], imm=9)).result(10)
    b.imm_wait(9, 2, 10000)
    back = a.register(np.zeros(PAGE, dtype=np.uint8))
    a.submit(te.read(peer, back, d, 300, remote_offset=1000)).result(10)
    assert (np.frombuffer(te.ffi.buffer(te.ffi.cast("uint8_t *", back.address),
                                        300), dtype=np.uint8)
            == dst[1000:1300]).all()


def test_send_recv(pair):
    a, b, peer = pair
    got = []
    ev = threading.Event()

    def on_msg(group, frm, data):
        got.append((group, frm, data))
        ev.set()

    b.set_recv_handler(on_msg)
    a.submit(te.send(peer, b"hello engine")).result(10)
    assert ev.wait(10)
    assert got[0][0] == 0 and got[0][2] == b"hello engine"
    assert got[0][1] is None  # a is not a peer of b
    with pytest.raises(te.TEError) as ei:
        a.submit(te.send(peer, bytes(1 << 20)))
    assert ei.value.errno == errno.EMSGSIZE


def test_replaced_recv_handler_is_done_when_the_call_returns(pair):
    """set_recv_handler waits for a running call of the old handler; no
    message reaches the old handler after it returned."""
    a, b, peer = pair
    entered, go = threading.Event(), threading.Event()
    old_calls, new_calls = [], []

    def slow(group, frm, data):
        old_calls.append(data)
        entered.set()
        go.wait(10)

    b.set_recv_handler(slow)
    a.submit(te.send(peer, b"first")).result(10)
    assert entered.wait(10)
    for _ in range(3):
        a.submit(te.send(peer, b"queued")).result(10)
    threading.Timer(0.2, go.set).start()
    b.set_recv_handler(lambda g, f, d: new_calls.append(d))
    assert go.is_set()  # it waited for the running call
    seen = len(old_calls)
    for _ in range(200):
        if len(old_calls) + len(new_calls) == 4:
            break
        threading.Event().wait(0.01)
    assert len(old_calls) == seen and len(old_calls) + len(new_calls) == 4


def test_poll_completions_without_futures(regions):
    a, b, peer, src, dst, smr, dmr = regions
    req = te.write(peer, smr, dmr.descriptor(), 64, user_data=77)
    ids = {a.submit(req, future=False) for _ in range(10)}
    seen = []
    for _ in range(100):
        seen += a.poll_completions(16, 100)
        if len(seen) == 10:
            break
    assert {c.req_id for c in seen} == ids
    assert all(c.user_data == 77 and c.status == 0 for c in seen)


def test_request_reuse_and_fields(regions):
    a, b, peer, src, dst, smr, dmr = regions
    req = te.write(peer, smr, dmr.descriptor(), 8, imm=1, pin=0)
    for i in range(5):
        req.imm = 100 + i
        a.submit(req).result(10)
        b.imm_wait(100 + i, 1, 10000)
    req.imm = None
    assert req.imm is None
    a.submit(req).result(10)
    with pytest.raises(te.TEError):
        a.submit(te.write(peer, smr, dmr.descriptor(), 8, pin=3))


def test_one_request_submitted_from_many_threads(self_peer):
    # Each submit gets its own completion even when threads share the
    # Request (done/done_arg are set and submitted under its lock).
    import concurrent.futures as cf
    e, peer = self_peer
    src = e.register(bytearray(b"t" * 4096), access=0)
    dst = e.register(bytearray(4096))
    req = te.write(peer, src, dst.descriptor(), 64)

    def worker(_):
        ts = []
        for _ in range(200):
            while True:
                try:
                    ts.append(e.submit(req))
                    break
                except te.TEError as err:  # queue full: let it drain
                    if err.errno != errno.EAGAIN:
                        raise
                    if ts:
                        ts[-1].result(10)
                    else:
                        threading.Event().wait(0.001)
        return [t.result(30).req_id for t in ts]

    with cf.ThreadPoolExecutor(4) as pool:
        ids = [i for r in pool.map(worker, range(4)) for i in r]
    assert len(ids) == 800 and len(set(ids)) == 800


def test_raising_recv_handler_and_transfer_callback_are_logged(pair, caplog):
    import logging
    a, b, peer = pair
    got = []
    ev = threading.Event()

    def on_msg(group, frm, data):
        got.append(data)
        if data == b"bad":
            raise ValueError("handler bug")
        ev.set()

    def bad_done(comp):
        raise KeyError("done-callback bug")

    with caplog.at_level(logging.ERROR, logger="transferengine"):
        b.set_recv_handler(on_msg)
        t = a.submit(te.send(peer, b"bad"), callback=bad_done)
        assert t.result(10).status == 0  # the future is set before the callback
        a.submit(te.send(peer, b"good")).result(10)
        assert ev.wait(10)  # the handler still runs after raising
        for _ in range(200):
            if "done-callback bug" in caplog.text:
                break
            threading.Event().wait(0.01)
    assert got == [b"bad", b"good"]
    assert "handler bug" in caplog.text and "done-callback bug" in caplog.text
    assert "Traceback" in caplog.text or caplog.records[0].exc_info
    # Replacing and removing the handler: messages are then dropped.
    b.set_recv_handler(None)
    a.submit(te.send(peer, b"dropped")).result(10)
