"""Score fusion as pure functions over arrays: per-query normalisation, weighted sums, reciprocal ranks.

Rows belong to queries through integer ``groups`` (0 … n_groups-1, in any order), the way the transformers in
:mod:`.transformers` lay out a result frame. Nothing here knows about DataFrames.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np

NORMALISATIONS = ("minmax", "zscore", None)
#: ``missing=`` policies besides a constant: the system's lowest normalised score for the query, or 0
MISSING_POLICIES = ("min", "zero")


def group_min(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Per-group minimum; ``nan`` for a group without rows.

    >>> group_min(np.array([3., 1., 5.]), np.array([0, 0, 2]), 3)
    array([ 1., nan,  5.])
    """
    out = np.full(n_groups, np.inf)
    np.minimum.at(out, groups, values)
    out[np.isinf(out)] = np.nan
    return out


def group_max(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Per-group maximum; ``nan`` for a group without rows.

    >>> group_max(np.array([3., 1., 5.]), np.array([0, 0, 2]), 3)
    array([ 3., nan,  5.])
    """
    return -group_min(-values, groups, n_groups)


def group_mean_std(values: np.ndarray, groups: np.ndarray, n_groups: int):
    """Per-group mean and population standard deviation (``nan`` for a group without rows).

    >>> mean, std = group_mean_std(np.array([1., 3., 7.]), np.array([0, 0, 1]), 2)
    >>> mean.tolist(), std.tolist()
    ([2.0, 7.0], [1.0, 0.0])
    """
    counts = np.bincount(groups, minlength=n_groups).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(groups, weights=values, minlength=n_groups) / counts
        centred = values - mean[groups]
        var = np.bincount(groups, weights=centred * centred, minlength=n_groups) / counts
    return mean, np.sqrt(var)


def minmax(scores: np.ndarray, groups: np.ndarray, n_groups: Optional[int] = None) -> np.ndarray:
    """Per-query min-max scaling to [0, 1]: ``(s - min) / (max - min)``. A query whose scores are all equal (one
    result, or ties) gives 1 for each: every document of that list is its best.

    >>> minmax(np.array([10., 20., 15., 4., 4.]), np.array([0, 0, 0, 1, 1]))
    array([0. , 1. , 0.5, 1. , 1. ])
    """
    scores = np.asarray(scores, dtype=np.float64)
    n_groups = int(groups.max()) + 1 if n_groups is None and len(groups) else (n_groups or 0)
    lo, hi = group_min(scores, groups, n_groups), group_max(scores, groups, n_groups)
    span = (hi - lo)[groups]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (scores - lo[groups]) / span
    out[span <= 0] = 1.0
    return out


def zscore(scores: np.ndarray, groups: np.ndarray, n_groups: Optional[int] = None) -> np.ndarray:
    """Per-query standardisation: ``(s - mean) / std`` (population std). A query whose scores are all equal gives 0.

    >>> zscore(np.array([1., 3., 2., 5.]), np.array([0, 0, 0, 1]))
    array([-1.22474487,  1.22474487,  0.        ,  0.        ])
    """
    scores = np.asarray(scores, dtype=np.float64)
    n_groups = int(groups.max()) + 1 if n_groups is None and len(groups) else (n_groups or 0)
    mean, std = group_mean_std(scores, groups, n_groups)
    sd = std[groups]
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (scores - mean[groups]) / sd
    out[sd <= 0] = 0.0
    return out


def normalise(scores: np.ndarray, groups: np.ndarray, method: Optional[str],
              n_groups: Optional[int] = None) -> np.ndarray:
    """``minmax``, ``zscore`` or ``None`` (scores unchanged, as float64).

    >>> normalise(np.array([2., 4.]), np.array([0, 0]), "minmax").tolist()
    [0.0, 1.0]
    """
    check_normalisation(method)
    if method is None:
        return np.asarray(scores, dtype=np.float64).copy()
    return (minmax if method == "minmax" else zscore)(scores, groups, n_groups)


def check_normalisation(method: Optional[str]) -> None:
    if method not in NORMALISATIONS:
        raise ValueError(f"normalise={method!r}: expected one of {list(NORMALISATIONS)}")


def check_missing(missing: Union[str, float]) -> None:
    if isinstance(missing, str):
        if missing not in MISSING_POLICIES:
            raise ValueError(f"missing={missing!r}: expected one of {list(MISSING_POLICIES)} or a number")
    elif not isinstance(missing, (int, float)) or not np.isfinite(missing):
        raise ValueError(f"missing={missing!r}: expected one of {list(MISSING_POLICIES)} or a finite number")


def fill_missing(matrix: np.ndarray, groups: np.ndarray, n_groups: int, missing: Union[str, float]) -> np.ndarray:
    """Replace the ``nan`` cells of a ``[rows, systems]`` score matrix (documents a system did not return).

    ``missing="min"``: the lowest score that system gave any document of the same query (the document counts as
    tied with the system's last result); ``"zero"``: 0; a number: that number. A system that returned nothing for a
    query contributes 0 to each of its documents under every policy (a constant, so it does not change that
    query's ranking).

    >>> m = np.array([[0.9, np.nan], [0.2, 0.7], [np.nan, 0.1]])
    >>> fill_missing(m, np.array([0, 0, 0]), 1, "min").tolist()
    [[0.9, 0.1], [0.2, 0.7], [0.2, 0.1]]
    >>> fill_missing(m, np.array([0, 0, 0]), 1, "zero").tolist()
    [[0.9, 0.0], [0.2, 0.7], [0.0, 0.1]]
    """
    check_missing(missing)
    out = np.array(matrix, dtype=np.float64, copy=True)
    for j in range(out.shape[1]):
        col, absent = out[:, j], np.isnan(out[:, j])
        if not absent.any():
            continue
        if missing == "min":
            present = ~absent
            floor = group_min(col[present], groups[present], n_groups)
            fill = np.nan_to_num(floor[groups[absent]], nan=0.0)
        else:
            fill = 0.0 if missing == "zero" else float(missing)
        col[absent] = fill
    return out


def weighted_sum(matrix: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """Row-wise ``Σ_j w_j · matrix[:, j]`` (a linear combination of the systems' scores).

    >>> weighted_sum(np.array([[1., 0.], [0.5, 0.5]]), [0.25, 0.75]).tolist()
    [0.25, 0.5]
    """
    w = np.asarray(weights, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[1] != len(w):
        raise ValueError(f"{len(w)} weight(s) for a score matrix of shape {matrix.shape}")
    return matrix @ w


def reciprocal_ranks(ranks: np.ndarray, k: float = 60) -> np.ndarray:
    """Reciprocal-rank-fusion contribution of 0-based PyTerrier ranks: ``1 / (k + rank + 1)``, i.e. ``1 / (k + r)``
    for the 1-based rank r of Cormack et al. (2009). ``nan`` ranks (not retrieved) contribute 0.

    >>> reciprocal_ranks(np.array([0, 1, np.nan]), k=1).tolist()
    [0.5, 0.3333333333333333, 0.0]
    """
    ranks = np.asarray(ranks, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = 1.0 / (k + ranks + 1.0)
    return np.nan_to_num(out, nan=0.0)


def ranks_within(scores: np.ndarray, groups: np.ndarray, tiebreak: Optional[np.ndarray] = None) -> np.ndarray:
    """0-based rank of each row within its group by descending score (``tiebreak`` ascending breaks ties, then row
    order).

    >>> ranks_within(np.array([0.1, 0.9, 0.5, 0.3]), np.array([0, 0, 0, 1])).tolist()
    [2, 0, 1, 0]
    """
    keys = [np.arange(len(scores))] + ([tiebreak] if tiebreak is not None else []) + [-np.asarray(scores), groups]
    order = np.lexsort(keys)
    sorted_groups = groups[order]
    starts = np.r_[0, np.flatnonzero(sorted_groups[1:] != sorted_groups[:-1]) + 1]
    run = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    out = np.empty(len(order), dtype=np.int64)
    out[order] = run
    return out
