"""Requests (te_request) built from Python objects, and Transfer: the
future of a submitted request. Arrays and descriptors are copied by
te_submit(), so numpy index arrays are passed zero-copy and may be reused
as soon as submit returns."""
import asyncio
import collections
import concurrent.futures
import threading
from typing import Any, Iterable, Optional, Tuple, Union

from ._lib import check, ffi, lib, TEError, cstr
from .memory import Descriptor, MemoryRegion, as_desc

#: A destination: a Descriptor or its serialized bytes.
DescLike = Union[Descriptor, bytes, bytearray, memoryview]

Completion = collections.namedtuple(
    "Completion", "user_data req_id status op reason")
Completion.__doc__ = "A request's completion (te_completion)."

OPS = {"write": lib.TE_OP_WRITE, "paged": lib.TE_OP_PAGED,
       "scatter": lib.TE_OP_SCATTER, "barrier": lib.TE_OP_BARRIER,
       "read": lib.TE_OP_READ, "send": lib.TE_OP_SEND}


def completion(c: Any) -> Completion:
    """A Completion from a te_completion (cdata)."""
    status = c.status
    # reason is "" on success: skip decoding it (hot path of polling).
    return Completion(c.user_data, c.req_id, status, c.op,
                      cstr(c.reason) if status else "")


class Request:
    """One te_request, reusable: submit it as often as wanted (change
    ``imm`` or ``user_data`` in between), also from several threads at
    once (changing its fields while another thread submits it is a race of
    the caller's). Build with the functions of this module (write(),
    paged(), ...)."""

    __slots__ = ("_r", "_keep", "op", "_lock")

    def __init__(self, op, *, imm=None, group=0, pin=None, nics=0,
                 timeout_ms=0, user_data=0):
        self._r = ffi.new("te_request *")
        self.op = op
        self._keep = []
        # Engine.submit() sets done/done_arg and submits under this lock, so
        # threads sharing one Request never hand te_submit() each other's
        # completion handle.
        self._lock = threading.Lock()
        # te_request_init() and the common fields in one C call.
        lib.tepy_request_setup(
            self._r, OPS[op], 0 if imm is None else lib.TE_F_IMM,
            0 if imm is None else imm, group, timeout_ms,
            lib.TE_ROUTE_SHARD if pin is None else lib.TE_ROUTE_PIN,
            nics if pin is None else 0, 0 if pin is None else pin, user_data)

    @property
    def imm(self) -> Optional[int]:
        """The immediate carried (None: no TE_F_IMM)."""
        return int(self._r.imm) if self._r.flags & lib.TE_F_IMM else None

    @imm.setter
    def imm(self, value: Optional[int]) -> None:
        if value is None:
            self._r.flags &= ~lib.TE_F_IMM
        else:
            self._r.flags |= lib.TE_F_IMM
            self._r.imm = value

    @property
    def user_data(self) -> int:
        """Returned in the request's Completion."""
        return int(self._r.user_data)

    @user_data.setter
    def user_data(self, value: int) -> None:
        self._r.user_data = value

    def _hold(self, obj):
        self._keep.append(obj)
        return obj


def _mr(mr):
    return mr._cdata()


def write(peer: int, local: MemoryRegion, remote: DescLike, length: int, *,
          local_offset: int = 0, remote_offset: int = 0, **kw: Any) -> Request:
    """One-sided write of `length` bytes from MemoryRegion `local` at
    local_offset to Descriptor `remote` at remote_offset (imm= carries an
    immediate)."""
    return _xfer("write", peer, local, remote, length, local_offset,
                 remote_offset, kw)


def read(peer: int, local: MemoryRegion, remote: DescLike, length: int, *,
         local_offset: int = 0, remote_offset: int = 0, **kw: Any) -> Request:
    """One-sided read of `length` bytes of `remote` into MemoryRegion
    `local`."""
    return _xfer("read", peer, local, remote, length, local_offset,
                 remote_offset, kw)


def _xfer(op, peer, local, remote, length, loff, roff, kw):
    q = Request(op, **kw)
    lib.tepy_set_xfer(q._r, peer, _mr(local), loff, q._hold(as_desc(remote)),
                      roff, length)
    return q


def _u32_array(q, arr, what):
    """A uint32_t * to a numpy array or sequence without copying arrays
    that are already uint32 and C-contiguous."""
    dtype = getattr(arr, "dtype", None)
    if dtype is not None:
        # kind/itemsize/isnative: C attributes (dtype.name is computed in
        # Python and costs ~2 us per call).
        if dtype.kind != "u" or dtype.itemsize != 4 or not dtype.isnative:
            raise TypeError(f"{what}: numpy array of dtype {dtype}, "
                            "want uint32")
        if not arr.flags.c_contiguous:
            raise ValueError(f"{what}: numpy array is not C-contiguous")
        return q._hold(ffi.from_buffer("uint32_t[]", arr)), arr.size
    seq = list(arr)
    return q._hold(ffi.new("uint32_t[]", seq)), len(seq)


