"""ImmCounter expectations as futures, and immediate spaces."""
import asyncio
import collections
import concurrent.futures
import threading
from typing import Any, Optional, Tuple

from ._lib import check, ffi, lib, TEError, cstr


class Expectation(concurrent.futures.Future):
    """The future of te_imm_expect[_timeout]: result() is the immediate once
    `count` arrivals were counted; TEError(ETIMEDOUT) at the deadline,
    TEError(ECANCELED) when the engine closes or the immediate's space is
    retired. ``await`` works in asyncio; callback(imm, status) runs on the
    engine's callback thread first.

    ``cancel()`` (also what asyncio does when a task awaiting it is
    cancelled, e.g. by ``asyncio.wait_for``) disarms the expectation with
    te_imm_disarm(): the callback is not called, and the arrivals banked so
    far are removed with it (their number is in ``surplus``); later
    arrivals of the immediate start a fresh count."""

    def __init__(self, engine, imm, callback):
        super().__init__()
        self.imm = imm
        self.surplus = None
        self._engine = engine
        self._callback = callback
        self._lock = threading.RLock()

    def cancel(self) -> bool:
        """Disarm (te_imm_disarm) and cancel; False if already done."""
        with self._lock:
            if self.done():
                return self.cancelled()
            e = self._engine._e
            if e is not None:
                surplus = ffi.new("uint64_t *")
                took = check(lib.te_imm_disarm(e, self.imm, surplus),
                             "te_imm_disarm")
                self.surplus = int(surplus[0])
                if took:
                    # The callback can no longer come: its handle may go.
                    # Otherwise it is queued (met or timed out just now)
                    # and _on_imm releases the handle when it runs.
                    self._engine._keeper.release(self)
            return super().cancel()

    def _on_imm(self, imm, status):
        self._engine._keeper.release(self)
        with self._lock:
            if self.done():
                # cancel() won a race with an expectation met or timed out
                # on the callback thread just before te_imm_disarm().
                return
            if status == 0:
                self.set_result(imm)
            else:
                self.set_exception(TEError(-status, f"imm {imm}: expectation "
                                           "ended", "te_imm_expect"))
        if self._callback is not None:
            self._callback(imm, status)

    def __await__(self):
        return asyncio.wrap_future(self).__await__()


SpaceStats = collections.namedtuple(
    "SpaceStats", "base size lives life epoch stale_arrivals retired_surplus")


class ImmSpace:
    """A named range of immediates of one subsystem (te_imm_space_*): made
    by Engine.imm_space(). ``space[i]`` is the raw immediate of index i in
    the current life."""

    def __init__(self, engine, name, size, lives=0, base=None):
        self._engine = engine
        self.name = name
        out = ffi.new("te_imm_space **")
        flags = 0 if base is None else lib.TE_IMM_SPACE_FIXED
        check(lib.te_imm_space_create(engine._cdata(), name.encode(), size,
                                      lives, flags, base or 0, out),
              "te_imm_space_create")
        self._s = out[0]
        self.size = size

    def value(self, index: int) -> int:
        """Raw immediate of `index` in the current life."""
        raw = ffi.new("uint32_t *")
        check(lib.te_imm_space_value(self._s, index, raw), "te_imm_space_value")
        return int(raw[0])

    __getitem__ = value

    def retire(self) -> None:
        """Start the next life (te_imm_space_retire)."""
        check(lib.te_imm_space_retire(self._s), "te_imm_space_retire")

    def stats(self) -> SpaceStats:
        """The space's counters (te_imm_space_stats_get)."""
        st = ffi.new("te_imm_space_stats *")
        rc = lib.te_imm_space_stats_get(self._s, st)
        if rc < 0 and rc != -116:  # -ESTALE: destroyed, still filled
            check(rc, "te_imm_space_stats_get")
        return SpaceStats(st.base, st.size, st.lives, st.life, st.epoch,
                          st.stale_arrivals, st.retired_surplus)

    def destroy(self) -> None:
        """Remove the space (te_imm_space_destroy); its range is quarantined."""
        check(lib.te_imm_space_destroy(self._s), "te_imm_space_destroy")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()


def lookup(engine: Any, imm: int) -> Optional[Tuple[str, int, int]]:
    """(space name, index, life) of a raw immediate, or None."""
    name = ffi.new("const char **")
    idx, life = ffi.new("uint32_t *"), ffi.new("uint32_t *")
    found = check(lib.te_imm_space_lookup(engine._cdata(), imm, name, idx,
                                          life), "te_imm_space_lookup")
    return (cstr(name[0]), int(idx[0]), int(life[0])) if found else None
