"""Experiments where fusions share their inputs with the other systems: ``pfc.Experiment``, ``share_inputs``.

A fusion runs its systems inside its own ``transform``, so ``pt.Experiment`` sees it as one opaque stage: with
ColBERT alone and inside three fusions, ColBERT runs four times, and ``plan="tree"`` cannot help (it shares
common *prefixes* of ``>>`` pipelines, and a fusion's inputs are hidden inside it). :func:`share_inputs` wraps
each distinct system, whether given on its own or as a fusion's input (at any depth, also inside ``>>``
pipelines), in one :class:`RunOnce` per experiment, so each runs once per distinct input frame; equal systems
(by ``==``, which every transformer of the package defines from its artifact and settings) share one run.
Stages that no fusion takes as input stay as they are, so ``plan="tree"`` still shares the common prefixes of
the other pipelines. :func:`Experiment` is ``pt.Experiment`` over the shared systems; the results are the same
as without sharing.
"""
from __future__ import annotations

import copy
import hashlib
import pickle
import time
from collections.abc import Mapping
from typing import Any, Dict, List, Sequence, Tuple, Union

import pandas as pd
import pyterrier as pt

from ..params import Parameters
from .transformers import Fusion


def frame_key(frame: pd.DataFrame) -> Tuple[Tuple[str, ...], str]:
    """A key for a frame's content (columns, index and values): equal frames get equal keys.

    >>> a = pd.DataFrame({"qid": ["1"], "query": ["x"]})
    >>> frame_key(a) == frame_key(a.copy()), frame_key(a) == frame_key(a.assign(query="y"))
    (True, False)
    """
    digest = hashlib.sha1()
    try:
        digest.update(pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes())
    except TypeError:  # unhashable cells (e.g. arrays of query vectors): their pickled bytes
        digest.update(pickle.dumps(frame, protocol=4))
    return tuple(str(c) for c in frame.columns), digest.hexdigest()


class RunOnce(Parameters, pt.Transformer):
    """Runs ``system`` once per distinct input frame and hands out copies of that output afterwards.

    Made by :func:`share_inputs` for the length of one experiment (it keeps every output it made); its repr is
    the system's, so the experiment's names stay the same.
    """

    def __init__(self, system: pt.Transformer):
        self.system = system
        self.runs: Dict[Tuple[Tuple[str, ...], str], pd.DataFrame] = {}
        #: milliseconds each run took (what the system costs a caller that uses it; :func:`Experiment`'s mrt)
        self.elapsed_ms: Dict[Tuple[Tuple[str, ...], str], float] = {}

    def _constructor_args(self) -> Dict[str, Any]:
        return {"system": self.system}

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        key = frame_key(inp)
        if key not in self.runs:
            start = time.perf_counter()
            self.runs[key] = self.system(inp)
            self.elapsed_ms[key] = (time.perf_counter() - start) * 1000.0
        return self.runs[key].copy()

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        return pt.inspect.transformer_outputs(self.system, input_columns)

    def subtransformers(self) -> Dict[str, Any]:
        return {"system": self.system}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunOnce) and _same(self.system, other.system)

    def __hash__(self) -> int:
        try:
            return hash(("RunOnce", self.system))
        except TypeError:
            return hash(("RunOnce", id(self.system)))

    def __repr__(self) -> str:
        return repr(self.system)


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # a transformer whose equality cannot compare with this one
        return False


class _Sharing:
    """One :class:`RunOnce` per distinct fusion input (by ``==``), used wherever that system appears."""

    def __init__(self, systems: Sequence[pt.Transformer]) -> None:
        self.inputs: List[pt.Transformer] = []
        for system in systems:
            self._collect(pt.transformer.get_transformer(system))
        self.shared: List[RunOnce] = []

    def _collect(self, system: pt.Transformer) -> None:
        if isinstance(system, Fusion):
            for s in system.systems:
                if not any(_same(s, seen) for seen in self.inputs):
                    self.inputs.append(s)
                self._collect(s)
        elif isinstance(system, pt.Compose):
            for s in system._transformers:
                self._collect(s)

    def run_once(self, system: pt.Transformer) -> RunOnce:
        for memo in self.shared:
            if _same(memo.system, system):
                return memo
        memo = RunOnce(system)
        self.shared.append(memo)
        return memo

    def rewrite(self, system: pt.Transformer) -> pt.Transformer:
        """``system`` with every fusion input, wherever it appears (alone, in a fusion, as a stage of a ``>>``
        pipeline), replaced by its one :class:`RunOnce`; other stages stay as they are, so ``plan="tree"`` still
        shares their common prefixes."""
        system = pt.transformer.get_transformer(system)
        if isinstance(system, RunOnce):
            return system
        if any(_same(system, s) for s in self.inputs):
            return self.run_once(system)
        if isinstance(system, Fusion):
            fused = copy.copy(system)
            fused.systems = tuple(self.rewrite(s) for s in system.systems)
            return fused
        if isinstance(system, pt.Compose):
            stages = [self.rewrite(s) for s in system._transformers]
            if any(a is not b for a, b in zip(stages, system._transformers)):
                return pt.Compose(*stages)
        return system


