"""The compiled cffi module and the error convention of te.h: every call
returns 0 (or a count/id) or a negative errno, with te_last_error() naming
the cause; here a negative result raises TEError."""
import errno as _errno
import os

try:
    from ._te import ffi, lib  # noqa: F401  (built by _build.py)
except ImportError as exc:  # pragma: no cover - a clear message instead
    raise ImportError(
        "transferengine: the compiled module _te is missing: install with "
        "`python3 -m pip install --no-build-isolation ./python`, or build it "
        "in the build tree (cmake --build build --target python-binding) and "
        "put build/python on PYTHONPATH (docs/python.md)") from exc


class TEError(OSError):
    """A te_* call failed. ``errno`` is the (positive) errno value, ``str()``
    the library's own message from te_last_error() (e.g. "descriptor
    truncated: 12 of 40 bytes")."""

    def __init__(self, err, message, call=""):
        err = abs(int(err))
        self.call = call
        self.message = message
        name = _errno.errorcode.get(err, str(err))
        text = f"{call}: {message}" if call else message
        super().__init__(err, f"[{name}] {text}" if text else os.strerror(err))


def last_error():
    """te_last_error() of this thread as str."""
    return ffi.string(lib.te_last_error()).decode("utf-8", "replace")


def check(rc, call=""):
    """Return rc when >= 0, else raise TEError with te_last_error()."""
    if rc < 0:
        msg = last_error() or ffi.string(lib.te_strerror(rc)).decode()
        raise TEError(-rc, msg, call)
    return rc


def cstr(p):
    """A C string (char * or char[]) as str, '' for NULL."""
    return "" if p == ffi.NULL else ffi.string(p).decode("utf-8", "replace")
