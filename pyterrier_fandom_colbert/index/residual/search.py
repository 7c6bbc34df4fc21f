"""End-to-end retrieval over residual-compressed token vectors, without the full-precision vectors.

Per query (its scoring vectors ``q [n, d]``), following PLAID's stages (Santhanam et al., 2022):

1. **Centroid scores** ``S = sim(centroids, q)`` ``[C, n]``, once per query.
2. **Candidates**: the documents in the inverted lists (centroid → documents holding a token coded by it) of
   each query vector's ``ncells`` best centroids.
3. **Pruned centroid interaction**: each candidate's score ``Σ_i max_{c ∈ codes(d), c active} S[c, i]`` over only
   the *active* centroids, those some query vector scores at least ``threshold`` (computed from the inverted
   lists of the active centroids, so the work is proportional to those lists, not to the candidates' tokens);
   the best ``ndocs`` go on. Candidates without an active centroid come last.
4. **Centroid interaction**: ``Σ_i max_{c ∈ codes(d)} S[c, i]`` over all of a document's centroid ids; the best
   ``nscore`` go on.
5. **Exact MaxSim** of those ``nscore`` documents, with the encoder's similarity and reduction, over their vectors
   as stored (centroid + bucket weights, or the exact outlier): from tables of dot products and the stored norms,
   or decompressed in an index without norms; the top ``k`` are returned.

``ndocs=None`` turns stages 3-4 off (every candidate is scored exactly), and ``ncells ≥ C`` makes every document a
candidate: together they give exactly the exhaustive MaxSim ranking over the decompressed vectors.

The functions are pure over arrays; :class:`~.arrays.CompressedStore` bundles an index's arrays;
:class:`CentroidRetriever` at the end does the DataFrame plumbing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union, cast

import numpy as np
import pandas as pd
import pyterrier as pt

from ...checks import positive_int, real_in_range
from ...frames import (
    EqualByKey,
    artifact_key,
    hits_output,
    require_columns,
    usable_query_rows,
)
from ...model.encoders import query_tensors
from ...params import Parameters
from ...ranking import Hits, concat_slices, found_hits, top_k
from ..doc_blocks import doc_spans, refuse_non_finite_queries, token_blocks
from ..text_search import BatchedSearch, FusesWithEncoder
from .arrays import CompressedStore, ReadGuard, build_ivf, doc_code_pairs, list_docs  # noqa: F401 (home: arrays)
from .options import check_pruning

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ...model.similarity import Similarity
    from ..artifact import ColBERTIndex
    from .store import ResidualStore

#: (padded) token rows per block of exact scoring (as the fp16 scorer's blocks on CPU)
BLOCK_TOKENS = 8192
#: token rows per chunk of the centroid interaction (stage 4): the gathered ``[rows, n]`` scores stay in cache
INTERACTION_TOKENS = 65536


@dataclass(frozen=True)
class SearchParams:
    """Candidate generation and pruning parameters (see the module docstring).

    ``ncells``: centroids probed per query vector; ``threshold``: a centroid is active when some query vector
    scores it at least this much; ``ndocs``: candidates kept after the pruned centroid interaction (None: no
    pruning, every candidate is scored exactly); ``nscore``: documents kept after the full centroid interaction
    and scored exactly (default ``max(k, ndocs // 4)``).
    """

    ncells: int
    threshold: float
    ndocs: Optional[int]
    nscore: Optional[int] = None

    @classmethod
    def for_k(cls, k: int, ncells: Optional[int] = None, threshold: Optional[float] = None,
              ndocs: Union[int, str, None] = "auto", nscore: Optional[int] = None) -> "SearchParams":
        """PLAID's defaults for a top ``k`` (``k ≤ 10``: 1 cell, threshold 0.5, 256 documents; ``k ≤ 100``: 2,
        0.45, 1,024; deeper: 4, 0.4, ``max(4k, 4096)``), overridden by the arguments given (``ndocs="auto"``: the
        default; None: no pruning). For ``k ≤ 10`` with the default ``ndocs``, 128 documents are scored exactly
        rather than PLAID's 64: chosen on the tuning questions (SQuAD selection part, WikiQA dev) as the
        fewest that keep nDCG@10 within half a point of exact search (docs/experiments/index.md, "Choosing `nscore`").

        >>> SearchParams.for_k(10)
        SearchParams(ncells=1, threshold=0.5, ndocs=256, nscore=128)
        >>> SearchParams.for_k(10, ndocs=512)
        SearchParams(ncells=1, threshold=0.5, ndocs=512, nscore=None)
        >>> SearchParams.for_k(1000, ncells=8, ndocs=None)
        SearchParams(ncells=8, threshold=0.4, ndocs=None, nscore=None)
        >>> SearchParams.for_k(10, ncells=0)
        Traceback (most recent call last):
        ...
        ValueError: ncells=0; expected a positive integer (centroids probed per query vector)
        """
        if k <= 10:
            defaults = (1, 0.5, 256)
        elif k <= 100:
            defaults = (2, 0.45, 1024)
        else:
            defaults = (4, 0.4, max(4 * k, 4096))
        auto = isinstance(ndocs, str) and ndocs == "auto"
        if isinstance(ndocs, str) and not auto:
            raise ValueError(f"ndocs={ndocs!r}; expected a number of documents, 'auto' or None (no pruning)")
        if auto and nscore is None and k <= 10:
            nscore = 128
        params = cls(ncells if ncells is not None else defaults[0],
                     threshold if threshold is not None else defaults[1],
                     defaults[2] if isinstance(ndocs, str) else ndocs, nscore)
        params.check()
        return params

    def check(self) -> None:
        positive_int("ncells", self.ncells, what="centroids probed per query vector")
        real_in_range("threshold", self.threshold, what="a similarity")
        check_pruning(self.ndocs, self.nscore)
        if self.nscore is not None and self.ndocs is None:
            raise ValueError(f"nscore={self.nscore} needs pruning (ndocs), but ndocs=None scores every candidate")

    def scored(self, k: int) -> Optional[int]:
        """Documents scored exactly (None: all candidates)."""
        if self.ndocs is None:
            return None
        return self.nscore if self.nscore is not None else max(k, self.ndocs // 4)


def centroid_scores(centroids: "torch.Tensor", q: "torch.Tensor", similarity: str) -> np.ndarray:
    """``S [C, n]`` float32: the similarity of every centroid to every query vector."""
    from ...model.scoring import token_similarities

    return token_similarities(centroids, q.float(), similarity).numpy()


def probe(scores: np.ndarray, ncells: int) -> np.ndarray:
    """The distinct centroids among each query vector's ``ncells`` best (all when ``ncells ≥ C``); ties go to the
    lower centroid id.

    >>> probe(np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.7]]), 1).tolist()
    [0, 1]
    """
    num_centroids = scores.shape[0]
    if ncells >= num_centroids:
        return np.arange(num_centroids)
    if ncells == 1:  # the common case (k ≤ 10): one argmax per query vector, no partition of [C, n]
        return np.unique(scores.argmax(0))
    best = np.argpartition(-scores, ncells - 1, axis=0)[:ncells]
    return np.unique(best)


def distinct_docs(docs: np.ndarray, num_docs: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(candidates, member)``: the distinct ``docs`` ascending, and a boolean mask over all ``num_docs`` that
    is True at them. A dense pass over the mask when the collection is at most 8x the listed documents (no sort),
    ``np.unique`` otherwise; the mask is calloc'd, so only its touched pages cost anything.

    >>> c, m = distinct_docs(np.array([4, 1, 4]), 6)
    >>> c.tolist(), m.tolist()
    ([1, 4], [False, True, False, False, True, False])
    """
    member = np.zeros(num_docs, dtype=bool)
    if num_docs <= 8 * len(docs):
        member[docs] = True
        return np.flatnonzero(member), member
    candidates = np.unique(docs)
    member[candidates] = True
    return candidates, member


