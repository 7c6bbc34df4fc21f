"""Resumable encoding: the passages a build encodes are kept, chunk by chunk, in a hidden folder beside the
target (``.FOLDER.encoded``) that outlives an interrupted build (Ctrl-C, ``kill``, ``kill -9``, a power cut), so
the same command continues where it stopped instead of encoding everything again.

Each chunk (:data:`CHUNK_PASSAGES` passages in index order: the ColBERT indexer's read batch, so a chunk is
encoded in the same model batches whether or not the build was interrupted) is one ``.npz`` file written
durably (a temporary file, ``fsync``, rename) and then recorded, with its size and checksum, in
``progress.json`` (written the same way). The record carries a key: a digest of the passages to encode (docnos
and text, in order) and of everything that changes their vectors (the encoder's fingerprint and precision, its
batch size, the chunk size, the window stride). A build whose key differs discards the folder (and says so); a
build with the same key checks every recorded chunk's checksum, encodes again a chunk that is missing or
damaged (naming it), and skips the rest. The ColBERT index is then written from the chunks in order (the codec's
k-means is seeded, so it comes out the same), which is also what an uninterrupted build does: a resumed build
equals an uninterrupted one. The folder is deleted when the build completes or fails with an error (an error is
not an interruption: nothing is kept), and kept on Ctrl-C or ``kill``.
"""
from __future__ import annotations

import io
import json
import shutil
import sys
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from ...storage import DamagedFileError, new_hasher, read_json, write_durably, write_durably_with

#: passages per chunk file: the ColBERT indexer's read batch (length-sorted together)
CHUNK_PASSAGES = 1024
PROGRESS = "progress.json"
#: the version of the chunk files and their record; another version is discarded
STORE_VERSION = 1

Encoded = Tuple[np.ndarray, np.ndarray, List[int]]  # fp16 vectors [n, d], token ids [n], rows per window


def store_path(folder: Path) -> Path:
    """The hidden folder beside ``folder`` that keeps its build's encoded passages (``.NAME.encoded``)."""
    folder = Path(folder)
    return folder.with_name(f".{folder.name}.encoded")


def _say(verbose: bool) -> Callable[[str], None]:
    def say(line: str) -> None:
        if verbose:
            print(line, file=sys.stderr, flush=True)
    return say


def encoding_key(passages_digest: str, colbert, precision: str, stride: Optional[int]) -> Dict[str, Any]:
    """The key of a build's encoded passages: what they are (``passages_digest``: their docnos and text in order)
    and everything that changes their vectors (recorded as it is, so a mismatch can be named)."""
    return {"version": STORE_VERSION, "passages": passages_digest, "encoder": colbert.fingerprint(),
            "precision": precision, "batch_size": int(colbert.batch_size), "chunk": CHUNK_PASSAGES,
            "stride": stride, "doc_maxlen": int(colbert.config.doc_maxlen)}


def _digest_of(key: Union[str, Dict[str, Any]]) -> str:
    if isinstance(key, str):
        return key
    h = new_hasher()
    h.update(json.dumps(key, sort_keys=True).encode("utf-8"))
    return h.hexdigest()


def _what_differs(recorded: Any, key: Union[str, Dict[str, Any]]) -> str:
    """The key's entries that differ from the recorded ones, named (``"the encoder differs: …"``)."""
    if not (isinstance(recorded, dict) and isinstance(key, dict)):
        return "the passages, encoder or settings differ"
    names = sorted(n for n in set(recorded) | set(key) if recorded.get(n) != key.get(n))
    return "; ".join(f"{n}: {recorded.get(n)!r} then, {key.get(n)!r} now" for n in names) or "the key differs"


def _checksum(data: bytes) -> str:
    h = new_hasher()
    h.update(data)
    return h.hexdigest()


