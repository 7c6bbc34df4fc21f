"""Re-ranking from a :class:`~pyterrier_fandom_colbert.index.artifact.ColBERTIndex`'s stored vectors, for every
storage format: each candidate document is scored exactly by its store (:meth:`~.store.IndexStore.exact_scores`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Tuple

import numpy as np
import pandas as pd
import pyterrier as pt

from ..frames import EqualByKey, artifact_key, empty_output, require_columns, usable_query_rows, with_columns
from ..model.encoders import query_tensors
from ..params import Parameters
from ..progress import progress
from ..ranking import rank_by_score
from .doc_blocks import refuse_non_finite_queries

if TYPE_CHECKING:  # pragma: no cover
    from .artifact import ColBERTIndex


class IndexScorer(EqualByKey, Parameters, pt.Transformer):
    """Re-ranker from stored vectors: qid, query_embs, docno → + score, rank. No text, no document encoding.

    ``colbert.query_encoder() >> first_stage >> index.scorer()``, or ``first_stage >> index.scorer(colbert)``.
    Rows whose ``query`` text is empty or not text are left out with one warning (``strict=True``: an error).
    """

    def __init__(self, index: "ColBERTIndex", *, strict: bool = False, verbose: bool = False):
        self.index = index
        self.strict = strict
        self.verbose = verbose

    def _key(self) -> Tuple[Any, ...]:
        return (artifact_key(self.index), self.strict)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"index": self.index, "strict": self.strict, "verbose": self.verbose}

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "docno", "query_embs"], self)
        return input_columns + [c for c in ("score", "rank") if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid", "docno", "query_embs"], self)
        inp = usable_query_rows(inp, strict=self.strict, context=self)
        if len(inp) == 0:
            return empty_output(inp, ["score", "rank"])
        doc_ids = self.index.doc_ids(inp["docno"].tolist())
        codes, queries = query_tensors(inp, self.index.meta.dim, self)
        refuse_non_finite_queries(inp, codes, queries, self)
        rows_of_query = pd.Series(np.arange(len(inp))).groupby(codes).indices
        scores = np.empty(len(inp), dtype=np.float64)
        bar = progress(total=len(queries), desc="ColBERT re-ranking", unit="query", enabled=self.verbose)
        try:
            for j, q in enumerate(queries):
                rows = rows_of_query[j]
                docs, where = np.unique(doc_ids[rows], return_inverse=True)
                scores[rows] = self.index.store.exact_scores(q, docs)[where]
                bar.update(1)
        finally:
            bar.close()
        return rank_by_score(with_columns(inp, {"score": scores}))

    def __repr__(self) -> str:
        return f"{self.index!r}.scorer({'strict=True' if self.strict else ''})"
