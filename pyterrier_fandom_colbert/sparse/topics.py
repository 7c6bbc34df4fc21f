"""Topic filter: score only the passages that share a kept topic with the query.

A topic model scores every passage and query over a fixed set of topics (a probability vector θ). A query keeps
its topics with θ ≥ ``query_topics`` when that is a number < 1, or its ``query_topics`` best topics when it is
a number ≥ 1; passages likewise with ``passage_topics``. A passage that shares no kept topic with the query is
never scored. Optionally the SPLADE score is multiplied by θ_q·θ_d (``weighting="dot"``) or their cosine
(``"cosine"``); a final score below ``score_threshold`` is not ranked.

The topic model is built offline, without labels: spherical k-means (cosine) over passage vectors, either the
mean-pooled all-MiniLM-L6-v2 embeddings of the passage text (``source="minilm"``, queries are embedded the same
way, so the retriever needs the ``query`` text) or the L2-normalised SPLADE vectors themselves
(``source="splade"``, nothing more to encode at query time). θ = softmax(cos(text, centroid) / temperature).

Scoring uses topic shards: the postings are laid out topic by topic (a passage with several kept topics appears
in each), so a query touches only the postings of its kept topics' shards.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from ..checks import positive_int, real_in_range
from ..frames import empty_output, require_columns, with_columns
from ..params import Parameters
from ..progress import progress
from ..storage import JsonConfig, atomic_folder, read_json, write_json
from .index import Postings, SparseIndex, SparseSearcher

Setting = Union[int, float]


# -- maths (pure functions) -----------------------------------------------------------------------------------

def keep_topics(scores: np.ndarray, setting: Setting) -> np.ndarray:
    """Boolean ``[n, topics]``: θ ≥ setting when setting < 1, else the ``int(setting)`` best topics of each row
    (ties: lower topic number first).

    >>> theta = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    >>> keep_topics(theta, 0.25).astype(int).tolist()
    [[1, 1, 0], [0, 0, 1]]
    >>> keep_topics(theta, 2).astype(int).tolist()
    [[1, 1, 0], [1, 0, 1]]
    """
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    check_setting(setting, scores.shape[1], "setting")
    if setting < 1:
        return scores >= setting
    k = min(int(setting), scores.shape[1])
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    keep = np.zeros(scores.shape, dtype=bool)
    np.put_along_axis(keep, order, True, axis=1)
    return keep


def check_setting(setting: Any, num_topics: int, name: str) -> None:
    if isinstance(setting, bool) or not isinstance(setting, (int, float, np.integer, np.floating)) \
            or not math.isfinite(setting) or setting < 0 or (setting >= 1 and setting != int(setting)):
        raise ValueError(f"{name}={setting!r}; expected a threshold in [0, 1) or a whole number of topics "
                         f"in [1, {num_topics}]")


def topic_scores(vectors: Any, centroids: np.ndarray, temperature: float) -> np.ndarray:
    """θ = softmax(cos(vector, centroid) / temperature) per row; rows of ``vectors`` need not be normalised.

    >>> topic_scores(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [0.0, 1.0]]), 1.0).round(4).tolist()
    [[0.7311, 0.2689]]
    """
    sims = np.asarray(vectors @ centroids.T, dtype=np.float64)
    norms = _row_norms(vectors)
    return softmax_rows(sims / np.where(norms > 0, norms, 1.0)[:, None], temperature)


def softmax_rows(cosines: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(cosines / temperature) along each row.

    >>> softmax_rows(np.array([[0.0, 0.0]]), 0.1).tolist()
    [[0.5, 0.5]]
    """
    logits = np.asarray(cosines, dtype=np.float64) / temperature
    logits = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    return e / e.sum(axis=1, keepdims=True)


def _row_norms(vectors: Any) -> np.ndarray:
    if hasattr(vectors, "multiply"):  # scipy sparse
        return np.sqrt(np.asarray(vectors.multiply(vectors).sum(axis=1)).ravel())
    return np.linalg.norm(np.asarray(vectors), axis=1)


