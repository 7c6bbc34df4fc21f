"""Classical first stage: a TF-IDF index with Terrier's ``TF_IDF`` weighting, as a PyTerrier artifact.

    score(d, q) = Σ_t qtf · k1·tf / (tf + k1·(1 − b + b·dl/avgdl)) · log2(N/df + 1)

with Robertson's tf, Sparck Jones' idf, ``dl`` = the number of indexed terms of d (after stopword removal),
``avgdl`` = indexed terms / N, and ``qtf`` the count of the term in the analysed query.

Folder layout: ``pt_meta.json`` (:class:`TfidfMeta`: type, format, config, statistics), ``tf.npz`` (document ×
term frequencies, CSR), ``doclens.npy``, ``lexicon.txt`` (term per line; line number = term id),
``docnos.npids``, and, when built with ``store_text=True``, ``text.bin`` + ``text_offsets.npy`` (UTF-8 passages,
end to end).
"""
from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import scipy.sparse as sp

from ..frames import EqualByKey, artifact_key, check_record, empty_output
from ..lazy import forget_cached
from ..progress import progress
from ..ranking import top_k
from ..storage import ARTIFACT_META_FILE, JsonConfig, atomic_folder, is_artifact_folder, read_artifact_meta
from .analysis import Analyzer, stopword_list

ARTIFACT_TYPE = "sparse_index"
ARTIFACT_FORMAT = "tfidf"
PACKAGE_HINT = "pyterrier-fandom-colbert"


@dataclass(frozen=True)
class TfidfConfig(JsonConfig):
    """Weighting and analysis settings, stored in ``pt_meta.json`` and used for documents and queries alike.

    >>> TfidfConfig(b=1.5)
    Traceback (most recent call last):
    ...
    ValueError: b=1.5 must lie in [0, 1]
    """

    k1: float = 1.2
    b: float = 0.75
    #: PyStemmer algorithm ("porter": Porter's original, as in Terrier) or None for no stemming
    stemmer: Optional[str] = "porter"
    #: stopword list removed before stemming: "lucene" (33 function words), "glasgow" (318 words, drops content
    #: words such as "system"), "none"; True/False in older indexes mean "glasgow"/"none" (docs/tfidf.md)
    stopwords: Union[bool, str] = "lucene"
    #: "unicode" (letters/digits of any script) or "english" (Terrier's A-Z/0-9 EnglishTokeniser)
    tokeniser: str = "unicode"

    def __post_init__(self):
        stopword_list(self.stopwords)  # an unknown list name is an error here, not at the first document
        if not self.k1 > 0:
            raise ValueError(f"k1={self.k1} must be positive")
        if not 0 <= self.b <= 1:
            raise ValueError(f"b={self.b} must lie in [0, 1]")

    def analyzer(self) -> Analyzer:
        return Analyzer(stemmer=self.stemmer, stopwords=self.stopwords, tokeniser=self.tokeniser)


@dataclass(frozen=True)
class TfidfMeta(JsonConfig):
    """What ``pt_meta.json`` of a TF-IDF index records: the settings, the sizes and whether passages are stored.

    >>> meta = TfidfMeta(config=TfidfConfig(b=0.5), num_docs=2, num_terms=3, num_tokens=4, num_postings=4)
    >>> TfidfMeta.from_dict(meta.to_dict()) == meta
    True
    """

    config: TfidfConfig
    num_docs: int
    num_terms: int
    num_tokens: int
    num_postings: int
    #: the document field whose passages are stored (``store_text=True``), else None
    text_field: Optional[str] = None
    type: str = ARTIFACT_TYPE
    format: str = ARTIFACT_FORMAT
    package_hint: str = PACKAGE_HINT

    @classmethod
    def from_dict(cls, values: Dict[str, Any], source: Optional[Union[str, Path]] = None) -> "TfidfMeta":
        if isinstance(values, dict) and isinstance(values.get("config"), dict):
            values = {**values, "config": TfidfConfig.from_dict(values["config"], source=source)}
        return super().from_dict(values, source=source)


# -- weighting maths (pure functions) ----------------------------------------------------------------------

def robertson_tf(tf: np.ndarray, doclen: np.ndarray, avgdl: float, k1: float, b: float) -> np.ndarray:
    """Robertson's tf: ``k1·tf / (tf + k1·(1 − b + b·dl/avgdl))``.

    >>> robertson_tf(np.array([2.0]), np.array([10.0]), 10.0, 1.2, 0.75).round(12).tolist()  # 2.4 / 3.2
    [0.75]
    """
    return k1 * tf / (tf + k1 * (1.0 - b + b * doclen / avgdl))


