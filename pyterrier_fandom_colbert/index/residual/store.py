"""The residual formats ``residual1``, ``residual2``, ``residual4``: each token stored as a centroid id and a packed
residual of 1, 2 or 4 bits per dimension (PLAID's scheme; files in :mod:`..layout`, building in
:mod:`.compress`), retrieved by centroid search (:mod:`.search`)."""
from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from ...storage import DamagedFileError, read_json
from ..integrity import REMEDY, size_problem
from ..layout import (
    CHECKED_ON_OPEN_COMPRESSED,
    CODEC_FILE,
    EXACT_VECTORS_FILE,
    FORMATS,
    IVF_DOCS_FILE,
    IVF_OFFSETS_FILE,
    OFFSETS_FILE,
    RESIDUALS_FILE,
    TOKEN_NORMS_FILE,
    VECTORS_FILE,
)
from ..store import IndexStore, Layout, Problem, StoreWriter
from .arrays import ReadGuard

if TYPE_CHECKING:  # pragma: no cover
    import pyterrier as pt
    import torch

    from ..ann import FaissSpec
    from ..artifact import ColBERTIndex
    from ..layout import IndexMeta
    from .arrays import CompressedStore
    from .codec import ResidualCodec
    from .compress import CompressionSpec

#: centroid ids scanned at a time in verify()
SCAN_ROWS = 1 << 16
#: what codec.json must hold
CODEC_KEYS = ("nbits", "num_centroids", "code_dtype", "token_id_dtype", "num_pairs")


class ResidualWriter(StoreWriter):
    """Compresses the streamed fp16 spill (:func:`~.compress.compress_spill`) and deletes it."""

    def __init__(self, spec: "CompressionSpec", dim: int):
        from .codec import check_nbits

        check_nbits(spec.nbits, dim)  # refuse a bit width the dimension cannot pack before any work
        self.spec = spec
        #: the index's codec.json (after finish)
        self.codec_info: Optional[Dict[str, Any]] = None

    def finish(self, folder: Path, num_tokens: int, dim: int, verbose: bool) -> List[str]:
        from ..layout import TOKEN_IDS_FILE
        from .compress import compress_spill, compressed_files

        self.codec_info = compress_spill(folder, num_tokens, dim, self.spec, vectors_file=VECTORS_FILE,
                                         token_ids_file_i32=TOKEN_IDS_FILE, offsets_file=OFFSETS_FILE,
                                         verbose=verbose)
        return compressed_files(self.codec_info)

    def exact_rows(self) -> Optional[int]:
        return None if self.codec_info is None else self.codec_info.get("exact_rows")


