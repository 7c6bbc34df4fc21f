"""``exact`` (also accepted as ``flat``, its earlier name): exact nearest tokens, not FAISS.

:class:`ExactSearch` multiplies the query vectors with the stored fp16 vectors a block at a time in torch (no
copy of the vectors in RAM, nothing written). FAISS's own flat index switches to BLAS only from ~1,000 query
vectors at d = 128 (faiss ≥ 1.15); a query's 32 vectors took its sequential kernel, 4x slower than scoring every
document exactly.
"""
from __future__ import annotations

from typing import Tuple, Union

import numpy as np

from ...model.similarity import Similarity, get_similarity
from .base import AnnKind, FaissSpec, register_kind


class ExactSearch:
    """Exact nearest stored tokens by the model's similarity, with FAISS's call shape
    (``search(queries, k) -> (similarities, row ids)``, ``ntotal``).

    ``vectors [T, d]`` (e.g. the fp16 memory map) are read ``block_rows`` at a time into a reused float32
    buffer; each block's best ``k`` are merged into the running best. Ties may come in any order.

    >>> exact = ExactSearch(np.array([[1., 0.], [0., 1.], [0.6, 0.8]], dtype=np.float16), "cosine", block_rows=2)
    >>> sims, ids = exact.search(np.array([[0., 1.]], dtype=np.float32), 2)
    >>> ids.tolist(), sims.astype(np.float64).round(3).tolist()
    ([[1, 2]], [[1.0, 0.8]])
    """

    def __init__(self, vectors: np.ndarray, similarity: Union[str, Similarity], block_rows: int = 65536):
        self.vectors, self.similarity, self.block_rows = vectors, get_similarity(similarity), block_rows

    @property
    def ntotal(self) -> int:
        return len(self.vectors)

    def search(self, queries: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        import torch

        q = torch.as_tensor(np.ascontiguousarray(queries, dtype=np.float32))
        best = torch.empty(len(q), 0)
        best_ids = torch.empty(len(q), 0, dtype=torch.long)
        rows = min(self.block_rows, self.ntotal)
        raw = torch.from_numpy(np.empty((rows, self.vectors.shape[1]), dtype=self.vectors.dtype))
        block = torch.empty(raw.shape, dtype=torch.float32)
        for start in range(0, self.ntotal, rows):
            n = min(rows, self.ntotal - start)
            raw.numpy()[:n] = self.vectors[start:start + n]
            block[:n].copy_(raw[:n])
            sims = self.similarity.matrix(q, block[:n])
            values, ids = sims.topk(min(k, n), dim=1)
            best, where = torch.cat([best, values], 1).topk(min(k, best.shape[1] + values.shape[1]), dim=1)
            best_ids = torch.cat([best_ids, ids + start], 1).gather(1, where)
        return best.numpy(), best_ids.numpy()


class Exact(AnnKind):
    """Exact search over the stored vectors: nothing trained, built in no time, never cached, CPU (torch)."""

    name = "exact"
    aliases = ("flat",)  # the earlier name, kept for existing code
    exact = True

    def factory_string(self, spec: FaissSpec) -> str:
        return "Flat"  # FAISS's name for exact search, for reports; no FAISS index is built

    def build(self, vectors: np.ndarray, spec: FaissSpec, similarity: Union[str, Similarity],
              verbose: bool = False) -> ExactSearch:
        return ExactSearch(vectors, similarity)


register_kind(Exact())
