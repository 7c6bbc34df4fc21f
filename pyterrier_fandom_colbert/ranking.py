"""Ranking arrays: the one ``top_k`` used by every retriever (pure numpy)."""
from __future__ import annotations

import numpy as np


def top_k(scores: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` best entries, by score descending then id ascending (exact at the cut-off).

    >>> top_k(np.array([1.0, 3.0, 3.0, 2.0]), np.array([7, 9, 4, 1]), 2).tolist()
    [2, 1]
    >>> top_k(np.array([0.5, 0.9, 0.5]), np.array([4, 2, 9]), 5).tolist()
    [1, 0, 2]
    """
    scores, ids = np.asarray(scores), np.asarray(ids)
    if k < len(scores):
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        cand = np.flatnonzero(scores >= kth)
    else:
        cand = np.arange(len(scores))
    return cand[np.lexsort((ids[cand], -scores[cand]))][:k]
