"""Searching a search folder: :class:`Searcher` loads it once and answers queries with explained results.

Systems: ``tfidf`` (the TF-IDF index), ``colbert`` (ColBERT end to end over the token index) and ``hybrid`` (the
two fused, :mod:`.hybrid`). Each result carries its page title and URL, the passage, the likely answer span
and per-word relevance (``R_abs``, ``R_acc``, KDE) from :class:`~pyterrier_fandom_colbert.Explainer`, which reads
the passage vectors from the ColBERT index and reuses the query vectors the ColBERT stage computed.

A :class:`Searcher` is safe to share between threads: the model work runs under a lock (the tokenizer and the
lazily loaded index structures are not thread-safe, and on a few CPU cores parallel queries would only compete
for them), and queries that arrive together are answered as one batch (:meth:`Searcher.search`).
"""
from __future__ import annotations

import math
import re
import threading
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

import numpy as np
import pandas as pd

from ..display import terminal_text
from .folder import COLBERT_DIR, TFIDF_DIR, Manifest, PassageTable, load_manifest
from .hybrid import hybrid_system

if TYPE_CHECKING:  # pragma: no cover
    from ..model.colbert import ColBERT

SYSTEMS = ("hybrid", "colbert", "tfidf")
MAX_QUERY_CHARS = 500
MAX_K = 50
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class QueryError(ValueError):
    """A query the searcher refuses (empty, too long, control characters, unknown system, bad k)."""


def check_query(query: Any) -> str:
    """The query with runs of whitespace collapsed, or a :class:`QueryError` saying what is wrong.

    >>> check_query("  when was   it released? ")
    'when was it released?'
    >>> check_query("   ")
    Traceback (most recent call last):
    ...
    pyterrier_fandom_colbert.app.search.QueryError: the query is empty; type a question or some words
    """
    if not isinstance(query, str):
        raise QueryError(f"the query must be text, got {type(query).__name__}")
    if _CONTROL.search(query):
        raise QueryError("the query contains control characters; type plain text")
    query = " ".join(query.split())
    if not query:
        raise QueryError("the query is empty; type a question or some words")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"the query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}")
    return query


def check_system(system: Any) -> str:
    if system not in SYSTEMS:
        raise QueryError(f"system={system!r} is not known; expected one of {', '.join(SYSTEMS)}")
    return system


def check_k(k: Any) -> int:
    try:
        value = int(k)
    except (TypeError, ValueError):
        raise QueryError(f"k={k!r} is not a whole number; expected 1 to {MAX_K}") from None
    if isinstance(k, bool) or not 1 <= value <= MAX_K or (isinstance(k, float) and k != value):
        raise QueryError(f"k={k!r} is out of range; expected 1 to {MAX_K}")
    return value


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


class _Job:
    """One query waiting for (or holding) its answer."""

    def __init__(self, query: str, system: str, k: int, explain: bool):
        self.query, self.system, self.k, self.explain = query, system, k, explain
        self.started = time.perf_counter()
        self.results: List[Dict[str, Any]] = []
        self.error: Optional[BaseException] = None
        self.done = False


def _frame(result: Any, what: str) -> pd.DataFrame:
    """``result`` of a transformer given a DataFrame, which is a DataFrame (PyTerrier types a call's result as a
    frame or an iterable of dicts)."""
    if not isinstance(result, pd.DataFrame):
        raise TypeError(f"the {what} pipeline returned a {type(result).__name__}, not a DataFrame")
    return result


