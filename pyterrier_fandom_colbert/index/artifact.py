"""``ColBERTIndex``: a PyTerrier artifact holding every document's token vectors, and its retrievers.

The folder layout is in :mod:`.layout`; writing (the writer and the indexer) is in :mod:`.writer`. This module
reads an index (each part on first use, as ``functools.cached_property``) and makes its retrievers. An index holds
either fp16 vectors or residual codes (``format`` ``residual1|2|4``, :mod:`.compressed`): the same class reads
both, decompressing a compressed index's vectors where they are needed, and retrieves from a compressed index by
centroid search (:mod:`.residual_search`).

Before the first part is read, the cheap checks run once (:meth:`ColBERTIndex.check`): every file's size against
the manifest and the sizes the metadata implies, the checksums of the small files, the offsets' structure.
:meth:`ColBERTIndex.verify` adds every file's checksum and a scan for non-finite vectors.
"""
from __future__ import annotations

import time
import warnings
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyterrier as pt

from ..lazy import forget_cached
from ..model.config import CONFIG_FILE, ColBERTConfig
from ..storage import (
    DamagedFileError,
    check_checksums,
    check_sizes,
    manifest_problems,
    open_npids,
    raise_damaged,
)
from .layout import (
    ARTIFACT_FORMAT,
    ARTIFACT_TYPE,
    CHECKED_ON_OPEN,
    CHECKED_ON_OPEN_COMPRESSED,
    CODEC_FILE,
    DOCNOS_FILE,
    IVF_DOCS_FILE,
    IVF_OFFSETS_FILE,
    META_FILE,
    OFFSETS_FILE,
    PACKAGE_HINT,
    PARTS_FILE,
    RESIDUALS_FILE,
    TOKEN_IDS_FILE,
    VECTORS_FILE,
    IndexMeta,
    check_offsets,
    non_finite_rows,
)

_WHAT = "ColBERT index"
_REMEDY = "rebuild the index (index.indexer(colbert, overwrite=True))"
#: vector rows scanned at a time for non-finite values in verify()
_SCAN_ROWS = 1 << 16

if TYPE_CHECKING:  # pragma: no cover
    import faiss
    import npids
    import torch

    from ..model.colbert import ColBERT
    from .ann import AnnIndex, FaissSpec
    from .residual_search import CompressedStore
    from .codec import ResidualCodec
    from .compressed import CompressionSpec
    from .writer import ColBERTIndexer, IndexWriter


