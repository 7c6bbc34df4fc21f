"""Small helpers shared by the transformers: column and value checks with actionable errors, and equality from
what determines a transformer's output (ranking itself is :mod:`.ranking`'s)."""
from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import pyterrier as pt

from .display import is_blank
from .ranking import (
    Hits,
    hits_frame,
    rank_by_score,  # noqa: F401  (its home is ranking; kept importable from here)
)

#: how to obtain a column a transformer needs, shown when it is missing
COLUMN_HINTS: Dict[str, str] = {
    "text": "add the passage text first, e.g. `retriever >> pt.text.get_text(dataset, 'text') >> scorer`, "
            "or ask the first stage for text (TfidfIndex.retriever(text=True))",
    "query": "use a query frame with columns qid and query (e.g. dataset.get_topics())",
    "query_embs": "encode queries first: `colbert.query_encoder() >> ...`",
    "doc_embs": "encode documents first: `... >> colbert.doc_encoder() >> ...`",
}


def require_columns(columns: Iterable[str], required: Sequence[str], context: Optional[pt.Transformer] = None) -> None:
    """Raise PyTerrier's InputValidationError naming the missing columns and how to add them."""
    columns = list(columns)
    try:
        pt.validate.columns(columns, includes=list(required), context=context)
    except pt.validate.InputValidationError as err:
        missing = [c for c in required if c not in columns]
        hints = "; ".join(f"'{c}': {COLUMN_HINTS[c]}" for c in missing if c in COLUMN_HINTS)
        message = f"{context or 'transformer'} needs column(s) {missing}, but the input has {columns}."
        if hints:
            message += f" To add them: {hints}."
        raise pt.validate.InputValidationError(message, err.modes) from None


def with_columns(inp: pd.DataFrame, new: Dict[str, object]) -> pd.DataFrame:
    """A copy of ``inp`` with the given columns set (replacing same-named ones), other columns kept."""
    out = inp.copy()
    for name, values in new.items():
        out[name] = values
    return out


def empty_output(inp: pd.DataFrame, new_columns: List[str]) -> pd.DataFrame:
    """The empty frame a transformer returns for empty input: input columns plus its declared outputs."""
    out = inp.copy()
    for col in new_columns:
        if col not in out.columns:
            out[col] = pd.Series(dtype="float64" if col == "score" else ("int64" if col == "rank" else object))
    return out


def hits_output(found: Hits, num_results: Optional[int] = None) -> pd.DataFrame:
    """A retriever's result frame from its :class:`~pyterrier_fandom_colbert.ranking.Hits`, the best
    ``num_results`` of each qid (all when None); the empty frame with the declared columns when no query was
    usable."""
    if len(found.frame) == 0:
        return empty_output(found.frame, ["docno", "score", "rank"])
    return hits_frame(*found, num_results)


_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _listed(names: Sequence[Any]) -> str:
    return f"{list(names[:5])}{' …' if len(names) > 5 else ''}"


def _surrogate_error(what: str) -> ValueError:
    return ValueError(f"{what} a lone surrogate (half of a UTF-16 pair such as '\\ud800', left by decoding with "
                      "errors='surrogateescape' or by cutting a pair), which cannot be encoded as UTF-8 or "
                      "tokenized; repair the text, e.g. s.encode('utf-8', 'replace').decode('utf-8')")


def check_queries(frame: pd.DataFrame) -> List[str]:
    """Query texts, refusing empty ones (nothing but whitespace and invisible characters: zero-width, bidi, other
    format and control characters, :func:`~pyterrier_fandom_colbert.display.is_blank`) and
    ones holding lone surrogates (naming their qids)."""
    queries = frame["query"].tolist()
    bad = [qid for qid, q in zip(frame["qid"], queries) if not isinstance(q, str) or is_blank(q)]
    if bad:
        raise ValueError(f"empty or non-text query for qid(s) {_listed(bad)}: ColBERT needs at least one word per "
                         "query (zero-width, bidi-control, other format and control characters do not count)")
    bad = [qid for qid, q in zip(frame["qid"], queries) if _SURROGATE_RE.search(q)]
    if bad:
        raise _surrogate_error(f"the query of qid(s) {_listed(bad)} holds")
    return queries


