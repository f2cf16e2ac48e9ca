"""A MoE layer as a torch.nn.Module whose experts are the rank's own
torch Linear layers, with dispatch and combine through TransferEngine
(transferengine.moe, docs/moe.md): R processes (multiprocessing), one
engine each on the loopback plugin, blobs exchanged through pipes. Every
rank checks its output against a dense single-process layer built from the
same seed (all experts, no network) on the same tokens.

    python3 python/examples/moe_layer.py [RANKS [TOPK [inplace] [cuda] [bf16]]]

prints one line per rank and "moe_layer: OK" when every rank matched.
``inplace``: the tokens are sent from a registered buffer; ``cuda``: every
rank's tokens, experts and MoE buffers on the (one) CUDA device, moved by
libte-moe-gpu without host copies (MoeRank(device="cuda")); the ranks stay
processes, all on that GPU. ``bf16``: a bfloat16 layer (router, experts,
tokens): the experts' bfloat16 outputs go to combine as they are (weighed
in float32 by the library, no float copy), the result is float32.
"""
import multiprocessing as mp
import sys

import torch

HIDDEN, EXPERTS_PER_RANK, MAX_TOKENS, SEED = 64, 4, 32, 1234
# The expert GEMMs run on different row sets (a rank's received rows here,
# one rank's tokens in the dense layer); everything else (gating, the sum
# order) is the same: fp32 results agree to this tolerance (docs/moe.md).
RTOL, ATOL = 1e-5, 1e-6
# bf16: an expert's bfloat16 output can differ by one bfloat16 step (2**-8
# relative) between the two row sets; the weights sum to 1.
BF16_RTOL, BF16_ATOL = 2 ** -7, 2 ** -7


def make_router_and_experts(experts):
    """The layer's parameters, the same in every process (seeded)."""
    g = torch.Generator().manual_seed(SEED)
    router = torch.nn.Linear(HIDDEN, experts, bias=False)
    with torch.no_grad():
        router.weight.copy_(torch.randn(experts, HIDDEN, generator=g) / 8)
    mlps = torch.nn.ModuleList()
    for _ in range(experts):
        lin = torch.nn.Linear(HIDDEN, HIDDEN)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(HIDDEN, HIDDEN, generator=g) / 8)
            lin.bias.copy_(torch.randn(HIDDEN, generator=g) / 8)
        mlps.append(lin)
    return router, mlps


def route(router, x, topk, skew_to=None):
    """Top-k of the router's softmax, weights renormalised. skew_to: add a
    large bias to that rank's experts (a hot rank)."""
    logits = router(x)
    if skew_to is not None:
        lo = skew_to * EXPERTS_PER_RANK
        logits[:, lo:lo + EXPERTS_PER_RANK] += 100.0
    w, ids = torch.topk(torch.softmax(logits, dim=-1), topk, dim=-1)
    return ids, w / w.sum(dim=-1, keepdim=True)


class DenseMoE(torch.nn.Module):
    """The reference: every expert here, no network. Per token, per rank
    in rank order, the sum over the token's top-k slots (in order) whose
    expert lives on that rank of weight * expert(x); the ranks' partial
    sums added in rank order (the library's order)."""

    def __init__(self, ranks, topk):
        super().__init__()
        self.ranks, self.topk = ranks, topk
        self.router, self.experts = make_router_and_experts(ranks * EXPERTS_PER_RANK)

    @torch.no_grad()
    def forward(self, x, skew_to=None):
        """float32 whatever x's dtype: weights and expert outputs widened
        to float32 before they are weighed, as the library does."""
        ids, w = route(self.router, x, self.topk, skew_to)
        out = torch.zeros(x.shape[0], HIDDEN, device=x.device)
        for t in range(x.shape[0]):
            for d in range(self.ranks):
                part = torch.zeros(HIDDEN, device=x.device)
                for j in range(self.topk):
                    e = int(ids[t, j])
                    if e // EXPERTS_PER_RANK == d:
                        y = self.experts[e](x[t:t + 1])[0].float()
                        part = part + w[t, j].float() * y
                out[t] = out[t] + part
        return out


class MoELayer(torch.nn.Module):
    """This rank's share of the layer: the router, its local experts
    (torch Linear), dispatch and combine through a MoeRank."""

    def __init__(self, moe_rank, topk):
        super().__init__()
        self.moe, self.topk = moe_rank, topk
        router, mlps = make_router_and_experts(moe_rank.experts)
        lo = moe_rank.rank * EXPERTS_PER_RANK
        self.router = router
        self.experts = torch.nn.ModuleList(mlps[lo:lo + EXPERTS_PER_RANK])

    @torch.no_grad()
    def forward(self, batch, x, skew_to=None):
        ids, w = route(self.router, x, self.topk, skew_to)
        got = self.moe.dispatch(batch, x, ids, w)
        y = self.moe.expert_out  # the layer's dtype: handed to combine as is
        for l, expert in enumerate(self.experts):
            n = got.counts[l]
            if n:
                y[l, :n] = expert(got.rows(l))
        return self.moe.combine(batch, y)


