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

__all__ = ["TfidfRetriever", "TfidfScorer"]


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


class TfidfScorer(EqualByKey, Parameters, pt.Transformer):
    """qid, query, docno → + score, rank: the TF-IDF (BM25-weighted) score of each given document for its query,
    the score :class:`TfidfRetriever` gives it (0 where no query term occurs in it); other input columns are kept.

    Re-ranks any candidates (``bm25 >> tfidf_index.scorer()``) and is a feature (``e2e >> (tfidf_index.scorer() **
    index.scorer())``). A docno the index does not hold is an error naming it. Empty or non-text queries: their
    rows are dropped with one warning (``strict=True``: an error), as in every scorer of the package.
    """

    def __init__(self, index: "TfidfIndex", *, strict: bool = False, verbose: bool = False):
        self.index, self.strict, self.verbose = index, strict, verbose

    def _key(self) -> Tuple[Any, ...]:
        return (artifact_key(self.index), self.strict)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"index": self.index, "strict": self.strict, "verbose": self.verbose}

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        pt.validate.columns(input_columns, includes=["qid", "query", "docno"], context=self)
        return list(input_columns) + [c for c in ("score", "rank") if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        import scipy.sparse as sp

        from ..ranking import rank_by_score

        pt.validate.columns(inp, includes=["qid", "query", "docno"], context=self)
        inp = usable_query_rows(inp, strict=self.strict, context=self)
        if len(inp) == 0:
            return empty_output(inp.drop(columns=[c for c in ("score", "rank") if c in inp.columns]),
                                ["score", "rank"])
        docnos = inp["docno"].astype(str).to_numpy()
        unique_docnos, doc_codes = np.unique(docnos, return_inverse=True)
        ids = np.asarray(self.index.docnos.inv[unique_docnos], dtype=np.int64)
        if (ids < 0).any():
            missing = unique_docnos[ids < 0]
            raise ValueError(f"{len(missing)} docno(s) are not in the TF-IDF index at {self.index.path}, e.g. "
                             f"{list(missing[:5])}")
        query_codes, queries = pd.factorize(inp["query"])
        vocab, post, analyzer = self.index.vocab, self.index.postings, self.index.analyzer
        rows: List[int] = []
        cols: List[int] = []
        vals: List[int] = []
        for qi, query in enumerate(queries):
            counts: Dict[int, int] = {}
            for term in analyzer.terms(query):
                if term in vocab:
                    counts[vocab[term]] = counts.get(vocab[term], 0) + 1
            rows.extend([qi] * len(counts))
            cols.extend(counts)
            vals.extend(counts.values())
        qmat = sp.csr_matrix((np.asarray(vals, np.float64), (np.asarray(rows, np.int64), np.asarray(cols, np.int64))),
                             shape=(len(queries), post.shape[0]))
        scores = (qmat @ post).tocsr()
        found = np.asarray(scores[np.asarray(query_codes), ids[doc_codes]]).ravel()
        out = inp.drop(columns=[c for c in ("score", "rank") if c in inp.columns]).assign(score=found)
        return rank_by_score(out)

    def __repr__(self) -> str:
        return f"{self.index!r}.scorer()" if not self.strict else f"{self.index!r}.scorer(strict=True)"