class EncodedChunks:
    """The encoded passages of one build (module notes): ``total`` passages in chunks of
    :data:`CHUNK_PASSAGES`, under ``store_path(folder)``. Opening it discards a folder of another key (or all of
    it with ``restart``) and drops the recorded chunks that are missing or damaged, saying so (``verbose``)."""

    def __init__(self, folder: Path, key: Union[str, Dict[str, Any]], total: int, *, restart: bool = False,
                 verbose: bool = False):
        self.path = store_path(folder)
        self.inputs = key if isinstance(key, dict) else None
        self.key, self.total = _digest_of(key), int(total)
        self.say = _say(verbose)
        self.chunks: Dict[int, Dict[str, Any]] = {}
        if self.path.exists():
            self._open_existing(restart)
        self.path.mkdir(parents=True, exist_ok=True)
        for stray in self.path.iterdir():  # half-written temporary files, chunks never recorded
            if stray.name != PROGRESS and _chunk_number(stray.name) not in self.chunks:
                stray.unlink()
        self._record()

    @property
    def num_chunks(self) -> int:
        return -(-self.total // CHUNK_PASSAGES)

    def passages_done(self) -> int:
        return sum(int(entry["passages"]) for entry in self.chunks.values())

    def _open_existing(self, restart: bool) -> None:
        record: Any = None
        with suppress(OSError, ValueError):
            record = read_json(self.path / PROGRESS, "record of encoded passages")
        kept = 0
        if isinstance(record, dict) and isinstance(record.get("chunks"), dict):
            kept = sum(int(e.get("passages", 0)) for e in record["chunks"].values() if isinstance(e, dict))
        if restart or not isinstance(record, dict) or record.get("key") != self.key \
                or record.get("total") != self.total:
            why = "--restart" if restart else ("its record is unreadable" if not isinstance(record, dict)
                                               else f"{record.get('total')} passages then, {self.total} now"
                                               if record.get("key") == self.key
                                               else _what_differs(record.get("inputs"), self.inputs or self.key))
            self.say(f"discarding {kept:,} passages encoded by an earlier build in {self.path} ({why}); "
                     "encoding from the start")
            shutil.rmtree(self.path)
            return
        for number, entry in sorted((int(n), e) for n, e in record["chunks"].items()):
            problem = self._problem(number, entry)
            if problem:
                self.say(f"{self._file(number)} {problem}: encoding its {int(entry['passages']):,} passages again")
                continue
            self.chunks[number] = entry
        if self.chunks:
            self.say(f"resuming: {self.passages_done():,} of {self.total:,} passages already encoded "
                     f"(kept in {self.path})")

    def _file(self, number: int) -> Path:
        return self.path / f"chunk-{number:06d}.npz"

    def _problem(self, number: int, entry: Dict[str, Any], data: Optional[bytes] = None) -> Optional[str]:
        """Why chunk ``number`` cannot be used (missing, another size, another checksum), or None."""
        path = self._file(number)
        try:
            if data is None:
                data = path.read_bytes()
        except FileNotFoundError:
            return "is missing"
        if len(data) != entry.get("size"):
            return f"is damaged ({len(data):,} bytes; {entry.get('size')} recorded)"
        if _checksum(data) != entry.get("checksum"):
            return "is damaged (its checksum differs from the one recorded)"
        return None

    def _record(self) -> None:
        record = {"key": self.key, "inputs": self.inputs, "total": self.total, "chunk_passages": CHUNK_PASSAGES,
                  "version": STORE_VERSION, "chunks": {str(n): e for n, e in sorted(self.chunks.items())}}
        write_durably(self.path / PROGRESS, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8"))

    def missing(self) -> List[int]:
        """The chunks still to encode, in order."""
        return [n for n in range(self.num_chunks) if n not in self.chunks]

    def save(self, number: int, encoded: List[Encoded], long: int) -> None:
        """Keep chunk ``number``'s passages (each: fp16 vectors, token ids, rows per window), ``long`` of which
        were longer than one window: the file first, then its record."""
        expected = min(CHUNK_PASSAGES, self.total - number * CHUNK_PASSAGES)
        if len(encoded) != expected:
            raise ValueError(f"chunk {number} holds {len(encoded)} passages; expected {expected}")

        def write(out: BinaryIO) -> None:  # straight into the file: one fp16 copy of the vectors beside the passages'
            np.savez(out, vectors=np.concatenate([e[0] for e in encoded], dtype=np.float16),
                     ids=np.concatenate([np.asarray(e[1], dtype=np.int32) for e in encoded]),
                     windows=np.asarray([len(e[2]) for e in encoded], dtype=np.int64),
                     parts=np.asarray([rows for e in encoded for rows in e[2]], dtype=np.int64))

        checksum = write_durably_with(self._file(number), write)  # (docs/results.md, "Build memory: a chunk's end")
        self.chunks[number] = {"passages": len(encoded), "long": int(long), "size": self._file(number).stat().st_size,
                               "checksum": checksum}
        self._record()

    @property
    def long(self) -> int:
        """Passages longer than one window, of those encoded."""
        return sum(int(entry["long"]) for entry in self.chunks.values())

    def passages(self) -> Iterator[Encoded]:
        """Every passage, in order, read back from the chunks (each checked against its checksum again: a chunk
        damaged since is dropped from the record, so that the next run encodes it again, and refused here)."""
        if len(self.chunks) != self.num_chunks:
            raise ValueError(f"{len(self.chunks)} of {self.num_chunks} chunks are encoded in {self.path}")
        for number in range(self.num_chunks):
            entry = self.chunks[number]
            data = self._file(number).read_bytes() if self._file(number).exists() else None
            problem = self._problem(number, entry, data)
            if problem or data is None:
                del self.chunks[number]
                self._record()
                raise DamagedFileError(self._file(number), f"{self._file(number)} {problem} since it was written; "
                                       "run the same command again to encode its passages again")
            arrays = np.load(io.BytesIO(data))
            vectors, ids, windows, parts = (arrays[name] for name in ("vectors", "ids", "windows", "parts"))
            part_end = np.cumsum(windows)
            row_end = np.concatenate([[0], np.cumsum(parts)])
            for i in range(len(windows)):
                first, last = int(part_end[i] - windows[i]), int(part_end[i])
                lo, hi = int(row_end[first]), int(row_end[last])
                yield vectors[lo:hi], ids[lo:hi], parts[first:last].astype(int).tolist()

    def discard(self) -> None:
        """Delete the folder (the build is complete, or failed with an error)."""
        shutil.rmtree(self.path, ignore_errors=True)


def encoded_so_far(folder: Path) -> Optional[Tuple[int, int]]:
    """(passages encoded, passages to encode) of the build of ``folder`` as its record of encoded passages says
    (read by a searcher of a folder whose ColBERT part is still being built), or None when there is no readable
    record."""
    try:
        record = json.loads((store_path(folder) / PROGRESS).read_bytes())
        done = sum(int(entry["passages"]) for entry in record["chunks"].values())
        return done, int(record["total"])
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def pending_progress(folder: Path, passages: int) -> str:
    """How far the ColBERT part of ``folder`` (``passages`` passages) is built, e.g. ``"41,200 of 96,000 passages
    encoded"``."""
    progress = encoded_so_far(folder)
    if progress is None:
        return f"none of {passages:,} passages encoded yet"
    if progress[0] >= progress[1]:
        return f"all {progress[1]:,} passages encoded, the index is being written"
    return f"{progress[0]:,} of {progress[1]:,} passages encoded"


def pending_notice(folder: Path, passages: int) -> str:
    """What a search of ``folder`` (``passages`` passages, its ColBERT part still being built) says about it."""
    return f"ColBERT is being built: {pending_progress(folder, passages)}; searching with TF-IDF meanwhile"


def _chunk_number(name: str) -> Optional[int]:
    """
    >>> _chunk_number("chunk-000012.npz"), _chunk_number(".chunk-000012.npz.tmp")
    (12, None)
    """
    if name.startswith("chunk-") and name.endswith(".npz"):
        try:
            return int(name[len("chunk-"):-len(".npz")])
        except ValueError:
            return None
    return None


def encode_into(chunks: EncodedChunks, colbert, tfidf, positions: np.ndarray, stride: Optional[int],
                verbose: bool) -> None:
    """Encode the passages at ``positions`` of the TF-IDF text store that ``chunks`` does not hold yet, a chunk at
    a time (what the ColBERT indexer does with its read batches), keeping each chunk as it is done."""
    from ...heap import HeapTrimmer
    from ...progress import Ticker, progress

    positions = np.asarray(positions, dtype=np.int64)
    todo = chunks.missing()
    if not todo:
        return
    bar = progress(total=len(positions), desc="indexing", unit="doc", enabled=verbose)
    try:
        ticker = Ticker(bar)
        ticker.settle(chunks.passages_done())
        max_pieces = colbert.tokenizer.max_doc_pieces
        trimmer = HeapTrimmer()  # the heap the encoder freed goes back to the OS (docs/results.md: RSS not yet flat)

        def step(done: float) -> None:  # the encoder's progress moves the bar and, within a chunk, the trims
            ticker.add(done)
            trimmer.add(done)

        for number in todo:
            ids = positions[number * CHUNK_PASSAGES:(number + 1) * CHUNK_PASSAGES]
            pieces = colbert.tokenizer.document_pieces(list(tfidf.texts(ids)))
            encoded = colbert.encode_pieces(pieces, stride, step, dtype=np.float16)  # (no float32 copy of the chunk)
            chunks.save(number, encoded, long=sum(len(p) > max_pieces for p in pieces))
            ticker.settle(chunks.passages_done())
        trimmer.finish()
    finally:
        bar.close()


@contextmanager
def keeping_encoded() -> Iterator[List[EncodedChunks]]:
    """Yield a list for the :class:`EncodedChunks` a build opens. When the block completes or fails with an error
    they are deleted; when it is interrupted (KeyboardInterrupt: Ctrl-C, or ``kill`` within
    :class:`~pyterrier_fandom_colbert.storage.interruptible`) they are kept, and the build says where and how
    much."""
    kept: List[EncodedChunks] = []
    try:
        yield kept
    except KeyboardInterrupt:
        for chunks in kept:
            if chunks.passages_done():
                print(f"interrupted: {chunks.passages_done():,} of {chunks.total:,} passages encoded are kept in "
                      f"{chunks.path}; run the same command again to resume from there", file=sys.stderr)
            else:
                chunks.discard()
        raise
    except BaseException:
        for chunks in kept:
            chunks.discard()  # an error is not an interruption: nothing is left behind
        raise
    for chunks in kept:
        chunks.discard()
