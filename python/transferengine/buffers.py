"""Host buffers laid out the way the transports copy fastest."""
import mmap

import numpy as np

HUGE_PAGE = 2 << 20


def aligned_empty(nbytes: int, huge: bool = True) -> np.ndarray:
    """A zeroed, writable uint8 array of ``nbytes`` starting on a page
    boundary, to register and transfer from or into.

    numpy's own allocations start on 64-byte boundaries only; paged writes
    of 16 KiB pages from such an array ran 10-20 % slower on loopback than
    from page-aligned memory (docs/python.md, "Benchmark"). The memory is
    an anonymous mapping (page-aligned by the kernel); with ``huge`` and at
    least 2 MiB it is also offered to transparent huge pages, as te-bench
    does with its own buffers. Every page is touched here, so the first
    transfer does not pay for the faults. Freed when the array (and every
    view of it) is gone.
    """
    if nbytes <= 0:
        raise ValueError("aligned_empty: nbytes must be > 0, got %r" % (nbytes,))
    mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge and nbytes >= HUGE_PAGE and hasattr(mm, "madvise") and \
            hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            mm.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass  # THP disabled: ordinary pages still aligned
    a = np.frombuffer(mm, dtype=np.uint8)
    a[::mmap.PAGESIZE] = 0  # fault every page in now
    return a
