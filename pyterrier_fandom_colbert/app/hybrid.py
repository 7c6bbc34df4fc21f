"""The hybrid system of a search folder: the TF-IDF and ColBERT rankings of a query fused into one.

:func:`hybrid_system` is the one place the app builds it, from the two systems and the folder's
:class:`FusionSettings`. It uses :class:`ScoreFusion` below, a small linear / reciprocal-rank fusion kept here
until the package's ``fusion`` part (``LinearFusion``, ``RRF``, an adaptive ``Hybrid``) is released; then
:func:`hybrid_system` returns that instead, and nothing else in the app changes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Sequence, Tuple

import numpy as np
import pandas as pd
import pyterrier as pt

from ..frames import EqualByKey, empty_output, require_columns
from ..storage import JsonConfig

METHODS = ("linear", "rrf")


@dataclass(frozen=True)
class FusionSettings(JsonConfig):
    """How the hybrid fuses TF-IDF and ColBERT; saved in the folder's manifest.

    ``linear``: ``w_tfidf · minmax(tfidf) + w_colbert · minmax(colbert)`` per query, a document one system did not
    return counting as that system's lowest (0 after min-max); ``rrf``: ``Σ w / (rrf_k + rank)`` (1-based ranks).
    ``depth``: results each system contributes per query.

    >>> FusionSettings(method="mean")
    Traceback (most recent call last):
    ...
    ValueError: fusion method='mean'; expected one of ('linear', 'rrf')
    """

    method: str = "linear"
    weights: Tuple[float, float] = (0.5, 0.5)  # (TF-IDF, ColBERT)
    rrf_k: float = 60.0
    depth: int = 100

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"fusion method={self.method!r}; expected one of {METHODS}")
        weights = tuple(float(w) for w in self.weights)
        if len(weights) != 2 or not all(np.isfinite(weights)) or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(f"fusion weights={list(self.weights)}; expected two non-negative numbers "
                             "(TF-IDF, ColBERT), not both 0")
        object.__setattr__(self, "weights", weights)
        if not (np.isfinite(self.rrf_k) and self.rrf_k >= 0):
            raise ValueError(f"rrf_k={self.rrf_k!r}; expected a non-negative number (60 is usual)")
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
            raise ValueError(f"depth={self.depth!r}; expected a positive number of results per system")


def hybrid_system(tfidf: pt.Transformer, colbert: pt.Transformer, settings: FusionSettings) -> pt.Transformer:
    """The hybrid of two retrievers (each: a query frame → docno, score, rank) as one retriever."""
    return ScoreFusion([tfidf, colbert], settings)


# -- fusion maths (pure functions) -----------------------------------------------------------------------------

def minmax_by_group(scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Scores scaled to [0, 1] within each group (a group whose scores are all equal gets 1).

    >>> minmax_by_group(np.array([3., 1., 2., 5., 5.]), np.array(["a", "a", "a", "b", "b"])).tolist()
    [1.0, 0.0, 0.5, 1.0, 1.0]
    """
    scores = np.asarray(scores, dtype=np.float64)
    codes, unique = pd.factorize(np.asarray(groups))
    low, high = np.full(len(unique), np.inf), np.full(len(unique), -np.inf)
    np.minimum.at(low, codes, scores)
    np.maximum.at(high, codes, scores)
    low, span = low[codes], (high - low)[codes]
    return np.where(span > 0, (scores - low) / np.where(span > 0, span, 1.0), 1.0)


def fuse_scores(per_system: Sequence[np.ndarray], settings: FusionSettings) -> np.ndarray:
    """Fused score of each row from ``[rows]`` arrays per system: a normalised score (linear) or a 0-based rank
    (rrf), NaN where the system did not return the row's document.

    >>> s = FusionSettings(weights=(0.25, 0.75))
    >>> fuse_scores([np.array([1.0, np.nan]), np.array([0.0, 1.0])], s).tolist()
    [0.25, 0.75]
    >>> fuse_scores([np.array([0., np.nan]), np.array([1., 0.])], FusionSettings("rrf", (1, 1), rrf_k=1)).tolist()
    [0.8333333333333333, 0.5]
    """
    total = np.zeros(len(per_system[0]), dtype=np.float64)
    for weight, values in zip(settings.weights, per_system):
        values = np.asarray(values, dtype=np.float64)
        if settings.method == "linear":
            total += weight * np.nan_to_num(values, nan=0.0)
        else:
            total += np.where(np.isnan(values), 0.0, weight / (settings.rrf_k + values + 1.0))
    return total


class ScoreFusion(EqualByKey, pt.Transformer):
    """qid, query (+ any query columns) → + docno, score, rank: the union of the systems' top ``depth`` lists
    per query, scored by :func:`fuse_scores`; the input's columns are kept on every row (e.g. ``query_embs``)."""

    def __init__(self, systems: Sequence[pt.Transformer], settings: FusionSettings = FusionSettings()):
        if len(systems) != len(settings.weights):
            raise ValueError(f"{len(systems)} systems for {len(settings.weights)} fusion weights")
        self.systems = tuple(systems)
        self.settings = settings

    def _key(self) -> Tuple[Any, ...]:
        return (self.systems, self.settings)

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid"], self)
        return list(input_columns) + [c for c in ("docno", "score", "rank") if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid"], self)
        new = [c for c in ("docno", "score", "rank") if c not in inp.columns]
        if len(inp) == 0:
            return empty_output(inp, new)
        depth = self.settings.depth
        qids, docnos, values = [], [], []  # per system: (qid, docno) of its top `depth`, normalised score or rank
        for system in self.systems:
            out = system(inp)
            out = out[out["rank"] < depth] if len(out) else out
            qids.append(out["qid"].astype(str).to_numpy(dtype=object))
            docnos.append(out["docno"].astype(str).to_numpy(dtype=object))
            if self.settings.method == "linear":
                values.append(minmax_by_group(out["score"].to_numpy(dtype=np.float64), qids[-1]))
            else:
                values.append(out["rank"].to_numpy(dtype=np.float64))
        if not sum(map(len, values)):
            return empty_output(inp.iloc[:0], new)
        codes, union = pd.MultiIndex.from_arrays([np.concatenate(qids), np.concatenate(docnos)]).factorize()
        per_system, start = [], 0
        for part in values:  # [union] per system, NaN where the system did not return the document
            column = np.full(len(union), np.nan)
            column[codes[start:start + len(part)]] = part
            per_system.append(column)
            start += len(part)
        result = pd.DataFrame({"qid": union.get_level_values(0), "docno": union.get_level_values(1),
                               "score": fuse_scores(per_system, self.settings)})
        result = result.sort_values(["qid", "score", "docno"], ascending=[True, False, True], kind="stable")
        result["rank"] = result.groupby("qid").cumcount().astype(np.int64)
        base = inp.assign(qid=inp["qid"].astype(str)).drop(columns=[c for c in ("docno", "score", "rank")
                                                                    if c in inp.columns])
        return base.merge(result, on="qid", how="inner").reset_index(drop=True)

    def __repr__(self) -> str:
        s = self.settings
        return (f"ScoreFusion({list(self.systems)!r}, method={s.method!r}, weights={list(s.weights)}, "
                f"depth={s.depth})")
