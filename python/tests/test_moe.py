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
