"""Text in, top k out, without DataFrames: ``index.searcher(colbert)`` answers one query at a time with the same
passages and scores as ``index.retriever(colbert)`` (the same encoder call and the same search), for callers that
ask one question and want arrays back (a server, a latency benchmark) rather than a PyTerrier frame.

    searcher = index.searcher(colbert, num_results=10)
    docnos, scores = searcher.search("when was the game released")   # best first
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Protocol, Sequence, Tuple

import numpy as np

from ..frames import check_query_text

if TYPE_CHECKING:
    import torch

    from ..model.colbert import ColBERT
    from .artifact import ColBERTIndex


class VectorSearch(Protocol):
    """A single-index retriever that searches query vectors directly (fp16 and compressed)."""

    num_results: int

    def search_vectors(self, queries: Sequence["torch.Tensor"]) -> List[Tuple[np.ndarray, np.ndarray]]:
        ...


class TextSearcher:
    """One query's text → ``(docnos, scores)`` of its top ``num_results`` passages, best first (module notes).

    ``retriever`` is the index's own retriever (``index.store.retriever(...)``), whose settings it uses; equal to
    ``colbert.query_encoder() >> retriever`` on every query (tested)."""

    def __init__(self, index: "ColBERTIndex", colbert: "ColBERT", retriever: VectorSearch):
        self.index = index
        self.colbert = colbert
        self.retriever = retriever

    @property
    def num_results(self) -> int:
        return self.retriever.num_results

    def search(self, query: Any) -> Tuple[np.ndarray, np.ndarray]:
        """The top passages of ``query`` (a non-empty text, else a ``ValueError`` showing it): docnos and float64
        scores, best first."""
        import torch

        text = check_query_text(query)
        with torch.inference_mode():
            embs, mask = self.colbert.encode_queries([text])
            q = embs[0][mask[0]].float().cpu()
            if not bool(torch.isfinite(q).all()):
                raise ValueError(f"the query vectors of {text!r} hold NaN or inf values; check the query encoder")
            ids, scores = self.retriever.search_vectors([q])[0]
        return self.index.docnos_of(ids), np.asarray(scores, dtype=np.float64)

    def __repr__(self) -> str:
        return f"TextSearcher({self.retriever!r})"
