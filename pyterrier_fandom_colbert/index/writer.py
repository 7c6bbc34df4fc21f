"""Writing a :class:`~pyterrier_fandom_colbert.index.artifact.ColBERTIndex` (folder layout: :mod:`.layout`):
:class:`IndexWriter` (precomputed vectors, streamed to disk) and :class:`ColBERTIndexer` (a ``pt.Indexer``
encoding a corpus).

Writes go to a hidden temporary folder beside the target (:class:`~pyterrier_fandom_colbert.storage.AtomicFolder`),
renamed into place only when complete, so an interrupted build leaves nothing that loads; ``overwrite=True``
replaces only an existing ColBERT index.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from ..frames import check_record
from ..model.config import ColBERTConfig
from ..progress import progress
from ..storage import AtomicFolder
from .codec import check_nbits
from .compressed import CompressionSpec, as_spec, compress_spill
from .layout import DOCNOS_FILE, OFFSETS_FILE, TOKEN_IDS_FILE, VECTORS_FILE, IndexMeta, is_index_folder

if TYPE_CHECKING:  # pragma: no cover
    from ..model.colbert import ColBERT
    from .artifact import ColBERTIndex

_DOCNOS_TEXT = "docnos.txt"  # one docno per line while building; becomes docnos.npids
#: npids (0.1.3) picks a codec from the first 256 docnos and fails to read it back when they are all identical
_NPIDS_FIRST_BLOCK = 256


class IndexWriter:
    """Streams ``(docno, vectors [n, d], token ids [n])`` into a new index folder.

    Memory stays constant: vectors go straight to disk. With a residual ``compression`` (a format name or a
    :class:`~pyterrier_fandom_colbert.index.compressed.CompressionSpec`) the fp16 vectors are a temporary spill
    that :meth:`close` compresses in chunks and deletes. Nothing appears at ``path`` until :meth:`close`
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
                 compression: Union[str, CompressionSpec] = "fp16", verbose: bool = False):
        self.compression = as_spec(compression)
        if self.compression.compressed:  # refuse a bit width the dimension cannot pack before any work
            check_nbits(self.compression.nbits, config.dim)
        self.verbose = verbose
        self.codec_info: Optional[Dict[str, Any]] = None
        self.path = Path(path)
        self.config = config
        self.fingerprint = fingerprint
        self.overwrite = overwrite
        self._folder = AtomicFolder(self.path, overwrite=overwrite, replaceable=is_index_folder, what="ColBERT index")
        self._tmp = self._folder.path
        self._vectors = open(self._tmp / VECTORS_FILE, "wb")
        self._token_ids = open(self._tmp / TOKEN_IDS_FILE, "wb")
        self._offsets = open(self._tmp / OFFSETS_FILE, "wb")
        self._docnos = open(self._tmp / _DOCNOS_TEXT, "w", encoding="utf-8")
        self._offsets.write(np.int64(0).tobytes())
        self.num_docs = 0
        self.num_tokens = 0
        self._first_docno: Optional[str] = None
        self._first_block_varies = False

    def add(self, docno: str, vectors: np.ndarray, token_ids: np.ndarray) -> None:
        """Append one document (its scoring token vectors, any float dtype, and their token ids)."""
        if not isinstance(docno, str) or not docno or "\n" in docno or "\r" in docno:
            raise ValueError(f"docno {docno!r} is not a non-empty single-line string; convert docnos with "
                             "str() first")
        if vectors.ndim != 2 or vectors.shape[1] != self.config.dim:
            raise ValueError(f"vectors of docno {docno!r} have shape {vectors.shape}; expected [n, "
                             f"{self.config.dim}]")
        if len(vectors) == 0:
            raise ValueError(f"docno {docno!r} has no token vectors; every document needs at least one")
        if len(token_ids) != len(vectors):
            raise ValueError(f"docno {docno!r} has {len(vectors)} vectors but {len(token_ids)} token ids")
        half = np.ascontiguousarray(vectors, dtype=np.float16)
        if not np.isfinite(half).all():
            raise ValueError(f"vectors of docno {docno!r} are not finite in float16 (NaN, inf or beyond 65504)")
        self._vectors.write(half.tobytes())
        self._token_ids.write(np.ascontiguousarray(token_ids, dtype=np.int32).tobytes())
        self.num_tokens += len(half)
        self.num_docs += 1
        self._offsets.write(np.int64(self.num_tokens).tobytes())
        self._docnos.write(docno + "\n")
        if self._first_docno is None:
            self._first_docno = docno
        elif self.num_docs <= _NPIDS_FIRST_BLOCK and docno != self._first_docno:
            self._first_block_varies = True

    def close(self) -> Path:
        """Finish the build (docno lookup, duplicate check, config, metadata) and move it to ``path``."""
        import npids

        try:
            self._close_files()
            if self.num_docs == 0:
                raise ValueError(f"no documents were given, so no index was written to {self.path}")
            if not self._first_block_varies:  # npids cannot store these; say why instead of failing inside it
                if self.num_docs > 1:
                    raise ValueError(f"duplicate docno(s) [{self._first_docno!r}]: every document needs a unique "
                                     "docno")
                raise ValueError("an index needs at least two documents: the docno lookup (npids 0.1.3) cannot "
                                 "store a single docno")
            with open(self._tmp / _DOCNOS_TEXT, encoding="utf-8") as lines:
                npids.Lookup.build((line[:-1] for line in lines), self._tmp / DOCNOS_FILE, return_self=False)
            _check_unique(self._tmp / DOCNOS_FILE, self.num_docs)
            (self._tmp / _DOCNOS_TEXT).unlink()
            if self.compression.compressed:
                self.codec_info = compress_spill(self._tmp, self.num_tokens, self.config.dim, self.compression,
                                                 vectors_file=VECTORS_FILE, token_ids_file_i32=TOKEN_IDS_FILE,
                                                 offsets_file=OFFSETS_FILE, verbose=self.verbose)
            self.config.save(self._tmp)
            IndexMeta(self.num_docs, self.num_tokens, self.config.dim, self.fingerprint,
                      format=self.compression.format).save(self._tmp)
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
        for f in (self._vectors, self._token_ids, self._offsets, self._docnos):
            f.close()

    def __enter__(self) -> "IndexWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _check_unique(docnos_path: Path, num_docs: int, chunk: int = 100_000) -> None:
    """Raise ValueError naming duplicated docnos: a duplicate maps back to an id other than its own position."""
    import npids

    dupes: List[str] = []
    with npids.Lookup(docnos_path) as lookup:
        for start in range(0, num_docs, chunk):
            ids = np.arange(start, min(start + chunk, num_docs))
            docnos = lookup.fwd[ids]
            bad = lookup.inv[docnos] != ids
            dupes.extend(str(d) for d in docnos[bad])
            if len(dupes) >= 5:
                break
    if dupes:
        raise ValueError(f"duplicate docno(s) {sorted(set(dupes))[:5]}: every document needs a unique docno")