class ColBERTIndex(pt.Artifact):
    """Token vectors of a corpus encoded by one ColBERT encoder, with retrievers and re-rankers over them.

    ``ColBERTIndex(path).indexer(colbert).index(corpus_iter)`` builds it; ``pt.Artifact.load(path)`` opens it.
    """

    ARTIFACT_TYPE = ARTIFACT_TYPE
    ARTIFACT_FORMAT = ARTIFACT_FORMAT
    ARTIFACT_PACKAGE_HINT = PACKAGE_HINT

    def __init__(self, path: Union[str, Path], *, verbose: bool = False):
        super().__init__(path)
        self.verbose = verbose
        self._ann: Dict["FaissSpec", "faiss.Index"] = {}  # FAISS indexes by spec, loaded or built on first use

    # -- contents ------------------------------------------------------------------------------------------
    def built(self) -> bool:
        return (self.path / META_FILE).exists()

    def _require_built(self) -> None:
        if not self.built():
            raise FileNotFoundError(f"no ColBERT index at {self.path} ({META_FILE} not found); build one with "
                                    f"ColBERTIndex({str(self.path)!r}).indexer(colbert).index(corpus_iter)")

    @cached_property
    def meta(self) -> IndexMeta:
        self._require_built()
        return IndexMeta.load(self.path)

    @cached_property
    def config(self) -> ColBERTConfig:
        self.check()
        return ColBERTConfig.load(self.path)

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the encoder that built the index (``ColBERT.fingerprint()``)."""
        return self.meta.fingerprint

    def __len__(self) -> int:
        return self.meta.num_docs

    @property
    def compression(self) -> str:
        """The storage format: ``'fp16'``, or ``'residual1'``/``'residual2'``/``'residual4'`` (compressed)."""
        return self.meta.format

    @property
    def compressed(self) -> bool:
        return self.compression != ARTIFACT_FORMAT

    def _require_fp16(self, what: str) -> None:
        if self.compressed:
            raise ValueError(f"the index at {self.path} is {self.compression}-compressed and stores no fp16 vectors, "
                             f"which {what} needs; build an fp16 index (compression='fp16') for it, or use "
                             "doc_vectors() (decompressed) and index.retriever() (centroid search)")

    # -- checks --------------------------------------------------------------------------------------------
    def _layout(self, meta: IndexMeta) -> Dict[str, Tuple[Any, Tuple[int, ...]]]:
        """(dtype, shape) of each array file, as the metadata (and a compressed index's codec.json) imply."""
        if meta.format != ARTIFACT_FORMAT:
            from .compressed import array_layout

            layout = array_layout(self._codec_json(), meta.num_tokens, meta.num_docs, meta.dim)
            layout[OFFSETS_FILE] = (np.int64, (meta.num_docs + 1,))
            return layout
        return {VECTORS_FILE: (np.float16, (meta.num_tokens, meta.dim)),
                TOKEN_IDS_FILE: (np.int32, (meta.num_tokens,)),
                OFFSETS_FILE: (np.int64, (meta.num_docs + 1,))}

    def _codec_json(self) -> Dict[str, Any]:
        from ..storage import read_json

        info = read_json(self.path / CODEC_FILE, "codec description of a compressed ColBERT index")
        missing = [k for k in ("nbits", "num_centroids", "code_dtype", "token_id_dtype", "num_pairs") if k not in info]
        if missing:
            file = self.path / CODEC_FILE
            raise DamagedFileError(file, f"{file} is damaged: it lacks {missing}; {_REMEDY}")
        return info

    def _size_problem(self, meta: IndexMeta, name: str) -> Optional[str]:
        dtype, shape = self._layout(meta)[name]
        file = self.path / name
        expected = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if not file.is_file():
            return f"{file} is missing"
        if file.stat().st_size != expected:
            return (f"{file} is {file.stat().st_size} bytes, but {META_FILE} (num_docs={meta.num_docs}, "
                    f"num_tokens={meta.num_tokens}, dim={meta.dim}) needs {expected}")
        return None

    @cached_property
    def _checked(self) -> bool:
        """The cheap checks, once: sizes of all files, checksums of the small ones (:data:`CHECKED_ON_OPEN`)."""
        self._require_built()
        meta = self.meta
        if meta.files is not None:
            check_sizes(self.path, meta.files, _WHAT, _REMEDY)
            small = CHECKED_ON_OPEN_COMPRESSED if meta.format != ARTIFACT_FORMAT else CHECKED_ON_OPEN
            check_checksums(self.path, meta.files, small, what=_WHAT, remedy=_REMEDY)
        problems = [(name, p) for name in self._layout(meta) if (p := self._size_problem(meta, name))]
        raise_damaged(self.path, problems, what=_WHAT, remedy=_REMEDY)
        return True

    def check(self) -> None:
        """The checks that run when an index is opened (its retrievers are made or a part is first read):
        every file present with its recorded size, the checksums of ``colbert_config.json``, ``offsets.i64`` and
        ``docnos.npids``, the offsets' structure (first 0, last = num_tokens, strictly increasing). Reads a few
        bytes per document, never the vectors. Raises :class:`~pyterrier_fandom_colbert.storage.DamagedFileError`
        naming the file."""
        self.offsets  # noqa: B018 (runs _checked, then the structure check)

    def verify(self) -> Dict[str, Any]:
        """Full content check: every file's checksum against the manifest, the offsets' structure, the docno
        lookup, every vector finite, and each cached FAISS index (its file's checksum, and that it was built
        from these vectors). Reads the whole index (0.6-0.7 s for 260 MB on the busy 2-core VM). Raises
        :class:`~pyterrier_fandom_colbert.storage.DamagedFileError` naming each damaged file (and the documents
        whose vectors are not finite); returns what was checked: ``{"files", "bytes", "seconds"}``.

        An index written before checksums were recorded has no manifest: its structure and vectors are still
        checked, with a warning that its file contents cannot be."""
        started = time.perf_counter()
        self._require_built()
        meta = IndexMeta.load(self.path)
        problems = manifest_problems(self.path, meta.files, self.path / META_FILE,
                                     "its sizes, structure and vectors")
        problems += [(name, p) for name in self._layout(meta) if (p := self._size_problem(meta, name))]
        offsets = None
        if not any(name == OFFSETS_FILE for name, _ in problems):
            offsets = np.fromfile(self.path / OFFSETS_FILE, dtype=np.int64)
            problem = check_offsets(offsets, meta.num_tokens)
            if problem:
                problems.append((OFFSETS_FILE, f"{self.path / OFFSETS_FILE}: {problem}"))
                offsets = None
        try:
            ColBERTConfig.load(self.path)
        except ValueError as err:
            problems.append((CONFIG_FILE, str(err)))
        docnos = None
        try:
            docnos = open_npids(self.path / DOCNOS_FILE, meta.num_docs, _WHAT)
        except DamagedFileError as err:
            problems.append((DOCNOS_FILE, str(err)))
        if meta.format != ARTIFACT_FORMAT:
            problems += self._code_problems(meta, problems)
        elif self._size_problem(meta, VECTORS_FILE) is None:
            problems += self._non_finite_vectors(meta, offsets, docnos)
        if docnos is not None:
            docnos.close()
        from .ann.cache import cache_problems

        problems += cache_problems(self.path, None if meta.files is None else meta.files.get(VECTORS_FILE))
        raise_damaged(self.path, problems, what=_WHAT, remedy=_REMEDY)
        files = meta.files or {}
        return {"files": sorted(files), "bytes": sum(e["size"] for e in files.values()),
                "seconds": round(time.perf_counter() - started, 3)}

    def _code_problems(self, meta: IndexMeta, found: List[Tuple[str, str]]) -> List[Tuple[str, str]]:
        """A compressed index's codes and inverted lists: ids in range, lists well formed (files whose size is
        already wrong are skipped)."""
        from .compressed import codes_file

        bad = {name for name, _ in found}
        try:
            info = self._codec_json()
        except (ValueError, FileNotFoundError) as err:
            return [(CODEC_FILE, str(err))]
        layout = self._layout(meta)
        problems: List[Tuple[str, str]] = []
        num_centroids = int(info["num_centroids"])
        name = codes_file(np.dtype(info["code_dtype"]))
        if name not in bad and self._size_problem(meta, name) is None:
            codes = np.memmap(self.path / name, dtype=layout[name][0], mode="r", shape=layout[name][1])
            top = max((int(codes[s:s + _SCAN_ROWS].max()) for s in range(0, meta.num_tokens, _SCAN_ROWS)), default=0)
            if top >= num_centroids:
                problems.append((name, f"{self.path / name} holds centroid id {top}, but the codec has "
                                       f"{num_centroids} centroids"))
        if not {IVF_OFFSETS_FILE, IVF_DOCS_FILE} & bad and self._size_problem(meta, IVF_OFFSETS_FILE) is None \
                and self._size_problem(meta, IVF_DOCS_FILE) is None:
            lists = np.fromfile(self.path / IVF_OFFSETS_FILE, dtype=np.int64)
            if lists[0] != 0 or lists[-1] != int(info["num_pairs"]) or (np.diff(lists) < 0).any():
                problems.append((IVF_OFFSETS_FILE, f"{self.path / IVF_OFFSETS_FILE} is not a list of ascending "
                                                   f"offsets from 0 to {info['num_pairs']}"))
            docs = np.memmap(self.path / IVF_DOCS_FILE, dtype=np.int32, mode="r")
            if len(docs) and (int(docs.min()) < 0 or int(docs.max()) >= meta.num_docs):
                problems.append((IVF_DOCS_FILE, f"{self.path / IVF_DOCS_FILE} names documents outside 0.."
                                                f"{meta.num_docs - 1}"))
        return problems

    def _non_finite_vectors(self, meta: IndexMeta, offsets: Optional[np.ndarray],
                            docnos: Any) -> List[Tuple[str, str]]:
        """A problem naming the first documents with NaN/inf vectors (by docno when offsets and docnos read)."""
        vectors = np.memmap(self.path / VECTORS_FILE, dtype=np.float16, mode="r", shape=(meta.num_tokens, meta.dim))
        bad_rows: List[np.ndarray] = []
        count = 0
        for start in range(0, meta.num_tokens, _SCAN_ROWS):
            rows = non_finite_rows(vectors[start:start + _SCAN_ROWS]) + start
            count += len(rows)
            if len(rows) and sum(map(len, bad_rows)) < 5:
                bad_rows.append(rows[:5])
        if not count:
            return []
        rows = np.concatenate(bad_rows)[:5]
        where = f"rows {rows.tolist()}"
        if offsets is not None:
            docs = np.unique(np.searchsorted(offsets, rows, side="right") - 1)
            where = f"documents {docnos.fwd[docs].tolist()}" if docnos is not None else f"document ids {docs.tolist()}"
        return [(VECTORS_FILE, f"{self.path / VECTORS_FILE} holds {count} token vectors with NaN or inf values "
                               f"({where}{', …' if count > len(rows) else ''})")]

    def _array(self, name: str, dtype: Any, shape: Tuple[int, ...]) -> np.ndarray:
        self._checked  # noqa: B018
        return np.memmap(self.path / name, dtype=dtype, mode="r", shape=shape)

    @cached_property
    def vectors(self) -> np.ndarray:
        """All token vectors, ``[num_tokens, dim]`` float16, memory-mapped (fp16 indexes only)."""
        self._require_fp16("index.vectors")
        return self._array(VECTORS_FILE, np.float16, (self.meta.num_tokens, self.meta.dim))

    @cached_property
    def codec_info(self) -> Dict[str, Any]:
        """A compressed index's ``codec.json``: its CompressionSpec, nbits, centroids, dtypes and build timings."""
        if not self.compressed:
            raise ValueError(f"the index at {self.path} is not compressed (format fp16): it has no codec")
        self._checked  # noqa: B018
        return self._codec_json()

    @cached_property
    def codec(self) -> "ResidualCodec":
        """A compressed index's residual codec (centroids, bucket cutoffs and weights)."""
        from .compressed import load_codec

        return load_codec(self.path, self.codec_info, self.meta.dim)

    @cached_property
    def store(self) -> "CompressedStore":
        """A compressed index's arrays (memory-mapped codes, residuals and inverted lists) for centroid search."""
        from .residual_search import CompressedStore
        from .compressed import codes_file

        info, meta, codec = self.codec_info, self.meta, self.codec
        code = np.dtype(info["code_dtype"])
        codes = self._array(codes_file(code), code, (meta.num_tokens,))
        residuals = self._array(RESIDUALS_FILE, np.uint8, (meta.num_tokens, codec.packed_bytes))
        ivf_offsets = np.array(self._array(IVF_OFFSETS_FILE, np.int64, (codec.num_centroids + 1,)))
        ivf_docs = self._array(IVF_DOCS_FILE, np.int32, (int(info["num_pairs"]),))
        return CompressedStore(codec, codes, residuals, self.offsets, ivf_offsets, ivf_docs,
                               self.config.similarity, self.config.reduction)

    @cached_property
    def vector_tensor(self) -> "torch.Tensor":
        """:attr:`vectors` as a CPU torch tensor sharing the memory map (read-only: never write to it)."""
        import torch

        with warnings.catch_warnings():  # torch warns that the (read-only) memory map is not writable
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(self.vectors)

    @cached_property
    def token_ids(self) -> np.ndarray:
        """The wordpiece id of every stored vector (int32, or uint16 in a compressed index when all ids fit)."""
        if self.compressed:
            from .compressed import token_ids_file

            dtype = np.dtype(self.codec_info["token_id_dtype"])
            return self._array(token_ids_file(dtype), dtype, (self.meta.num_tokens,))
        return self._array(TOKEN_IDS_FILE, np.int32, (self.meta.num_tokens,))

    @cached_property
    def offsets(self) -> np.ndarray:
        """``[num_docs + 1]``: document ``i``'s vectors are rows ``offsets[i]:offsets[i + 1]``."""
        offsets = self._array(OFFSETS_FILE, np.int64, (self.meta.num_docs + 1,))
        problem = check_offsets(offsets, self.meta.num_tokens)
        if problem:
            file = self.path / OFFSETS_FILE
            raise DamagedFileError(file, f"{file} is damaged: {problem}; {_REMEDY}")
        return offsets

    @cached_property
    def part_offsets(self) -> np.ndarray:
        """``[num_parts + 1]``: part (window) ``j``'s vectors are rows ``part_offsets[j]:part_offsets[j + 1]``. An
        index built with ``long_docs="windows"`` stores each long document as several parts, back to back
        inside its own rows; otherwise every document is one part (this is :attr:`offsets`)."""
        if self.meta.long_docs != "windows":
            return self.offsets
        return self._array(PARTS_FILE, np.int64, (self.meta.num_parts + 1,))

    @cached_property
    def docnos(self) -> "npids.Lookup":
        self._checked  # noqa: B018
        return open_npids(self.path / DOCNOS_FILE, self.meta.num_docs, _WHAT)

    def doc_ids(self, docnos: Sequence[str]) -> np.ndarray:
        """Document ids (int64) of ``docnos``; a ValueError lists docnos the index does not hold."""
        docnos = np.asarray(list(docnos), dtype=str)
        ids = np.asarray(self.docnos.inv[docnos], dtype=np.int64) if len(docnos) else np.zeros(0, np.int64)
        missing = docnos[ids < 0]
        if len(missing):
            shown = list(dict.fromkeys(missing.tolist()))
            raise ValueError(f"{len(missing)} docno(s) are not in the index at {self.path}, e.g. {shown[:5]}; "
                             "re-rank only candidates from the indexed corpus")
        return ids

    def docnos_of(self, doc_ids: np.ndarray) -> np.ndarray:
        """Docnos (object array) of document ids."""
        if len(doc_ids) == 0:
            return np.array([], dtype=object)
        return self.docnos.fwd[np.asarray(doc_ids, dtype=np.int64)].astype(object)

    def doc_vectors(self, doc: Union[str, int]) -> Tuple[np.ndarray, np.ndarray]:
        """(vectors ``[n, d]`` float32, token ids ``[n]`` int32) of one document, by docno or document id."""
        doc_id = int(self.doc_ids([doc])[0]) if isinstance(doc, str) else int(doc)
        if not 0 <= doc_id < len(self):
            raise IndexError(f"document id {doc_id} is out of range: the index holds {len(self)} documents")
        start, end = self.offsets[doc_id], self.offsets[doc_id + 1]
        ids = np.array(self.token_ids[start:end], dtype=np.int32)
        if self.compressed:
            store = self.store
            return store.codec.decompress(store.codes[start:end], store.residuals[start:end]), ids
        return np.asarray(self.vectors[start:end], dtype=np.float32), ids

    def check_encoder(self, colbert: "ColBERT") -> None:
        """Refuse a query encoder other than the one whose document vectors the index holds."""
        if colbert.fingerprint() != self.fingerprint:
            raise ValueError(f"the query encoder (fingerprint {colbert.fingerprint()}) is not the encoder that "
                             f"built the index at {self.path} (fingerprint {self.fingerprint}); load the same "
                             "checkpoint, or rebuild the index with this encoder")

    # -- FAISS ---------------------------------------------------------------------------------------------
    @property
    def _vectors_entry(self) -> Optional[Dict[str, Any]]:
        """The manifest's entry (size, checksum) of the vectors: FAISS caches record what they were built from."""
        return None if self.meta.files is None else self.meta.files.get(VECTORS_FILE)

    def ann(self, spec: "FaissSpec", *, verbose: Optional[bool] = None) -> "AnnIndex":
        """The neighbour index over all token vectors for ``spec``: read from ``faiss/`` in the index folder, or
        built and written there on first use (see :meth:`build_ann`), then kept in memory (on GPU when its kind
        runs there and FAISS has GPU support and sees one). A folder that cannot be written and holds no such
        index is a ``PermissionError`` that says how to build it."""
        from . import ann

        self._require_fp16("a neighbour (FAISS) index")
        spec = spec.resolve(self.meta.num_tokens, self.meta.dim)
        if spec not in self._ann:
            self._check_can_cache(spec)
            built = ann.load_or_build(self.path, self.vectors, spec, self.config.similarity,
                                      self.verbose if verbose is None else verbose, content=self._vectors_entry)
            self._ann[spec] = ann.to_gpu_if_available(built)
        return self._ann[spec]

    def build_ann(self, faiss: Union[str, "FaissSpec", None] = None, *,
                  verbose: bool = False) -> Optional[Path]:
        """Build the neighbour index for ``faiss`` (a kind name or a ``FaissSpec``; ``None``: the retriever's
        default for this index) and write it to ``faiss/`` in the index folder now, so that no query has to;
        an existing one is kept. Returns its file, or ``None`` for exact search (nothing to build).

        Also ``index.indexer(colbert, ann=...)`` (after indexing) and
        ``python -m pyterrier_fandom_colbert.index build-ann FOLDER --faiss KIND``.
        """
        from . import ann
        from .token_search import default_search

        if self.compressed and faiss is None:
            return None  # centroid search needs no neighbour index
        self._require_fp16(f"a neighbour index (faiss={faiss!r})")
        spec = default_search(self.meta.num_tokens)[0] if faiss is None else \
            faiss if isinstance(faiss, ann.FaissSpec) else ann.FaissSpec(faiss)
        target = ann.cache_file(self.path, spec.resolve(self.meta.num_tokens, self.meta.dim))
        if target is None:
            return None
        self.ann(spec, verbose=verbose)
        return target

    def _check_can_cache(self, spec: "FaissSpec") -> None:
        """Refuse, before any training, to build a neighbour index that could not be written to the folder."""
        import tempfile

        from . import ann

        target = ann.cache_file(self.path, spec)
        if target is None or target.exists():
            return
        try:
            target.parent.mkdir(exist_ok=True)
            with tempfile.TemporaryFile(dir=target.parent):
                pass
        except OSError as err:
            kind = spec.kind
            raise PermissionError(
                f"no {kind!r} neighbour index at {target} and {target.parent} cannot be written ({err}); build it "
                f"once where the index is writable: ColBERTIndex({str(self.path)!r}).build_ann(faiss={kind!r}) or "
                f"`python -m pyterrier_fandom_colbert.index build-ann {self.path} --faiss {kind}`, or search "
                "without one: retriever(faiss='exact')") from None

    # -- factories -----------------------------------------------------------------------------------------
    def indexer(self, colbert: "ColBERT", *, text_field: str = "text", batch_size: int = 1024,
                overwrite: bool = False, verbose: bool = False, long_docs: str = "windows",
                stride: Optional[int] = None, ann: Union[str, "FaissSpec", None] = "default",
                compression: Union[str, "CompressionSpec"] = "fp16") -> "ColBERTIndexer":
        """A ``pt.Indexer`` encoding ``docno``/``text`` records with ``colbert`` into this index.

        ``batch_size`` documents are read, length-bucketed and encoded at a time: memory is bounded by that,
        not by the corpus. Texts longer than ``doc_maxlen`` tokens are stored whole as overlapping windows
        ``stride`` word pieces apart (default two thirds of a window; ``meta.windowed_docs`` counts them), each
        document still one row of the retriever's and scorer's results; ``long_docs="truncate"`` keeps only their
        first ``doc_maxlen`` tokens instead (counted in ``meta.truncated_docs``, with a warning): a third of the
        storage on collections of long texts, and worse rankings there (docs/index.md, "Long documents").

        ``ann``: the neighbour index built right after indexing (:meth:`build_ann`): ``"default"`` the one the
        default retriever uses (none below 100,000 tokens, where it searches exactly), a kind name or a
        ``FaissSpec``, or ``None`` for none (built on first use then, if the folder is writable).

        ``compression``: ``'fp16'`` (full-precision vectors), or ``'residual1'``, ``'residual2'``, ``'residual4'``
        (a centroid id and 1/2/4 bits per dimension per token, PLAID's scheme; the corpus is still encoded once, its
        vectors spilled to disk and compressed after encoding), or a
        :class:`~pyterrier_fandom_colbert.index.compressed.CompressionSpec` with the codec's training parameters. A
        compressed index retrieves by centroid search and needs no ``ann``.
        """
        from .writer import ColBERTIndexer

        return ColBERTIndexer(self, colbert, text_field=text_field, batch_size=batch_size, overwrite=overwrite,
                              verbose=verbose, long_docs=long_docs, stride=stride, ann=ann, compression=compression)

    def writer(self, config: ColBERTConfig, fingerprint: str, *, overwrite: bool = False,
               compression: Union[str, "CompressionSpec"] = "fp16", verbose: bool = False) -> "IndexWriter":
        """Low-level writer for precomputed vectors (``with index.writer(...) as w: w.add(docno, vecs, ids)``)."""
        from .writer import IndexWriter

        return IndexWriter(self.path, config, fingerprint, overwrite=overwrite, compression=compression,
                           verbose=verbose)

    def retriever(self, colbert: Optional["ColBERT"] = None, *, num_results: int = 1000, lam: Optional[float] = None,
                  k_hat: Optional[int] = None, faiss: Union[str, "FaissSpec", None] = None,
                  nprobe: Optional[int] = None, refine: Optional[int] = None, strict: bool = False,
                  ncells: Optional[int] = None, threshold: Optional[float] = None,
                  ndocs: Union[int, str, None] = "auto", nscore: Optional[int] = None,
                  verbose: bool = False) -> pt.Transformer:
        """End-to-end retrieval (qid, query_embs → docno, score, rank).

        A compressed index retrieves by centroid search (:class:`~.residual_search.CentroidRetriever`: the
        documents of each query vector's ``ncells`` best centroids, pruned by centroid interaction to ``ndocs`` and
        then ``nscore`` documents, which are scored exactly over their decompressed vectors; defaults follow
        ``num_results`` as PLAID's do, except that a top 10 scores 128 documents exactly rather than 64
        (:meth:`~.residual_search.SearchParams.for_k`); ``ndocs=None`` scores every candidate). The other arguments
        are for fp16 indexes: token neighbours, exact MaxSim.

        Composes through columns: ``colbert.query_encoder() >> index.retriever()``. Given the encoder,
        ``index.retriever(colbert)`` checks that it built this index and returns exactly that pipeline.

        Each scoring query vector fetches its k̂ nearest document tokens: ``ceil(num_results / lam)`` when
        ``lam`` is given, ``k_hat`` when that is given (fixed under ``% k``), else ``max(ceil(num_results / 2),
        50)`` (so a short top 10 still draws on a deep candidate pool); their documents are scored exactly.
        ``faiss``: ``'exact'`` (``'flat'`` is another name for it), ``'ivf'``, ``'ivfpq'``, ``'ivfpq-fs'`` or a
        :class:`~pyterrier_fandom_colbert.index.ann.FaissSpec`; ``None`` (default): the measured best setting
        (:func:`~pyterrier_fandom_colbert.index.token_search.default_search`: an IVF-PQ kind with its ``nprobe`` and
        ``refine``, or ``'exact'`` for indexes under 100,000 tokens; figures in docs/index.md), resolved when the
        retriever is made (its repr shows it). ``nprobe``: inverted lists visited (IVF kinds; default 32 when a
        kind is named); ``refine``: FAISS fetches ``refine · k̂`` neighbours and the ``k̂`` nearest by the stored
        vectors are kept (approximate kinds).
        Empty or non-text queries get no rows and one warning naming their qids (``strict=True``: an error).
        """
        self.check()
        if self.compressed:
            from .residual_search import CentroidRetriever

            given = {"lam": lam, "k_hat": k_hat, "faiss": faiss, "nprobe": nprobe, "refine": refine}
            wrong = [f"{name}={value!r}" for name, value in given.items() if value is not None]
            if wrong:
                raise ValueError(f"{', '.join(wrong)} apply only to fp16 indexes; the index at {self.path} is "
                                 f"{self.compression}-compressed and retrieves by centroid search (ncells, "
                                 "threshold, ndocs, nscore)")
            retriever = CentroidRetriever(self, num_results=num_results, ncells=ncells, threshold=threshold,
                                          ndocs=ndocs, nscore=nscore, strict=strict, verbose=verbose)
            return self._with_encoder(colbert, retriever, strict)
        from .token_search import ColBERTRetriever

        given = {"ncells": ncells, "threshold": threshold, "nscore": nscore}
        wrong = [f"{name}={value!r}" for name, value in given.items() if value is not None]
        wrong += [] if isinstance(ndocs, str) and ndocs == "auto" else [f"ndocs={ndocs!r}"]
        if wrong:
            raise ValueError(f"{', '.join(wrong)} apply only to compressed indexes (centroid search); the index at "
                             f"{self.path} stores fp16 vectors and retrieves by token neighbours (faiss, nprobe, "
                             "lam, k_hat, refine)")
        retriever = ColBERTRetriever(self, num_results=num_results, lam=lam, k_hat=k_hat, faiss=faiss,
                                     nprobe=nprobe, refine=refine, strict=strict, verbose=verbose)
        return self._with_encoder(colbert, retriever, strict)

    def scorer(self, colbert: Optional["ColBERT"] = None, *, strict: bool = False,
               verbose: bool = False) -> pt.Transformer:
        """Re-ranker (qid, query_embs, docno → score, rank) from the stored vectors: no document text, no
        re-encoding. ``index.scorer(colbert)`` is ``colbert.query_encoder() >> index.scorer()`` after checking the
        encoder. Empty or non-text queries get no rows and one warning (``strict=True``: an error)."""
        from .token_search import IndexScorer

        self.check()
        return self._with_encoder(colbert, IndexScorer(self, strict=strict, verbose=verbose), strict)

    def _with_encoder(self, colbert: Optional["ColBERT"], stage: pt.Transformer, strict: bool) -> pt.Transformer:
        if colbert is None:
            return stage
        self.check_encoder(colbert)
        return colbert.query_encoder(strict=strict) >> stage

    def _forget(self) -> None:
        """Drop everything read from disk (after a rebuild)."""
        forget_cached(self)
        self._ann = {}

    def __repr__(self) -> str:
        return f"ColBERTIndex({str(self.path)!r})"
