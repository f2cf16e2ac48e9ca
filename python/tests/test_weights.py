"""transferengine.weights in one process on loopback: two trainer engines
hand their FSDP halves as torch tensors, one receiver engine receives into
its own parameter tensors (double-buffered), fp8 for the MLP matrices.
Checks the bytes against the torch reference quantisation, that the
library wrote into and read from the callers' tensors (the published
destinations are the tensors' addresses; nothing is re-registered while
addresses stay), and that bad input is refused naming the tensor before
anything is registered."""
import os
import pathlib
import struct
import threading

import pytest

torch = pytest.importorskip("torch")
te = pytest.importorskip("transferengine")
weights = pytest.importorskip("transferengine.weights")
from transferengine import _weights_fp8 as fp8  # noqa: E402
from transferengine import cuda  # noqa: E402

_CUDA_OK, _CUDA_WHY = cuda.cuda_status()
#: the device variant: torch CUDA tensors on both sides (ctest python_gpu)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not (_CUDA_OK and torch.cuda.is_available()),
    reason=f"no usable CUDA device: {_CUDA_WHY or 'torch sees none'}"))]

H, INTER, VOCAB = 160, 192, 128
SPECS = [("model.embed_tokens.weight", (VOCAB, H)),
         ("model.layers.0.input_layernorm.weight", (H,)),
         ("model.layers.0.mlp.gate_proj.weight", (INTER, H)),
         ("model.layers.0.mlp.up_proj.weight", (INTER, H)),
         ("model.layers.0.mlp.down_proj.weight", (H, INTER)),
         ("lm_head.weight", (VOCAB, H))]


def plan():
    return weights.Plan([(n, s, "bfloat16") for n, s in SPECS], trainers=2, fp8=True,
                        staging_bytes=1 << 20, name="tiny")


def full(version):
    g = torch.Generator().manual_seed(version)
    return {n: torch.randn(s, generator=g).to(torch.bfloat16) for n, s in SPECS}


def make(p):
    if p.fp8:
        return torch.zeros(p.bytes, dtype=torch.uint8)
    return torch.zeros((p.rows, p.cols) if p.cols > 1 else (p.rows,), dtype=torch.bfloat16)


def expected(p, w):
    """The param's bytes by the torch reference (fp8: codes, pad, scales)."""
    t = w[p.name]
    if p.name.endswith("gate_proj.weight"):
        t = torch.cat([t, w[p.name.replace("gate_proj", "up_proj")]])
    if not p.fp8:
        return t.reshape(-1).view(torch.uint8)
    codes, scales = fp8.quantise(t)
    out = torch.zeros(p.bytes, dtype=torch.uint8)
    n = codes.numel()
    out[:n] = codes.reshape(-1)
    out[(n + 3) & ~3:] = scales.reshape(-1).view(torch.uint8)
    return out


def table_addrs(directory, n):
    """Addresses of <dir>/infer-0.table's descriptors (docs/weights.md)."""
    data = pathlib.Path(directory, "infer-0.table").read_bytes()
    assert data[:4] == b"TEWT" and struct.unpack_from("<I", data, 8)[0] == n
    off, out = 12, []
    for _ in range(n):
        (dlen,) = struct.unpack_from("<I", data, off)
        out.append(te.Descriptor.from_bytes(data[off + 4:off + 4 + dlen]).addr)
        off += 4 + dlen
    return out


@pytest.fixture
def job(tmp_path):
    pl = plan()
    with te.Engine() as a, te.Engine() as b, te.Engine() as r:
        trainers = [weights.Trainer(e, pl, k) for k, e in enumerate((a, b))]
        yield pl, trainers, r, str(tmp_path)
        for t in trainers:
            t.close()


def parts_of(pl, w, rank):
    out = {}
    for n, t in w.items():
        b, e = pl.fsdp_range(n, rank)
        out[n] = t.reshape(-1)[b:e].clone()
    return out


