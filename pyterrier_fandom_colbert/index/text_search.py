"""Text in, top k out, with no frame between encoding and search.

``index.retriever(colbert)`` is a :class:`TextRetriever`: ``colbert.query_encoder() >> index.retriever()`` as one
stage, the same output frame (query vectors and tokens included) with no intermediate frame, checks done once and
no sort of an already ranked frame in :meth:`~TextRetriever.search` (PyTerrier's ``compile()`` fuses the two-stage
pipeline into it too). ``index.searcher(colbert)`` answers one query at a time with the same passages and scores and
no frame at all, for callers that ask one question and want arrays back (a server, a latency benchmark).

    searcher = index.searcher(colbert, num_results=10)
    docnos, scores = searcher.search("when was the game released")   # best first
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Protocol, Sequence, Tuple, cast

import numpy as np
import pandas as pd
import pyterrier as pt

from ..frames import EqualByKey, check_query_text, empty_output, require_columns, usable_query_rows
from ..model.encoders import QUERY_COLUMNS, QueryEncoder
from ..params import Parameters
from ..progress import progress
from ..ranking import found_hits, hits_columns
from .doc_blocks import refuse_non_finite_queries

if TYPE_CHECKING:
    import torch

    from ..model.colbert import ColBERT
    from .artifact import ColBERTIndex


class VectorSearch(Protocol):
    """A single-index retriever that searches query vectors directly (fp16 and compressed)."""

    index: "ColBERTIndex"
    num_results: int

    def search_vectors(self, queries: Sequence["torch.Tensor"]) -> List[Tuple[np.ndarray, np.ndarray]]:
        ...

    def search_all(self, queries: Sequence["torch.Tensor"]) -> List[Tuple[np.ndarray, np.ndarray]]:
        ...

    def fuse_rank_cutoff(self, k: int) -> Any:
        ...

    def get_parameter(self, name: str) -> Any:
        ...

    def set_parameter(self, name: str, value: Any) -> Any:
        ...

    def _constructor_args(self) -> Dict[str, Any]:
        ...

    def _key(self) -> Tuple[Any, ...]:
        ...


OUTPUTS = [*QUERY_COLUMNS, "docno", "score", "rank"]
#: the fused stage's own parameters; every other name is its parts'
OWN = ("encoder", "retriever")


class TextRetriever(EqualByKey, Parameters, pt.Transformer):
    """qid, query → + ``query_embs``, ``query_toks``, ``docno``, ``score``, ``rank`` (other input columns kept):
    ``encoder >> retriever`` in one stage, with the same output (tested), made by ``index.retriever(colbert)`` and
    by ``compile()`` of that two-stage pipeline.

    Its parameters are its parts': ``get_parameter("num_results")`` reads the retriever's, ``set_parameter`` sets
    a name on each part that has it (``strict``, ``verbose``: both), and ``encoder`` / ``retriever`` replace a part.
    """

    def __init__(self, encoder: QueryEncoder, retriever: VectorSearch):
        if not isinstance(encoder, QueryEncoder):
            raise TypeError(f"encoder={encoder!r}; expected a colbert.query_encoder()")
        self.encoder = encoder
        self.retriever = retriever

    def _key(self) -> Tuple[Any, ...]:
        return (self.encoder._key(), type(self.retriever).__qualname__, self.retriever._key())

    def _constructor_args(self) -> Dict[str, Any]:
        return {"encoder": self.encoder, "retriever": self.retriever}

    def subtransformers(self) -> Dict[str, Any]:
        return {"encoder": self.encoder, "retriever": self.retriever}

    def _parts_with(self, name: str) -> List[Any]:
        parts = [p for p in (self.retriever, self.encoder) if name in p._constructor_args()]
        if not parts:
            names = sorted({*OWN, *self.retriever._constructor_args(), *self.encoder._constructor_args()})
            raise ValueError(f"{type(self).__name__} has no parameter {name!r}; its parameters are "
                             f"{', '.join(names)}")
        return parts

    def get_parameter(self, name: str) -> Any:
        return super().get_parameter(name) if name in OWN else self._parts_with(name)[0].get_parameter(name)

    def set_parameter(self, name: str, value: Any) -> "TextRetriever":
        if name in OWN:
            super().set_parameter(name, value)
            return self
        for part in self._parts_with(name):
            part.set_parameter(name, value)
        return self

    def fuse_rank_cutoff(self, k: int) -> Optional["TextRetriever"]:
        """``% k``: the retriever's own cut (the top ``k`` of the same search)."""
        cut = self.retriever.fuse_rank_cutoff(k)
        return self if cut is self.retriever else TextRetriever(self.encoder, cut)

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query"], self)
        return [*input_columns, *(c for c in OUTPUTS if c not in input_columns)]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        import torch

        require_columns(inp.columns, ["qid", "query"], self)
        inp = usable_query_rows(inp, strict=self.encoder.strict, context=self)
        if len(inp) == 0:
            return empty_output(inp, OUTPUTS)
        texts = inp["query"].tolist()
        # rows that ask the same text share one encoding and one search (the pipeline's encoder and retriever
        # each deduplicate too; the same answer)
        if len(texts) == 1:
            codes, unique = np.zeros(1, np.int64), texts
        else:
            codes, found_texts = pd.factorize(pd.Series(texts, dtype=object))
            unique = list(found_texts)
        vecs, toks = self.encoder.encode(unique)
        queries = [torch.from_numpy(v) for v in vecs]
        refuse_non_finite_queries(inp, codes, queries, self)
        rows, docnos, scores = found_hits(codes, self.retriever.search_all(queries), self.retriever.index.docnos_of)
        columns = {c: inp[c].array for c in inp.columns}
        columns["query_embs"] = _objects(vecs)[codes]
        columns["query_toks"] = _objects(toks)[codes]
        return hits_columns(columns, rows, docnos, scores)

    def search(self, query: str, qid: str = "1", sort: bool = True) -> pd.DataFrame:
        """One query, as ``pt.Transformer.search``: the frame comes out in rank order, so it is not sorted again."""
        return self.transform(pd.DataFrame([[qid, query]], columns=["qid", "query"]))

    def __getitem__(self, i: int) -> Any:
        """The two stages as a pipeline's: ``[0]`` the encoder, ``[1]`` (``[-1]``) the retriever."""
        return (self.encoder, self.retriever)[i]

    def __repr__(self) -> str:
        return f"{self.encoder!r} >> {self.retriever!r}"


