"""Writing a :class:`~pyterrier_fandom_colbert.index.artifact.ColBERTIndex` (folder layout: :mod:`.layout`):
:class:`IndexWriter` (precomputed vectors, streamed to disk) and :class:`ColBERTIndexer` (a ``pt.Indexer``
encoding a corpus).

Writes go to a hidden temporary folder beside the target (:class:`~pyterrier_fandom_colbert.storage.AtomicFolder`),
renamed into place only when complete, so an interrupted build leaves nothing that loads; ``overwrite=True``
replaces only an existing ColBERT index. The size and checksum of every file go into ``pt_meta.json``'s manifest
(the streamed files are hashed as they are written, not read back).
"""
from __future__ import annotations

import time
import warnings
from collections.abc import Sized
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from ..checks import positive_int
from ..frames import check_record
from ..heap import HeapTrimmer
from ..model.config import CONFIG_FILE, ColBERTConfig
from ..model.tokenization import LONG_DOCS, check_long_docs
from ..progress import Ticker, progress
from ..storage import (
    AtomicFolder,
    HashingFile,
    artifact_path,
    build_docno_inverse,
    build_manifest,
    docno_lookup_builder,
    docno_mismatches,
)
from .formats import store_class
from .layout import (
    DOCNOS_FILE,
    OFFSETS_FILE,
    PARTS_FILE,
    TOKEN_IDS_FILE,
    VECTORS_FILE,
    IndexMeta,
    is_index_folder,
)
from .residual.compress import CHUNK_TOKENS, CodedLists, CompressionSpec, TrainedCodec, as_spec, compressed_files

if TYPE_CHECKING:  # pragma: no cover
    from ..model.colbert import ColBERT
    from .ann import FaissSpec
    from .artifact import ColBERTIndex
    from .residual.codec import ResidualCodec

_DOCNOS_TEXT = "docnos.txt"  # one docno per line while building; becomes docnos.npids


