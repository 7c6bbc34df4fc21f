"""Short answers and calibrated confidence (explain/answer.py): the best window against a brute-force search, its
length bound, a hand-computable case, the logistic fit and the calibration's monotonicity and threshold."""
import itertools
import math

import numpy as np
import pytest

from pyterrier_fandom_colbert.explain.answer import (
    CALIBRATION,
    MAX_ANSWER_WORDS,
    AnswerCalibration,
    best_window,
    fit_logistic,
    logistic,
    mean_maxsim,
    short_answer_words,
)


def brute_force_window(scores, max_words, penalty):
    """Every window of 1..max_words words, the largest sum; ties: shortest, then earliest."""
    best = None
    for width in range(1, min(max_words, len(scores)) + 1):
        for start in range(len(scores) - width + 1):
            total = sum(s - penalty for s in scores[start:start + width])
            if best is None or total > best[0] + 1e-12:
                best = (total, start, start + width)
    return best[1:]


def test_best_window_is_the_brute_force_best_and_never_longer_than_allowed():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        scores = rng.exponential(size=n) * (rng.random(n) < 0.6)
        max_words = int(rng.integers(1, 15))
        penalty = float(rng.choice([0.0, 0.3, 1.0, 2.0]))
        span = best_window(scores, max_words, penalty)
        assert 1 <= span[1] - span[0] <= max_words and 0 <= span[0] < span[1] <= n
        assert span == brute_force_window(scores.tolist(), max_words, penalty)


def test_short_answer_picks_the_hand_computed_best_window():
    # twenty words; the evidence sits on words 5-7 (0.9, 1.0, 0.8) with a weaker bump at 14 (0.5); the mean
    # density is (0.9 + 1.0 + 0.8 + 0.5 + 16 · 0.05) / 20 = 0.2: with penalty 1 each word costs 0.2, so words 5-7
    # give 2.1, adding word 4 or 8 (0.05 - 0.2) lowers the sum, and word 14 alone gives only 0.3
    density = np.full(20, 0.05)
    density[[5, 6, 7, 14]] = [0.9, 1.0, 0.8, 0.5]
    assert short_answer_words(density, max_words=12, penalty=1.0) == (5, 8)
    assert short_answer_words(density, max_words=2, penalty=1.0) == (5, 7)  # 1.9 against 1.8 for words 6-7
    # no penalty: as long as allowed; words 3-14 are the earliest twelve holding both bumps
    assert short_answer_words(density, max_words=12, penalty=0.0) == (3, 15)
    assert short_answer_words(density, max_words=12, penalty=1.0, within=(10, 20)) == (14, 15)
    assert short_answer_words(np.zeros(5)) is None and short_answer_words(density, within=(3, 3)) is None


def test_short_answers_stay_within_the_word_limit_on_long_flat_evidence():
    flat = np.ones(200)
    for penalty in (0.0, 0.5, 0.99):
        start, end = short_answer_words(flat, penalty=penalty)
        assert end - start == MAX_ANSWER_WORDS
    with pytest.raises(ValueError, match="max_words=0"):
        best_window(flat, 0)


def test_mean_maxsim_is_each_query_vectors_best_similarity_averaged():
    sim = np.array([[0.1, 0.4, np.nan, 0.3], [0.9, -0.2, np.nan, 0.0], [0.2, 0.25, np.nan, 0.5]])
    assert mean_maxsim(sim) == pytest.approx((0.4 + 0.9 + 0.5) / 3)
    assert math.isnan(mean_maxsim(np.zeros((0, 3))))


def test_fit_logistic_recovers_the_parameters_that_generated_the_labels():
    rng = np.random.default_rng(1)
    x = rng.uniform(0.3, 1.0, size=20000)
    y = (rng.random(x.size) < logistic(-12.0 + 18.0 * x)).astype(int)
    intercept, slope = fit_logistic(x, y, l2=0.0)
    assert intercept == pytest.approx(-12.0, rel=0.08) and slope == pytest.approx(18.0, rel=0.08)
    gap = -rng.exponential(0.1, size=x.size)  # two features, as the shipped calibration has
    y2 = (rng.random(x.size) < logistic(-12.0 + 18.0 * x + 30.0 * gap)).astype(int)
    fitted = fit_logistic(np.stack([x, gap], axis=1), y2, l2=0.0)
    assert fitted == pytest.approx((-12.0, 18.0, 30.0), rel=0.12)
    with pytest.raises(ValueError, match="both labels"):
        fit_logistic(x, np.zeros_like(y))


def test_confidence_is_monotone_and_the_threshold_decides_nothing_relevant():
    for calibration in (CALIBRATION, AnswerCalibration(intercept=-3.0, slope=5.0, gap_slope=2.0, threshold=0.3)):
        grid = np.linspace(-1.0, 1.0, 401)
        confidences = [calibration.confidence(s) for s in grid]
        assert all(a <= b for a, b in itertools.pairwise(confidences))
        assert all(0.0 <= c <= 1.0 for c in confidences) and confidences[0] < confidences[-1]
        assert calibration.confidence(float("nan")) == 0.0
        # a passage further below the question's best match never gains confidence
        gaps = [calibration.confidence(0.6, best) for best in np.linspace(0.6, 1.0, 41)]
        assert all(a >= b for a, b in itertools.pairwise(gaps))
        t = calibration.threshold
        assert calibration.nothing_relevant([]) and calibration.nothing_relevant([t - 1e-6, 0.0])
        assert not calibration.nothing_relevant([0.0, t])
    with pytest.raises(ValueError, match="slope"):
        AnswerCalibration(intercept=0.0, slope=-1.0, threshold=0.5)
    with pytest.raises(ValueError, match="gap_slope"):
        AnswerCalibration(intercept=0.0, slope=1.0, gap_slope=-1.0, threshold=0.5)
    with pytest.raises(ValueError, match="threshold"):
        AnswerCalibration(intercept=0.0, slope=1.0, threshold=1.0)
