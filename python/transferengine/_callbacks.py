"""C callbacks into Python. The core runs them on its callback thread;
cffi's extern "Python" takes the GIL there. Each pending Python object is
kept alive (with its cffi handle) until its callback has run exactly once.
An exception raised by user code is logged with its traceback, never
propagated into C."""
import logging
import threading

from ._lib import ffi, lib

log = logging.getLogger("transferengine")


class Keeper:
    """Objects whose handles C holds: released after their one callback."""

    def __init__(self):
        self._lock = threading.Lock()
        self._live = {}

    def hold(self, obj):
        handle = ffi.new_handle(obj)
        with self._lock:
            self._live[id(obj)] = (obj, handle)
        return handle

    def release(self, obj):
        with self._lock:
            self._live.pop(id(obj), None)

    def drain(self):
        """Forget and return every object still held (engine closed: C
        will never call back for them)."""
        with self._lock:
            objs = [o for o, _ in self._live.values()]
            self._live.clear()
        return objs

    def __len__(self):
        with self._lock:
            return len(self._live)


def _log_error(exception, exc_value, traceback):
    log.error("exception in a transferengine callback (ignored by the "
              "engine)", exc_info=(exception, exc_value, traceback))


@ffi.def_extern(onerror=_log_error)
def tepy_on_done(c, arg):
    ffi.from_handle(arg)._on_done(c)


@ffi.def_extern(onerror=_log_error)
def tepy_on_imm(imm, status, arg):
    ffi.from_handle(arg)._on_imm(imm, status)


@ffi.def_extern(onerror=_log_error)
def tepy_on_recv(group, peer, data, length, arg):
    ffi.from_handle(arg)._on_recv(group, peer, bytes(ffi.buffer(data, length)))


ON_DONE = lib.tepy_on_done
ON_IMM = lib.tepy_on_imm
ON_RECV = lib.tepy_on_recv
