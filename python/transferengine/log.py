"""The library's log (te.h "logging", docs/logging.md) in Python's
``logging`` module.

On import, ``transferengine`` installs a log sink (te_set_log_fn) that hands
every message of the core, the transport plugins and the apps' libraries to
the logger ``transferengine``, levels mapped (TE_LOG_ERROR: ERROR, WARN:
WARNING, INFO: INFO, DEBUG: DEBUG). The record's message is
``"<origin>: <message>"`` (just the message for the core's own), and the
record carries ``te_origin`` ("core", "loopback", "te-kv", ...). So::

    logging.getLogger("transferengine").setLevel(logging.ERROR)  # quieter
    transferengine.log.route_to_logging(False)   # back to stderr lines

``TE_PY_LOGGING=0`` in the environment keeps the library's own stderr
output from the start (nothing is routed). Which messages the library
produces at all is its thresholds' business: engine.log_level per engine
(default warnings) and set_level() for the process.

The sink runs on whatever thread logs (an engine's worker or callback
thread, or a thread inside a call); cffi takes the GIL there. At
interpreter exit the sink is removed (te_set_log_fn(NULL) returns only once
no thread is inside it) after open engines are closed, so no C thread calls
into a finalizing interpreter.
"""
import atexit
import logging
import os

from ._lib import ffi, lib

logger = logging.getLogger("transferengine")

ERROR = lib.TE_LOG_ERROR
WARN = lib.TE_LOG_WARN
INFO = lib.TE_LOG_INFO
DEBUG = lib.TE_LOG_DEBUG

_TO_LOGGING = {ERROR: logging.ERROR, WARN: logging.WARNING,
               INFO: logging.INFO, DEBUG: logging.DEBUG}
_routed = False


def _on_error(exception, exc_value, traceback):  # pragma: no cover
    pass  # a failing handler must not take the logging thread down


@ffi.def_extern(onerror=_on_error)
def tepy_on_log(level, origin, msg, arg):
    pylevel = _TO_LOGGING.get(level, logging.DEBUG)
    if not logger.isEnabledFor(pylevel):
        return
    o = ffi.string(origin).decode("utf-8", "replace")
    m = ffi.string(msg).decode("utf-8", "replace")
    if o and o != "core":
        logger.log(pylevel, "%s: %s", o, m, extra={"te_origin": o})
    else:
        logger.log(pylevel, "%s", m, extra={"te_origin": o or "core"})


def route_to_logging(enable=True):
    """Route the library's log to the logger ``transferengine`` (True, the
    default on import) or back to the library's own stderr output (False).
    Process-wide (te_set_log_fn); when it returns, the previous sink is no
    longer running on any thread."""
    global _routed
    lib.te_set_log_fn(lib.tepy_on_log if enable else ffi.NULL, ffi.NULL)
    _routed = bool(enable)


def routed():
    """Whether the log goes to the ``logging`` module now."""
    return _routed


def set_level(level):
    """The process-wide threshold (te_set_log_level): ERROR, WARN, INFO or
    DEBUG (the default: no extra filtering), or -1 for nothing at all. A
    message of an engine must also pass its engine.log_level."""
    lib.te_set_log_level(int(level))


def log(level, message, origin="python"):
    """Log through the library's sink (te_log_printf): where the engine's
    messages go, subject to set_level()."""
    lib.te_log_printf(int(level), origin.encode(), b"%s",
                      ffi.new("char[]", str(message).encode()))


@atexit.register
def _unroute_at_exit():
    # Registered before the engine module's hook, so it runs after it
    # (atexit is last-in first-out): engines close with their messages
    # still routed, then the sink goes.
    if _routed:
        route_to_logging(False)


if os.environ.get("TE_PY_LOGGING", "1").strip().lower() not in (
        "0", "no", "off", "false"):
    route_to_logging(True)
