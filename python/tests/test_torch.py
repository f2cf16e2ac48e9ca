import pytest

import transferengine as te

torch = pytest.importorskip("torch", reason="python3-torch is not installed "
                            "(optional: apt-get install python3-torch)")


def test_cpu_tensor_roundtrip(self_peer):
    e, peer = self_peer
    a = torch.arange(1024, dtype=torch.float32)
    b = torch.zeros(1024, dtype=torch.float32)
    src, dst = e.register(a, access=0), e.register(b)
    e.submit(te.write(peer, src, dst.descriptor(), a.numel() * 4)).result(10)
    assert torch.equal(a, b)


def test_cuda_tensor_needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here")