def pruned_interaction(scores: "torch.Tensor", threshold: float, candidates: np.ndarray, member: np.ndarray,
                       store: CompressedStore) -> Tuple[np.ndarray, np.ndarray]:
    """Stage 3: ``(documents, scores)`` of the candidates holding an active centroid (``max_i S[c, i] ≥
    threshold``), scored ``Σ_i max`` over their active centroids only; documents ascending.

    ``scores`` is ``S [C, n]`` as a tensor, ``member`` the candidates' mask over all documents
    (:func:`distinct_docs`). Found through the active centroids' inverted lists: the ``(centroid, document)``
    pairs with a candidate document, whose ``S`` rows are max-scattered into one ``[candidates, n]`` matrix (no
    sort: the work is proportional to the active lists).
    """
    import torch

    active = torch.nonzero(scores.amax(1) >= threshold).view(-1).numpy()
    docs, cells = store.listed(active)
    keep = member[docs]
    docs, cells = docs[keep], cells[keep]
    if len(docs) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    position = np.empty(len(member), dtype=np.int64)  # uninitialised: only the candidates' entries are read
    position[candidates] = np.arange(len(candidates))
    best = scatter_max(scores.index_select(0, torch.from_numpy(cells)), position[docs], len(candidates))
    approx = best.sum(1).numpy()
    touched = np.flatnonzero(approx > -np.inf)
    return candidates[touched], approx[touched]


