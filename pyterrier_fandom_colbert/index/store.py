"""The interface every storage format of a :class:`~pyterrier_fandom_colbert.index.artifact.ColBERTIndex` implements.

A store is a view on one index folder, made once by the index from ``pt_meta.json``'s ``format`` and reading
nothing until asked. It answers for what differs between formats, and only that:

* **layout** (:meth:`IndexStore.layout`): the dtype and shape of each of its array files, and the small files
  whose checksums are compared on every open (:attr:`IndexStore.CHECKED_ON_OPEN`);
* **problems** (:meth:`IndexStore.problems`): the content checks of ``index.verify()`` that only it can make;
* **rows** (:meth:`IndexStore.rows`, :attr:`IndexStore.token_ids`): the vectors and token ids of token rows;
* **exact scores** (:meth:`IndexStore.exact_scores`): MaxSim of a query's vectors against documents;
* **retrieval** (:meth:`IndexStore.retriever`, :meth:`IndexStore.build_ann`): its end-to-end retriever, whose
  factory takes only this format's own parameters, and what that retriever needs built ahead of time;
* **writing** (:meth:`IndexStore.writer`, :meth:`IndexStore.ann_after_indexing`): what the index writer does
  at the end of a build for this format.

What every format shares (metadata, offsets, docnos, the encoder's config, the checks of sizes and checksums in
:mod:`.integrity`) stays with the index.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Dict, List, Optional, Tuple, Union, cast

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pyterrier as pt
    import torch

    from .ann import FaissSpec
    from .artifact import ColBERTIndex
    from .layout import IndexMeta
    from .residual.compress import CompressionSpec

#: (file name, what is wrong with it), as ``storage.raise_damaged`` takes them
Problem = Tuple[str, str]
#: file name -> (dtype, shape)
Layout = Dict[str, Tuple[Any, Tuple[int, ...]]]


class StoreWriter(ABC):
    """The format's part of writing an index: the writer streams fp16 vectors, token ids and offsets into the
    temporary folder, then :meth:`finish` turns them into this format's files."""

    @abstractmethod
    def finish(self, folder: Path, num_tokens: int, dim: int, verbose: bool) -> List[str]:
        """Turn the streamed ``vectors.f16`` and ``token_ids.i32`` in ``folder`` into this format's files; returns
        the names of the files it keeps (listed in the manifest besides offsets, docnos and the config)."""

    def exact_rows(self) -> Optional[int]:
        """After :meth:`finish`: the token rows also stored exactly (``IndexMeta.exact_rows``; None: none)."""
        return None


class IndexStore(ABC):
    """One storage format of a ColBERT index (see the module docstring). ``index`` is the index it belongs to:
    the store reads the shared parts (metadata, offsets, config, checked memory maps) through it."""

    #: the ``format`` names of ``pt_meta.json`` this store reads
    FORMATS: ClassVar[Tuple[str, ...]]
    #: files whose checksums are compared on every open (small: a few bytes per document or per centroid)
    CHECKED_ON_OPEN: ClassVar[Tuple[str, ...]]
    #: which indexes take this store's retriever parameters, as an error names them ("fp16 indexes")
    KIND: ClassVar[str]

    def __init__(self, index: "ColBERTIndex"):
        self.index = index
        self.path = cast(Path, index.path)  # an index always has a folder (pt.Artifact types it Path | _NoPath)

    # -- layout and integrity ------------------------------------------------------------------------------
    @abstractmethod
    def layout(self, meta: "IndexMeta") -> Layout:
        """(dtype, shape) of each array file (``offsets.i64`` included), as ``meta`` (and the format's own
        description) imply; read afresh, never cached (``index.verify()`` reads a possibly changed folder)."""

    @abstractmethod
    def problems(self, meta: "IndexMeta", found: List[Problem], offsets: Optional[np.ndarray],
                 docnos: Any) -> List[Problem]:
        """This format's content checks for ``index.verify()`` (``found``: the problems already found, whose files
        are not read again; ``offsets``/``docnos``: the document map and lookup when they read, else None)."""

    # -- rows ----------------------------------------------------------------------------------------------
    @property
    @abstractmethod
    def token_ids(self) -> np.ndarray:
        """The wordpiece id of every stored vector, memory-mapped."""

    @abstractmethod
    def rows(self, start: int, end: int) -> np.ndarray:
        """Vectors ``[end - start, dim]`` float32 of token rows ``start:end`` (decompressed where stored coded)."""

    # -- scores and retrieval ------------------------------------------------------------------------------
    @abstractmethod
    def exact_scores(self, q: "torch.Tensor", doc_ids: np.ndarray,
                     block_tokens: Optional[int] = None) -> np.ndarray:
        """Exact scores (float64) of ``doc_ids`` for one query's scoring vectors ``q [n, d]``, with the encoder's
        similarity and reduction over this format's vectors."""

    @abstractmethod
    def retriever(self, *args: Any, **options: Any) -> "pt.Transformer":
        """This format's end-to-end retriever (qid, query_embs -> docno, score, rank). Each store defines it with
        the keyword parameters its format takes, and only those (``(*args, **options)`` here lets them differ)."""

    @abstractmethod
    def build_ann(self, faiss: Union[str, "FaissSpec", None] = None, *, verbose: bool = False) -> Optional[Path]:
        """Build what the retriever for ``faiss`` needs ahead of time (``None``: the default retriever's); the
        file written, or None when there is nothing to build."""

    @abstractmethod
    def describe(self) -> str:
        """How this index stores and retrieves, for errors ("stores fp16 vectors and retrieves by ...")."""

    @classmethod
    @abstractmethod
    def missing(cls, index: "ColBERTIndex", what: str) -> str:
        """The error message when ``what`` (which needs this format) is asked of ``index``, of another format."""

    # -- writing -------------------------------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def writer(cls, spec: "CompressionSpec", dim: int) -> StoreWriter:
        """The writer's part for this format (refusing a spec the dimension cannot take, before any work)."""

    @classmethod
    @abstractmethod
    def ann_after_indexing(cls, ann: Union[str, "FaissSpec", None], fmt: str) -> Union[str, "FaissSpec", None]:
        """What the indexer builds once the documents are written (``ann`` as given to ``index.indexer``: None,
        ``"default"``, a kind or a ``FaissSpec``); None for nothing; a ValueError for what this format cannot use."""
