"""``TfidfRetriever``: the PyTerrier transformer that ranks a :class:`~.tfidf.TfidfIndex`'s documents for queries
(``TfidfIndex.retriever()`` builds it); the index does the scoring (``TfidfIndex.search``), this module the frame
plumbing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np
import pandas as pd
import pyterrier as pt

from ..checks import positive_int
from ..frames import EqualByKey, artifact_key, empty_output, usable_query_rows
from ..params import Parameters
from ..progress import paced_ranges, progress
from ..ranking import stacked_hits

if TYPE_CHECKING:  # pragma: no cover
    from .tfidf import TfidfIndex

__all__ = ["TfidfRetriever"]


class TfidfRetriever(EqualByKey, Parameters, pt.Transformer):
    """qid, query → + docno, score, rank (+ text); other input columns are kept.

    Queries with no indexed term (only stopwords or unknown words) give no rows. Empty or non-text queries give
    no rows either, with one warning naming their qids (``strict=True``: an error), as in every retriever and
    scorer of the package. Rank order: score descending, then index order (the order documents were indexed) for
    ties.
    """

    def __init__(self, index: "TfidfIndex", num_results: int = 1000, *, text: bool = False, batch_size: int = 256,
                 strict: bool = False, verbose: bool = False):
        positive_int("num_results", num_results)
        positive_int("batch_size", batch_size)
        self.index, self.num_results, self.text = index, num_results, text
        self.batch_size, self.strict, self.verbose = batch_size, strict, verbose

    def _key(self) -> Tuple[Any, ...]:
        return (artifact_key(self.index), self.num_results, self.text, self.strict)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"index": self.index, "num_results": self.num_results, "text": self.text,
                "batch_size": self.batch_size, "strict": self.strict, "verbose": self.verbose}

    def _outputs(self) -> List[str]:
        return ["docno", "score", "rank"] + (["text"] if self.text else [])

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        pt.validate.query_frame(input_columns, ["query"], context=self)
        return list(input_columns) + [c for c in self._outputs() if c not in input_columns]

    def fuse_rank_cutoff(self, k: int) -> Optional[pt.Transformer]:
        if k >= self.num_results:
            return self
        return TfidfRetriever(self.index, k, text=self.text, batch_size=self.batch_size, strict=self.strict,
                              verbose=self.verbose)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pt.validate.query_frame(inp, ["query"], context=self)
        inp = usable_query_rows(inp, strict=self.strict, context=self)
        queries = inp["query"].tolist()
        hits = []
        bar = progress(total=len(queries), desc="tf-idf retrieval", unit="query", enabled=self.verbose)
        try:
            # with a bar, batches shrink when one takes over half a second (a large index), so the bar moves
            for start, stop in paced_ranges(len(queries), self.batch_size, enabled=self.verbose):
                for qi, d, s in self.index.search(queries[start:stop], self.num_results):
                    hits.append((start + qi, d, s))
                bar.update(stop - start)
        finally:
            bar.close()
        if not hits:
            return empty_output(inp.iloc[:0], self._outputs())
        out, unique, inverse = stacked_hits(inp, hits, self.index.docnos.fwd)  # each docno (and text) decoded once
        if self.text:
            out["text"] = np.asarray(self.index.texts(unique), dtype=object)[inverse]
        return out

    def __repr__(self) -> str:
        extra = (", text=True" if self.text else "") + (", strict=True" if self.strict else "")
        return f"{self.index!r}.retriever(num_results={self.num_results}{extra})"
