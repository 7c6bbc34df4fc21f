"""Text shown to people, made safe once for the whole package: what a terminal prints, what an HTML page holds,
which text counts as blank, and whether to colour the output.

Each character is judged by its Unicode category (:func:`char_kind`), not by a hand-written list of ranges:

* ``line``: tab, line feed, carriage return, line and paragraph separators (Zl, Zp): a space in one-line output;
* ``control`` (Cc): the rest of the C0/C1 controls, ESC among them: never sent to a terminal (shown as U+FFFD, so
  the reader sees that something was there) nor left raw in HTML;
* ``bidi``: the bidirectional controls that reorder what follows: embeddings and overrides U+202A-U+202E, isolates
  U+2066-U+2069, and the marks U+200E, U+200F, U+061C. A terminal gets none of them (they could reverse the rest
  of the line or the lines after it); HTML keeps them, inside a ``<bdi>`` isolate that ends their effect;
* ``joiner``: U+200C and U+200D (Cf), which shape Persian and Indic scripts and join emoji: kept everywhere;
* ``format``: every other Cf character (zero-width space, word joiner, BOM, soft hyphen, tag characters
  U+E0000-U+E007F, …): invisible, so left out of terminal text;
* ``variation``: variation selectors (U+FE00-U+FE0F, U+E0100-U+E01EF, Mongolian U+180B-U+180D, U+180F): they
  only pick a glyph, and long runs of them can hide data, so left out of terminal text;
* ``visible``: everything else.

The same judgement serves every output: :func:`terminal_text` leaves out what a terminal must not get,
:func:`html_text` escapes for HTML and isolates bidi controls in ``<bdi>``, and :func:`json_text` writes every
character that would not show as itself as a ``\\uXXXX`` escape (the data are unchanged once parsed, and JSON
printed to a terminal cannot reorder or hide text).
"""
from __future__ import annotations

import html
import json
import os
import sys
import unicodedata
from typing import Any, Optional, TextIO

#: bidirectional controls and marks (all Cf): embeddings, overrides, isolates, LRM, RLM, ALM
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
#: zero-width non-joiner and joiner (Cf), needed to shape some scripts and emoji sequences
JOINERS = frozenset("\u200c\u200d")
#: kinds of character that show nothing: with whitespace, a text made only of these is blank
INVISIBLE_KINDS = frozenset({"control", "bidi", "joiner", "format", "variation"})


def _is_variation_selector(code: int) -> bool:
    return 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF or 0x180B <= code <= 0x180D or code == 0x180F


def char_kind(ch: str) -> str:
    """What a character is for display: ``line``, ``control``, ``bidi``, ``joiner``, ``format``, ``variation`` or
    ``visible`` (see the module's notes).

    >>> [char_kind(c) for c in ("a", "\\n", "\\x1b", "\\u202e", "\\u200f", "\\u200d", "\\u00ad", "\\ufe0f", " ")]
    ['visible', 'line', 'control', 'bidi', 'bidi', 'joiner', 'format', 'variation', 'visible']
    """
    if ch in "\t\n\r":
        return "line"
    category = unicodedata.category(ch)
    if category in ("Zl", "Zp"):
        return "line"
    if category == "Cc":
        return "control"
    if ch in BIDI_CONTROLS:
        return "bidi"
    if ch in JOINERS:
        return "joiner"
    if category == "Cf":
        return "format"
    if _is_variation_selector(ord(ch)):
        return "variation"
    return "visible"


def is_blank(text: str) -> bool:
    """Whether ``text`` shows nothing: only whitespace and invisible characters (:data:`INVISIBLE_KINDS`).

    >>> is_blank(" \\u200b\\u202e\\x00\\ufeff\\u200e\\u00ad"), is_blank("a\\u200b"), is_blank("")
    (True, False, True)
    """
    return all(ch.isspace() or char_kind(ch) in INVISIBLE_KINDS for ch in text)


