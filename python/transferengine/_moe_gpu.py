"""libte-moe-gpu's memory backend for transferengine.moe (docs/moe.md,
"Memory backends"): MoE tensors in CUDA device memory without a host copy.

The library is optional (built only where CMake finds the CUDA toolkit), so
it is opened at run time (cffi ABI mode) from the directory of the loaded
libte-moe, or from $TE_MOE_GPU_LIBRARY. Its functions take the backend
struct declared in the API-mode module (_te_moe), handed across as an
address."""
import errno
import os

from cffi import FFI

from ._lib import TEError

_ffi = FFI()
_ffi.cdef("""
int te_moe_gpu_device_count(void);
const char *te_moe_gpu_last_error(void);
int te_moe_gpu_mem_ops_new(void *stream, void *ops);
void te_moe_gpu_mem_ops_free(void *ops);
""")
_lib = None


def _library_path():
    env = os.environ.get("TE_MOE_GPU_LIBRARY")
    if env:
        return env
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                if os.path.basename(path).startswith("libte-moe.so"):
                    return os.path.join(os.path.dirname(path), "libte-moe-gpu.so")
    except OSError:
        pass
    return "libte-moe-gpu.so"


def _why():
    return _ffi.string(_lib.te_moe_gpu_last_error()).decode("utf-8", "replace")


def load():
    """The library, with a usable device; TEError naming the cause."""
    global _lib
    if _lib is None:
        path = _library_path()
        try:
            _lib = _ffi.dlopen(path)
        except OSError as exc:
            raise TEError(errno.ENOENT, f"libte-moe-gpu not found ({path}: "
                          f"{exc}); it is built only where CMake finds the "
                          "CUDA toolkit", "MoeRank(device=cuda)") from None
    if _lib.te_moe_gpu_device_count() <= 0:
        raise TEError(errno.ENODEV, f"no CUDA device: {_why()}",
                      "MoeRank(device=cuda)")
    return _lib


class DeviceBackend:
    """te_moe_gpu_mem_ops_new(stream) into ops (a te_moe_mem_ops * of the
    API-mode module, given as its address); free() after the rank."""

    def __init__(self, ops_address: int, stream: int):
        self._lib = load()
        self._ops = _ffi.cast("void *", ops_address)
        rc = self._lib.te_moe_gpu_mem_ops_new(_ffi.cast("void *", stream),
                                              self._ops)
        if rc < 0:
            raise TEError(-rc, f"te_moe_gpu_mem_ops_new: {_why()}",
                          "MoeRank(device=cuda)")

    def free(self):
        if self._ops is not None:
            self._lib.te_moe_gpu_mem_ops_free(self._ops)
            self._ops = None
