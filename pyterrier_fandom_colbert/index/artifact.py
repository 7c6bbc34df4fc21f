"""``ColBERTIndex``: a PyTerrier artifact holding every document's token vectors, and its retrievers.

The folder layout is in :mod:`.layout`; writing (the writer and the indexer) is in :mod:`.writer`. This module
reads what every index holds (metadata, offsets, docnos, the encoder's config; each on first use, as
``functools.cached_property``) and hands what depends on the storage format to its store, chosen once from the
metadata (:mod:`.formats`): :class:`~.fp16.store.Fp16Store` (fp16 vectors, retrieved by token neighbours,
:mod:`.fp16.search`) or :class:`~.residual.store.ResidualStore` (``format`` ``residual1|2|4``: residual codes,
retrieved by centroid search, :mod:`.residual.search`). ``index.retriever(**options)`` is the store's retriever,
which takes only its own format's options.

Before the first part is read, the cheap checks run once (:meth:`ColBERTIndex.check`, :mod:`.integrity`): every
file's size against the manifest and the sizes the metadata implies, the checksums of the small files, the
offsets' structure. Each block of the large files is verified the first time the process reads it
(:attr:`ColBERTIndex.integrity`). :meth:`ColBERTIndex.verify` adds every file's checksum and the store's content
checks.
"""
from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence, Tuple, Type, TypeVar, Union, cast

import numpy as np
import pyterrier as pt

from ..lazy import forget_cached
from ..model.config import ColBERTConfig
from ..storage import artifact_path, open_npids
from . import integrity
from .layout import (
    ARTIFACT_FORMAT,
    ARTIFACT_TYPE,
    DOCNOS_FILE,
    META_FILE,
    OFFSETS_FILE,
    PACKAGE_HINT,
    PARTS_FILE,
    IndexMeta,
)

if TYPE_CHECKING:  # pragma: no cover
    import npids
    import torch

    from ..model.colbert import ColBERT
    from ..storage import ArtifactIntegrity, BlockCheck
    from .ann import AnnIndex, FaissSpec
    from .formats import IndexStore
    from .residual.codec import ResidualCodec
    from .residual.compress import CompressionSpec
    from .text_search import TextSearcher
    from .writer import ColBERTIndexer, IndexWriter

S = TypeVar("S", bound="IndexStore")


