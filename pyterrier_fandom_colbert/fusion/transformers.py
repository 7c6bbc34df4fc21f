"""PyTerrier transformers that fuse the rankings of two or more systems: ``Normalise``, ``LinearFusion``, ``RRF``.

A fusion transformer runs each of its systems on its input and combines their result lists per query:

* a query frame (qid, query, …) makes it a retriever: the output holds the union of the documents the systems
  returned, with the input's query columns;
* a result frame (… docno …) makes it a re-ranker: the systems re-score those rows (e.g. ``pt.Transformer`` that
  passes scores through, an ``IndexScorer``) and the output holds exactly the input rows, re-scored.

Columns the systems add besides ``docno``/``score``/``rank`` (e.g. ``text``) are not carried over: a document only
one system returned would lack them. Add text afterwards (``>> pt.text.get_text(...)``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from ..checks import positive_int, real_in_range
from ..frames import empty_output, require_columns
from ..params import Parameters
from . import maths as S


@dataclass
class Aligned:
    """The systems' results for one input frame, one row per (query, document) of the union.

    ``scores`` / ``raw`` / ``ranks`` are ``[rows, systems]`` (``nan`` where a system did not return the document;
    ``scores`` normalised per system and query as asked, ``raw`` as the systems gave them, ``ranks`` 0-based within
    each system's list); ``groups`` numbers the input's queries 0 … n_groups-1 in input order; ``source`` is the
    input row of each fused row.
    """

    docnos: np.ndarray
    groups: np.ndarray
    n_groups: int
    scores: np.ndarray
    raw: np.ndarray
    ranks: np.ndarray
    source: np.ndarray

    def __len__(self) -> int:
        return len(self.docnos)


def _system_name(system: pt.Transformer, j: int) -> str:
    return f"system {j} ({system!r})"


def align(inp: pd.DataFrame, outputs: Sequence[pd.DataFrame], normalise: Optional[str] = None,
          systems: Optional[Sequence[pt.Transformer]] = None) -> Aligned:
    """Line up the systems' result frames (``outputs``) for the input frame ``inp``.

    For a query frame the rows are the union of the returned (qid, docno) pairs of the input's queries; for a result
    frame they are the input's (qid, docno) rows. Results for qids the input does not hold are ignored.
    """
    S.check_normalisation(normalise)
    reranking = "docno" in inp.columns
    queries = pd.Index(pd.unique(inp["qid"].astype(str)))
    n_groups = len(queries)
    per_system = []
    for j, out in enumerate(outputs):
        name = _system_name(systems[j], j) if systems is not None else f"system {j}"
        missing = [c for c in ("qid", "docno", "score") if c not in out.columns]
        if missing:
            raise ValueError(f"{name} returned columns {list(out.columns)}, without {missing}: fusion needs a "
                             "result frame (qid, docno, score) from every system")
        groups = queries.get_indexer(out["qid"].astype(str))
        keep = groups >= 0
        docnos = out["docno"].to_numpy(dtype=object)[keep]
        groups = groups[keep]
        raw = out["score"].to_numpy(dtype=np.float64)[keep]
        if not np.isfinite(raw).all():
            raise ValueError(f"{name} returned non-finite scores (nan or inf); fusion needs finite scores")
        pairs = pd.MultiIndex.from_arrays([groups, docnos])
        if pairs.has_duplicates:
            dup = pairs[pairs.duplicated()][0]
            raise ValueError(f"{name} returned document {dup[1]!r} more than once for query "
                             f"{queries[dup[0]]!r}; each system must rank each document at most once per query")
        ranks = S.ranks_within(raw, groups, tiebreak=docnos.astype(str))
        per_system.append((groups, docnos, S.normalise(raw, groups, normalise, n_groups), raw, ranks))

    if reranking:
        groups_all = queries.get_indexer(inp["qid"].astype(str))
        keys = pd.MultiIndex.from_arrays([groups_all, inp["docno"].to_numpy(dtype=object)])
        if keys.has_duplicates:
            dup = keys[keys.duplicated()][0]
            raise ValueError(f"the input frame holds document {dup[1]!r} more than once for query "
                             f"{queries[dup[0]]!r}")
        source = np.arange(len(inp))
    else:
        all_pairs = [pd.MultiIndex.from_arrays([g, d]) for g, d, *_ in per_system]
        keys = all_pairs[0] if len(all_pairs) == 1 else all_pairs[0].append(all_pairs[1:])
        keys = keys.unique().sort_values() if len(keys) else keys
        first_row = pd.Index(inp["qid"].astype(str)).get_indexer(queries)  # each query's first input row
        groups_all = np.asarray(keys.get_level_values(0), dtype=np.int64)
        source = first_row[groups_all]
    m = len(per_system)
    score_matrix, raw_matrix, rank_matrix = (np.full((len(keys), m), np.nan) for _ in range(3))
    for j, (groups, docnos, normed, raw, ranks) in enumerate(per_system):
        rows = keys.get_indexer(pd.MultiIndex.from_arrays([groups, docnos])) if len(groups) else np.zeros(0, int)
        found = rows >= 0
        score_matrix[rows[found], j] = normed[found]
        raw_matrix[rows[found], j] = raw[found]
        rank_matrix[rows[found], j] = ranks[found]
    docnos_all = np.asarray(keys.get_level_values(1), dtype=object) if len(keys) else np.zeros(0, dtype=object)
    return Aligned(docnos_all, np.asarray(groups_all, dtype=np.int64), n_groups, score_matrix, raw_matrix,
                   rank_matrix, source)


def assemble(inp: pd.DataFrame, aligned: Aligned, fused: np.ndarray, num_results: Optional[int],
             keep: Optional[np.ndarray] = None) -> pd.DataFrame:
    """The output frame: input columns (query columns, or the input rows when re-ranking) with the fused ``score``
    and its ``rank`` (score descending, docno ascending for ties), cut at ``num_results`` per query.
    Scores equal to 12 decimals tie, so the order does not depend on the summation order of the weights.
    ``keep`` (bool per aligned row) drops rows first."""
    reranking = "docno" in inp.columns
    rows = np.arange(len(aligned)) if keep is None else np.flatnonzero(keep)
    docnos = aligned.docnos[rows]
    ranks = S.ranks_within(np.round(fused[rows], 12), aligned.groups[rows], tiebreak=docnos.astype(str))
    order = np.lexsort([ranks, aligned.groups[rows]])
    if num_results is not None:
        order = order[ranks[order] < num_results]
    rows = rows[order]
    base = inp.drop(columns=[c for c in ("score", "rank") if c in inp.columns]) if reranking else inp
    out = base.iloc[aligned.source[rows]].reset_index(drop=True)
    if not reranking:
        out["docno"] = aligned.docnos[rows]
    out["score"] = fused[rows]
    out["rank"] = ranks[order].astype(np.int64)
    return out


def _check_systems(systems: Sequence[pt.Transformer], owner: str, at_least: int = 1) -> Tuple[pt.Transformer, ...]:
    if isinstance(systems, pt.Transformer) or not isinstance(systems, (list, tuple)):
        raise TypeError(f"{owner} takes a list of systems, e.g. {owner}([tfidf, colbert]); got {systems!r}")
    if len(systems) < at_least:
        raise ValueError(f"{owner} needs at least {at_least} system(s), got {len(systems)}")
    return tuple(pt.transformer.get_transformer(s) for s in systems)


def _check_num_results(num_results: Optional[int]) -> None:
    positive_int("num_results", num_results, none=True, what="None keeps every document")


def _safe_hash(value) -> int:
    try:
        return hash(value)
    except TypeError:  # an unhashable system: equal fusions still hash equal without it
        return 0


class Fusion(Parameters, pt.Transformer):
    """Base of the fusion transformers: runs the systems, aligns their results, scores with :meth:`combine`."""

    #: normalisation applied to each system's scores before :meth:`combine` sees them
    normalise: Optional[str] = None

    def __init__(self, systems: Sequence[pt.Transformer], *, num_results: Optional[int] = None):
        self.systems = _check_systems(systems, type(self).__name__)
        _check_num_results(num_results)
        self.num_results = num_results

    # -- to override -----------------------------------------------------------------------------------------
    def combine(self, aligned: Aligned) -> np.ndarray:
        """Fused score of each aligned row."""
        raise NotImplementedError

    def _params(self) -> Tuple:
        """What besides the systems determines the output (for ``__eq__``/``__hash__``)."""
        return (self.num_results,)

    def _with_num_results(self, num_results: int) -> "Fusion":
        raise NotImplementedError

    # -- PyTerrier ---------------------------------------------------------------------------------------------
    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid"], context=self)
        if len(inp) == 0:
            return empty_output(inp, self._outputs(inp.columns))
        outputs = []
        for j, system in enumerate(self.systems):
            out = system(inp)
            if not isinstance(out, pd.DataFrame):
                raise TypeError(f"{_system_name(system, j)} returned {type(out).__name__}, not a DataFrame")
            outputs.append(out)
        return self.fuse(inp, outputs)

    def fuse(self, inp: pd.DataFrame, outputs: Sequence[pd.DataFrame]) -> pd.DataFrame:
        """Fuse precomputed system outputs (one frame per system, in order) for the input frame ``inp``: what
        :meth:`transform` does after running the systems. The tuner calls this to try many settings on one run."""
        if len(outputs) != len(self.systems):
            raise ValueError(f"{len(outputs)} result frame(s) for {len(self.systems)} systems")
        if len(inp) == 0:
            return empty_output(inp, self._outputs(inp.columns))
        aligned = align(inp, outputs, self.normalise, self.systems)
        if len(aligned) == 0:
            return empty_output(inp.iloc[:0], self._outputs(inp.columns))
        return assemble(inp, aligned, self.combine(aligned), self.num_results)

    def _outputs(self, input_columns: Sequence[str]) -> List[str]:
        new = ["score", "rank"] if "docno" in input_columns else ["docno", "score", "rank"]
        return [c for c in new if c not in input_columns]

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        pt.validate.columns(input_columns, includes=["qid"], context=self)
        return list(input_columns) + self._outputs(input_columns)

    def fuse_rank_cutoff(self, k: int) -> Optional[pt.Transformer]:
        """``fusion % k`` keeps the top k of the fused list (the systems still return their full lists)."""
        if self.num_results is not None and self.num_results <= k:
            return self
        return self._with_num_results(k)

    def subtransformers(self) -> Dict[str, List[pt.Transformer]]:
        return {"systems": list(self.systems)}

    def __eq__(self, other) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return (len(self.systems) == len(other.systems) and all(a == b for a, b in zip(self.systems, other.systems))
                and self._params() == other._params())

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(_safe_hash(s) for s in self.systems), self._params()))


def _check_weights(weights: Optional[Sequence[float]], n: int, owner: str) -> Tuple[float, ...]:
    if weights is None:
        return tuple([1.0 / n] * n)
    if isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__"):
        raise TypeError(f"{owner}: weights={weights!r}; expected one number per system")
    try:
        values = tuple(real_in_range(f"weights[{i}]", w) for i, w in enumerate(weights))
    except ValueError as err:
        raise ValueError(f"{owner}: weights={weights!r}; {err}") from None
    if len(values) != n:
        raise ValueError(f"{owner}: {len(values)} weight(s) {list(values)} for {n} systems; give one per system")
    return values


class LinearFusion(Fusion):
    """``Σ_j w_j · norm_j(score)``: a weighted sum of the systems' per-query normalised scores.

    ``normalise``: ``"minmax"`` (default; each system's list for a query scaled to [0, 1]), ``"zscore"`` (mean 0,
    standard deviation 1 per query) or ``None`` (raw scores). ``missing``: what a system contributes for a document
    it did not return: ``"min"`` (default; its lowest normalised score for that query, i.e. the document counts as
    tied with its last result; 0 under min-max), ``"zero"``, or a number. ``weights``: one per system (default
    equal). ``num_results``: keep the top n per query (default: all of the union; ``% n`` does the same).

    PyTerrier's own ``(a >> Normalise()) * 0.3 + (b >> Normalise()) * 0.7`` computes the same ranking for two
    systems under min-max with ``missing="zero"``; this class adds z-scores, the ``"min"`` policy for them, any
    number of systems in one step, and equality for ``pt.Experiment``.
    """

    def __init__(self, systems: Sequence[pt.Transformer], weights: Optional[Sequence[float]] = None, *,
                 normalise: Optional[str] = "minmax", missing: Union[str, float] = "min",
                 num_results: Optional[int] = None):
        super().__init__(systems, num_results=num_results)
        S.check_normalisation(normalise)
        S.check_missing(missing)
        self.weights = _check_weights(weights, len(self.systems), "LinearFusion")
        self.normalise, self.missing = normalise, missing

    def combine(self, aligned: Aligned) -> np.ndarray:
        filled = S.fill_missing(aligned.scores, aligned.groups, aligned.n_groups, self.missing)
        return S.weighted_sum(filled, self.weights)

    def _params(self) -> Tuple:
        return (self.weights, self.normalise, self.missing, self.num_results)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"systems": list(self.systems), "weights": self.weights, "normalise": self.normalise,
                "missing": self.missing, "num_results": self.num_results}

    def _with_num_results(self, num_results: int) -> "LinearFusion":
        return LinearFusion(self.systems, self.weights, normalise=self.normalise, missing=self.missing,
                            num_results=num_results)

    def __repr__(self) -> str:
        weights = ", ".join(f"{w:g}" for w in self.weights)
        cut = f", num_results={self.num_results}" if self.num_results is not None else ""
        return (f"LinearFusion({list(self.systems)!r}, weights=[{weights}], normalise={self.normalise!r}, "
                f"missing={self.missing!r}{cut})")


class RRF(Fusion):
    """Reciprocal rank fusion (Cormack et al., 2009): ``Σ_j w_j / (k + r_j)`` with ``r_j`` the document's 1-based
    rank in system j's list (by that system's scores, docno breaking ties); a system that did not return the
    document contributes 0. ``weights`` default to 1 each (plain RRF)."""

    def __init__(self, systems: Sequence[pt.Transformer], k: float = 60, *,
                 weights: Optional[Sequence[float]] = None, num_results: Optional[int] = None):
        super().__init__(systems, num_results=num_results)
        self.k = real_in_range("RRF k", k, 0.0, what="60 is the usual value")
        self.weights = (1.0,) * len(self.systems) if weights is None else _check_weights(weights,
                                                                                          len(self.systems), "RRF")

    def combine(self, aligned: Aligned) -> np.ndarray:
        return S.weighted_sum(S.reciprocal_ranks(aligned.ranks, self.k), self.weights)

    def _params(self) -> Tuple:
        return (self.k, self.weights, self.num_results)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"systems": list(self.systems), "k": self.k, "weights": self.weights, "num_results": self.num_results}

    def _with_num_results(self, num_results: int) -> "RRF":
        return RRF(self.systems, self.k, weights=self.weights, num_results=num_results)

    def __repr__(self) -> str:
        weights = "" if all(w == 1.0 for w in self.weights) else f", weights={list(self.weights)}"
        cut = f", num_results={self.num_results}" if self.num_results is not None else ""
        return f"RRF({list(self.systems)!r}, k={self.k:g}{weights}{cut})"


class Normalise(Parameters, pt.Transformer):
    """Per-query score normalisation of a result frame (``"minmax"`` or ``"zscore"``); ranks are unchanged.

    With PyTerrier's operators it gives a normalised linear combination: ``(a >> Normalise()) * 0.4 +
    (b >> Normalise()) * 0.6``. PyTerrier's ``+`` gives a document one side did not return a score of 0 there.
    """

    def __init__(self, method: str = "minmax"):
        if method not in ("minmax", "zscore"):
            raise ValueError(f"Normalise({method!r}): expected 'minmax' or 'zscore'")
        self.method = method

    def _constructor_args(self) -> Dict[str, Any]:
        return {"method": self.method}

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid", "score"], context=self)
        out = inp.copy()
        if len(inp) == 0:
            out["score"] = out["score"].astype(np.float64)
            return out
        groups = pd.factorize(inp["qid"].astype(str))[0]
        out["score"] = S.normalise(inp["score"].to_numpy(dtype=np.float64), groups, self.method)
        return out

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        pt.validate.columns(input_columns, includes=["qid", "score"], context=self)
        return list(input_columns)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Normalise):
            return NotImplemented
        return self.method == other.method

    def __hash__(self) -> int:
        return hash(("Normalise", self.method))

    def __repr__(self) -> str:
        return f"Normalise({self.method!r})"
