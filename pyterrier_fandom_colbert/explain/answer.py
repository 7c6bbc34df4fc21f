"""A short answer and a calibrated confidence for an explained passage, as pure numpy functions.

* **short answer**: the window of at most ``max_words`` consecutive words with the most evidence, where a word's
  evidence is its KDE density (the density of the query vectors' matched positions, :mod:`.relevance`) minus a
  penalty per word (``penalty`` × the passage's mean word density), so the window is only as long as the
  evidence is dense (:func:`best_window`, :func:`short_answer_words`);
* **confidence**: the probability that the passage answers the question, a logistic function of the passage's
  mean MaxSim (each scoring query vector's best similarity in the passage, averaged: :func:`mean_maxsim`), fitted
  on development questions (:class:`AnswerCalibration`, :data:`CALIBRATION`);
* **nothing relevant**: when no result's confidence reaches the calibration's threshold
  (:meth:`AnswerCalibration.nothing_relevant`).

:data:`CALIBRATION` holds the shipped parameters with the data and command that fitted them; they belong to the
default checkpoint (another encoder's similarities need their own fit). Measurements: docs/explain.md.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

from ..storage import JsonConfig

#: the longest short answer, in words
MAX_ANSWER_WORDS = 12


def best_window(scores: np.ndarray, max_words: int = MAX_ANSWER_WORDS,
                penalty: float = 0.0) -> Optional[Tuple[int, int]]:
    """Word span ``(start, end)`` (end exclusive) of at most ``max_words`` words with the largest
    ``Σ (scores[i] − penalty)``; among equal sums the shortest, then the earliest. ``None`` for no words; NaN
    scores count as 0. With ``penalty`` 0 and non-negative scores the window is as long as allowed.

    >>> best_window(np.array([0., 1, 3, 1, 0, 2]), max_words=2)
    (1, 3)
    >>> best_window(np.array([0., 1, 3, 1, 0, 2]), max_words=3, penalty=1.5)
    (2, 3)
    >>> best_window(np.array([]), 3) is None
    True
    """
    if isinstance(max_words, bool) or not isinstance(max_words, (int, np.integer)) or max_words < 1:
        raise ValueError(f"max_words={max_words!r}; expected a positive number of words")
    values = np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=0.0) - float(penalty)
    n = len(values)
    if n == 0:
        return None
    prefix = np.concatenate([[0.0], np.cumsum(values)])
    best: Tuple[float, int, int] = (-math.inf, 0, 1)
    for width in range(1, min(int(max_words), n) + 1):  # shortest first: a longer window must be strictly better
        sums = prefix[width:] - prefix[:-width]
        start = int(np.argmax(sums))  # earliest of the maxima
        if sums[start] > best[0] + 1e-12:
            best = (float(sums[start]), start, start + width)
    return best[1], best[2]


def short_answer_words(word_kde: np.ndarray, max_words: int = MAX_ANSWER_WORDS, penalty: float = 1.0,
                       within: Optional[Tuple[int, int]] = None,
                       matched: Optional[np.ndarray] = None) -> Optional[Tuple[int, int]]:
    """The short answer's word span: :func:`best_window` over the words' KDE density, less ``penalty`` × the mean
    density of the passage's words per word. ``within``: a word range ``(start, end)`` the span must lie in (the
    likely-answer region, so that the short answer sits inside the long highlight); ``matched``: words that count
    no evidence of their own (a boolean per word: the question's own words found in the passage, which surround
    an answer rather than being it), unless no other word there has any. ``None`` when no word there has positive
    density.

    >>> short_answer_words(np.array([0.1, 0.1, 0.9, 0.8, 0.1, 0.1]), max_words=4)
    (2, 4)
    >>> short_answer_words(np.array([0.1, 0.1, 0.9, 0.8, 0.1, 0.1]), max_words=4, within=(3, 6))
    (3, 4)
    >>> short_answer_words(np.array([0.1, 0.1, 0.9, 0.8, 0.1, 0.1]), max_words=4,
    ...                    matched=np.array([0, 0, 1, 0, 0, 0], bool))
    (3, 4)
    >>> short_answer_words(np.array([0.1, 0.9, 0.8]), max_words=4, within=(1, 3), matched=np.ones(3, bool))
    (1, 3)
    >>> short_answer_words(np.zeros(3)) is None
    True
    """
    density = np.nan_to_num(np.asarray(word_kde, dtype=np.float64), nan=0.0)
    cost = penalty * float(density.mean()) if len(density) else 0.0
    first, last = (0, len(density)) if within is None else (max(0, int(within[0])), min(len(density), int(within[1])))
    if last <= first or not (density[first:last] > 0).any():
        return None
    if matched is not None:
        unmatched = np.where(np.asarray(matched, dtype=bool), 0.0, density)
        if (unmatched[first:last] > 0).any():
            density = unmatched
    span = best_window(density[first:last], max_words, cost)
    return None if span is None else (first + span[0], first + span[1])


def mean_maxsim(sim: np.ndarray) -> float:
    """Mean over the query vectors (rows) of their best similarity in the passage (NaN columns: tokens without a
    scoring vector): the MaxSim score divided by the number of scoring query vectors. NaN for an empty matrix.

    >>> mean_maxsim(np.array([[0.2, 0.9, np.nan], [0.5, 0.1, np.nan]]))
    0.7
    """
    sim = np.asarray(sim, dtype=np.float64)
    if sim.ndim != 2 or sim.size == 0 or np.isnan(sim).all(axis=1).any():
        return math.nan
    return round(float(np.nanmax(sim, axis=1).mean()), 12)


def logistic(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(−x))`` without overflow.

    >>> logistic(np.array([0.0, 800.0, -800.0])).tolist()
    [0.5, 1.0, 0.0]
    """
    x = np.asarray(x, dtype=np.float64)
    return np.exp(-np.logaddexp(0.0, -x))


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-6, steps: int = 100) -> Tuple[float, ...]:
    """``(intercept, slope, …)`` of ``P(y = 1 | x) = logistic(intercept + x · slopes)`` (``x``: one value or a row of
    features per example) by Newton's method on the log-likelihood with a small ridge ``l2`` on the slopes (finite
    on separable data).

    >>> a, b = fit_logistic(np.array([0., 0, 1, 1, 2, 2]), np.array([0, 0, 0, 1, 1, 1]))
    >>> round(-a / b, 3)  # the 50% point lies between the classes
    1.0
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    features = x.reshape(len(x), -1) if x.ndim in (1, 2) else None
    if features is None or y.ndim != 1 or len(features) != len(y) or len(y) < 2:
        raise ValueError(f"x must be 1-D or 2-D with one row per label, y 1-D (at least 2); got {x.shape} and "
                         f"{y.shape}")
    if not np.isin(y, (0.0, 1.0)).all() or y.min() == y.max():
        raise ValueError("y must hold both labels 0 and 1, and nothing else")
    # the reader's fit (mean log-likelihood with a ridge l2 on the slopes: the same optimum and Newton steps)
    from ..reader.calibration import fit_logistic_features

    slopes, intercept = fit_logistic_features(features, y, l2=l2, iterations=steps)
    w = np.r_[intercept, slopes]
    return tuple(float(v) for v in w)


@dataclass(frozen=True)
class AnswerCalibration(JsonConfig):
    """``confidence = logistic(intercept + slope · s + gap_slope · (s − best))``: the probability that a passage
    answers the question, ``s`` its mean MaxSim and ``best`` the highest among the question's results (so the gap
    is 0 for the best-matching result and negative for the others); below ``threshold`` for every result, nothing
    found seems to answer it. ``fitted_on`` and ``command`` say where the numbers come from.

    >>> c = AnswerCalibration(intercept=-8.0, slope=10.0, gap_slope=20.0, threshold=0.5)
    >>> round(c.confidence(0.8), 3), round(c.confidence(0.8, best=0.9), 3)
    (0.5, 0.119)
    >>> c.nothing_relevant([0.1, 0.3]), c.nothing_relevant([0.1, 0.6])
    (True, False)
    """

    intercept: float
    slope: float
    threshold: float
    #: weight of the gap to the question's best-matching result (0: a passage's confidence ignores the others)
    gap_slope: float = 0.0
    penalty: float = 1.0
    max_words: int = MAX_ANSWER_WORDS
    #: the question's own words (each query word piece's best match) count no evidence for the short answer (measured
    #: worse on the SQuAD selection part: docs/explain.md)
    skip_matched: bool = False
    fitted_on: str = ""
    command: str = ""

    def __post_init__(self) -> None:
        for name in ("intercept", "slope", "gap_slope", "threshold", "penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"AnswerCalibration {name}={value!r}; expected a finite number")
            object.__setattr__(self, name, float(value))
        if self.slope <= 0:
            raise ValueError(f"AnswerCalibration slope={self.slope!r}; expected a positive number (a better match "
                             "must not lower the confidence)")
        if self.gap_slope < 0:
            raise ValueError(f"AnswerCalibration gap_slope={self.gap_slope!r}; expected a number >= 0 (a passage "
                             "closer to the best match must not lose confidence)")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"AnswerCalibration threshold={self.threshold!r}; expected a probability in (0, 1)")
        if isinstance(self.max_words, bool) or not isinstance(self.max_words, int) or self.max_words < 1:
            raise ValueError(f"AnswerCalibration max_words={self.max_words!r}; expected a positive number of words")

    def confidence(self, mean_similarity: float, best: Optional[float] = None) -> float:
        """The calibrated probability for a passage of this mean MaxSim when the question's best-matching result
        has ``best`` (None: this one is the best); 0 for NaN (nothing was matched)."""
        if not math.isfinite(mean_similarity):
            return 0.0
        gap = 0.0 if best is None or not math.isfinite(best) else min(0.0, mean_similarity - best)
        return float(logistic(np.array(self.intercept + self.slope * mean_similarity + self.gap_slope * gap)))

    def nothing_relevant(self, confidences: Sequence[float]) -> bool:
        """True when no confidence reaches the threshold (also for no results at all)."""
        return not any(c >= self.threshold for c in confidences)


#: the shipped calibration, for the default checkpoint: the penalty with the shortest spans within 2 points of the
#: best overlap, the logistic fit, and the highest threshold with at most 2% false "nothing relevant" (docs/explain.md)
CALIBRATION = AnswerCalibration(
    intercept=-14.4986, slope=23.2764, gap_slope=72.1608, threshold=0.24, penalty=1.0, max_words=MAX_ANSWER_WORDS,
    skip_matched=False,
    fitted_on="SQuAD v1.1, the evaluation protocol's selection part (300 of its 628 questions, drawn with seed 0), "
              "each question's 10 hybrid results (each system's top 100 fused) through residual2 search folders: "
              "against all 1,393 paragraphs (answerable; the gold paragraph is the one positive) and against the "
              "338 dev paragraphs alone (unanswerable); the default checkpoint",
    command="python benchmarks/short_answer_eval.py --fit --sample 300 --max-false-nothing 0.02 "
            "--penalties 0 0.5 1 1.5 2 3")
