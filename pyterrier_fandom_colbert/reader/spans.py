"""Span arithmetic of an extractive reader as pure functions: windows over long passages, answer spans from
start/end logits, and character offsets to token positions."""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np


def windows(n_tokens: int, size: int, stride: int) -> List[Tuple[int, int]]:
    """Token ranges ``(start, end)`` of at most ``size`` tokens, ``stride`` apart, covering ``0 … n_tokens``; the
    last window ends at ``n_tokens``. One (possibly empty) window for a text that fits.

    >>> windows(5, 8, 4)
    [(0, 5)]
    >>> windows(10, 4, 3)
    [(0, 4), (3, 7), (6, 10)]
    >>> windows(0, 4, 2)
    [(0, 0)]
    """
    if size < 1 or stride < 1 or stride > size:
        raise ValueError(f"windows(size={size}, stride={stride}): expected 1 <= stride <= size")
    if n_tokens <= size:
        return [(0, n_tokens)]
    out, start = [], 0
    while True:
        end = min(start + size, n_tokens)
        out.append((start, end))
        if end == n_tokens:
            return out
        start += stride


def token_span(offsets: np.ndarray, start_char: int, end_char: int) -> Optional[Tuple[int, int]]:
    """Inclusive token positions ``(first, last)`` covering characters ``[start_char, end_char)`` of a text whose
    tokens have character ``offsets [n, 2]``; None when no token overlaps.

    >>> token_span(np.array([[0, 3], [4, 9], [10, 12]]), 4, 12)
    (1, 2)
    >>> token_span(np.array([[0, 3], [4, 9]]), 5, 6)
    (1, 1)
    >>> token_span(np.array([[0, 3]]), 5, 6) is None
    True
    """
    overlap = (offsets[:, 1] > start_char) & (offsets[:, 0] < end_char)
    hits = np.flatnonzero(overlap)
    if len(hits) == 0:
        return None
    return int(hits[0]), int(hits[-1])


def best_span(start_logits: np.ndarray, end_logits: np.ndarray, valid: np.ndarray,
              max_tokens: int) -> Tuple[int, int, float]:
    """The span ``(i, j, start_logits[i] + end_logits[j])`` with ``i <= j < i + max_tokens`` and both positions
    ``valid``, of largest score (the earliest among equals). ``(-1, -1, -inf)`` when no position is valid.

    >>> s = np.array([0., 5, 1, 0]); e = np.array([0., 0, 1, 4]); v = np.array([False, True, True, True])
    >>> best_span(s, e, v, max_tokens=3)
    (1, 3, 9.0)
    >>> best_span(s, e, v, max_tokens=2)
    (1, 2, 6.0)
    >>> best_span(s, e, np.zeros(4, bool), 3)
    (-1, -1, -inf)
    """
    start = np.where(valid, start_logits, -np.inf).astype(np.float64)
    end = np.where(valid, end_logits, -np.inf).astype(np.float64)
    n = len(start)
    if n == 0 or not valid.any():
        return -1, -1, float("-inf")
    scores = start[:, None] + end[None, :]
    i, j = np.indices((n, n))
    scores[(j < i) | (j >= i + max_tokens)] = -np.inf
    flat = int(np.argmax(scores))
    best = float(scores.flat[flat])
    if best == -np.inf:
        return -1, -1, best
    return flat // n, flat % n, best


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function, stable for large ``|x|``.

    >>> sigmoid(np.array([0.0, 1000.0, -1000.0])).round(3).tolist()
    [0.5, 1.0, 0.0]
    """
    x = np.asarray(x, dtype=np.float64)
    return np.exp(-np.logaddexp(0.0, -x))
