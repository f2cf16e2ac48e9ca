import errno
import gc

import numpy as np
import pytest

import transferengine as te


def test_register_numpy_bytearray_memoryview(engine):
    arr = np.zeros(4096, dtype=np.uint8)
    with engine.register(arr) as mr:
        assert len(mr) == 4096
        assert mr.address == arr.ctypes.data
        d = mr.descriptor()
        assert d.length == 4096 and d.nic_count == 1
        assert te.Descriptor.from_bytes(bytes(d)).addr == d.addr
    with engine.register(bytearray(100)) as mr:
        assert len(mr) == 100
    with engine.register(memoryview(bytearray(64))) as mr:
        assert len(mr) == 64


def test_read_only_buffer_refused_for_remote_write(engine):
    with pytest.raises(ValueError, match="read-only"):
        engine.register(b"immutable", access=te.REMOTE_WRITE)
    ro = np.zeros(16, dtype=np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        engine.register(ro, access=te.REMOTE_WRITE)
    # Read-only is fine as a source that peers only read.
    with engine.register(b"readable source", access=te.REMOTE_READ) as mr:
        assert len(mr) == 15


def test_non_contiguous_refused(engine):
    a = np.zeros((64, 64), dtype=np.uint8)[:, ::2]
    with pytest.raises((ValueError, BufferError)):
        engine.register(a)


def test_buffer_kept_alive_while_registered(self_peer):
    e, peer = self_peer
    mr = e.register(np.zeros(1 << 16, dtype=np.uint8))  # only ref: the region
    gc.collect()
    src = e.register(np.full(1 << 16, 7, dtype=np.uint8))
    e.submit(te.write(peer, src, mr.descriptor(), 1 << 16)).result(10)
    view = np.frombuffer(te.ffi.buffer(te.ffi.cast("uint8_t *", mr.address),
                                       1 << 16), dtype=np.uint8)
    assert (view == 7).all()
    mr.deregister()
    mr.deregister()  # twice is fine
    with pytest.raises(te.TEError):
        mr.descriptor()


def test_bad_descriptor_bytes():
    with pytest.raises(te.TEError) as ei:
        te.Descriptor.from_bytes(b"\x01\x02\x03")
    assert ei.value.errno in (errno.EBADMSG, errno.EPROTO, errno.EINVAL)
    assert "truncated" in str(ei.value) or ei.value.message


def test_revoke_changes_keys(self_peer):
    e, peer = self_peer
    dst = e.register(bytearray(4096))
    src = e.register(bytearray(b"x" * 4096), access=0)
    old = dst.descriptor()
    new = dst.revoke()
    e.submit(te.write(peer, src, new, 10)).result(10)
    with pytest.raises(te.TEError):
        e.submit(te.write(peer, src, old, 10)).result(10)


def test_aligned_empty_is_page_aligned_zeroed_and_registers(engine):
    import mmap
    for n in (1, 4096 + 3, 3 << 20):
        a = te.aligned_empty(n)
        assert a.dtype == np.uint8 and a.nbytes == n and a.flags.writeable
        assert a.ctypes.data % mmap.PAGESIZE == 0
        assert not a.any()
    buf = te.aligned_empty(1 << 20)
    mr = engine.register(buf, access=te.REMOTE_WRITE)
    assert mr.descriptor()
    mr.deregister()
    with pytest.raises(ValueError):
        te.aligned_empty(0)
