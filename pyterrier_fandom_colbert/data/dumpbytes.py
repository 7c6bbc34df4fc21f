"""The bytes of a MediaWiki XML export, decompressed chunk by chunk: plain ``.xml``, ``.bz2``, ``.gz`` or ``.7z``.

Kept apart from the XML and wikitext reading of ``wikidump`` (which re-exports :class:`DumpError` and
:func:`xml_chunks`). For ``.7z``, py7zr decompresses in a background thread that hands 1 MiB pieces over through
a bounded queue; nothing is extracted to disk. A truncated or corrupt archive raises :class:`DumpError`, naming
the file and the position.
"""
from __future__ import annotations

import bz2
import gzip
import queue
import threading
import zlib
from pathlib import Path
from typing import Dict, Generator, List, Optional

from ..cli_errors import require_extra

__all__ = ["CHUNK_BYTES", "DEFAULT_MAX_PAGE_BYTES", "DumpError", "TextCap", "check_dump_file", "xml_chunks"]

CHUNK_BYTES = 1 << 20
#: a page's wikitext is cut to this many bytes (as the export holds it, XML-escaped) while the dump is read:
#: twice MediaWiki's own limit on a page ($wgMaxArticleSize, 2 MiB by default), room for the escaping. The largest
#: page of the real wiki dump measured (docs/results.md) holds 304 KB.
DEFAULT_MAX_PAGE_BYTES = 4 << 20


class DumpError(ValueError):
    """A dump that cannot be read: malformed XML, a truncated or corrupt archive, an unknown format."""

    def __init__(self, path, message: str, *, line: Optional[int] = None, column: Optional[int] = None,
                 offset: Optional[int] = None):
        where = []
        if line is not None:
            where.append(f"line {line}, column {column}")
        if offset is not None:
            where.append(f"after {offset:,} bytes of XML")
        super().__init__(f"{path}: {message}" + (f" ({'; '.join(where)})" if where else ""))
        self.path, self.line, self.column, self.offset = str(path), line, column, offset


def check_dump_file(path) -> Path:
    """``path`` as a Path when it is a file; else a FileNotFoundError (an IsADirectoryError for a folder) that says
    what is there instead of a dump.

    >>> check_dump_file("/")
    Traceback (most recent call last):
    ...
    IsADirectoryError: / is a folder, not a dump file; give a MediaWiki dump (.xml, .bz2, .gz or .7z)
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a dump file; give a MediaWiki dump (.xml, .bz2, .gz or .7z)")
    if not path.is_file():
        raise FileNotFoundError(f"dump not found: {path} (no such file)" if path.parent.is_dir() or
                                str(path.parent) in ("", ".") else
                                f"dump not found: {path} ({path.parent} is not a folder)")
    return path


class TextCap:
    """A filter of an export's bytes, between the decompression and the XML parser, that cuts the content of every
    ``<text>`` element to ``limit`` bytes, so that one huge page never reaches the parser (whose element would
    hold all of it in memory): the bytes beyond are dropped as they stream past, the cut made where no UTF-8
    character or entity reference is split. :attr:`cuts` maps the number of each cut ``<text>`` element (from 0,
    in document order) to its size in bytes before the cut.

    >>> cap = TextCap(5)
    >>> cap.feed(b"<page><text bytes='9'>abcd&amp;efgh</te") + cap.feed(b"xt></page><text/>") + cap.close()
    b"<page><text bytes='9'>abcd</text></page><text/>"
    >>> cap.cuts
    {0: 13}
    """

    _OPEN, _CLOSE = b"<text", b"</text"

    def __init__(self, limit: int):
        if limit < 0:
            raise ValueError(f"limit must be >= 0 bytes, got {limit}")
        self.limit = limit
        self.cuts: Dict[int, int] = {}
        self._index = -1  # the <text> element being read (its number)
        self._inside = False
        self._size = 0  # bytes of its content so far
        self._held = b""  # the end of the last chunk, where a tag may be cut in two

    def feed(self, chunk: bytes) -> bytes:
        data, self._held = self._held + chunk if self._held else chunk, b""
        out: List[bytes] = []
        pos = 0
        while pos < len(data):
            if not self._inside:
                pos = self._outside(data, pos, out)
                if pos < 0:
                    break
                continue
            end = data.find(self._CLOSE, pos)
            stop = end if end >= 0 else max(pos, len(data) - len(self._CLOSE))
            room = self.limit - self._size
            piece = data[pos:stop]
            if room > 0:
                out.append(piece if len(piece) <= room else piece[:_safe_cut(piece, room)])
            self._size += len(piece)
            if end < 0:
                self._held = data[stop:]
                break
            if self._size > self.limit:
                self.cuts[self._index] = self._size
            self._inside = False
            pos = end
        return b"".join(out)

    def _outside(self, data: bytes, pos: int, out: List[bytes]) -> int:
        """Pass bytes on up to and including the next ``<text ...>`` start tag; -1: hold the rest for more."""
        start = data.find(self._OPEN, pos)
        if start < 0:
            keep = max(pos, len(data) - len(self._OPEN))
            out.append(data[pos:keep])
            self._held = data[keep:]
            return -1
        after = data[start + len(self._OPEN):start + len(self._OPEN) + 1]
        if after and after not in b" \t\r\n>/":  # another element (<textarea>): not the page's text
            out.append(data[pos:start + len(self._OPEN)])
            return start + len(self._OPEN)
        close = data.find(b">", start)
        if close < 0:
            out.append(data[pos:start])
            self._held = data[start:]
            if len(self._held) > CHUNK_BYTES:  # no end to the tag: not an export; the parser will say so
                out.append(self._held)
                self._held = b""
            return -1
        out.append(data[pos:close + 1])
        self._index += 1
        if data[close - 1:close] != b"/":
            self._inside, self._size = True, 0
        return close + 1

    def close(self) -> bytes:
        """The bytes held back at the end."""
        held, self._held = self._held, b""
        if self._inside and held:
            room = max(0, self.limit - self._size)
            self._size += len(held)
            return held[:_safe_cut(held, room)] if len(held) > room else held
        return held


def _safe_cut(piece: bytes, at: int) -> int:
    """A cut of ``piece`` at or before ``at`` that splits no UTF-8 character and no entity reference (``&amp;``)."""
    at = min(at, len(piece))
    while 0 < at < len(piece) and piece[at] & 0xC0 == 0x80:  # the first byte dropped continues a character
        at -= 1
    amp = piece.rfind(b"&", max(0, at - 16), at)
    if amp >= 0 and piece.find(b";", amp, at) < 0:
        at = amp
    return at


class _Counter:
    """Counts the uncompressed bytes handed to the XML parser (for error positions and throughput)."""
    def __init__(self):
        self.bytes = 0


def _file_chunks(path: Path, opener, counter: _Counter) -> Generator[bytes, None, None]:
    with open(path, "rb") as raw:
        f = opener(raw) if opener else raw
        try:
            while True:
                try:
                    chunk = f.read1(CHUNK_BYTES)  # what is ready: a truncation is found where it is
                except (EOFError, OSError, ValueError, zlib.error) as err:
                    raise DumpError(path, f"truncated or corrupt archive ({err}), compressed byte {raw.tell():,}",
                                    offset=counter.bytes) from err
                if not chunk:
                    return
                counter.bytes += len(chunk)
                yield chunk
        finally:
            if opener:
                f.close()


class _Cancelled(Exception):
    """The reading side has stopped: the 7z worker's extraction ends."""


