"""Giving the memory a long encoding loop freed back to the operating system.

Encoding passages allocates activations of a different shape for every batch; glibc's allocator keeps what is
freed in its heaps for reuse, fragmented, so a build's resident memory climbed with the corpus (3,000 passages:
2.1 GB peak; 30,000: 4.9 GB; docs/results.md, "Big wikis"). :class:`HeapTrimmer` calls glibc's
``malloc_trim(0)`` once per ``every`` passages (256: every few seconds of encoding on a CPU; fed by the encoder's
progress calls, so it trims within a chunk of passages too), which returns the free pages, and once more when
encoding ends (:meth:`HeapTrimmer.finish`), before the codec is trained; elsewhere (not glibc) it does nothing,
and says so through :func:`can_trim`.

What a trim cannot bound is the heap freed between two trims: a build's peak is set by those highs, which a longer
build meets more of. :func:`give_back_freed_memory` (``pfc index --low-memory``) takes them away: every allocation
from 128 KiB up gets pages of its own, returned when freed, so the resident memory is what is in use, at a cost in
speed (the pages of each batch's activations are zeroed again; docs/results.md, "Build memory: low-memory
builds").
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from typing import Any, Dict, Optional

#: passages encoded between two trims: the cost of a trim (a few ms, and the pages faulted back in by the next
#: batch) did not show in a build's speed, and the peak heap is a quarter of 1,024 passages' (docs/results.md,
#: "Build memory: trimming within chunks")
TRIM_EVERY = 256


#: the kernel caches :func:`bound_kernel_caches` bounds (each unless set already), both keyed by matrix shape, which
#: a build meets new batch after batch: oneDNN's compiled primitives (default 1,024) and ideep's computations, the
#: packed bf16 Linear's (``LRU_CACHE_CAPACITY``, default 1,024)
KERNEL_CACHES = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": 32, "LRU_CACHE_CAPACITY": 32}


def kernel_cache_env() -> Dict[str, str]:
    """The bounds of :data:`KERNEL_CACHES` as environment variables: this process's own where set, else the
    defaults. What a process that encodes needs before torch runs its first kernel (Ray's encoder actors get them
    through their ``runtime_env``)."""
    return {name: os.environ.get(name, str(capacity)) for name, capacity in KERNEL_CACHES.items()}


def bound_kernel_caches() -> None:
    """Set :data:`KERNEL_CACHES` in the environment where the user has not (``pfc`` does, first thing): they are
    read when torch first runs a kernel. Unbounded, they made a build's memory grow with the corpus (docs/results.md,
    "Build memory: oneDNN's kernel cache" and "Build memory: ideep's cache"); at 32 shapes each no cost in speed
    was measured."""
    os.environ.update(kernel_cache_env())


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


#: ``mallopt``'s number for the mmap threshold (glibc's ``malloc.h``)
M_MMAP_THRESHOLD = -3
#: the threshold :func:`give_back_freed_memory` sets: glibc's initial one, no longer raised as freed blocks go by
LOW_MEMORY_MMAP_THRESHOLD = 128 * 1024


def give_back_freed_memory(threshold: int = LOW_MEMORY_MMAP_THRESHOLD) -> None:
    """Make every allocation of ``threshold`` bytes or more one of its own pages, given back to the operating
    system when freed, for the rest of this process.

    glibc starts with a 128 KiB threshold and raises it (up to 32 MiB) to the size of each such block freed, so
    that an encoder's activations soon come from the heap, where what is freed stays resident until a trim.
    Setting it (``mallopt(M_MMAP_THRESHOLD)``) also stops it moving. Raises OSError where the C library has no
    ``mallopt`` (not glibc), rather than building with memory the caller did not ask for."""
    if threshold < 1:
        raise ValueError(f"threshold={threshold!r}; expected a positive number of bytes")
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt") or libc.mallopt(M_MMAP_THRESHOLD, int(threshold)) != 1:
        raise OSError("giving freed memory back at once (--low-memory) needs glibc's mallopt (Linux); this "
                      "process's C library has none")


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
    >>> trimmer.finish(), trimmer.finish(), trimmer.trims  # the last 5 passages' heap; then nothing new to give
    (True, False, 3)
    """

    def __init__(self, every: Optional[int] = None):
        every = TRIM_EVERY if every is None else every
        if every < 1:
            raise ValueError(f"every={every!r}; expected a positive number of passages")
        self.every = every
        self.passages: float = 0
        self.trims = 0
        self._trimmed_at: float = 0

    def add(self, passages: float) -> bool:
        """Count ``passages`` more (a share of one counts: an encoder's progress calls give them); trim (and
        return True) when a multiple of ``every`` was passed."""
        before, self.passages = self.passages, self.passages + passages
        if self.passages // self.every == before // self.every:
            return False
        self._trim()
        return True

    def finish(self) -> bool:
        """Trim once more if passages were encoded since the last trim (True): call it when encoding ends, so what
        comes next (training the codec, coding) does not start on top of up to ``every`` passages' freed heap."""
        if self.passages == self._trimmed_at:
            return False
        self._trim()
        return True

    def _trim(self) -> None:
        trim_heap()
        self.trims += 1
        self._trimmed_at = self.passages
