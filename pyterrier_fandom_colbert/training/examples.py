"""Training examples from question/passage collections: QPP tuples, QQP tuples, docpairs, and their batches.

Collections are plain Python: ``queries {qid: text}``, ``qrels {qid: (docno, …)}`` and a ``docs`` lookup
``{docno: text}`` (any Mapping: an ir_datasets docstore is read lazily). :func:`from_irds` builds one from any
ir_datasets dataset with queries and qrels (``fandom-qa/...``, ``irds.squad_dataset(path)``, …).

* **QPP** ⟨q, d+, d1- … dn-⟩ (:class:`QPPSource`): negatives sampled from a first-stage ranking (e.g. the TF-IDF top
  ``depth`` after removing the positives, :func:`tfidf_rankings`) or at random from the corpus; drawn anew each epoch.
* **QQP** ⟨q+, q-, d+⟩ (:class:`QQPSource`): the negative query is the next one, in a seeded shuffle of all
  queries, that ``d+`` does not answer, so it never comes from the positive's own passage.
* Every source gives the same number of examples each epoch (one per (query, relevant passage)), drawn from
  ``(seed, epoch)`` alone, so a resumed run sees exactly the examples an uninterrupted one would.

:func:`collate` turns examples into a :class:`Batch`: texts, the label column of each row, and ``valid``, which
leaves out candidates that also answer the row (in-batch duplicates, another question's positive).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

_log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------- collections

@dataclass
class QAData:
    """Questions, their relevant passages and a passage lookup. ``docnos`` lists the whole corpus (random
    negatives, exhaustive evaluation); ``corpus()`` streams ``{"docno", "text"}`` dicts (first-stage indexing)."""

    queries: Dict[str, str]
    qrels: Dict[str, Tuple[str, ...]]
    docs: Mapping[str, str]
    docnos: Sequence[str] = field(default=())
    corpus: Optional[Callable[[], Iterable[dict]]] = None

    def __post_init__(self) -> None:
        missing = [q for q in self.qrels if q not in self.queries]
        if missing:
            raise ValueError(f"qrels name {len(missing)} qid(s) that have no query text, e.g. {missing[:3]}")
        self.qrels = {q: tuple(dict.fromkeys(d)) for q, d in self.qrels.items() if d}
        if not self.qrels:
            raise ValueError("no query has a relevant passage: nothing to train or evaluate on")
        if not self.docnos:
            self.docnos = list(self.docs.keys()) if isinstance(self.docs, dict) else self.docnos
        if self.corpus is None and isinstance(self.docs, dict):
            docs = self.docs
            self.corpus = lambda: ({"docno": d, "text": t} for d, t in docs.items())

    def pairs(self) -> List[Tuple[str, str]]:
        """Every (qid, relevant docno), in qid order: one training example each."""
        return [(q, d) for q in sorted(self.qrels) for d in self.qrels[q]]

    def limit(self, n: Optional[int]) -> "QAData":
        """The first ``n`` questions (qid order) with their passages; the corpus is kept whole."""
        if n is None:
            return self
        keep = sorted(self.qrels)[:n]
        return QAData({q: self.queries[q] for q in keep}, {q: self.qrels[q] for q in keep}, self.docs,
                      self.docnos, self.corpus)

    @classmethod
    def concat(cls, parts: Sequence["QAData"]) -> "QAData":
        """Several collections as one; ids get a ``"<i>:"`` prefix so they cannot collide."""
        if len(parts) == 1:
            return parts[0]
        queries: Dict[str, str] = {}
        qrels: Dict[str, Tuple[str, ...]] = {}
        docs: Dict[str, str] = {}
        docnos: List[str] = []
        for i, p in enumerate(parts):
            queries.update({f"{i}:{q}": t for q, t in p.queries.items()})
            qrels.update({f"{i}:{q}": tuple(f"{i}:{d}" for d in ds) for q, ds in p.qrels.items()})
            docs.update({f"{i}:{d}": p.docs[d] for d in p.docnos})
            docnos.extend(f"{i}:{d}" for d in p.docnos)
        return cls(queries, qrels, docs, docnos)


class _DocstoreTexts(Mapping):
    """``docno -> text`` over an ir_datasets docstore (looked up on demand, nothing loaded up front)."""

    def __init__(self, store, docnos: Sequence[str]):
        self._store, self._docnos = store, docnos

    def __getitem__(self, docno: str) -> str:
        return self._store.get(docno).default_text()

    def __iter__(self) -> Iterator[str]:
        return iter(self._docnos)

    def __len__(self) -> int:
        return len(self._docnos)


def from_irds(dataset: Any) -> QAData:
    """A :class:`QAData` from an ir_datasets dataset (or its id) that has docs, queries and qrels.

    Relevance > 0 counts as relevant. Query and document texts come from ``default_text()``.
    """
    import ir_datasets

    ds: Any = ir_datasets.load(dataset) if isinstance(dataset, str) else dataset
    for part in ("docs", "queries", "qrels"):
        if not getattr(ds, f"has_{part}")():
            raise ValueError(f"{dataset!r} has no {part}; training needs docs, queries and qrels")
    queries = {q.query_id: q.default_text() for q in ds.queries_iter()}
    qrels: Dict[str, List[str]] = {}
    for r in ds.qrels_iter():
        if r.relevance > 0:
            qrels.setdefault(r.query_id, []).append(r.doc_id)
    docnos = [d.doc_id for d in ds.docs_iter()]
    corpus = lambda: ({"docno": d.doc_id, "text": d.default_text()} for d in ds.docs_iter())
    return QAData(queries, {q: tuple(d) for q, d in qrels.items()}, _DocstoreTexts(ds.docs_store(), docnos), docnos,
                  corpus)


def load_collection(source: str) -> QAData:
    """``source``: a SQuAD-format ``.json`` file or an ir_datasets id (``fandom-qa/...`` ids are registered
    when the package is imported)."""
    path = Path(source)
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise FileNotFoundError(f"{source}: no such SQuAD-format JSON file")
        from ..data.irds import squad_dataset

        return from_irds(squad_dataset(path))
    import pyterrier_fandom_colbert  # noqa: F401  (registers fandom-qa/... with ir_datasets)

    return from_irds(source)


# ----------------------------------------------------------------------------------------------- examples

class QPP(NamedTuple):
    """⟨q, d+, d1- … dn-⟩ by id."""
    qid: str
    positive: str
    negatives: Tuple[str, ...]


class QQP(NamedTuple):
    """⟨q+, q-, d+⟩ by id: ``qid`` is answered by ``docno``; ``neg_qid`` is not."""
    qid: str
    neg_qid: str
    docno: str


def _rng(seed: int, epoch: int) -> np.random.Generator:
    return np.random.default_rng([seed, epoch])


@dataclass
class QPPSource:
    """QPP examples with ``negatives`` negatives each, drawn anew per epoch.

    ``rankings {qid: [docno, …]}`` (a first stage's ranking): negatives are sampled from its ``depth`` best
    passages that do not answer the question; without it (or where that leaves too few) they are sampled from
    the whole corpus, and the number of such random fills is logged.
    """

    data: QAData
    negatives: int = 1
    seed: int = 0
    rankings: Optional[Mapping[str, Sequence[str]]] = None
    depth: int = 10

    def __post_init__(self) -> None:
        if self.negatives < 0:
            raise ValueError(f"negatives={self.negatives}; expected 0 or more")
        if self.negatives and len(self.data.docnos) < 2:
            raise ValueError("random negatives need a corpus of at least two passages (QAData.docnos)")

    def epoch(self, epoch: int) -> List[QPP]:
        rng = _rng(self.seed, epoch)
        out, fills = [], 0
        docnos = self.data.docnos
        for qid, pos in self.data.pairs():
            taken = set(self.data.qrels[qid])
            chosen: List[str] = []
            if self.rankings is not None and self.negatives:
                pool = list(dict.fromkeys(d for d in self.rankings.get(qid, ()) if d not in taken))[:self.depth]
                if pool:
                    pick = rng.choice(len(pool), size=min(self.negatives, len(pool)), replace=False)
                    chosen = [pool[i] for i in sorted(pick)]
                fills += self.negatives - len(chosen)
            taken.update(chosen)
            tries = 0
            while len(chosen) < self.negatives:
                d = docnos[int(rng.integers(len(docnos)))]
                tries += 1
                if d not in taken:
                    chosen.append(d)
                    taken.add(d)
                elif tries > 100 * self.negatives + 1000:
                    raise ValueError(f"query {qid!r}: could not find {self.negatives} passages that do not answer "
                                     "it; the corpus is too small for that many negatives")
            out.append(QPP(qid, pos, tuple(chosen)))
        if self.rankings is not None and fills:
            _log.info("epoch %d: %d negatives drawn at random (the first stage ranked too few non-answering "
                      "passages within depth %d)", epoch, fills, self.depth)
        return out


@dataclass
class QQPSource:
    """QQP examples: per (q+, d+), the negative query is the next query after q+ in a seeded shuffle (wrapping
    around) that ``d+`` does not answer."""

    data: QAData
    seed: int = 0

    def epoch(self, epoch: int) -> List[QQP]:
        rng = _rng(self.seed, epoch)
        qids = sorted(self.data.qrels)
        order = [qids[i] for i in rng.permutation(len(qids))]
        where = {q: i for i, q in enumerate(order)}
        out = []
        for qid, pos in self.data.pairs():
            at = where[qid]
            for step in range(1, len(order)):
                cand = order[(at + step) % len(order)]
                if pos not in self.data.qrels[cand]:
                    out.append(QQP(qid, cand, pos))
                    break
            else:
                raise ValueError(f"passage {pos!r} answers every question; QQP needs a question it does not answer")
        return out


@dataclass
class FixedSource:
    """The same examples every epoch (docpairs, or pairs built once)."""

    examples: List[Union[QPP, QQP]]

    def epoch(self, epoch: int) -> List[Union[QPP, QQP]]:
        return list(self.examples)


def docpair_examples(docpairs: Iterable, qrels: Optional[Mapping[str, Sequence[str]]] = None) -> List[QPP]:
    """QPP examples ⟨q, doc_a, doc_b⟩ from ir_datasets docpairs (``query_id, doc_id_a, doc_id_b``)."""
    out = []
    for p in docpairs:
        qid, a, b = p[0], p[1], p[2]
        if qrels is not None and b in qrels.get(qid, ()):
            raise ValueError(f"docpair ({qid!r}, {a!r}, {b!r}): the negative {b!r} is relevant to {qid!r}")
        out.append(QPP(qid, a, (b,)))
    return out


def tfidf_results(data: QAData, index_dir: Union[str, Path], qids: Sequence[str], num_results: int,
                  verbose: bool = False):
    """TF-IDF's top ``num_results`` passages of ``data``'s corpus for the questions ``qids`` (a PyTerrier result
    frame), building the index at ``index_dir`` from ``data.corpus()`` if it is not there yet."""
    import pandas as pd

    from ..lexical.tfidf import TfidfIndex

    index = TfidfIndex(str(index_dir))
    if not index.built():
        if data.corpus is None:
            raise ValueError("a TF-IDF ranking of the training corpus needs it as a stream (QAData.corpus)")
        index.indexer(verbose=verbose).index(data.corpus())
    topics = pd.DataFrame({"qid": list(qids), "query": [data.queries[q] for q in qids]})
    return index.retriever(num_results=num_results, verbose=verbose)(topics)


def tfidf_rankings(data: QAData, index_dir: Union[str, Path], depth: int = 10, verbose: bool = False
                   ) -> Dict[str, List[str]]:
    """TF-IDF top ``depth + (number of positives)`` docnos per query (:func:`tfidf_results`)."""
    most = max(len(v) for v in data.qrels.values())
    res = tfidf_results(data, index_dir, sorted(data.qrels), depth + most, verbose)
    return {q: list(g.sort_values("rank")["docno"]) for q, g in res.groupby("qid", sort=False)}


# ----------------------------------------------------------------------------------------------- batches

@dataclass
class Batch:
    """Texts of one forward pass and what the loss needs.

    Rows of ``labels``/``valid`` are queries (QPP) or documents (QQP); ``labels[i]`` is the column of the right
    candidate, ``valid[i, j]`` False where candidate j must not count for row i.
    """

    form: str
    queries: List[str]
    docs: List[str]
    labels: np.ndarray
    valid: np.ndarray
    group: int  # candidates per row when not in-batch (columns of row i are i*group … i*group+group-1)


def collate(examples: Sequence[Union[QPP, QQP]], data: QAData, in_batch: bool) -> Batch:
    """Texts, labels and the validity mask for a list of QPP or QQP examples (not both).

    QPP: docs are ``[d+, d1-, …]`` of each example in turn; without ``in_batch`` row i scores only its own
    ``1 + n`` documents. QQP: queries are ``[q+_1, q-_1, q+_2, q-_2, …]``, docs ``[d+_1, d+_2, …]``; each
    document row ranks queries (its own two, or all ``2B`` in-batch).
    """
    if not examples:
        raise ValueError("collate: empty list of examples")
    kinds = {type(e) for e in examples}
    if len(kinds) != 1:
        raise ValueError(f"collate: mixed example kinds {sorted(k.__name__ for k in kinds)}")
    if isinstance(examples[0], QPP):
        return _collate_qpp([e for e in examples if isinstance(e, QPP)], data, in_batch)
    return _collate_qqp([e for e in examples if isinstance(e, QQP)], data, in_batch)


def _collate_qpp(examples: Sequence[QPP], data: QAData, in_batch: bool) -> Batch:
    group = 1 + len(examples[0].negatives)
    if any(1 + len(e.negatives) != group for e in examples):
        raise ValueError("collate: QPP examples in one batch must have the same number of negatives")
    docnos = [d for e in examples for d in (e.positive, *e.negatives)]
    rows = [e.qid for e in examples]
    labels = np.arange(len(examples)) * group
    if in_batch:
        valid = np.array([[d not in data.qrels[q] for d in docnos] for q in rows], dtype=bool)
        valid[np.arange(len(rows)), labels] = True
    else:
        valid = np.ones((len(rows), group), dtype=bool)
        labels = np.zeros(len(rows), dtype=np.int64)
    return Batch("qpp", [data.queries[q] for q in rows], [data.docs[d] for d in docnos],
                 labels.astype(np.int64), valid, group)


def _collate_qqp(examples: Sequence[QQP], data: QAData, in_batch: bool) -> Batch:
    qids = [q for e in examples for q in (e.qid, e.neg_qid)]
    docnos = [e.docno for e in examples]
    if in_batch:
        labels = np.arange(len(examples)) * 2
        valid = np.array([[d not in data.qrels[q] for q in qids] for d in docnos], dtype=bool)
        valid[np.arange(len(docnos)), labels] = True
    else:
        labels = np.zeros(len(examples), dtype=np.int64)
        valid = np.ones((len(examples), 2), dtype=bool)
    return Batch("qqp", [data.queries[q] for q in qids], [data.docs[d] for d in docnos],
                 labels.astype(np.int64), valid, 2)
