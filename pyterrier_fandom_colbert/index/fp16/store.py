"""The ``fp16`` format: every token vector stored as float16 (``vectors.f16``, memory-mapped), retrieved by token
neighbours (exact or FAISS, :mod:`..ann`) and exact MaxSim (:mod:`.search`)."""
from __future__ import annotations

import warnings
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

import numpy as np

from ..integrity import size_problem
from ..layout import ARTIFACT_FORMAT, CHECKED_ON_OPEN, OFFSETS_FILE, TOKEN_IDS_FILE, VECTORS_FILE, non_finite_rows
from ..store import IndexStore, Layout, Problem, StoreWriter

if TYPE_CHECKING:  # pragma: no cover
    import pyterrier as pt
    import torch

    from ...storage import BlockCheck
    from ..ann import AnnIndex, FaissSpec
    from ..artifact import ColBERTIndex
    from ..layout import IndexMeta
    from ..residual.compress import CompressionSpec

#: vector rows scanned at a time for non-finite values in verify()
SCAN_ROWS = 1 << 16


class Fp16Writer(StoreWriter):
    """The streamed fp16 vectors and int32 token ids are the index's files as they are."""

    def finish(self, folder: Path, num_tokens: int, dim: int, verbose: bool) -> List[str]:
        return [VECTORS_FILE, TOKEN_IDS_FILE]


