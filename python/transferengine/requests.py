"""Requests (te_request) built from Python objects, and Transfer: the
future of a submitted request. Arrays and descriptors are copied by
te_submit(), so numpy index arrays are passed zero-copy and may be reused
as soon as submit returns."""
import asyncio
import collections
import concurrent.futures

from ._lib import check, ffi, lib, TEError, cstr
from .memory import as_desc

Completion = collections.namedtuple(
    "Completion", "user_data req_id status op reason")
Completion.__doc__ = "A request's completion (te_completion)."

OPS = {"write": lib.TE_OP_WRITE, "paged": lib.TE_OP_PAGED,
       "scatter": lib.TE_OP_SCATTER, "barrier": lib.TE_OP_BARRIER,
       "read": lib.TE_OP_READ, "send": lib.TE_OP_SEND}


def completion(c):
    return Completion(int(c.user_data), int(c.req_id), int(c.status),
                      int(c.op), cstr(c.reason))


class Request:
    """One te_request, reusable: submit it as often as wanted (change
    ``imm`` or ``user_data`` in between). Build with the functions of this
    module (write(), paged(), ...)."""

    __slots__ = ("_r", "_keep", "op")

    def __init__(self, op, *, imm=None, group=0, pin=None, nics=0,
                 timeout_ms=0, user_data=0):
        self._r = ffi.new("te_request *")
        lib.tepy_request_init(self._r, OPS[op])
        self.op = op
        self._keep = []
        r = self._r
        r.group = group
        r.timeout_ms = timeout_ms
        r.user_data = user_data
        if imm is not None:
            r.flags |= lib.TE_F_IMM
            r.imm = imm
        if pin is not None:
            r.route.kind = lib.TE_ROUTE_PIN
            r.route.nic = pin
        else:
            r.route.kind = lib.TE_ROUTE_SHARD
            r.route.nics = nics

    @property
    def imm(self):
        return int(self._r.imm) if self._r.flags & lib.TE_F_IMM else None

    @imm.setter
    def imm(self, value):
        if value is None:
            self._r.flags &= ~lib.TE_F_IMM
        else:
            self._r.flags |= lib.TE_F_IMM
            self._r.imm = value

    @property
    def user_data(self):
        return int(self._r.user_data)

    @user_data.setter
    def user_data(self, value):
        self._r.user_data = value

    def _hold(self, obj):
        self._keep.append(obj)
        return obj


def _mr(mr):
    return mr._cdata()


def write(peer, local, remote, length, *, local_offset=0, remote_offset=0,
          **kw):
    """One-sided write of `length` bytes from MemoryRegion `local` at
    local_offset to Descriptor `remote` at remote_offset (imm= carries an
    immediate)."""
    return _xfer("write", peer, local, remote, length, local_offset,
                 remote_offset, kw)


def read(peer, local, remote, length, *, local_offset=0, remote_offset=0,
         **kw):
    """One-sided read of `length` bytes of `remote` into MemoryRegion
    `local`."""
    return _xfer("read", peer, local, remote, length, local_offset,
                 remote_offset, kw)


def _xfer(op, peer, local, remote, length, loff, roff, kw):
    q = Request(op, **kw)
    x = lib.tepy_xfer(q._r)
    x.peer, x.local, x.len = peer, _mr(local), length
    x.local_off, x.remote_off = loff, roff
    x.remote = q._hold(as_desc(remote))
    return q


def _u32_array(q, arr, what):
    """A uint32_t * to a numpy array or sequence without copying arrays
    that are already uint32 and C-contiguous."""
    if hasattr(arr, "dtype"):
        if arr.dtype.str not in ("<u4", "=u4", "|u4") and arr.dtype.name != "uint32":
            raise TypeError(f"{what}: numpy array of dtype {arr.dtype}, "
                            "want uint32")
        if not arr.flags["C_CONTIGUOUS"]:
            raise ValueError(f"{what}: numpy array is not C-contiguous")
        return q._hold(ffi.from_buffer("uint32_t[]", arr)), arr.size
    seq = list(arr)
    return q._hold(ffi.new("uint32_t[]", seq)), len(seq)


def paged(peer, src, dst, src_index, dst_index, page_len, *,
          src_stride=None, dst_stride=None, src_offset=0, dst_offset=0, **kw):
    """Paged writes: page k goes from src + src_offset + src_stride *
    src_index[k] to dst + dst_offset + dst_stride * dst_index[k], page_len
    bytes each (strides default to page_len). Index arrays: numpy uint32
    (zero-copy) or sequences of int."""
    q = Request("paged", **kw)
    p = lib.tepy_paged(q._r)
    si, ns = _u32_array(q, src_index, "src_index")
    di, nd = _u32_array(q, dst_index, "dst_index")
    if ns != nd:
        raise ValueError(f"paged: {ns} source indexes but {nd} destination "
                         "indexes")
    p.peer, p.src, p.count, p.page_len = peer, _mr(src), ns, page_len
    p.src_idx, p.dst_idx = si, di
    p.src_off, p.dst_off = src_offset, dst_offset
    p.src_stride = page_len if src_stride is None else src_stride
    p.dst_stride = page_len if dst_stride is None else dst_stride
    p.dst = q._hold(as_desc(dst))
    return q


def scatter(src, destinations, *, split="peer", **kw):
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


def barrier(targets, imm, **kw):
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


def send(peer, data, **kw):
    """A two-sided message (bytes-like, at most engine.max_msg_size)."""
    q = Request("send", **kw)
    buf = q._hold(ffi.from_buffer(data))
    s = lib.tepy_send(q._r)
    s.peer, s.buf, s.len = peer, buf, len(buf)
    return q


class Transfer(concurrent.futures.Future):
    """The future of a submitted request: result() is its Completion, or
    raises TEError with the failure's errno and reason. ``await`` works in
    asyncio."""

    def __init__(self, engine, callback):
        super().__init__()
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