def spherical_kmeans(vectors: Any, k: int, iterations: int = 30, seed: int = 0) -> np.ndarray:
    """``[k, dim]`` unit centroids of cosine k-means (k-means++ seeding) over dense or scipy-sparse rows.

    >>> x = np.array([[1.0, 0.1], [0.9, 0.0], [0.0, 1.0], [0.1, 0.8]])
    >>> c = spherical_kmeans(x, 2)
    >>> sorted(np.argmax(x @ c.T, axis=1).tolist()[:2]) != sorted(np.argmax(x @ c.T, axis=1).tolist()[2:])
    True
    """
    import scipy.sparse as sp

    n = vectors.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"k={k} topics for {n} passages; expected 1 ≤ k ≤ number of passages")
    norms = _row_norms(vectors)
    scale = np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 0.0)
    x = sp.diags(scale) @ vectors if sp.issparse(vectors) else np.asarray(vectors) * scale[:, None]
    x = sp.csr_matrix(x) if sp.issparse(vectors) else x
    rng = np.random.default_rng(seed)

    def dense_rows(ids):
        rows = x[ids]
        return rows.toarray() if sp.issparse(rows) else np.array(rows)

    chosen = [int(rng.integers(n))]
    best = np.asarray(x @ dense_rows([chosen[0]]).T).ravel()
    for _ in range(1, k):  # k-means++ on cosine distance 1 - cos
        dist = np.clip(1.0 - best, 0.0, None) ** 2
        nxt = int(rng.choice(n, p=dist / dist.sum())) if dist.sum() > 0 else int(rng.integers(n))
        chosen.append(nxt)
        best = np.maximum(best, np.asarray(x @ dense_rows([nxt]).T).ravel())
    centroids = dense_rows(chosen)
    assign = None
    for _ in range(iterations):
        new = np.argmax(np.asarray(x @ centroids.T), axis=1)
        if assign is not None and np.array_equal(new, assign):
            break
        assign = new
        member = sp.csr_matrix((np.ones(n), (assign, np.arange(n))), shape=(k, n))
        sums = member @ x
        sums = sums.toarray() if sp.issparse(sums) else np.asarray(sums)
        lengths = np.linalg.norm(sums, axis=1)
        empty = lengths == 0
        sums[empty] = centroids[empty]  # an emptied cluster keeps its centroid
        centroids = sums / np.where(empty, 1.0, lengths)[:, None]
    return centroids.astype(np.float32)


# -- encoders for the "minilm" source ---------------------------------------------------------------------------

class MiniLMEmbedder:
    """Mean-pooled, L2-normalised all-MiniLM-L6-v2 sentence vectors (the backbone the package ships)."""

    def __init__(self, path: Optional[str] = None, max_length: int = 256, batch_size: int = 64,
                 device: Optional[str] = None):
        import torch
        from transformers import AutoModel, AutoTokenizer

        from ..model.config import default_backbone

        positive_int("max_length", max_length)
        positive_int("batch_size", batch_size)
        path = path or default_backbone()
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModel.from_pretrained(path, local_files_only=True).eval()
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device)
        self.max_length, self.batch_size = max_length, batch_size

    def __call__(self, texts: Sequence[str], verbose: bool = False) -> np.ndarray:
        import torch

        out = []
        bar = progress(total=len(texts), desc="MiniLM topics", unit="text", enabled=verbose)
        for i in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(list(texts[i:i + self.batch_size]), padding=True, truncation=True,
                                 max_length=self.max_length, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                h = self.model(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
            out.append(torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1), dim=-1).cpu().numpy())
            bar.update(len(texts[i:i + self.batch_size]))
        bar.close()
        return np.concatenate(out).astype(np.float32) if out else np.zeros((0, 384), np.float32)


# -- the topic model ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TopicConfig(JsonConfig):
    """How the topic model was built.

    >>> TopicConfig(source="lda")
    Traceback (most recent call last):
    ...
    ValueError: source='lda'; expected 'minilm' or 'splade'
    """

    num_topics: int = 19
    source: str = "minilm"
    temperature: float = 0.05
    iterations: int = 30
    seed: int = 0
    #: wordpieces of each text the MiniLM source embeds (a topic needs the gist, not every word)
    max_length: int = 128

    def __post_init__(self):
        if self.source not in ("minilm", "splade"):
            raise ValueError(f"source={self.source!r}; expected 'minilm' or 'splade'")
        positive_int("num_topics", self.num_topics)
        positive_int("iterations", self.iterations)
        if not self.temperature > 0:
            raise ValueError(f"temperature={self.temperature} must be positive")


