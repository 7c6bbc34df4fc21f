"""The hybrid system of a search folder: the TF-IDF and ColBERT rankings of a query fused into one.

:func:`hybrid_system` is the one place the app builds it, from the two systems and the folder's
:class:`FusionSettings` (saved in the folder's manifest), with the package's fusion transformers
(:class:`~pyterrier_fandom_colbert.fusion.LinearFusion`, :class:`~pyterrier_fandom_colbert.fusion.RRF`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Tuple

from ..storage import JsonConfig

if TYPE_CHECKING:  # pragma: no cover
    import pyterrier as pt  # (imported by the fusion when a hybrid is built: reading settings stays light)

METHODS = ("linear", "rrf")


@dataclass(frozen=True)
class FusionSettings(JsonConfig):
    """How the hybrid fuses TF-IDF and ColBERT; saved in the folder's manifest.

    ``linear``: ``w_tfidf · minmax(tfidf) + w_colbert · minmax(colbert)`` per query, a document one system did not
    return counting as that system's lowest (0 after min-max); ``rrf``: ``Σ w / (rrf_k + rank)`` (1-based ranks).
    ``depth``: results each system contributes per query.

    >>> FusionSettings(method="mean")
    Traceback (most recent call last):
    ...
    ValueError: fusion method='mean'; expected one of ('linear', 'rrf')
    """

    method: str = "linear"
    weights: Tuple[float, float] = (0.5, 0.5)  # (TF-IDF, ColBERT)
    rrf_k: float = 60.0
    depth: int = 100

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"fusion method={self.method!r}; expected one of {METHODS}")
        weights = tuple(float(w) for w in self.weights)
        if len(weights) != 2 or not all(map(math.isfinite, weights)) or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(f"fusion weights={list(self.weights)}; expected two non-negative numbers "
                             "(TF-IDF, ColBERT), not both 0")
        object.__setattr__(self, "weights", weights)
        if not (math.isfinite(self.rrf_k) and self.rrf_k >= 0):
            raise ValueError(f"rrf_k={self.rrf_k!r}; expected a non-negative number (60 is usual)")
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
            raise ValueError(f"depth={self.depth!r}; expected a positive number of results per system")


def hybrid_system(tfidf: "pt.Transformer", colbert: "pt.Transformer", settings: FusionSettings) -> "pt.Transformer":
    """The hybrid of two retrievers (each: a query frame → docno, score, rank) as one retriever: each system's top
    ``depth`` per query, fused by ``settings.method`` (the input's columns kept on every row).

    ``linear`` is :class:`LinearFusion` with min-max scores and ``missing="zero"`` (a document one system did not
    return counts as that system's lowest, 0 after min-max); ``rrf`` is :class:`RRF` with ``rrf_k`` and the
    weights. Ranks go by fused score, docno breaking ties.
    """
    from ..fusion import RRF, LinearFusion

    systems = [tfidf % settings.depth, colbert % settings.depth]
    if settings.method == "linear":
        return LinearFusion(systems, list(settings.weights), normalise="minmax", missing="zero")
    return RRF(systems, settings.rrf_k, weights=list(settings.weights))
