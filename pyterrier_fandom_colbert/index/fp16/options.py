"""The fp16 retriever's options a search folder fixes (:class:`Fp16Options`: ``k_hat``, ``faiss``, ``refine``),
and their check, which the retriever itself applies (:func:`check_neighbour_search`). Light: it loads neither
PyTerrier nor FAISS, so a command can refuse bad options before anything heavy loads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from ...checks import positive_int
from ...storage import JsonConfig
from ..ann import FaissSpec


def check_neighbour_search(k_hat: Optional[int], spec: FaissSpec, nprobe: Optional[int],
                           refine: int) -> Tuple[Optional[int], int]:
    """``(nprobe, refine)`` of a neighbour search by ``spec`` fetching ``k_hat`` token neighbours per query vector
    (None: the retriever's default), after refusing what the kind does not accept (``nprobe`` defaulted).

    >>> check_neighbour_search(64, FaissSpec("ivf"), None, 1)
    (32, 1)
    >>> check_neighbour_search(64, FaissSpec("flat"), None, 4)
    Traceback (most recent call last):
    ...
    ValueError: refine=4; above 1 applies only to faiss in ('ivf', 'ivfpq', 'ivfpq-fs'): faiss='exact' neighbours ...
    """
    positive_int("k_hat", k_hat, none=True, what="token neighbours per query vector")
    return spec.ann_kind.search_options(nprobe, refine)  # the kind refuses what it does not accept


@dataclass(frozen=True)
class Fp16Options(JsonConfig):
    """What a search folder's fp16 ColBERT index is searched with: ``k_hat`` token neighbours per query vector
    (None: the retriever's default for the depth asked), by the neighbour index ``faiss`` (``flat``: exact, every
    token vector read per query, or a FAISS kind, docs/index.md; IVF halves the hybrid's latency on a 1,000-page
    wiki with the same top 10, docs/app.md), ``refine`` times as many fetched and re-ranked by the stored vectors.
    Checked as the retriever checks them.

    >>> Fp16Options(k_hat=32).to_retriever_kwargs()
    {'k_hat': 32, 'faiss': 'ivf', 'refine': 1}
    >>> Fp16Options(k_hat=0)
    Traceback (most recent call last):
    ...
    ValueError: k_hat=0; expected a positive integer or None (token neighbours per query vector)
    """

    k_hat: Optional[int] = 64
    faiss: str = "ivf"
    refine: int = 1

    def __post_init__(self) -> None:
        check_neighbour_search(self.k_hat, FaissSpec(self.faiss), None, self.refine)

    def to_retriever_kwargs(self) -> Dict[str, Any]:
        """The options as ``ColBERTIndex.retriever()`` takes them."""
        return {"k_hat": self.k_hat, "faiss": self.faiss, "refine": self.refine}
