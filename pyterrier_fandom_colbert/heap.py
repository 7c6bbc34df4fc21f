"""Giving the memory a long encoding loop freed back to the operating system.

Encoding passages allocates activations of a different shape for every batch; glibc's allocator keeps what is
freed in its heaps for reuse, fragmented, so a build's resident memory climbed with the corpus (3,000 passages:
2.1 GB peak; 30,000: 4.9 GB; docs/results.md, "Big wikis"). :class:`HeapTrimmer` calls glibc's
``malloc_trim(0)`` once per ``every`` passages (about every half minute of encoding on a CPU), which returns
the free pages; elsewhere (not glibc) it does nothing, and says so through :func:`can_trim`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any, Optional

#: passages encoded between two trims: the cost of a trim (a few ms, and the pages faulted back in by the next
#: batch) is then well under 1% of the encoding time
TRIM_EVERY = 1024


@functools.lru_cache(maxsize=1)
def _libc() -> Optional[Any]:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def can_trim() -> bool:
    """Whether this process's C library has ``malloc_trim`` (glibc)."""
    return _libc() is not None


def trim_heap() -> bool:
    """Return the C heap's free pages to the operating system; False where there is no ``malloc_trim``."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


class HeapTrimmer:
    """Counts encoded passages and trims the heap each time another ``every`` (None: :data:`TRIM_EVERY`) have
    gone by.

    >>> trimmer = HeapTrimmer(every=100)
    >>> [trimmer.add(n) for n in (60, 30, 20, 250, 5)]  # trims after 110 (passed 100) and 360 (passed 200, 300)
    [False, False, True, True, False]
    >>> trimmer.trims, trimmer.passages
    (2, 365)
    """

    def __init__(self, every: Optional[int] = None):
        every = TRIM_EVERY if every is None else every
        if every < 1:
            raise ValueError(f"every={every!r}; expected a positive number of passages")
        self.every = every
        self.passages = 0
        self.trims = 0

    def add(self, passages: int) -> bool:
        """Count ``passages`` more; trim (and return True) when a multiple of ``every`` was passed."""
        before, self.passages = self.passages, self.passages + int(passages)
        if self.passages // self.every == before // self.every:
            return False
        trim_heap()
        self.trims += 1
        return True
