"""A learned-sparse index (any ``toks`` term → weight dicts, e.g. SPLADE's) with exact, exhaustive scoring.

    index = SparseIndex("indexes/splade")
    (splade.doc_encoder() >> index.indexer()).index(docs)      # docno, text → toks → index
    retr = splade.query_encoder() >> index.retriever()          # qid, query → query_toks → docno, score, rank

score(q, d) = Σ_t q_t · d_t, the dot product of the two weight vectors, computed for every document that shares
a term with the query (term at a time over the postings), so the ranking is exact: it is the reference the
pruning methods (:mod:`.topics`, :mod:`.tree`) and PISA's dynamic pruning are measured against.

Folder layout: ``pt_meta.json`` (type ``sparse_index``, format ``learned_csr``, statistics, and ``files``: the
size, checksum and block checksums of every other file), ``weights.npz`` (document × term CSR, float32),
``lexicon.txt`` (term per line; line number = term id), ``docnos.npids``. Opening checks every file's size and the
checksums of the lexicon and docnos; the weights are checked whole when loaded; ``SparseIndex.verify()`` checks
every checksum. A folder without manifest (written before it existed) is refused unless opened
``unchecked=True``.
"""
from __future__ import annotations

import math
from array import array
from functools import cached_property
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import scipy.sparse as sp

from ..checks import positive_int
from ..frames import artifact_key, empty_output, require_columns
from ..lazy import forget_cached
from ..params import Parameters
from ..progress import progress
from ..ranking import concat_slices, stacked_hits, top_k
from ..storage import (
    ArtifactIntegrity,
    DamagedFileError,
    artifact_path,
    atomic_folder,
    build_docno_inverse,
    build_manifest,
    docno_lookup_builder,
    open_npids,
    parse_manifest,
    raise_damaged,
    read_json,
    read_term_lines,
    unsealed,
    write_artifact_meta,
    write_text,
)

WEIGHTS_FILE = "weights.npz"
LEXICON_FILE = "lexicon.txt"
DOCNOS_FILE = "docnos.npids"
#: every file of the index, in the manifest; the lexicon and docnos are checked whole on open, the weights when
#: loaded
FILES = (WEIGHTS_FILE, LEXICON_FILE, DOCNOS_FILE)
CHECKED_ON_OPEN = (LEXICON_FILE, DOCNOS_FILE)
_WHAT = "learned-sparse index"
_REMEDY = "rebuild it ((splade.doc_encoder() >> SparseIndex(path).indexer(overwrite=True)).index(docs))"

Ranges = Union[Sequence[Tuple[int, int]], np.ndarray]


# -- the scoring kernel ---------------------------------------------------------------------------------------