def _put(chunks: queue.Queue, stop: threading.Event, item) -> bool:
    """Put ``item`` on the queue, waiting while it is full; False (not put) once ``stop`` is set."""
    while not stop.is_set():
        try:
            chunks.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _open_7z(path: Path):
    """The open archive and the name of its one ``.xml`` member (DumpError otherwise)."""
    py7zr = require_extra("py7zr", "wiki", "reading a .7z dump")

    try:
        archive = py7zr.SevenZipFile(path, mode="r")
    except (py7zr.Bad7zFile, EOFError, OSError, KeyError, ValueError) as err:
        raise DumpError(path, f"truncated or corrupt 7z archive ({type(err).__name__}: {err})") from err
    names = [n for n in archive.getnames() if n.endswith(".xml")]
    if len(names) != 1:
        archive.close()
        raise DumpError(path, f"expected exactly one .xml file in the 7z archive, found {names}")
    return archive, names


def _sink_factory(chunks: queue.Queue, stop: threading.Event):
    """A py7zr writer factory whose files put what is written on ``chunks``, in pieces of CHUNK_BYTES."""
    from py7zr.io import Py7zIO, WriterFactory

    class _Sink(Py7zIO):
        def write(self, s):
            view = memoryview(s)  # py7zr hands over one decompressed block (1 MiB of 7z data, ~15 MB of XML)
            for i in range(0, len(view), CHUNK_BYTES):
                if not _put(chunks, stop, bytes(view[i:i + CHUNK_BYTES])):
                    raise _Cancelled()
            return len(view)

        def read(self, size=None):
            return b""

        def seek(self, offset, whence=0):
            return 0

        def flush(self):
            pass

        def size(self):
            return 0

    class _Factory(WriterFactory):
        def create(self, filename):
            return _Sink()

    return _Factory()


def _7z_chunks(path: Path, counter: _Counter) -> Generator[bytes, None, None]:
    """Decompress the single ``.xml`` member of a 7z archive in a worker thread, yielding chunks as they come."""
    archive, names = _open_7z(path)
    chunks: queue.Queue = queue.Queue(maxsize=2)
    stop = threading.Event()
    done = object()

    def work():
        try:
            archive.extract(targets=names, factory=_sink_factory(chunks, stop))
            item = done
        except BaseException as err:  # handed to the reading thread, which raises it
            item = err
        _put(chunks, stop, item)

    worker = threading.Thread(target=work, name=f"7z:{path.name}", daemon=True)
    worker.start()
    try:
        while True:
            item = chunks.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise DumpError(path, f"truncated or corrupt 7z archive ({type(item).__name__}: {item})",
                                offset=counter.bytes) from item
            counter.bytes += len(item)
            yield item
    finally:
        stop.set()
        worker.join()
        archive.close()


def xml_chunks(path, counter: Optional[_Counter] = None) -> Generator[bytes, None, None]:
    """The uncompressed bytes of a dump (``.xml``, ``.bz2``, ``.gz`` or ``.7z``, told apart by their first bytes)."""
    path, counter = Path(path), counter or _Counter()
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic.startswith(b"BZh"):
        return _file_chunks(path, bz2.BZ2File, counter)
    if magic.startswith(b"\x1f\x8b"):
        return _file_chunks(path, lambda raw: gzip.GzipFile(fileobj=raw), counter)
    if magic.startswith(b"7z\xbc\xaf\x27\x1c"):
        return _7z_chunks(path, counter)
    if magic.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<") or magic.startswith(b"\xef\xbb\xbf"):
        return _file_chunks(path, None, counter)
    raise DumpError(path, f"not a MediaWiki XML export (.xml, .bz2, .gz or .7z); starts with {magic!r}")