class Fp16Store(IndexStore):
    """Full-precision token vectors (see the module docstring)."""

    FORMATS = (ARTIFACT_FORMAT,)
    CHECKED_ON_OPEN = CHECKED_ON_OPEN
    KIND = "fp16 indexes"

    def __init__(self, index: "ColBERTIndex"):
        super().__init__(index)
        self._ann: Dict["FaissSpec", "AnnIndex"] = {}  # neighbour indexes by spec, loaded or built on first use

    # -- layout and integrity ------------------------------------------------------------------------------
    def layout(self, meta: "IndexMeta") -> Layout:
        return {VECTORS_FILE: (np.float16, (meta.num_tokens, meta.dim)),
                TOKEN_IDS_FILE: (np.int32, (meta.num_tokens,)),
                OFFSETS_FILE: (np.int64, (meta.num_docs + 1,))}

    def problems(self, meta: "IndexMeta", found: List[Problem], offsets: Optional[np.ndarray],
                 docnos: Any) -> List[Problem]:
        """A problem naming the first documents with NaN/inf vectors (by docno when offsets and docnos read)."""
        if size_problem(self.path, meta, self.layout(meta), VECTORS_FILE) is not None:
            return []  # already reported
        vectors = np.memmap(self.path / VECTORS_FILE, dtype=np.float16, mode="r", shape=(meta.num_tokens, meta.dim))
        bad_rows: List[np.ndarray] = []
        count = 0
        for start in range(0, meta.num_tokens, SCAN_ROWS):
            rows = non_finite_rows(vectors[start:start + SCAN_ROWS]) + start
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

    # -- rows ----------------------------------------------------------------------------------------------
    @cached_property
    def vectors(self) -> np.ndarray:
        """All token vectors, ``[num_tokens, dim]`` float16, memory-mapped."""
        meta = self.index.meta
        return self.index.read_array(VECTORS_FILE, np.float16, (meta.num_tokens, meta.dim))

    @cached_property
    def vector_tensor(self) -> "torch.Tensor":
        """:attr:`vectors` as a CPU torch tensor sharing the memory map (read-only: never write to it)."""
        import torch

        with warnings.catch_warnings():  # torch warns that the (read-only) memory map is not writable
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(self.vectors)

    @cached_property
    def token_ids(self) -> np.ndarray:
        """Read whole by its users (PRF's document frequencies, explanations): verified whole on first use."""
        token_ids = self.index.read_array(TOKEN_IDS_FILE, np.int32, (self.index.meta.num_tokens,))
        blocks = self.index.blocks(TOKEN_IDS_FILE, 4)
        if blocks is not None:
            blocks.all()
        return token_ids

    @cached_property
    def vector_blocks(self) -> Optional["BlockCheck"]:
        """Which blocks of ``vectors.f16`` this process has verified (None: an unchecked index)."""
        return self.index.blocks(VECTORS_FILE, 2 * self.index.meta.dim)

    def check_docs(self, doc_ids: np.ndarray) -> None:
        """The vectors of ``doc_ids`` are about to be read: verify their blocks not yet verified (a damaged one
        raises DamagedFileError naming the file and its documents). Nothing once every block is verified."""
        blocks = self.vector_blocks
        if blocks is None or blocks.complete:
            return
        offsets = self.index.offsets
        blocks.rows(offsets[doc_ids], offsets[np.asarray(doc_ids) + 1], 2 * self.index.meta.dim)

    def check_rows(self, rows: np.ndarray) -> None:
        """Token ``rows`` (any order, -1 ignored) are about to be read: verify their blocks."""
        blocks = self.vector_blocks
        if blocks is None or blocks.complete:
            return
        rows = np.asarray(rows, dtype=np.int64).ravel()
        rows = rows[rows >= 0]
        blocks.rows(rows, rows + 1, 2 * self.index.meta.dim)

    def rows(self, start: int, end: int) -> np.ndarray:
        blocks = self.vector_blocks
        if blocks is not None:
            blocks.rows([start], [end], 2 * self.index.meta.dim)
        return np.asarray(self.vectors[start:end], dtype=np.float32)

    # -- scores and retrieval ------------------------------------------------------------------------------
    def exact_scores(self, q: "torch.Tensor", doc_ids: np.ndarray,
                     block_tokens: Optional[int] = None) -> np.ndarray:
        """:func:`~.search.score_docs` (length-sorted padded blocks, on ``q``'s device)."""
        from .search import score_docs

        return score_docs(self.index, q, doc_ids, block_tokens)

    def retriever(self, *, num_results: int = 1000, lam: Optional[float] = None, k_hat: Optional[int] = None,
                  faiss: Union[str, "FaissSpec", None] = None, nprobe: Optional[int] = None,
                  refine: Optional[int] = None, strict: bool = False, verbose: bool = False) -> "pt.Transformer":
        """Token-neighbour retrieval (:class:`~.search.ColBERTRetriever`): each scoring query vector
        fetches its k̂ nearest document tokens (``ceil(num_results / lam)``, ``k_hat``, or by default
        ``max(ceil(num_results / 2), 50)``) by ``faiss`` search (``None``: the measured default for the index's
        size, :func:`~.search.default_search`; ``nprobe`` and ``refine`` tune approximate kinds); their
        documents are scored exactly."""
        from .search import ColBERTRetriever

        return ColBERTRetriever(self.index, num_results=num_results, lam=lam, k_hat=k_hat, faiss=faiss,
                                nprobe=nprobe, refine=refine, strict=strict, verbose=verbose)

    def describe(self) -> str:
        return "stores fp16 vectors and retrieves by token neighbours"

    @classmethod
    def missing(cls, index: "ColBERTIndex", what: str) -> str:
        return (f"the index at {index.path} is {index.compression}-compressed and stores no fp16 vectors, which "
                f"{what} needs; build an fp16 index (compression='fp16') for it, or use doc_vectors() "
                "(decompressed) and index.retriever() (centroid search)")

    # -- neighbour indexes ---------------------------------------------------------------------------------
    @property
    def vectors_entry(self) -> Optional[Dict[str, Any]]:
        """The manifest's entry (size, checksum) of the vectors: FAISS caches record what they were built from."""
        files = self.index.meta.files
        return None if files is None else files.get(VECTORS_FILE)

    def ann(self, spec: "FaissSpec", *, verbose: Optional[bool] = None) -> "AnnIndex":
        """See :meth:`~..artifact.ColBERTIndex.ann`."""
        from .. import ann

        meta = self.index.meta
        spec = spec.resolve(meta.num_tokens, meta.dim)
        if spec not in self._ann:
            self._check_can_cache(spec)
            target = ann.cache_file(self.path, spec)
            if (target is None or not target.exists()) and self.vector_blocks is not None:
                self.vector_blocks.all()  # exact search scans, and a build reads, every vector
            built = ann.load_or_build(self.path, self.vectors, spec, self.index.config.similarity,
                                      self.index.verbose if verbose is None else verbose, content=self.vectors_entry)
            self._ann[spec] = ann.to_gpu_if_available(built)
        return self._ann[spec]

    def build_ann(self, faiss: Union[str, "FaissSpec", None] = None, *, verbose: bool = False) -> Optional[Path]:
        from .. import ann
        from .search import default_search

        num_tokens, dim = self.index.meta.num_tokens, self.index.meta.dim
        spec = default_search(num_tokens)[0] if faiss is None else \
            faiss if isinstance(faiss, ann.FaissSpec) else ann.FaissSpec(faiss)
        target = ann.cache_file(self.path, spec.resolve(num_tokens, dim))
        if target is None:
            return None
        self.ann(spec, verbose=verbose)
        return target

    def _check_can_cache(self, spec: "FaissSpec") -> None:
        """Refuse, before any training, to build a neighbour index that could not be written to the folder."""
        import tempfile

        from .. import ann

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
                f"`pfc build-ann {self.path} --faiss {kind}`, or search "
                "without one: retriever(faiss='exact')") from None

    # -- writing -------------------------------------------------------------------------------------------
    @classmethod
    def writer(cls, spec: "CompressionSpec", dim: int) -> StoreWriter:
        return Fp16Writer()

    @classmethod
    def ann_after_indexing(cls, ann: Union[str, "FaissSpec", None], fmt: str) -> Union[str, "FaissSpec", None]:
        from ..ann import FaissSpec

        # a bad kind name fails here, before hours of encoding
        return ann if ann is None or ann == "default" or isinstance(ann, FaissSpec) else FaissSpec(ann)