class Postings:
    """Term-major postings of a document × term matrix whose rows are laid out in a chosen order.

    Position p holds document ``rows[p]`` (a document may occupy several positions, e.g. one per topic shard).
    :meth:`score` scores a query against the documents at the positions inside given ranges, term at a time: for
    each query term, the postings slice of those ranges is found by binary search, so the work is proportional to
    the postings inside the ranges, not to the whole index.
    """

    def __init__(self, docs: sp.csr_matrix, rows: Optional[np.ndarray] = None):
        self.num_docs, self.num_terms = docs.shape
        self.rows = np.arange(self.num_docs, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        self.size = len(self.rows)
        inverted = docs[self.rows].T.tocsr() if rows is not None else docs.T.tocsr()
        inverted.sort_indices()
        self.indptr = inverted.indptr.astype(np.int64)
        self.positions = inverted.indices.astype(np.int64)
        self.weights = inverted.data.astype(np.float32)
        terms = np.repeat(np.arange(self.num_terms, dtype=np.int64), np.diff(self.indptr))
        #: term · size + position, ascending: one binary search finds any (term, position range) slice
        self.keys = terms * self.size + self.positions
        self.unique_rows = rows is None or len(np.unique(self.rows)) == len(self.rows)

    def slices(self, terms: np.ndarray, ranges: Optional[Ranges] = None) -> Tuple[np.ndarray, np.ndarray]:
        """Postings index bounds (starts, ends) of each (term, range) pair, term-major."""
        terms = np.asarray(terms, dtype=np.int64)
        if ranges is None:
            return self.indptr[terms], self.indptr[terms + 1]
        bounds = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        lo = (terms[:, None] * self.size + bounds[None, :, 0]).ravel()
        hi = (terms[:, None] * self.size + bounds[None, :, 1]).ravel()
        return np.searchsorted(self.keys, lo), np.searchsorted(self.keys, hi)

    def score(self, terms: np.ndarray, weights: np.ndarray,
              ranges: Optional[Ranges] = None) -> Tuple[np.ndarray, np.ndarray]:
        """(document ids, scores) of every document inside ``ranges`` (all when None) sharing a term with the query.

        ``terms`` are distinct term ids and ``weights`` their positive query weights. Each document's score adds
        its terms in query-term order, so a document gets the same float wherever it is scored from.
        """
        starts, ends = self.slices(terms, ranges)
        idx, which = concat_slices(starts, ends)
        if len(idx) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        per_slice = len(starts) // max(len(terms), 1)
        qw = np.asarray(weights, dtype=np.float64)[which // per_slice]
        pos = self.positions[idx]
        base = int(pos.min())
        acc = np.bincount(pos - base, weights=self.weights[idx] * qw)
        hit = np.flatnonzero(acc)
        docids, scores = self.rows[hit + base], acc[hit]
        if not self.unique_rows:
            docids, first = np.unique(docids, return_index=True)
            scores = scores[first]
        return docids, scores


# -- writing --------------------------------------------------------------------------------------------------

def check_toks(toks: Any, where: str) -> Mapping[str, float]:
    """A ``{term: weight}`` dict of finite, non-negative weights; errors name ``where`` (a docno or qid)."""
    if not isinstance(toks, Mapping):
        raise TypeError(f"{where}: toks is a {type(toks).__name__}; expected a dict of term → weight "
                        "(encode with Splade.doc_encoder() / query_encoder() first)")
    for term, w in toks.items():
        if not isinstance(term, str) or not term or any(c.isspace() for c in term):
            raise ValueError(f"{where}: term {term!r} must be a non-empty string without whitespace")
        if not isinstance(w, (int, float, np.integer, np.floating)) or not math.isfinite(w) or w < 0:
            raise ValueError(f"{where}: weight {w!r} of term {term!r} must be a finite number ≥ 0 "
                             "(learned-sparse weights are non-negative)")
    return toks


def _write_index(folder: Path, docs: Iterable[Dict[str, Any]], field: str, verbose: bool) -> Dict[str, Any]:
    vocab: Dict[str, int] = {}
    indptr, indices, weights = array("q", [0]), array("i"), array("f")
    seen: set = set()
    bar = progress(desc="indexing (learned sparse)", unit="doc", enabled=verbose)
    try:
        with docno_lookup_builder(folder / "docnos.npids") as docnos:
            for position, doc in enumerate(docs):
                docno = doc.get("docno") if isinstance(doc, Mapping) else None
                if not isinstance(docno, str) or not docno:
                    raise ValueError(f"document #{position} has docno={docno!r}; expected a dict with a non-empty "
                                     f"string 'docno' and a {field!r} dict")
                if field not in doc:
                    raise ValueError(f"document #{position} (docno {docno!r}) has no {field!r}; pipe the documents "
                                     f"through an encoder first: (splade.doc_encoder() >> index.indexer()).index(docs)")
                toks = check_toks(doc[field], f"docno {docno!r}")
                if docno in seen:
                    raise ValueError(f"docno {docno!r} occurs more than once (document #{position}); docnos must "
                                     "be unique")
                seen.add(docno)
                docnos.add(docno)
                row = sorted((vocab.setdefault(t, len(vocab)), float(w)) for t, w in toks.items() if w > 0)
                indices.extend(t for t, _ in row)
                weights.extend(w for _, w in row)
                indptr.append(len(indices))
                bar.update()
            if len(indptr) == 1:  # (inside the builder: npids cannot close an empty lookup)
                raise ValueError("the corpus is empty: no documents to index")
    finally:
        bar.close()
    build_docno_inverse(folder / DOCNOS_FILE)
    matrix = sp.csr_matrix((np.frombuffer(weights, np.float32), np.frombuffer(indices, np.int32),
                            np.frombuffer(indptr, np.int64)), shape=(len(indptr) - 1, len(vocab)))
    sp.save_npz(folder / WEIGHTS_FILE, matrix, compressed=False)
    write_text(folder / LEXICON_FILE, "".join(t + "\n" for t in vocab))
    return {"num_docs": matrix.shape[0], "num_terms": len(vocab), "num_postings": int(matrix.nnz),
            "field": field, "files": build_manifest(folder, FILES)}


class SparseIndexer(pt.Indexer):
    """``.index(docs)`` consumes dicts with ``docno`` and a ``toks`` dict; returns the :class:`SparseIndex`."""

    def __init__(self, index: "SparseIndex", field: str, verbose: bool, overwrite: bool):
        self.target, self.field, self.verbose, self.overwrite = index, field, verbose, overwrite

    def index_inputs(self) -> List[List[str]]:
        return [["docno", self.field]]

    # pt.Indexer.index also takes **kwargs, which this indexer has no use for; pipelines pass the documents
    # positionally
    def index(self, docs: Iterable[Dict[str, Any]]) -> "SparseIndex":  # type: ignore[override]
        if isinstance(docs, pd.DataFrame):
            docs = docs.to_dict("records")
        path = artifact_path(self.target)
        with atomic_folder(path, overwrite=self.overwrite, replaceable=SparseIndex.is_index,
                           what="learned-sparse index") as tmp:
            stats = _write_index(tmp, docs, self.field, self.verbose)
            write_artifact_meta(tmp / "pt_meta.json", {"type": SparseIndex.ARTIFACT_TYPE,
                                              "format": SparseIndex.ARTIFACT_FORMAT,
                                              "package_hint": SparseIndex.ARTIFACT_PACKAGE_HINT, **stats})
        forget_cached(self.target)  # the folder is new: nothing read (nor keyed) before counts
        return SparseIndex(path)

    def __repr__(self) -> str:
        return f"{self.target!r}.indexer()"


# -- the artifact ---------------------------------------------------------------------------------------------

class SparseIndex(pt.Artifact):
    """A learned-sparse index folder: ``indexer()`` builds it, ``retriever()`` searches it exhaustively.

    ``pt.Artifact.load(path)`` returns this class for folders whose ``pt_meta.json`` says
    ``sparse_index``/``learned_csr``.
    """

    ARTIFACT_TYPE = "sparse_index"
    ARTIFACT_FORMAT = "learned_csr"
    ARTIFACT_PACKAGE_HINT = "pyterrier-fandom-colbert"

    def __init__(self, path: Union[str, Path], *, unchecked: bool = False):
        """``unchecked=True`` opens an index whose ``pt_meta.json`` records no manifest (written before it
        existed), with a warning; such an index is otherwise refused."""
        super().__init__(path)
        self.unchecked = unchecked

    @staticmethod
    def is_index(path: Path) -> bool:
        meta = Path(path) / "pt_meta.json"
        try:
            return meta.is_file() and read_json(meta).get("format") == SparseIndex.ARTIFACT_FORMAT
        except ValueError:
            return False

    def built(self) -> bool:
        return (artifact_path(self) / "pt_meta.json").is_file()

    def indexer(self, *, field: str = "toks", verbose: bool = False, overwrite: bool = False) -> SparseIndexer:
        """An indexer writing this folder from documents carrying a ``field`` dict of term → weight."""
        return SparseIndexer(self, field, verbose, overwrite)

    def retriever(self, num_results: int = 1000, *, verbose: bool = False) -> "SparseRetriever":
        """qid, query_toks → + docno, score, rank: exact dot products with every document."""
        self.check()  # fails here, not at the first query, when there is no index or it is damaged
        return SparseRetriever(self, num_results, verbose=verbose)

    def get_corpus_iter(self, field: str = "toks") -> Iterator[Dict[str, Any]]:
        """The indexed documents as ``{"docno", field: {term: weight}}`` dicts, in index order."""
        docs, lexicon, docnos = self.docs, self.lexicon, self.docnos.fwd
        for d in range(docs.shape[0]):
            lo, hi = docs.indptr[d], docs.indptr[d + 1]
            yield {"docno": docnos[d], field: {lexicon[t]: float(w)
                                                for t, w in zip(docs.indices[lo:hi], docs.data[lo:hi])}}

    # -- loaded structures (read on first use) --
    @cached_property
    def meta(self) -> Dict[str, Any]:
        if not self.built():
            raise FileNotFoundError(f"no learned-sparse index at {self.path}; build one with "
                                    "(splade.doc_encoder() >> SparseIndex(path).indexer()).index(docs)")
        source = artifact_path(self) / "pt_meta.json"
        meta = unsealed(read_json(source, "index metadata"), source, _REMEDY)
        if not isinstance(meta, dict) or meta.get("format") != self.ARTIFACT_FORMAT:
            raise ValueError(f"{self.path}/pt_meta.json says format "
                             f"{meta.get('format') if isinstance(meta, dict) else None!r}; expected "
                             f"{self.ARTIFACT_FORMAT!r} (a folder written by SparseIndex.indexer())")
        for name in ("num_docs", "num_terms"):
            if not isinstance(meta.get(name), int) or isinstance(meta.get(name), bool) or meta[name] < 0:
                raise DamagedFileError(source, f"{source} is damaged: {name}={meta.get(name)!r} is not a count")
        if meta.get("files") is not None:
            parse_manifest(meta["files"], source)
        return meta

    @cached_property
    def integrity(self) -> ArtifactIntegrity:
        """The index's integrity base (its manifest; refused without one unless opened ``unchecked``)."""
        return ArtifactIntegrity(artifact_path(self), self.meta.get("files"), what=_WHAT, remedy=_REMEDY,
                                 source=artifact_path(self) / "pt_meta.json", unchecked=self.unchecked,
                                 required=FILES)

    @cached_property
    def _checked(self) -> bool:
        self.integrity.check_open(CHECKED_ON_OPEN)
        return True

    def check(self) -> None:
        """The checks that run when the index is opened: every file present with its recorded size, the checksums
        of ``lexicon.txt`` and ``docnos.npids``, the lexicon's term count. Raises
        :class:`~pyterrier_fandom_colbert.storage.DamagedFileError` naming the file."""
        self.lexicon  # noqa: B018

    def verify(self) -> Dict[str, Any]:
        """Full content check: every file's checksum against the manifest, the lexicon, the weights (shape,
        finite and non-negative) and the docno lookup. Raises
        :class:`~pyterrier_fandom_colbert.storage.DamagedFileError` naming each damaged file; returns
        ``{"files", "bytes", "seconds"}``."""
        import time

        started = time.perf_counter()
        self.__dict__.pop("meta", None)  # afresh: the folder may have changed since it was opened
        integrity = ArtifactIntegrity(artifact_path(self), self.meta.get("files"), what=_WHAT, remedy=_REMEDY,
                                      source=artifact_path(self) / "pt_meta.json", unchecked=self.unchecked,
                                      required=FILES)
        problems = integrity.problems()
        bad = {name for name, _ in problems}
        for name, load in [(LEXICON_FILE, self._load_lexicon), (WEIGHTS_FILE, self._load_docs),
                           (DOCNOS_FILE, self._load_docnos)]:
            if name in bad:
                continue
            try:
                load()
            except (DamagedFileError, FileNotFoundError) as err:
                problems.append((name, str(err)))
        raise_damaged(artifact_path(self), problems, what=_WHAT, remedy=_REMEDY)
        return integrity.summary(started)

    def _damaged(self, name: str, problem: str) -> DamagedFileError:
        file = artifact_path(self) / name
        return DamagedFileError(file, f"{file} is damaged: {problem}; the {_WHAT} at {self.path} is damaged; "
                                      f"{_REMEDY}")

    @property
    def num_docs(self) -> int:
        return int(self.meta["num_docs"])

    @cached_property
    def lexicon(self) -> List[str]:
        self._checked  # noqa: B018
        return self._load_lexicon()

    def _load_lexicon(self) -> List[str]:
        return read_term_lines(artifact_path(self) / LEXICON_FILE, int(self.meta["num_terms"]),
                               lambda why: self._damaged(LEXICON_FILE, why))

    @cached_property
    def vocab(self) -> Dict[str, int]:
        return {t: i for i, t in enumerate(self.lexicon)}

    @cached_property
    def docs(self) -> sp.csr_matrix:
        """Document × term weights (CSR, float32, term ids sorted within rows)."""
        self._checked  # noqa: B018
        self.integrity.check_whole([WEIGHTS_FILE])  # read whole: checked whole, once per process
        return self._load_docs()

    def _load_docs(self) -> sp.csr_matrix:
        try:
            matrix = sp.load_npz(artifact_path(self) / WEIGHTS_FILE).tocsr()
        except Exception as err:  # zipfile, numpy and scipy raise many kinds on damaged archives
            raise self._damaged(WEIGHTS_FILE, f"the weight matrix cannot be read ({type(err).__name__}: {err})") \
                from None
        shape = (self.meta["num_docs"], self.meta["num_terms"])
        if matrix.shape != shape:
            raise self._damaged(WEIGHTS_FILE, f"it holds a {matrix.shape[0]} × {matrix.shape[1]} matrix, but "
                                              f"pt_meta.json records {shape[0]} documents × {shape[1]} terms")
        if matrix.nnz and not (np.isfinite(matrix.data).all() and (matrix.data >= 0).all()):
            raise self._damaged(WEIGHTS_FILE, "it holds weights that are negative, NaN or inf")
        matrix.sort_indices()
        return matrix

    @cached_property
    def postings(self) -> Postings:
        return Postings(self.docs)

    @cached_property
    def docnos(self):
        self._checked  # noqa: B018
        return self._load_docnos()

    def _load_docnos(self):
        return open_npids(artifact_path(self) / DOCNOS_FILE, self.num_docs, _WHAT)

    def query_vector(self, toks: Mapping[str, float], where: str = "query") -> Tuple[np.ndarray, np.ndarray]:
        """(sorted term ids, weights) of a query dict; terms the index does not know and zero weights dropped."""
        if not isinstance(toks, Mapping):
            check_toks(toks, where)  # raises, naming the query
        vocab = self.vocab
        try:
            weights = np.fromiter(toks.values(), np.float64, len(toks))
            ok = bool(np.isfinite(weights).all() and (weights >= 0).all())
        except (TypeError, ValueError):
            ok = False
        if not ok:
            check_toks(toks, where)  # raises, naming the bad weight
        ids = np.fromiter((vocab.get(t, -1) if isinstance(t, str) else -1 for t in toks), np.int64, len(toks))
        keep = (ids >= 0) & (weights > 0)
        ids, weights = ids[keep], weights[keep]
        order = np.argsort(ids)
        return ids[order], weights[order]

    def __repr__(self) -> str:
        return f"SparseIndex({str(self.path)!r})"


# -- retrieval ------------------------------------------------------------------------------------------------

class SparseSearcher(Parameters, pt.Transformer):
    """qid, query_toks → + docno, score, rank; other input columns are kept.

    Subclasses say which documents a query scores (:meth:`score_candidates`); this class turns queries into term vectors
    and results into a ranked frame. Rank order: score descending, then index order for ties. A query sharing no
    term with the candidates gives no rows.
    """

    def __init__(self, index: SparseIndex, num_results: int = 1000, *, verbose: bool = False):
        self.index, self.num_results, self.verbose = index, positive_int("num_results", num_results), verbose

    # -- to override --
    def score_candidates(self, terms: np.ndarray, weights: np.ndarray,
                         row: Any = None) -> Tuple[np.ndarray, np.ndarray]:
        """(document ids, scores) of the documents this method scores for one query (any order)."""
        return self.index.postings.score(terms, weights)

    def params(self) -> tuple:
        """What, besides the index and num_results, determines the output (for __eq__/__hash__/repr)."""
        return ()

    def _constructor_args(self) -> Dict[str, Any]:
        return {"index": self.index, "num_results": self.num_results, "verbose": self.verbose}

    def with_num_results(self, k: int) -> "SparseSearcher":
        return type(self)(self.index, k, verbose=self.verbose)

    # -- shared --
    def required_columns(self, columns: Sequence[str]) -> List[str]:
        """Input columns this retriever needs, given the columns present."""
        return ["qid", "query_toks"]

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, self.required_columns(input_columns), self)
        return list(input_columns) + [c for c in ("docno", "score", "rank") if c not in input_columns]

    def fuse_rank_cutoff(self, k: int) -> Optional[pt.Transformer]:
        return self if k >= self.num_results else self.with_num_results(k)

    def ranked(self, terms: np.ndarray, weights: np.ndarray, row: Any = None) -> Tuple[np.ndarray, np.ndarray]:
        """The top ``num_results`` (docids, scores) of one query, in rank order."""
        if len(terms) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        docids, scores = self.score_candidates(terms, weights, row)
        best = top_k(scores, docids, self.num_results)
        return docids[best], scores[best]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, self.required_columns(list(inp.columns)), self)
        outputs = ["docno", "score", "rank"]
        if len(inp) == 0:
            return empty_output(inp.iloc[:0], outputs)
        hits = []
        bar = progress(total=len(inp), desc=repr(self), unit="query", enabled=self.verbose)
        try:
            for i, row in enumerate(inp.itertuples(index=False)):
                terms, weights = self.index.query_vector(row.query_toks, f"qid {row.qid!r}")
                hits.append((i, *self.ranked(terms, weights, row)))
                bar.update()
        finally:
            bar.close()
        if not any(len(d) for _, d, _ in hits):
            return empty_output(inp.iloc[:0].drop(columns=[c for c in outputs if c in inp.columns]), outputs)
        return stacked_hits(inp, hits, self.index.docnos.fwd)[0]

    def _key(self) -> tuple:
        return (type(self), artifact_key(self.index), self.num_results, self.params())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SparseSearcher) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        extra = "".join(f", {p}" for p in self._repr_params())
        return f"{type(self).__name__}({self.index!r}, num_results={self.num_results}{extra})"

    def _repr_params(self) -> List[str]:
        return []


class SparseRetriever(SparseSearcher):
    """Exhaustive learned-sparse retrieval: every document sharing a query term is scored exactly."""


def ranges_size(ranges: Ranges) -> int:
    """Positions covered by (disjoint) ranges.

    >>> ranges_size([(0, 4), (10, 12)])
    6
    """
    bounds = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    return int((bounds[:, 1] - bounds[:, 0]).sum())
