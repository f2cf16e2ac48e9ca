"""Registered memory and memory descriptors."""
from typing import Any

from ._lib import check, ffi, lib, TEError

REMOTE_WRITE = lib.TE_MR_REMOTE_WRITE
REMOTE_READ = lib.TE_MR_REMOTE_READ
LOCAL = lib.TE_MR_LOCAL


class Descriptor:
    """A (remote or local) registration as te_mr_desc: what a writer needs.
    Exchange it as bytes (``bytes(d)`` / ``Descriptor.from_bytes``)."""

    __slots__ = ("_d",)

    def __init__(self, cdata=None):
        self._d = ffi.new("te_mr_desc *")
        if cdata is not None:
            ffi.memmove(self._d, cdata, ffi.sizeof("te_mr_desc"))

    @classmethod
    def from_bytes(cls, data: Any) -> "Descriptor":
        """Parse untrusted bytes (te_desc_parse): TEError naming what is
        wrong for truncated, corrupt or wrong-version input."""
        if isinstance(data, Descriptor):
            return data
        d = cls()
        buf = ffi.from_buffer(data)
        check(lib.te_desc_parse(buf, len(buf), d._d), "te_desc_parse")
        return d

    def __bytes__(self):
        buf = ffi.new("uint8_t[]", lib.TE_DESC_MAX)
        n = ffi.new("size_t *", lib.TE_DESC_MAX)
        check(lib.te_desc_serialize(self._d, buf, n), "te_desc_serialize")
        return bytes(ffi.buffer(buf, n[0]))

    to_bytes = __bytes__

    addr = property(lambda self: int(self._d.addr), doc="base address at the owner")
    length = property(lambda self: int(self._d.len), doc="bytes")
    access = property(lambda self: int(self._d.access), doc="REMOTE_* bits")
    nic_count = property(lambda self: int(self._d.nic_count))

    def __repr__(self):
        return (f"Descriptor(addr=0x{self.addr:x}, length={self.length}, "
                f"access={self.access}, nics={self.nic_count})")


def as_desc(d: Any) -> Any:
    """A te_mr_desc * from a Descriptor or its bytes."""
    if isinstance(d, Descriptor):
        return d._d
    return Descriptor.from_bytes(d)._d


def _torch_buffer(obj):
    """(address, nbytes, mem_kind, owner) of a torch tensor, or None."""
    if not (hasattr(obj, "data_ptr") and hasattr(obj, "is_cuda")):
        return None
    if not obj.is_contiguous():
        raise ValueError("register: the tensor is not contiguous")
    nbytes = obj.numel() * obj.element_size()
    kind = lib.TE_MEM_CUDA if obj.is_cuda else lib.TE_MEM_HOST
    return obj.data_ptr(), nbytes, kind, obj


class MemoryRegion:
    """Memory registered on one group of an engine (te_mr_reg). Made by
    Engine.register(); the buffer object is kept alive while registered.
    ``deregister()`` (or the context manager) returns only when no remote
    access can still land."""

    def __init__(self, engine, obj, access, group, mem_kind):
        self._engine = engine
        self._owner = obj
        self._mr = None
        t = _torch_buffer(obj)
        if t is not None:
            addr, nbytes, kind, _ = t
            if mem_kind is None:
                mem_kind = kind
            ptr = ffi.cast("void *", addr)
        else:
            if mem_kind == lib.TE_MEM_CUDA:
                raise ValueError("register: CUDA memory comes from a torch "
                                 "tensor (or use register_pointer())")
            try:
                buf = ffi.from_buffer(obj, require_writable=bool(
                    access & REMOTE_WRITE))
            except (TypeError, BufferError) as exc:
                if access & REMOTE_WRITE:
                    raise ValueError("register: a read-only buffer cannot be "
                                     "registered for remote write") from exc
                raise
            if isinstance(obj, memoryview) and not obj.c_contiguous:
                raise ValueError("register: the buffer is not contiguous")
            if hasattr(obj, "flags") and not obj.flags["C_CONTIGUOUS"]:
                raise ValueError("register: the array is not C-contiguous")
            self._buf = buf
            ptr, nbytes = buf, len(buf)
            mem_kind = lib.TE_MEM_HOST if mem_kind is None else mem_kind
        self._init(ptr, nbytes, access, group, mem_kind)

    @classmethod
    def _from_pointer(cls, engine, address, nbytes, access, group, mem_kind,
                      owner):
        self = cls.__new__(cls)
        self._engine, self._owner, self._mr = engine, owner, None
        self._init(ffi.cast("void *", address), nbytes, access, group, mem_kind)
        return self

    def _init(self, ptr, nbytes, access, group, mem_kind):
        if nbytes <= 0:
            raise ValueError("register: empty buffer")
        out = ffi.new("te_mr **")
        check(lib.te_mr_reg(self._engine._cdata(), group, ptr, nbytes, access,
                            mem_kind, out), "te_mr_reg")
        self._mr = out[0]
        self.group, self.access, self.mem_kind = group, access, mem_kind
        self._engine._mrs.add(self)

    def _cdata(self):
        if self._mr is None:
            raise TEError(9, "memory region is deregistered", "MemoryRegion")
        return self._mr

    @property
    def address(self) -> int:
        """Base address of the registration."""
        return int(ffi.cast("uintptr_t", lib.te_mr_addr(self._cdata())))

    def __len__(self):
        return int(lib.te_mr_len(self._cdata()))

    def descriptor(self) -> Descriptor:
        """This registration's Descriptor (send bytes(d) to writers)."""
        d = Descriptor()
        check(lib.te_mr_describe(self._cdata(), d._d), "te_mr_describe")
        return d

    def revoke(self) -> Descriptor:
        """New keys on every NIC; returns the new Descriptor once no access
        with the old keys can still land (te_mr_revoke)."""
        d = Descriptor()
        check(lib.te_mr_revoke(self._engine._cdata(), self._cdata(), d._d),
              "te_mr_revoke")
        return d

    def deregister(self) -> None:
        """te_mr_dereg; TEError(EBUSY) while requests still use it."""
        if self._mr is None:
            return
        if self._engine._e is not None:
            check(lib.te_mr_dereg(self._engine._e, self._mr), "te_mr_dereg")
        self._mr = None
        self._engine._mrs.discard(self)
        self._owner = self._buf = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.deregister()

    def __repr__(self):
        state = "deregistered" if self._mr is None else f"{len(self)} bytes"
        return f"MemoryRegion({state}, group={getattr(self, 'group', '?')})"
