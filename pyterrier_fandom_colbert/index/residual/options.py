"""The residual retriever's options a search folder fixes (:class:`ResidualOptions`: ``ndocs``, ``nscore``), and
their check, which the retriever's ``SearchParams`` applies too (:func:`check_pruning`). Light: it loads neither
PyTerrier nor FAISS, so a command can refuse bad options before anything heavy loads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from ...checks import positive_int
from ...storage import JsonConfig


def check_pruning(ndocs: Optional[int], nscore: Optional[int]) -> None:
    """Refuse ``ndocs`` (documents kept by the pruned centroid interaction) or ``nscore`` (documents then scored
    exactly) that is not a positive number or None.

    >>> check_pruning(256, 0)
    Traceback (most recent call last):
    ...
    ValueError: nscore=0; expected a positive integer or None (documents scored exactly)
    """
    positive_int("ndocs", ndocs, none=True, what="documents kept by the pruned centroid interaction")
    positive_int("nscore", nscore, none=True, what="documents scored exactly")


@dataclass(frozen=True)
class ResidualOptions(JsonConfig):
    """What a search folder's residual ColBERT index is searched with: centroid search's ``ndocs`` documents kept
    after the pruned centroid interaction and ``nscore`` documents scored exactly (None: the retriever's defaults
    for the depth asked, ``SearchParams.for_k``, docs/index.md). Checked as the retriever checks them.

    >>> ResidualOptions().to_retriever_kwargs(), ResidualOptions(ndocs=512).to_retriever_kwargs()
    ({}, {'ndocs': 512})
    """

    ndocs: Optional[int] = None
    nscore: Optional[int] = None

    def __post_init__(self) -> None:
        check_pruning(self.ndocs, self.nscore)

    def to_retriever_kwargs(self) -> Dict[str, Any]:
        """The options given, as ``ColBERTIndex.retriever()`` takes them (those not given take its defaults)."""
        return {name: value for name, value in (("ndocs", self.ndocs), ("nscore", self.nscore)) if value is not None}