def interaction(scores: "torch.Tensor", doc_ids: np.ndarray, store: CompressedStore,
                chunk_tokens: Optional[int] = None) -> np.ndarray:
    """Stage 4: ``Σ_i max_{c ∈ codes(d)} S[c, i]`` for each of ``doc_ids`` (over the tokens' centroid ids): the
    ``S`` rows of their tokens' codes, max-scattered into ``[documents, n]`` by document, a chunk of documents of
    about ``chunk_tokens`` tokens (default :data:`INTERACTION_TOKENS`) at a time, so that the gathered rows stay
    in cache (4,096 SciFact passages at once: 2.7x slower than in chunks of 65,536 tokens).

    >>> import torch
    >>> store = CompressedStore(None, np.array([0, 1, 1, 0, 2]), np.zeros((5, 1), np.uint8), np.array([0, 2, 3, 5]),
    ...                         np.zeros(4, np.int64), np.zeros(0, np.int64), "dot", "sum")
    >>> S = torch.tensor([[1., 0.], [0., 2.], [3., 1.]])   # centroid x query vector
    >>> interaction(S, np.array([2, 0, 1]), store, chunk_tokens=2).tolist()   # docs {0, 2}, {0, 1}, {1}
    [4.0, 3.0, 2.0]
    """
    import torch

    if len(doc_ids) == 0:
        return np.zeros(0, np.float32)
    store.reading(doc_ids, residuals=False)
    starts, lengths = doc_spans(store.offsets, doc_ids)
    codes = torch.from_numpy(np.asarray(store.codes[concat_slices(starts, starts + lengths)[0]], dtype=np.int64))
    ends = np.cumsum(lengths)
    out = np.empty(len(doc_ids), dtype=np.float32)
    for lo, hi in token_blocks(lengths, chunk_tokens or INTERACTION_TOKENS):
        rows = scores.index_select(0, codes[int(ends[lo] - lengths[lo]):int(ends[hi - 1])])
        out[lo:hi] = max_by_owner(rows, lengths[lo:hi]).sum(1).numpy()
    return out


def scatter_max(rows: "torch.Tensor", owner: np.ndarray, size: int) -> "torch.Tensor":
    """``[size, n]``: for each ``j``, the column-wise maximum of the rows of ``rows [m, n]`` whose ``owner`` is
    ``j`` (``-inf`` where none is).

    >>> import torch
    >>> scatter_max(torch.tensor([[1., 5.], [3., 2.], [0., 0.]]), np.array([2, 0, 2]), 3).tolist()
    [[3.0, 2.0], [-inf, -inf], [1.0, 5.0]]
    """
    import torch

    n = rows.shape[1]
    index = torch.from_numpy(np.asarray(owner, dtype=np.int64)).unsqueeze(1).expand(-1, n)
    return torch.full((size, n), -np.inf, dtype=rows.dtype).scatter_reduce_(0, index, rows, "amax")


def max_by_owner(rows: "torch.Tensor", lengths: np.ndarray) -> "torch.Tensor":
    """:func:`scatter_max` of consecutive groups: ``[len(lengths), n]``, the column-wise maximum of each group of
    ``lengths[j]`` rows of ``rows [Σ lengths, n]``.

    >>> import torch
    >>> max_by_owner(torch.tensor([[1., 5.], [3., 2.], [0., 0.]]), np.array([2, 1])).tolist()
    [[3.0, 5.0], [0.0, 0.0]]
    """
    return scatter_max(rows, np.repeat(np.arange(len(lengths)), lengths), len(lengths))


