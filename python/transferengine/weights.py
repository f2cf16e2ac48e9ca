"""RL weight updates from the trainer's own tensors into the engine's own
parameters (libte-weights, docs/weights.md "Python").

    plan = weights.Plan.from_named(model.named_parameters(), trainers=2,
                                   fp8=True)
    # trainer rank t: its FSDP part of every tensor, as the framework holds it
    tr = weights.Trainer(engine, plan, t)
    tr.bind({name: part_tensor, ...})       # registered once, read in place
    tr.push(dir, version)
    # inference rank r: its own parameter tensors, two sets (double-buffered)
    rv = weights.Receiver(engine, plan, r, params_a, params_b)
    rep = rv.update(dir, version)           # rep.live_set: flip to that set

A tensor is anything with a contiguous buffer: a torch tensor (data_ptr)
or a numpy array. The library never copies the weights into buffers of
its own; the objects passed are kept alive by the Trainer / Receiver.
Errors: TEError (errno + the library's message) or ValueError naming the
tensor, raised before anything is registered or written.
"""
import dataclasses
from typing import Dict, Iterable, Optional, Tuple

from ._lib import TEError

try:
    from ._te_weights import ffi, lib
except ImportError as exc:  # pragma: no cover - a clear message instead
    raise ImportError(
        "transferengine.weights: the compiled module _te_weights is missing: "
        "build the python-binding target with the weights app (libte-weights) "
        "built, docs/python.md") from exc

_DTYPES = {  # torch / numpy dtype name -> te_wt_dtype
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "float16": "F16",
    "bfloat16": "BF16", "int32": "I32", "float32": "F32", "int64": "I64",
    "float64": "F64", "uint16": "U16", "uint32": "U32", "uint64": "U64",
}


def _check(rc, call):
    if rc < 0:
        raise TEError(-rc, ffi.string(lib.te_wt_last_error()).decode(), call)
    return rc


def _dtype(obj) -> int:
    name = str(obj.dtype).replace("torch.", "")
    if name not in _DTYPES:
        raise ValueError(f"dtype {obj.dtype} has no safetensors equivalent")
    out = ffi.new("te_wt_dtype *")
    _check(lib.te_wt_dtype_parse(_DTYPES[name].encode(), out), "te_wt_dtype_parse")
    return out[0]


def _memory(obj, what: str) -> Tuple[int, int, int]:
    """(address, bytes, TE_MEM_*) of a contiguous tensor or array."""
    if hasattr(obj, "data_ptr"):  # torch
        if not obj.is_contiguous():
            raise ValueError(f"{what}: tensor is not contiguous")
        mem = lib.TE_MEM_CUDA if obj.device.type == "cuda" else lib.TE_MEM_HOST
        return obj.data_ptr(), obj.numel() * obj.element_size(), mem
    if not obj.flags["C_CONTIGUOUS"]:
        raise ValueError(f"{what}: array is not C-contiguous")
    return obj.ctypes.data, obj.nbytes, lib.TE_MEM_HOST


@dataclasses.dataclass(frozen=True)
class RankParam:
    """What an inference rank holds of one param (te_wt_rank_param): the
    destination the engine must provide. fp8: a uint8 tensor of `bytes`
    (codes, then float32 scales: _weights_fp8.slice_views); otherwise a
    `dtype` tensor of rows x cols (fused members concatenated by rows)."""
    name: str
    members: int
    fp8: bool
    dtype: str
    rows: int
    cols: int
    bytes: int