@pytest.mark.parametrize("device", DEVICES)
def test_versions_land_in_the_engines_tensors(job, device):
    """With device "cuda" the trainers' FSDP halves and the receiver's
    parameters are CUDA tensors (TE_MEM_CUDA on both sides)."""
    pl, trainers, r, d = job
    params = pl.rank_params(0)
    sets = [weights.empty_params(pl, 0, lambda p: make(p).to(device))
            for _ in range(2)]
    rv = weights.Receiver(r, pl, 0, sets[0], sets[1])
    parts = [{n: t.to(device) for n, t in parts_of(pl, full(1), k).items()}
             for k in range(2)]
    for v in (1, 2, 3):
        w = full(v)
        for k in range(2):  # the framework updates its tensors in place
            for n, t in parts_of(pl, w, k).items():
                parts[k][n].copy_(t)
            assert trainers[k].bind(parts[k]) == (len(SPECS) if v == 1 else 0)
        errors = []

        def push(k):
            try:
                trainers[k].push(d, v, 20000)
                trainers[k].wait_done(d, v, 20000)
            except te.TEError as ex:  # pragma: no cover - reported below
                errors.append(ex)
        th = [threading.Thread(target=push, args=(k,)) for k in range(2)]
        for t in th:
            t.start()
        rep = rv.update(d, v, 20000)
        for t in th:
            t.join()
        assert rep.ok and not errors, (rep.message, errors)
        assert rep.live_set == (v - 1) % 2 and rep.live_version == v
        live = rv.live()
        assert live is sets[rep.live_set]
        for p in params:
            got = live[p.name].reshape(-1).view(torch.uint8).cpu()
            assert torch.equal(got, expected(p, w)), p.name
        # The published destinations are the engine's own tensors.
        assert table_addrs(d, len(params)) == [live[p.name].data_ptr() for p in params]
    rv.close()


def test_bad_input_names_the_tensor(job):
    pl, trainers, r, d = job
    w = full(1)
    good = parts_of(pl, w, 0)
    name = "model.layers.0.mlp.down_proj.weight"
    regs = trainers[0].registrations
    cases = [
        ({**good, name: good[name].float()}, None, f"tensor '{name}': F32"),
        ({**good, name: good[name][:-1]}, None, f"tensor '{name}': "),
        ({k: v for k, v in good.items() if k != name}, None, f"tensor '{name}' has no source"),
        (good, {**pl.shapes, name: (INTER, H)}, f"tensor '{name}': BF16 [192, 160]"),
    ]
    for parts, shapes, want in cases:
        with pytest.raises(te.TEError) as ex:
            trainers[0].bind(parts, shapes)
        assert want in str(ex.value)
    assert trainers[0].registrations == regs  # nothing registered
    dests = weights.empty_params(pl, 0, make)
    bad = {**dests, name: torch.zeros(H, INTER + 1, dtype=torch.uint8)}
    with pytest.raises(ValueError, match=f"param '{name}'.*needs uint8"):
        weights.Receiver(r, pl, 0, bad)
    del dests["lm_head.weight"]
    with pytest.raises(te.TEError, match="param 'lm_head.weight' has no destination"):
        weights.Receiver(r, pl, 0, dests)
    assert not os.listdir(d)  # nothing published


def test_in_place_failure_is_reported_clobbered(job):
    """One set (engine paused during updates): a complete version is whole;
    a version that does not arrive is reported as having overwritten the
    params, with nothing claimed to serve."""
    pl, trainers, r, d = job
    dests = weights.empty_params(pl, 0, make)
    rv = weights.Receiver(r, pl, 0, dests)
    w = full(1)
    for k in range(2):
        trainers[k].bind(parts_of(pl, w, k))
    th = [threading.Thread(target=trainers[k].push, args=(d, 1, 20000)) for k in range(2)]
    for t in th:
        t.start()
    rep = rv.update(d, 1, 20000)
    for t in th:
        t.join()
    assert rep.ok and rep.live_set == 0 and rv.live() is dests
    for p in pl.rank_params(0):
        assert torch.equal(dests[p.name].reshape(-1).view(torch.uint8), expected(p, w))
    rep = rv.update(d, 2, 300)  # nobody pushes version 2
    assert not rep.ok and rep.clobbered and rep.live_set == -1 and rep.live_version == 0
    assert rv.live() is None and "mix of versions" in rep.message
    rv.close()
