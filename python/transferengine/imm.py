"""ImmCounter expectations as futures, and immediate spaces."""
import asyncio
import collections
import concurrent.futures

from ._lib import check, ffi, lib, TEError, cstr


class Expectation(concurrent.futures.Future):
    """The future of te_imm_expect[_timeout]: result() is the immediate once
    `count` arrivals were counted; TEError(ETIMEDOUT) at the deadline,
    TEError(ECANCELED) when the engine closes or the immediate's space is
    retired. ``await`` works in asyncio; callback(imm, status) runs on the
    engine's callback thread first."""

    def __init__(self, engine, imm, callback):
        super().__init__()
        self.imm = imm
        self._engine = engine
        self._callback = callback

    def _on_imm(self, imm, status):
        self._engine._keeper.release(self)
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

    def value(self, index):
        """Raw immediate of `index` in the current life."""
        raw = ffi.new("uint32_t *")
        check(lib.te_imm_space_value(self._s, index, raw), "te_imm_space_value")
        return int(raw[0])

    __getitem__ = value

    def retire(self):
        """Start the next life (te_imm_space_retire)."""
        check(lib.te_imm_space_retire(self._s), "te_imm_space_retire")

    def stats(self):
        st = ffi.new("te_imm_space_stats *")
        rc = lib.te_imm_space_stats_get(self._s, st)
        if rc < 0 and rc != -116:  # -ESTALE: destroyed, still filled
            check(rc, "te_imm_space_stats_get")
        return SpaceStats(st.base, st.size, st.lives, st.life, st.epoch,
                          st.stale_arrivals, st.retired_surplus)

    def destroy(self):
        check(lib.te_imm_space_destroy(self._s), "te_imm_space_destroy")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()


def lookup(engine, imm):
    """(space name, index, life) of a raw immediate, or None."""
    name = ffi.new("const char **")
    idx, life = ffi.new("uint32_t *"), ffi.new("uint32_t *")
    found = check(lib.te_imm_space_lookup(engine._cdata(), imm, name, idx,
                                          life), "te_imm_space_lookup")
    return (cstr(name[0]), int(idx[0]), int(life[0])) if found else None
