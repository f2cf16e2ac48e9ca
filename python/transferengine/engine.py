"""Engine: the te_engine of te.h with Pythonic ownership."""
import atexit
import errno
import os
import collections
import threading
import weakref
from typing import Any, Callable, List, Optional, Tuple, Union

from . import imm as _imm
from ._callbacks import Keeper, ON_DONE, ON_IMM, ON_RECV
from ._lib import check, cstr, ffi, lib, TEError
from .config import Config
from .memory import MemoryRegion, REMOTE_READ, REMOTE_WRITE
from .requests import Completion, Request, Transfer, completion

NicInfo = collections.namedtuple(
    "NicInfo", "name pci_path numa_node device link_gbps queue_depth")
PathInfo = collections.namedtuple("PathInfo", "kind caps missing refused text")
#: What Engine() accepts as configuration.
ConfigSource = Union[None, dict, str, "os.PathLike[str]", Config]
#: Bytes-like objects (bytes, bytearray, memoryview, numpy uint8 arrays).
BytesLike = Union[bytes, bytearray, memoryview]


def cap_names(caps: int) -> List[str]:
    """Names of TE_CAP_* bits, e.g. ["native_rma", "hardware"]."""
    buf = ffi.new("char[]", 256)
    s = cstr(lib.te_cap_names(caps, buf, 256))
    return s.split(",") if s else []


class _RecvHandler:
    def __init__(self, fn):
        self.fn = fn

    def _on_recv(self, group, peer, data):
        self.fn(group, None if peer == lib.TE_PEER_UNKNOWN else peer, data)


# Engines still open at interpreter exit are closed while the interpreter
# is whole: te_engine_destroy() runs the last callbacks into Python, which
# must not happen during module teardown.
_open_engines = weakref.WeakSet()


@atexit.register
def _close_open_engines():
    for e in list(_open_engines):
        try:
            e.close()
        except Exception:  # pragma: no cover - best effort at exit
            pass


