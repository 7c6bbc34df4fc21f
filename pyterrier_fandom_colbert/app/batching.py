"""Query batching for a searcher shared between threads: callers' queries that arrive while a batch runs wait,
and the first of them to get the lock answers every waiting query as one batch (one encoder call, one TF-IDF
product, one neighbour search); the others find their answer ready. Nothing here knows what a query means:
:class:`~.search.Searcher` gives the function that answers a group."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Hashable, List, Optional

__all__ = ["Batcher", "Job", "answer_in_groups"]


class Job:
    """One query waiting for (or holding) its answer."""

    def __init__(self, query: str, system: str, k: int, explain: bool):
        self.query, self.system, self.k, self.explain = query, system, k, explain
        self.started = time.perf_counter()
        self.results: List[Dict[str, Any]] = []
        self.error: Optional[BaseException] = None
        self.done = False


class Batcher:
    """Runs ``run(jobs)`` for the jobs waiting when the lock is free; ``lock`` is held while a batch runs (take it
    for other work that must not overlap a batch)."""

    def __init__(self, run: Callable[[List[Job]], None]):
        self._run = run
        self.lock = threading.Lock()  # held while a batch runs
        self._pending_lock = threading.Lock()  # guards the list of waiting jobs
        self._pending: List[Job] = []

    def submit(self, job: Job) -> Job:
        """Wait until ``job`` is answered (by this call's batch or another's); re-raise its error."""
        with self._pending_lock:
            self._pending.append(job)
        with self.lock:
            if not job.done:
                with self._pending_lock:
                    batch, self._pending = self._pending, []
                self._run(batch)
        if job.error is not None:
            raise job.error
        return job


def answer_in_groups(jobs: List[Job], key: Callable[[Job], Hashable], answer: Callable[[List[Job]], None]) -> None:
    """Call ``answer(group)`` once per group of ``jobs`` with the same ``key``; when a group of several fails, each
    of its jobs is answered alone (one query's failure must not fail the others), and a job that fails alone
    keeps its error. Every job is ``done`` afterwards.

    >>> jobs = [Job(q, "tfidf", 3, False) for q in ("a", "bad", "c")]
    >>> def answer(group):
    ...     if any(j.query == "bad" for j in group):
    ...         raise ValueError("bad query")
    ...     for j in group:
    ...         j.results = [{"q": j.query}]
    >>> answer_in_groups(jobs, lambda j: j.system, answer)
    >>> [(j.results, repr(j.error), j.done) for j in jobs]  # doctest: +NORMALIZE_WHITESPACE
    [([{'q': 'a'}], 'None', True), ([], "ValueError('bad query')", True), ([{'q': 'c'}], 'None', True)]
    """
    groups: Dict[Hashable, List[Job]] = {}
    for job in jobs:
        groups.setdefault(key(job), []).append(job)
    for group in groups.values():
        try:
            answer(group)
        except Exception as err:
            if len(group) > 1:
                for job in group:
                    answer_in_groups([job], key, answer)
            else:
                group[0].error = err
        finally:
            for job in group:
                job.done = True
