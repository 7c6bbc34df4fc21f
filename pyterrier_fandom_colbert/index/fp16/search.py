"""Retrieval and re-ranking from a :class:`~pyterrier_fandom_colbert.index.artifact.ColBERTIndex`'s stored vectors.

End-to-end retrieval: each scoring query vector fetches its ``k̂`` nearest document tokens (``ceil(k / λ)``, a
fixed ``k_hat``, or by default ``max(ceil(k / 2), 50)``: :func:`neighbours_per_vector`) by exact search or FAISS
IVF / IVF-PQ (see index/ann/; optionally ``refine · k̂`` of them cut
to the ``k̂`` nearest by the stored vectors); their documents (at most ``k̂ · N_q``) are scored exactly with the
encoder's MaxSim over the stored vectors (:func:`score_docs`, length-sorted blocks); the top ``k`` are returned.

Array helpers are pure functions; :func:`score_docs` and :func:`search` work on arrays and tensors; the
transformer at the end does the DataFrame plumbing. Re-ranking from stored vectors, the same for every format, is
:class:`~pyterrier_fandom_colbert.index.scorer.IndexScorer`.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union, cast

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
from ...ranking import Hits, found_hits, top_k
from ...storage import DamagedFileError, artifact_path
from ..ann import FaissSpec
from ..doc_blocks import length_sorted_blocks, padded_blocks, refuse_non_finite_queries  # noqa: F401 (also importable from here)
from ..layout import VECTORS_FILE
from ..text_search import BatchedSearch, FusesWithEncoder
from .options import check_neighbour_search

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..ann import AnnIndex
    from ..artifact import ColBERTIndex
    from .store import Fp16Store

#: (padded) token rows scored per block. On CPU, blocks that stay near the core's caches win: 8,192 rows (2 MB
#: fp16 + 4 MB float32) re-ranked 1.4-1.6x faster than 32,768 on the 2-core AMD EPYC VM (docs/index.md)
BLOCK_TOKENS = {"cpu": 8192, "cuda": 1 << 20}
#: k̂ = ceil(k / λ) token neighbours per query vector, by default (docs/method.md §4.2) ...
DEFAULT_LAM = 2
#: ... but at least this many: with k̂ = ceil(10 / 2) = 5 a top 10 agreed with exhaustive MaxSim on ~70% of its
#: documents on SciFact, with k̂ = 50 on 99%, for ~10 ms more per query (docs/experiments/index.md)
MIN_K_HAT = 50
#: queries whose vectors go to FAISS in one search call
QUERY_BATCH = 64

#: the retriever's default neighbour search (``faiss=None``) on indexes of at least :data:`EXACT_BELOW_TOKENS`
#: tokens: the fastest setting that agreed with exact search on SciFact (docs/experiments/index.md)
DEFAULT_ANN = "ivfpq-fs"
DEFAULT_ANN_NPROBE = 16
DEFAULT_ANN_REFINE = 2
#: below this many stored tokens the default is ``exact``: it costs little there, needs nothing built, and IVF
#: training wants many more tokens than lists
EXACT_BELOW_TOKENS = 100_000


def neighbours_per_vector(num_results: int, lam: Optional[float] = None, k_hat: Optional[int] = None) -> int:
    """k̂, the token neighbours each query vector fetches: ``k_hat`` when given, ``ceil(num_results / lam)`` when
    ``lam`` is given, else ``max(ceil(num_results / DEFAULT_LAM), MIN_K_HAT)``.

    >>> [neighbours_per_vector(1000), neighbours_per_vector(10), neighbours_per_vector(10, lam=2)]
    [500, 50, 5]
    >>> neighbours_per_vector(10, k_hat=7)
    7
    """
    if k_hat is not None:
        return k_hat
    if lam is not None:
        return math.ceil(num_results / lam)
    return max(math.ceil(num_results / DEFAULT_LAM), MIN_K_HAT)


def default_search(num_tokens: int) -> Tuple[FaissSpec, Optional[int], int]:
    """(spec, nprobe, refine) of the retriever's default neighbour search for an index of ``num_tokens`` tokens.

    >>> default_search(5_000)[0].kind
    'exact'
    >>> spec, nprobe, refine = default_search(1_000_000)
    >>> spec.kind, nprobe, refine
    ('ivfpq-fs', 16, 2)
    """
    if num_tokens < EXACT_BELOW_TOKENS:
        return FaissSpec("exact"), None, 1
    return FaissSpec(DEFAULT_ANN), DEFAULT_ANN_NPROBE, DEFAULT_ANN_REFINE


def docs_of_rows(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Document id owning each token row.

    >>> docs_of_rows(np.array([0, 2, 5, 6]), np.array([0, 1, 2, 5])).tolist()
    [0, 0, 1, 2]
    """
    return np.searchsorted(offsets, rows, side="right") - 1


