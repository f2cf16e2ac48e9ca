"""transferengine.moe with torch: the example MoE layer (router, torch
Linear experts, dispatch/combine through libte-moe) equals the dense
single-process layer bit for bit in fp32 for R = 2 (top-2) and R = 4
(top-8) processes, over uniform, skewed (every token to rank 0) and empty
(a rank with no tokens) batches, with at most 2 dispatch writes and exactly
1 combine write per peer; bad input raises at the rank that made it and the
other ranks are told (they raise naming it), and the next batch works."""
import multiprocessing as mp
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transferengine._te_moe")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import moe_layer  # noqa: E402


@pytest.mark.parametrize("ranks,topk", [(2, 2), (4, 8)])
def test_layer_equals_dense(ranks, topk):
    results = moe_layer.run(ranks, topk)
    assert len(results) == ranks
    for rank, res in enumerate(results):
        assert [b["batch"] for b in res] == [0, 1, 2]
        for b in res:
            # The expert GEMMs are torch's on other row sets; the gating and
            # the sum order are the library's, the dense layer's the same.
            assert b["equal"], (rank, b)
            assert all(1 <= w <= 2 for w in b["dispatch_writes"]), (rank, b)
            assert all(w == 1 for w in b["combine_writes"]), (rank, b)
    assert results[ranks - 1][2]["tokens"] == 0  # the empty rank ran


@pytest.mark.parametrize("ranks,topk", [(2, 2), (4, 8)])
def test_layer_in_place_equals_dense(ranks, topk):
    """Tokens sent from a registered buffer (MoeRank.register_input):
    bit-equal again; at R = 4 top-8 nearly every token goes to every rank,
    so the uniform batch goes as spans (2 writes per peer) and the rank
    stages no token (pack: the metas alone)."""
    results = moe_layer.run(ranks, topk, inplace=True)
    for rank, res in enumerate(results):
        for b in res:
            assert b["equal"], (rank, b)
            assert all(1 <= w <= 2 for w in b["dispatch_writes"]), (rank, b)
            assert all(w == 1 for w in b["combine_writes"]), (rank, b)
        if ranks == 4:
            assert res[0]["dispatch_writes"] == [2, 2, 2], (rank, res[0])


