"""GPU memory and GPU-visible completion (te.h's CUDA section, docs/cuda.md).

Device pointers are plain ints (e.g. ``torch_tensor.data_ptr()``). Every
call works in any build: where CUDA is unusable it raises TEError with the
reason (no driver, the toolkit's stub driver, a build without CUDA).
"""
from typing import Callable, Tuple

from ._lib import check, ffi, lib

KIND_NAMES = {lib.TE_CUDA_PTR_HOST: "host",
              lib.TE_CUDA_PTR_HOST_PINNED: "host_pinned",
              lib.TE_CUDA_PTR_DEVICE: "device",
              lib.TE_CUDA_PTR_MANAGED: "managed"}
FLAG_FAILED = lib.TE_GPU_FLAG_FAILED


def cuda_status() -> Tuple[bool, str]:
    """(usable, reason): te_cuda_status(); reason is "" when usable."""
    why = ffi.new("char[512]")
    rc = lib.te_cuda_status(why, 512)
    return rc == 0, ffi.string(why).decode("utf-8", "replace")


def pointer_info(ptr: int, length: int = 0) -> dict:
    """te_cuda_pointer_info(): kind, device, allocation, dma-buf."""
    out = ffi.new("te_cuda_ptr_info *")
    check(lib.te_cuda_pointer_info(ffi.cast("void *", ptr), length, out),
          "te_cuda_pointer_info")
    return {"kind": KIND_NAMES.get(out.kind, str(out.kind)),
            "device": out.device, "alloc_base": out.alloc_base,
            "alloc_len": out.alloc_len, "dmabuf": bool(out.dmabuf)}


class GpuFlag:
    """A te_gpu_flag: a 32-bit word kernels spin on, stored by the library
    when an ImmCounter expectation completes (expect())."""

    def __init__(self, device: int = 0):
        out = ffi.new("te_gpu_flag **")
        check(lib.te_gpu_flag_create(device, out), "te_gpu_flag_create")
        self._f = out[0]

    @property
    def device_ptr(self) -> int:
        """The flag's device address (uint32_t *) for kernels."""
        return int(ffi.cast("uintptr_t", lib.te_gpu_flag_device_ptr(self._f)))

    def read(self) -> int:
        return int(lib.te_gpu_flag_read(self._f))

    def store(self, value: int) -> None:
        lib.te_gpu_flag_store(self._f, value)

    def expect(self, engine, imm: int, count: int, timeout_ms: int,
               value: int) -> None:
        """te_imm_expect_gpu_flag(): store value when count arrivals of imm
        are in (FLAG_FAILED on the deadline)."""
        check(lib.te_imm_expect_gpu_flag(engine._cdata(), imm, count,
                                         timeout_ms, self._f, value),
              "te_imm_expect_gpu_flag")

    def disarm(self, engine, imm: int) -> bool:
        """Take the expectation armed on imm away (te_imm_disarm) and, if
        that stopped its completion, forget it on the flag
        (te_gpu_flag_disarm). False: it was met or timed out just before;
        its completion is queued, stores into the flag and frees the
        arming itself."""
        took = check(lib.te_imm_disarm(engine._cdata(), imm, ffi.NULL),
                     "te_imm_disarm")
        if took:
            lib.te_gpu_flag_disarm(self._f)
        return bool(took)

    def close(self) -> None:
        if self._f is not None:
            check(lib.te_gpu_flag_destroy(self._f), "te_gpu_flag_destroy")
            self._f = None


class GpuWatcher:
    """A te_gpu_watcher: callback(old, new) on the watcher's thread for each
    change of a 64-bit word kernels bump (also in replayed CUDA graphs)."""

    def __init__(self, callback: Callable[[int, int], None], device: int = 0,
                 each_step: bool = False, spin: bool = False):
        def trampoline(old, new, _arg):
            callback(int(old), int(new))
        # Kept referenced for the watcher's life (called from its thread).
        self._cb = ffi.callback("te_gpu_watch_fn", trampoline)
        flags = (lib.TE_GPU_WATCH_EACH_STEP if each_step else 0) | \
            (lib.TE_GPU_WATCH_SPIN if spin else 0)
        out = ffi.new("te_gpu_watcher **")
        check(lib.te_gpu_watcher_create(device, flags, self._cb, ffi.NULL,
                                        out), "te_gpu_watcher_create")
        self._w = out[0]

    @property
    def device_ptr(self) -> int:
        """The word's device address (unsigned long long *) for kernels."""
        return int(ffi.cast("uintptr_t",
                            lib.te_gpu_watcher_device_ptr(self._w)))

    @property
    def delivered(self) -> int:
        return int(lib.te_gpu_watcher_delivered(self._w))

    def wait(self, value: int, timeout_ms: int) -> None:
        check(lib.te_gpu_watcher_wait(self._w, value, timeout_ms),
              "te_gpu_watcher_wait")

    def close(self) -> None:
        if self._w is not None:
            check(lib.te_gpu_watcher_destroy(self._w),
                  "te_gpu_watcher_destroy")
            self._w = None