class Plan:
    """Model metadata, the inference layout and the static schedule, built
    from the framework's own names, shapes and dtypes (every process of a
    job builds the same plan from the same model definition)."""

    def __init__(self, tensors: Iterable[Tuple[str, Tuple[int, ...], str]], *,
                 trainers: int, ranks: int = 1, tp: int = 1, ep: int = 0,
                 fp8: bool = False, nics: int = 1, staging_bytes: int = 64 << 20,
                 name: str = "model"):
        self.trainers, self.ranks, self.nics = trainers, ranks, nics
        tensors = list(tensors)
        arr = ffi.new("te_wt_tensor[]", max(len(tensors), 1))
        keep = []
        for i, (tname, shape, dtype) in enumerate(tensors):
            if len(shape) > lib.TE_WT_MAX_DIMS:
                raise ValueError(f"tensor '{tname}': {len(shape)} dims")
            keep.append(ffi.new("char[]", tname.encode()))
            arr[i].name = keep[-1]
            arr[i].dtype = _dtype(_Named(dtype))
            arr[i].ndim = len(shape)
            for d, n in enumerate(shape):
                arr[i].shape[d] = n
        m = ffi.new("te_wt_model **")
        _check(lib.te_wt_model_new(name.encode(), arr, len(tensors), m), "te_wt_model_new")
        self._m = ffi.gc(m[0], lib.te_wt_model_free)
        layout = ffi.new("te_wt_infer_layout *", (ranks, tp, ep, 1 if fp8 else 0))
        sh = ffi.new("te_wt_sharding **")
        _check(lib.te_wt_sharding_build(self._m, layout, sh), "te_wt_sharding_build")
        self._sh = ffi.gc(sh[0], lib.te_wt_sharding_free)
        s = ffi.new("te_wt_schedule **")
        _check(lib.te_wt_schedule_build(self._m, self._sh, trainers, nics, staging_bytes, s),
               "te_wt_schedule_build")
        self._s = ffi.gc(s[0], lib.te_wt_schedule_free)
        self._index = {t[0]: i for i, t in enumerate(tensors)}
        self.shapes = {t[0]: tuple(t[1]) for t in tensors}

    @classmethod
    def from_named(cls, named: Iterable, **kw) -> "Plan":
        """From (name, tensor) pairs, e.g. model.named_parameters()."""
        return cls([(n, tuple(t.shape), str(t.dtype).replace("torch.", ""))
                    for n, t in named], **kw)

    def fsdp_range(self, name: str, trainer: int) -> Tuple[int, int]:
        """Elements [begin, end) of tensor `name` that training rank
        `trainer` holds (FSDP: contiguous, ceil(n / trainers) each)."""
        t = self._m.tensors + self._index[name]
        b, e = ffi.new("uint64_t *"), ffi.new("uint64_t *")
        lib.te_wt_fsdp_range(t, self.trainers, trainer, b, e)  # in bytes
        es = lib.te_wt_dtype_size(t.dtype)
        return b[0] // es, e[0] // es

    def rank_params(self, rank: int):
        """The params inference rank `rank` holds, in order (RankParam)."""
        n = _check(lib.te_wt_rank_params(self._m, self._sh, rank, ffi.NULL, 0),
                   "te_wt_rank_params")
        out = ffi.new("te_wt_rank_param[]", max(n, 1))
        lib.te_wt_rank_params(self._m, self._sh, rank, out, n)
        names = {_dtype(_Named(k)): k for k in _DTYPES}
        return [RankParam(ffi.string(p.name).decode(), p.members, bool(p.fp8),
                          names[p.dtype], p.rows, p.cols, p.bytes) for p in out[0:n]]


class _Named:
    """A stand-in with a .dtype attribute for _dtype()."""

    def __init__(self, name):
        self.dtype = name