def check_query_text(query: Any) -> str:
    """One query's text as :func:`check_queries` accepts it, else its ``ValueError`` (the query shown).

    >>> check_query_text("dragons")
    'dragons'
    >>> check_query_text("  ")
    Traceback (most recent call last):
    ...
    ValueError: empty or non-text query '  ': ColBERT needs at least one word per query (zero-width, bidi-control, \
other format and control characters do not count)
    """
    if not isinstance(query, str) or is_blank(query):
        raise ValueError(f"empty or non-text query {query!r}: ColBERT needs at least one word per query (zero-width, "
                         "bidi-control, other format and control characters do not count)")
    if _SURROGATE_RE.search(query):
        raise _surrogate_error("the query holds")
    return query


def usable_query_rows(frame: pd.DataFrame, *, strict: bool = False, context: Any = None) -> pd.DataFrame:
    """The rows of ``frame`` whose query :func:`check_queries` accepts: the one policy of every retriever and
    scorer for messy topics. Rows of unusable queries (empty, whitespace-only or non-text) are left out, so those
    queries get no results, with one warning naming their qids; with ``strict=True`` they are an error instead
    (check_queries' ``ValueError``). A frame without a ``query`` column is returned as it is.

    >>> topics = pd.DataFrame({"qid": ["1", "2", "3"], "query": ["dragons", " ", None]})
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     usable_query_rows(topics)["qid"].tolist()
    ['1']
    >>> print(caught[0].message)
    2 unusable queries (empty or not text) give no results: qid(s) ['2', '3']; strict=True makes this an error
    """
    if "query" not in frame.columns or len(frame) == 0:
        return frame
    # the rule itself is check_queries' (one definition of an unusable query); it is asked about each distinct
    # text only when the whole frame fails, which is rare
    try:
        check_queries(frame)
        return frame
    except ValueError:
        if strict:
            raise
    keys = [q if isinstance(q, str) else (type(q).__name__, repr(q)) for q in frame["query"]]
    bad_keys = set()
    for row in np.flatnonzero(~pd.Series(keys, dtype=object).duplicated().to_numpy()):
        try:
            check_queries(frame.iloc[row:row + 1])
        except ValueError:
            bad_keys.add(keys[row])
    bad = np.array([k in bad_keys for k in keys], dtype=bool)
    qids = list(dict.fromkeys(frame["qid"][bad].tolist()))
    shown = f"{qids[:10]}{' …' if len(qids) > 10 else ''}"
    where = f"{context}: " if context is not None else ""
    warnings.warn(f"{where}{len(qids)} unusable quer{'y' if len(qids) == 1 else 'ies'} (empty or not text) give "
                  f"no results: qid(s) {shown}; strict=True makes this an error", stacklevel=3)
    return frame[~bad]


def check_texts(frame: pd.DataFrame, column: str = "text") -> List[str]:
    """Document texts, refusing NaN/None/non-strings and texts holding lone surrogates (naming their docnos).
    Empty strings are allowed."""
    texts = frame[column].tolist()
    names = frame["docno"].tolist() if "docno" in frame.columns else list(range(len(frame)))
    bad = [d for d, t in zip(names, texts) if not isinstance(t, str)]
    if bad:
        raise ValueError(f"missing or non-text {column!r} for docno(s) {_listed(bad)}; fill or drop those rows first")
    bad = [d for d, t in zip(names, texts) if _SURROGATE_RE.search(t)]
    if bad:
        raise _surrogate_error(f"the {column!r} of docno(s) {_listed(bad)} holds")
    return texts