@pytest.mark.parametrize("ranks,topk,inplace", [(2, 2, False), (4, 8, True)])
def test_layer_bf16_close_to_dense(ranks, topk, inplace):
    """A bfloat16 layer: bfloat16 tokens and experts, whose bfloat16
    outputs go to combine as they are (no float copy); the result is
    float32 and within moe_layer's BF16_RTOL / BF16_ATOL of the dense
    layer (the expert GEMMs run on other row sets: a bfloat16 step apart
    at most), with the writes per peer of the fp32 layer."""
    results = moe_layer.run(ranks, topk, inplace=inplace, dtype=torch.bfloat16)
    for rank, res in enumerate(results):
        assert [b["batch"] for b in res] == [0, 1, 2]
        for b in res:
            assert b["out_dtype"] == "torch.float32", (rank, b)
            assert b["close"], (rank, b)
            assert all(1 <= w <= 2 for w in b["dispatch_writes"]), (rank, b)
            assert all(w == 1 for w in b["combine_writes"]), (rank, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("ranks,topk,inplace,dtype", [
    (2, 2, False, torch.float32), (4, 8, True, torch.float32),
    (2, 2, False, torch.bfloat16)])
def test_moe_layer_cuda_close_to_dense(ranks, topk, inplace, dtype):
    """The example layer with device="cuda": R processes on one GPU, tokens,
    experts and MoE buffers on the device. The expert GEMMs are cuBLAS's on
    other row sets than the dense layer's, so equal to moe_layer's RTOL /
    ATOL (bf16: BF16_RTOL / BF16_ATOL) rather than bit for bit; the writes
    per peer as on the host."""
    results = moe_layer.run(ranks, topk, inplace=inplace, device="cuda",
                            dtype=dtype)
    for rank, res in enumerate(results):
        for b in res:
            assert b["close"], (rank, b)
            assert all(1 <= w <= 2 for w in b["dispatch_writes"]), (rank, b)
            assert all(w == 1 for w in b["combine_writes"]), (rank, b)


def test_layer_reports_a_failed_rank():
    """A rank that fails (here: device="cuda" without a GPU) reaches the
    parent as its error at once, and the other ranks are stopped."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(RuntimeError, match="rank 0: TEError.*no CUDA device"):
        moe_layer.run(2, 2, device="cuda")


def test_expert_dtype():
    """expert_out in the dtype asked for (float32 or bfloat16); others
    refused."""
    import transferengine as te
    from transferengine.moe import MoeRank
    with te.Engine() as e:
        with MoeRank(e, 0, 2, 8, 2, 16, 8, expert_dtype=torch.bfloat16) as m:
            assert m.expert_out.dtype == torch.bfloat16
            assert tuple(m.expert_out.shape) == (4, 16, 16)
        with MoeRank(e, 0, 2, 8, 2, 16, 8) as m:
            assert m.expert_out.dtype == torch.float32
        with pytest.raises(ValueError, match="expert_dtype.*float32 or bfloat16"):
            MoeRank(e, 0, 2, 8, 2, 16, 8, expert_dtype=torch.float16)


def test_register_input_refusals():
    import transferengine as te
    from transferengine.moe import MoeRank
    with te.Engine() as e, MoeRank(e, 0, 2, 8, 2, 16, 8) as m:
        for bad in (torch.empty(8, 16, dtype=torch.bfloat16),
                    torch.empty(16, 8).t(), torch.empty(0, 16)):
            with pytest.raises(ValueError, match="contiguous CPU tensor"):
                m.register_input(bad)
        buf = torch.zeros(8, 16)
        m.register_input(buf)
        m.register_input(None)


def _errors(fn):
    """(type name, message) of what fn raised, or None."""
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test compares the text
        return type(exc).__name__, str(exc)
    return None


def bad_input_rank(rank, conn):
    """Batch 0: rank 1 routes to expert 99 (of 8). Batch 1: rank 0 hands
    combine outputs of the wrong shape. Batch 2: good, then a second
    combine of it, and a combine of a batch never dispatched."""
    import transferengine as te
    from transferengine.moe import MoeRank
    H, E, K, T = 16, 8, 2, 6
    with te.Engine() as e, MoeRank(e, rank, 2, E, K, H, 8, timeout_ms=20000) as m:
        conn.send(m.blob())
        m.connect(1 - rank, conn.recv())
        conn.send("connected")
        conn.recv()
        x = torch.randn(T, H)
        ids = torch.stack([torch.arange(T) % E, (torch.arange(T) + 3) % E], 1)
        w = torch.full((T, K), 0.5)
        out = {}
        bad = ids.clone()
        if rank == 1:
            bad[2, 1] = 99
        out["dispatch"] = _errors(lambda: m.dispatch(0, x, bad, w))
        m.dispatch(1, x, ids, w)
        y = m.expert_out if rank == 1 else m.expert_out[:, :-1]
        out["combine"] = _errors(lambda: m.combine(1, y))
        m.dispatch(2, x, ids, w)
        m.combine_start(2, m.expert_out)
        out["twice"] = _errors(lambda: m.combine_start(2, m.expert_out))
        r = m.combine_wait()
        out["good"] = tuple(r.shape)
        out["undispatched"] = _errors(lambda: m.combine(7, m.expert_out))
        conn.send(out)
        conn.recv()


def test_bad_input_told_to_the_other_rank():
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for r in range(2):
        a, b = ctx.Pipe()
        p = ctx.Process(target=bad_input_rank, args=(r, b))
        p.start()
        pipes.append(a)
        procs.append(p)
    try:
        def gather():
            assert all(a.poll(120) for a in pipes)
            return [a.recv() for a in pipes]
        blobs = gather()
        for r, a in enumerate(pipes):
            a.send(blobs[1 - r])
        gather()
        for a in pipes:
            a.send("go")
        res = gather()
        for a in pipes:
            a.send("bye")
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    kind, msg = res[1]["dispatch"]
    assert kind == "ValueError" and "expert 99" in msg and "token 2" in msg
    kind, msg = res[0]["dispatch"]
    assert kind == "TEError" and "rank 1 failed batch 0" in msg, msg
    kind, msg = res[0]["combine"]
    assert kind == "ValueError" and "(4, 15, 16)" in msg, msg
    kind, msg = res[1]["combine"]
    assert kind == "TEError" and "rank 0 failed batch 1" in msg, msg
    for r in range(2):
        assert res[r]["good"] == (6, 16)
        kind, msg = res[r]["twice"]
        assert kind == "TEError" and "combined already" in msg, msg
        kind, msg = res[r]["undispatched"]
        assert kind == "TEError" and "not dispatched" in msg, msg


def test_device_refused_without_gpu():
    """device="cuda" needs a CUDA device (torch's and the library's): a
    clear TEError naming the cause, nothing left open; other devices are
    refused outright."""
    import transferengine as te
    from transferengine.moe import MoeRank
    with te.Engine() as e:
        with pytest.raises(ValueError, match="cpu or cuda"):
            MoeRank(e, 0, 2, 8, 2, 16, 8, device="meta")
        with MoeRank(e, 0, 2, 8, 2, 16, 8, device="cpu") as m:
            assert m.device is None and m.expert_out.device.type == "cpu"
        if torch.cuda.is_available():
            pytest.skip("a CUDA device is present: test_moe_cuda_* cover it")
        with pytest.raises(te.TEError, match="no CUDA device"):
            MoeRank(e, 0, 2, 8, 2, 16, 8, device="cuda")


def test_gpu_library_refusals_name_the_cause(monkeypatch):
    """The backend's library is found beside libte-moe (or named by
    TE_MOE_GPU_LIBRARY); missing, or without a usable device, it is a
    TEError saying which."""
    import transferengine as te
    from transferengine import _moe_gpu
    monkeypatch.setattr(_moe_gpu, "_lib", None)
    monkeypatch.setenv("TE_MOE_GPU_LIBRARY", "/nonexistent/libte-moe-gpu.so")
    with pytest.raises(te.TEError, match="libte-moe-gpu not found.*CUDA toolkit"):
        _moe_gpu.load()
    monkeypatch.delenv("TE_MOE_GPU_LIBRARY")
    path = _moe_gpu._library_path()
    assert path.endswith("libte-moe-gpu.so")
    if torch.cuda.is_available():
        return
    # Built here (nvcc present): found beside libte-moe, then no device.
    with pytest.raises(te.TEError, match="libte-moe-gpu not found|no CUDA device"):
        _moe_gpu.load()


def _elementwise_expert(x, e):
    """An expert whose fp32 bits are the same on the CPU and on a GPU
    (separate elementwise ops, each rounded: no GEMM, no fused op)."""
    return (x.float() * float(e + 1)) + 0.5


def _run_in_threads(device, R=2, topk=2, E=8, H=64, T=24, batches=2,
                    dtype=torch.float32, inplace=False, outputs="fp32"):
    """R ranks on R engines of this process, one thread each; per batch the
    result of every rank on the CPU. outputs: the expert outputs handed to
    combine as they are ("fp32"), rounded to bfloat16 ("bf16"), or rounded
    to bfloat16 and handed over as float32 ("bf16_as_fp32")."""
    import threading
    import transferengine as te
    from transferengine.moe import MoeRank
    gen = torch.Generator().manual_seed(11)
    inputs = []
    for _ in range(batches):
        per = []
        for _ in range(R):
            x = torch.randn(T, H, generator=gen).to(dtype)
            ids = torch.stack([torch.randperm(E, generator=gen)[:topk]
                               for _ in range(T)])
            w = torch.softmax(torch.randn(T, topk, generator=gen), dim=1)
            per.append((x, ids, w))
        inputs.append(per)
    engines = [te.Engine() for _ in range(R)]
    ranks = [MoeRank(engines[i], i, R, E, topk, H, T, dtype=dtype,
                     device=device) for i in range(R)]
    outs = [[None] * batches for _ in range(R)]
    errors = []
    try:
        blobs = [r.blob() for r in ranks]
        for i, r in enumerate(ranks):
            for j in range(R):
                if j != i:
                    r.connect(j, blobs[j])

        def body(i):
            try:
                m = ranks[i]
                buf = None
                if inplace:
                    buf = torch.zeros(T, H, dtype=dtype,
                                      device=device or "cpu")
                    m.register_input(buf)
                for b in range(batches):
                    x, ids, w = inputs[b][i]
                    if inplace:
                        buf.copy_(x)
                        x = buf
                    got = m.dispatch(b, x, ids, w)
                    for l in range(m.local_experts):
                        n = got.counts[l]
                        m.expert_out[l, :n] = _elementwise_expert(
                            got.x[l, :n], i * m.local_experts + l)
                    y = m.expert_out
                    if outputs != "fp32":
                        y = y.to(torch.bfloat16)
                    if outputs == "bf16_as_fp32":
                        y = y.float()
                    outs[i][b] = m.combine(b, y).cpu()
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append((i, exc))

        threads = [threading.Thread(target=body, args=(i,)) for i in range(R)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        for r in ranks:
            r.close()
        for e in engines:
            e.close()
    assert not errors, errors
    return outs


def test_threads_harness_on_host():
    """The harness of the CUDA tests, on host tensors: R = 2 and 4, in
    place too; bit-equal between the runs (the same inputs)."""
    a = _run_in_threads(None)
    b = _run_in_threads(None, inplace=True)
    c = _run_in_threads(None, R=4, topk=8, E=16)
    for x, y in zip(a, b):
        for p, q in zip(x, y):
            assert torch.equal(p, q)
    assert all(o is not None for res in c for o in res)


@pytest.mark.parametrize("R,topk,E,dtype", [
    (2, 2, 8, torch.float32), (4, 8, 16, torch.float32),
    (2, 1, 8, torch.bfloat16)])
def test_bf16_expert_outputs_equal_fp32_of_the_same_values(R, topk, E, dtype):
    """combine(batch, y.to(bfloat16)) gives the bits of
    combine(batch, y.to(bfloat16).float()): the outputs are widened
    exactly and weighed in float32, without the caller's copy."""
    a = _run_in_threads(None, R, topk, E, dtype=dtype, outputs="bf16")
    b = _run_in_threads(None, R, topk, E, dtype=dtype, outputs="bf16_as_fp32")
    for i in range(R):
        for k in range(len(a[i])):
            assert a[i][k].dtype == torch.float32
            assert torch.equal(a[i][k], b[i][k]), (i, k)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_moe_cuda_bf16_outputs_equal_host():
    """bfloat16 expert outputs on the device (libte-moe-gpu's bf16 weighted
    sums) give the host's bits."""
    host = _run_in_threads(None, 2, 2, 8, outputs="bf16")
    dev = _run_in_threads("cuda", 2, 2, 8, outputs="bf16")
    for i in range(2):
        for b in range(len(host[i])):
            assert torch.equal(host[i][b], dev[i][b]), (i, b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("R,topk,E,dtype,inplace", [
    (2, 2, 8, torch.float32, False), (4, 8, 16, torch.float32, False),
    (2, 2, 8, torch.bfloat16, False), (2, 2, 8, torch.float32, True),
    (4, 8, 16, torch.float32, True)])
def test_moe_cuda_tensors_equal_host(R, topk, E, dtype, inplace):
    """MoeRank(device="cuda"): got.x, expert_out and the result are CUDA
    tensors moved by libte-moe-gpu (no host copy of x or the outputs); the
    results equal the host run's bit for bit."""
    host = _run_in_threads(None, R, topk, E, dtype=dtype, inplace=inplace)
    dev = _run_in_threads("cuda", R, topk, E, dtype=dtype, inplace=inplace)
    for i in range(R):
        for b in range(len(host[i])):
            assert torch.equal(host[i][b], dev[i][b]), (i, b)
