"""What the cffi builders of the app bindings share (_kv_build.py,
_moe_build.py, _weights_build.py): each app module is compiled in API mode
against its own header and library plus the core's, finding them through
TE_INCLUDE_DIR / TE_<APP>_INCLUDE_DIR / TE_LIBRARY_DIR / TE_<APP>_LIBRARY_DIR
(set by python/CMakeLists.txt), else the source tree and ./build.
Run as ``python3 python/transferengine/_<app>_build.py OUTDIR``.
"""
import os
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(os.path.dirname(HERE))


def _dir(env, default):
    return os.environ.get(env) or default


def app_builder(module, app, env, library, cdef, source, extra_libs=()):
    """An FFI builder for transferengine.<module>: app is the directory
    under apps/, env the app's part of the TE_<APP>_*_DIR variables and
    library the app's library (linked with the core's and extra_libs)."""
    inc = [_dir("TE_INCLUDE_DIR", os.path.join(SOURCE_ROOT, "include")),
           _dir(f"TE_{env}_INCLUDE_DIR",
                os.path.join(SOURCE_ROOT, "apps", app, "include"))]
    lib = [_dir("TE_LIBRARY_DIR", os.path.join(SOURCE_ROOT, "build", "core")),
           _dir(f"TE_{env}_LIBRARY_DIR",
                os.path.join(SOURCE_ROOT, "build", "apps", app))]
    builder = FFI()
    builder.cdef(cdef)
    builder.set_source(
        "transferengine." + module, source, include_dirs=inc,
        library_dirs=lib,
        libraries=[library, "transferengine"] + list(extra_libs),
        extra_link_args=["-Wl,-rpath," + d for d in lib],
        extra_compile_args=["-std=gnu11"])
    return builder


def main(builder):
    """Compile builder into argv[1] (default: beside the package)."""
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(HERE)
    builder.compile(tmpdir=out, verbose=False)