def check_record(record: Any, position: int, text_field: str) -> Tuple[str, str]:
    """(docno, text) of one corpus record (a dict) given to an indexer, or an error naming it and what is wrong.

    >>> check_record({"docno": "d1", "text": "hi"}, 0, "text")
    ('d1', 'hi')
    >>> check_record({"docno": "d1", "text": None}, 3, "text")
    Traceback (most recent call last):
    ...
    ValueError: document #3 (docno 'd1') has text=None; expected a string field 'text' (choose another ...)
    """
    if not isinstance(record, Mapping):
        raise TypeError(f"document #{position} is a {type(record).__name__}; expected a dict with 'docno' and "
                        f"{text_field!r}")
    if "docno" not in record or text_field not in record:
        raise ValueError(f"document #{position} has fields {sorted(record)}; expected 'docno' and {text_field!r} "
                         "(choose the text field with text_field=...)")
    docno = record.get("docno")
    if not isinstance(docno, str) or not docno:
        raise ValueError(f"document #{position} has docno={docno!r}; expected a non-empty string")
    text = record.get(text_field)
    if not isinstance(text, str):
        raise ValueError(f"document #{position} (docno {docno!r}) has {text_field}={text!r}; expected a string "
                         f"field {text_field!r} (choose another with text_field=...)")
    if _SURROGATE_RE.search(docno) or _SURROGATE_RE.search(text):
        field = "docno" if _SURROGATE_RE.search(docno) else repr(text_field)
        raise _surrogate_error(f"document #{position} (docno {docno!r}) has in its {field}")
    return docno, text


#: (folder, pt_meta.json's inode, size and mtime) -> digest of its bytes: a stat per key, a read per rebuild
_CONTENT_IDS: Dict[Tuple[str, int, int, int], str] = {}


def content_id(folder: Path) -> str:
    """A digest of the artifact's ``pt_meta.json`` (its settings, sizes and the manifest's checksum of every other
    file): it changes when the artifact is rebuilt in place with other content, and not with the path it is opened
    by. ``"no-meta"`` for a folder without one."""
    meta = folder / "pt_meta.json"
    try:
        st = meta.stat()
    except OSError:
        return "no-meta"
    stamp = (str(folder), st.st_ino, st.st_size, st.st_mtime_ns)
    found = _CONTENT_IDS.get(stamp)
    if found is None:
        import hashlib

        found = hashlib.sha256(meta.read_bytes()).hexdigest()[:16]
        _CONTENT_IDS[stamp] = found
    return found


#: where :func:`artifact_key` keeps an artifact object's key (dropped with its loaded data by ``forget_cached``)
CONTENT_KEY_ATTRIBUTE = "_pfc_content_key"


def artifact_key(artifact: Any) -> str:
    """What identifies an artifact in a transformer's key: its resolved folder (relative paths and symbolic links
    resolved) and the digest of its content (:func:`content_id`), so an index rebuilt in place is another key.
    The key is taken once per artifact object, as its data is (an object opened before a rebuild by another one
    still serves, and is keyed by, what it read); the object's own indexer forgets it with its loaded data."""
    state = getattr(artifact, "__dict__", None)
    found = state.get(CONTENT_KEY_ATTRIBUTE) if state is not None else None
    if found is None:
        folder = Path(artifact.path).resolve()
        found = f"{folder}@{content_id(folder)}"
        if state is not None:
            state[CONTENT_KEY_ATTRIBUTE] = found
    return found


class EqualByKey:
    """Equality and hashing from :meth:`_key`, a tuple of everything that determines the transformer's output
    (artifact folder, encoder fingerprint, parameters), so ``pt.Experiment(..., plan="tree")`` runs a stage that
    several pipelines share only once. Put it before ``pt.Transformer`` in the bases."""

    def _key(self) -> Tuple[Any, ...]:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()  # mypy narrows other to type(self)

    def __hash__(self) -> int:
        return hash((type(self).__qualname__, self._key()))