def exact_scores(store: CompressedStore, q: "torch.Tensor", doc_ids: np.ndarray,
                 block_tokens: Optional[int] = None) -> np.ndarray:
    """Stage 5: exact MaxSim (float64) of ``doc_ids`` for one query's ``q [n, d]``, over their decompressed
    vectors.

    The documents' token rows are decompressed and compared with ``q`` in blocks of ``block_tokens`` rows (into
    a ``[tokens, n]`` similarity matrix), then max-scattered into ``[documents, n]`` by each row's document and
    reduced over the query vectors: no padding, no sort by length. Documents go in chunks of about
    ``8 · block_tokens`` tokens, so that memory stays bounded when every document is scored.

    With the tokens' stored norms (``store.norms``) nothing is decompressed: each token's dot products with ``q``
    are its centroid's plus one table row per residual byte (:meth:`CompressedStore.scored_rows`), the same
    scores to float32 rounding, in about half the time of a top 10's 128 documents.
    """
    import torch

    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    scores = np.empty(len(doc_ids), dtype=np.float64)
    if len(doc_ids) == 0:
        return scores
    store.reading(doc_ids, residuals=True)
    block_tokens = block_tokens or BLOCK_TOKENS
    starts, lengths = doc_spans(store.offsets, doc_ids)
    q = q.float()
    if store.norms is not None:  # dot products from tables: nothing decompressed
        from ...model.similarity import get_similarity

        sim = get_similarity(store.similarity)
        tables = store.codec.dot_tables(sim.dot_query(q))
        for lo, hi in token_blocks(lengths, 8 * block_tokens):
            scores[lo:hi] = _table_chunk(store, q, starts[lo:hi], lengths[lo:hi], tables, sim)
        return scores
    buffer = torch.empty(2, min(block_tokens, int(lengths.sum())), store.codec.dim)  # decompressed; residuals
    for lo, hi in token_blocks(lengths, 8 * block_tokens):
        scores[lo:hi] = _exact_chunk(store, q, starts[lo:hi], lengths[lo:hi], block_tokens, buffer)
    return scores


def _table_chunk(store: CompressedStore, q: "torch.Tensor", starts: np.ndarray, lengths: np.ndarray,
                 tables: Tuple["torch.Tensor", "torch.Tensor"], sim: "Similarity") -> np.ndarray:
    from ...model.scoring import reduce_query

    rows = concat_slices(starts, starts + lengths)[0]
    sims = store.scored_rows(rows, q, tables, sim)
    return reduce_query(max_by_owner(sims, lengths), None, store.reduction).double().numpy()


def _exact_chunk(store: CompressedStore, q: "torch.Tensor", starts: np.ndarray, lengths: np.ndarray,
                 block_tokens: int, buffer: "torch.Tensor") -> np.ndarray:
    import torch

    from ...model.scoring import reduce_query, token_similarities

    rows = concat_slices(starts, starts + lengths)[0]
    n = q.shape[0]
    sims = torch.empty(len(rows), n)
    for a in range(0, len(rows), block_tokens):
        b = min(a + block_tokens, len(rows))
        tokens = store.decompress_rows(rows[a:b], buffer[0, :b - a], scratch=buffer[1])
        sims[a:b] = token_similarities(tokens, q, store.similarity)
    return reduce_query(max_by_owner(sims, lengths), None, store.reduction).double().numpy()


def search_one(store: CompressedStore, centroids: "torch.Tensor", q: "torch.Tensor", k: int,
               params: SearchParams, stats: Optional[dict] = None) -> Tuple[np.ndarray, np.ndarray]:
    """The top ``k`` (document ids, exact scores), best first, of one query's scoring vectors ``q [n, d]``.

    ``centroids`` is the codec's centroids as a tensor; ``stats``, when given, receives the number of documents
    at each stage.
    """
    import torch

    scores = torch.from_numpy(centroid_scores(centroids, q, store.similarity))
    if params.ncells >= scores.shape[0]:
        candidates, member = np.arange(store.num_docs), np.ones(store.num_docs, dtype=bool)
    else:
        listed = store.listed(probe(scores.numpy(), params.ncells))[0]
        candidates, member = distinct_docs(listed, store.num_docs)
    survivors = candidates
    scored = params.scored(k)
    if params.ndocs is not None and len(candidates) > params.ndocs:
        docs, approx = pruned_interaction(scores, params.threshold, candidates, member, store)
        survivors = docs[top_k(approx, docs, params.ndocs)]
        if len(survivors) < params.ndocs:  # too few with an active centroid: fill up with the other candidates
            rest = np.setdiff1d(candidates, survivors, assume_unique=True)
            survivors = np.concatenate([survivors, rest[:params.ndocs - len(survivors)]])
    pruned = len(survivors)
    if scored is not None and len(survivors) > scored:
        approx = interaction(scores, survivors, store)
        survivors = survivors[top_k(approx, survivors, scored)]
    if stats is not None:
        stats.update(candidates=len(candidates), pruned=pruned, scored=len(survivors))
    exact = exact_scores(store, q, survivors)
    best = top_k(exact, survivors, k)
    return survivors[best], exact[best]