class TopicModel:
    """Topic centroids and the topic scores θ of every passage of a :class:`SparseIndex` (index order).

    ``fit`` builds one; ``save``/``load`` keep it in a folder (``topics.json``, ``centroids.npy``,
    ``doc_topics.npy``) checked against the index it was built for.
    """

    def __init__(self, config: TopicConfig, centroids: np.ndarray, doc_topics: np.ndarray,
                 index: SparseIndex, embedder: Optional[MiniLMEmbedder] = None):
        if doc_topics.shape != (index.num_docs, config.num_topics):
            raise ValueError(f"doc_topics of shape {doc_topics.shape}; expected ({index.num_docs}, "
                             f"{config.num_topics}) for {index!r}")
        self.config, self.centroids, self.doc_topics, self.index = config, centroids, doc_topics, index
        self._embedder = embedder
        self._shards: Dict[Setting, Tuple[Postings, np.ndarray, np.ndarray]] = {}

    @classmethod
    def fit(cls, index: SparseIndex, docs: Optional[Iterable[Mapping[str, Any]]] = None,
            config: Optional[TopicConfig] = None, *, text_field: str = "text",
            embedder: Optional[MiniLMEmbedder] = None, verbose: bool = False) -> "TopicModel":
        """Cluster the passages of ``index``. ``source="minilm"`` needs ``docs`` (docno + text, every indexed
        docno once, any order); ``"splade"`` reads the index's own weights."""
        config = config or TopicConfig()
        if config.source == "splade":
            vectors = index.docs
        else:
            if docs is None:
                raise ValueError("TopicConfig(source='minilm') embeds passage text: pass docs=[{'docno', "
                                 f"{text_field!r}}}, ...] covering every document of {index!r}")
            texts = cls._aligned_texts(index, docs, text_field)
            embedder = embedder or MiniLMEmbedder(max_length=config.max_length)
            vectors = embedder(texts, verbose=verbose)
        centroids = spherical_kmeans(vectors, config.num_topics, config.iterations, config.seed)
        doc_topics = topic_scores(vectors, centroids, config.temperature).astype(np.float32)
        return cls(config, centroids, doc_topics, index, embedder)

    @staticmethod
    def _aligned_texts(index: SparseIndex, docs: Iterable[Mapping[str, Any]], text_field: str) -> List[str]:
        texts: List[Optional[str]] = [None] * index.num_docs
        inv = index.docnos.inv
        for doc in docs:
            docno, text = doc.get("docno"), doc.get(text_field)
            if not isinstance(text, str):
                raise ValueError(f"docno {docno!r} has {text_field}={text!r}; expected a string")
            ids = inv[[docno]]
            if ids[0] < 0:
                raise ValueError(f"docno {docno!r} is not in {index!r}; the topic model must cover that index")
            texts[int(ids[0])] = text
        missing = [i for i, t in enumerate(texts) if t is None]
        if missing:
            raise ValueError(f"{len(missing)} indexed document(s) have no text among docs, e.g. docno "
                             f"{index.docnos.fwd[missing[0]]!r}")
        return texts  # type: ignore[return-value]

    # -- persistence --
    def save(self, path: Union[str, Path], overwrite: bool = False) -> Path:
        with atomic_folder(path, overwrite=overwrite, replaceable=lambda p: (p / "topics.json").is_file(),
                           what="topic model") as tmp:
            np.save(tmp / "centroids.npy", self.centroids)
            np.save(tmp / "doc_topics.npy", self.doc_topics)
            write_json(tmp / "topics.json", {"config": self.config.to_dict(), "num_docs": self.index.num_docs,
                                             "index": str(self.index.path)})
        return Path(path)

    @classmethod
    def load(cls, path: Union[str, Path], index: SparseIndex) -> "TopicModel":
        path = Path(path)
        meta = read_json(path / "topics.json", "topic model description")
        config = TopicConfig.from_dict(meta["config"], source=path / "topics.json")
        if meta["num_docs"] != index.num_docs:
            raise ValueError(f"{path} was built for {meta['num_docs']} documents ({meta['index']}), but "
                             f"{index!r} has {index.num_docs}")
        return cls(config, np.load(path / "centroids.npy"), np.load(path / "doc_topics.npy"), index)

    # -- queries --
    @property
    def embedder(self) -> MiniLMEmbedder:
        if self._embedder is None:
            self._embedder = MiniLMEmbedder(max_length=self.config.max_length)
        return self._embedder

    def query_topics(self, terms: np.ndarray, weights: np.ndarray, text: Optional[str] = None) -> np.ndarray:
        """θ of one query (its SPLADE vector for ``source="splade"``, its text for ``"minilm"``)."""
        if self.config.source == "splade":  # cosine of the query's (known-term) vector with each unit centroid
            weights = np.asarray(weights, dtype=np.float64)
            norm = np.linalg.norm(weights)
            sims = self.centroids[:, terms].astype(np.float64) @ weights / (norm if norm > 0 else 1.0)
            return softmax_rows(sims[None, :], self.config.temperature)[0]
        if not isinstance(text, str):
            raise ValueError(f"query text {text!r}: a MiniLM topic model embeds the query, so the frame needs a "
                             "'query' column of strings")
        return topic_scores(self.embedder([text]), self.centroids, self.config.temperature)[0]

    def query_scorer(self) -> "TopicQueryScorer":
        """qid, query (MiniLM topics) or query_toks (SPLADE topics) → + ``query_theta``, each query's θ; a
        :class:`TopicFilterRetriever` after it uses that column instead of scoring each query itself."""
        return TopicQueryScorer(self)

    def shards(self, passage_topics: Setting) -> Tuple[Postings, np.ndarray, np.ndarray]:
        """(postings laid out topic by topic, shard start per topic, shard end per topic) for a passage setting."""
        key = float(passage_topics)
        if key not in self._shards:
            keep = keep_topics(self.doc_topics, passage_topics)
            members = [np.flatnonzero(keep[:, t]) for t in range(self.config.num_topics)]
            sizes = np.array([len(m) for m in members], dtype=np.int64)
            ends = np.cumsum(sizes)
            rows = np.concatenate(members) if members else np.zeros(0, np.int64)
            self._shards[key] = (Postings(self.index.docs, rows), ends - sizes, ends)
        return self._shards[key]

    def retriever(self, num_results: int = 1000, *, query_topics: Setting = 1, passage_topics: Setting = 1,
                  weighting: Optional[str] = None, score_threshold: Optional[float] = None,
                  verbose: bool = False) -> "TopicFilterRetriever":
        """qid, query_toks (+ query for MiniLM topics) → + docno, score, rank over the kept topics' passages."""
        return TopicFilterRetriever(self, num_results, query_topics=query_topics, passage_topics=passage_topics,
                                    weighting=weighting, score_threshold=score_threshold, verbose=verbose)

    def fingerprint(self) -> str:
        import hashlib

        h = hashlib.sha256(self.centroids.tobytes())
        h.update(self.doc_topics.tobytes())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        c = self.config
        return f"TopicModel({self.index!r}, {c.num_topics} topics, source={c.source!r})"


