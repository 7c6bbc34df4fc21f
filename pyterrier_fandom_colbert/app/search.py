"""Searching a search folder: :class:`Searcher` loads it once and answers queries with explained results.

Systems: ``tfidf`` (the TF-IDF index), ``colbert`` (ColBERT end to end over the token index) and ``hybrid`` (the
two fused by ``pfc.Hybrid``, :mod:`.fusion_settings`). Each result carries its page title and URL, the
passage, the likely answer region and per-word relevance (``R_abs``, ``R_acc``, KDE) from
:class:`~pyterrier_fandom_colbert.Explainer`, which reads the passage vectors from the ColBERT index and reuses the
query vectors the ColBERT stage computed,
and, for the top ``read_top`` results, the reader's answer (:class:`~pyterrier_fandom_colbert.Reader`: a span
trained to be the answer, with the calibrated probability that it is right). A response leads with the question's
best answer (``answer``: the read result whose answer is most probably right, wherever it ranks) and says
``nothing_relevant`` when that probability is below the reader calibration's threshold or when no result matches
the question well enough to answer it (the study's relevance calibration, as without the reader). Each result
also keeps the study's densest-evidence window (``kde_answer``, :mod:`~pyterrier_fandom_colbert.explain.answer`);
with ``reader=None`` the short answer and confidence are those of the study, as before the reader.

A :class:`Searcher` is safe to share between threads: the model work runs under a lock (the tokenizer and the
lazily loaded index structures are not thread-safe, and on a few CPU cores parallel queries would only compete
for them), and queries that arrive together are answered as one batch (:mod:`.batching`); responses as
terminal text: :mod:`.printing`.
"""
from __future__ import annotations

import functools
import math
import threading
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

import numpy as np
import pandas as pd

