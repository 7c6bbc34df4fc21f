"""``ColBERTIndex``: a PyTerrier artifact holding every document's token vectors, and its retrievers.

The folder layout is in :mod:`.layout`; writing (the writer and the indexer) is in :mod:`.writer`. This module
reads an index (each part on first use, as ``functools.cached_property``) and makes its retrievers.
"""
from __future__ import annotations

import warnings
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np
import pyterrier as pt

from ..lazy import forget_cached
from ..model.config import ColBERTConfig
from .layout import (
    ARTIFACT_FORMAT,
    ARTIFACT_TYPE,
    DOCNOS_FILE,
    META_FILE,
    OFFSETS_FILE,
    PACKAGE_HINT,
    TOKEN_IDS_FILE,
    VECTORS_FILE,
    IndexMeta,
)

if TYPE_CHECKING:  # pragma: no cover
    import faiss
    import npids
    import torch

    from ..model.colbert import ColBERT
    from .ann import FaissSpec
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
            raise FileNotFoundError(f"no ColBERT index at {self.path}; build one with "
                                    f"ColBERTIndex({str(self.path)!r}).indexer(colbert).index(corpus_iter)")

    @cached_property
    def meta(self) -> IndexMeta:
        self._require_built()
        return IndexMeta.load(self.path)

    @cached_property
    def config(self) -> ColBERTConfig:
        self._require_built()
        return ColBERTConfig.load(self.path)

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the encoder that built the index (``ColBERT.fingerprint()``)."""
        return self.meta.fingerprint

    def __len__(self) -> int:
        return self.meta.num_docs

    def _array(self, name: str, dtype: Any, shape: Tuple[int, ...]) -> np.ndarray:
        file = self.path / name
        expected = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if not file.exists() or file.stat().st_size != expected:
            raise ValueError(f"{file} is missing or not {expected} bytes: the index at {self.path} is corrupt")
        return np.memmap(file, dtype=dtype, mode="r", shape=shape)

    @cached_property
    def vectors(self) -> np.ndarray:
        """All token vectors, ``[num_tokens, dim]`` float16, memory-mapped."""
        return self._array(VECTORS_FILE, np.float16, (self.meta.num_tokens, self.meta.dim))

    @cached_property
    def vector_tensor(self) -> "torch.Tensor":
        """:attr:`vectors` as a CPU torch tensor sharing the memory map (read-only: never write to it)."""
        import torch

        with warnings.catch_warnings():  # torch warns that the (read-only) memory map is not writable
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(self.vectors)

    @cached_property
    def token_ids(self) -> np.ndarray:
        return self._array(TOKEN_IDS_FILE, np.int32, (self.meta.num_tokens,))

    @cached_property
    def offsets(self) -> np.ndarray:
        """``[num_docs + 1]``: document ``i``'s vectors are rows ``offsets[i]:offsets[i + 1]``."""
        return self._array(OFFSETS_FILE, np.int64, (self.meta.num_docs + 1,))

    @cached_property
    def docnos(self) -> "npids.Lookup":
        import npids

        self._require_built()
        return npids.Lookup(self.path / DOCNOS_FILE)

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
        return np.asarray(self.vectors[start:end], dtype=np.float32), np.array(self.token_ids[start:end])

    def check_encoder(self, colbert: "ColBERT") -> None:
        """Refuse a query encoder other than the one whose document vectors the index holds."""
        if colbert.fingerprint() != self.fingerprint:
            raise ValueError(f"the query encoder (fingerprint {colbert.fingerprint()}) is not the encoder that "
                             f"built the index at {self.path} (fingerprint {self.fingerprint}); load the same "
                             "checkpoint, or rebuild the index with this encoder")

    # -- FAISS ---------------------------------------------------------------------------------------------
    def ann(self, spec: "FaissSpec") -> "faiss.Index":
        """The FAISS index over all token vectors for ``spec``: loaded or built on first use, then kept in memory
        (on GPU when FAISS has GPU support and sees one)."""
        from . import ann as faiss_ann

        spec = spec.resolve(self.meta.num_tokens, self.meta.dim)
        if spec not in self._ann:
            index = faiss_ann.load_or_build(self.path, self.vectors, spec, self.config.similarity, self.verbose)
            self._ann[spec] = faiss_ann.to_gpu_if_available(index)
        return self._ann[spec]

    # -- factories -----------------------------------------------------------------------------------------
    def indexer(self, colbert: "ColBERT", *, text_field: str = "text", batch_size: int = 1024,
                overwrite: bool = False, verbose: bool = False) -> "ColBERTIndexer":
        """A ``pt.Indexer`` encoding ``docno``/``text`` records with ``colbert`` into this index.

        ``batch_size`` documents are read, length-bucketed and encoded at a time: memory is bounded by that,
        not by the corpus.
        """
        from .writer import ColBERTIndexer

        return ColBERTIndexer(self, colbert, text_field=text_field, batch_size=batch_size, overwrite=overwrite,
                              verbose=verbose)

    def writer(self, config: ColBERTConfig, fingerprint: str, *, overwrite: bool = False) -> "IndexWriter":
        """Low-level writer for precomputed vectors (``with index.writer(...) as w: w.add(docno, vecs, ids)``)."""
        from .writer import IndexWriter

        return IndexWriter(self.path, config, fingerprint, overwrite=overwrite)

    def retriever(self, colbert: Optional["ColBERT"] = None, *, num_results: int = 1000, lam: Optional[float] = None,
                  k_hat: Optional[int] = None, faiss: Union[str, "FaissSpec"] = "flat", nprobe: Optional[int] = None,
                  refine: int = 1, verbose: bool = False) -> pt.Transformer:
        """End-to-end retrieval (qid, query_embs → docno, score, rank): token neighbours, exact MaxSim.

        Composes through columns: ``colbert.query_encoder() >> index.retriever()``. Given the encoder,
        ``index.retriever(colbert)`` checks that it built this index and returns exactly that pipeline.

        Each scoring query vector fetches its k̂ nearest document tokens, ``ceil(num_results / lam)`` (λ default
        2), or ``k_hat`` when given (e.g. a deep candidate pool for a short top 10); their documents are scored
        exactly. ``faiss``: ``'flat'`` (exact), ``'ivf'``, ``'ivfpq'``, ``'ivfpq-fs'`` or a
        :class:`~pyterrier_fandom_colbert.index.ann.FaissSpec`; ``nprobe``: inverted lists visited (IVF kinds;
        default 32); ``refine``: FAISS fetches ``refine · k̂`` neighbours and the ``k̂`` nearest by the stored
        vectors are kept (approximate kinds; with 4-bit ``'ivfpq-fs'`` codes this recovers the exact neighbours
        at little cost).
        """
        from .search import ColBERTRetriever

        retriever = ColBERTRetriever(self, num_results=num_results, lam=lam, k_hat=k_hat, faiss=faiss,
                                     nprobe=nprobe, refine=refine, verbose=verbose)
        return self._with_encoder(colbert, retriever)

    def scorer(self, colbert: Optional["ColBERT"] = None, *, verbose: bool = False) -> pt.Transformer:
        """Re-ranker (qid, query_embs, docno → score, rank) from the stored vectors: no document text, no
        re-encoding. ``index.scorer(colbert)`` is ``colbert.query_encoder() >> index.scorer()`` after checking the
        encoder."""
        from .search import IndexScorer

        return self._with_encoder(colbert, IndexScorer(self, verbose=verbose))

    def _with_encoder(self, colbert: Optional["ColBERT"], stage: pt.Transformer) -> pt.Transformer:
        if colbert is None:
            return stage
        self.check_encoder(colbert)
        return colbert.query_encoder() >> stage

    def _forget(self) -> None:
        """Drop everything read from disk (after a rebuild)."""
        forget_cached(self)
        self._ann = {}

    def __repr__(self) -> str:
        return f"ColBERTIndex({str(self.path)!r})"
