"""Ranking, once for the whole package: the exact ``top_k`` every retriever cuts with, the concatenation of index
slices that inverted lists are read through, and the result frames that number the ranks (``rank`` from 0 within
a qid). The array functions are pure numpy; the frame builders only lay their arrays out as a PyTerrier frame.
"""
from __future__ import annotations

from typing import Any, Callable, List, Mapping, NamedTuple, Optional, Protocol, Sequence, Tuple

import numpy as np
import pandas as pd


def top_k(scores: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` best entries, by score descending then id ascending (exact at the cut-off: every
    entry tied with the ``k``-th is a candidate before the ids decide).

    >>> top_k(np.array([1.0, 3.0, 3.0, 2.0]), np.array([7, 9, 4, 1]), 2).tolist()
    [2, 1]
    >>> top_k(np.array([1.0, 3.0, 3.0, 2.0]), np.array([1, 4, 7, 9]), 3).tolist()   # ascending ids
    [1, 2, 3]
    >>> top_k(np.array([0.5, 0.9, 0.5]), np.array([4, 2, 9]), 5).tolist()          # k beyond the entries
    [1, 0, 2]
    >>> top_k(np.zeros(0), np.zeros(0, np.int64), 3).tolist()
    []
    """
    scores, ids = np.asarray(scores), np.asarray(ids)
    if k < len(scores):
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        cand = np.flatnonzero(scores >= kth)
    else:
        cand = np.arange(len(scores))
    cand_ids = ids[cand]
    if len(cand_ids) < 2 or bool((cand_ids[1:] > cand_ids[:-1]).all()):  # already in id order: one stable sort
        return cand[np.argsort(-scores[cand], kind="stable")][:k]
    return cand[np.lexsort((cand_ids, -scores[cand]))][:k]


def concat_slices(starts: np.ndarray, ends: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Indices of the slices ``[starts[i], ends[i])`` end to end (int64), and the slice each index came from.

    >>> idx, which = concat_slices(np.array([5, 0, 9]), np.array([7, 0, 10]))
    >>> idx.tolist(), which.tolist()
    ([5, 6, 9], [0, 0, 2])
    >>> [a.tolist() for a in concat_slices(np.zeros(0, np.int64), np.zeros(0, np.int64))]
    [[], []]
    """
    starts, ends = np.asarray(starts), np.asarray(ends)
    lengths = (ends - starts).astype(np.int64)
    total = int(lengths.sum())
    which = np.repeat(np.arange(len(starts)), lengths)
    offsets = np.cumsum(lengths) - lengths
    idx = np.arange(total, dtype=np.int64) + (starts.astype(np.int64) - offsets)[which]
    return idx, which


def rank_by_score(frame: pd.DataFrame) -> pd.DataFrame:
    """Group by qid (in order of first appearance), sort by score descending (docno breaks ties), set ``rank``
    from 0.

    >>> frame = pd.DataFrame({"qid": ["b", "a", "b"], "docno": ["d2", "d1", "d1"], "score": [0.5, 0.1, 0.5]})
    >>> rank_by_score(frame)
      qid docno  score  rank
    0   b    d1    0.5     0
    1   b    d2    0.5     1
    2   a    d1    0.1     0
    """
    order = pd.Series(pd.factorize(frame["qid"])[0], index=frame.index, name="_qorder")
    keys = ["_qorder", "score"] + (["docno"] if "docno" in frame.columns else [])
    out = frame.assign(_qorder=order).sort_values(keys, ascending=[True, False] + [True] * (len(keys) - 2),
                                                   kind="stable")
    out = out.drop(columns="_qorder").reset_index(drop=True)
    out["rank"] = out.groupby("qid", sort=False).cumcount().astype("int64")
    return out


class Hits(NamedTuple):
    """A retriever's answer before it is laid out as a frame: ``frame``, the input rows it answers (rows of
    unusable queries left out), and per hit, in any order, the row of ``frame`` it answers, its docno and score.
    :func:`hits_frame` makes the result frame of it; the hits of several indexes over the same ``frame`` (shards)
    are merged by concatenating their arrays."""

    frame: pd.DataFrame
    rows: np.ndarray
    docnos: np.ndarray
    scores: np.ndarray

    @classmethod
    def none(cls, frame: pd.DataFrame) -> "Hits":
        """No hits for the rows of ``frame``."""
        return cls(frame, np.zeros(0, np.int64), np.zeros(0, object), np.zeros(0))


class HitsSource(Protocol):
    """A retriever that can answer as :class:`Hits` (both single-index retrievers: fp16 and compressed)."""

    def hits(self, inp: pd.DataFrame) -> Hits:
        ...


def found_hits(codes: np.ndarray, found: Sequence[Tuple[np.ndarray, np.ndarray]],
               docnos_of: Callable[[np.ndarray], np.ndarray]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The hits of rows whose query is ``codes[i]``, each query's ``found`` (document ids, scores): arrays of
    (row, docno, score), float64 scores.

    >>> found = [(np.array([7, 3]), np.array([0.5, 0.25])), (np.array([1]), np.array([0.9]))]
    >>> [a.tolist() for a in found_hits(np.array([1, 0]), found, lambda ids: np.array([f"d{i}" for i in ids]))]
    [[0, 1, 1], ['d1', 'd7', 'd3'], [0.9, 0.5, 0.25]]
    """
    counts = np.array([len(found[c][0]) for c in codes], dtype=np.int64)
    rows = np.repeat(np.arange(len(codes)), counts)
    ids = np.concatenate([found[c][0] for c in codes]) if len(rows) else np.zeros(0, np.int64)
    scores = np.concatenate([found[c][1] for c in codes]).astype(np.float64) if len(rows) else np.zeros(0)
    return rows, docnos_of(ids), scores


def group_ranks(groups: np.ndarray, docnos: np.ndarray, scores: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The order of hits by group ascending, score descending, docno breaking ties, and each hit's rank (from 0)
    within its group in that order.

    >>> order, rank = group_ranks(np.array([1, 0, 1]), np.array(["b", "a", "a"]), np.array([0.5, 0.1, 0.5]))
    >>> order.tolist(), rank.tolist()
    ([1, 2, 0], [0, 0, 1])
    """
    order = np.lexsort((docnos.astype(str), -scores, groups))
    ordered = groups[order]
    firsts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]])) if len(order) else np.zeros(0, int)
    rank = np.arange(len(order)) - np.repeat(firsts, np.diff(np.append(firsts, len(order))))
    return order, rank


def best_hits(rows: np.ndarray, docnos: np.ndarray, scores: np.ndarray,
              k: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``k`` best hits of each row (by score descending, docno breaking ties), in that order, rows ascending:
    a merge of several indexes' hits cut before they are sent on (the final frame cuts per qid again).

    >>> got = best_hits(np.array([1, 0, 1, 1]), np.array(["a", "b", "c", "d"], dtype=object),
    ...                 np.array([0.1, 0.2, 0.9, 0.1]), 2)
    >>> [a.tolist() for a in got]
    [[0, 1, 1], ['b', 'c', 'a'], [0.2, 0.9, 0.1]]
    """
    order, rank = group_ranks(rows, docnos, scores)
    order = order[rank < k]
    return rows[order], docnos[order], scores[order]


def hits_frame(inp: pd.DataFrame, rows: np.ndarray, docnos: np.ndarray, scores: np.ndarray,
               num_results: Optional[int] = None) -> pd.DataFrame:
    """The result frame of hits in any order (each: the row of ``inp`` it answers, its docno and score): ``inp``'s
    rows repeated per hit with ``docno``, ``score`` and ``rank``, grouped by qid in order of first appearance, by
    score descending, docno breaking ties, ``rank`` from 0 within a qid (the order of :func:`rank_by_score`, whose
    pandas sort and groupby cost more than the search of a small top k); the best ``num_results`` of each qid (all
    when None).

    >>> frame = pd.DataFrame({"qid": ["q"], "x": [1]})
    >>> hits_frame(frame, np.array([0, 0, 0]), np.array(["d1", "d3", "d2"], dtype=object), np.array([.5, .9, .5]), 2)
      qid  x docno  score  rank
    0   q  1    d3    0.9     0
    1   q  1    d1    0.5     1
    """
    return hits_columns({c: inp[c].array for c in inp.columns}, rows, docnos, scores, num_results)  # .array: dtypes


def hits_columns(columns: Mapping[str, Any], rows: np.ndarray, docnos: np.ndarray, scores: np.ndarray,
                 num_results: Optional[int] = None) -> pd.DataFrame:
    """:func:`hits_frame` of an input given as its columns (arrays with ``take``, one ``qid`` among them), for a
    stage that adds columns of its own without making a frame of them first.

    >>> hits_columns({"qid": np.array(["q"], dtype=object)}, np.array([0, 0]), np.array(["d1", "d2"], dtype=object),
    ...              np.array([.5, .9]))
      qid docno  score  rank
    0   q    d2    0.9     0
    1   q    d1    0.5     1
    """
    qids = columns["qid"]
    qorder = np.zeros(len(rows), np.int64) if len(qids) == 1 else pd.factorize(qids)[0][rows]
    order, rank = group_ranks(qorder, docnos, scores)
    if num_results is not None:
        keep = rank < num_results
        order, rank = order[keep], rank[keep]
    rows, docnos, scores = rows[order], docnos[order], scores[order]
    # one DataFrame constructor: iloc + reset_index + three column assignments cost more than the search of a top 10
    out = {c: values.take(rows) for c, values in columns.items()}
    out.update(docno=docnos, score=scores, rank=rank.astype(np.int64))
    return pd.DataFrame(out, index=pd.RangeIndex(len(rows)))  # a given index: no inference from the columns


def stacked_hits(inp: pd.DataFrame, hits: List[Tuple[int, np.ndarray, np.ndarray]],
                 docnos: np.ndarray) -> Tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The result frame of per-query hits already in rank order: for each ``(row, docids, scores)`` the input
    row ``row`` repeated once per hit, with ``docno`` (``docnos[docid]``, each distinct docid decoded once),
    ``score`` and ``rank`` (0, 1, … in the order given). Also returns the distinct docids and, for each output
    row, its position among them, so a caller can add more per-document columns (e.g. text) the same way.

    >>> frame = pd.DataFrame({"qid": ["q1", "q2"], "x": [1, 2]})
    >>> out, unique, inverse = stacked_hits(frame, [(1, np.array([2, 0]), np.array([0.9, 0.4]))],
    ...                                     np.array(["d0", "d1", "d2"], dtype=object))
    >>> out
      qid  x docno  score  rank
    0  q2  2    d2    0.9     0
    1  q2  2    d0    0.4     1
    >>> unique.tolist(), inverse.tolist()
    ([0, 2], [1, 0])
    """
    rows = np.concatenate([np.full(len(d), r) for r, d, _ in hits])
    docids = np.concatenate([d for _, d, _ in hits])
    out = inp.iloc[rows].reset_index(drop=True)
    unique, inverse = np.unique(docids, return_inverse=True)
    out["docno"] = docnos[unique][inverse]
    out["score"] = np.concatenate([s for _, _, s in hits])
    out["rank"] = np.concatenate([np.arange(len(d), dtype=np.int64) for _, d, _ in hits])
    return out, unique, inverse
