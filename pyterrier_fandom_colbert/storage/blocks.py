"""Block checksums: every file of an artifact records, besides its whole-file checksum, an XXH3-64 checksum per
:data:`BLOCK_BYTES` block (:func:`block_sums`, :class:`BlockHasher` while a file is streamed out), and readers
verify each block the first time their process reads it (:class:`BlockCheck`).

A :class:`BlockCheck` keeps one bit per block: a read whose blocks are all verified costs one vectorised look-up
(nothing at all once every block of the file is verified), a read touching a new block hashes that block (1 MiB:
well under a millisecond) before the data is used. A block that does not match raises
:class:`~.errors.DamagedFileError` naming the file, the bytes and (when the reader can tell) the documents they
hold. An entry written before block checksums existed is checked whole on its first read instead (the whole file
is then one "block").

A :class:`PinnedFile` is a file held open from the moment its artifact is opened: checks and reads go through
it, so a folder renamed or replaced under a running process never mixes two versions (the process keeps reading
the one it opened, even once it is deleted).
"""
from __future__ import annotations

import contextlib
import io
import os
import stat
import threading
import weakref
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Tuple

import numpy as np

from .errors import DamagedFileError, PathLike
from .hashes import HASH_ALGORITHMS, new_hasher

#: bytes per checksummed block (1 MiB: a first read of a block costs ~0.1-0.3 ms of hashing on this machine; a
#: 1 GB file records 1,000 checksums, ~20 KB of JSON)
BLOCK_BYTES = 1 << 20
#: the block checksum (64 bits per 1 MiB detects damage; the whole-file XXH3-128 stays in the entry)
BLOCK_ALGORITHM = "xxh3_64"
#: the key of an entry's block checksums: ``{"bytes": BLOCK_BYTES, "xxh3_64": [hex, ...]}``
BLOCKS_KEY = "blocks"

#: ``locate(first_byte, end_byte)``: what a damaged byte range holds, for the error ("documents ['d1', 'd2']")
Locate = Callable[[int, int], str]


def _block_hasher() -> Any:
    import xxhash

    return xxhash.xxh3_64()


def block_digest(data: Any) -> str:
    """The block checksum of ``data`` (bytes or a buffer)."""
    import xxhash

    return xxhash.xxh3_64_hexdigest(data)