def share_inputs(systems: Sequence[pt.Transformer]) -> List[pt.Transformer]:
    """The systems of one experiment with every distinct fusion input, wherever it appears (alone, inside fusions,
    as a stage of a pipeline), wrapped in one :class:`RunOnce`, so it runs once per distinct input frame however
    many fusions use it. The given systems are not changed; the wrappers keep their outputs while the returned
    list lives."""
    sharing = _Sharing(systems)
    return [sharing.rewrite(s) for s in systems]


def _shared_runs(system: Any, found: List[RunOnce]) -> List[RunOnce]:
    """The :class:`RunOnce` wrappers inside ``system`` (alone, in fusions, as pipeline stages), each once."""
    if isinstance(system, RunOnce):
        if not any(r is system for r in found):
            found.append(system)
    elif isinstance(system, Fusion):
        for s in system.systems:
            _shared_runs(s, found)
    elif isinstance(system, pt.Compose):
        for s in system._transformers:
            _shared_runs(s, found)
    return found


def charged_mrt(systems: Sequence[pt.Transformer], measured: Sequence[float], num_queries: int) -> List[float]:
    """Per system (run in this order, as ``plan="linear"`` runs them), its measured mean response time (ms) with
    each shared run charged to every system that uses it: a shared run is measured inside the first system that
    reaches it and handed out as a copy to the others, so its time moves from that first system's figure into
    each user's, which is then about what the system costs when run alone."""
    seen: List[RunOnce] = []
    charged = []
    for system, mrt in zip(systems, measured):
        used = _shared_runs(system, [])
        first = [r for r in used if not any(r is s for s in seen)]
        seen.extend(first)
        total = sum(sum(r.elapsed_ms.values()) for r in used) - sum(sum(r.elapsed_ms.values()) for r in first)
        charged.append(float(mrt) + total / max(num_queries, 1))
    return charged


def Experiment(systems: Union[Sequence[pt.Transformer], Mapping[str, pt.Transformer]], topics: pd.DataFrame,
               qrels: pd.DataFrame, eval_metrics: Sequence, **kwargs: Any) -> Any:
    """``pt.Experiment`` (same arguments and result) with the systems' fusion inputs shared
    (:func:`share_inputs`): each distinct system runs once per batch of topics. ``systems`` is a list or, as in
    ``pt.Experiment``, a dict ``{name: system}``; ``names`` default to the systems' reprs, as in
    ``pt.Experiment``; ``save_dir`` works (with the linear plan, as in PyTerrier).

    ``mrt`` (with the default ``plan="linear"``) charges a shared run to every system that uses it
    (:func:`charged_mrt`), so a fusion's figure includes its inputs' retrieval as when it runs alone. With
    ``plan="tree"`` the column is PyTerrier's: a common prefix is charged to each system that has it, and a shared
    fusion input to the first system that runs it (the others show only their own work)."""
    if isinstance(systems, Mapping):
        if kwargs.get("names"):
            raise ValueError("names= was given with a dict of systems, whose keys are already their names; give one")
        kwargs["names"] = [str(name) for name in systems]
        systems = list(systems.values())
    systems = list(systems)
    if not kwargs.get("names"):
        kwargs["names"] = [str(pt.transformer.get_transformer(s)) for s in systems]
    shared = share_inputs(systems)
    result = pt.Experiment(shared, topics, qrels, eval_metrics, **kwargs)
    if ("mrt" in list(eval_metrics) and kwargs.get("plan", "linear") == "linear" and isinstance(result, pd.DataFrame)
            and "mrt" in result.columns and len(result) == len(shared) and not kwargs.get("perquery")):
        result["mrt"] = charged_mrt(shared, result["mrt"].tolist(), int(qrels["qid"].nunique()))
    return result
