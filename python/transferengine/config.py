"""Configuration as in C: a dict, an INI file path or INI text; environment
variables TE_<SECTION>_<KEY> still override (te.h te_config_get)."""
import os
from typing import Any, Optional

from ._lib import check, ffi, lib, TEError


def _items(settings):
    """Yield (section, key, value) from {"engine": {"plugin": "x"}} or
    {"engine.plugin": "x"}."""
    for k, v in settings.items():
        if isinstance(v, dict):
            for kk, vv in v.items():
                yield k, kk, vv
        else:
            sec, dot, key = str(k).partition(".")
            if not dot or not key:
                raise ValueError(f"config key {k!r}: expected 'section.key' "
                                 "or a nested dict {section: {key: value}}")
            yield sec, key, v


def _value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


class Config:
    """A te_config being built. ``Config(source)``: source is None, a dict,
    a path to an INI file (str / os.PathLike) or INI text (str containing a
    newline). Pass it, or the same source, to Engine()."""

    def __init__(self, source=None):
        self._cfg = ffi.gc(lib.te_config_new(), lib.te_config_free)
        if self._cfg == ffi.NULL:
            raise MemoryError("te_config_new")
        if source is None:
            return
        if isinstance(source, dict):
            for sec, key, val in _items(source):
                self.set(sec, key, val)
        elif isinstance(source, (str, os.PathLike)) and (
                not isinstance(source, str) or "\n" not in source):
            path = os.fspath(source)
            if not os.path.exists(path):
                raise FileNotFoundError(path)
            check(lib.te_config_load_file(self._cfg, path.encode()),
                  "te_config_load_file")
        elif isinstance(source, str):
            check(lib.te_config_load_string(self._cfg, source.encode()),
                  "te_config_load_string")
        else:
            raise TypeError("config: None, dict, INI path or INI text, not "
                            f"{type(source).__name__}")

    def set(self, section: str, key: str, value: Any) -> "Config":
        """Set section.key (later sets and the environment override)."""
        check(lib.te_config_set(self._cfg, section.encode(), key.encode(),
                                _value(value).encode()), "te_config_set")
        return self

    def get(self, section: str, key: str) -> Optional[str]:
        """Effective value after environment overrides, or None."""
        p = lib.te_config_get(self._cfg, section.encode(), key.encode())
        return None if p == ffi.NULL else ffi.string(p).decode()

    @property
    def cdata(self) -> Any:
        """The te_config * (cffi cdata)."""
        return self._cfg


__all__ = ["Config", "TEError"]