class Searcher:
    """A loaded search folder. ``search(query)`` → a JSON-ready dict of explained results."""

    def __init__(self, folder: Union[str, Path], *, colbert: Optional["ColBERT"] = None, warm: bool = True):
        import pyterrier as pt  # noqa: F401  (PyTerrier's transformers back the pipelines below)

        from ..explain.transformer import Explainer
        from ..index.artifact import ColBERTIndex
        from ..lexical.tfidf import TfidfIndex
        from ..model.colbert import ColBERT

        self.folder = Path(folder)
        self.manifest: Manifest = load_manifest(self.folder)
        self.passages = PassageTable(self.folder)
        self.tfidf = TfidfIndex(self.folder / TFIDF_DIR)
        self.index = ColBERTIndex(self.folder / COLBERT_DIR)
        counts = {"passages.jsonl": len(self.passages), "tfidf": self.tfidf.meta.num_docs,
                  "colbert": len(self.index)}
        if len(set(counts.values())) != 1:
            raise ValueError(f"{self.folder} is damaged: its parts hold different numbers of passages {counts}; "
                             "rebuild it with `pfc index`")
        if colbert is None:
            colbert = ColBERT.from_pretrained(self.manifest.checkpoint)
        self.index.check_encoder(colbert)
        self.colbert = colbert
        s = self.manifest.settings
        encoder = colbert.query_encoder()
        tfidf = self.tfidf.retriever(num_results=max(MAX_K, s.fusion.depth))
        dense = self.index.retriever(num_results=max(MAX_K, s.fusion.depth), **s.dense_options())
        self.pipelines = {"tfidf": tfidf, "colbert": encoder >> dense,
                          "hybrid": encoder >> hybrid_system(tfidf, dense, s.fusion)}
        self.explainer = Explainer(colbert, k_tilde=s.k_tilde, index=self.index)
        self._specials = set(colbert.tokenizer.hf.all_special_tokens) | {colbert.config.query_marker,
                                                                        colbert.config.doc_marker}
        self._lock = threading.Lock()  # held while a batch runs
        self._pending_lock = threading.Lock()  # guards the list of waiting queries
        self._pending: List[_Job] = []
        if warm:  # load every lazily read structure now, not during the first request
            self.search("warm up", k=1)

    # -- queries ---------------------------------------------------------------------------------------------
    def search(self, query: str, *, system: str = "hybrid", k: int = 10, explain: bool = True) -> Dict[str, Any]:
        """The top ``k`` passages for ``query`` by ``system``, each with its page and explanation.

        Concurrent calls are batched: queries that arrive while another batch runs wait for the lock, and the
        first of them to get it runs all waiting queries as one batch (one encoder call, one TF-IDF product, one
        FAISS call, one explainer call); the others find their answer ready.
        """
        job = _Job(check_query(query), check_system(system), check_k(k), bool(explain))
        with self._pending_lock:
            self._pending.append(job)
        with self._lock:
            if not job.done:
                with self._pending_lock:
                    batch, self._pending = self._pending, []
                self._run(batch)
        if job.error is not None:
            raise job.error
        return {"query": job.query, "system": job.system, "k": job.k, "results": job.results,
                "took_ms": round(1000 * (time.perf_counter() - job.started), 1)}

    def _run(self, jobs: List["_Job"]) -> None:
        """Answer ``jobs`` (under the lock), one pipeline call per (system, explain) group."""
        groups: Dict[tuple, List[_Job]] = {}
        for job in jobs:
            groups.setdefault((job.system, job.explain), []).append(job)
        for (system, explain), group in groups.items():
            try:
                frame = pd.DataFrame({"qid": [str(i) for i in range(len(group))], "query": [j.query for j in group]})
                ranked = _frame(self.pipelines[system](frame), system)
                limit = np.array([j.k for j in group])[ranked["qid"].astype(int).to_numpy()] if len(ranked) else 0
                ranked = ranked[ranked["rank"] < limit].sort_values(["qid", "rank"], kind="stable")
                ranked = ranked.reset_index(drop=True)
                positions = self._positions(ranked["docno"])
                ranked["text"] = self.tfidf.texts(positions) if len(ranked) else []
                if explain and len(ranked):
                    ranked = _frame(self.explainer(ranked), "explainer")
                results: Dict[str, List] = {str(i): [] for i in range(len(group))}
                for row, position in zip(ranked.to_dict("records"), positions):
                    results[str(row["qid"])].append(self._result(row, int(position), explain))
                for i, job in enumerate(group):
                    job.results = results[str(i)]
            except Exception as err:  # every query of the failed batch gets the error
                for job in group:
                    job.error = err
            finally:
                for job in group:
                    job.done = True

    def why(self, query: str, docno: str) -> Dict[str, Any]:
        """The single-token view of one passage: each query token's similarity to each word (max over pieces)."""
        from ..explain.relevance import word_scores

        query = check_query(query)
        if not isinstance(docno, str) or not docno:
            raise QueryError("docno is missing; give the docno of a result")
        with self._lock:
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
        return out


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


# -- terminal ---------------------------------------------------------------------------------------------------

_BOLD, _UNDERLINE, _ANSWER, _DIM, _RESET = "\x1b[1m", "\x1b[4m", "\x1b[1;30;43m", "\x1b[2m", "\x1b[0m"


def is_word(text: str) -> bool:
    """True when ``text`` has a letter or digit (punctuation a query vector matched is not marked)."""
    return any(ch.isalnum() for ch in text)


def format_passage(result: Dict[str, Any], color: bool) -> str:
    """The passage with the answer span highlighted (``«…»`` without colour) and, with colour, the matched words
    underlined."""
    text = result["text"]
    answer = result.get("answer")
    marks = []  # (start, end, kind)
    if answer:
        marks.append((answer[0], answer[1], "answer"))
    if color:
        for start, end, *_, by in result.get("words", []):
            if by and not (answer and answer[0] <= start and end <= answer[1]):
                marks.append((start, end, "match"))
    marks.sort()
    out, pos = [], 0
    for start, end, kind in marks:
        if start < pos:
            continue
        out.append(terminal_text(text[pos:start]))
        inner = terminal_text(text[start:end])
        if kind == "answer":
            out.append(f"{_ANSWER}{inner}{_RESET}" if color else f"«{inner}»")
        else:
            out.append(f"{_UNDERLINE}{inner}{_RESET}")
        pos = end
    out.append(terminal_text(text[pos:]))
    return "".join(out)


def format_results(response: Dict[str, Any], color: bool = False) -> str:
    """A search response as terminal text: one block per result."""
    bold = (lambda s: f"{_BOLD}{s}{_RESET}") if color else (lambda s: s)
    dim = (lambda s: f"{_DIM}{s}{_RESET}") if color else (lambda s: s)
    lines = [dim(f"{len(response['results'])} results for {terminal_text(response['query'])!r} "
                 f"({response['system']}, {response['took_ms']:.0f} ms)"), ""]
    for r in response["results"]:
        section = f" › {terminal_text(r['section'])}" if r["section"] else ""
        score = dim(f"score {r['score']:.3f}")
        lines.append(f"{r['rank']:>2}. {bold(terminal_text(r['title']))}{section}  {score}")
        if r["url"]:
            lines.append(f"    {dim(terminal_text(r['url']))}")
        lines.append(f"    {format_passage(r, color)}")
        lines.append("")
    if not response["results"]:
        lines.append("No passage matched.")
    return "\n".join(lines).rstrip() + "\n"
