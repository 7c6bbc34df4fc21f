"""PyTerrier transformers over a :class:`~pyterrier_fandom_colbert.model.colbert.ColBERT`: encoders and scorers.

Stages compose through columns: :class:`QueryEncoder` adds ``query_embs`` (each query's scoring vectors) and
``query_toks``; every later stage that needs query vectors (the index retriever and scorer, :class:`TextScorer`,
:class:`EmbeddingScorer`, the explainer) reads them from there, so a pipeline encodes each query once.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from ..checks import positive_int
from ..frames import (
    EqualByKey,
    check_texts,
    empty_output,
    require_columns,
    usable_query_rows,
    with_columns,
)
from ..params import Parameters
from ..ranking import rank_by_score
from .config import ColBERTConfig

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .colbert import ColBERT

QUERY_COLUMNS = ["query_embs", "query_toks"]


def encode_query_frame(colbert: "ColBERT", texts: Sequence[str]) -> Tuple[List[np.ndarray], List[List[str]]]:
    """Scoring vectors (``[n, d]`` float32, no unscored [MASK]s) and their token strings per query text; each
    distinct text is encoded once."""
    texts = list(texts)
    unique: Union[List[str], np.ndarray]
    inverse: Union[List[int], np.ndarray]
    if len(texts) == 1:  # one query (pt.Transformer.search): nothing to deduplicate
        unique, inverse = texts, [0]
    else:
        unique, inverse = np.unique(np.array(texts, dtype=object), return_inverse=True)
    embs, masks, ids = colbert.encode_queries(list(unique), with_ids=True)
    embs, masks = embs.float().cpu().numpy(), masks.cpu().numpy()
    vecs = [embs[i][masks[i]] for i in range(len(unique))]
    toks = [colbert.tokenizer.tokens(ids[i][masks[i]]) for i in range(len(unique))]
    return [vecs[i] for i in inverse], [toks[i] for i in inverse]


def query_vectors(frame: pd.DataFrame, dim: int, context: Any = None) -> List[np.ndarray]:
    """The ``query_embs`` column as float32 ``[n, dim]`` arrays, or an error naming the first bad row's qid."""
    out = []
    for qid, value in zip(frame["qid"], frame["query_embs"]):
        arr = np.asarray(value, dtype=np.float32) if value is not None else None
        if arr is None or arr.ndim != 2 or arr.shape[1] != dim or len(arr) == 0:
            shape = None if arr is None else list(arr.shape)
            raise ValueError(f"{context or 'transformer'}: query_embs of qid {qid!r} has shape {shape}; expected "
                             f"[n >= 1, {dim}] scoring vectors from colbert.query_encoder() of the encoder that "
                             "built the index")
        out.append(arr)
    return out


def query_tensors(frame: pd.DataFrame, dim: int, context: Any = None) -> Tuple[np.ndarray, List["torch.Tensor"]]:
    """(code of each row, one float32 tensor per distinct query) from the ``query_embs`` column: rows that share a
    qid and a query text share the vectors."""
    import torch

    if len(frame) == 1:  # one query (pt.Transformer.search): no grouping to do
        codes, first = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    else:
        keys = frame["qid"].astype(str) + "\x00" + frame["query"].astype(str) if "query" in frame.columns \
            else frame["qid"].astype(str)
        codes = pd.factorize(keys)[0]
        first = np.unique(codes, return_index=True)[1]  # codes count up in order of first appearance
    vectors = query_vectors(frame.iloc[first], dim, context)
    return codes, [torch.from_numpy(v) for v in vectors]


def pad_vectors(vectors: Sequence["torch.Tensor"]) -> Tuple["torch.Tensor", "torch.Tensor"]:
    """Stack ``[n_i, d]`` tensors into ``[B, max n_i, d]`` (zero padding) and a mask ``[B, max n_i]`` of real rows.

    >>> import torch
    >>> Q, mask = pad_vectors([torch.ones(1, 2), torch.ones(3, 2)])
    >>> list(Q.shape), mask.tolist()
    ([2, 3, 2], [[True, False, False], [True, True, True]])
    """
    import torch

    longest = max(len(v) for v in vectors)
    Q = torch.zeros(len(vectors), longest, vectors[0].shape[1], dtype=torch.float32)
    mask = torch.zeros(len(vectors), longest, dtype=torch.bool)
    for i, v in enumerate(vectors):
        Q[i, :len(v)] = v
        mask[i, :len(v)] = True
    return Q, mask