def tokens_of(rank, batch, n):
    g = torch.Generator().manual_seed(SEED * 7 + rank * 1000 + batch)
    return torch.randn(n, HIDDEN, generator=g)


# The batches every rank runs: (tokens of rank r, skew_to).
def plan(ranks):
    return [(lambda r: MAX_TOKENS, None),                 # uniform
            (lambda r: MAX_TOKENS // 2 + r, 0),           # all to rank 0
            (lambda r: 0 if r == ranks - 1 else 8, None)]  # one rank empty


def rank_main(rank, ranks, topk, conn, inplace=False, device=None,
              dtype=torch.float32):
    try:
        _rank_main(rank, ranks, topk, conn, inplace, device, dtype)
    except Exception as exc:  # noqa: BLE001 - the parent reports it
        conn.send({"error": f"rank {rank}: {type(exc).__name__}: {exc}"})


def _rank_main(rank, ranks, topk, conn, inplace, device, dtype):
    import transferengine as te
    from transferengine.moe import MoeRank
    with te.Engine() as e, MoeRank(e, rank, ranks, ranks * EXPERTS_PER_RANK,
                                   topk, HIDDEN, MAX_TOKENS, dtype=dtype,
                                   expert_dtype=dtype, device=device) as moe:
        conn.send(moe.blob())
        blobs = conn.recv()
        for peer, blob in enumerate(blobs):
            if peer != rank:
                moe.connect(peer, blob)
        conn.send("connected")
        conn.recv()  # every rank is connected to every other
        where = device or "cpu"
        layer = MoELayer(moe, topk).to(where, dtype)
        dense = DenseMoE(ranks, topk).to(where, dtype)
        rtol, atol = ((RTOL, ATOL) if dtype == torch.float32
                      else (BF16_RTOL, BF16_ATOL))
        # In place: the tokens live in one registered buffer, sent from
        # there without staging (kept unchanged until combine returns).
        buf = (torch.empty(MAX_TOKENS, HIDDEN, device=where, dtype=dtype)
               if inplace else None)
        if inplace:
            moe.register_input(buf)
        results = []
        for batch, (count, skew) in enumerate(plan(ranks)):
            x = tokens_of(rank, batch, count(rank)).to(where, dtype)
            if inplace:
                buf[:x.shape[0]].copy_(x)
                x = buf[:x.shape[0]]
            out = layer(batch, x, skew)
            ref = dense(x, skew)
            st = moe.stats()
            peers = [d for d in range(ranks) if d != rank]
            results.append({
                "batch": batch, "tokens": x.shape[0],
                "equal": bool(torch.equal(out, ref)),
                "close": bool(torch.allclose(out, ref, rtol=rtol, atol=atol)),
                "out_dtype": str(out.dtype),
                "max_diff": float((out - ref).abs().max()) if x.shape[0] else 0.0,
                "dispatch_writes": [st["dispatch_writes"][d] for d in peers],
                "combine_writes": [st["combine_writes"][d] for d in peers],
                "pack_us": st["pack_us"]})
        conn.send(results)
        conn.recv()  # stay until every rank is through


def run(ranks, topk, inplace=False, device=None, dtype=torch.float32):
    """Run the layer on `ranks` processes (inplace: tokens sent from a
    registered buffer; device: "cuda" for device tensors; dtype: the
    layer's, float32 or bfloat16); the per-rank results."""
    ctx = mp.get_context("spawn")
    pipes, procs = [], []
    for r in range(ranks):
        a, b = ctx.Pipe()
        p = ctx.Process(target=rank_main,
                        args=(r, ranks, topk, b, inplace, device, dtype))
        p.start()
        pipes.append(a)
        procs.append(p)
    try:
        def gather():
            got = []
            for a in pipes:
                if not a.poll(120):
                    raise TimeoutError("a rank did not answer in 120 s")
                got.append(a.recv())
                if isinstance(got[-1], dict) and "error" in got[-1]:
                    raise RuntimeError(got[-1]["error"])
            return got
        blobs = gather()
        for a in pipes:
            a.send(blobs)
        gather()
        for a in pipes:
            a.send("go")
        results = gather()
        for a in pipes:
            a.send("bye")
        return results
    except BaseException:
        for p in procs:  # the others wait for a message that never comes
            p.kill()
        raise
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()


def main():
    ranks = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    topk = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    inplace = "inplace" in sys.argv[3:]
    device = "cuda" if "cuda" in sys.argv[3:] else None
    dtype = torch.bfloat16 if "bf16" in sys.argv[3:] else torch.float32
    ok = True
    for rank, res in enumerate(run(ranks, topk, inplace, device, dtype)):
        for b in res:
            good = (b["close"] and all(1 <= w <= 2 for w in b["dispatch_writes"])
                    and all(w == 1 for w in b["combine_writes"]))
            ok &= good
            print(f"rank {rank} batch {b['batch']}: {b['tokens']} tokens, "
                  f"max |out - dense| {b['max_diff']:.3g}, bit-equal "
                  f"{b['equal']}, writes per peer dispatch "
                  f"{b['dispatch_writes']} combine {b['combine_writes']}")
    print("moe_layer: OK" if ok else "moe_layer: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
