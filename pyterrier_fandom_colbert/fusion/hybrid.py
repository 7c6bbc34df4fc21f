"""``Hybrid``: the package's default fusion of a lexical and a neural system (e.g. TF-IDF and ColBERT).

A z-score linear fusion, ``w · z(lexical) + (1 - w) · z(neural)`` per query, with a conservative default lexical
weight. The default was chosen for safety (never far below the better input) rather than for the largest gain on
one collection; per-query adaptive weights (from the agreement of the two top lists, from the lexical score
distribution, from where each system ranks the other's top document) were measured against it and did not do
better on every collection, so none is used. Measurements and their commands: docs/experiments/fusion.md.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Union

import pyterrier as pt

from ..checks import real_in_range
from .transformers import LinearFusion

#: the lexical weight of ``Hybrid()`` when none is given: safe on every collection measured (docs/fusion.md)
DEFAULT_WEIGHT = 0.2


class Hybrid(LinearFusion):
    """Fuse a lexical and a neural system: ``weight · z(lexical) + (1 - weight) · z(neural)``.

    ``z`` standardises each system's scores per query (mean 0, standard deviation 1 over the documents it returned);
    a document one system did not return gets that system's lowest z for the query. ``weight`` is the lexical
    share, in [0, 1]: default :data:`DEFAULT_WEIGHT`; tune it on development questions when you have them
    (``pfc.tune_fusion([lexical, neural], topics, qrels, fusion=lambda w: Hybrid(lexical, neural, weight=w))``).
    The default was measured with both systems returning 1,000 results per query (z-scores depend on list depth).
    ``normalise`` and ``missing`` are as for :class:`LinearFusion`.
    """

    def __init__(self, lexical: pt.Transformer, neural: pt.Transformer, weight: Optional[float] = None, *,
                 normalise: Optional[str] = "zscore", missing: Union[str, float] = "min",
                 num_results: Optional[int] = None):
        self.weight = real_in_range("Hybrid weight", DEFAULT_WEIGHT if weight is None else weight, 0.0, 1.0,
                                    what="the lexical share")
        super().__init__([lexical, neural], [self.weight, 1.0 - self.weight], normalise=normalise, missing=missing,
                         num_results=num_results)

    @property
    def lexical(self) -> pt.Transformer:
        return self.systems[0]

    @property
    def neural(self) -> pt.Transformer:
        return self.systems[1]

    def _constructor_args(self) -> Dict[str, Any]:
        return {"lexical": self.lexical, "neural": self.neural, "weight": self.weight, "normalise": self.normalise,
                "missing": self.missing, "num_results": self.num_results}

    def with_weight(self, weight: float) -> "Hybrid":
        """The same hybrid with another lexical weight (what the tuner varies)."""
        return Hybrid(self.lexical, self.neural, weight, normalise=self.normalise, missing=self.missing,
                      num_results=self.num_results)

    def _with_num_results(self, num_results: int) -> "Hybrid":
        return Hybrid(self.lexical, self.neural, self.weight, normalise=self.normalise, missing=self.missing,
                      num_results=num_results)

    def __repr__(self) -> str:
        options = "" if (self.normalise, self.missing) == ("zscore", "min") else \
            f", normalise={self.normalise!r}, missing={self.missing!r}"
        cut = f", num_results={self.num_results}" if self.num_results is not None else ""
        return f"Hybrid({self.lexical!r}, {self.neural!r}, weight={self.weight:g}{options}{cut})"