@contextmanager
def model_settings(colbert: "ColBERT", batch_size: Optional[int], verbose: Optional[bool]) -> Iterator[None]:
    """``colbert.batch_size`` / ``verbose`` set to a transformer's own while it runs (None: the model's)."""
    saved = colbert.batch_size, colbert.verbose
    colbert.batch_size = saved[0] if batch_size is None else batch_size
    colbert.verbose = saved[1] if verbose is None else verbose
    try:
        yield
    finally:
        colbert.batch_size, colbert.verbose = saved


def _settings_repr(batch_size: Optional[int], verbose: Optional[bool]) -> List[str]:
    return ([f"batch_size={batch_size}"] if batch_size is not None else []) + \
        ([f"verbose={verbose}"] if verbose is not None else [])


class QueryEncoder(EqualByKey, Parameters, pt.Transformer):
    """qid, query → + ``query_embs`` (scoring query vectors ``[n, d]``, float32) and ``query_toks``.

    Rows of empty or non-text queries are left out with one warning naming their qids (so a pipeline gives them
    no results), or refused with ``strict=True`` (:func:`~pyterrier_fandom_colbert.frames.usable_query_rows`).
    """

    def __init__(self, colbert: "ColBERT", *, strict: bool = False, batch_size: Optional[int] = None,
                 verbose: Optional[bool] = None):
        positive_int("batch_size", batch_size, none=True, what="queries per forward pass")
        self.colbert = colbert
        self.strict = strict
        #: queries per forward pass and a progress bar (None: the model's ``batch_size`` / ``verbose``)
        self.batch_size, self.verbose = batch_size, verbose

    def _key(self) -> Tuple[Any, ...]:
        return (*self.colbert.encoding_key(), self.strict)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"colbert": self.colbert, "strict": self.strict, "batch_size": self.batch_size,
                "verbose": self.verbose}

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query"], self)
        return input_columns + [c for c in QUERY_COLUMNS if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid", "query"], self)
        inp = usable_query_rows(inp, strict=self.strict, context=self)
        if len(inp) == 0:
            return empty_output(inp, QUERY_COLUMNS)
        vecs, toks = self.encode(inp["query"].tolist())
        return with_columns(inp, {"query_embs": vecs, "query_toks": toks})

    def encode(self, queries: Sequence[str]) -> Tuple[List[np.ndarray], List[List[str]]]:
        """:func:`encode_query_frame` of ``queries`` (usable texts) in this encoder's batches, with its progress
        bar: the ``query_embs`` and ``query_toks`` of each."""
        from ..progress import progress

        vecs: List[np.ndarray] = []
        toks: List[List[str]] = []
        with model_settings(self.colbert, self.batch_size, self.verbose):
            size = self.colbert.batch_size * (1 if self.colbert.verbose else max(1, len(queries)))
            bar = progress(total=len(queries), desc="encoding queries", unit="query", enabled=self.colbert.verbose)
            try:
                for start in range(0, len(queries), size):
                    v, t = encode_query_frame(self.colbert, queries[start:start + size])
                    vecs.extend(v)
                    toks.extend(t)
                    bar.update(len(queries[start:start + size]))
            finally:
                bar.close()
        return vecs, toks

    def __repr__(self) -> str:
        shown = (["strict=True"] if self.strict else []) + _settings_repr(self.batch_size, self.verbose)
        return f"{self.colbert!r}.query_encoder({', '.join(shown)})"


class DocEncoder(EqualByKey, Parameters, pt.Transformer):
    """docno, text → + ``doc_embs`` (``[L_d, d]`` float32, scoring tokens only) and ``doc_toks``."""

    def __init__(self, colbert: "ColBERT", text_field: str = "text"):
        self.colbert = colbert
        self.text_field = text_field

    def _key(self) -> Tuple[Any, ...]:
        return (*self.colbert.encoding_key(), self.text_field)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"colbert": self.colbert, "text_field": self.text_field}

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["docno", self.text_field], self)
        return input_columns + [c for c in ("doc_embs", "doc_toks") if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["docno", self.text_field], self)
        if len(inp) == 0:
            return empty_output(inp, ["doc_embs", "doc_toks"])
        texts = check_texts(inp, self.text_field)
        embs: List = [None] * len(texts)
        toks: List = [None] * len(texts)
        for batch in self.colbert.doc_batches(texts):
            for pos, vecs, ids in batch.per_document():
                embs[pos] = vecs
                toks[pos] = self.colbert.tokenizer.tokens(ids)
        return with_columns(inp, {"doc_embs": embs, "doc_toks": toks})

    def __repr__(self) -> str:
        return f"{self.colbert!r}.doc_encoder()"


