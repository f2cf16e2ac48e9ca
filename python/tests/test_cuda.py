"""te.h's CUDA section from Python: where CUDA is unusable (no driver, as on
the development host) every entry point raises with the reason; on a GPU
host the flag and watcher objects are created and freed."""
import pytest

import transferengine as te
from transferengine import cuda

USABLE, REASON = cuda.cuda_status()


def test_status_is_a_reason_or_usable():
    assert USABLE or REASON


@pytest.mark.skipif(USABLE, reason="CUDA is usable here")
def test_unavailable_cuda_names_the_cause():
    buf = bytearray(64)
    ptr = int(te.ffi.cast("uintptr_t", te.ffi.from_buffer(buf)))
    for call in (lambda: cuda.pointer_info(ptr, 64), lambda: cuda.GpuFlag(0),
                 lambda: cuda.GpuWatcher(lambda o, n: None)):
        with pytest.raises(te.TEError) as err:
            call()
        assert REASON.split(":")[0] in str(err.value)


@pytest.mark.skipif(not USABLE, reason=f"no CUDA: {REASON}")
def test_flag_and_watcher_lifecycle():
    f = cuda.GpuFlag(0)
    assert f.device_ptr and f.read() == 0
    f.store(5)
    assert f.read() == 5
    f.close()
    w = cuda.GpuWatcher(lambda o, n: None, each_step=True)
    assert w.device_ptr and w.delivered == 0
    with pytest.raises(te.TEError):
        w.wait(1, 20)
    w.close()


@pytest.mark.skipif(not USABLE, reason=f"no CUDA: {REASON}")
def test_flag_disarm_only_forgets_what_it_stopped(engine):
    f = cuda.GpuFlag(0)
    f.expect(engine, 77, 1, 60000, 9)
    with pytest.raises(te.TEError):  # one armed expectation per flag
        f.expect(engine, 78, 1, 60000, 9)
    assert f.disarm(engine, 77) is True  # unmet: taken away, re-armable
    f.expect(engine, 78, 1, 60000, 9)
    assert f.disarm(engine, 78) is True
    assert f.disarm(engine, 78) is False  # nothing armed any more
    f.close()