class IndexWriter:
    """Streams ``(docno, vectors [n, d], token ids [n])`` into a new index folder.

    Memory stays constant: vectors go straight to disk. With a residual ``compression`` (a format name or a
    :class:`~pyterrier_fandom_colbert.index.residual.compress.CompressionSpec`) the fp16 vectors are a temporary spill
    that :meth:`close` compresses in chunks and deletes; with a known ``codec`` each document is coded as it comes
    instead, and with a :class:`~.residual.compress.TrainedCodec` (trained on this corpus's sample beforehand, by a
    caller that can read the corpus twice) the documents are coded in the spill's chunks and ``codec.json`` records
    the training: the index the spill makes, without the spill. Nothing appears at ``path`` until :meth:`close`
    succeeds; :meth:`abort` (or leaving the ``with`` block by an exception) deletes the partial build.

    >>> import tempfile; from pyterrier_fandom_colbert.index.artifact import ColBERTIndex
    >>> folder = Path(tempfile.mkdtemp()) / "idx"
    >>> with IndexWriter(folder, ColBERTConfig(dim=8), fingerprint="synthetic") as w:
    ...     w.add("d1", np.ones((3, 8), dtype=np.float32), np.array([101, 7, 102]))
    ...     w.add("d2", np.ones((2, 8), dtype=np.float32), np.array([101, 102]))
    >>> ColBERTIndex(folder).doc_vectors("d2")[1].tolist(), ColBERTIndex(folder).offsets.tolist()
    ([101, 102], [0, 3, 5])
    """

    def __init__(self, path: Union[str, Path], config: ColBERTConfig, fingerprint: str, *, overwrite: bool = False,
                 long_docs: str = "truncate", stride: Optional[int] = None,
                 compression: Union[str, CompressionSpec] = "fp16",
                 codec: Union["ResidualCodec", TrainedCodec, None] = None, verbose: bool = False):
        #: a codec trained on this corpus's sample (codec.json records its training, as the spill's does)
        self.trained = codec if isinstance(codec, TrainedCodec) else None
        known: Optional["ResidualCodec"] = codec.codec if isinstance(codec, TrainedCodec) else codec
        if long_docs not in LONG_DOCS:
            raise ValueError(f"long_docs={long_docs!r}; expected one of {LONG_DOCS}")
        self.compression = as_spec(compression)
        #: the storage format's part: what close() makes of the streamed vectors (chosen once; refuses, before any
        #: work, a spec the dimension cannot take)
        self.format_writer = store_class(self.compression.format).writer(self.compression, config.dim)
        if known is not None and (not self.compression.compressed or known.nbits != self.compression.nbits
                                  or known.dim != config.dim):
            raise ValueError(f"a {known.nbits}-bit codec of dimension {known.dim} cannot write a "
                             f"{self.compression.format} index of dimension {config.dim}")
        #: a known codec: each document is compressed as it is added (no fp16 spill, no codec training)
        self.codec = known
        self.verbose = verbose
        self.path = Path(path)
        self.config = config
        self.fingerprint = fingerprint
        self.overwrite = overwrite
        self.long_docs = long_docs
        self.stride = stride
        #: documents cut at doc_maxlen / split into several windows, as counted by the indexer (None: not counted)
        self.truncated_docs: Optional[int] = None
        self.windowed_docs: Optional[int] = None
        self._folder = AtomicFolder(self.path, overwrite=overwrite, replaceable=is_index_folder, what="ColBERT index")
        self._tmp = self._folder.path
        self._coded = None if known is None else CodedLists(
            self._tmp, known, chunk_tokens=CHUNK_TOKENS if self.trained is not None else None)
        self._vectors = None if known is not None else HashingFile(self._tmp / VECTORS_FILE)
        self._token_ids = HashingFile(self._tmp / TOKEN_IDS_FILE)
        self._offsets = HashingFile(self._tmp / OFFSETS_FILE)
        self._docnos = open(self._tmp / _DOCNOS_TEXT, "w", encoding="utf-8")  # noqa: SIM115 (close/abort close it)
        self._parts = open(self._tmp / PARTS_FILE, "wb") if long_docs == "windows" else None  # noqa: SIM115 (as above)
        self._offsets.write(np.int64(0).tobytes())
        if self._parts is not None:
            self._parts.write(np.int64(0).tobytes())
        self.num_docs = 0
        self.num_tokens = 0
        self.num_parts = 0

    def add(self, docno: str, vectors: np.ndarray, token_ids: np.ndarray,
            parts: Optional[Sequence[int]] = None) -> None:
        """Append one document (its scoring token vectors, any float dtype, and their token ids); ``parts``
        (``long_docs="windows"`` only): the number of rows of each of its windows, in order (default: one)."""
        if vectors.ndim != 2 or vectors.shape[1] != self.config.dim:
            raise ValueError(f"vectors of docno {docno!r} have shape {vectors.shape}; expected [n, "
                             f"{self.config.dim}]")
        lengths = self._check(docno, len(vectors), token_ids, parts)
        half = np.ascontiguousarray(vectors, dtype=np.float16)
        if not np.isfinite(half).all():
            raise ValueError(f"vectors of docno {docno!r} are not finite in float16 (NaN, inf or beyond 65504)")
        if self._coded is not None:
            self._coded.add_vectors(self.num_docs, half)
        else:
            assert self._vectors is not None
            self._vectors.write(half.tobytes())
        self._append(docno, len(half), token_ids, lengths)

    def add_coded(self, docno: str, codes: np.ndarray, packed: np.ndarray, token_ids: np.ndarray,
                  parts: Optional[Sequence[int]] = None,
                  exact: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> None:
        """Append one document already coded by this writer's codec (centroid ids ``[n]``, packed residuals
        ``[n, packed_bytes]``, e.g. read from an index built with the same codec), without decoding it.
        ``exact``: with a codec that stores exact outliers, the document's (its rows among ``0..n-1``, ascending,
        and their fp16 vectors: ``CompressedStore.exact_between``)."""
        if self._coded is None:
            raise ValueError(f"add_coded({docno!r}, ...) needs a writer opened with the codec that made the codes")
        lengths = self._check(docno, len(codes), token_ids, parts)
        self._coded.add(codes, packed, np.full(len(codes), self.num_docs, dtype=np.int64), exact)
        self._append(docno, len(codes), token_ids, lengths)

    def _check(self, docno: str, rows: int, token_ids: np.ndarray, parts: Optional[Sequence[int]]) -> np.ndarray:
        """Refuse a bad document before anything of it is written; the rows of each of its windows."""
        if not isinstance(docno, str) or not docno or "\n" in docno or "\r" in docno:
            raise ValueError(f"docno {docno!r} is not a non-empty single-line string; convert docnos with "
                             "str() first")
        if rows == 0:
            raise ValueError(f"docno {docno!r} has no token vectors; every document needs at least one")
        if len(token_ids) != rows:
            raise ValueError(f"docno {docno!r} has {rows} vectors but {len(token_ids)} token ids")
        if parts is not None and self._parts is None:
            raise ValueError(f"parts given for docno {docno!r}, but the writer stores whole documents; open it "
                             "with long_docs='windows'")
        lengths = np.asarray([rows] if parts is None else parts, dtype=np.int64)
        if lengths.sum() != rows or (lengths < 1).any():
            raise ValueError(f"parts {lengths.tolist()} of docno {docno!r} do not split its {rows} vectors "
                             "into non-empty windows")
        return lengths

    def _append(self, docno: str, rows: int, token_ids: np.ndarray, lengths: np.ndarray) -> None:
        self._token_ids.write(np.ascontiguousarray(token_ids, dtype=np.int32).tobytes())
        if self._parts is not None:
            self._parts.write((self.num_tokens + np.cumsum(lengths)).astype(np.int64).tobytes())
        self.num_parts += len(lengths)
        self.num_tokens += rows
        self.num_docs += 1
        self._offsets.write(np.int64(self.num_tokens).tobytes())
        self._docnos.write(docno + "\n")

    def close(self) -> Path:
        """Finish the build (docno lookup, duplicate check, config, metadata) and move it to ``path``."""
        try:
            if self._coded is not None:
                self._coded.flush()  # (the documents it holds, before its files close)
            self._close_files()
            if self.num_docs == 0:
                raise ValueError(f"no documents were given, so no index was written to {self.path}")
            with open(self._tmp / _DOCNOS_TEXT, encoding="utf-8") as lines, \
                    docno_lookup_builder(self._tmp / DOCNOS_FILE) as docnos:
                for line in lines:
                    docnos.add(line[:-1])
            if not build_docno_inverse(self._tmp / DOCNOS_FILE):  # (an exact npids inverse: no duplicates)
                _check_unique(self._tmp / DOCNOS_FILE)
            (self._tmp / _DOCNOS_TEXT).unlink()
            self.config.save(self._tmp)
            streamed = {f.path.name: f.entry() for f in (self._vectors, self._token_ids, self._offsets)
                        if f is not None}
            if self._coded is not None:
                trained = self.trained
                info = self._coded.finish(
                    self.compression, self.num_tokens, TOKEN_IDS_FILE,
                    **({"extra": {"codec": "given"}} if trained is None else  # (as the spill's, timings aside)
                       {"sample": trained.sample,
                        "seconds": {"train": trained.seconds, "quantise": round(self._coded.seconds, 3)}}))
                names = compressed_files(info)
                exact_rows = info.get("exact_rows")
            else:
                names = self.format_writer.finish(self._tmp, self.num_tokens, self.config.dim, self.verbose)
                exact_rows = self.format_writer.exact_rows()
            names += [OFFSETS_FILE, DOCNOS_FILE, CONFIG_FILE]
            if (self._tmp / PARTS_FILE).exists():
                names.append(PARTS_FILE)
            files = build_manifest(self._tmp, names, known={k: v for k, v in streamed.items() if k in names})
            IndexMeta(self.num_docs, self.num_tokens, self.config.dim, self.fingerprint, long_docs=self.long_docs,
                      stride=self.stride, truncated_docs=self.truncated_docs, windowed_docs=self.windowed_docs,
                      num_parts=self.num_parts, format=self.compression.format, files=files,
                      exact_rows=exact_rows).save(self._tmp)
            self._folder.commit()
        except BaseException:
            self.abort()
            raise
        return self.path

    def abort(self) -> None:
        """Delete the partial build; ``path`` is left as it was."""
        self._close_files()
        self._folder.discard()

    def _close_files(self) -> None:
        for f in (self._vectors, self._token_ids, self._offsets, self._docnos, self._parts, self._coded):
            if f is not None:
                f.close()

    def __enter__(self) -> "IndexWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _check_unique(docnos_path: Path) -> None:
    """Raise ValueError naming duplicated docnos: a duplicate maps back to an id other than its own position."""
    dupes = docno_mismatches(docnos_path, limit=5)
    if dupes:
        raise ValueError(f"duplicate docno(s) {sorted(set(dupes))[:5]}: every document needs a unique docno")


@dataclass(frozen=True)
class IndexingStats:
    """What one :meth:`ColBERTIndexer.index` call did, counted by the indexer and its encoder as they worked
    (``indexer.stats``): benchmarks time encoding by it, and can check that the work they report was done.

    ``passages``: documents encoded (equal to the documents written); ``windows``: model inputs (one per passage,
    or per window of a long one, ``long_docs="windows"``); ``tokenise_seconds``: splitting texts into word pieces;
    ``encode_seconds``: encoding the pieces (batching, the forward passes, the vectors' copy out), of which
    ``forward_seconds`` in the forward passes (:class:`~pyterrier_fandom_colbert.model.colbert.EncodeStats`);
    ``seconds``: the whole call (writing, compressing, the neighbour index included).
    """

    passages: int
    windows: int
    tokenise_seconds: float
    encode_seconds: float
    forward_seconds: float
    seconds: float

    @property
    def after_encoding_seconds(self) -> float:
        """The call's time outside tokenising and encoding (writing, compressing, building the neighbour index)."""
        return self.seconds - self.tokenise_seconds - self.encode_seconds


class ColBERTIndexer(pt.Indexer):
    """Encodes a corpus (dicts with ``docno`` and text, a generator, or a DataFrame) into a :class:`ColBERTIndex`.

    Texts longer than one document (``doc_maxlen - 3`` word pieces) are counted: ``long_docs="windows"`` (the
    default) stores them whole as windows of ``doc_maxlen - 3`` pieces starting every ``stride`` pieces (default
    two thirds of a window), scored as one document (the count is ``meta.windowed_docs``);
    ``long_docs="truncate"`` keeps their first pieces (the count is stored as ``meta.truncated_docs``, shown on the
    progress bar and warned about). See docs/index.md, "Long documents".

    ``ann``: the neighbour index built once the documents are written (``index.build_ann(ann)``): ``"default"``
    the default retriever's (nothing below 100,000 tokens, where it searches exactly), a kind or a ``FaissSpec``,
    or ``None`` (then it is built by the first query that needs it). A compressed index (``compression``
    ``"residual1"``, ``"residual2"`` or ``"residual4"``, or a ``CompressionSpec``) searches by its centroids and
    builds none.

    ``stats``: what the last :meth:`index` call did (:class:`IndexingStats`; None before one has completed).
    """

    def __init__(self, index: "ColBERTIndex", colbert: "ColBERT", *, text_field: str = "text",
                 batch_size: int = 1024, overwrite: bool = False, verbose: bool = False,
                 long_docs: str = "windows", stride: Optional[int] = None,
                 ann: Union[str, "FaissSpec", None] = "default",
                 compression: Union[str, CompressionSpec] = "fp16", codec: Optional["ResidualCodec"] = None):
        self.compression = as_spec(compression)
        self.codec = codec
        store = store_class(self.compression.format)
        # what is built after indexing (None: nothing); a bad kind name, or a neighbour index for a format that has
        # none, fails here, before hours of encoding
        self.ann = store.ann_after_indexing(ann, self.compression.format)
        positive_int("batch_size", batch_size, what="documents encoded at once")
        stride = check_long_docs(long_docs, stride, colbert.tokenizer.max_doc_pieces, colbert.config.doc_maxlen)
        self.index_ref = index
        self.colbert = colbert
        self.text_field = text_field
        self.batch_size = batch_size
        self.overwrite = overwrite
        self.verbose = verbose
        self.long_docs = long_docs
        self.stride = stride
        self.stats: Optional[IndexingStats] = None

    def index_inputs(self) -> List[List[str]]:
        return [["docno", self.text_field]]

    # ignored [override]: pt.Indexer.index also takes **kwargs; this indexer's only keyword option is ``total``, so
    # an unknown keyword is Python's own TypeError rather than silently ignored
    def index(self, inp: Union[Iterable[Dict[str, Any]], pd.DataFrame], *,  # type: ignore[override]
              total: Optional[int] = None) -> "ColBERTIndex":
        """Encode and write the documents of ``inp``. ``total``: how many there are, for the progress bar's ETA
        when ``inp`` has no length (a generator). The bar moves after every encoder layer of every model batch."""
        started = time.perf_counter()
        encoded_before = self.colbert.encode_stats.copy()
        tokenise = encode = 0.0
        if total is None and isinstance(inp, Sized):
            total = len(inp)
        if isinstance(inp, pd.DataFrame):
            inp = _records(inp)
        bar = progress(total=total, desc="indexing", unit="doc", enabled=self.verbose)
        ticker = Ticker(bar)  # moves after every encoder layer of every model batch
        trimmer = HeapTrimmer()  # the heap the encoder freed goes back to the OS (docs/results.md: RSS not yet flat)
        long_count = "windowed" if self.long_docs == "windows" else "truncated"
        try:
            with IndexWriter(artifact_path(self.index_ref), self.colbert.config, self.colbert.fingerprint(),
                             overwrite=self.overwrite, long_docs=self.long_docs, stride=self.stride,
                             compression=self.compression, verbose=self.verbose, codec=self.codec) as writer:
                long = empty = 0
                for docnos, texts in _batches(inp, self.text_field, self.batch_size):
                    empty += sum(not str(t).strip() for t in texts)
                    began = time.perf_counter()
                    pieces = self.colbert.tokenizer.document_pieces(texts)
                    tokenise += time.perf_counter() - began
                    long += sum(len(p) > self.colbert.tokenizer.max_doc_pieces for p in pieces)
                    began = time.perf_counter()
                    encoded = self._encode(pieces, ticker.add)
                    encode += time.perf_counter() - began
                    for docno, (vecs, ids, parts) in zip(docnos, encoded):
                        writer.add(docno, vecs, ids, parts)
                    ticker.settle(writer.num_docs)
                    bar.set_postfix({long_count: long})
                    trimmer.add(len(texts))
                trimmer.finish()  # before the writer trains its codec and codes the spill
                writer.truncated_docs = long if self.long_docs == "truncate" else 0
                writer.windowed_docs = long if self.long_docs == "windows" else 0
        finally:
            bar.close()
        self.index_ref._forget()
        if self.long_docs == "truncate" and long:
            warnings.warn(truncation_warning(long, writer.num_docs, self.colbert.config.doc_maxlen), stacklevel=2)
        if empty:
            warnings.warn(f"{empty} of {writer.num_docs} documents have an empty {self.text_field!r}: indexed with "
                          "only their marker tokens, which every query matches a little; drop them before "
                          "indexing if they should not be found", stacklevel=2)
        if self.ann is not None:
            self.index_ref.build_ann(None if self.ann == "default" else self.ann, verbose=self.verbose)
        work = self.colbert.encode_stats - encoded_before
        self.stats = IndexingStats(passages=work.texts, windows=work.sequences, tokenise_seconds=tokenise,
                                   encode_seconds=encode, forward_seconds=work.forward_seconds,
                                   seconds=time.perf_counter() - started)
        return self.index_ref

    def _encode(self, pieces: List[List[int]], done: Optional[Callable[[float], None]] = None
                ) -> List[Tuple[np.ndarray, np.ndarray, Optional[List[int]]]]:
        """(fp16 vectors, token ids, rows per window or None) per text, in input order; ``done(x)`` after each
        encoder layer with the texts' worth of work it did (``ColBERT.encode_pieces``)."""
        encoded = self.colbert.encode_pieces(pieces, self.stride, done, dtype=np.float16)
        return [(vecs, ids, parts if self.long_docs == "windows" else None) for vecs, ids, parts in encoded]

    def __repr__(self) -> str:
        extra = f", stride={self.stride}" if self.long_docs == "windows" else ", long_docs='truncate'"
        extra += f", compression={self.compression.format!r}" if self.compression != CompressionSpec() else ""
        return f"{self.index_ref!r}.indexer({self.colbert!r}{extra})"


def truncation_warning(truncated: int, total: int, doc_maxlen: int) -> str:
    return (f"{truncated} of {total} documents ({100 * truncated / total:.1f}%) are longer than doc_maxlen="
            f"{doc_maxlen} tokens and were truncated (index.meta.truncated_docs); to index them whole use "
            "index.indexer(colbert, long_docs='windows') (docs/index.md, 'Long documents')")


def _records(frame: pd.DataFrame) -> Iterator[Dict[str, Any]]:
    columns = list(frame.columns)
    for row in frame.itertuples(index=False, name=None):
        yield dict(zip(columns, row))


def _batches(records: Iterable[Dict[str, Any]], text_field: str,
             size: int) -> Iterator[Tuple[List[str], List[str]]]:
    """(docnos, texts) of ``size`` records at a time, refusing records without a docno or a text string."""
    docnos: List[str] = []
    texts: List[str] = []
    for i, record in enumerate(records):
        docno, text = check_record(record, i, text_field)
        docnos.append(docno)
        texts.append(text)
        if len(docnos) == size:
            yield docnos, texts
            docnos, texts = [], []
    if docnos:
        yield docnos, texts