class TextScorer(EqualByKey, Parameters, pt.Transformer):
    """Re-ranker: qid, query, docno, text → + score (mean MaxSim by default), rank.

    Query vectors come from a ``query_embs`` column when an earlier stage added one (``colbert.query_encoder()``),
    else each distinct query is encoded here. Each distinct text is encoded once; documents are scored batch by
    batch as they are encoded, so memory does not grow with the number of candidates. Rows of empty or non-text
    queries are left out with a warning (``strict=True``: refused), as by every retriever and scorer.

    Texts longer than one document (``doc_maxlen - 3`` word pieces) are read whole, as the indexer stores them:
    ``long_docs="windows"`` (the default) encodes overlapping windows ``stride`` pieces apart and scores MaxSim
    over the tokens of all of them, so ``first_stage >> colbert.text_scorer()`` ranks as ``first_stage >>
    index.scorer(colbert)`` over an index built with the same settings; ``long_docs="truncate"`` reads only the
    first ``doc_maxlen`` tokens.
    """

    def __init__(self, colbert: "ColBERT", text_field: str = "text", *, strict: bool = False,
                 long_docs: str = "windows", stride: Optional[int] = None, batch_size: Optional[int] = None,
                 verbose: Optional[bool] = None):
        from .tokenization import check_long_docs

        positive_int("batch_size", batch_size, none=True, what="texts per forward pass")
        #: texts per forward pass and progress bars (None: the model's ``batch_size`` / ``verbose``)
        self.batch_size, self.verbose = batch_size, verbose

        self.stride = check_long_docs(long_docs, stride, colbert.tokenizer.max_doc_pieces, colbert.config.doc_maxlen)
        self.colbert = colbert
        self.text_field = text_field
        self.strict = strict
        self.long_docs = long_docs

    def _key(self) -> Tuple[Any, ...]:
        return (*self.colbert.encoding_key(), self.text_field, self.strict, self.long_docs, self.stride)

    def _constructor_args(self) -> Dict[str, Any]:
        from .tokenization import default_stride

        # the default stride as None, so that switching to long_docs="truncate" needs no second change
        default = default_stride(self.colbert.tokenizer.max_doc_pieces)
        return {"colbert": self.colbert, "text_field": self.text_field, "strict": self.strict,
                "long_docs": self.long_docs, "stride": None if self.stride == default else self.stride,
                "batch_size": self.batch_size, "verbose": self.verbose}

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query", "docno", self.text_field], self)
        return input_columns + [c for c in ("score", "rank") if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid", "query", "docno", self.text_field], self)
        inp = usable_query_rows(inp, strict=self.strict, context=self)
        if len(inp) == 0:
            return empty_output(inp, ["score", "rank"])
        with model_settings(self.colbert, self.batch_size, self.verbose):
            return self._scored(inp)

    def _scored(self, inp: pd.DataFrame) -> pd.DataFrame:
        import torch

        from .scoring import maxsim

        texts = check_texts(inp, self.text_field)
        q_codes, Q, q_mask = self._queries(inp)
        t_codes, t_unique = pd.factorize(pd.Series(texts))
        rows_of_text = pd.Series(np.arange(len(inp))).groupby(t_codes).indices
        scores = np.empty(len(inp), dtype=np.float64)
        cfg = self.colbert.config
        for positions, embs, mask in self._documents(list(t_unique)):
            local = np.concatenate([np.full(len(rows_of_text[p]), j) for j, p in enumerate(positions)])
            rows = np.concatenate([rows_of_text[p] for p in positions])
            qi = torch.as_tensor(q_codes[rows], device=Q.device)
            li = torch.as_tensor(local, device=embs.device)
            s = maxsim(Q[qi], embs[li].float(), q_mask[qi], mask[li], cfg.similarity, cfg.reduction)
            scores[rows] = s.cpu().numpy()
        return rank_by_score(with_columns(inp, {"score": scores}))

    def _documents(self, texts: List[str]) -> Iterator[Tuple[np.ndarray, "torch.Tensor", "torch.Tensor"]]:
        """(positions in ``texts``, padded vectors [b, L, d], mask [b, L]) of batches of the texts, each text read
        whole (windows) or truncated."""
        import torch

        if self.stride is None:
            for batch in self.colbert.doc_batches(texts):
                yield batch.positions, batch.embs, batch.mask
            return
        size, span = self.colbert.batch_size, 8 * self.colbert.batch_size  # texts whose windows are bucketed at once
        for start in range(0, len(texts), span):
            chunk = texts[start:start + span]
            encoded = self.colbert.encode_pieces(self.colbert.tokenizer.document_pieces(chunk), self.stride)
            for b in range(0, len(encoded), size):
                embs, mask = pad_vectors([torch.from_numpy(v) for v, _, _ in encoded[b:b + size]])
                yield (np.arange(start + b, start + b + len(embs)), embs.to(self.colbert.device),
                       mask.to(self.colbert.device))

    def _queries(self, inp: pd.DataFrame) -> Tuple[np.ndarray, "torch.Tensor", "torch.Tensor"]:
        """(query of each row, padded query vectors [n, L, d], their mask [n, L]) on the encoder's device."""
        if "query_embs" in inp.columns:
            codes, vectors = query_tensors(inp, self.colbert.config.dim, self)
            Q, mask = pad_vectors(vectors)
            return codes, Q.to(self.colbert.device), mask.to(self.colbert.device)
        codes, unique = pd.factorize(inp["query"])
        Q, mask = self.colbert.encode_queries(list(unique))
        return codes, Q.float(), mask

    def __repr__(self) -> str:
        options = (["strict=True"] if self.strict else []) + (
            ["long_docs='truncate'"] if self.stride is None else [f"stride={self.stride}"])
        field = [f"text_field={self.text_field!r}"] if self.text_field != "text" else []
        shown = field + options + _settings_repr(self.batch_size, self.verbose)
        return f"{self.colbert!r}.text_scorer({', '.join(shown)})"


class EmbeddingScorer(EqualByKey, Parameters, pt.Transformer):
    """query_embs, doc_embs → + score, rank, for frames that already carry token vectors."""

    def __init__(self, config: ColBERTConfig):
        self.config = config

    def _key(self) -> Tuple[Any, ...]:
        return (self.config.similarity, self.config.reduction)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"config": self.config}

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query_embs", "doc_embs"], self)
        return input_columns + [c for c in ("score", "rank") if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid", "query_embs", "doc_embs"], self)
        if len(inp) == 0:
            return empty_output(inp, ["score", "rank"])
        scores = score_pairs(inp["query_embs"].tolist(), inp["doc_embs"].tolist(), self.config,
                             inp["docno"].tolist() if "docno" in inp.columns else None)
        return rank_by_score(with_columns(inp, {"score": scores}))

    def __repr__(self) -> str:
        return f"EmbeddingScorer(similarity={self.config.similarity!r}, reduction={self.config.reduction!r})"


def score_pairs(queries: Sequence[np.ndarray], docs: Sequence[np.ndarray], config: ColBERTConfig,
                docnos: Optional[Sequence[Any]] = None) -> np.ndarray:
    """MaxSim of aligned (query vectors, document vectors) pairs, each unpadded; a malformed pair is an error
    naming its row (and docno)."""
    import torch

    from .scoring import maxsim

    out = np.empty(len(queries), dtype=np.float64)
    for i, (q, d) in enumerate(zip(queries, docs)):
        qa = None if q is None else np.asarray(q, dtype=np.float32)
        da = None if d is None else np.asarray(d, dtype=np.float32)
        if qa is None or da is None or qa.ndim != 2 or da.ndim != 2 or qa.shape[1] != da.shape[1] or not len(da):
            name = f" (docno {docnos[i]!r})" if docnos is not None else ""
            raise ValueError(f"row {i}{name}: query_embs {None if qa is None else list(qa.shape)} and doc_embs "
                             f"{None if da is None else list(da.shape)} are not [n, d] and [m >= 1, d] token vectors")
        out[i] = float(maxsim(torch.from_numpy(qa)[None], torch.from_numpy(da)[None], similarity=config.similarity,
                              reduction=config.reduction)[0])
    return out
