"""MoE dispatch and combine with torch tensors (libte-moe, docs/moe.md).

One :class:`MoeRank` per rank of the layer, on an :class:`Engine`. Ranks
exchange :meth:`MoeRank.blob` (any channel: pipes, a store) and
:meth:`MoeRank.connect` to each other, then per batch, every rank with the
same batch number (consecutive)::

    got = rank.dispatch(batch, x, topk_ids, topk_weights)
    for l in range(rank.local_experts):          # the application's experts
        n = got.counts[l]
        rank.expert_out[l, :n] = experts[l](got.x[l, :n])
    out = rank.combine(batch, rank.expert_out)   # [tokens, hidden] fp32
                                                 # (outputs fp32 or bf16)

``got.x[l, :counts[l]]`` are the tokens that chose local expert l (global
``rank * local_experts + l``), sources in rank order then token order;
``got.src_rank``, ``got.src_token``, ``got.slot`` and ``got.weight`` say
where each came from. ``out[t]`` is the gate-weighted sum over the token's
top-k experts, summed per rank in rank order (docs/moe.md, "Exactness").
``dispatch_start``/``dispatch_wait`` and ``combine_start``/``combine_wait``
are the same calls in halves, to overlap other work with the transfers.

The receive buffers (``x``, sources, counts) and ``expert_out`` are
allocated once per rank, ``capacity`` rows per local expert (default
``ranks * max_tokens``, which cannot overflow; smaller is refused when a
batch brings more rows, before anything is written). By default the
tensors are host tensors (a CUDA tensor handed to dispatch or combine is
copied to the host). With ``device="cuda"`` (or ``"cuda:N"``) they live on
that device: ``got.x``, ``expert_out`` and combine's result are CUDA
tensors, x and the expert outputs are read where they are (no host copy),
through libte-moe-gpu's memory backend on the stream that was current at
construction (produce x and expert_out on it, or synchronize); routing
(ids, weights), counts and sources stay on the host (docs/moe.md, "Memory
backends").

Bad input raises before anything is written, and the other ranks are told
(they raise too, naming this rank): expert ids out of range (ValueError),
more tokens than ``max_tokens``, expert outputs of another shape or dtype
(ValueError), a combine of a batch that was not dispatched or twice.
"""
import torch

from ._lib import TEError, ffi as _core_ffi
from ._te_moe import ffi, lib

_DTYPES = {torch.float32: lib.TE_MOE_FP32, torch.bfloat16: lib.TE_MOE_BF16}


def _check(rc, call):
    if rc < 0:
        raise TEError(-rc, ffi.string(lib.te_moe_last_error()).decode(
            "utf-8", "replace"), call)
    return rc


def _ptr(t, ctype):
    return ffi.cast(ctype, t.data_ptr())


class Received:
    """What dispatch delivered to this rank (views of the rank's receive
    buffers: valid until the next dispatch)."""

    def __init__(self, x, counts, src):
        self.x = x              #: [L, capacity, hidden], the config's dtype
        self.counts = counts    #: rows per local expert (list of int)
        self.src_rank = src[..., 0]   #: [L, capacity] int32
        self.src_token = src[..., 1]  #: [L, capacity] int32
        self.slot = src[..., 2]       #: [L, capacity] top-k position
        self.weight = src.view(torch.float32)[..., 3]  #: [L, capacity]

    def rows(self, l):
        """The tokens that chose local expert l: x[l, :counts[l]]."""
        return self.x[l, :self.counts[l]]