class ColBERTIndex(pt.Artifact):
    """Token vectors of a corpus encoded by one ColBERT encoder, with retrievers and re-rankers over them.

    ``ColBERTIndex(path).indexer(colbert).index(corpus_iter)`` builds it; ``pt.Artifact.load(path)`` opens it.
    """

    ARTIFACT_TYPE = ARTIFACT_TYPE
    ARTIFACT_FORMAT = ARTIFACT_FORMAT
    ARTIFACT_PACKAGE_HINT = PACKAGE_HINT

    def __init__(self, path: Union[str, Path], *, verbose: bool = False, unchecked: bool = False):
        """``unchecked=True`` opens an index whose ``pt_meta.json`` records no manifest (written before checksums
        existed), with a warning; such an index is otherwise refused."""
        super().__init__(path)
        self.verbose, self.unchecked = verbose, unchecked

    # -- contents ------------------------------------------------------------------------------------------
    def built(self) -> bool:
        return (artifact_path(self) / META_FILE).exists()

    def _require_built(self) -> None:
        if not self.built():
            raise FileNotFoundError(f"no ColBERT index at {self.path} ({META_FILE} not found); build one with "
                                    f"ColBERTIndex({str(self.path)!r}).indexer(colbert).index(corpus_iter)")

    @cached_property
    def meta(self) -> IndexMeta:
        self._require_built()
        return IndexMeta.load(artifact_path(self))

    @cached_property
    def config(self) -> ColBERTConfig:
        self.check()
        return ColBERTConfig.load(artifact_path(self))

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

    @cached_property
    def store(self) -> "IndexStore":
        """The storage format's half of the index (:mod:`.formats`), chosen from the metadata: its layout and
        checks, rows, exact scores and retriever. Reads nothing until asked."""
        from .formats import store_class

        return store_class(self.meta.format)(self)

    def _store(self, kind: Type[S], what: str) -> S:
        """The store if it is a ``kind``, else a ValueError saying that ``what`` needs that format."""
        store = self.store
        if not isinstance(store, kind):
            raise ValueError(kind.missing(self, what))
        return store

    # -- checks --------------------------------------------------------------------------------------------
    @cached_property
    def integrity(self) -> "ArtifactIntegrity":
        """The index's integrity base: the manifest, and which blocks of each file this process has verified."""
        self._require_built()
        return integrity.integrity_of(artifact_path(self), self.meta, self.unchecked)

    @cached_property
    def _checked(self) -> bool:
        """The cheap checks, once: sizes of all files, checksums of the small ones (the store's
        ``CHECKED_ON_OPEN``)."""
        integrity.check_on_open(self.integrity, self.meta, self.store)
        return True

    def blocks(self, name: str, row_bytes: int) -> Optional["BlockCheck"]:
        """The block check of token array ``name`` (``row_bytes`` per token row), whose errors name the documents
        of a damaged block; None for an unchecked index."""
        return self.integrity.blocks(name, integrity.rows_held(lambda: self.offsets, self.docnos_of, row_bytes))

    def check(self) -> None:
        """The checks that run when an index is opened (its retrievers are made or a part is first read):
        every file present with its recorded size, the checksums of ``colbert_config.json``, ``offsets.i64`` and
        ``docnos.npids`` (and of a compressed index's codec, centroids and list offsets), the offsets' structure
        (first 0, last = num_tokens, strictly increasing). Reads a few bytes per document, never the vectors.
        Raises :class:`~pyterrier_fandom_colbert.storage.DamagedFileError` naming the file."""
        self.offsets  # noqa: B018 (runs _checked, then the structure check)

    def verify(self) -> Dict[str, Any]:
        """Full content check: every file's checksum against the manifest, the offsets' structure, the docno
        lookup, every vector finite (fp16) or every centroid id and inverted list in range (compressed), and each
        cached FAISS index (its file's checksum, and that it was built from these vectors). Reads the whole index
        (0.6-0.7 s for 260 MB on the busy 2-core VM). Raises
        :class:`~pyterrier_fandom_colbert.storage.DamagedFileError` naming each damaged file (and the documents
        whose vectors are not finite); returns what was checked: ``{"files", "bytes", "seconds"}``.

        An index written before checksums were recorded has no manifest: it is refused
        (:class:`~pyterrier_fandom_colbert.storage.NoManifestError`) unless opened with ``unchecked=True``; then its
        structure and vectors are still checked, with a warning that its file contents cannot be."""
        from .formats import store_class

        self._require_built()
        meta = IndexMeta.load(artifact_path(self))  # afresh: the folder may have changed since it was opened
        return integrity.verify(artifact_path(self), meta, store_class(meta.format)(self), self.unchecked)

    def read_array(self, name: str, dtype: Any, shape: Tuple[int, ...]) -> np.ndarray:
        """File ``name`` of the folder memory-mapped read-only as ``dtype``/``shape``, after the cheap checks."""
        self._checked  # noqa: B018
        return self.integrity.pinned(name).memmap(dtype, shape)  # the file as opened, whatever is renamed over it

    # -- what every format holds ---------------------------------------------------------------------------
    @cached_property
    def offsets(self) -> np.ndarray:
        """``[num_docs + 1]``: document ``i``'s vectors are rows ``offsets[i]:offsets[i + 1]``."""
        offsets = self.read_array(OFFSETS_FILE, np.int64, (self.meta.num_docs + 1,))
        return integrity.checked_offsets(offsets, self.meta.num_tokens, artifact_path(self))

    @cached_property
    def part_offsets(self) -> np.ndarray:
        """``[num_parts + 1]``: part (window) ``j``'s vectors are rows ``part_offsets[j]:part_offsets[j + 1]``. An
        index built with ``long_docs="windows"`` stores each long document as several parts, back to back
        inside its own rows; otherwise every document is one part (this is :attr:`offsets`)."""
        if self.meta.long_docs != "windows":
            return self.offsets
        if self.meta.num_parts is None:
            raise ValueError(f"{artifact_path(self) / META_FILE} has long_docs='windows' but no num_parts")
        return self.read_array(PARTS_FILE, np.int64, (self.meta.num_parts + 1,))

    @cached_property
    def docnos(self) -> "npids.Lookup":
        self._checked  # noqa: B018
        return open_npids(artifact_path(self) / DOCNOS_FILE, self.meta.num_docs, integrity.WHAT)

    def doc_ids(self, docnos: Sequence[str]) -> np.ndarray:
        """Document ids (int64) of ``docnos``; a ValueError lists docnos the index does not hold."""
        wanted = np.asarray(list(docnos), dtype=str)
        ids = np.asarray(self.docnos.inv[wanted], dtype=np.int64) if len(wanted) else np.zeros(0, np.int64)
        missing = wanted[ids < 0]
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

    @property
    def token_ids(self) -> np.ndarray:
        """The wordpiece id of every stored vector (int32, or uint16 in a compressed index when all ids fit)."""
        return self.store.token_ids

    def doc_vectors(self, doc: Union[str, int]) -> Tuple[np.ndarray, np.ndarray]:
        """(vectors ``[n, d]`` float32, token ids ``[n]`` int32) of one document, by docno or document id (a
        compressed index's vectors decompressed)."""
        doc_id = int(self.doc_ids([doc])[0]) if isinstance(doc, str) else int(doc)
        if not 0 <= doc_id < len(self):
            raise IndexError(f"document id {doc_id} is out of range: the index holds {len(self)} documents")
        start, end = self.offsets[doc_id], self.offsets[doc_id + 1]
        return self.store.rows(start, end), np.array(self.token_ids[start:end], dtype=np.int32)

    def check_encoder(self, colbert: "ColBERT") -> None:
        """Refuse a query encoder other than the one whose document vectors the index holds."""
        if colbert.fingerprint() != self.fingerprint:
            raise ValueError(f"the query encoder (fingerprint {colbert.fingerprint()}) is not the encoder that "
                             f"built the index at {self.path} (fingerprint {self.fingerprint}); load the same "
                             "checkpoint, or rebuild the index with this encoder")

    # -- one format's parts --------------------------------------------------------------------------------
    @property
    def vectors(self) -> np.ndarray:
        """All token vectors, ``[num_tokens, dim]`` float16, memory-mapped (fp16 indexes only)."""
        from .formats import Fp16Store

        return self._store(Fp16Store, "index.vectors").vectors

    @property
    def vector_tensor(self) -> "torch.Tensor":
        """:attr:`vectors` as a CPU torch tensor sharing the memory map (read-only: never write to it)."""
        from .formats import Fp16Store

        return self._store(Fp16Store, "index.vectors").vector_tensor

    @property
    def codec_info(self) -> Dict[str, Any]:
        """A compressed index's ``codec.json``: its CompressionSpec, nbits, centroids, dtypes and build timings."""
        from .formats import ResidualStore

        return self._store(ResidualStore, "a codec").codec_info

    @property
    def codec(self) -> "ResidualCodec":
        """A compressed index's residual codec (centroids, bucket cutoffs and weights)."""
        from .formats import ResidualStore

        return self._store(ResidualStore, "a codec").codec

    def ann(self, spec: "FaissSpec", *, verbose: Optional[bool] = None) -> "AnnIndex":
        """The neighbour index over all token vectors for ``spec``: read from ``faiss/`` in the index folder, or
        built and written there on first use (see :meth:`build_ann`), then kept in memory (on GPU when its kind
        runs there and FAISS has GPU support and sees one). A folder that cannot be written and holds no such
        index is a ``PermissionError`` that says how to build it. fp16 indexes only."""
        from .formats import Fp16Store

        return self._store(Fp16Store, "a neighbour (FAISS) index").ann(spec, verbose=verbose)

    def build_ann(self, faiss: Union[str, "FaissSpec", None] = None, *,
                  verbose: bool = False) -> Optional[Path]:
        """Build the neighbour index for ``faiss`` (a kind name or a ``FaissSpec``; ``None``: the retriever's
        default for this index) and write it to ``faiss/`` in the index folder now, so that no query has to;
        an existing one is kept. Returns its file, or ``None`` for exact search or a compressed index (nothing
        to build).

        Also ``index.indexer(colbert, ann=...)`` (after indexing) and
        ``pfc build-ann FOLDER --faiss KIND`` (also ``python -m pyterrier_fandom_colbert.index build-ann``).
        """
        return self.store.build_ann(faiss, verbose=verbose)

    # -- factories -----------------------------------------------------------------------------------------
    def indexer(self, colbert: "ColBERT", *, text_field: str = "text", batch_size: int = 1024,
                overwrite: bool = False, verbose: bool = False, long_docs: str = "windows",
                stride: Optional[int] = None, ann: Union[str, "FaissSpec", None] = "default",
                compression: Union[str, "CompressionSpec"] = "fp16",
                codec: Optional["ResidualCodec"] = None) -> "ColBERTIndexer":
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
        :class:`~pyterrier_fandom_colbert.index.residual.compress.CompressionSpec` with the codec's training parameters.
        A compressed index retrieves by centroid search and needs no ``ann``.

        ``codec``: a residual codec trained beforehand (e.g. ``sharded.codec`` of a
        :class:`~.sharded.ShardedColBERTIndex`, whose shards share one), used instead of training one on this
        corpus; residual formats only.
        """
        from .writer import ColBERTIndexer

        return ColBERTIndexer(self, colbert, text_field=text_field, batch_size=batch_size, overwrite=overwrite,
                              verbose=verbose, long_docs=long_docs, stride=stride, ann=ann, compression=compression,
                              codec=codec)

    def writer(self, config: ColBERTConfig, fingerprint: str, *, overwrite: bool = False,
               compression: Union[str, "CompressionSpec"] = "fp16", verbose: bool = False,
               codec: Optional["ResidualCodec"] = None) -> "IndexWriter":
        """Low-level writer for precomputed vectors (``with index.writer(...) as w: w.add(docno, vecs, ids)``);
        ``codec``: as for :meth:`indexer`."""
        from .writer import IndexWriter

        return IndexWriter(artifact_path(self), config, fingerprint, overwrite=overwrite, compression=compression,
                           verbose=verbose, codec=codec)

    def retriever(self, colbert: Optional["ColBERT"] = None, **options: Any) -> pt.Transformer:
        """End-to-end retrieval (qid, query_embs → docno, score, rank): the store's retriever, with ``options``
        of the index's format only (another format's option is a TypeError naming it, and what this index takes).

        * fp16 (:meth:`Fp16Store.retriever <.fp16.store.Fp16Store.retriever>`): ``num_results``, ``lam``,
          ``k_hat``, ``faiss``, ``nprobe``, ``refine``, ``strict``, ``verbose``. Each scoring query vector fetches
          its k̂ nearest document tokens: ``ceil(num_results / lam)`` when ``lam`` is given, ``k_hat`` when that is
          given (fixed under ``% k``), else ``max(ceil(num_results / 2), 50)`` (so a short top 10 still draws on a
          deep candidate pool); their documents are scored exactly. ``faiss``: ``'exact'`` (``'flat'`` is another
          name for it), ``'ivf'``, ``'ivfpq'``, ``'ivfpq-fs'`` or a
          :class:`~pyterrier_fandom_colbert.index.ann.FaissSpec`; ``None`` (default): the measured best setting
          (:func:`~pyterrier_fandom_colbert.index.fp16.search.default_search`: an IVF-PQ kind with its ``nprobe``
          and ``refine``, or ``'exact'`` for indexes under 100,000 tokens; figures in docs/index.md), resolved
          when the retriever is made (its repr shows it). ``nprobe``: inverted lists visited (IVF kinds; default
          32 when a kind is named); ``refine``: FAISS fetches ``refine · k̂`` neighbours and the ``k̂`` nearest by
          the stored vectors are kept (approximate kinds).
        * compressed (:meth:`ResidualStore.retriever <.residual.store.ResidualStore.retriever>`):
          ``num_results``, ``ncells``, ``threshold``, ``ndocs``, ``nscore``, ``strict``, ``verbose``. Centroid
          search (:class:`~.residual.search.CentroidRetriever`): the documents of each query vector's ``ncells``
          best centroids, pruned by centroid interaction to ``ndocs`` and then ``nscore`` documents, which are
          scored exactly over their decompressed vectors; defaults follow ``num_results`` as PLAID's do, except
          that a top 10 scores 128 documents exactly rather than 64
          (:meth:`~.residual.search.SearchParams.for_k`); ``ndocs=None`` scores every candidate.

        Composes through columns: ``colbert.query_encoder() >> index.retriever()``. Given the encoder,
        ``index.retriever(colbert)`` checks that it built this index and returns that pipeline as one stage
        (:class:`~.text_search.TextRetriever`: the same output, no frame between encoding and search).
        Empty or non-text queries get no rows and one warning naming their qids (``strict=True``: an error).
        """
        from .formats import check_retriever_options

        self.check()
        store = self.store
        check_retriever_options(store, options)
        # given the encoder, the pipeline compiles to one stage (the retrievers' fuse_left: a TextRetriever)
        return self._with_encoder(colbert, store.retriever(**options), bool(options.get("strict", False))).compile()

    def searcher(self, colbert: "ColBERT", **options: Any) -> "TextSearcher":
        """One query's text → ``(docnos, scores)``, best first, with no DataFrame around it
        (:class:`~.text_search.TextSearcher`): the same answer as ``index.retriever(colbert, **options)`` (the
        same options), for callers that ask one question at a time and want arrays back."""
        from .text_search import TextSearcher, VectorSearch

        retriever = self.retriever(**options)  # (checks the index and the options, as for the pipeline)
        self.check_encoder(colbert)
        return TextSearcher(self, colbert, cast(VectorSearch, retriever))

    def scorer(self, colbert: Optional["ColBERT"] = None, *, strict: bool = False,
               verbose: bool = False) -> pt.Transformer:
        """Re-ranker (qid, query_embs, docno → score, rank) from the stored vectors: no document text, no
        re-encoding. ``index.scorer(colbert)`` is ``colbert.query_encoder() >> index.scorer()`` after checking the
        encoder. Empty or non-text queries get no rows and one warning (``strict=True``: an error)."""
        from .scorer import IndexScorer

        self.check()
        return self._with_encoder(colbert, IndexScorer(self, strict=strict, verbose=verbose), strict)

    def prf(self, *, fb_docs: int = 3, fb_embs: int = 10, beta: float = 1.0, k: int = 24, nn_tokens: int = 10,
            seed: int = 42, retriever: Optional[pt.Transformer] = None, strict: bool = False,
            verbose: bool = False, colbert: Optional["ColBERT"] = None) -> pt.Transformer:
        """ColBERT-PRF (:class:`~.prf.ColBERTPRF`; defaults: the paper's settings): expansion embeddings from the
        k-means centroids of each query's ``fb_docs`` best documents, the ``fb_embs`` whose tokens have the highest
        IDF, weighted ``beta · IDF``. Without ``retriever`` it re-scores the input's documents
        (``colbert.query_encoder() >> index.retriever() >> index.prf()``); with ``retriever`` (e.g.
        ``index.retriever(num_results=1000)``) it searches again with the expanded query and scores what that
        finds. Works on fp16 and compressed indexes. With ``colbert`` (the index's encoder) the expansion terms
        are also given as text, a ``prf_terms`` column (``prf_toks`` decoded)."""
        from .prf import ColBERTPRF

        self.check()
        return ColBERTPRF(self, fb_docs=fb_docs, fb_embs=fb_embs, beta=beta, k=k, nn_tokens=nn_tokens, seed=seed,
                          retriever=retriever, strict=strict, verbose=verbose, colbert=colbert)

    def _with_encoder(self, colbert: Optional["ColBERT"], stage: pt.Transformer, strict: bool) -> pt.Transformer:
        if colbert is None:
            return stage
        self.check_encoder(colbert)
        return colbert.query_encoder(strict=strict) >> stage

    def _forget(self) -> None:
        """Drop everything read from disk (after a rebuild), the store and its neighbour indexes with it."""
        forget_cached(self)

    def __repr__(self) -> str:
        return f"ColBERTIndex({str(self.path)!r})"
