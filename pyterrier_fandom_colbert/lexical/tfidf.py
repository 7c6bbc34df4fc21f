"""Classical first stage: a TF-IDF index with Terrier's ``TF_IDF`` weighting, as a PyTerrier artifact.

    score(d, q) = Σ_t qtf · k1·tf / (tf + k1·(1 − b + b·dl/avgdl)) · log2(N/df + 1)

with Robertson's tf, Sparck Jones' idf, ``dl`` = the number of indexed terms of d (after stopword removal),
``avgdl`` = indexed terms / N, and ``qtf`` the count of the term in the analysed query.

Folder layout: ``pt_meta.json`` (:class:`TfidfMeta`: type, format, config, statistics), ``tf.npz`` (document ×
term frequencies, CSR), ``doclens.npy``, ``lexicon.txt`` (term per line; line number = term id),
``docnos.npids``, and, when built with ``store_text=True``, ``text.bin`` + ``text_offsets.npy`` (UTF-8 passages,
end to end). ``pt_meta.json`` also holds the manifest: size, checksum and block checksums of every other file.
Opening checks sizes, the small files' checksums and each file's structure; the postings are checked whole when
loaded, the passages block by block as they are first read; ``TfidfIndex.verify()`` checks every checksum.
"""
from __future__ import annotations

import codecs
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import scipy.sparse as sp

from ..frames import check_record
from ..lazy import forget_cached
from ..progress import progress
from ..ranking import top_k
from ..storage import (
    ARTIFACT_META_FILE,
    ArtifactIntegrity,
    BlockCheck,
    DamagedFileError,
    HashingFile,
    JsonConfig,
    MissingFileError,
    PathLike,
    artifact_path,
    atomic_folder,
    build_docno_inverse,
    build_manifest,
    docno_lookup_builder,
    is_artifact_folder,
    open_npids,
    parse_manifest,
    raise_damaged,
    read_artifact_meta,
    read_term_lines,
    write_artifact_meta,
)
from .analysis import Analyzer, stopword_list
from .postings import PostingsSpill
from .tfidf_retriever import TfidfRetriever, TfidfScorer

ARTIFACT_TYPE = "sparse_index"
ARTIFACT_FORMAT = "tfidf"
PACKAGE_HINT = "pyterrier-fandom-colbert"