class TopicQueryScorer(Parameters, pt.Transformer):
    """qid, query / query_toks → + ``query_theta`` (the topic model's θ of each query, float64 array)."""

    def __init__(self, topics: TopicModel):
        self.topics = topics

    def _required(self) -> List[str]:
        return ["qid", "query" if self.topics.config.source == "minilm" else "query_toks"]

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, self._required(), self)
        return list(input_columns) + [c for c in ("query_theta",) if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, self._required(), self)
        if len(inp) == 0:
            return empty_output(inp, ["query_theta"])
        if self.topics.config.source == "minilm":
            texts = inp["query"].tolist()
            bad = [q for q, t in zip(inp["qid"], texts) if not isinstance(t, str)]
            if bad:
                raise ValueError(f"non-text query for qid(s) {bad[:5]}; expected strings")
            codes, unique = pd.factorize(pd.Series(texts, dtype=object))
            theta = topic_scores(self.topics.embedder(list(unique)), self.topics.centroids,
                                 self.topics.config.temperature)[codes]
        else:
            theta = np.stack([self.topics.query_topics(*self.topics.index.query_vector(t, f"qid {q!r}"))
                              for q, t in zip(inp["qid"], inp["query_toks"])])
        return with_columns(inp, {"query_theta": list(theta)})

    def _key(self) -> tuple:
        return (type(self), self.topics.fingerprint(), self.topics.config)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"topics": self.topics}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicQueryScorer) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"{self.topics!r}.query_scorer()"