class Engine:
    """A TransferEngine engine (te_engine_create). ``config``: None ($TE_CONFIG
    or defaults), a dict {"engine": {"plugin": "loopback"}} or
    {"engine.plugin": ...}, an INI path, INI text, or a Config; keyword
    arguments "section_key=value" are added (``engine_plugin="loopback"``).
    Use as a context manager; close() completes every request in flight with
    ECANCELED first."""

    def __init__(self, config: ConfigSource = None, **settings: Any) -> None:
        self._e = None
        self._keeper = Keeper()
        self._mrs = set()
        self._recv = {}
        self._lock = threading.Lock()
        if settings:
            extra = {k.replace("_", ".", 1): v for k, v in settings.items()}
            if config is None:
                config = extra
            elif isinstance(config, dict):
                config = {**config, **extra}
            else:
                cfg = config if isinstance(config, Config) else Config(config)
                for k, v in extra.items():
                    sec, _, key = k.partition(".")
                    cfg.set(sec, key, v)
                config = cfg
        cfg = None
        if config is not None:
            cfg = config if isinstance(config, Config) else Config(config)
        out = ffi.new("te_engine **")
        check(lib.te_engine_create(ffi.NULL if cfg is None else cfg.cdata,
                                   out), "te_engine_create")
        self._e = out[0]
        _open_engines.add(self)

    # ------------------------------------------------------------ lifetime
    def _cdata(self):
        if self._e is None:
            raise TEError(108, "engine is closed", "Engine")  # ESHUTDOWN
        return self._e

    def close(self) -> None:
        """te_engine_destroy: in-flight requests complete with ECANCELED,
        unmet expectations get ECANCELED, registrations are released."""
        if self._e is None:
            return
        e, self._e = self._e, None
        for mr in list(self._mrs):
            mr._mr = None  # released by te_engine_destroy
        self._mrs.clear()
        lib.te_engine_destroy(e)  # runs the last callbacks (GIL released)
        self._recv.clear()
        # te_imm_expect without a deadline is never called back at destroy:
        # its future fails here, so nobody waits forever.
        for obj in self._keeper.drain():
            if not obj.done():
                obj.set_exception(TEError(125, "engine closed", "Engine.close"))

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    @property
    def closed(self) -> bool:
        return self._e is None

    # ---------------------------------------------------------------- info
    @property
    def plugin(self) -> str:
        """Name of the transport plugin in use (e.g. "loopback")."""
        return cstr(lib.te_engine_plugin_name(self._cdata()))

    @property
    def progress_mode(self) -> str:
        """Who moves the engine (engine.progress): "thread" (its worker and
        callback threads) or "caller" (progress()/progress_wait())."""
        mode = check(lib.te_engine_progress_mode(self._cdata()))
        return "caller" if mode == 1 else "thread"

    @property
    def groups(self) -> int:
        """Number of NIC groups."""
        return check(lib.te_engine_group_count(self._cdata()))

    def nic_count(self, group: int = 0) -> int:
        """Number of NICs of a group."""
        return check(lib.te_engine_nic_count(self._cdata(), group),
                     "te_engine_nic_count")

    def nic_info(self, group: int = 0, nic: int = 0) -> NicInfo:
        """Description of one NIC (te_engine_nic_info)."""
        i = ffi.new("te_nic_info *")
        check(lib.te_engine_nic_info(self._cdata(), group, nic, i),
              "te_engine_nic_info")
        return NicInfo(cstr(i.name), cstr(i.pci_path), i.numa_node, i.device,
                       i.link_gbps, i.queue_depth)

    def paths(self, group: int = 0, nic: int = 0) -> List[PathInfo]:
        """How the NIC carries out each kind of operation (te_engine_paths):
        PathInfo(kind name, caps, missing, refused as lists of names, text)."""
        p = ffi.new("te_path_info[]", 16)
        n = check(lib.te_engine_paths(self._cdata(), group, nic, p, 16),
                  "te_engine_paths")
        return [PathInfo(cstr(lib.te_path_kind_name(p[i].kind)),
                         cap_names(p[i].caps), cap_names(p[i].missing),
                         cap_names(p[i].refused), cstr(p[i].text))
                for i in range(min(n, 16))]

    def address(self, group: int = 0) -> bytes:
        """This group's address as bytes (publish it to peers)."""
        buf = ffi.new("uint8_t[]", lib.TE_ADDR_MAX)
        n = ffi.new("size_t *", lib.TE_ADDR_MAX)
        check(lib.te_engine_address(self._cdata(), group, buf, n),
              "te_engine_address")
        return bytes(ffi.buffer(buf, n[0]))

    # --------------------------------------------------------------- peers
    def add_peer(self, address: BytesLike, group: int = 0) -> int:
        """te_peer_add: the peer handle (int) of a published address."""
        buf = ffi.from_buffer(address)
        out = ffi.new("te_peer *")
        check(lib.te_peer_add(self._cdata(), group, buf, len(buf), out),
              "te_peer_add")
        return int(out[0])

    def remove_peer(self, peer: int, group: int = 0) -> None:
        """te_peer_remove: its requests in flight fail with ECONNABORTED."""
        check(lib.te_peer_remove(self._cdata(), group, peer), "te_peer_remove")

    def peer_alive(self, peer: int, group: int = 0) -> bool:
        """te_peer_status: True while the peer is live, False once the engine
        has declared it down (it stays down). Raises TEError (ENOENT) for a
        handle that is not a peer of the group. Sends nothing."""
        rc = lib.te_peer_status(self._cdata(), group, peer)
        if rc == -errno.ECONNRESET:
            return False
        check(rc, "te_peer_status")
        return True

    # -------------------------------------------------------------- memory
    def register(self, obj: Any, access: int = REMOTE_WRITE | REMOTE_READ,
                 group: int = 0, mem_kind: Optional[int] = None) -> MemoryRegion:
        """Register a buffer-protocol object (bytearray, numpy array,
        memoryview) or a torch tensor (CPU, or CUDA: TE_MEM_CUDA). Read-only
        buffers are refused for REMOTE_WRITE. The object stays alive while
        registered."""
        return MemoryRegion(self, obj, access, group, mem_kind)

    def register_pointer(self, address: int, nbytes: int,
                         access: int = REMOTE_WRITE | REMOTE_READ,
                         group: int = 0, mem_kind: int = lib.TE_MEM_HOST,
                         owner: Any = None) -> MemoryRegion:
        """Register raw memory (e.g. a CUDA pointer); keep `owner` alive."""
        return MemoryRegion._from_pointer(self, address, nbytes, access, group,
                                          mem_kind, owner)

    # ------------------------------------------------------------ requests
    def submit(self, request: Request,
               callback: Optional[Callable[[Completion], None]] = None,
               future: bool = True) -> Union[Transfer, int]:
        """te_submit. Returns a Transfer (future of the Completion; callback
        (Completion) runs first on the callback thread), or with
        future=False the request id, its completion then coming from
        poll_completions()."""
        r = request._r
        e = self._cdata()
        if not future:
            with request._lock:
                r.done = ffi.NULL
                r.done_arg = ffi.NULL
                rc = lib.te_submit(e, r)
            return check(rc, "te_submit")
        t = Transfer(self, callback)
        handle = self._keeper.hold(t)
        with request._lock:
            r.done = ON_DONE
            r.done_arg = handle
            rc = lib.te_submit(e, r)
        if rc < 0:
            self._keeper.release(t)
            check(rc, "te_submit")
        t.id = rc
        return t

    def expected_imms(self, request: Request, target: int = 0) -> int:
        """te_expected_imms: immediates the receiver `target` will count."""
        return check(lib.te_expected_imms(self._cdata(), request._r, target),
                     "te_expected_imms")

    def poll_completions(self, max_count: int = 64,
                         timeout_ms: int = 0) -> List[Completion]:
        """Completions of requests submitted with future=False."""
        out = ffi.new("te_completion[]", max_count)
        n = check(lib.te_poll_completions(self._cdata(), out, max_count,
                                          timeout_ms), "te_poll_completions")
        return [completion(out[i]) for i in range(n)]

    # ---------------------------------------------------------- ImmCounter
    def expect(self, imm: int, count: int,
               callback: Optional[Callable[[int, int], None]] = None,
               timeout_ms: Optional[int] = None) -> "_imm.Expectation":
        """Expect `count` arrivals of `imm` (banked ones count): an
        Expectation future. timeout_ms: deadline (TEError ETIMEDOUT)."""
        x = _imm.Expectation(self, imm, callback)
        h = self._keeper.hold(x)
        try:
            if timeout_ms is None:
                check(lib.te_imm_expect(self._cdata(), imm, count, ON_IMM, h),
                      "te_imm_expect")
            else:
                check(lib.te_imm_expect_timeout(self._cdata(), imm, count,
                                                timeout_ms, ON_IMM, h),
                      "te_imm_expect_timeout")
        except BaseException:
            self._keeper.release(x)
            raise
        return x

    def imm_poll(self, imm: int) -> Tuple[int, bool]:
        """(banked arrivals, armed) of an immediate."""
        banked, armed = ffi.new("uint64_t *"), ffi.new("int *")
        check(lib.te_imm_poll(self._cdata(), imm, banked, armed), "te_imm_poll")
        return int(banked[0]), bool(armed[0])

    def imm_wait(self, imm: int, count: int, timeout_ms: int) -> None:
        """Wait (GIL released) for `count` arrivals and consume them."""
        check(lib.te_imm_wait(self._cdata(), imm, count, timeout_ms),
              "te_imm_wait")

    def imm_remove(self, imm: int) -> int:
        """Disarm and forget an immediate's counter; the surplus."""
        s = ffi.new("uint64_t *")
        check(lib.te_imm_remove(self._cdata(), imm, s), "te_imm_remove")
        return int(s[0])

    def imm_space(self, name: str, size: int, lives: int = 0,
                  base: Optional[int] = None) -> "_imm.ImmSpace":
        """An ImmSpace of `size` values (te_imm_space_create)."""
        return _imm.ImmSpace(self, name, size, lives, base)

    def imm_lookup(self, imm: int) -> Optional[Tuple[str, int, int]]:
        """(space name, index, life) of a raw immediate, or None."""
        return _imm.lookup(self, imm)

    # ------------------------------------------------------------ messages
    def set_recv_handler(self, fn: Optional[Callable[[int, Optional[int], bytes], None]],
                         group: int = 0) -> None:
        """fn(group, peer or None, data: bytes) for every message received
        by `group` (on the callback thread); None drops messages."""
        h = _RecvHandler(fn) if fn is not None else None
        handle = ffi.new_handle(h) if h is not None else ffi.NULL
        check(lib.te_set_recv_handler(self._cdata(), group,
                                      ON_RECV if h else ffi.NULL, handle),
              "te_set_recv_handler")
        # te_set_recv_handler waits for a running call of the previous
        # handler (or runs inside it), so only the new one must stay alive.
        self._recv[group] = [(h, handle)]

    # ------------------------------------------- caller-driven progress
    # engine.progress = caller (docs/progress.md): no engine threads; these
    # move the engine and run its callbacks on the calling thread.
    def progress(self, group: int = -1, budget: int = 0) -> int:
        """te_progress: one turn of `group` (-1: all), then the queued
        callbacks (at most `budget`, 0 = all); > 0 when it did something."""
        return check(lib.te_progress(self._cdata(), group, budget),
                     "te_progress")

    def progress_wait(self, timeout_ms: int, group: int = -1) -> int:
        """te_progress_wait: progress, blocking (GIL released) on the wait
        objects until something happens or timeout_ms; 0 on timeout."""
        return check(lib.te_progress_wait(self._cdata(), group, timeout_ms),
                     "te_progress_wait")

    def progress_fd(self, group: int = -1) -> int:
        """te_progress_fd: an fd for selectors/asyncio, readable when the
        group has work once progress_arm() returned True."""
        return check(lib.te_progress_fd(self._cdata(), group),
                     "te_progress_fd")

    def progress_arm(self, group: int = -1) -> bool:
        """te_progress_arm: True when it is safe to wait on progress_fd(),
        False when there is work now (call progress() first)."""
        rc = lib.te_progress_arm(self._cdata(), group)
        if rc == -errno.EAGAIN:
            return False
        check(rc, "te_progress_arm")
        return True


__all__ = ["Engine", "NicInfo", "PathInfo", "cap_names", "Request"]
