"""Searching a sharded ColBERT index through Ray actors: :class:`RayShardedRetriever`.

Each :class:`ShardServer` actor opens one or more shards of a
:class:`~pyterrier_fandom_colbert.index.sharded.ShardedColBERTIndex` (memory-mapped, on the node it runs on) and
answers with its shards' best ``num_results`` hits per query as arrays (no frame is built in the actor). A query
frame's qids and vectors (already encoded: ``query_embs``) are sent to every actor at once and their hits laid out
as the exact top ``num_results`` (:func:`~pyterrier_fandom_colbert.ranking.hits_frame`), as the local sharded
retriever merges its shards' hits.

An actor that does not answer within ``timeout_s`` is never silently left out: by default the call raises
:class:`ShardTimeoutError` naming the shards; with ``partial=True`` the answer of the others is returned with a
``partial`` column, True on every row of a call that lacks some shards (their names in
``frame.attrs["missing_shards"]``), False otherwise.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union, cast

import numpy as np
import pandas as pd
import pyterrier as pt

from ..frames import EqualByKey, artifact_key, empty_output, require_columns
from ..index.sharded.artifact import ShardedColBERTIndex, concat_hits
from ..params import Parameters
from ..ranking import Hits, HitsSource, best_hits, hits_frame
from ..storage import artifact_path
from .cluster import SHARD_TIMEOUT_S, connect

if TYPE_CHECKING:  # pragma: no cover
    from ..model.colbert import ColBERT


#: the column that carries each query's position in the caller's frame through an actor's search
ROW = "_row"

LOG = logging.getLogger(__name__)


class ShardTimeoutError(TimeoutError):
    """Some shards did not answer a query within the retriever's ``timeout_s``."""

    def __init__(self, shards: Sequence[str], timeout_s: float):
        self.shards = list(shards)
        super().__init__(f"shards {self.shards} did not answer within {timeout_s} s; the results would lack their "
                         "documents (give a longer timeout_s, or partial=True to accept results flagged partial)")


class ShardServer:
    """Ray actor holding shards ``names`` of the sharded index at ``path``, with their retrievers
    (``options``: the shards' retriever's)."""

    def __init__(self, path: str, names: Sequence[str], options: Dict[str, Any]):
        from ..index.artifact import ColBERTIndex

        self.names = list(names)
        self.shards = [ColBERTIndex(Path(path) / name) for name in names]
        self.stages = [cast(HitsSource, shard.retriever(**options)) for shard in self.shards]
        self.num_results = int(options.get("num_results", 1000))

    def search(self, qids: List[str], embs: Any) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The top ``num_results`` of these shards for each query (``qids[i]``, its encoded query ``embs[i]``),
        as arrays: (the query's position, docno, score); arrays both ways, so that neither side pickles a frame."""
        inp = pd.DataFrame({"qid": qids, "query_embs": list(embs), ROW: np.arange(len(qids))})
        found = concat_hits([stage.hits(inp) for stage in self.stages])
        rows, docnos, scores = best_hits(found.rows, found.docnos, found.scores, self.num_results)
        return found.frame[ROW].to_numpy(np.int64)[rows], docnos.astype(object), scores.astype(np.float64)

    def ready(self) -> List[str]:
        """The shard names, once every shard's lazily read parts are loaded (a first, empty search)."""
        for shard in self.shards:
            shard.check()
        return self.names


def groups(names: Sequence[str], actors: int) -> List[List[str]]:
    """``names`` dealt round-robin to ``actors`` actors (at most one actor per shard).

    >>> groups(["s0", "s1", "s2"], 2)
    [['s0', 's2'], ['s1']]
    """
    actors = max(1, min(actors, len(names)))
    return [list(names[i::actors]) for i in range(actors)]


def merged_hits(inp: pd.DataFrame, answers: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray]],
                num_results: Optional[int]) -> pd.DataFrame:
    """The frame :func:`~pyterrier_fandom_colbert.index.sharded.artifact.merge_ranked` makes of the shards' results,
    from the actors' answers (each: the query's row in ``inp``, docno, score): ``inp``'s rows repeated per hit with
    docno, score and rank, grouped by qid in order of first appearance, by score descending, docno breaking ties,
    the best ``num_results`` of each qid.

    >>> inp = pd.DataFrame({"qid": ["q"], "x": [1]})
    >>> a = (np.array([0]), np.array(["d1"], dtype=object), np.array([0.5]))
    >>> b = (np.array([0, 0]), np.array(["d3", "d2"], dtype=object), np.array([0.9, 0.5]))
    >>> merged_hits(inp, [a, b], 2)
      qid  x docno  score  rank
    0   q  1    d3    0.9     0
    1   q  1    d1    0.5     1
    """
    found = concat_hits([Hits(inp, *answer) for answer in answers]) if answers else Hits.none(inp)
    return hits_frame(*found, num_results)