def score_docs(index: "ColBERTIndex", q: "torch.Tensor", doc_ids: np.ndarray,
               block_tokens: Optional[int] = None) -> np.ndarray:
    """Exact scores (float64) of ``doc_ids`` for one query's scoring vectors ``q [n, d]``, on ``q``'s device.

    Documents are taken shortest first, in blocks of about ``block_tokens`` rows gathered from the memory-mapped
    fp16 vectors, each document padded to its block's longest by repeating its last token
    (:func:`~pyterrier_fandom_colbert.model.scoring.maxsim_repeat_padded`: sorted lengths keep the padding small, and
    one ``amax`` over a fixed width replaces a scatter-max). The buffers are allocated once per call: fresh
    multi-MB tensors per block cost page faults that rival the matmul on CPU. fp16 indexes only (a compressed
    index's scores: :func:`~..residual.search.exact_scores`; either: ``index.store.exact_scores``).
    """
    import torch

    from ...model.scoring import maxsim_repeat_padded

    config = index.config
    block_tokens = block_tokens or BLOCK_TOKENS.get(q.device.type, BLOCK_TOKENS["cuda"])
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    scores = np.empty(len(doc_ids), dtype=np.float64)
    if len(doc_ids) == 0:
        return scores
    cast("Fp16Store", index.store).check_docs(doc_ids)  # first reads of their blocks verify them
    starts, lengths, order, blocks = length_sorted_blocks(index.offsets, doc_ids, block_tokens)
    size = max((end - start) * int(lengths[order[end - 1]]) for start, end in blocks)
    stored = index.vector_tensor
    gathered = torch.empty(size, stored.shape[1], dtype=stored.dtype)
    as_float = torch.empty(size, stored.shape[1], dtype=torch.float32, device=q.device)
    q = q.float()
    for start, end in blocks:
        docs = order[start:end]
        width = int(lengths[docs[-1]])
        rows = starts[docs, None] + np.minimum(np.arange(width), lengths[docs, None] - 1)  # repeat last token
        n = rows.size
        torch.index_select(stored, 0, torch.from_numpy(rows.reshape(-1)), out=gathered[:n])
        tokens = as_float[:n]
        tokens.copy_(gathered[:n])
        scores[docs] = maxsim_repeat_padded(q, tokens, len(docs), config.similarity, config.reduction).cpu().numpy()
    bad = np.flatnonzero(~np.isfinite(scores))
    if len(bad):  # a NaN score must never be ranked
        raise _non_finite(index, q, doc_ids[bad])
    return scores


def _non_finite(index: "ColBERTIndex", q: "torch.Tensor", doc_ids: np.ndarray) -> Exception:
    """The error for NaN/inf scores: non-finite query vectors, or else damaged stored vectors."""
    import torch

    if not bool(torch.isfinite(q).all()):
        return ValueError("the query vectors hold NaN or inf values, so no document can be scored; check the "
                          "query encoder's output")
    file = artifact_path(index) / VECTORS_FILE
    docnos = index.docnos_of(doc_ids[:5]).tolist()
    more = f" and {len(doc_ids) - 5} more" if len(doc_ids) > 5 else ""
    return DamagedFileError(file, f"docno(s) {docnos}{more} score NaN or inf: their vectors in {file} are not "
                                  "finite, so the index is damaged; index.verify() checks the whole index; rebuild "
                                  "it (index.indexer(colbert, overwrite=True))")


