"""What a search accepts, checked before anything heavy is loaded: the query, the system and the number of results.

This module imports nothing heavy (no numpy, pandas, torch or PyTerrier), so ``pfc search`` refuses bad input at
once, and the server and the terminal give the same messages (:class:`QueryError`).

A query that "shows nothing" is judged by Unicode category (:func:`~pyterrier_fandom_colbert.display.is_blank`):
whitespace, control characters, format characters (Cf: bidi marks U+200E/U+200F/U+061C, zero-width spaces, the
soft hyphen, tag characters), variation selectors and joiners. Text that is not valid Unicode (lone surrogates:
what Python makes of invalid UTF-8 bytes on a command line) is refused too, rather than written raw into output.
"""
from __future__ import annotations

from typing import Any

from ..display import char_kind, is_blank

SYSTEMS = ("hybrid", "colbert", "tfidf")
MAX_QUERY_CHARS = 500
MAX_K = 50


class QueryError(ValueError):
    """A query the searcher refuses (empty, shows nothing, too long, control characters, not valid text, unknown
    system, bad k)."""


def check_query(query: Any) -> str:
    """The query with runs of whitespace collapsed, or a :class:`QueryError` saying what is wrong.

    >>> check_query("  when was   it released? ")
    'when was it released?'
    >>> check_query("   ")
    Traceback (most recent call last):
    ...
    pyterrier_fandom_colbert.app.queries.QueryError: the query is empty; type a question or some words
    >>> check_query("\\u200e\\u00ad\\u200b")
    Traceback (most recent call last):
    ...
    pyterrier_fandom_colbert.app.queries.QueryError: the query shows nothing (only invisible characters such as \
U+200E); type a question or some words
    """
    if not isinstance(query, str):
        raise QueryError(f"the query must be text, got {type(query).__name__}")
    bad = next((ch for ch in query if 0xD800 <= ord(ch) <= 0xDFFF), None)
    if bad is not None:
        shown = f"byte 0x{ord(bad) - 0xDC00:02X}" if 0xDC80 <= ord(bad) <= 0xDCFF else f"U+{ord(bad):04X}"
        raise QueryError(f"the query is not valid text ({shown} is not UTF-8); type it again in UTF-8")
    if any(char_kind(ch) == "control" for ch in query):
        raise QueryError("the query contains control characters; type plain text")
    query = " ".join(query.split())
    if not query:
        raise QueryError("the query is empty; type a question or some words")
    if is_blank(query):
        first = next(ch for ch in query if not ch.isspace())
        raise QueryError(f"the query shows nothing (only invisible characters such as U+{ord(first):04X}); type a "
                         "question or some words")
    if len(query) > MAX_QUERY_CHARS:
        raise QueryError(f"the query is {len(query)} characters long; the limit is {MAX_QUERY_CHARS}")
    return query


def check_system(system: Any) -> str:
    if system not in SYSTEMS:
        raise QueryError(f"system={system!r} is not known; expected one of {', '.join(SYSTEMS)}")
    return system


def check_k(k: Any) -> int:
    """``k`` (an int, or text of one, as a URL gives it) when it is a whole number from 1 to :data:`MAX_K`.

    >>> check_k("7"), check_k(3)
    (7, 3)
    """
    try:
        value = int(k)
    except (TypeError, ValueError):
        raise QueryError(f"k={k!r} is not a whole number; expected 1 to {MAX_K}") from None
    if isinstance(k, bool) or not 1 <= value <= MAX_K or (isinstance(k, float) and k != value):
        raise QueryError(f"k={k!r} is out of range; expected 1 to {MAX_K}")
    return value


#: results the reader reads per question by default (the measured speed/quality point: docs/app.md)
READ_TOP = 3
#: results shown by default, by `pfc search` and the page alike
DEFAULT_K = 10


def check_read_top(n: Any) -> int:
    """How many top results the reader reads: a whole number from 0 (none) to :data:`MAX_K`.

    >>> check_read_top(3)
    3
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_K:
        raise QueryError(f"read_top={n!r}; expected a whole number from 0 to {MAX_K}")
    return n