class ColBERTIndexer(pt.Indexer):
    """Encodes a corpus (dicts with ``docno`` and text, a generator, or a DataFrame) into a :class:`ColBERTIndex`."""

    def __init__(self, index: "ColBERTIndex", colbert: "ColBERT", *, text_field: str = "text",
                 batch_size: int = 1024, overwrite: bool = False, compression: Union[str, CompressionSpec] = "fp16",
                 verbose: bool = False):
        self.compression = as_spec(compression)
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}; expected a positive number of documents")
        self.index_ref = index
        self.colbert = colbert
        self.text_field = text_field
        self.batch_size = batch_size
        self.overwrite = overwrite
        self.verbose = verbose

    def index_inputs(self) -> List[List[str]]:
        return [["docno", self.text_field]]

    def index(self, inp: Union[Iterable[Dict[str, Any]], pd.DataFrame]) -> "ColBERTIndex":
        if isinstance(inp, pd.DataFrame):
            inp = _records(inp)
        bar = progress(desc="indexing", unit="doc", enabled=self.verbose)
        try:
            with IndexWriter(self.index_ref.path, self.colbert.config, self.colbert.fingerprint(),
                             overwrite=self.overwrite, compression=self.compression, verbose=self.verbose) as writer:
                for docnos, texts in _batches(inp, self.text_field, self.batch_size):
                    for docno, (vecs, ids) in zip(docnos, self._encode(texts)):
                        writer.add(docno, vecs, ids)
                    bar.update(len(docnos))
        finally:
            bar.close()
        self.index_ref._forget()
        return self.index_ref

    def _encode(self, texts: List[str]) -> List[Tuple[np.ndarray, np.ndarray]]:
        """(fp16 vectors, token ids) per text in input order; the whole list is length-bucketed at once."""
        out: List[Any] = [None] * len(texts)
        chunk = math.ceil(len(texts) / self.colbert.batch_size)
        for batch in self.colbert.doc_batches(texts, chunk=chunk):
            for pos, vecs, ids in batch.per_document():
                out[pos] = (vecs.astype(np.float16), ids)
        return out

    def __repr__(self) -> str:
        compression = f", compression={self.compression.format!r}" if self.compression.compressed else ""
        return f"{self.index_ref!r}.indexer({self.colbert!r}{compression})"


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