def terminal_text(text: Any) -> str:
    """``text`` (``str()`` of it) safe to print on one line: line breaks and tabs as spaces, control characters as
    U+FFFD, bidi controls, other format characters and variation selectors left out, joiners kept.

    >>> terminal_text("a\\x1b[31mb\\nc\\u202ed\\u2067e\\u200ff\\u00adg") == "a\\ufffd[31mb cdefg"
    True
    """
    out = []
    for ch in str(text):
        if ch.isascii() and ch.isprintable():  # the common case, decided without a category lookup
            out.append(ch)
            continue
        kind = char_kind(ch)
        if kind == "line":
            out.append(" ")
        elif kind == "control":
            out.append("\ufffd")
        elif kind in ("visible", "joiner"):
            out.append(ch)
    return "".join(out)


def html_text(text: Any, *, isolate: bool = False) -> str:
    """``text`` (``str()`` of it) escaped for HTML, control characters other than line breaks and tabs as U+FFFD
    (they are not allowed in HTML). Bidi controls stay: right-to-left writing may need them, and with
    ``isolate=True`` the text is wrapped in ``<bdi>``, which ends whatever embedding or override it leaves open
    (put the text in a ``<bdi>`` yourself when it is wrapped in other markup first).

    >>> html_text("<b>\\x1b&\\u202e", isolate=True) == "<bdi>&lt;b&gt;\\ufffd&amp;\\u202e</bdi>"
    True
    """
    escaped = html.escape("".join("\ufffd" if char_kind(ch) == "control" else ch for ch in str(text)))
    return f"<bdi>{escaped}</bdi>" if isolate else escaped


def _json_escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON writes characters beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_text(value: Any, *, indent: Optional[int] = None) -> str:
    """``value`` as JSON (readable UTF-8), with every character that would not show as itself written as a
    ``\\uXXXX`` escape: control characters (C1 included), line and paragraph separators, bidi controls, other
    format characters, variation selectors and lone surrogates. Parsed back, it is the same value.

    >>> json_text({"t": "a\u202eb\u00e9\u200d"})
    '{"t": "a\\\\u202eb\u00e9\u200d"}'
    >>> json.loads(json_text(["x\U000e0041\u2028"])) == ["x\U000e0041\u2028"]
    True
    """
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    return "".join(ch if ch.isascii() or (char_kind(ch) in ("visible", "joiner") and not 0xD800 <= ord(ch) <= 0xDFFF)
                   else _json_escape(ch) for ch in text)


def use_color(stream: Optional[TextIO] = None) -> bool:
    """Whether to colour output to ``stream`` (default ``sys.stdout``): when it is a terminal and ``NO_COLOR`` is
    unset."""
    stream = stream if stream is not None else sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ


# -- terminal colour: the package's one set of ANSI sequences (written only where use_color() says so) ----------
ANSI_BOLD, ANSI_DIM, ANSI_UNDERLINE, ANSI_RESET = "\x1b[1m", "\x1b[2m", "\x1b[4m", "\x1b[0m"
#: an answer span: black on yellow; the short answer within it, bold
ANSI_ANSWER, ANSI_SHORT_ANSWER = "\x1b[30;43m", "\x1b[1;30;43m"
#: 256-colour backgrounds from pale to strong (:func:`ansi_shade`)
ANSI_RAMP = (230, 229, 222, 215, 209, 203)


def ansi_shade(text: str, level: float) -> str:
    """``text`` in black on the :data:`ANSI_RAMP` background for ``level`` in [0, 1] (pale to strong), the
    colours reset after it.

    >>> ansi_shade("word", 0.0) == "\\x1b[48;5;230m\\x1b[30mword\\x1b[39;49m"
    True
    >>> ansi_shade("word", 1.0)[:11] == "\\x1b[48;5;203m"
    True
    """
    shade = ANSI_RAMP[min(int(level * len(ANSI_RAMP)), len(ANSI_RAMP) - 1)]
    return f"\x1b[48;5;{shade}m\x1b[30m{text}\x1b[39;49m"