class Trainer:
    """A training rank (te_wt_trainer) on `engine` (a transferengine.Engine)
    for `plan`; rank is this process's FSDP rank."""

    def __init__(self, engine, plan: Plan, rank: int):
        self.plan, self.rank, self._engine = plan, rank, engine
        self._sources = {}
        t = ffi.new("te_wt_trainer **")
        _check(lib.te_wt_trainer_create(_engine_ptr(engine), plan._m, plan._sh, plan._s,
                                        rank, t), "te_wt_trainer_create")
        self._t = t[0]

    def bind(self, parts: Dict[str, object],
             shapes: Optional[Dict[str, Tuple[int, ...]]] = None) -> int:
        """Hand over this rank's part of every tensor (name -> contiguous
        tensor holding elements fsdp_range(name, rank), in the model's
        dtype), and optionally each tensor's full shape as the framework
        records it (default: the plan's). Returns the registrations made: 0
        when every address is the one bound before."""
        shapes = shapes or self.plan.shapes
        src = ffi.new("te_wt_source[]", max(len(parts), 1))
        keep = []
        for i, (name, t) in enumerate(parts.items()):
            addr, nbytes, mem = _memory(t, f"tensor '{name}'")
            keep.append(ffi.new("char[]", name.encode()))
            shape = shapes.get(name, ())
            src[i].name = keep[-1]
            src[i].addr = ffi.cast("void *", addr)
            src[i].bytes = nbytes
            src[i].dtype = _dtype(t)
            src[i].ndim = len(shape)
            for d, n in enumerate(shape[:lib.TE_WT_MAX_DIMS]):
                src[i].shape[d] = n
            src[i].mem = mem
        n = _check(lib.te_wt_trainer_bind(self._t, src, len(parts)), "te_wt_trainer_bind")
        self._sources = dict(parts)  # alive while registered
        return n

    def set_progress(self, fn) -> None:
        """fn(writes, total_writes, bytes, total_bytes, inflight), called on
        the pushing thread after each param's writes were submitted (None
        removes it)."""
        if fn is None:
            self._progress = None
            lib.te_wt_trainer_set_progress(self._t, ffi.NULL, ffi.NULL)
            return
        self._progress = ffi.callback(
            "void(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, void *)",
            lambda w, tw, b, tb, inf, _arg: fn(w, tw, b, tb, inf))
        lib.te_wt_trainer_set_progress(self._t, self._progress, ffi.NULL)

    @property
    def registrations(self) -> int:
        """Registrations made for sources so far."""
        return lib.te_wt_trainer_registrations(self._t)

    def push(self, directory: str, version: int, timeout_ms: int = 30000) -> dict:
        """te_wt_trainer_push: gather, fuse, quantise and write `version`."""
        st = ffi.new("te_wt_push_stats *")
        _check(lib.te_wt_trainer_push(self._t, directory.encode(), version, timeout_ms, st),
               "te_wt_trainer_push")
        return {k: getattr(st, k) for k in ("writes", "write_bytes", "reads",
                                            "read_bytes", "seconds", "peak_inflight")}

    def wait_done(self, directory: str, version: int, timeout_ms: int = 30000) -> None:
        """Wait until every trainer finished `version` (then change the parts)."""
        _check(lib.te_wt_trainer_wait_done(self._t, directory.encode(), version, timeout_ms),
               "te_wt_trainer_wait_done")

    def close(self) -> None:
        """te_wt_trainer_destroy (the sources are released after it)."""
        if self._t is not None:
            lib.te_wt_trainer_destroy(self._t)
            self._t = None
            self._sources = {}


@dataclasses.dataclass
class Report:
    """Outcome of one version at a receiver (te_wt_update_report)."""
    ok: bool
    version: int
    live_version: int
    live_set: int
    expected: int
    missing: int
    missing_names: str
    clobbered: bool
    message: str


