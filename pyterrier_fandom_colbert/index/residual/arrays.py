"""The arrays of a compressed index (:class:`CompressedStore`: codes, residuals, norms, inverted lists, exact
outliers) and what reads them token by token: decompression, and similarities from tables without it. Centroid
search (:mod:`.search`) works on these; an index's are memory maps (:class:`~.store.ResidualStore`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Tuple

import numpy as np

from ...ranking import concat_slices
from .codec import ResidualCodec

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ...model.similarity import Similarity


class CompressedStore:
    """The arrays of a compressed index: the codec, every token's centroid id ``codes [N]`` and packed residual
    ``residuals [N, B]``, document ``offsets [D + 1]``, and the inverted lists ``ivf_offsets [C + 1]`` /
    ``ivf_docs [P]`` (the documents, ascending, holding a token coded by each centroid). Any of them may be
    memory maps (an index's: ``index.store.arrays``, :class:`~.store.ResidualStore`).

    ``guard``, when given, is told which documents' codes (and residuals) and which inverted lists are about to be
    read, before they are (an index's verifies their blocks on first read: :class:`ReadGuard`).

    ``exact_rows [k]`` (ascending) and ``exact_vectors [k, d]``: the exact outliers, token rows whose vectors are
    stored exactly beside their codes; every decompression reads those instead (None: none).

    ``norms [N]`` float32: each token's L2 norm as scoring sees it (:meth:`~.codec.ResidualCodec.norms`, the
    exact outliers' own); with them exact scoring takes its dot products from tables and decompresses nothing
    (:func:`exact_scores`). None (an index built before they were stored): scoring decompresses."""

    def __init__(self, codec: ResidualCodec, codes: np.ndarray, residuals: np.ndarray, offsets: np.ndarray,
                 ivf_offsets: np.ndarray, ivf_docs: np.ndarray, similarity: str = "cosine", reduction: str = "mean",
                 guard: Optional["ReadGuard"] = None, exact_rows: Optional[np.ndarray] = None,
                 exact_vectors: Optional[np.ndarray] = None, norms: Optional[np.ndarray] = None):
        self.codec, self.codes, self.residuals, self.offsets = codec, codes, residuals, offsets
        if norms is not None and len(norms) != len(codes):
            raise ValueError(f"{len(norms)} token norms for {len(codes)} coded tokens; expected one per token")
        self.norms = norms
        self.ivf_offsets, self.ivf_docs = ivf_offsets, ivf_docs
        self.similarity, self.reduction = similarity, reduction
        self.guard = guard
        if (exact_rows is None) != (exact_vectors is None) or (
                exact_rows is not None and exact_vectors is not None and len(exact_rows) != len(exact_vectors)):
            raise ValueError("exact_rows and exact_vectors go together, one vector per row")
        self.exact_rows = None if exact_rows is None else np.asarray(exact_rows, dtype=np.int64)
        self.exact_vectors = exact_vectors
        self._tensors: dict = {}

    def listed(self, cells: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """:func:`list_docs` of ``cells`` over this store's inverted lists (told to the guard first)."""
        if self.guard is not None:
            self.guard.lists(cells)
        return list_docs(cells, self.ivf_offsets, self.ivf_docs)

    def reading(self, doc_ids: np.ndarray, residuals: bool) -> None:
        """The codes (and ``residuals``) of ``doc_ids`` are about to be read: tell the guard."""
        if self.guard is not None:
            self.guard.docs(doc_ids, residuals)

    @property
    def num_docs(self) -> int:
        return len(self.offsets) - 1

    def tensors(self) -> Tuple["torch.Tensor", "torch.Tensor"]:
        """``codes`` and ``residuals`` as CPU tensors sharing the memory maps (read-only)."""
        import warnings

        import torch

        if not self._tensors:
            with warnings.catch_warnings():  # the memory maps are read-only; nothing writes to them
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                codes = self.codes if self.codes.dtype != np.uint16 else self.codes.view(np.int16)
                self._tensors["codes"] = torch.from_numpy(codes)
                self._tensors["residuals"] = torch.from_numpy(self.residuals)
        return self._tensors["codes"], self._tensors["residuals"]

    def norm_tensor(self) -> "torch.Tensor":
        """``norms`` as a CPU tensor sharing the memory map (read-only); a ValueError for a store without them."""
        import warnings

        import torch

        if self.norms is None:
            raise ValueError("this compressed store has no token norms (an index built before they were stored): "
                             "its tokens are scored by decompressing them")
        if "norms" not in self._tensors:
            with warnings.catch_warnings():  # read-only memory map, as in tensors()
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                self._tensors["norms"] = torch.from_numpy(self.norms)
        return self._tensors["norms"]

    def row_codes(self, index: "torch.Tensor") -> "torch.Tensor":
        """The centroid ids (int64) of token rows ``index``."""
        import torch

        codes = self.tensors()[0].index_select(0, index)
        if codes.dtype == torch.int16:  # uint16 ids stored as int16 (torch has no uint16 indexing)
            return codes.long() & 0xFFFF
        return codes.long()

    def scored_rows(self, rows: np.ndarray, q: "torch.Tensor", tables: Tuple["torch.Tensor", "torch.Tensor"],
                    sim: "Similarity") -> "torch.Tensor":
        """``[len(rows), n]``: the similarities of token ``rows`` to ``q [n, d]`` from ``tables`` (the centroids'
        and the residual bytes' dot products with ``sim.dot_query(q)``, :meth:`~.codec.ResidualCodec.dot_tables`)
        and the stored norms, no vector decompressed; exact outliers compared as stored. The same values as
        :meth:`decompress_rows` then ``sim.token_matrix`` (to float32 rounding)."""
        import torch

        from .codec import residual_dots

        centroid_dots, residual_table = tables
        index = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64))
        dots = residual_dots(residual_table, self.tensors()[1].index_select(0, index))
        dots.add_(centroid_dots.index_select(0, self.row_codes(index)))
        sims = sim.from_dots(dots, self.norm_tensor().index_select(0, index), q)
        exact = self.exact_among(rows)
        if exact is not None:
            sims[exact[0]] = sim.token_matrix(exact[1], q)
        return sims

    def decompress_rows(self, rows: np.ndarray, out: "torch.Tensor",
                        scratch: Optional["torch.Tensor"] = None) -> "torch.Tensor":
        """Exact decompression of token ``rows`` into ``out [len(rows), d]`` float32 (``scratch``: see
        :meth:`~.codec.ResidualCodec.decompress_into`)."""
        import torch

        residuals = self.tensors()[1]
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        index = torch.from_numpy(rows)
        self.codec.decompress_into(self.row_codes(index), residuals.index_select(0, index), out, scratch)
        exact = self.exact_among(rows)
        if exact is not None:
            out[exact[0]] = exact[1]
        return out

    def exact_among(self, rows: np.ndarray) -> Optional[Tuple["torch.Tensor", "torch.Tensor"]]:
        """The exact outliers among token ``rows``: their positions in ``rows`` and their vectors (float32
        ``[k, d]``), as tensors; None when there are none."""
        import torch

        if self.exact_vectors is None or len(rows) == 0:
            return None
        at, found = self.exact_positions(rows)
        if len(at) == 0:
            return None
        return torch.from_numpy(at), torch.from_numpy(np.asarray(self.exact_vectors[found], dtype=np.float32))

    def exact_positions(self, rows: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """``(at, found)``: the positions in ``rows`` of exact outliers, and their positions in
        :attr:`exact_rows` (both empty without exact outliers).

        >>> store = CompressedStore(None, None, None, None, None, None, exact_rows=np.array([2, 7]),
        ...                         exact_vectors=np.zeros((2, 1)))
        >>> [a.tolist() for a in store.exact_positions(np.array([7, 1, 2, 9]))]
        [[0, 2], [1, 0]]
        """
        if self.exact_rows is None or len(self.exact_rows) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        pos = np.minimum(np.searchsorted(self.exact_rows, rows), len(self.exact_rows) - 1)
        at = np.flatnonzero(self.exact_rows[pos] == rows)
        return at, pos[at]

    def exact_between(self, start: int, end: int) -> Tuple[np.ndarray, np.ndarray]:
        """The exact outliers among token rows ``start:end``: their rows counted from ``start`` (int64, ascending)
        and their vectors ``[k, d]`` float16 (empty without exact outliers)."""
        if self.exact_rows is None or self.exact_vectors is None:
            return np.zeros(0, np.int64), np.zeros((0, self.codec.dim), np.float16)
        a, b = np.searchsorted(self.exact_rows, [start, end])
        return self.exact_rows[a:b] - start, np.asarray(self.exact_vectors[a:b], dtype=np.float16)

    def rows_between(self, start: int, end: int) -> np.ndarray:
        """Token rows ``start:end`` decompressed (float32 ``[end - start, d]``), exact outliers as stored."""
        vectors = self.codec.decompress(self.codes[start:end], self.residuals[start:end])
        rows, exact = self.exact_between(start, end)
        vectors[rows] = exact
        return vectors


class ReadGuard:
    """What a :class:`CompressedStore` tells before it reads: the interface of its ``guard``."""

    def docs(self, doc_ids: np.ndarray, residuals: bool) -> None:
        """The codes (and, if ``residuals``, the residuals) of ``doc_ids`` are about to be read."""

    def lists(self, cells: np.ndarray) -> None:
        """The inverted lists of ``cells`` are about to be read."""


def doc_code_pairs(codes: np.ndarray, doc_of_row: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The distinct (centroid, document) pairs of token rows (``doc_of_row`` ascending), sorted by centroid then
    document.

    >>> c, d = doc_code_pairs(np.array([2, 0, 2, 2, 1]), np.array([4, 4, 4, 5, 5]))
    >>> c.tolist(), d.tolist()
    ([0, 1, 2, 2], [4, 5, 4, 5])
    """
    if len(doc_of_row) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = int(doc_of_row[0])
    span = int(doc_of_row[-1]) - first + 1
    keys = np.unique(np.asarray(codes, dtype=np.int64) * span + (np.asarray(doc_of_row, dtype=np.int64) - first))
    return keys // span, keys % span + first


def build_ivf(codes: np.ndarray, offsets: np.ndarray, num_centroids: int) -> Tuple[np.ndarray, np.ndarray]:
    """Inverted lists in memory: ``(ivf_offsets [C + 1] int64, ivf_docs [P] int32)``; list ``c`` holds, ascending,
    the documents with a token coded ``c``.

    >>> o, d = build_ivf(np.array([2, 0, 2, 2, 1]), np.array([0, 3, 5]), 3)
    >>> o.tolist(), d.tolist()
    ([0, 1, 2, 4], [0, 1, 0, 1])
    """
    doc_of_row = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    cents, docs = doc_code_pairs(codes, doc_of_row)
    ivf_offsets = np.concatenate([[0], np.cumsum(np.bincount(cents, minlength=num_centroids))]).astype(np.int64)
    return ivf_offsets, docs.astype(np.int32)


def list_docs(cells: np.ndarray, ivf_offsets: np.ndarray,
              ivf_docs: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """All documents in the inverted lists of ``cells`` (with repeats), and the cell of each: ``(docs, cells)``."""
    rows, which = concat_slices(ivf_offsets[cells], ivf_offsets[cells + 1])
    return np.asarray(ivf_docs[rows], dtype=np.int64), cells[which]