class MoeRank:
    """Rank ``rank`` of ``ranks`` of a MoE layer on ``engine`` (te_moe_rank).

    experts: E (a multiple of ranks); topk: 1..8; hidden: a multiple of 8;
    dtype: torch.float32 or torch.bfloat16 (tokens); max_tokens: tokens per
    batch at most; private_rows: rows per source the first dispatch write
    carries (default 2 * max_tokens / ranks); capacity: rows per local
    expert of the receive buffers; timeout_ms: deadline of every phase;
    expert_dtype: the dtype of ``expert_out`` (float32 or bfloat16, e.g.
    a bf16 model's expert outputs, weighed in float32 by combine)."""

    def __init__(self, engine, rank, ranks, experts, topk, hidden, max_tokens,
                 *, dtype=torch.float32, private_rows=None, capacity=None,
                 timeout_ms=5000, device=None, expert_dtype=torch.float32):
        if dtype not in _DTYPES:
            raise ValueError(f"dtype {dtype}: float32 or bfloat16")
        if expert_dtype not in _DTYPES:
            raise ValueError(f"expert_dtype {expert_dtype}: float32 or bfloat16")
        device = torch.device(device) if device is not None else None
        if device is not None and device.type == "cpu":
            device = None
        if device is not None and device.type != "cuda":
            raise ValueError(f"device {device}: cpu or cuda")
        if device is not None and not torch.cuda.is_available():
            raise TEError(19, "no CUDA device: torch.cuda.is_available() is "
                          "False", "MoeRank(device=cuda)")
        if device is not None and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        #: where the tensors live: None (host) or the CUDA device
        self.device = device
        self._backend = None
        self.rank, self.ranks, self.experts, self.topk = rank, ranks, experts, topk
        self.hidden, self.max_tokens, self.dtype = hidden, max_tokens, dtype
        self.local_experts = experts // ranks if ranks else 0
        c = ffi.new("te_moe_config *")
        c.ranks, c.experts, c.topk, c.hidden = ranks, experts, topk, hidden
        c.dtype, c.max_tokens, c.timeout_ms = _DTYPES[dtype], max_tokens, timeout_ms
        c.private_rows = (min(max_tokens, max(1, 2 * max_tokens // ranks))
                          if private_rows is None and ranks else private_rows or 0)
        out = ffi.new("te_moe_rank **")
        # The engine comes from the core module: hand its address across.
        e = ffi.cast("te_engine *",
                     int(_core_ffi.cast("uintptr_t", engine._cdata())))
        _check(lib.te_moe_rank_new(e, c, rank, out), "te_moe_rank_new")
        self._r = out[0]
        self._engine = engine  # outlives the rank
        if device is not None:
            self._attach_device(device)
        self.capacity = capacity or ranks * max_tokens
        L, cap = self.local_experts, self.capacity
        where = device or "cpu"
        self._x = torch.empty((L, cap, hidden), dtype=dtype, device=where)
        self._src = torch.zeros((L, cap, 4), dtype=torch.int32)
        self._count = torch.zeros(L, dtype=torch.int32)
        #: [L, capacity, hidden] of expert_dtype: where the experts may
        #: write for combine
        self.expert_out = torch.zeros((L, cap, hidden), dtype=expert_dtype,
                                      device=where)
        self._recv = ffi.new("te_moe_recv *")
        self._recv.x = _ptr(self._x, "void *")
        self._recv.src = _ptr(self._src, "te_moe_src *")
        self._recv.count = _ptr(self._count, "uint32_t *")
        self._recv.capacity = cap
        self._tokens = 0
        self._out = None

    # ------------------------------------------------------------ setup
    def _attach_device(self, device):
        """libte-moe-gpu's backend on the current stream of device."""
        from ._moe_gpu import DeviceBackend
        self._ops = ffi.new("te_moe_mem_ops *")
        try:
            with torch.cuda.device(device):
                self.stream = torch.cuda.current_stream(device)
                self._backend = DeviceBackend(
                    int(ffi.cast("uintptr_t", self._ops)),
                    self.stream.cuda_stream)
            _check(lib.te_moe_rank_mem_ops(self._r, self._ops),
                   "te_moe_rank_mem_ops")
        except BaseException:
            self.close()
            raise

    def _here(self, t, dtype=None):
        """t on this rank's tensors' device (no copy if it is there)."""
        t = t.detach()
        if dtype is not None and t.dtype != dtype:
            t = t.to(dtype)
        return t.to(self.device or "cpu").contiguous()

    def blob(self) -> bytes:
        """What the other ranks need to connect to this one."""
        n = ffi.new("size_t *", 8192)
        buf = ffi.new("uint8_t[]", 8192)
        _check(lib.te_moe_rank_blob(self._live(), buf, n), "te_moe_rank_blob")
        return bytes(ffi.buffer(buf, n[0]))

    def connect(self, peer: int, blob: bytes) -> None:
        """Connect to rank ``peer`` from its blob (refused when its shape
        differs: TEError naming the field)."""
        _check(lib.te_moe_rank_connect(self._live(), peer, blob, len(blob)),
               "te_moe_rank_connect")

    def _live(self):
        if self._r is None:
            raise TEError(108, "MoE rank is closed", "MoeRank")
        return self._r

    # ------------------------------------------------------------ dispatch
    def register_input(self, x) -> None:
        """Register x (a contiguous tensor of the rank's dtype on the rank's
        device, e.g. [max_tokens, hidden]) once for in-place dispatch: a
        dispatch whose
        tokens are x[:T] sends them to a rank that gets at least 3/4 of
        them straight from x, without staging (docs/moe.md "In-place
        input"). x must then stay unchanged until combine_wait returns; the
        rank keeps a reference to it. None drops the registration."""
        if x is None:
            _check(lib.te_moe_rank_input(self._live(), ffi.NULL, 0),
                   "te_moe_rank_input")
            self._input = None
            return
        want = self.device or torch.device("cpu")
        if (x.device != want or not x.is_contiguous()
                or x.dtype != self.dtype or x.numel() == 0):
            where = "CPU" if self.device is None else str(self.device)
            raise ValueError(f"rank {self.rank}: the input must be a non-empty "
                             f"contiguous {where} tensor of {self.dtype}, got "
                             f"{x.dtype} {tuple(x.shape)} on {x.device}")
        _check(lib.te_moe_rank_input(self._live(), _ptr(x, "void *"),
                                     x.numel() * x.element_size()),
               "te_moe_rank_input")
        self._input = x

    def dispatch_start(self, batch, x, topk_ids, topk_weights) -> None:
        """Stage and write this rank's tokens x [T, hidden] (the rank's
        dtype) routed to topk_ids [T, k] (any integer dtype) with gate
        weights topk_weights [T, k] (float32). Returns without waiting.
        x[:T] of the tensor given to register_input() is sent in place."""
        T = x.shape[0] if x.dim() else 0
        ids = topk_ids.reshape(T, self.topk) if T else topk_ids
        bad = (ids < 0) | (ids >= self.experts) if T else None
        refusal = None
        if bad is not None and bool(bad.any()):
            t, j = (int(v) for v in bad.nonzero()[0])
            refusal = ValueError(f"rank {self.rank}: token {t} slot {j}: "
                                 f"expert {int(ids[t, j])} out of range "
                                 f"({self.experts} experts)")
            # The library refuses it too, and tells the other ranks (ids
            # that do not fit its uint16 reach it as 65535).
            wide = (ids < 0) | (ids > 0xFFFF)
            ids = torch.where(wide, torch.full_like(ids, 0xFFFF), ids)
        if x.dtype != self.dtype or (T and tuple(x.shape) != (T, self.hidden)):
            raise ValueError(f"rank {self.rank}: tokens are {x.dtype} "
                             f"{tuple(x.shape)}, the layer takes {self.dtype} "
                             f"[T, {self.hidden}]")
        x = self._here(x)
        # uint16 bits (torch has no uint16): 0..65535 through int32 -> int16.
        ids16 = ids.to("cpu", torch.int32).to(torch.int16).contiguous()
        w = topk_weights.detach().to("cpu", torch.float32).reshape(
            T, self.topk).contiguous()
        rc = lib.te_moe_dispatch_start(self._live(), batch, T,
                                       _ptr(x, "void *"),
                                       _ptr(ids16, "uint16_t *"),
                                       _ptr(w, "float *"))
        if refusal is not None:
            raise refusal
        _check(rc, "te_moe_dispatch_start")
        self._tokens = T

    def dispatch_wait(self) -> Received:
        """Wait for every rank's rows; they are laid out per local expert."""
        _check(lib.te_moe_dispatch_wait(self._live(), self._recv),
               "te_moe_dispatch_wait")
        return Received(self._x, self._count.tolist(), self._src)

    def dispatch(self, batch, x, topk_ids, topk_weights) -> Received:
        """dispatch_start then dispatch_wait."""
        self.dispatch_start(batch, x, topk_ids, topk_weights)
        return self.dispatch_wait()

    # ------------------------------------------------------------ combine
    def combine_start(self, batch, expert_out) -> None:
        """Send the local experts' outputs expert_out [L, capacity, hidden]
        float32 or bfloat16, whatever the tokens' dtype (row i of expert l:
        the output for dispatch's x[l, i]). bfloat16 outputs are weighed in
        float32 after an exact widening: the result has the bits of
        ``combine(batch, expert_out.float())`` without that copy."""
        y = expert_out.detach()
        dtype = _DTYPES.get(y.dtype, 0)
        shape = tuple(y.shape) if y.dim() == 3 else (0, 0, 0)
        y = self._here(y)
        out = ffi.new("te_moe_expert_out *")
        out.y = _ptr(y, "void *")
        out.dtype = dtype
        out.experts, out.rows, out.hidden = shape
        rc = lib.te_moe_combine_start(self._live(), batch, out)
        if rc == -22:  # EINVAL: shape or dtype; the other ranks are told
            raise ValueError(f"rank {self.rank}: expert outputs are "
                             f"{expert_out.dtype} {tuple(expert_out.shape)}, "
                             f"combine takes torch.float32 or torch.bfloat16 "
                             f"({self.local_experts}, "
                             f"{self.capacity}, {self.hidden})")
        _check(rc, "te_moe_combine_start")

    def combine_wait(self) -> torch.Tensor:
        """Wait for every rank's partial results: [T, hidden] float32, per
        token the gate-weighted sum of its experts' outputs."""
        out = torch.empty((self._tokens, self.hidden), dtype=torch.float32,
                          device=self.device or "cpu")
        _check(lib.te_moe_combine_wait(self._live(), _ptr(out, "float *")),
               "te_moe_combine_wait")
        return out

    def combine(self, batch, expert_out) -> torch.Tensor:
        """combine_start then combine_wait."""
        self.combine_start(batch, expert_out)
        return self.combine_wait()

    # ------------------------------------------------------------ the rest
    def stats(self) -> dict:
        """te_moe_rank_stats of the last batch: writes and bytes per peer,
        dispatch/combine/pack/post/experts/layout times (us)."""
        s = ffi.new("te_moe_stats *")
        lib.te_moe_rank_stats(self._live(), s)
        R = self.ranks
        return {"dispatch_writes": list(s.dispatch_writes)[:R],
                "combine_writes": list(s.combine_writes)[:R],
                "dispatch_bytes": list(s.dispatch_bytes)[:R],
                "combine_bytes": list(s.combine_bytes)[:R],
                "rows_sent": s.rows_sent, "rows_received": s.rows_received,
                "dispatch_us": s.dispatch_us, "combine_us": s.combine_us,
                "pack_us": s.pack_us, "post_us": s.post_us,
                "experts_us": s.experts_us, "layout_us": s.layout_us}

    def close(self) -> None:
        """Remove the peers this rank added (call it on every rank before
        any engine closes) and free the rank."""
        if self._r is None:
            return
        r, self._r = self._r, None
        lib.te_moe_rank_disconnect(r)
        lib.te_moe_rank_free(r)  # detaches the backend first
        if self._backend is not None:
            self._backend.free()
            self._backend = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["MoeRank", "Received"]
