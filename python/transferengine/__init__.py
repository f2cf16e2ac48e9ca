"""TransferEngine for Python: one-sided RDMA WriteImm + ImmCounter over any
NIC (te/te.h), zero-copy with numpy arrays and torch tensors.

    import transferengine as te
    with te.Engine() as e:
        mr = e.register(numpy_array)
        ...
        e.submit(te.write(peer, mr, remote_desc, n, imm=7)).result()

The library's log goes to the logger "transferengine" (transferengine.log,
docs/logging.md). Every te.h function is reachable: the classes below wrap
them, and ``transferengine.lib`` / ``transferengine.ffi`` expose the raw cffi ones.
docs/python.md has the guide. RL weight updates from the trainer's tensors
into the engine's own parameters: ``transferengine.weights`` (its own
compiled module over libte-weights, imported on demand; docs/weights.md)."""
from ._lib import TEError, ffi, lib, last_error
from . import log  # noqa: F401  (first: routes the library's log to logging)
from .buffers import aligned_empty
from .config import Config
from .engine import Engine, NicInfo, PathInfo, cap_names
from .imm import Expectation, ImmSpace, SpaceStats
from .memory import Descriptor, MemoryRegion, REMOTE_READ, REMOTE_WRITE, LOCAL
from .requests import (Completion, Request, Transfer, barrier, paged, read,
                       scatter, send, write)
from . import _callbacks  # noqa: F401  (registers the C callbacks)

MEM_HOST = lib.TE_MEM_HOST
MEM_CUDA = lib.TE_MEM_CUDA


def version() -> str:
    """The library's version string (te_version)."""
    return ffi.string(lib.te_version()).decode()


def strerror(err: int) -> str:
    """te_strerror of an errno value (either sign)."""
    return ffi.string(lib.te_strerror(err)).decode()


__all__ = ["Engine", "Config", "aligned_empty", "TEError", "MemoryRegion", "Descriptor",
           "Request", "Transfer", "Completion", "Expectation", "ImmSpace",
           "SpaceStats", "NicInfo", "PathInfo", "write", "read", "paged",
           "scatter", "barrier", "send", "version", "strerror", "cap_names",
           "last_error", "REMOTE_READ", "REMOTE_WRITE", "LOCAL", "MEM_HOST",
           "MEM_CUDA", "ffi", "lib", "log"]
