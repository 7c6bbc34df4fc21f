"""Calibrated answer confidence as pure numpy functions: a logistic map from the reader's score margin to the
probability that the shown answer is right, fitted on selection questions, and the expected calibration error.

The feature is the reader's margin: the best span's score (start + end logit) minus the "no answer" score
(``[CLS]``'s), for the answer shown. :class:`ReaderCalibration` holds the fitted map and the "nothing relevant"
threshold; :func:`fit_logistic` fits it (Newton's method, a small L2 penalty so separable data stays finite).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np

from ..storage import JsonConfig
from .spans import sigmoid


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
    X = np.stack([x, np.ones_like(x)], axis=1)
    w = np.zeros(2)
    n = len(x)
    for _ in range(iterations):
        p = sigmoid(X @ w)
        grad = X.T @ (p - y) / n + l2 * np.array([w[0], 0.0])
        hess = (X * (p * (1 - p))[:, None]).T @ X / n + l2 * np.diag([1.0, 0.0]) + 1e-12 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(w[0]), float(w[1])


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
    """``P(right) = sigmoid(slope · margin + intercept)``; below ``threshold`` nothing is answered ("nothing
    relevant"). ``fitted_on`` and ``command`` say where the numbers come from."""

    slope: float = 1.0
    intercept: float = 0.0
    threshold: float = 0.5
    fitted_on: str = ""
    command: str = ""

    def probability(self, margin: np.ndarray) -> np.ndarray:
        """Probability that an answer of reader margin ``margin`` is right.

        >>> ReaderCalibration(slope=1.0, intercept=0.0).probability(np.array([0.0])).tolist()
        [0.5]
        """
        return sigmoid(self.slope * np.asarray(margin, dtype=np.float64) + self.intercept)

    def nothing_relevant(self, probability: float) -> bool:
        return not probability >= self.threshold
