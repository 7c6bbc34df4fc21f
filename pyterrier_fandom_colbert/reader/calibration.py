"""Calibrated answer confidence as pure numpy functions: a logistic map from the reader's score margin and the
passage's rank to the probability that the answer is right, fitted on selection questions, and the expected
calibration error.

The features are the reader's margin (the best span's score, start + end logit, minus the "no answer" score of
``[CLS]``) and the passage's rank among its question's results (0 for the first). :class:`ReaderCalibration` holds
the fitted map and the "nothing relevant" threshold; :func:`fit_logistic` and :func:`fit_logistic_features` fit it
(Newton's method, a small L2 penalty so separable data stays finite).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..storage import JsonConfig
from .spans import sigmoid


def fit_logistic_features(X: np.ndarray, y: np.ndarray, l2: float = 1e-3,
                          iterations: int = 100) -> Tuple[np.ndarray, float]:
    """``(w, b)`` maximising the penalised likelihood of ``P(y=1 | x) = sigmoid(x · w + b)`` for the rows ``x`` of
    ``X [n, f]`` (the intercept is not penalised).

    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(20000, 2)); y = rng.random(20000) < 1 / (1 + np.exp(-(X @ [2.0, -1.0] + 0.5)))
    >>> w, b = fit_logistic_features(X, y); np.round(w, 1).tolist(), round(b, 1)
    ([2.0, -1.0], 0.5)
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or y.ndim != 1 or len(X) != len(y) or len(y) == 0 or not np.isfinite(X).all():
        raise ValueError(f"fit_logistic_features: expected finite X [n, f] and y [n] with n > 0, got shapes "
                         f"{X.shape} and {y.shape}")
    design = np.concatenate([X, np.ones((len(X), 1))], axis=1)
    f = design.shape[1]
    penalty = l2 * np.diag(np.r_[np.ones(f - 1), 0.0])
    w = np.zeros(f)
    n = len(y)
    for _ in range(iterations):
        p = sigmoid(design @ w)
        grad = design.T @ (p - y) / n + penalty @ w
        hess = (design * (p * (1 - p))[:, None]).T @ design / n + penalty + 1e-12 * np.eye(f)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return w[:-1].copy(), float(w[-1])


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-3, iterations: int = 100) -> Tuple[float, float]:
    """``(a, b)`` maximising the penalised likelihood of ``P(y=1 | x) = sigmoid(a·x + b)``.

    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=20000); y = rng.random(20000) < 1 / (1 + np.exp(-(2 * x - 1)))
    >>> a, b = fit_logistic(x, y); round(a, 1), round(b, 1)
    (2.0, -1.0)
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or len(x) == 0:
        raise ValueError(f"fit_logistic: expected two equal-length 1-d arrays, got shapes {x.shape} and {y.shape}")
    w, b = fit_logistic_features(x[:, None], y, l2=l2, iterations=iterations)
    return float(w[0]), b


def reliability(confidence: np.ndarray, correct: np.ndarray, bins: int = 10) -> List[Dict[str, float]]:
    """Per equal-width confidence bin: its range, how many answers fell in it, their mean confidence and
    accuracy (empty bins are left out).

    >>> reliability(np.array([0.05, 0.95, 0.95]), np.array([0, 1, 0]), bins=2)[1]["accuracy"]
    0.5
    """
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1], right=True), 0, bins - 1)
    out = []
    for b in range(bins):
        mask = which == b
        if mask.any():
            out.append({"low": float(edges[b]), "high": float(edges[b + 1]), "count": int(mask.sum()),
                        "confidence": float(confidence[mask].mean()), "accuracy": float(correct[mask].mean())})
    return out


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, bins: int = 10) -> float:
    """Σ over equal-width bins of (share of answers in the bin) × |mean confidence − accuracy|.

    >>> expected_calibration_error(np.array([0.9, 0.9, 0.1, 0.1]), np.array([1, 1, 0, 0]))
    0.1
    >>> expected_calibration_error(np.array([0.75] * 4), np.array([1, 1, 1, 0]))
    0.0
    """
    n = len(np.asarray(confidence))
    if n == 0:
        raise ValueError("expected_calibration_error: no answers")
    return float(round(sum(r["count"] / n * abs(r["confidence"] - r["accuracy"])
                           for r in reliability(confidence, correct, bins)), 12))


@dataclass(frozen=True)
class ReaderCalibration(JsonConfig):
    """``P(right) = sigmoid(slope · margin + rank_slope · rank + intercept)``, ``rank`` the passage's rank among its
    question's results (0 for the first); below ``threshold`` nothing is answered ("nothing relevant").
    ``fitted_on`` and ``command`` say where the numbers come from."""

    slope: float = 1.0
    intercept: float = 0.0
    threshold: float = 0.5
    #: per rank below the first (<= 0: a lower-ranked passage's answer is never more likely right at equal margin)
    rank_slope: float = 0.0
    fitted_on: str = ""
    command: str = ""

    def __post_init__(self) -> None:
        for name in ("slope", "intercept", "threshold", "rank_slope"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"ReaderCalibration.{name}={value!r}; expected a finite number")
        if not self.slope > 0:  # a larger margin over "no answer" must not lower the confidence
            raise ValueError(f"ReaderCalibration.slope={self.slope!r}; expected a positive slope")
        if self.rank_slope > 0:
            raise ValueError(f"ReaderCalibration.rank_slope={self.rank_slope!r}; expected a number <= 0 (a "
                             "lower-ranked passage must not gain confidence)")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"ReaderCalibration.threshold={self.threshold!r}; expected a probability")

    def probability(self, margin: np.ndarray, rank: Optional[np.ndarray] = None) -> np.ndarray:
        """Probability that an answer of reader margin ``margin`` from the passage at ``rank`` (0-based; None: every
        passage its question's first) is right.

        >>> ReaderCalibration(slope=1.0, intercept=0.0).probability(np.array([0.0])).tolist()
        [0.5]
        >>> ReaderCalibration(slope=1.0, rank_slope=-1.0).probability(np.array([1.0, 1.0]), np.array([0, 1])).tolist()
        [0.7310585786300049, 0.5]
        """
        margin = np.asarray(margin, dtype=np.float64)
        ranks = np.zeros(margin.shape) if rank is None else np.asarray(rank, dtype=np.float64)
        if ranks.shape != margin.shape or (ranks < 0).any():
            raise ValueError(f"ReaderCalibration.probability: expected one rank >= 0 per margin, got ranks of shape "
                             f"{ranks.shape} for margins of shape {margin.shape}")
        return sigmoid(self.slope * margin + self.rank_slope * ranks + self.intercept)

    def nothing_relevant(self, probability: float) -> bool:
        return not probability >= self.threshold
