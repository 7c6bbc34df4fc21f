"""The hybrid system of a search folder: the package's fusion, :class:`~pyterrier_fandom_colbert.fusion.Hybrid`,
of the folder's TF-IDF and ColBERT rankings.

:class:`FusionSettings` (saved in the folder's manifest) holds the ``Hybrid``'s settings and how many results each
system hands it; :func:`hybrid_system` builds it. Folders written before ``pfc`` used ``pfc.Hybrid`` recorded
another shape (``method``, ``weights``, ``rrf_k``, ``depth``: a min-max or RRF rule of its own):
:func:`check_fusion_shape` recognises it so that loading such a folder says how to rebuild it (docs/app.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..checks import real_in_range
from ..storage import JsonConfig

if TYPE_CHECKING:  # pragma: no cover
    import pyterrier as pt

    from ..fusion import Hybrid

#: ``pfc.Hybrid``'s default lexical share (``fusion.DEFAULT_WEIGHT``, checked equal by the tests), written out so
#: that reading a folder's settings imports neither PyTerrier nor the fusion code (a refused command stays fast)
DEFAULT_WEIGHT = 0.2

NORMALISATIONS = ("zscore", "minmax")
#: the keys of the fusion settings that folders recorded before the hybrid was ``pfc.Hybrid``
FORMER_KEYS = frozenset({"method", "weights", "rrf_k"})


class FormerFusionSettings(ValueError):
    """A manifest records the fusion settings of the rule ``pfc`` used before ``pfc.Hybrid``."""


@dataclass(frozen=True)
class FusionSettings(JsonConfig):
    """How the hybrid fuses TF-IDF and ColBERT: ``pfc.Hybrid(tfidf % depth, colbert % depth, weight, normalise)``.

    ``weight``: the lexical (TF-IDF) share, in [0, 1]; ``normalise``: per-query ``zscore`` (``Hybrid``'s default)
    or ``minmax``; ``depth``: results each system contributes per query. The weight and normalisation are
    ``Hybrid``'s defaults; the depth, 100, scored higher than 1,000 on the SQuAD selection questions and on the fan
    questions of a real game wiki (docs/app.md, "Choosing the hybrid").

    >>> FusionSettings()
    FusionSettings(weight=0.2, normalise='zscore', depth=100)
    >>> FusionSettings(weight=1.5)
    Traceback (most recent call last):
    ...
    ValueError: fusion weight=1.5; expected a number from 0.0 to 1.0 (the lexical (TF-IDF) share)
    """

    weight: float = DEFAULT_WEIGHT
    normalise: str = "zscore"
    depth: int = 100

    def __post_init__(self) -> None:
        object.__setattr__(self, "weight", real_in_range("fusion weight", self.weight, 0.0, 1.0,
                                                         what="the lexical (TF-IDF) share"))
        if self.normalise not in NORMALISATIONS:
            raise ValueError(f"fusion normalise={self.normalise!r}; expected one of {NORMALISATIONS}")
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
            raise ValueError(f"fusion depth={self.depth!r}; expected a positive number of results per system")


def check_fusion_shape(values: Any) -> None:
    """Raise :class:`FormerFusionSettings` when ``values`` (a manifest's ``settings.fusion``) has the former shape.

    >>> check_fusion_shape({"weight": 0.2, "normalise": "zscore", "depth": 100})
    >>> check_fusion_shape({"method": "linear", "weights": [0.5, 0.5], "rrf_k": 60.0, "depth": 100})
    Traceback (most recent call last):
    ...
    pyterrier_fandom_colbert.app.fusion_settings.FormerFusionSettings: fusion settings of the former rule (linear, \
weights [0.5, 0.5])
    """
    if isinstance(values, dict) and FORMER_KEYS & set(values):
        raise FormerFusionSettings(f"fusion settings of the former rule ({values.get('method')}, weights "
                                   f"{values.get('weights')})")


def hybrid_system(tfidf: "pt.Transformer", colbert: "pt.Transformer", settings: FusionSettings) -> "Hybrid":
    """The hybrid of two retrievers (each: a query frame → docno, score, rank) as one retriever: each system's top
    ``depth`` per query fused by ``pfc.Hybrid`` with the settings' weight and normalisation (a document one system
    did not return gets that system's lowest normalised score; the input's columns kept on every row)."""
    from ..fusion import Hybrid

    return Hybrid(tfidf % settings.depth, colbert % settings.depth, weight=settings.weight,
                  normalise=settings.normalise)