def search(store: CompressedStore, queries: List["torch.Tensor"], k: int,
           params: SearchParams) -> List[Tuple[np.ndarray, np.ndarray]]:
    """:func:`search_one` for each query (on CPU)."""
    import torch

    centroids = torch.from_numpy(store.codec.centroids)
    return [search_one(store, centroids, q.cpu(), k, params) for q in queries]


class Overrides(NamedTuple):
    """The search parameters given to a :class:`CentroidRetriever` (None, or ``ndocs="auto"``: the default for
    ``num_results``), in the order of :meth:`SearchParams.for_k`."""

    ncells: Optional[int]
    threshold: Optional[float]
    ndocs: Union[int, str, None]
    nscore: Optional[int]


class CentroidRetriever(BatchedSearch, FusesWithEncoder, EqualByKey, Parameters, pt.Transformer):
    """End-to-end retriever over a compressed index: qid, query_embs → + docno, score, rank (other input columns
    kept). ``index.retriever(colbert)`` of a compressed index builds ``colbert.query_encoder() >>`` this.

    ``ncells``, ``threshold``, ``ndocs`` and ``nscore`` override the defaults that :meth:`SearchParams.for_k`
    picks for ``num_results`` (also after ``% k``).
    """

    SEARCH_DESC = "ColBERT retrieval (compressed)"

    def __init__(self, index: "ColBERTIndex", *, num_results: int = 1000, ncells: Optional[int] = None,
                 threshold: Optional[float] = None, ndocs: Union[int, str, None] = "auto",
                 nscore: Optional[int] = None, strict: bool = False, verbose: bool = False):
        num_results = positive_int("num_results", num_results)
        if isinstance(ndocs, str) and ndocs != "auto":
            raise ValueError(f"ndocs={ndocs!r}; expected a number of documents, 'auto' or None (no pruning)")
        self.index = index
        self.num_results = num_results
        self.overrides = Overrides(ncells, threshold, ndocs, nscore)
        self.params = SearchParams.for_k(num_results, *self.overrides)
        self.strict = strict
        self.verbose = verbose

    def fuse_rank_cutoff(self, k: int) -> "CentroidRetriever":
        """``% k`` (and ``compile()``): fewer results from the same search: this retriever's cells, threshold,
        pruning and exactly scored documents are kept, so the top ``k`` is exactly the top ``k`` of the uncut list
        (a rank cut-off never changes the ranking above it). For PLAID's cheaper defaults at a smaller depth, ask
        for them: ``index.retriever(num_results=10)``."""
        if k >= self.num_results:
            return self
        p = self.params
        return CentroidRetriever(self.index, num_results=k, ncells=p.ncells, threshold=p.threshold, ndocs=p.ndocs,
                                 nscore=p.scored(self.num_results), strict=self.strict, verbose=self.verbose)

    def _key(self) -> Tuple:
        return (artifact_key(self.index), self.num_results, self.params, self.strict)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"index": self.index, "num_results": self.num_results, **self.overrides._asdict(),
                "strict": self.strict, "verbose": self.verbose}

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query_embs"], self)
        return [*input_columns, "docno", "score", "rank"]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        return hits_output(self.hits(inp))

    def hits(self, inp: pd.DataFrame) -> Hits:
        """The search's answer as arrays (:class:`~pyterrier_fandom_colbert.ranking.Hits`): what
        :meth:`transform` lays out as its frame, and what a sharded index merges across its shards."""
        require_columns(inp.columns, ["qid", "query_embs"], self)
        inp = usable_query_rows(inp, strict=self.strict, context=self)
        if len(inp) == 0:
            return Hits.none(inp)
        codes, unique = query_tensors(inp, self.index.meta.dim, self)
        refuse_non_finite_queries(inp, codes, unique, self)
        return Hits(inp, *found_hits(codes, self.search_all(unique), self.index.docnos_of))

    def search_vectors(self, queries: Sequence["torch.Tensor"]) -> List[Tuple[np.ndarray, np.ndarray]]:
        """Per query (its scoring vectors ``[n, d]`` float32): the top ``num_results`` (document ids, scores), best
        first; what :meth:`hits` and ``index.searcher()`` ask."""
        store = cast("ResidualStore", self.index.store).arrays
        return search(store, list(queries), self.num_results, self.params)

    def __repr__(self) -> str:
        p = self.params
        strict = ", strict=True" if self.strict else ""
        return (f"{self.index!r}.retriever(num_results={self.num_results}, ncells={p.ncells}, "
                f"threshold={p.threshold}, ndocs={p.ndocs}, nscore={p.nscore}{strict})")