def token_neighbours(index: "ColBERTIndex", ann: "AnnIndex", queries: Sequence["torch.Tensor"], k_hat: int,
                     nprobe: Optional[int] = None, refine: int = 1) -> np.ndarray:
    """Row ids ``[Σ n, k_hat]`` (-1: none) of the ``k_hat`` nearest stored tokens of every vector of every query,
    from one FAISS call (``refine · k_hat`` fetched, of which the ``k_hat`` most similar by the stored vectors
    are kept, when ``refine > 1``)."""
    from .. import ann as faiss_ann

    similarity = index.config.similarity
    _, normalise = faiss_ann.metric_for(similarity)
    vectors = faiss_ann.as_search_vectors(np.concatenate([q.float().cpu().numpy() for q in queries]), normalise)
    hits = faiss_ann.search(ann, vectors, refine * k_hat, nprobe)
    if refine > 1:
        cast("Fp16Store", index.store).check_rows(hits)
        hits = faiss_ann.refine(index.vector_tensor, vectors, hits, k_hat, similarity)
    return hits


def search(index: "ColBERTIndex", ann: "AnnIndex", queries: Sequence["torch.Tensor"], k: int,
           k_hat: int, nprobe: Optional[int] = None, refine: int = 1) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Per query (its scoring vectors ``[n, d]``): the top ``k`` (document ids, exact scores), best first.

    The documents holding the queries' :func:`token_neighbours` are the candidates, all scored exactly.
    """
    if not queries:
        return []
    hits = token_neighbours(index, ann, queries, k_hat, nprobe, refine)
    bounds = np.cumsum([0] + [len(q) for q in queries])
    results = []
    for i, q in enumerate(queries):
        rows = hits[bounds[i]:bounds[i + 1]]
        candidates = np.unique(docs_of_rows(index.offsets, rows[rows >= 0]))
        scores = score_docs(index, q, candidates)
        best = top_k(scores, candidates, k)
        results.append((candidates[best], scores[best]))
    return results


QUERY_INPUT = ["qid", "query_embs"]


class ColBERTRetriever(BatchedSearch, FusesWithEncoder, EqualByKey, Parameters, pt.Transformer):
    """End-to-end retriever: qid, query_embs → + docno, score, rank (other input columns kept).

    The query vectors come from ``colbert.query_encoder()`` of the encoder that built the index:
    ``colbert.query_encoder() >> index.retriever()``, or ``index.retriever(colbert)`` which checks the encoder and
    builds that pipeline. Rows whose ``query`` text is empty or not text get no results and one warning naming
    their qids (``strict=True``: an error), as in every retriever and scorer.

    ``faiss=None`` (default) is :func:`default_search` for the index's size, resolved here: the object (its
    ``spec``, ``nprobe``, ``refine``, repr and equality) holds the setting actually used.
    """

    SEARCH_BATCH = QUERY_BATCH

    def __init__(self, index: "ColBERTIndex", *, num_results: int = 1000,
                 lam: Optional[float] = None, k_hat: Optional[int] = None,
                 faiss: Union[str, FaissSpec, None] = None, nprobe: Optional[int] = None,
                 refine: Optional[int] = None, strict: bool = False, verbose: bool = False):
        if faiss is None:
            spec, default_nprobe, default_refine = default_search(index.meta.num_tokens)
            if spec.ann_kind.exact and (nprobe is not None or (refine is not None and refine != 1)):
                given = f"nprobe={nprobe}" if nprobe is not None else f"refine={refine}"
                raise ValueError(f"{given} tunes an approximate search, but the default for this index "
                                 f"({index.meta.num_tokens} tokens, under {EXACT_BELOW_TOKENS}) is exact search; "
                                 f"ask for one explicitly, e.g. faiss={DEFAULT_ANN!r}")
            nprobe = default_nprobe if nprobe is None else nprobe
            refine = default_refine if refine is None else refine
        else:
            spec = faiss if isinstance(faiss, FaissSpec) else FaissSpec(faiss)
        refine = 1 if refine is None else refine
        num_results = positive_int("num_results", num_results)
        if lam is not None and k_hat is not None:
            raise ValueError(f"lam={lam} and k_hat={k_hat} both set the neighbours per query vector; give one")
        real_in_range("lam", lam, 0.0, above=True, none=True, what="k̂ = ceil(num_results / lam)")
        nprobe, refine = check_neighbour_search(k_hat, spec, nprobe, refine)
        self.index = index
        self.num_results = num_results
        #: as given (None: not given); k̂ itself is k_hat
        self.lam, self.fixed_k_hat = lam, k_hat
        self.k_hat = neighbours_per_vector(num_results, lam, k_hat)
        self.spec = spec
        self.nprobe = nprobe
        self.refine = refine
        self.strict = strict
        self.verbose = verbose

    def fuse_rank_cutoff(self, k: int) -> "ColBERTRetriever":
        """``% k`` (and ``compile()``): fewer results from the same candidates: k̂ stays this retriever's, so the
        top ``k`` is exactly the top ``k`` of the uncut list (a rank cut-off never changes the ranking above
        it). For a cheaper search at a smaller depth, ask for it: ``index.retriever(num_results=10)``."""
        if k >= self.num_results:
            return self
        return ColBERTRetriever(self.index, num_results=k, faiss=self.spec, nprobe=self.nprobe,
                                refine=self.refine, strict=self.strict, verbose=self.verbose, k_hat=self.k_hat)

    def _key(self) -> Tuple[Any, ...]:
        return (artifact_key(self.index), self.num_results, self.k_hat, self.spec, self.nprobe, self.refine,
                self.strict)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"index": self.index, "num_results": self.num_results, "lam": self.lam, "k_hat": self.fixed_k_hat,
                "faiss": self.spec, "nprobe": self.nprobe, "refine": self.refine, "strict": self.strict,
                "verbose": self.verbose}

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, QUERY_INPUT, self)
        return [*input_columns, "docno", "score", "rank"]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        return hits_output(self.hits(inp))

    def hits(self, inp: pd.DataFrame) -> Hits:
        """The search's answer as arrays (:class:`~pyterrier_fandom_colbert.ranking.Hits`): what
        :meth:`transform` lays out as its frame, and what a sharded index merges across its shards."""
        require_columns(inp.columns, QUERY_INPUT, self)
        inp = usable_query_rows(inp, strict=self.strict, context=self)
        if len(inp) == 0:
            return Hits.none(inp)
        codes, unique = query_tensors(inp, self.index.meta.dim, self)
        refuse_non_finite_queries(inp, codes, unique, self)
        return Hits(inp, *found_hits(codes, self.search_all(unique), self.index.docnos_of))

    def search_vectors(self, queries: Sequence["torch.Tensor"]) -> List[Tuple[np.ndarray, np.ndarray]]:
        """Per query (its scoring vectors ``[n, d]`` float32): the top ``num_results`` (document ids, exact scores),
        best first; what :meth:`hits` and ``index.searcher()`` ask."""
        return search(self.index, self.index.ann(self.spec), list(queries), self.num_results, self.k_hat,
                      self.nprobe, self.refine)

    def __repr__(self) -> str:
        neighbours = f"lam={self.lam}" if self.lam is not None else f"k_hat={self.k_hat}"
        nprobe = f", nprobe={self.nprobe}" if self.nprobe is not None else ""
        refine = f", refine={self.refine}" if self.refine > 1 else ""
        strict = ", strict=True" if self.strict else ""
        faiss = repr(self.spec.kind) if self.spec == FaissSpec(self.spec.kind) else repr(self.spec)
        return (f"{self.index!r}.retriever(num_results={self.num_results}, {neighbours}, "
                f"faiss={faiss}{nprobe}{refine}{strict})")