class RayShardedRetriever(EqualByKey, Parameters, pt.Transformer):
    """End-to-end retrieval over a sharded index whose shards are held by Ray actors (see the module docstring):
    qid, query_embs → + docno, score, rank (+ partial, with ``partial=True``).

    ``actors``: how many actors hold the shards (default one per shard); ``cpus_per_actor``: the CPUs Ray
    reserves for each; ``address``: the cluster (:func:`~.cluster.connect`); ``server``: the actor class that
    holds the shards (:class:`ShardServer` or a subclass of it); ``start_timeout_s``: how long the actors may take
    to start and open their shards (None: as long as it takes, e.g. while an autoscaling cluster grows; a warning
    is logged when the cluster has fewer free CPUs than the actors reserve); ``options``: the shards' retriever's
    (``num_results``, ...).
    """

    def __init__(self, index: Union[ShardedColBERTIndex, str, Path], *, actors: Optional[int] = None,
                 timeout_s: float = SHARD_TIMEOUT_S, partial: bool = False, cpus_per_actor: float = 1.0,
                 address: Optional[str] = None, server: type = ShardServer, start_timeout_s: Optional[float] = None,
                 **options: Any):
        if not isinstance(index, ShardedColBERTIndex):
            index = ShardedColBERTIndex(index)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s!r}; expected a positive number of seconds")
        if start_timeout_s is not None and not start_timeout_s > 0:
            raise ValueError(f"start_timeout_s={start_timeout_s!r}; expected a positive number of seconds or None")
        self.start_timeout_s = start_timeout_s
        if not (isinstance(server, type) and issubclass(server, ShardServer)):
            raise TypeError(f"server must be ShardServer or a subclass of it, not {server!r}")
        self.server = server
        self.index = index
        self.timeout_s, self.partial, self.cpus_per_actor = float(timeout_s), bool(partial), float(cpus_per_actor)
        self.address = address
        self.options = dict(options)
        self.num_results = int(options.get("num_results", 1000))
        index.shards[0].retriever(**options)  # refuses another format's options here, naming them
        names = [s["name"] for s in index.meta.shards]
        self.groups = groups(names, actors or len(names))
        ray = connect(address)
        needed, free = self.cpus_per_actor * len(self.groups), float(ray.available_resources().get("CPU", 0.0))
        if needed > free:
            LOG.warning("the %d shard actors reserve %g CPUs and the cluster has %g free: they start as CPUs free up "
                        "(or as the cluster grows)", len(self.groups), needed, free)
        remote = ray.remote(server).options(num_cpus=self.cpus_per_actor)
        folder = str(artifact_path(index).resolve())
        self.actors = [remote.remote(folder, group, self.options) for group in self.groups]
        readies = [a.ready.remote() for a in self.actors]
        _, late = ray.wait(readies, num_returns=len(readies), timeout=start_timeout_s)
        if late:
            shards = [name for ref, group in zip(readies, self.groups) if ref in late for name in group]
            self.close()
            raise TimeoutError(f"the actors of shards {shards} did not start within {start_timeout_s} s; the cluster "
                               f"had {free:g} CPUs free and the {len(self.groups)} actors reserve "
                               f"{self.cpus_per_actor:g} each: give the cluster more CPUs, fewer actors (actors=) "
                               "or a smaller cpus_per_actor")
        ray.get(readies)  # an actor that could not open its shards raises here

    def _key(self) -> Tuple[Any, ...]:
        # another actor class may answer otherwise: it is part of the key (the default adds nothing)
        own = () if self.server is ShardServer else (f"{self.server.__module__}.{self.server.__qualname__}",)
        return (artifact_key(self.index), "ray", self.partial, tuple(sorted((k, repr(v)) for k, v in
                                                                           self.options.items())), *own)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"index": self.index, "actors": len(self.actors), "timeout_s": self.timeout_s, "partial": self.partial,
                "cpus_per_actor": self.cpus_per_actor, "address": self.address, "server": self.server,
                "start_timeout_s": self.start_timeout_s,
                **self.options}

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query_embs"], self)
        return [*input_columns, "docno", "score", "rank", *(["partial"] if self.partial else [])]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        import ray

        require_columns(inp.columns, ["qid", "query_embs"], self)
        new = ["docno", "score", "rank", *(["partial"] if self.partial else [])]
        if len(inp) == 0:
            return empty_output(inp, new)
        each = [np.asarray(e) for e in inp["query_embs"]]
        # one array to send (queries of one length: the usual case)
        embs: Any = np.stack(each) if len({e.shape for e in each}) == 1 else each
        qids = inp["qid"].astype(str).tolist()
        refs = [actor.search.remote(qids, embs) for actor in self.actors]
        try:  # one wait in the usual case: every actor answers in time
            answers, missing = ray.get(refs, timeout=self.timeout_s), []
        except ray.exceptions.GetTimeoutError:
            ready, late = ray.wait(refs, num_returns=len(refs), timeout=0)
            missing = [name for ref, group in zip(refs, self.groups) if ref in late for name in group]
            if not self.partial:
                for ref in late:
                    ray.cancel(ref)
                raise ShardTimeoutError(missing, self.timeout_s) from None
            answers = ray.get(ready)
        out = merged_hits(inp, answers, self.num_results)
        if self.partial:
            out = out.assign(partial=bool(missing))
            out.attrs["missing_shards"] = missing
        return out

    def close(self) -> None:
        """Stop the actors."""
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []

    def __repr__(self) -> str:
        options = "".join(f", {k}={v!r}" for k, v in self.options.items())
        return f"RayShardedRetriever({self.index!r}, actors={len(self.groups)}, timeout_s={self.timeout_s}{options})"


def ray_retriever(index: Union[ShardedColBERTIndex, str, Path], colbert: Optional["ColBERT"] = None,
                  **options: Any) -> pt.Transformer:
    """``colbert.query_encoder() >> RayShardedRetriever(index, **options)`` after checking the encoder (just the
    retriever without one)."""
    stage = RayShardedRetriever(index, **options)
    if colbert is None:
        return stage
    stage.index.check_encoder(colbert)
    return colbert.query_encoder() >> stage