class TopicFilterRetriever(SparseSearcher):
    """Learned-sparse retrieval restricted to the passages sharing a kept topic with the query."""

    def __init__(self, topics: TopicModel, num_results: int = 1000, *, query_topics: Setting = 1,
                 passage_topics: Setting = 1, weighting: Optional[str] = None,
                 score_threshold: Optional[float] = None, verbose: bool = False):
        super().__init__(topics.index, num_results, verbose=verbose)
        n = topics.config.num_topics
        check_setting(query_topics, n, "query_topics")
        check_setting(passage_topics, n, "passage_topics")
        if weighting not in (None, "dot", "cosine"):
            raise ValueError(f"weighting={weighting!r}; expected None, 'dot' or 'cosine'")
        real_in_range("score_threshold", score_threshold, none=True)
        self.topics, self.query_topics, self.passage_topics = topics, query_topics, passage_topics
        self.weighting, self.score_threshold = weighting, score_threshold

    def required_columns(self, columns: Sequence[str]) -> List[str]:
        needs_text = self.topics.config.source == "minilm" and "query_theta" not in columns
        return ["qid", "query_toks"] + (["query"] if needs_text else [])

    def _plan(self, terms: np.ndarray, weights: np.ndarray, row: Any) -> Tuple[np.ndarray, Postings, np.ndarray]:
        """(query θ, shard postings, ``[n, 2]`` position ranges of the kept topics' non-empty shards)."""
        theta = getattr(row, "query_theta", None)
        if theta is None:
            theta = self.topics.query_topics(terms, weights, getattr(row, "query", None))
        elif np.shape(theta) != (self.topics.config.num_topics,):
            raise ValueError(f"query_theta of shape {np.shape(theta)} for qid {getattr(row, 'qid', '?')!r}; "
                             f"expected ({self.topics.config.num_topics},) from this topic model's query_scorer()")
        kept = np.flatnonzero(keep_topics(theta, self.query_topics)[0])
        postings, starts, ends = self.topics.shards(self.passage_topics)
        ranges = np.stack([starts[kept], ends[kept]], axis=1)
        return theta, postings, ranges[ranges[:, 1] > ranges[:, 0]]

    def candidate_docs(self, terms: np.ndarray, weights: np.ndarray, row: Any = None) -> np.ndarray:
        """The distinct documents in this query's kept shards (what it may score)."""
        _, postings, ranges = self._plan(terms, weights, row)
        if len(ranges) == 0:
            return np.zeros(0, np.int64)
        return np.unique(np.concatenate([postings.rows[lo:hi] for lo, hi in ranges]))

    def score_candidates(self, terms: np.ndarray, weights: np.ndarray,
                         row: Any = None) -> Tuple[np.ndarray, np.ndarray]:
        theta, postings, ranges = self._plan(terms, weights, row)
        if len(ranges) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        docids, scores = postings.score(terms, weights, ranges)
        if self.weighting is not None:
            dt = self.topics.doc_topics[docids].astype(np.float64)
            w = dt @ theta
            if self.weighting == "cosine":
                w = w / (np.linalg.norm(dt, axis=1) * np.linalg.norm(theta))
            scores = scores * w
        if self.score_threshold is not None:
            keep = scores >= self.score_threshold
            docids, scores = docids[keep], scores[keep]
        return docids, scores

    def params(self) -> tuple:
        return (self.topics.fingerprint(), self.topics.config, float(self.query_topics), float(self.passage_topics),
                self.weighting, self.score_threshold)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"topics": self.topics, "num_results": self.num_results, "query_topics": self.query_topics,
                "passage_topics": self.passage_topics, "weighting": self.weighting,
                "score_threshold": self.score_threshold, "verbose": self.verbose}

    def with_num_results(self, k: int) -> "TopicFilterRetriever":
        return TopicFilterRetriever(self.topics, k, query_topics=self.query_topics,
                                    passage_topics=self.passage_topics, weighting=self.weighting,
                                    score_threshold=self.score_threshold, verbose=self.verbose)

    def _repr_params(self) -> List[str]:
        out = [f"query_topics={self.query_topics!r}", f"passage_topics={self.passage_topics!r}"]
        if self.weighting:
            out.append(f"weighting={self.weighting!r}")
        if self.score_threshold is not None:
            out.append(f"score_threshold={self.score_threshold!r}")
        return out