class Receiver:
    """An inference rank (te_wt_receiver) writing into the engine's own
    parameters: `set0` (and `set1` for double buffering) map every
    RankParam name of this rank to the engine's tensor for it."""

    def __init__(self, engine, plan: Plan, rank: int, set0: Dict[str, object],
                 set1: Optional[Dict[str, object]] = None):
        self.plan, self.rank, self._engine = plan, rank, engine
        want = {p.name: p for p in plan.rank_params(rank)}
        self._sets = [set0] + ([set1] if set1 is not None else [])
        arrays, keep = [], []
        for k, params in enumerate(self._sets):
            arr = ffi.new("te_wt_dest[]", max(len(params), 1))
            for i, (name, t) in enumerate(params.items()):
                _check_dest(want.get(name), name, t, k)
                addr, nbytes, mem = _memory(t, f"set {k}: param '{name}'")
                keep.append(ffi.new("char[]", name.encode()))
                arr[i] = (keep[-1], ffi.cast("void *", addr), nbytes, mem)
            arrays.append(arr)
        if len(set0) != (len(set1) if set1 is not None else len(set0)):
            raise ValueError("set 0 and set 1 hold different numbers of params")
        r = ffi.new("te_wt_receiver **")
        _check(lib.te_wt_receiver_create_into(
            _engine_ptr(engine), plan._m, plan._sh, plan._s, rank, arrays[0],
            arrays[1] if len(arrays) > 1 else ffi.NULL, len(set0), r),
            "te_wt_receiver_create_into")
        self._r = r[0]

    def update(self, directory: str, version: int, timeout_ms: int = 30000) -> Report:
        """te_wt_receiver_update: a Report (ok False at the deadline, with the
        missing tensors; other failures raise TEError)."""
        rep = ffi.new("te_wt_update_report *")
        rc = lib.te_wt_receiver_update(self._r, directory.encode(), version, timeout_ms, rep)
        msg = ffi.string(lib.te_wt_last_error()).decode() if rc else ""
        if rc and not rep.expected:
            _check(rc, "te_wt_receiver_update")
        return Report(rc == 0, rep.version, rep.live_version, rep.live_set, rep.expected,
                      rep.missing, ffi.string(rep.missing_names).decode(),
                      bool(rep.clobbered), msg)

    @property
    def live_set(self) -> int:
        """The serving set (0/1), -1 before the first version."""
        return lib.te_wt_receiver_live_set(self._r, ffi.NULL)

    def live(self) -> Optional[Dict[str, object]]:
        """The serving set's tensors (the engine's own), None before any."""
        s = self.live_set
        return None if s < 0 else self._sets[s]

    def wait_trainers(self, directory: str, version: int, timeout_ms: int = 30000) -> None:
        """Wait until every trainer finished `version` (before shutting down)."""
        _check(lib.te_wt_receiver_wait_trainers(self._r, directory.encode(), version,
                                                timeout_ms), "te_wt_receiver_wait_trainers")

    def close(self) -> None:
        """te_wt_receiver_destroy (the destinations are deregistered)."""
        if self._r is not None:
            lib.te_wt_receiver_destroy(self._r)
            self._r = None


def _check_dest(p: Optional[RankParam], name: str, t, k: int) -> None:
    """The engine's tensor for a param must have its dtype and shape (fp8:
    uint8 of the slice's bytes), before anything is registered."""
    if p is None:
        return  # the library names it ("is not a param of this rank")
    dtype, shape = str(t.dtype).replace("torch.", ""), tuple(t.shape)
    if p.fp8:
        ok, want = dtype == "uint8" and shape == (p.bytes,), f"uint8 [{p.bytes}]"
    else:
        ok = dtype == p.dtype and shape in ((p.rows, p.cols), (p.rows * p.cols,))
        want = f"{p.dtype} [{p.rows}, {p.cols}]"
    if not ok:
        raise ValueError(f"set {k}: param '{name}': {t.dtype} {list(t.shape)}, the "
                         f"schedule's model needs {want}")


def empty_params(plan: Plan, rank: int, make) -> Dict[str, object]:
    """One destination per param of `rank`, made by make(RankParam) (e.g.
    a torch.empty of the right dtype and shape): a convenience for an engine
    that allocates its parameters from the plan."""
    return {p.name: make(p) for p in plan.rank_params(rank)}


def _engine_ptr(engine):
    """The te_engine * of a transferengine.Engine, in this module's ffi."""
    from ._lib import ffi as core_ffi
    return ffi.cast("te_engine *", int(core_ffi.cast("uintptr_t", engine._cdata())))
