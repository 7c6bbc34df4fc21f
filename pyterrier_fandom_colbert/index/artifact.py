"""``ColBERTIndex``: a PyTerrier artifact holding every document's token vectors, and its retrievers.

The folder layout is in :mod:`.layout`; writing (the writer and the indexer) is in :mod:`.writer`. This module
reads an index (each part on first use, as ``functools.cached_property``) and makes its retrievers. An index is
stored either as fp16 vectors or residual-compressed (``format`` ``residual1|2|4``, see :mod:`.compressed`): the
same class reads both, decompressing a compressed index's vectors where they are needed.
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
    CODEC_FILE,
    DOCNOS_FILE,
    IVF_DOCS_FILE,
    IVF_OFFSETS_FILE,
    META_FILE,
    OFFSETS_FILE,
    PACKAGE_HINT,
    RESIDUALS_FILE,
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
    from .centroid_search import CompressedStore
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

    @cached_property
    def vectors(self) -> np.ndarray:
        """All token vectors, ``[num_tokens, dim]`` float16, memory-mapped (fp16 indexes only)."""
        self._require_fp16("index.vectors")
        return self._array(VECTORS_FILE, np.float16, (self.meta.num_tokens, self.meta.dim))

    @cached_property
    def codec_info(self) -> Dict[str, Any]:
        """A compressed index's ``codec.json``: its CompressionSpec, nbits, centroids, dtypes and build timings."""
        from ..storage import read_json

        if not self.compressed:
            raise ValueError(f"the index at {self.path} is not compressed (format fp16): it has no codec")
        return read_json(self.path / CODEC_FILE, "codec description of a compressed ColBERT index")

    @cached_property
    def codec(self) -> "ResidualCodec":
        """A compressed index's residual codec (centroids, bucket cutoffs and weights)."""
        from .compressed import load_codec

        return load_codec(self.path, self.codec_info, self.meta.dim)

    @cached_property
    def store(self) -> "CompressedStore":
        """A compressed index's arrays (memory-mapped codes, residuals and inverted lists) for centroid search."""
        from .centroid_search import CompressedStore
        from .compressed import codes_file

        info, meta = self.codec_info, self.meta
        codec = self.codec
        codes = self._array(codes_file(np.dtype(info["code_dtype"])), info["code_dtype"], (meta.num_tokens,))
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
    def ann(self, spec: "FaissSpec") -> "faiss.Index":
        """The FAISS index over all token vectors for ``spec``: loaded or built on first use, then kept in memory
        (on GPU when FAISS has GPU support and sees one)."""
        from . import ann as faiss_ann

        self._require_fp16("a FAISS index")
        spec = spec.resolve(self.meta.num_tokens, self.meta.dim)
        if spec not in self._ann:
            index = faiss_ann.load_or_build(self.path, self.vectors, spec, self.config.similarity, self.verbose)
            self._ann[spec] = faiss_ann.to_gpu_if_available(index)
        return self._ann[spec]

    # -- factories -----------------------------------------------------------------------------------------
    def indexer(self, colbert: "ColBERT", *, text_field: str = "text", batch_size: int = 1024,
                overwrite: bool = False, compression: Union[str, "CompressionSpec"] = "fp16",
                verbose: bool = False) -> "ColBERTIndexer":
        """A ``pt.Indexer`` encoding ``docno``/``text`` records with ``colbert`` into this index.

        ``batch_size`` documents are read, length-bucketed and encoded at a time: memory is bounded by that,
        not by the corpus. ``compression``: ``'fp16'`` (full-precision vectors), ``'residual1'``, ``'residual2'``
        or ``'residual4'`` (centroid id + 1/2/4 bits per dimension; the corpus is still encoded once), or a
        :class:`~pyterrier_fandom_colbert.index.compressed.CompressionSpec` with codec training parameters.
        """
        from .writer import ColBERTIndexer

        return ColBERTIndexer(self, colbert, text_field=text_field, batch_size=batch_size, overwrite=overwrite,
                              compression=compression, verbose=verbose)

    def writer(self, config: ColBERTConfig, fingerprint: str, *, overwrite: bool = False,
               compression: Union[str, "CompressionSpec"] = "fp16", verbose: bool = False) -> "IndexWriter":
        """Low-level writer for precomputed vectors (``with index.writer(...) as w: w.add(docno, vecs, ids)``)."""
        from .writer import IndexWriter

        return IndexWriter(self.path, config, fingerprint, overwrite=overwrite, compression=compression,
                           verbose=verbose)

    def retriever(self, colbert: Optional["ColBERT"] = None, *, num_results: int = 1000, lam: Optional[float] = None,
                  k_hat: Optional[int] = None, faiss: Union[str, "FaissSpec", None] = None,
                  nprobe: Optional[int] = None, refine: int = 1, ncells: Optional[int] = None,
                  threshold: Optional[float] = None, ndocs: Union[int, str, None] = "auto",
                  nscore: Optional[int] = None, verbose: bool = False) -> pt.Transformer:
        """End-to-end retrieval (qid, query_embs → docno, score, rank).

        A compressed index retrieves by centroid search (:class:`~.centroid_search.CentroidRetriever`: the
        candidates of the query vectors' ``ncells`` best centroids, pruned by centroid interaction to ``ndocs`` and
        then ``nscore`` documents, scored exactly over their decompressed vectors; defaults follow ``num_results``,
        ``ndocs=None`` scores every candidate). The arguments below are for fp16 indexes.

        fp16 indexes: token neighbours, exact MaxSim.

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
        if self.compressed:
            from .centroid_search import CentroidRetriever

            given = {"lam": lam, "k_hat": k_hat, "faiss": faiss, "nprobe": nprobe}
            wrong = [f"{name}={value!r}" for name, value in given.items() if value is not None]
            wrong += [f"refine={refine!r}"] if refine != 1 else []
            if wrong:
                raise ValueError(f"{', '.join(wrong)} apply only to fp16 indexes; the index at {self.path} is "
                                 f"{self.compression}-compressed and retrieves by centroid search (ncells, "
                                 "threshold, ndocs, nscore)")
            retriever = CentroidRetriever(self, num_results=num_results, ncells=ncells, threshold=threshold,
                                          ndocs=ndocs, nscore=nscore, verbose=verbose)
            return self._with_encoder(colbert, retriever)
        from .search import ColBERTRetriever

        given = {"ncells": ncells, "threshold": threshold, "nscore": nscore}
        wrong = [f"{name}={value!r}" for name, value in given.items() if value is not None]
        wrong += [f"ndocs={ndocs!r}"] if not (isinstance(ndocs, str) and ndocs == "auto") else []
        if wrong:
            raise ValueError(f"{', '.join(wrong)} apply only to compressed indexes (centroid search); the index at "
                             f"{self.path} stores fp16 vectors and retrieves by token neighbours (faiss, nprobe, "
                             "lam, k_hat, refine)")
        retriever = ColBERTRetriever(self, num_results=num_results, lam=lam, k_hat=k_hat,
                                     faiss=faiss if faiss is not None else "flat", nprobe=nprobe, refine=refine,
                                     verbose=verbose)
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