class BlockGuard(ReadGuard):
    """Verifies the blocks of the codes, residuals and inverted lists that centroid search is about to read, the
    first time this process reads them (the index's integrity base; nothing for an unchecked index, and nothing
    more once every block is verified)."""

    def __init__(self, index: "ColBERTIndex", codes_name: str, code_bytes: int, packed_bytes: int,
                 ivf_offsets: np.ndarray, norms: bool = False):
        self.index, self.code_bytes, self.packed_bytes, self.ivf_offsets = index, code_bytes, packed_bytes, ivf_offsets
        self.codes = index.blocks(codes_name, code_bytes)
        self.residuals = index.blocks(RESIDUALS_FILE, packed_bytes)
        #: the token norms, read with the residuals (``norms``: the index stores them)
        self.norms = index.blocks(TOKEN_NORMS_FILE, 4) if norms else None
        self.ivf_docs = index.integrity.blocks(IVF_DOCS_FILE, self._lists_held)

    def docs(self, doc_ids: np.ndarray, residuals: bool) -> None:
        pending = [b for b in ((self.codes, self.residuals, self.norms) if residuals else (self.codes,))
                   if b is not None and not b.complete]
        if pending:
            offsets = self.index.offsets
            doc_ids = np.asarray(doc_ids, dtype=np.int64)
            self.rows(offsets[doc_ids], offsets[doc_ids + 1], residuals)

    def rows(self, starts: np.ndarray, ends: np.ndarray, residuals: bool) -> None:
        """Token rows ``starts[i]:ends[i]`` are about to be read."""
        if self.codes is not None:
            self.codes.rows(starts, ends, self.code_bytes)
        if residuals and self.residuals is not None:
            self.residuals.rows(starts, ends, self.packed_bytes)
        if residuals and self.norms is not None:
            self.norms.rows(starts, ends, 4)

    def lists(self, cells: np.ndarray) -> None:
        if self.ivf_docs is not None and not self.ivf_docs.complete:
            cells = np.asarray(cells, dtype=np.int64)
            self.ivf_docs.rows(self.ivf_offsets[cells], self.ivf_offsets[cells + 1], 4)

    def _lists_held(self, start: int, end: int) -> str:
        first = int(np.searchsorted(self.ivf_offsets, start // 4, side="right")) - 1
        last = int(np.searchsorted(self.ivf_offsets, (end - 1) // 4, side="right")) - 1
        return f"the inverted lists of centroids {first}-{last}"


def _exact_held(row_bytes: int) -> Callable[[int, int], str]:
    """What a block of an exact-outlier file holds (for the error naming a damaged one)."""
    def locate(start: int, end: int) -> str:
        return f"exact outliers {start // row_bytes}-{(end - 1) // row_bytes}"
    return locate


class ResidualStore(IndexStore):
    """Residual-compressed token vectors (see the module docstring)."""

    FORMATS = tuple(f for f in FORMATS if f.startswith("residual"))
    CHECKED_ON_OPEN = CHECKED_ON_OPEN_COMPRESSED
    KIND = "compressed indexes (centroid search)"

    # -- layout and integrity ------------------------------------------------------------------------------
    def codec_json(self) -> Dict[str, Any]:
        """``codec.json``, read afresh; a DamagedFileError when it lacks a field."""
        info = read_json(self.path / CODEC_FILE, "codec description of a compressed ColBERT index")
        missing = [k for k in CODEC_KEYS if k not in info]
        if missing:
            file = self.path / CODEC_FILE
            raise DamagedFileError(file, f"{file} is damaged: it lacks {missing}; {REMEDY}")
        return info

    def layout(self, meta: "IndexMeta") -> Layout:
        from .compress import array_layout

        layout = array_layout(self.codec_json(), meta.num_tokens, meta.num_docs, meta.dim)
        layout[OFFSETS_FILE] = (np.int64, (meta.num_docs + 1,))
        return layout

    def problems(self, meta: "IndexMeta", found: List[Problem], offsets: Optional[np.ndarray],
                 docnos: Any) -> List[Problem]:
        """The codes and inverted lists: ids in range, lists well formed (files whose size is already wrong are
        skipped)."""
        from .compress import codes_file

        bad = {name for name, _ in found}
        try:
            info = self.codec_json()
        except (ValueError, FileNotFoundError) as err:
            return [(CODEC_FILE, str(err))]
        layout = self.layout(meta)
        problems: List[Problem] = []
        num_centroids = int(info["num_centroids"])
        name = codes_file(np.dtype(info["code_dtype"]))
        if name not in bad and size_problem(self.path, meta, layout, name) is None:
            codes = np.memmap(self.path / name, dtype=layout[name][0], mode="r", shape=layout[name][1])
            top = max((int(codes[s:s + SCAN_ROWS].max()) for s in range(0, meta.num_tokens, SCAN_ROWS)), default=0)
            if top >= num_centroids:
                problems.append((name, f"{self.path / name} holds centroid id {top}, but the codec has "
                                       f"{num_centroids} centroids"))
        if not {IVF_OFFSETS_FILE, IVF_DOCS_FILE} & bad \
                and size_problem(self.path, meta, layout, IVF_OFFSETS_FILE) is None \
                and size_problem(self.path, meta, layout, IVF_DOCS_FILE) is None:
            lists = np.fromfile(self.path / IVF_OFFSETS_FILE, dtype=np.int64)
            if lists[0] != 0 or lists[-1] != int(info["num_pairs"]) or (np.diff(lists) < 0).any():
                problems.append((IVF_OFFSETS_FILE, f"{self.path / IVF_OFFSETS_FILE} is not a list of ascending "
                                                   f"offsets from 0 to {info['num_pairs']}"))
            docs = np.memmap(self.path / IVF_DOCS_FILE, dtype=np.int32, mode="r")
            if len(docs) and (int(docs.min()) < 0 or int(docs.max()) >= meta.num_docs):
                problems.append((IVF_DOCS_FILE, f"{self.path / IVF_DOCS_FILE} names documents outside 0.."
                                                f"{meta.num_docs - 1}"))
        problems += self._exact_problems(meta, info, layout, bad)
        if TOKEN_NORMS_FILE in layout and TOKEN_NORMS_FILE not in bad \
                and size_problem(self.path, meta, layout, TOKEN_NORMS_FILE) is None:
            norms = np.memmap(self.path / TOKEN_NORMS_FILE, dtype=np.float32, mode="r", shape=(meta.num_tokens,))
            if any(not bool(np.all(np.isfinite(block) & (block >= 0)))
                   for block in (norms[s:s + SCAN_ROWS] for s in range(0, meta.num_tokens, SCAN_ROWS))):
                problems.append((TOKEN_NORMS_FILE, f"{self.path / TOKEN_NORMS_FILE} holds token norms that are "
                                                   "negative or not finite"))
        return problems

    def _exact_problems(self, meta: "IndexMeta", info: Dict[str, Any], layout: Layout, bad: set) -> List[Problem]:
        """The exact outliers: as many as pt_meta.json says, rows ascending within the index, vectors finite."""
        from ..layout import META_FILE, non_finite_rows
        from .compress import exact_rows_file

        count = info.get("exact_rows")
        if count != meta.exact_rows:
            return [(CODEC_FILE, f"{self.path / CODEC_FILE} records {count} exact outlier rows, {META_FILE} "
                                 f"{meta.exact_rows}")]
        if count is None:
            return []
        name = exact_rows_file(np.dtype(info["exact_row_dtype"]))
        problems: List[Problem] = []
        if count and name not in bad and size_problem(self.path, meta, layout, name) is None:
            rows = np.fromfile(self.path / name, dtype=layout[name][0]).astype(np.int64)
            if rows[0] < 0 or rows[-1] >= meta.num_tokens or (np.diff(rows) <= 0).any():
                problems.append((name, f"{self.path / name} is not a list of ascending token rows in 0.."
                                       f"{meta.num_tokens - 1}"))
        vectors_ok = EXACT_VECTORS_FILE not in bad and size_problem(self.path, meta, layout, EXACT_VECTORS_FILE) is None
        if count and vectors_ok:
            vectors = np.fromfile(self.path / EXACT_VECTORS_FILE, dtype=np.float16).reshape(-1, meta.dim)
            if len(non_finite_rows(vectors)):
                problems.append((EXACT_VECTORS_FILE, f"{self.path / EXACT_VECTORS_FILE} holds vectors that are "
                                                     "not finite"))
        return problems

    # -- contents ------------------------------------------------------------------------------------------
    @cached_property
    def codec_info(self) -> Dict[str, Any]:
        """``codec.json``: the CompressionSpec, nbits, centroids, dtypes and build timings (after the checks)."""
        self.index.check()
        return self.codec_json()

    @cached_property
    def codec(self) -> "ResidualCodec":
        """The residual codec (centroids, bucket cutoffs and weights)."""
        from .compress import load_codec

        return load_codec(self.path, self.codec_info, self.index.meta.dim)

    @cached_property
    def arrays(self) -> "CompressedStore":
        """The memory-mapped codes, residuals and inverted lists that centroid search works on."""
        from .arrays import CompressedStore
        from .compress import codes_file

        index, info, codec = self.index, self.codec_info, self.codec
        num_tokens = index.meta.num_tokens
        code = np.dtype(info["code_dtype"])
        codes = index.read_array(codes_file(code), code, (num_tokens,))
        residuals = index.read_array(RESIDUALS_FILE, np.uint8, (num_tokens, codec.packed_bytes))
        ivf_offsets = np.array(index.read_array(IVF_OFFSETS_FILE, np.int64, (codec.num_centroids + 1,)))
        ivf_docs = index.read_array(IVF_DOCS_FILE, np.int32, (int(info["num_pairs"]),))
        has_norms = bool(info.get("token_norms"))
        norms = index.read_array(TOKEN_NORMS_FILE, np.float32, (num_tokens,)) if has_norms else None
        guard = BlockGuard(index, codes_file(code), code.itemsize, codec.packed_bytes, ivf_offsets, norms=has_norms)
        exact_rows, exact_vectors = self._exact_outliers()
        return CompressedStore(codec, codes, residuals, index.offsets, ivf_offsets, ivf_docs,
                               index.config.similarity, index.config.reduction, guard=guard,
                               exact_rows=exact_rows, exact_vectors=exact_vectors, norms=norms)

    def _exact_outliers(self) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
        """The exact outliers' row ids (int64) and fp16 vectors, read whole into memory (a small share of the
        tokens) after their blocks are verified; (None, None) for an index without them."""
        from .compress import exact_rows_file

        info, index = self.codec_info, self.index
        if "exact_rows" not in info:
            return None, None
        count, dim = int(info["exact_rows"]), index.meta.dim
        row_dtype = np.dtype(info["exact_row_dtype"])
        if count == 0:
            return np.zeros(0, np.int64), np.zeros((0, dim), np.float16)
        arrays = []
        for name, dtype, shape in ((exact_rows_file(row_dtype), row_dtype, (count,)),
                                   (EXACT_VECTORS_FILE, np.dtype(np.float16), (count, dim))):
            blocks = index.integrity.blocks(name, _exact_held(dtype.itemsize * int(np.prod(shape[1:]))))
            if blocks is not None:
                blocks.all()
            arrays.append(np.array(index.read_array(name, dtype, shape)))
        return arrays[0].astype(np.int64), arrays[1]

    @cached_property
    def token_ids(self) -> np.ndarray:
        """int32, or uint16 when every id fits."""
        from .compress import token_ids_file

        dtype = np.dtype(self.codec_info["token_id_dtype"])
        token_ids = self.index.read_array(token_ids_file(dtype), dtype, (self.index.meta.num_tokens,))
        blocks = self.index.blocks(token_ids_file(dtype), dtype.itemsize)
        if blocks is not None:  # read whole by its users (PRF, explanations): verified whole on first use
            blocks.all()
        return token_ids

    def rows(self, start: int, end: int) -> np.ndarray:
        """Decompressed exactly (centroid + bucket weights)."""
        arrays = self.arrays
        if isinstance(arrays.guard, BlockGuard):
            arrays.guard.rows(np.array([start]), np.array([end]), True)
        return arrays.rows_between(start, end)

    # -- scores and retrieval ------------------------------------------------------------------------------
    def exact_scores(self, q: "torch.Tensor", doc_ids: np.ndarray,
                     block_tokens: Optional[int] = None) -> np.ndarray:
        """:func:`~.search.exact_scores` over the decompressed vectors (on CPU)."""
        from .search import exact_scores

        return exact_scores(self.arrays, q.cpu(), doc_ids, block_tokens)

    def retriever(self, *, num_results: int = 1000, ncells: Optional[int] = None,
                  threshold: Optional[float] = None, ndocs: Union[int, str, None] = "auto",
                  nscore: Optional[int] = None, strict: bool = False, verbose: bool = False) -> "pt.Transformer":
        """Centroid search (:class:`~.search.CentroidRetriever`): the documents of each query vector's
        ``ncells`` best centroids, pruned by centroid interaction to ``ndocs`` and then ``nscore`` documents,
        which are scored exactly over their decompressed vectors; defaults follow ``num_results`` as PLAID's do,
        except that a top 10 scores 128 documents exactly rather than 64
        (:meth:`~.search.SearchParams.for_k`); ``ndocs=None`` scores every candidate."""
        from .search import CentroidRetriever

        return CentroidRetriever(self.index, num_results=num_results, ncells=ncells, threshold=threshold,
                                 ndocs=ndocs, nscore=nscore, strict=strict, verbose=verbose)

    def build_ann(self, faiss: Union[str, "FaissSpec", None] = None, *, verbose: bool = False) -> Optional[Path]:
        """Centroid search needs no neighbour index: None for the default; a neighbour index is refused."""
        if faiss is None:
            return None
        from ..fp16.store import Fp16Store

        raise ValueError(Fp16Store.missing(self.index, f"a neighbour index (faiss={faiss!r})"))

    def describe(self) -> str:
        return f"is {self.index.compression}-compressed and retrieves by centroid search"

    @classmethod
    def missing(cls, index: "ColBERTIndex", what: str) -> str:
        return f"the index at {index.path} is not compressed (format {index.compression}): it has no codec"

    # -- writing -------------------------------------------------------------------------------------------
    @classmethod
    def writer(cls, spec: "CompressionSpec", dim: int) -> StoreWriter:
        return ResidualWriter(spec, dim)

    @classmethod
    def ann_after_indexing(cls, ann: Union[str, "FaissSpec", None], fmt: str) -> Union[str, "FaissSpec", None]:
        if ann is not None and not (isinstance(ann, str) and ann == "default"):
            raise ValueError(f"ann={ann!r}: a {fmt}-compressed index searches by its centroids and has no neighbour "
                             "index to build; leave ann at its default")
        return None
