"""ColBERT-PRF: pseudo-relevance feedback with expansion embeddings (Wang, Macdonald, Tonellotto and Ounis, ICTIR
2021), over a :class:`~pyterrier_fandom_colbert.index.artifact.ColBERTIndex` of either storage format.

For each query, the token vectors of its ``fb_docs`` best documents are clustered by k-means into ``k``
centroids (FAISS, fixed seed); each centroid stands for the token id most frequent among its ``nn_tokens``
nearest feedback-document vectors, the tokens held by every document ([CLS], [SEP], the document marker) not
voting (as pyterrier_colbert skips special tokens; a centroid left without votes is dropped); centroids are ranked
by that token's IDF in the index (``log((N + 1) / (df + 1))``, ``df`` the documents holding the token), and the
``fb_embs`` best become expansion embeddings ``f`` with weights ``σ_f`` (the IDF). A document is then scored as in
the paper

    ``score(d) = Σ_i max_j sim(q_i, d_j) + β Σ_f σ_f max_j sim'(f, d_j)``

divided by the number of query vectors when the encoder's reduction is ``mean`` (so ``β = 0`` is exactly the
ColBERT score, and the ranking is the paper's under either reduction). ``sim'`` scores the centroid as it is, not
unit-normalised: under cosine similarity ``sim'(f, d) = |f| · cos(f, d)``, the inner product of the raw centroid
with the unit document vector, as pyterrier_colbert's scorer computes it (a k-means centroid of unit vectors is
shorter than 1, the more so the more spread its cluster; :func:`expansion_scale`).

Two choices differ from pyterrier_colbert's ``ColbertPRF``: the centroid's token is voted among the feedback
documents' vectors (the paper searches the whole index's FAISS index), which needs no neighbour index and works
the same on compressed indexes; the clustering is FAISS k-means (the paper used scikit-learn's).

The maths are pure functions over arrays (doctested); :class:`ColBERTPRF` does the DataFrame plumbing. Built by
``index.prf(...)``; it re-ranks the documents of its input (``colbert_retriever >> index.prf()``, the paper's
"ReRanker"), or, given ``retriever=index.retriever(...)``, retrieves again with the expanded query through that
retriever and scores its candidates (the paper's "Ranker").
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np
import pandas as pd
import pyterrier as pt

from ..checks import int_in_range, positive_int, real_in_range
from ..frames import (
    EqualByKey,
    artifact_key,
    empty_output,
    rank_by_score,
    require_columns,
    usable_query_rows,
    with_columns,
)
from ..model.encoders import query_tensors
from ..params import Parameters
from ..progress import progress

if TYPE_CHECKING:  # pragma: no cover

    from .artifact import ColBERTIndex

#: the columns the transformer adds besides ``score`` and ``rank``: the expansion embeddings ``[m, d]``, their
#: token ids ``[m]``, their weights ``σ_f`` (IDF) ``[m]``, and each document's MaxSim of every expansion embedding
#: ``[m]``, and its score without expansion (ColBERT's), so that other ``β`` and shorter expansions can be scored
#: without computing any similarity again (:func:`rescore`)
PRF_COLUMNS = ["prf_embs", "prf_toks", "prf_weights", "prf_maxsim", "prf_query_score"]
#: the input's document-level columns, not carried to the documents a re-retrieval finds
DOC_LEVEL_COLUMNS = frozenset({"docno", "docid", "score", "rank", "text", "title", "url", "doc_embs", "doc_toks",
                               *PRF_COLUMNS})
#: documents gathered and scored at a time (bounds the similarity matrix to ~ this · 300 tokens · (n + m) floats)
DOC_CHUNK = 256


# -- pure maths ----------------------------------------------------------------------------------------------
def document_frequencies(token_ids: np.ndarray, offsets: np.ndarray, vocab_size: Optional[int] = None) -> np.ndarray:
    """``df[t]``: how many documents hold token id ``t`` at least once (document ``i`` is rows
    ``offsets[i]:offsets[i + 1]``).

    >>> document_frequencies(np.array([5, 5, 2, 5, 7]), np.array([0, 2, 5])).tolist()  # 5 twice in the first
    [0, 0, 1, 0, 0, 2, 0, 1]
    """
    token_ids = np.asarray(token_ids, dtype=np.int64)
    size = int(token_ids.max()) + 1 if len(token_ids) else 0
    size = max(size, vocab_size or 0)
    if len(token_ids) == 0:
        return np.zeros(size, dtype=np.int64)
    owner = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    pairs = np.unique(owner * size + token_ids)  # one entry per (document, token)
    return np.bincount(pairs % size, minlength=size).astype(np.int64)


def idf(df: np.ndarray, num_docs: int) -> np.ndarray:
    """pyterrier_colbert's IDF: ``log((N + 1) / (df + 1))`` (0 for a token in every document).

    >>> idf(np.array([0, 1, 3]), 3).round(4).tolist()
    [1.3863, 0.6931, 0.0]
    """
    return np.log((num_docs + 1.0) / (np.asarray(df, dtype=np.float64) + 1.0))


def kmeans(vectors: np.ndarray, k: int, seed: int = 42, niter: int = 20) -> np.ndarray:
    """``min(k, n)`` centroids ``[k', d]`` (float32) of ``vectors [n, d]`` by FAISS k-means (Euclidean), fixed
    ``seed``: the same vectors give the same centroids.

    >>> points = np.array([[0., 0.], [0., .2], [10., 10.], [10., 10.2]], dtype=np.float32)
    >>> sorted(kmeans(points, 2).astype(np.float64).round(3).tolist())
    [[0.0, 0.1], [10.0, 10.1]]
    """
    import faiss

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    k = min(k, len(vectors))
    if k == len(vectors):  # every vector its own cluster (faiss refuses fewer points than centroids)
        return vectors.copy()
    clustering = faiss.Kmeans(vectors.shape[1], k, niter=niter, seed=seed, verbose=False,
                              min_points_per_centroid=1, max_points_per_centroid=1 << 20)
    clustering.train(vectors)
    return np.asarray(clustering.centroids, dtype=np.float32).reshape(k, -1)


def nearest_token_ids(sims: np.ndarray, token_ids: np.ndarray, nn_tokens: int = 10,
                      skipped: Optional[np.ndarray] = None) -> np.ndarray:
    """For each centroid (a row of ``sims [k, n]``, its similarity to the ``n`` feedback vectors), the token id
    most frequent among its ``nn_tokens`` most similar vectors, not counting the votes of ``skipped`` token ids
    (they still take their places among the nearest); a tie goes to the token met first, nearest first; ``-1``
    when every one of the nearest is skipped (pyterrier_colbert drops such a centroid).

    >>> sims = np.array([[.9, .8, .7, .1], [.1, .2, .3, .95]])
    >>> nearest_token_ids(sims, np.array([4, 6, 6, 9]), nn_tokens=3).tolist()   # votes 4,6,6 and 9,6,6
    [6, 6]
    >>> nearest_token_ids(sims, np.array([4, 6, 6, 9]), nn_tokens=1).tolist()
    [4, 9]
    >>> nearest_token_ids(sims, np.array([4, 6, 6, 9]), nn_tokens=3, skipped=np.array([6])).tolist()
    [4, 9]
    >>> nearest_token_ids(sims, np.array([4, 6, 6, 9]), nn_tokens=1, skipped=np.array([4, 9])).tolist()
    [-1, -1]
    """
    sims = np.asarray(sims)
    token_ids = np.asarray(token_ids)
    nearest = np.argsort(-sims, axis=1, kind="stable")[:, :nn_tokens]
    chosen = np.full(len(sims), -1, dtype=np.int64)
    for c, rows in enumerate(nearest):
        tokens = token_ids[rows]
        if skipped is not None and len(skipped):
            tokens = tokens[~np.isin(tokens, skipped)]
        if len(tokens) == 0:
            continue
        values, first, counts = np.unique(tokens, return_index=True, return_counts=True)
        best = np.flatnonzero(counts == counts.max())
        chosen[c] = values[best[np.argmin(first[best])]]
    return chosen


def choose_expansions(token_of_centroid: np.ndarray, token_idf: np.ndarray, fb_embs: int) -> np.ndarray:
    """Indices of the ``fb_embs`` centroids whose tokens have the highest IDF, best first (ties: lower index);
    centroids without a token (``-1``) are never chosen, so fewer may come back.

    >>> choose_expansions(np.array([3, 1, 2, 0]), np.array([0.5, 2.0, 1.0, 0.1]), 2).tolist()
    [1, 2]
    >>> choose_expansions(np.array([-1, 1, -1, 0]), np.array([0.5, 2.0]), 3).tolist()
    [1, 3]
    """
    token_of_centroid = np.asarray(token_of_centroid)
    kept = np.flatnonzero(token_of_centroid >= 0)
    weights = np.asarray(token_idf, dtype=np.float64)[token_of_centroid[kept]]
    return kept[np.argsort(-weights, kind="stable")[:fb_embs]]


def doc_maxima(sims: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``[docs, n]``: each document's best similarity per query vector, from ``sims [Σ lengths, n]`` (the
    documents' token rows back to back, ``lengths`` rows each, all ≥ 1).

    >>> doc_maxima(np.array([[1., 0.], [0., 2.], [3., 1.]]), np.array([2, 1])).tolist()
    [[1.0, 2.0], [3.0, 1.0]]
    """
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return np.maximum.reduceat(np.asarray(sims), starts, axis=0)


def expansion_scale(embs: np.ndarray, similarity: str) -> np.ndarray:
    """``[m]`` factors turning the encoder's similarity of each expansion embedding into the one ColBERT-PRF
    scores with: under ``cosine`` its norm (``|f| · cos(f, d) = f · d`` for a unit document vector ``d``: the raw
    centroid, as pyterrier_colbert scores it), else 1 (``dot`` and the L2 kinds already use the vector as it is).

    >>> expansion_scale(np.array([[3., 4.], [.6, .0]]), "cosine").round(3).tolist()
    [5.0, 0.6]
    >>> expansion_scale(np.array([[3., 4.]]), "dot").tolist()
    [1.0]
    """
    embs = np.asarray(embs, dtype=np.float64)
    if similarity == "cosine":
        return np.linalg.norm(embs, axis=1)
    return np.ones(len(embs))


def prf_scores(query_maxima: np.ndarray, expansion_maxima: np.ndarray, weights: np.ndarray, beta: float,
               reduction: str = "mean") -> np.ndarray:
    """``Σ_i M[d, i] + β Σ_f σ_f E[d, f]`` per document, divided by the number of query vectors ``n`` when
    ``reduction`` is ``mean`` (``query_maxima [docs, n]``, ``expansion_maxima [docs, m]``, ``weights [m]``).

    >>> M = np.array([[1., .5], [.2, .4]]); E = np.array([[.1], [.9]])
    >>> prf_scores(M, E, np.array([2.]), 1.0, "sum").round(3).tolist()
    [1.7, 2.4]
    >>> prf_scores(M, E, np.array([2.]), 0.5, "mean").round(3).tolist()
    [0.8, 0.75]
    """
    query_maxima = np.asarray(query_maxima, dtype=np.float64)
    total = query_maxima.sum(1) + beta * (np.asarray(expansion_maxima, dtype=np.float64) @ np.asarray(weights))
    return total / query_maxima.shape[1] if reduction == "mean" else total


# -- settings --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PrfSettings:
    """ColBERT-PRF's settings; the defaults are the paper's (ICTIR 2021: 3 feedback documents, 24 clusters, 10
    expansion embeddings, β = 1) and pyterrier_colbert's (``nn_tokens`` 10, seed 42).

    >>> PrfSettings(fb_embs=30)
    Traceback (most recent call last):
    ...
    ValueError: fb_embs=30; expected an integer from 1 to 24 (at most k=24 clusters can be kept)
    """

    fb_docs: int = 3
    fb_embs: int = 10
    beta: float = 1.0
    k: int = 24
    nn_tokens: int = 10
    seed: int = 42

    def __post_init__(self) -> None:
        positive_int("fb_docs", self.fb_docs)
        positive_int("k", self.k)
        int_in_range("fb_embs", self.fb_embs, 1, self.k, what=f"at most k={self.k} clusters can be kept")
        positive_int("nn_tokens", self.nn_tokens)
        int_in_range("seed", self.seed, 0)
        real_in_range("beta", self.beta, 0.0, what="the expansion embeddings' weight")


# -- the transformer -------------------------------------------------------------------------------------------
def _doc_rows(index: "ColBERTIndex", doc_ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(vectors ``[Σ n, d]`` float32, token ids ``[Σ n]``, lengths ``[docs]``) of documents, through the store
    (a compressed index's vectors decompressed)."""
    offsets = index.offsets
    starts, ends = offsets[doc_ids], offsets[np.asarray(doc_ids) + 1]
    vectors = [index.store.rows(int(s), int(e)) for s, e in zip(starts, ends)]
    tokens = np.concatenate([np.asarray(index.token_ids[s:e], dtype=np.int64) for s, e in zip(starts, ends)])
    return np.concatenate(vectors), tokens, (ends - starts).astype(np.int64)


def _similarities(tokens: np.ndarray, q: np.ndarray, similarity: str) -> np.ndarray:
    """``[T, n]`` similarities of token rows to query vectors, with the encoder's similarity."""
    import torch

    from ..model.scoring import token_similarities

    return token_similarities(torch.from_numpy(np.ascontiguousarray(tokens)),
                              torch.from_numpy(np.ascontiguousarray(q)), similarity).numpy()


class ColBERTPRF(EqualByKey, Parameters, pt.Transformer):
    """ColBERT-PRF (see the module docstring): qid, query_embs, docno, rank → + ``score``, ``rank`` and
    :data:`PRF_COLUMNS`.

    The feedback documents are each query's ``fb_docs`` best by the input's ``rank``. Without ``retriever`` (the
    paper's "ReRanker") every input row is re-scored and the other columns are kept. With ``retriever`` (the
    paper's "Ranker"; ``index.retriever(...)`` of the same index, either format) each query's expanded vectors
    (its own, then the expansion embeddings) are searched through that retriever, every vector weighted 1 there,
    and the documents it returns are scored with the weights; the output is those documents (document-level
    input columns such as ``text`` are not carried; query-level ones are), and ``query_embs`` stays the query's
    own. ``index.prf(fb_docs=3, fb_embs=10, beta=1.0, k=24)``; pipelines:
    ``colbert.query_encoder() >> index.retriever() >> index.prf()`` and
    ``… >> index.prf(retriever=index.retriever(num_results=1000))``. The settings (a :class:`PrfSettings`) and
    ``retriever`` are constructor arguments, read and changed through ``get_parameter``/``set_parameter``
    (checked as in the constructor).
    """

    def __init__(self, index: "ColBERTIndex", *, fb_docs: int = 3, fb_embs: int = 10, beta: float = 1.0, k: int = 24,
                 nn_tokens: int = 10, seed: int = 42, retriever: Optional[pt.Transformer] = None,
                 strict: bool = False, verbose: bool = False, colbert: Optional[Any] = None):
        if colbert is not None:
            index.check_encoder(colbert)
        #: the index's encoder, when given: its tokenizer writes the expansion terms as text (``prf_terms``)
        self.colbert = colbert
        self.index = index
        self.settings = PrfSettings(fb_docs=fb_docs, fb_embs=fb_embs, beta=beta, k=k, nn_tokens=nn_tokens, seed=seed)
        if retriever is not None:
            if not isinstance(retriever, pt.Transformer):
                raise TypeError(f"retriever={retriever!r}; expected a transformer (qid, query_embs → docno, "
                                "score, rank), e.g. index.retriever(num_results=1000), or None to re-rank")
            own = getattr(retriever, "index", None)
            if own is not None and artifact_key(own) != artifact_key(index):
                raise ValueError(f"retriever={retriever!r} searches the index at {own.path}, but the expansions "
                                 f"come from the index at {index.path}; give a retriever of the same index")
        self.retriever = retriever
        self.strict = strict
        self.verbose = verbose

    def _constructor_args(self) -> Dict[str, Any]:
        return {"index": self.index, **dataclasses.asdict(self.settings), "retriever": self.retriever,
                "strict": self.strict, "verbose": self.verbose, "colbert": self.colbert}

    def _key(self) -> Tuple[Any, ...]:
        return (artifact_key(self.index), self.settings, self.retriever, self.strict, self.colbert is not None)

    def __repr__(self) -> str:
        shown = [f"{f.name}={getattr(self.settings, f.name)!r}" for f in dataclasses.fields(PrfSettings)]
        if self.retriever is not None:
            shown.append(f"retriever={self.retriever!r}")
        return f"{self.index!r}.prf({', '.join(shown)}{', strict=True' if self.strict else ''})"

    # -- index statistics ----------------------------------------------------------------------------------
    @cached_property
    def _df(self) -> np.ndarray:
        return document_frequencies(self.index.token_ids, self.index.offsets)

    @cached_property
    def token_idf(self) -> np.ndarray:
        """IDF of every token id over the index's documents (computed once per transformer)."""
        return idf(self._df, len(self.index))

    @cached_property
    def structural_tokens(self) -> np.ndarray:
        """Token ids held by every document of the index: the encoder's [CLS], [SEP] and document marker (on a
        real collection no word is in every document). Their votes do not count, as pyterrier_colbert skips the
        tokenizer's special tokens and markers when it names a centroid's token."""
        return np.flatnonzero(self._df == len(self.index))

    # -- one query -----------------------------------------------------------------------------------------
    def expansions(self, feedback_ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(embeddings ``[m, d]``, token ids ``[m]``, IDF weights ``[m]``) from the feedback documents' ids."""
        s, config = self.settings, self.index.config
        vectors, tokens, _ = _doc_rows(self.index, feedback_ids)
        centroids = kmeans(vectors, s.k, s.seed)
        token_of = nearest_token_ids(_similarities(vectors, centroids, config.similarity).T, tokens, s.nn_tokens,
                                     self.structural_tokens)
        chosen = choose_expansions(token_of, self.token_idf, s.fb_embs)
        return centroids[chosen], token_of[chosen], self.token_idf[token_of[chosen]]

    def maxima(self, q: np.ndarray, doc_ids: np.ndarray) -> np.ndarray:
        """``[docs, n]`` best similarity of each of ``q``'s vectors in each document."""
        similarity = self.index.config.similarity
        out = np.empty((len(doc_ids), len(q)), dtype=np.float64)
        for start in range(0, len(doc_ids), DOC_CHUNK):
            chunk = doc_ids[start:start + DOC_CHUNK]
            vectors, _, lengths = _doc_rows(self.index, chunk)
            out[start:start + len(chunk)] = doc_maxima(_similarities(vectors, q, similarity), lengths)
        return out

    def _score(self, q: np.ndarray, embs: np.ndarray, weights: np.ndarray,
               docs: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(PRF scores, expansion maxima ``[docs, m]``, scores without expansion) of documents ``docs``."""
        similarity = getattr(self.index.config.similarity, "name", self.index.config.similarity)
        both = self.maxima(np.concatenate([q, embs]), docs)
        query_part = both[:, :len(q)]
        expansion_part = both[:, len(q):] * expansion_scale(embs, similarity)
        reduction = self.index.config.reduction
        return (prf_scores(query_part, expansion_part, weights, self.settings.beta, reduction), expansion_part,
                prf_scores(query_part, expansion_part, weights, 0.0, reduction))

    # -- frames --------------------------------------------------------------------------------------------
    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        terms = ["prf_terms"] if self.colbert is not None else []
        return self._base_outputs(input_columns) + terms

    def _base_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query_embs", "docno", "rank"], self)
        kept = input_columns if self.retriever is None \
            else [c for c in input_columns if c not in DOC_LEVEL_COLUMNS] + ["docno"]
        return kept + [c for c in ["score", "rank", *PRF_COLUMNS] if c not in kept]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        out = self._transform(inp)
        if self.colbert is not None:  # the expansion terms as text, each query's list decoded once
            decoded: Dict[int, List[str]] = {}
            terms = []
            for toks in out["prf_toks"]:
                if id(toks) not in decoded:
                    decoded[id(toks)] = self.colbert.tokenizer.tokens(toks)
                terms.append(decoded[id(toks)])
            out = out.assign(prf_terms=terms) if len(out) else out.assign(prf_terms=pd.Series([], dtype=object))
        return out

    def _transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid", "query_embs", "docno", "rank"], self)
        inp = usable_query_rows(inp, strict=self.strict, context=self)
        if len(inp) == 0:
            out = empty_output(inp, ["score", "rank", *PRF_COLUMNS])
            return out[self._base_outputs(list(inp.columns))]
        inp = inp.reset_index(drop=True)
        doc_ids = self.index.doc_ids(inp["docno"].tolist())
        codes, queries = query_tensors(inp, self.index.meta.dim, self)
        rows_of_query = pd.Series(np.arange(len(inp))).groupby(codes).indices
        ranks = inp["rank"].to_numpy()
        feedback: List[Tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        bar = progress(total=len(queries), desc="ColBERT-PRF", unit="query", enabled=self.verbose)
        try:
            for j in range(len(queries)):
                rows = rows_of_query[j]
                rows = rows[np.argsort(ranks[rows], kind="stable")]
                best = list(dict.fromkeys(doc_ids[rows].tolist()))[:self.settings.fb_docs]
                feedback.append(self.expansions(np.asarray(best, dtype=np.int64)))
                if self.retriever is None:
                    bar.update(1)
            if self.retriever is None:
                return self._rerank(inp, doc_ids, queries, rows_of_query, feedback)
            return self._retrieve(inp, codes, queries, feedback, bar)
        finally:
            bar.close()

    def _rerank(self, inp: pd.DataFrame, doc_ids: np.ndarray, queries: List[Any], rows_of_query: Dict[int, Any],
                feedback: List[Tuple[np.ndarray, np.ndarray, np.ndarray]]) -> pd.DataFrame:
        scores = np.empty(len(inp), dtype=np.float64)
        new: Dict[str, List[Any]] = {c: [None] * len(inp) for c in PRF_COLUMNS}
        for j, q in enumerate(queries):
            rows = rows_of_query[j]
            embs, toks, weights = feedback[j]
            docs, where = np.unique(doc_ids[rows], return_inverse=True)
            total, expansion_part, query_score = self._score(q.numpy(), embs, weights, docs)
            scores[rows] = total[where]
            for r, d in zip(rows, where):
                new["prf_embs"][r], new["prf_toks"][r], new["prf_weights"][r] = embs, toks, weights
                new["prf_maxsim"][r] = expansion_part[d]
                new["prf_query_score"][r] = query_score[d]
        return rank_by_score(with_columns(inp, {"score": scores, **new}))

    def _retrieve(self, inp: pd.DataFrame, codes: np.ndarray, queries: List[Any],
                  feedback: List[Tuple[np.ndarray, np.ndarray, np.ndarray]], bar: Any) -> pd.DataFrame:
        assert self.retriever is not None
        first = np.unique(codes, return_index=True)[1]
        query_level = [c for c in inp.columns if c not in DOC_LEVEL_COLUMNS]
        topics = inp.iloc[first][query_level].reset_index(drop=True)
        own_embs = topics["query_embs"].tolist()
        topics["query_embs"] = [np.concatenate([q.numpy(), embs]).astype(np.float32)
                                for q, (embs, _, _) in zip(queries, feedback)]
        topics["_prf_query"] = np.arange(len(topics))
        found = self.retriever.transform(topics)
        frames = []
        for j, rows in found.groupby("_prf_query", sort=False).indices.items():
            embs, toks, weights = feedback[int(j)]
            docs = self.index.doc_ids(found["docno"].iloc[rows].tolist())
            total, expansion_part, query_score = self._score(queries[int(j)].numpy(), embs, weights, docs)
            part = found.iloc[rows][[*query_level, "_prf_query", "docno"]].copy()
            part["query_embs"] = [own_embs[int(j)]] * len(part)
            part["score"] = total
            part["prf_embs"] = [embs] * len(part)
            part["prf_toks"] = [toks] * len(part)
            part["prf_weights"] = [weights] * len(part)
            part["prf_maxsim"] = list(expansion_part)
            part["prf_query_score"] = query_score
            frames.append(part)
            bar.update(1)
        if not frames:
            out = empty_output(topics.drop(columns=["_prf_query"]).iloc[:0], ["docno", "score", "rank", *PRF_COLUMNS])
            return out[self._base_outputs(list(inp.columns))]
        out = pd.concat(frames, ignore_index=True).drop(columns=["_prf_query"])
        out["rank"] = 0
        return rank_by_score(out)[self._base_outputs(list(inp.columns))]


def rescore(run: pd.DataFrame, beta: float, fb_embs: int, reduction: str = "mean") -> pd.DataFrame:
    """A :class:`ColBERTPRF` output ``run`` scored again with another ``beta`` and only its first ``fb_embs``
    expansion embeddings (chosen best first, so a shorter expansion is a prefix of a longer one), from its
    :data:`PRF_COLUMNS` alone: no similarity is computed again. Scores are those :class:`ColBERTPRF` would give
    with these settings (its tests check it), so a grid over ``beta`` and ``fb_embs`` costs one run."""
    positive_int("fb_embs", fb_embs)
    n = np.array([len(e) for e in run["query_embs"]], dtype=np.float64) if reduction == "mean" else 1.0
    expansion = np.array([np.dot(np.asarray(w)[:fb_embs], np.asarray(e)[:fb_embs])
                          for w, e in zip(run["prf_weights"], run["prf_maxsim"])], dtype=np.float64)
    scores = run["prf_query_score"].to_numpy(dtype=np.float64) + beta * expansion / n
    return rank_by_score(with_columns(run, {"score": scores}))