TF_FILE = "tf.npz"
DOCLENS_FILE = "doclens.npy"
LEXICON_FILE = "lexicon.txt"
DOCNOS_FILE = "docnos.npids"
TEXT_FILE = "text.bin"
TEXT_OFFSETS_FILE = "text_offsets.npy"
#: files whose checksums are compared on every open (a few bytes per document or term); the postings and the
#: passages only have their sizes checked then (and their structure when loaded), their checksums in verify()
CHECKED_ON_OPEN = (LEXICON_FILE, DOCLENS_FILE, TEXT_OFFSETS_FILE, DOCNOS_FILE)
_WHAT = "TF-IDF index"
_REMEDY = "rebuild the index (indexer(overwrite=True))"


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
    #: manifest: {file name: {"size": bytes, "xxh3_128": checksum, "blocks": ...}} of every other file (None:
    #: written before checksums were recorded; refused unless opened unchecked)
    files: Optional[Dict[str, Dict[str, Any]]] = field(default=None, hash=False)

    @classmethod
    def from_dict(cls, values: Dict[str, Any], source: Optional[PathLike] = None) -> "TfidfMeta":
        if isinstance(values, dict) and isinstance(values.get("config"), dict):
            values = {**values, "config": TfidfConfig.from_dict(values["config"], source=source)}
        meta = super().from_dict(values, source=source)
        where = source if source is not None else "TfidfMeta"
        for name in ("num_docs", "num_terms", "num_tokens", "num_postings"):
            value = getattr(meta, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise DamagedFileError(Path(str(where)), f"{where} is damaged: {name}={value!r} is not a count")
        if meta.files is not None:
            parse_manifest(meta.files, where)
        return meta


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
    """Stream ``docs`` into ``folder``; memory holds the lexicon, the docno set and a document's offsets, never the
    texts or the postings (spilled to ``folder`` as they are made: :class:`PostingsSpill`)."""
    analyzer = config.analyzer()
    vocab: Dict[str, int] = {}
    indptr, doclens = array("q", [0]), array("q")
    postings = PostingsSpill(folder)
    seen: set = set()
    duplicates: List[str] = []
    offsets = array("q", [0])
    text_out = HashingFile(folder / TEXT_FILE) if store_text else None
    bar = progress(desc="indexing (tf-idf)", unit="doc", enabled=verbose)
    try:
        with docno_lookup_builder(folder / DOCNOS_FILE) as docnos:
            for position, doc in enumerate(docs):
                docno, text = check_record(doc, position, text_field)
                if docno in seen:
                    duplicates.append(docno)
                seen.add(docno)
                docnos.add(docno)
                terms = analyzer.terms(text)
                tf = Counter(vocab.setdefault(t, len(vocab)) for t in terms)
                ids = sorted(tf)
                indptr.append(postings.add(ids, [tf[i] for i in ids]))
                doclens.append(len(terms))
                if text_out is not None:
                    offsets.append(offsets[-1] + text_out.write(text.encode("utf-8")))
                bar.update()
            # checked inside the builder, which is then not closed: npids cannot close an empty lookup
            if not doclens:
                raise ValueError("the corpus is empty: no documents to index")
            if duplicates:
                shown = list(dict.fromkeys(duplicates))
                raise ValueError(f"{len(shown)} docno(s) occur more than once: {shown[:10]}"
                                 f"{' …' if len(shown) > 10 else ''}; every document needs a unique docno")
    finally:
        bar.close()
        postings.close()
        if text_out is not None:
            text_out.close()
    build_docno_inverse(folder / DOCNOS_FILE)
    postings.save_matrix(folder / TF_FILE, np.frombuffer(indptr, np.int64), len(vocab))
    np.save(folder / DOCLENS_FILE, np.frombuffer(doclens, np.int64))
    (folder / LEXICON_FILE).write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    names = [TF_FILE, DOCLENS_FILE, LEXICON_FILE, DOCNOS_FILE]
    streamed = {}
    if text_out is not None:
        np.save(folder / TEXT_OFFSETS_FILE, np.frombuffer(offsets, np.int64))
        names += [TEXT_FILE, TEXT_OFFSETS_FILE]
        streamed[TEXT_FILE] = text_out.entry()
    return TfidfMeta(config=config, num_docs=len(doclens), num_terms=len(vocab), num_tokens=int(sum(doclens)),
                     num_postings=postings.count, text_field=text_field if store_text else None,
                     files=build_manifest(folder, names, known=streamed))


class TfidfIndexer(pt.Indexer):
    """``.index(docs)`` consumes an iterable of dicts with ``docno`` and the text field; returns the index."""

    def __init__(self, index: "TfidfIndex", config: TfidfConfig, text_field: str, store_text: bool,
                 verbose: bool, overwrite: bool):
        self.target, self.config, self.text_field = index, config, text_field
        self.store_text, self.verbose, self.overwrite = store_text, verbose, overwrite

    def index_inputs(self) -> List[List[str]]:
        return [["docno", self.text_field]]

    # ignored [override]: pt.Indexer.index also takes **kwargs; this indexer has no keyword options, so
    # an unknown keyword is Python's own TypeError rather than silently ignored
    def index(self, docs: Iterable[Dict[str, Any]]) -> "TfidfIndex":  # type: ignore[override]
        if isinstance(docs, pd.DataFrame):
            docs = docs.to_dict("records")
        with atomic_folder(artifact_path(self.target), overwrite=self.overwrite, what="TF-IDF index",
                           replaceable=partial(is_artifact_folder, artifact_type=ARTIFACT_TYPE,
                                               artifact_format=ARTIFACT_FORMAT)) as tmp:
            meta = _write_index(tmp, docs, self.config, self.text_field, self.store_text, self.verbose)
            write_artifact_meta(tmp / ARTIFACT_META_FILE, meta.to_dict())
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

    def __init__(self, path: Union[str, Path], *, unchecked: bool = False):
        """``unchecked=True`` opens an index whose ``pt_meta.json`` records no manifest (written before checksums
        existed), with a warning; such an index is otherwise refused."""
        super().__init__(path)
        self.unchecked = unchecked

    @classmethod
    def build(cls, path: Union[str, Path], docs: Iterable[Dict[str, Any]], **indexer_kwargs) -> "TfidfIndex":
        """``TfidfIndex(path).indexer(**indexer_kwargs).index(docs)``."""
        return cls(path).indexer(**indexer_kwargs).index(docs)

    def built(self) -> bool:
        return (artifact_path(self) / ARTIFACT_META_FILE).is_file()

    def indexer(self, *, config: Optional[TfidfConfig] = None, text_field: str = "text", store_text: bool = False,
                verbose: bool = False, overwrite: bool = False) -> TfidfIndexer:
        """An indexer writing this folder. ``store_text=True`` keeps passages so retrievers can return them."""
        return TfidfIndexer(self, config or TfidfConfig(), text_field, store_text, verbose, overwrite)

    def retriever(self, num_results: int = 1000, *, text: bool = False, batch_size: int = 256,
                  strict: bool = False, verbose: bool = False) -> "TfidfRetriever":
        """qid, query → + docno, score, rank (+ text), the top ``num_results`` per query. Empty or non-text queries
        get no rows and one warning naming their qids (``strict=True``: an error)."""
        meta = self.meta  # fails here, not at the first query, when there is no index
        self.check()
        if text and meta.text_field is None:
            raise ValueError(f"{self.path} was built without passage text; rebuild it with "
                             "indexer(store_text=True) or join text later with pt.text.get_text(...)")
        return TfidfRetriever(self, num_results, text=text, batch_size=batch_size, strict=strict, verbose=verbose)

    def scorer(self, *, strict: bool = False, verbose: bool = False) -> "TfidfScorer":
        """qid, query, docno → + score, rank: the given documents re-scored (``** tfidf_index.scorer()`` as a
        feature); the scores are the retriever's."""
        self.check()
        return TfidfScorer(self, strict=strict, verbose=verbose)

    def text_loader(self, fields: Union[str, List[str]] = "*", *, verbose: bool = False) -> pt.Transformer:
        """docno → + the stored passages: PyTerrier's text loader protocol, so ``pt.text.get_text(index, "text")``
        works (the index must be built with ``store_text=True``; ``fields``: ``"*"`` or the indexed field)."""
        from .text_loader import TfidfTextLoader

        self.check()
        return TfidfTextLoader(self, fields, verbose=verbose)

    # -- loaded structures (read on first use) --
    @cached_property
    def meta(self) -> TfidfMeta:
        if not self.built():
            raise FileNotFoundError(f"no TF-IDF index at {self.path} ({ARTIFACT_META_FILE} not found); build one with "
                                    "TfidfIndex(path).indexer().index(docs)")
        values = read_artifact_meta(artifact_path(self), ARTIFACT_TYPE, ARTIFACT_FORMAT, _REMEDY)
        return TfidfMeta.from_dict(values, source=artifact_path(self) / ARTIFACT_META_FILE)

    @property
    def config(self) -> TfidfConfig:
        return self.meta.config

    @cached_property
    def analyzer(self) -> Analyzer:
        return self.config.analyzer()

    # -- checks --
    def _file(self, name: str) -> Path:
        return artifact_path(self) / name

    def _required_files(self, meta: TfidfMeta) -> List[str]:
        return [TF_FILE, DOCLENS_FILE, LEXICON_FILE, DOCNOS_FILE] + (
            [TEXT_FILE, TEXT_OFFSETS_FILE] if meta.text_field is not None else [])

    @cached_property
    def integrity(self) -> ArtifactIntegrity:
        """The index's integrity base: its manifest, and which blocks of the passages this process verified."""
        return ArtifactIntegrity(artifact_path(self), self.meta.files, what=_WHAT, remedy=_REMEDY,
                                 source=self._file(ARTIFACT_META_FILE), unchecked=self.unchecked,
                                 required=self._required_files(self.meta))

    @cached_property
    def _checked(self) -> bool:
        """The cheap checks, once: every file present with its recorded size, checksums of the small ones."""
        meta = self.meta
        for name in self._required_files(meta):
            if not self._file(name).is_file():
                raise MissingFileError(self._file(name), f"{self._file(name)} is missing: the {_WHAT} at "
                                                         f"{self.path} is incomplete; {_REMEDY}")
        self.integrity.check_open(CHECKED_ON_OPEN)
        return True

    @cached_property
    def _text_blocks(self) -> Optional[BlockCheck]:
        return self.integrity.blocks(TEXT_FILE, self._passages_held)

    def _passages_held(self, start: int, end: int) -> str:
        offsets = self._text_offsets
        first = int(np.searchsorted(offsets, start, side="right")) - 1
        last = int(np.searchsorted(offsets, end - 1, side="right")) - 1
        docs = np.arange(max(first, 0), min(last, self.meta.num_docs - 1) + 1)
        shown = [str(d) for d in self.docnos.fwd[docs[:5]]]
        return f"the passages of {len(docs)} document(s): {shown}{' …' if len(docs) > 5 else ''}"

    def check(self) -> None:
        """The checks that run when the index is opened (``retriever()``, or a part's first use): every file
        present with its recorded size, the checksums of ``lexicon.txt``, ``doclens.npy``, ``text_offsets.npy``
        and ``docnos.npids``, the lexicon's term count and the stored passages' offsets (first 0, increasing, last
        = the size of ``text.bin``). The postings are checked when first loaded (shape, postings count, document
        lengths). Raises :class:`~pyterrier_fandom_colbert.storage.DamagedFileError` naming the file."""
        self.vocab  # noqa: B018
        if self.meta.text_field is not None:
            self._text_offsets  # noqa: B018

    def verify(self) -> Dict[str, Any]:
        """Full content check: every file's checksum against the manifest, and every structure :meth:`check`
        and the loaders check (postings included; the passages must decode as UTF-8). Raises
        :class:`~pyterrier_fandom_colbert.storage.DamagedFileError` naming each damaged file; returns what was
        checked: ``{"files", "bytes", "seconds"}``. An index written before checksums were recorded is refused
        (:class:`~pyterrier_fandom_colbert.storage.NoManifestError`); opened ``unchecked=True`` it gets the
        structure checks and a warning."""
        started = time.perf_counter()
        meta = self.meta
        integrity = ArtifactIntegrity(artifact_path(self), meta.files, what=_WHAT, remedy=_REMEDY,
                                      source=self._file(ARTIFACT_META_FILE), unchecked=self.unchecked,
                                      required=self._required_files(meta))
        problems = integrity.problems()
        for name, load in [(LEXICON_FILE, self._load_vocab), (TF_FILE, self._load_postings),
                           (DOCNOS_FILE, self._load_docnos), (TEXT_OFFSETS_FILE, self._load_text_offsets),
                           (TEXT_FILE, self._check_text_encoding)]:
            if name in dict(problems) or (name in (TEXT_FILE, TEXT_OFFSETS_FILE) and meta.text_field is None):
                continue
            try:
                load()
            except (DamagedFileError, FileNotFoundError) as err:
                problems.append((Path(getattr(err, "path", name)).name, str(err)))
        raise_damaged(artifact_path(self), problems, what=_WHAT, remedy=_REMEDY)
        return integrity.summary(started)

    def _damaged(self, name: str, problem: str) -> DamagedFileError:
        return DamagedFileError(self._file(name), f"{self._file(name)} is damaged: {problem}; {_REMEDY}")

    def _npy(self, name: str) -> np.ndarray:
        """A small ``.npy`` file, read whole through the file held open since the index was opened."""
        try:
            with self.integrity.pinned(name).reopen() as f:
                return np.load(f, allow_pickle=False)
        except FileNotFoundError:
            raise MissingFileError(self._file(name), f"{self._file(name)} is missing: the {_WHAT} at {self.path} "
                                                     f"is incomplete; {_REMEDY}") from None
        except (ValueError, OSError, EOFError) as err:
            raise self._damaged(name, f"not a readable .npy array ({err})") from None

    # -- loaded structures (read on first use, after the checks) --
    @cached_property
    def vocab(self) -> Dict[str, int]:
        self._checked  # noqa: B018
        return self._load_vocab()

    def _load_vocab(self) -> Dict[str, int]:
        try:
            terms = read_term_lines(self._file(LEXICON_FILE), self.meta.num_terms,
                                    lambda why: self._damaged(LEXICON_FILE, why),
                                    data=self.integrity.pinned(LEXICON_FILE).read_all())
        except FileNotFoundError:
            raise MissingFileError(self._file(LEXICON_FILE), f"{self._file(LEXICON_FILE)} is missing; "
                                                             f"{_REMEDY}") from None
        vocab = {t: i for i, t in enumerate(terms)}
        if len(vocab) != len(terms):
            raise self._damaged(LEXICON_FILE, f"{len(terms) - len(vocab)} term(s) occur on more than one line")
        return vocab

    @cached_property
    def postings(self) -> sp.csr_matrix:
        """Term × document matrix of TF-IDF weights."""
        self._checked  # noqa: B018
        tf, doclens = self._load_postings()
        return postings_weights(tf, doclens, self.config.k1, self.config.b)

    def _load_postings(self) -> Tuple[sp.csr_matrix, np.ndarray]:
        """(document × term frequencies, document lengths), checked against each other and the metadata."""
        meta = self.meta
        self.integrity.check_whole([TF_FILE])  # read whole: checked whole, once per process
        try:
            with self.integrity.pinned(TF_FILE).reopen() as f:
                tf = sp.load_npz(f).tocsr()
        except FileNotFoundError:
            raise MissingFileError(self._file(TF_FILE), f"{self._file(TF_FILE)} is missing; {_REMEDY}") from None
        except Exception as err:  # zipfile, numpy and scipy raise many kinds on damaged archives
            raise self._damaged(TF_FILE, f"the frequency matrix cannot be read ({type(err).__name__}: {err})") \
                from None
        if tf.shape != (meta.num_docs, meta.num_terms) or tf.nnz != meta.num_postings:
            raise self._damaged(TF_FILE, f"it holds a {tf.shape[0]} × {tf.shape[1]} matrix with {tf.nnz} postings, "
                                         f"but {ARTIFACT_META_FILE} records {meta.num_docs} documents × "
                                         f"{meta.num_terms} terms and {meta.num_postings} postings")
        try:
            tf.check_format(full_check=True)
        except ValueError as err:
            raise self._damaged(TF_FILE, f"its sparse structure is invalid ({err})") from None
        if tf.nnz and tf.data.min() <= 0:
            raise self._damaged(TF_FILE, "it holds term frequencies below 1")
        doclens = self._npy(DOCLENS_FILE)
        if doclens.shape != (meta.num_docs,) or doclens.dtype.kind not in "iu":
            raise self._damaged(DOCLENS_FILE, f"it holds {doclens.dtype} {list(doclens.shape)}, not one integer "
                                              f"length per document ({meta.num_docs})")
        sums = np.asarray(tf.sum(axis=1)).ravel()
        wrong = np.flatnonzero(sums != doclens)
        if len(wrong):
            d = int(wrong[0])
            raise self._damaged(DOCLENS_FILE, f"document {d} has length {doclens[d]} but {sums[d]} indexed terms "
                                              f"in {TF_FILE} ({len(wrong)} document(s) disagree)")
        return tf, doclens

    @cached_property
    def docnos(self):
        self._checked  # noqa: B018
        return self._load_docnos()

    def _load_docnos(self):
        return open_npids(self._file(DOCNOS_FILE), self.meta.num_docs, _WHAT)

    def texts(self, docids: Union[Sequence[int], np.ndarray]) -> List[str]:
        """Stored passages of internal document ids (index order)."""
        offsets = self._text_offsets
        blocks = self._text_blocks
        if blocks is not None and not blocks.complete:
            ids = np.asarray(docids, dtype=np.int64)
            blocks.spans(offsets[ids], offsets[ids + 1])
        out = []
        file = self.integrity.pinned(TEXT_FILE)  # held open since opened: a swapped folder is never read here
        for d in docids:
            data = file.pread(int(offsets[d + 1] - offsets[d]), int(offsets[d]))
            try:
                out.append(data.decode("utf-8"))
            except UnicodeDecodeError as err:
                docno = self.docnos.fwd[int(d)]
                raise self._damaged(TEXT_FILE, f"the passage of docno {docno!r} is not UTF-8 ({err})") from None
        return out

    @cached_property
    def _text_offsets(self) -> np.ndarray:
        self._checked  # noqa: B018
        return self._load_text_offsets()

    def _load_text_offsets(self) -> np.ndarray:
        """``[num_docs + 1]`` byte offsets of the passages in ``text.bin``: from 0, never decreasing, ending at its
        size."""
        offsets = self._npy(TEXT_OFFSETS_FILE)
        n = self.meta.num_docs
        if offsets.shape != (n + 1,) or offsets.dtype.kind not in "iu":
            raise self._damaged(TEXT_OFFSETS_FILE, f"it holds {offsets.dtype} {list(offsets.shape)}, not {n + 1} "
                                                   "integer offsets")
        try:
            size = self.integrity.pinned(TEXT_FILE).size
        except DamagedFileError:  # missing, or not a file
            raise MissingFileError(self._file(TEXT_FILE), f"{self._file(TEXT_FILE)} is missing: the stored "
                                                          f"passages are gone; {_REMEDY}") from None
        steps = np.flatnonzero(np.diff(offsets) < 0)
        if offsets[0] != 0 or len(steps):
            where = "the first is not 0" if offsets[0] != 0 else f"entry {int(steps[0]) + 1} decreases"
            raise self._damaged(TEXT_OFFSETS_FILE, f"the passage offsets are out of order ({where})")
        if offsets[-1] != size:
            file = self._file(TEXT_FILE)
            raise DamagedFileError(file, f"{file} is damaged: it is {size} bytes but the passages end at byte "
                                         f"{offsets[-1]} ({TEXT_OFFSETS_FILE}): it was truncated or extended; "
                                         f"{_REMEDY}")
        return offsets

    def _check_text_encoding(self) -> None:
        """The passages decode as UTF-8 (each one does when their concatenation does: they end on characters)."""
        decoder = codecs.getincrementaldecoder("utf-8")()
        with open(self._file(TEXT_FILE), "rb") as f:
            position = 0
            try:
                while block := f.read(1 << 24):
                    decoder.decode(block)
                    position += len(block)
                decoder.decode(b"", final=True)
            except UnicodeDecodeError as err:
                raise self._damaged(TEXT_FILE, f"byte {position + err.start} is not UTF-8 text") from None

    def search(self, queries: List[str], k: int) -> Iterator[Tuple[int, np.ndarray, np.ndarray]]:
        """(position in ``queries``, docids, scores) of the top ``k`` of each query that matches any term."""
        vocab, post = self.vocab, self.postings
        rows: List[int] = []
        cols: List[int] = []
        vals: List[int] = []
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