from ..distributed.cluster import SHARD_TIMEOUT_S
from ..explain.answer import CALIBRATION, AnswerCalibration, mean_maxsim, short_answer_words
from ..reader.transformer import DEFAULT_READER
from .batching import Batcher, Job, answer_in_groups
from .folder import COLBERT_DIR, TFIDF_DIR, Manifest, PassageTable, load_manifest
from .folder.resume import pending_notice, pending_progress
from .fusion_settings import hybrid_system
from .queries import (
    MAX_K,
    MAX_QUERY_CHARS,
    READ_TOP,
    SYSTEMS,
    QueryError,
    check_k,
    check_query,
    check_read_top,
    check_system,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..model.colbert import ColBERT

__all__ = ["MAX_K", "MAX_QUERY_CHARS", "NOTHING_RELEVANT", "SYSTEMS", "QueryError", "Searcher", "check_k",
           "check_query", "check_system"]
#: what the CLI and the page say when no result's confidence reaches the calibration's threshold
NOTHING_RELEVANT = "Nothing in this wiki seems to answer the question."


def safe_url(url: Any) -> str:
    """``url`` when it is an absolute http(s) URL, else ``""`` (a passage must not smuggle ``javascript:``).

    >>> safe_url("https://a.fandom.com/wiki/X"), safe_url("javascript:alert(1)"), safe_url("/wiki/X")
    ('https://a.fandom.com/wiki/X', '', '')
    """
    if not isinstance(url, str):
        return ""
    parts = urllib.parse.urlsplit(url.strip())
    return url.strip() if parts.scheme.lower() in ("http", "https") and parts.netloc else ""


def _round(values, digits: int = 3) -> List[float]:
    """Rounded floats for JSON (NaN and infinities as 0)."""
    values = np.asarray(values, dtype=np.float64)
    return np.round(np.where(np.isfinite(values), values, 0.0), digits).tolist()


def _frame(result: Any, what: str) -> pd.DataFrame:
    """``result`` of a transformer given a DataFrame, which is a DataFrame (PyTerrier types a call's result as a
    frame or an iterable of dicts)."""
    if not isinstance(result, pd.DataFrame):
        raise TypeError(f"the {what} pipeline returned a {type(result).__name__}, not a DataFrame")
    return result


class Searcher:
    """A loaded search folder. ``search(query)`` → a JSON-ready dict of explained results."""

    def __init__(self, folder: Union[str, Path], *, colbert: Optional["ColBERT"] = None, warm: bool = True,
                 ray: Optional[str] = None, ray_timeout_s: float = SHARD_TIMEOUT_S,
                 calibration: AnswerCalibration = CALIBRATION,
                 reader: Union[str, Path, bool, None] = True, read_top: int = READ_TOP):
        from ..lexical.tfidf import TfidfIndex
        from .sharded import open_colbert

        self.folder = Path(folder)
        self.manifest: Manifest = load_manifest(self.folder)
        self.passages = PassageTable(self.folder)
        self.tfidf = TfidfIndex(self.folder / TFIDF_DIR)
        #: True while the folder's ColBERT part is being built: only TF-IDF answers (:attr:`notice` says how far)
        self.pending = self.manifest.colbert_pending
        # a ColBERT index, or a sharded one (app/sharded.py); None while pending
        self.index = None if self.pending else open_colbert(self.folder / COLBERT_DIR)
        # the address of the cluster whose shard actors search a sharded index ("": RAY_ADDRESS or a local one)
        self._ray = ray
        self._ray_timeout_s = ray_timeout_s  # how long the shard actors may take to answer (else the query fails)
        counts = {"passages.jsonl": len(self.passages), "tfidf": self.tfidf.meta.num_docs}
        if self.index is not None:
            counts["colbert"] = len(self.index)
        if len(set(counts.values())) != 1:
            raise ValueError(f"{self.folder} is damaged: its parts hold different numbers of passages {counts}; "
                             "rebuild it with `pfc index`")
        # the encoder, the systems and the explainer are made on first use (what a query needs, nothing more: a
        # TF-IDF search without explanations never loads torch); warm=True makes them all now
        self._colbert = colbert
        self._encoder_checked = False
        self._systems: Dict[str, Any] = {}
        self._explainer: Any = None
        self._load_lock = threading.RLock()  # guards the lazily made parts
        #: the study's short answers and confidences (the shipped calibration belongs to the default checkpoint)
        self.calibration = calibration
        #: the reader folder (None: no reader, the study's short answers), and how many top results it reads
        self.reader_path: Optional[Path] = None if reader is None or reader is False else \
            (DEFAULT_READER if reader is True else Path(reader))
        self.read_top = check_read_top(read_top)
        self._reader: Any = None
        self._batcher = Batcher(self._run)  # concurrent queries answered as one batch (.batching)
        if warm:  # load every lazily read structure now, not during the first request
            self.search("warm up", k=1)

    @property
    def colbert(self) -> "ColBERT":
        """The folder's encoder (loaded on first use, and checked against the one the folder was built with)."""
        with self._load_lock:
            if self._colbert is None:
                from ..model.colbert import ColBERT, query_precision

                self._colbert = ColBERT.from_pretrained(self.manifest.checkpoint, inference_only=True,
                                                        cpu_precision=query_precision(self.manifest.precision))
            if not self._encoder_checked and self.index is not None:
                self.index.check_encoder(self._colbert)
                self._encoder_checked = True
            return self._colbert

    def pipeline(self, system: str) -> Any:
        """The retrieval pipeline of ``system`` (a query frame → ranked docnos with scores), made on first use."""
        with self._load_lock:
            if system not in self._systems:
                s = self.manifest.settings
                depth = max(MAX_K, s.fusion.depth)
                if system == "tfidf":
                    self._systems[system] = self.tfidf.retriever(num_results=depth)
                elif system == "dense":
                    from .sharded import dense_retriever

                    self._systems[system] = dense_retriever(self.index, s, depth, self._ray, self._ray_timeout_s)
                elif system == "colbert":
                    # one stage where the index's retriever fuses with its encoder (no frame between them)
                    self._systems[system] = (self.colbert.query_encoder() >> self.pipeline("dense")).compile()
                else:
                    self._systems[system] = self.colbert.query_encoder() >> hybrid_system(
                        self.pipeline("tfidf"), self.pipeline("dense"), s.fusion)
            return self._systems[system]

    @property
    def pipelines(self) -> Dict[str, Any]:
        """Every available system's pipeline (all made now)."""
        return {system: self.pipeline(system) for system in self.systems}

    @property
    def systems(self) -> tuple:
        """The systems that answer: all of them, or only ``tfidf`` while the ColBERT part is being built."""
        return ("tfidf",) if self.pending else SYSTEMS

    @property
    def default_system(self) -> str:
        return self.systems[0]

    @property
    def notice(self) -> Optional[str]:
        """What a search says about the folder (how far its ColBERT part is built), or None when complete."""
        return pending_notice(self.folder, self.manifest.passages) if self.pending else None

    def _check_available(self, system: Optional[str]) -> str:
        """``system`` (None: :attr:`default_system`), refused while it needs the ColBERT part being built."""
        if system is None:
            return self.default_system
        system = check_system(system)
        if system not in self.systems:
            raise QueryError(f"system={system!r} needs ColBERT, which is being built for {self.folder} "
                             f"({pending_progress(self.folder, self.manifest.passages)}); until it is complete "
                             "only system 'tfidf' answers")
        return system

    @property
    def explainer(self) -> Any:
        """The :class:`~pyterrier_fandom_colbert.Explainer` of the results (made on first use)."""
        with self._load_lock:
            if self._explainer is None:
                from ..explain.transformer import Explainer
                from ..index.artifact import ColBERTIndex

                # a sharded index's vectors are compressed: its explanations re-encode the text
                index = self.index if isinstance(self.index, ColBERTIndex) else None
                self._explainer = Explainer(self.colbert, k_tilde=self.manifest.settings.k_tilde, index=index)
            return self._explainer

    @property
    def reader(self) -> Any:
        """The :class:`~pyterrier_fandom_colbert.Reader` of the top results (made on first use), or None. It runs
        its lower layers on the encoder's backbone where that is the reader's base (the default checkpoint's), so
        a cold search does not load the backbone a second time."""
        with self._load_lock:
            if self._reader is None and self.reader_path is not None:
                from ..reader.transformer import Reader

                self._reader = Reader(self.reader_path, colbert=self._colbert)
            return self._reader

    @functools.cached_property
    def _specials(self) -> set:
        config = self.colbert.config
        return set(self.colbert.tokenizer.hf.all_special_tokens) | {config.query_marker, config.doc_marker}

    # -- queries ---------------------------------------------------------------------------------------------
    def search(self, query: str, *, system: Optional[str] = None, k: int = 10,
               explain: bool = True) -> Dict[str, Any]:
        """The top ``k`` passages for ``query`` by ``system`` (None: ``hybrid``, or ``tfidf`` while the folder's
        ColBERT part is being built, when the response's ``notice`` says how far), each with its page and
        explanation.

        Concurrent calls are batched: queries that arrive while another batch runs wait for the lock, and the
        first of them to get it runs all waiting queries as one batch (one encoder call, one TF-IDF product, one
        FAISS call, one explainer call); the others find their answer ready.
        """
        job = self._batcher.submit(Job(check_query(query), self._check_available(system), check_k(k), bool(explain)))
        answer, nothing = None, None
        if job.explain and self.reader_path is not None:
            # nothing relevant: no answer reaches the reader's threshold, or no passage matches the question well
            # enough (the study's relevance calibration, as without the reader)
            answer = best_answer(job.results)
            nothing = answer is None or self.reader.calibration is None \
                or self.reader.calibration.nothing_relevant(float(answer["confidence"])) \
                or self.calibration.nothing_relevant(self.relevance(job.results))
        elif job.explain:  # the study's confidence of each result given the question's best-matching result
            for r, confidence in zip(job.results, self.relevance(job.results)):
                r["confidence"] = round(confidence, 3)
            nothing = self.calibration.nothing_relevant([r["confidence"] for r in job.results])
        response = {"query": job.query, "system": job.system, "k": job.k, "nothing_relevant": nothing,
                    "answer": answer, "results": job.results,
                    "took_ms": round(1000 * (time.perf_counter() - job.started), 1)}
        if self.pending:
            response["notice"] = self.notice
        return response

    def relevance(self, results: List[Dict[str, Any]]) -> List[float]:
        """The study's calibrated probability that each explained result answers the question, given the question's
        best-matching result (:class:`~pyterrier_fandom_colbert.explain.answer.AnswerCalibration`)."""
        best = max((r["similarity"] for r in results), default=math.nan)
        return [self.calibration.confidence(r["similarity"], best) for r in results]

    def _run(self, jobs: List[Job]) -> None:
        """Answer ``jobs`` (under the batch lock), one pipeline call per (system, explain) group."""
        answer_in_groups(jobs, lambda job: (job.system, job.explain), self._answer)

    def _answer(self, group: List[Job]) -> None:
        """Answer ``group`` (one system, one ``explain``) with one pipeline call: each job gets its results."""
        system, explain = group[0].system, group[0].explain
        frame = pd.DataFrame({"qid": [str(i) for i in range(len(group))], "query": [j.query for j in group]})
        ranked = _frame(self.pipeline(system)(frame), system)
        limit = np.array([j.k for j in group])[ranked["qid"].astype(int).to_numpy()] if len(ranked) else 0
        ranked = ranked[ranked["rank"] < limit].sort_values(["qid", "rank"], kind="stable")
        ranked = ranked.reset_index(drop=True)
        positions = self._positions(ranked["docno"])
        ranked["text"] = self.tfidf.texts(positions) if len(ranked) else []
        if explain and len(ranked):
            ranked = _frame(self.explainer(ranked), "explainer")
            if self.reader_path is not None:
                ranked = self._read(ranked)
        results: Dict[str, List] = {str(i): [] for i in range(len(group))}
        for row, position in zip(ranked.to_dict("records"), positions):
            results[str(row["qid"])].append(self._result(row, int(position), explain))
        for i, job in enumerate(group):
            job.results = results[str(i)]

    def why(self, query: str, docno: str) -> Dict[str, Any]:
        """The single-token view of one passage: each query token's similarity to each word (max over pieces)."""
        from ..explain.relevance import word_scores

        query = check_query(query)
        if not isinstance(docno, str) or not docno:
            raise QueryError("docno is missing; give the docno of a result")
        with self._batcher.lock:
            position = self._positions([docno])[0]
            if position < 0:
                raise LookupError(f"docno {docno!r} is not in this search folder")
            text = self.tfidf.texts([position])[0]
            row = _frame(self.explainer(pd.DataFrame({"qid": ["q"], "query": [query], "docno": [docno],
                                                      "text": [text]})), "explainer").iloc[0]
        spans = np.asarray(row["word_spans"]).reshape(-1, 2)
        sims = [_round(word_scores(sim, row["expl_words"], len(spans), "max")) for sim in row["expl_sim"]]
        return {"query": query, "docno": docno, "query_tokens": list(row["expl_query_tokens"]),
                "words": spans.tolist(), "token_sim": sims}

    def _positions(self, docnos) -> np.ndarray:
        docnos = np.asarray(list(docnos), dtype=str)
        if not len(docnos):
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self.tfidf.docnos.inv[docnos], dtype=np.int64)

    def _result(self, row: Dict[str, Any], position: int, explain: bool) -> Dict[str, Any]:
        meta = self.passages.get(position)
        out = {"rank": int(row["rank"]) + 1, "docno": str(row["docno"]), "score": round(float(row["score"]), 4),
               "title": meta.get("title") or str(row["docno"]), "url": safe_url(meta.get("url")),
               "section": meta.get("section") or "", "text": row["text"]}
        if explain:
            span = row.get("answer_span")
            spans = np.asarray(row["word_spans"]).reshape(-1, 2)
            out["answer"] = None if span is None or (isinstance(span, float) and math.isnan(span)) \
                else [int(span[0]), int(span[1])]
            out["query_tokens"] = list(row["expl_query_tokens"])
            matched = matched_by(row["expl_sim"], out["query_tokens"], row["expl_words"], len(spans), 1,
                                 self._specials)
            text = row["text"]
            columns = (spans.tolist(), np.asarray(row["word_r_abs"], dtype=np.int64).tolist(),
                       _round(row["word_r_acc"], 3), _round(row["word_kde"], 4), matched)
            out["words"] = [[s, e, a, c, d, m if m and is_word(text[s:e]) else ""]
                            for (s, e), a, c, d, m in zip(*columns)]
            out.update(self._short_answer(row, spans, np.array([bool(w[5]) for w in out["words"]], dtype=bool)))
            if self.reader_path is not None:  # the reader's answer (read results only) replaces the study's
                out["kde_answer"] = out["short_answer"]
                read = bool(row.get("read", False)) and int(row["answer_start"]) >= 0
                out["short_answer"] = snap_to_words([int(row["answer_start"]), int(row["answer_end"])], spans) \
                    if read else None
                confidence = float(row["answer_confidence"]) if read else math.nan
                out["confidence"] = round(confidence, 3) if math.isfinite(confidence) else None
                out["answer_score"] = round(float(row["answer_score"]), 3) if read else None
        return out

    def _read(self, ranked: pd.DataFrame) -> pd.DataFrame:
        """``ranked`` with the reader's answer columns; only the top ``read_top`` rows of each query are read."""
        read = (ranked["rank"] < self.read_top).to_numpy()
        columns: Dict[str, Any] = {"read": read, "answer_start": np.full(len(ranked), -1, np.int64),
                                   "answer_end": np.full(len(ranked), -1, np.int64),
                                   "answer_score": np.full(len(ranked), np.nan),
                                   "answer_confidence": np.full(len(ranked), np.nan)}
        if read.any():
            rows = np.flatnonzero(read)
            spans, confidence = self.reader.read(ranked["query"].to_numpy()[rows].tolist(),
                                                 ranked["text"].to_numpy()[rows].tolist(),
                                                 ranked["rank"].to_numpy()[rows].astype(np.int64))
            columns["answer_start"][rows] = spans.start
            columns["answer_end"][rows] = spans.end
            columns["answer_score"][rows] = spans.margin
            columns["answer_confidence"][rows] = confidence
        return ranked.assign(**columns)

    def _short_answer(self, row: Dict[str, Any], spans: np.ndarray, matched: np.ndarray) -> Dict[str, Any]:
        """``short_answer`` (character offsets of at most ``max_words`` words inside the likely-answer region, or
        None) and ``similarity`` (the passage's mean MaxSim) of one explained row; :meth:`search` adds the calibrated
        ``confidence``, which depends on the question's other results."""
        cal = self.calibration
        similarity = mean_maxsim(row["expl_sim"])
        tokens = row.get("answer_tokens")
        region = None
        if isinstance(tokens, (tuple, list)) and len(tokens) == 2:
            word_of = np.asarray(row["expl_words"])
            region = (int(word_of[tokens[0]]), int(word_of[tokens[1] - 1]) + 1)
        words = short_answer_words(row["word_kde"], cal.max_words, cal.penalty, within=region,
                                   matched=matched if cal.skip_matched else None) if region else None
        span = None if words is None else [int(spans[words[0], 0]), int(spans[words[1] - 1, 1])]
        return {"short_answer": span, "similarity": _round([similarity], 4)[0]}