class PinnedFile:
    """A file opened once and held open until this object is garbage collected: :meth:`pread` and
    :meth:`reopen` read the file as it was when opened (its inode), whatever is renamed over its path later.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "x.bin"
    >>> _ = path.write_bytes(b"old text")
    >>> pinned = PinnedFile(path)
    >>> _ = path.with_name("new").write_bytes(b"new text!"); os.replace(path.with_name("new"), path)
    >>> pinned.pread(3, 0), pinned.size, path.read_bytes()[:3]
    (b'old', 8, b'new')
    """

    def __init__(self, path: PathLike):
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_RDONLY)
        st = os.fstat(self.fd)
        #: the size when opened, and the file's identity (device, inode)
        self.size, self.identity = st.st_size, (st.st_dev, st.st_ino)
        self.regular = stat.S_ISREG(st.st_mode)
        self._close = weakref.finalize(self, os.close, self.fd)

    def pread(self, size: int, offset: int) -> bytes:
        """``size`` bytes from ``offset`` (thread-safe: no shared file position)."""
        return os.pread(self.fd, size, offset)

    def reopen(self) -> BinaryIO:
        """A new binary file object on the pinned file, with its own position (for numpy and scipy loaders and
        memory maps; close it after use: a memory map keeps its own reference)."""
        proc = f"/proc/self/fd/{self.fd}"
        if os.path.exists(proc):  # Linux: a new open file description of the same inode, own position
            fd = os.open(proc, os.O_RDONLY)
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == self.identity:
                return open(fd, "rb")  # the caller closes it
            os.close(fd)
        return io.BytesIO(self.read_all())  # elsewhere: a copy in memory, read through the pinned descriptor

    def memmap(self, dtype: Any, shape: Tuple[int, ...]) -> np.ndarray:
        """The pinned file memory-mapped read-only as ``dtype``/``shape`` (a file replaced since it was pinned,
        where it cannot be reopened by descriptor, is refused with a DamagedFileError rather than mixed in)."""
        with self.reopen_fd() as f:
            return np.memmap(f if f is not None else self.path, dtype=dtype, mode="r", shape=shape)

    def reopen_fd(self) -> Any:
        """A file object on the pinned file, for ``np.memmap`` (None where only the path can be mapped: then the
        file at the path must still be the pinned one)."""
        proc = f"/proc/self/fd/{self.fd}"
        if os.path.exists(proc):
            return self.reopen()
        st = os.stat(self.path)
        if (st.st_dev, st.st_ino) != self.identity:
            raise DamagedFileError(self.path, f"{self.path} was replaced after it was opened; open the folder again")
        return contextlib.nullcontext(None)

    def checksum(self, algorithm: str) -> str:
        """Hex checksum (``algorithm``) of the file as it was opened, read in 4 MiB slices."""
        h, offset = new_hasher(algorithm), 0
        while chunk := os.pread(self.fd, 1 << 22, offset):
            h.update(chunk)
            offset += len(chunk)
        return h.hexdigest()

    def read_all(self) -> bytes:
        """The whole file as it was opened."""
        chunks, offset = [], 0
        while chunk := os.pread(self.fd, 1 << 24, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def stat(self) -> Tuple[int, Tuple[int, int]]:
        """(size, identity) of the pinned file now."""
        st = os.fstat(self.fd)
        return st.st_size, (st.st_dev, st.st_ino)

    def close(self) -> None:
        """Close it now; later reads fail (EBADF) rather than read whatever file reuses the descriptor."""
        self._close()
        self.fd = -1


class BlockHasher:
    """Block checksums of a byte stream fed in pieces of any size (``update``), as a writer streams a file.

    >>> h = BlockHasher(block_bytes=4)
    >>> for piece in (b"abc", b"defgh", b"ij"):
    ...     h.update(piece)
    >>> h.sums() == [block_digest(b"abcd"), block_digest(b"efgh"), block_digest(b"ij")]
    True
    """

    def __init__(self, block_bytes: int = BLOCK_BYTES):
        self.block_bytes = block_bytes
        self._sums: List[str] = []
        self._hash = _block_hasher()
        self._filled = 0

    def update(self, data: Any) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            take = min(len(view), self.block_bytes - self._filled)
            self._hash.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == self.block_bytes:
                self._sums.append(self._hash.hexdigest())
                self._hash, self._filled = _block_hasher(), 0

    def sums(self) -> List[str]:
        """The checksum of every block so far (the last one possibly short)."""
        return self._sums + ([self._hash.hexdigest()] if self._filled else [])

    def entry(self) -> Dict[str, Any]:
        """``{"bytes": block size, "xxh3_64": sums}`` as a manifest entry records it under :data:`BLOCKS_KEY`."""
        return {"bytes": self.block_bytes, BLOCK_ALGORITHM: self.sums()}


def block_sums(path: PathLike, block_bytes: int = BLOCK_BYTES) -> Dict[str, Any]:
    """The block entry (:meth:`BlockHasher.entry`) of a file, read in blocks."""
    hasher = BlockHasher(block_bytes)
    with open(path, "rb") as f:
        while block := f.read(block_bytes):
            hasher.update(block)
    return hasher.entry()


def parse_blocks(entry: Dict[str, Any]) -> Optional[str]:
    """Why an entry's block checksums are malformed (None when they are well formed or absent)."""
    blocks = entry.get(BLOCKS_KEY)
    if blocks is None:
        return None
    if not isinstance(blocks, dict) or not isinstance(blocks.get("bytes"), int) or blocks["bytes"] <= 0:
        return f"its block checksums are {str(blocks)[:80]!r}; expected {{'bytes': block size, " \
               f"{BLOCK_ALGORITHM!r}: [checksums]}}"
    sums = blocks.get(BLOCK_ALGORITHM)
    expected = -(-entry["size"] // blocks["bytes"])
    if not isinstance(sums, list) or len(sums) != expected or not all(isinstance(s, str) for s in sums):
        return f"it records {len(sums) if isinstance(sums, list) else 'no'} block checksums for " \
               f"{entry['size']} bytes; expected {expected}"
    return None


class BlockCheck:
    """Which blocks of one file this process has verified, and the check of a read before its data is used.

    ``entry`` is the file's manifest entry: its block checksums, or (an entry without them) its whole-file
    checksum, which then counts as one block. ``damaged(message)`` makes the error raised for a block that does
    not match (the artifact adds its remedy); ``locate`` says what a byte range holds.

    >>> import tempfile
    >>> from .manifests import manifest_entry
    >>> path = Path(tempfile.mkdtemp()) / "x.bin"
    >>> _ = path.write_bytes(bytes(range(10)) * 300_000)
    >>> check = BlockCheck(path, manifest_entry(path))
    >>> check.read(10, 20); int(check.done.sum()), check.complete
    (1, False)
    >>> _ = path.write_bytes(bytes(3_000_000))   # zero-filled, same size
    >>> check.read(10, 20)                         # verified once: no cost, no new check
    >>> try:
    ...     check.read(2_900_000, 2_900_010)
    ... except DamagedFileError as err:
    ...     print(str(err).split(": ", 1)[1])
    bytes 2097152-2999999 (block 2 of 3) do not match the xxh3_64 checksum recorded when it was written
    """

    def __init__(self, path: PathLike, entry: Dict[str, Any], *,
                 damaged: Optional[Callable[[Path, str], DamagedFileError]] = None, locate: Optional[Locate] = None,
                 file: Optional[PinnedFile] = None):
        self.path = Path(path)
        #: the file the reader reads (held open by the artifact): blocks are verified in it, never reopened
        self.file = file
        self.size = int(entry["size"])
        blocks = entry.get(BLOCKS_KEY)
        if blocks is not None:
            self.block_bytes, self.algorithm = int(blocks["bytes"]), BLOCK_ALGORITHM
            self.sums: List[str] = list(blocks[BLOCK_ALGORITHM])
        else:  # an entry written before block checksums: the whole file is one block
            self.algorithm = next(a for a in HASH_ALGORITHMS if isinstance(entry.get(a), str))
            self.block_bytes, self.sums = max(self.size, 1), [entry[self.algorithm]] if self.size else []
        self.done = np.zeros(len(self.sums), dtype=bool)
        #: every block verified: reads cost nothing more
        self.complete = len(self.sums) == 0
        self._damaged = damaged or (lambda path, message: DamagedFileError(path, message))
        self.locate = locate
        self._lock = threading.Lock()

    # -- reads ---------------------------------------------------------------------------------------------
    def read(self, start: int, end: int) -> None:
        """Bytes ``start:end`` are about to be read: verify their blocks not yet verified."""
        if self.complete or end <= start:
            return
        first, last = start // self.block_bytes, (end - 1) // self.block_bytes
        if first == last:
            if not self.done[first]:
                self._verify(np.array([first]))
            return
        self._verify(np.arange(first, last + 1))

    def spans(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Byte ranges ``starts[i]:ends[i]`` (int64 arrays) are about to be read: verify their new blocks."""
        if self.complete or len(starts) == 0:
            return
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.asarray(ends, dtype=np.int64)
        keep = ends > starts
        first = starts[keep] // self.block_bytes
        last = (ends[keep] - 1) // self.block_bytes
        if len(first) == 0:
            return
        if (last == first).all():
            blocks = first
        else:  # ranges spanning several blocks: every block from first to last
            counts = last - first + 1
            blocks = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        if not self.done[blocks].all():
            self._verify(np.unique(blocks))

    def rows(self, starts: Any, ends: Any, row_bytes: int) -> None:
        """Rows ``starts[i]:ends[i]`` of a ``row_bytes``-wide array file are about to be read (see :meth:`spans`)."""
        if not self.complete:
            self.spans(np.asarray(starts, dtype=np.int64) * row_bytes, np.asarray(ends, dtype=np.int64) * row_bytes)

    def all(self) -> None:
        """The whole file is about to be read (a scan, a load): verify every block not yet verified."""
        if not self.complete:
            self._verify(np.arange(len(self.sums)))

    # -- verification --------------------------------------------------------------------------------------
    def _verify(self, blocks: np.ndarray) -> None:
        todo = blocks[~self.done[blocks]]
        if len(todo) == 0:
            return
        with self._lock:
            if self.file is None:  # the first check opens the file, and keeps it open for the next ones
                try:
                    self.file = PinnedFile(self.path)
                except FileNotFoundError:
                    raise self._damaged(self.path, f"{self.path} is missing") from None
            size = self.file.stat()[0]
            if size != self.size:
                raise self._damaged(self.path, f"{self.path} is {size} bytes but was written as {self.size}: it was "
                                               "truncated, extended or replaced")
            for block in todo.tolist():
                if self.done[block]:
                    continue
                start = block * self.block_bytes
                data = self.file.pread(min(self.block_bytes, self.size - start), start)
                if self._digest(data) != self.sums[block]:
                    raise self._damaged(self.path, self._message(block, start, start + len(data)))
                self.done[block] = True
            if self.done.all():
                self.complete = True

    def _digest(self, data: bytes) -> str:
        if self.algorithm == BLOCK_ALGORITHM:
            return block_digest(data)
        h = new_hasher(self.algorithm)
        h.update(data)
        return h.hexdigest()

    def _message(self, block: int, start: int, end: int) -> str:
        what = (f"bytes {start}-{end - 1} (block {block} of {len(self.sums)})" if len(self.sums) > 1 or
                self.algorithm == BLOCK_ALGORITHM else "its content")
        held = ""
        if self.locate is not None:
            try:
                held = self.locate(start, end)
            except Exception:  # a damaged map of what the bytes hold must not hide the damage
                held = ""
        return (f"{self.path} is damaged: {what} {'does' if what == 'its content' else 'do'} not match the "
                f"{self.algorithm} checksum recorded when it was written" + (f"; they hold {held}" if held else ""))