def _objects(values: Sequence[Any]) -> np.ndarray:
    """A 1-d object array of ``values`` (arrays and lists kept whole, not broadcast)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


class BatchedSearch:
    """Mixin of the single-index retrievers: :meth:`search_all` runs their ``search_vectors`` over
    ``SEARCH_BATCH`` queries at a time, with a progress bar (``SEARCH_DESC``) when ``verbose``."""

    SEARCH_BATCH = 1
    SEARCH_DESC = "ColBERT retrieval"
    verbose: bool

    def search_vectors(self, queries: Sequence["torch.Tensor"]) -> List[Tuple[np.ndarray, np.ndarray]]:
        raise NotImplementedError  # (the retriever's own)

    def search_all(self, queries: Sequence["torch.Tensor"]) -> List[Tuple[np.ndarray, np.ndarray]]:
        """:meth:`search_vectors` of ``queries`` (checked), ``SEARCH_BATCH`` at a time."""
        found: List[Tuple[np.ndarray, np.ndarray]] = []
        bar = progress(total=len(queries), desc=self.SEARCH_DESC, unit="query", enabled=self.verbose)
        try:
            for start in range(0, len(queries), self.SEARCH_BATCH):
                batch = queries[start:start + self.SEARCH_BATCH]
                found.extend(self.search_vectors(batch))
                bar.update(len(batch))
        finally:
            bar.close()
        return found


class FusesWithEncoder:
    """Mixin of the single-index retrievers (fp16 and compressed): ``compile()`` makes ``colbert.query_encoder()
    >> retriever`` one :class:`TextRetriever` (PyTerrier's ``fuse_left``); any other left stage is not fused.
    Put it before ``pt.Transformer`` in the bases."""

    def fuse_left(self, left: pt.Transformer) -> Optional[pt.Transformer]:
        return TextRetriever(left, cast(VectorSearch, self)) if type(left) is QueryEncoder else None


class TextSearcher:
    """One query's text → ``(docnos, scores)`` of its top ``num_results`` passages, best first (module notes).

    ``retriever`` is the index's own retriever (``index.store.retriever(...)``), whose settings it uses; equal to
    ``colbert.query_encoder() >> retriever`` on every query (tested)."""

    def __init__(self, index: "ColBERTIndex", colbert: "ColBERT", retriever: VectorSearch):
        self.index = index
        self.colbert = colbert
        self.retriever = retriever

    @property
    def num_results(self) -> int:
        return self.retriever.num_results

    def search(self, query: Any) -> Tuple[np.ndarray, np.ndarray]:
        """The top passages of ``query`` (a non-empty text, else a ``ValueError`` showing it): docnos and float64
        scores, best first."""
        import torch

        text = check_query_text(query)
        with torch.inference_mode():
            embs, mask = self.colbert.encode_queries([text])
            q = embs[0][mask[0]].float().cpu()
            if not bool(torch.isfinite(q).all()):
                raise ValueError(f"the query vectors of {text!r} hold NaN or inf values; check the query encoder")
            ids, scores = self.retriever.search_vectors([q])[0]
        return self.index.docnos_of(ids), np.asarray(scores, dtype=np.float64)

    def __repr__(self) -> str:
        return f"TextSearcher({self.retriever!r})"