def snap_to_words(span: List[int], word_spans: np.ndarray) -> List[int]:
    """``span`` widened to whole words of ``word_spans [W, 2]`` (the words it overlaps), so that the page and the
    terminal mark whole words; unchanged when it overlaps none.

    >>> snap_to_words([5, 9], np.array([[0, 3], [4, 10], [11, 14]]))
    [4, 10]
    >>> snap_to_words([2, 12], np.array([[0, 3], [4, 10], [11, 14]]))
    [0, 14]
    """
    spans = np.asarray(word_spans).reshape(-1, 2)
    overlap = np.flatnonzero((spans[:, 1] > span[0]) & (spans[:, 0] < span[1]))
    if len(overlap) == 0:
        return [int(span[0]), int(span[1])]
    return [int(min(span[0], spans[overlap[0], 0])), int(max(span[1], spans[overlap[-1], 1]))]


def read_results(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The explained results the reader read and found a span in (``short_answer`` and ``answer_score`` set)."""
    return [r for r in results if r.get("short_answer") and r.get("answer_score") is not None]


def best_answer(results: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The question's best answer among explained results: the reader's most confident answer (``confidence``, the
    calibrated probability that it is right, from its margin and its passage's rank; then the larger margin over
    "no answer", ``answer_score``; then the higher ranked), as ``{text, rank, docno, title, span, confidence}``; None
    when no result was read.

    >>> best_answer([{"rank": 1, "docno": "a", "title": "A", "text": "xy", "short_answer": [0, 1],
    ...               "answer_score": 4.0, "confidence": 0.2},
    ...              {"rank": 2, "docno": "b", "title": "B", "text": "zw", "short_answer": [1, 2],
    ...               "answer_score": 3.0, "confidence": 0.9}])
    {'text': 'w', 'rank': 2, 'docno': 'b', 'title': 'B', 'span': [1, 2], 'confidence': 0.9}
    """
    read = read_results(results)
    if not read:
        return None
    best = max(read, key=lambda r: (-1.0 if r["confidence"] is None else r["confidence"], r["answer_score"],
                                    -r["rank"]))
    start, end = best["short_answer"]
    return {"text": best["text"][start:end], "rank": best["rank"], "docno": best["docno"], "title": best["title"],
            "span": [start, end], "confidence": best["confidence"]}


def matched_by(sim: np.ndarray, query_tokens: List[str], word_of_token: np.ndarray, num_words: int, k_tilde: int,
               specials: set) -> List[str]:
    """Per word, the query word pieces that have it among their top-``k_tilde`` matches (space-separated; ``""``
    for none). Only pieces with a letter or digit count: ``[CLS]``, ``[Q]``, ``[MASK]`` and punctuation vectors
    match whatever is most generic, which says nothing to a reader.

    >>> sim = np.array([[0.9, 0.1, 0.2], [0.1, 0.2, 0.8], [0.1, 0.7, 0.3]])
    >>> matched_by(sim, ["[CLS]", "blade", "##s"], np.array([-1, 0, 1]), 2, 1, {"[CLS]"})
    ['s', 'blade']
    """
    from ..explain.relevance import top_matches

    sim = np.asarray(sim, dtype=np.float64)
    found: List[List[str]] = [[] for _ in range(num_words)]
    if sim.size == 0:
        return ["" for _ in range(num_words)]
    scoring = ~np.isnan(sim[0])
    positions, _ = top_matches(np.nan_to_num(sim, nan=-np.inf), scoring, k_tilde)
    for row, token in enumerate(query_tokens):
        piece = token.removeprefix("##")
        if token in specials or not is_word(piece):
            continue
        for position in positions[row]:
            word = int(word_of_token[position])
            if word >= 0 and piece not in found[word]:
                found[word].append(piece)
    return [" ".join(f) for f in found]


def is_word(text: str) -> bool:
    """True when ``text`` has a letter or digit (punctuation a query vector matched is not marked)."""
    return any(ch.isalnum() for ch in text)