def paged(peer: int, src: MemoryRegion, dst: DescLike, src_index: Any,
          dst_index: Any, page_len: int, *, src_stride: Optional[int] = None,
          dst_stride: Optional[int] = None, src_offset: int = 0,
          dst_offset: int = 0, **kw: Any) -> Request:
    """Paged writes: page k goes from src + src_offset + src_stride *
    src_index[k] to dst + dst_offset + dst_stride * dst_index[k], page_len
    bytes each (strides default to page_len). Index arrays: numpy uint32
    (zero-copy) or sequences of int."""
    q = Request("paged", **kw)
    si, ns = _u32_array(q, src_index, "src_index")
    di, nd = _u32_array(q, dst_index, "dst_index")
    if ns != nd:
        raise ValueError(f"paged: {ns} source indexes but {nd} destination "
                         "indexes")
    lib.tepy_set_paged(
        q._r, peer, _mr(src), src_offset,
        page_len if src_stride is None else src_stride, si,
        q._hold(as_desc(dst)), dst_offset,
        page_len if dst_stride is None else dst_stride, di, page_len, ns)
    return q


def scatter(src: MemoryRegion,
            destinations: Iterable[Tuple[int, DescLike, int, int, int]], *,
            split: str = "peer", **kw: Any) -> Request:
    """One source, many destinations: each a tuple (peer, descriptor,
    dst_offset, src_offset, length). split="peer": destination i whole on
    NIC i mod k; "bytes": every destination sharded like a write."""
    q = Request("scatter", **kw)
    dl = list(destinations)
    arr = q._hold(ffi.new("te_scatter_dst[]", len(dl)))
    for i, (peer, desc, doff, soff, length) in enumerate(dl):
        arr[i].peer, arr[i].dst_off, arr[i].src_off = peer, doff, soff
        arr[i].len = length
        arr[i].dst = q._hold(as_desc(desc))
    s = lib.tepy_scatter(q._r)
    s.src, s.count, s.dsts = _mr(src), len(dl), arr
    s.split = {"peer": lib.TE_SCATTER_BY_PEER,
               "bytes": lib.TE_SCATTER_BY_BYTES}[split]
    return q


def barrier(targets: Iterable[Union[int, Tuple[int, Optional[DescLike]]]],
            imm: int, **kw: Any) -> Request:
    """A zero-length immediate to each target: a peer, or (peer,
    descriptor) where the transport needs a key."""
    q = Request("barrier", imm=imm, **kw)
    tl = list(targets)
    arr = q._hold(ffi.new("te_barrier_dst[]", len(tl)))
    for i, t in enumerate(tl):
        peer, desc = (t, None) if isinstance(t, int) else t
        arr[i].peer = peer
        arr[i].dst = ffi.NULL if desc is None else q._hold(as_desc(desc))
    b = lib.tepy_barrier(q._r)
    b.count, b.dsts = len(tl), arr
    return q


def send(peer: int, data: Any, **kw: Any) -> Request:
    """A two-sided message (bytes-like, at most engine.max_msg_size)."""
    q = Request("send", **kw)
    buf = q._hold(ffi.from_buffer(data))
    s = lib.tepy_send(q._r)
    s.peer, s.buf, s.len = peer, buf, len(buf)
    return q


class Transfer(concurrent.futures.Future):
    """The future of a submitted request: result() is its Completion, or
    raises TEError with the failure's errno and reason. ``await`` works in
    asyncio.

    A submitted request cannot be called back: the future is running from
    the start, so ``cancel()`` returns False (and cancelling an asyncio task
    awaiting it leaves the transfer going). Bound it with the request's
    ``timeout_ms=`` (ETIMEDOUT) or end it with Engine.remove_peer()
    (ECONNABORTED)."""

    def __init__(self, engine, callback):
        super().__init__()
        self.set_running_or_notify_cancel()
        self.id = 0
        self._engine = engine
        self._callback = callback

    def _on_done(self, c):
        comp = completion(c)
        self._engine._keeper.release(self)
        if comp.status == 0:
            self.set_result(comp)
        else:
            self.set_exception(TEError(-comp.status, comp.reason,
                                       f"request {comp.req_id}"))
        if self._callback is not None:
            self._callback(comp)

    def __await__(self):
        return asyncio.wrap_future(self).__await__()