def idf(num_docs: int, df: np.ndarray) -> np.ndarray:
    """Terrier's TF_IDF idf: ``log2(N/df + 1)``.

    >>> idf(4, np.array([1, 4])).tolist()
    [2.321928094887362, 1.0]
    """
    return np.log2(num_docs / np.asarray(df, dtype=np.float64) + 1.0)


def postings_weights(tf: sp.csr_matrix, doclens: np.ndarray, k1: float, b: float) -> sp.csr_matrix:
    """Term × document matrix of ``robertson_tf · idf`` from a document × term frequency matrix."""
    tf = sp.csr_matrix(tf, dtype=np.float64)
    num_docs = tf.shape[0]
    avgdl = float(doclens.sum()) / num_docs
    df = np.bincount(tf.indices, minlength=tf.shape[1])
    rows = np.repeat(np.arange(num_docs), np.diff(tf.indptr))
    w = robertson_tf(tf.data, doclens[rows].astype(np.float64), avgdl, k1, b) * idf(num_docs, df)[tf.indices]
    return sp.csr_matrix((w, tf.indices, tf.indptr), shape=tf.shape).T.tocsr()


# -- writing ------------------------------------------------------------------------------------------------



def _write_index(folder: Path, docs: Iterable[Dict[str, Any]], config: TfidfConfig, text_field: str,
                 store_text: bool, verbose: bool) -> TfidfMeta:
    """Stream ``docs`` into ``folder``; memory holds the index itself (postings, lexicon, docno set), not texts."""
    import npids

    analyzer = config.analyzer()
    vocab: Dict[str, int] = {}
    indptr, indices, counts, doclens = array("q", [0]), array("i"), array("i"), array("q")
    seen: set = set()
    duplicates: List[str] = []
    offsets = array("q", [0])
    text_out = open(folder / "text.bin", "wb") if store_text else None
    bar = progress(desc="indexing (tf-idf)", unit="doc", enabled=verbose)
    try:
        with npids.Lookup.builder(folder / "docnos.npids") as docnos:
            for position, doc in enumerate(docs):
                docno, text = check_record(doc, position, text_field)
                if docno in seen:
                    duplicates.append(docno)
                seen.add(docno)
                docnos.add(docno)
                terms = analyzer.terms(text)
                tf = Counter(vocab.setdefault(t, len(vocab)) for t in terms)
                ids = sorted(tf)
                indices.extend(ids)
                counts.extend(tf[i] for i in ids)
                indptr.append(len(indices))
                doclens.append(len(terms))
                if text_out is not None:
                    offsets.append(offsets[-1] + text_out.write(text.encode("utf-8")))
                bar.update()
            if not doclens:  # (inside the builder: npids cannot close an empty lookup)
                raise ValueError("the corpus is empty: no documents to index")
    finally:
        bar.close()
        if text_out is not None:
            text_out.close()
    if duplicates:
        shown = list(dict.fromkeys(duplicates))
        raise ValueError(f"{len(shown)} docno(s) occur more than once: {shown[:10]}{' …' if len(shown) > 10 else ''}")
    tf_matrix = sp.csr_matrix((np.frombuffer(counts, np.int32), np.frombuffer(indices, np.int32),
                               np.frombuffer(indptr, np.int64)), shape=(len(doclens), len(vocab)))
    sp.save_npz(folder / "tf.npz", tf_matrix, compressed=False)
    np.save(folder / "doclens.npy", np.frombuffer(doclens, np.int64))
    (folder / "lexicon.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    if store_text:
        np.save(folder / "text_offsets.npy", np.frombuffer(offsets, np.int64))
    return TfidfMeta(config=config, num_docs=len(doclens), num_terms=len(vocab), num_tokens=int(sum(doclens)),
                     num_postings=len(indices), text_field=text_field if store_text else None)


class TfidfIndexer(pt.Indexer):
    """``.index(docs)`` consumes an iterable of dicts with ``docno`` and the text field; returns the index."""

    def __init__(self, index: "TfidfIndex", config: TfidfConfig, text_field: str, store_text: bool,
                 verbose: bool, overwrite: bool):
        self.target, self.config, self.text_field = index, config, text_field
        self.store_text, self.verbose, self.overwrite = store_text, verbose, overwrite

    def index_inputs(self) -> List[List[str]]:
        return [["docno", self.text_field]]

    def index(self, docs: Iterable[Dict[str, Any]]) -> "TfidfIndex":
        if isinstance(docs, pd.DataFrame):
            docs = docs.to_dict("records")
        with atomic_folder(Path(self.target.path), overwrite=self.overwrite, what="TF-IDF index",
                           replaceable=partial(is_artifact_folder, artifact_type=ARTIFACT_TYPE,
                                               artifact_format=ARTIFACT_FORMAT)) as tmp:
            _write_index(tmp, docs, self.config, self.text_field, self.store_text, self.verbose).save_json(
                tmp / ARTIFACT_META_FILE)
        self.target._forget()
        return self.target

    def __repr__(self) -> str:
        return f"{self.target!r}.indexer()"


# -- the artifact -------------------------------------------------------------------------------------------

class TfidfIndex(pt.Artifact):
    """A TF-IDF index folder: ``indexer()`` builds it, ``retriever()`` searches it.

    ``pt.Artifact.load(path)`` returns this class for folders whose ``pt_meta.json`` says
    ``sparse_index``/``tfidf``.
    """

    ARTIFACT_TYPE = ARTIFACT_TYPE
    ARTIFACT_FORMAT = ARTIFACT_FORMAT
    ARTIFACT_PACKAGE_HINT = PACKAGE_HINT

    @classmethod
    def build(cls, path: Union[str, Path], docs: Iterable[Dict[str, Any]], **indexer_kwargs) -> "TfidfIndex":
        """``TfidfIndex(path).indexer(**indexer_kwargs).index(docs)``."""
        return cls(path).indexer(**indexer_kwargs).index(docs)

    def built(self) -> bool:
        return (Path(self.path) / ARTIFACT_META_FILE).is_file()

    def indexer(self, *, config: Optional[TfidfConfig] = None, text_field: str = "text", store_text: bool = False,
                verbose: bool = False, overwrite: bool = False) -> TfidfIndexer:
        """An indexer writing this folder. ``store_text=True`` keeps passages so retrievers can return them."""
        return TfidfIndexer(self, config or TfidfConfig(), text_field, store_text, verbose, overwrite)

    def retriever(self, num_results: int = 1000, *, text: bool = False, batch_size: int = 256,
                  verbose: bool = False) -> "TfidfRetriever":
        """qid, query → + docno, score, rank (+ text), the top ``num_results`` per query."""
        meta = self.meta  # fails here, not at the first query, when there is no index
        if text and meta.text_field is None:
            raise ValueError(f"{self.path} was built without passage text; rebuild it with "
                             "indexer(store_text=True) or join text later with pt.text.get_text(...)")
        return TfidfRetriever(self, num_results, text=text, batch_size=batch_size, verbose=verbose)

    # -- loaded structures (read on first use) --
    @cached_property
    def meta(self) -> TfidfMeta:
        if not self.built():
            raise FileNotFoundError(f"no TF-IDF index at {self.path}; build one with "
                                    "TfidfIndex(path).indexer().index(docs)")
        values = read_artifact_meta(self.path, ARTIFACT_TYPE, ARTIFACT_FORMAT)
        return TfidfMeta.from_dict(values, source=Path(self.path) / ARTIFACT_META_FILE)

    @property
    def config(self) -> TfidfConfig:
        return self.meta.config

    @cached_property
    def analyzer(self) -> Analyzer:
        return self.config.analyzer()

    @cached_property
    def vocab(self) -> Dict[str, int]:
        terms = (Path(self.path) / "lexicon.txt").read_text(encoding="utf-8").split("\n")[:-1]
        return {t: i for i, t in enumerate(terms)}

    @cached_property
    def postings(self) -> sp.csr_matrix:
        """Term × document matrix of TF-IDF weights."""
        tf = sp.load_npz(Path(self.path) / "tf.npz").tocsr()
        doclens = np.load(Path(self.path) / "doclens.npy")
        return postings_weights(tf, doclens, self.config.k1, self.config.b)

    @cached_property
    def docnos(self):
        import npids

        return npids.Lookup(Path(self.path) / "docnos.npids")

    def texts(self, docids: np.ndarray) -> List[str]:
        """Stored passages of internal document ids (index order)."""
        offsets = self._text_offsets
        with open(Path(self.path) / "text.bin", "rb") as f:
            out = []
            for d in docids:
                f.seek(offsets[d])
                out.append(f.read(offsets[d + 1] - offsets[d]).decode("utf-8"))
        return out

    @cached_property
    def _text_offsets(self) -> np.ndarray:
        return np.load(Path(self.path) / "text_offsets.npy", mmap_mode="r")

    def search(self, queries: List[str], k: int) -> Iterator[Tuple[int, np.ndarray, np.ndarray]]:
        """(position in ``queries``, docids, scores) of the top ``k`` of each query that matches any term."""
        vocab, post = self.vocab, self.postings
        rows, cols, vals = [], [], []
        for qi, query in enumerate(queries):
            tf = Counter(vocab[t] for t in self.analyzer.terms(query) if t in vocab)
            rows.extend([qi] * len(tf))
            cols.extend(tf.keys())
            vals.extend(tf.values())
        qmat = sp.csr_matrix((np.asarray(vals, np.float64), (np.asarray(rows, np.int64), np.asarray(cols, np.int64))),
                             shape=(len(queries), post.shape[0]))
        scores = (qmat @ post).tocsr()
        for qi in range(len(queries)):
            lo, hi = scores.indptr[qi], scores.indptr[qi + 1]
            if hi > lo:
                docids, row_scores = scores.indices[lo:hi], scores.data[lo:hi]
                best = top_k(row_scores, docids, k)
                yield qi, docids[best].astype(np.int64), row_scores[best]

    def _forget(self) -> None:
        """Drop everything read from disk (after a rebuild)."""
        forget_cached(self)

    def __repr__(self) -> str:
        return f"TfidfIndex({str(self.path)!r})"


class TfidfRetriever(EqualByKey, pt.Transformer):
    """qid, query → + docno, score, rank (+ text); other input columns are kept.

    Queries with no indexed term (empty, whitespace, only stopwords or unknown words) give no rows.
    Rank order: score descending, then index order (the order documents were indexed) for ties.
    """

    def __init__(self, index: TfidfIndex, num_results: int = 1000, *, text: bool = False, batch_size: int = 256,
                 verbose: bool = False):
        if num_results < 1 or batch_size < 1:
            raise ValueError(f"num_results={num_results}, batch_size={batch_size}; both must be positive")
        self.index, self.num_results, self.text = index, num_results, text
        self.batch_size, self.verbose = batch_size, verbose

    def _key(self) -> Tuple[Any, ...]:
        return (artifact_key(self.index), self.num_results, self.text)

    def _outputs(self) -> List[str]:
        return ["docno", "score", "rank"] + (["text"] if self.text else [])

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        pt.validate.query_frame(input_columns, ["query"], context=self)
        return list(input_columns) + [c for c in self._outputs() if c not in input_columns]

    def fuse_rank_cutoff(self, k: int) -> Optional[pt.Transformer]:
        if k >= self.num_results:
            return self
        return TfidfRetriever(self.index, k, text=self.text, batch_size=self.batch_size, verbose=self.verbose)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pt.validate.query_frame(inp, ["query"], context=self)
        queries = inp["query"].tolist()
        bad = [qid for qid, q in zip(inp["qid"], queries) if not isinstance(q, str)]
        if bad:
            raise ValueError(f"non-text query for qid(s) {bad[:5]}; expected strings (empty ones give no results)")
        qrows, docids, scores = [], [], []
        bar = progress(total=len(queries), desc="tf-idf retrieval", unit="query", enabled=self.verbose)
        try:
            for start in range(0, len(queries), self.batch_size):
                for qi, d, s in self.index.search(queries[start:start + self.batch_size], self.num_results):
                    qrows.append(np.full(len(d), start + qi))
                    docids.append(d)
                    scores.append(s)
                bar.update(min(self.batch_size, len(queries) - start))
        finally:
            bar.close()
        if not qrows:
            return empty_output(inp.iloc[:0], self._outputs())
        docids_all = np.concatenate(docids)
        out = inp.iloc[np.concatenate(qrows)].reset_index(drop=True)
        unique, inverse = np.unique(docids_all, return_inverse=True)  # decode each docno (and text) once
        out["docno"] = self.index.docnos.fwd[unique][inverse]
        out["score"] = np.concatenate(scores)
        out["rank"] = np.concatenate([np.arange(len(d), dtype=np.int64) for d in docids])
        if self.text:
            out["text"] = np.asarray(self.index.texts(unique), dtype=object)[inverse]
        return out

    def __repr__(self) -> str:
        return f"{self.index!r}.retriever(num_results={self.num_results}{', text=True' if self.text else ''})"
