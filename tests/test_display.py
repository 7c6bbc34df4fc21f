"""Display-safe text: each character judged by its Unicode category, checked on hand-made strings."""
import io
import unicodedata

import pytest

from pyterrier_fandom_colbert.display import char_kind, html_text, is_blank, terminal_text, use_color

# (character, its kind): one or more of each category the module names
KINDS = [
    ("a", "visible"), ("é", "visible"), ("\u05d0", "visible"), ("\u0301", "visible"), (" ", "visible"),
    ("\t", "line"), ("\n", "line"), ("\r", "line"), ("\u2028", "line"), ("\u2029", "line"),
    ("\x00", "control"), ("\x1b", "control"), ("\x7f", "control"), ("\x85", "control"), ("\x9b", "control"),
    ("\u202a", "bidi"), ("\u202b", "bidi"), ("\u202c", "bidi"), ("\u202d", "bidi"), ("\u202e", "bidi"),
    ("\u2066", "bidi"), ("\u2067", "bidi"), ("\u2068", "bidi"), ("\u2069", "bidi"),
    ("\u200e", "bidi"), ("\u200f", "bidi"), ("\u061c", "bidi"),
    ("\u200c", "joiner"), ("\u200d", "joiner"),
    ("\u200b", "format"), ("\u2060", "format"), ("\ufeff", "format"), ("\u00ad", "format"),
    ("\U000e0001", "format"), ("\U000e0041", "format"), ("\U000e007f", "format"),
    ("\ufe00", "variation"), ("\ufe0f", "variation"), ("\U000e0100", "variation"), ("\U000e01ef", "variation"),
    ("\u180b", "variation"),
]


@pytest.mark.parametrize("ch, kind", KINDS)
def test_char_kind_by_category(ch, kind):
    assert char_kind(ch) == kind


def test_every_format_character_is_judged_invisible():
    """No Cf character of the running Unicode database is left visible (a new one cannot slip through)."""
    cf = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]
    assert len(cf) > 100
    assert {char_kind(ch) for ch in cf} <= {"bidi", "joiner", "format"}


def test_terminal_text_hand_computed():
    # escape sequence: ESC shown as U+FFFD, the rest printed literally; newline to a space
    assert terminal_text("red\x1b[31m!\nnext") == "red\ufffd[31m! next"
    # a right-to-left override would reverse the rest of the line: removed, as are isolates and marks
    assert terminal_text("abc\u202edef\u2067ghi\u2069\u200fjkl\u061c") == "abcdefghijkl"
    # zero-width space, soft hyphen, BOM, tag characters and variation selectors show nothing: left out
    assert terminal_text("a\u200bb\u00adc\ufeffd\U000e0068\U000e0069e\ufe0f") == "abcde"
    # joiners shape scripts and emoji: kept
    joined = "\u0645\u200c\u06cc \U0001f469\u200d\U0001f4bb"
    assert terminal_text(joined) == joined
    # paragraph separator and tab are spaces; non-strings are printed through str()
    assert terminal_text("x\u2029y\tz") == "x y z"
    assert terminal_text(12.5) == "12.5"


def test_terminal_text_leaves_nothing_that_moves_the_cursor_or_reorders():
    hostile = "".join(chr(c) for c in range(0x20)) + "\x7f\x9b" + "".join(ch for ch, _ in KINDS)
    out = terminal_text(hostile)
    assert not any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in out)
    assert not any(unicodedata.category(ch) == "Cf" and ch not in "\u200c\u200d" for ch in out)


def test_html_text_escapes_and_isolates():
    assert html_text("<a href='x'>&</a>") == "&lt;a href=&#x27;x&#x27;&gt;&amp;&lt;/a&gt;"
    assert html_text("\u05e9\u05dc\u05d5\u05dd\u202e!", isolate=True) == "<bdi>\u05e9\u05dc\u05d5\u05dd\u202e!</bdi>"
    assert html_text("a\x00b\x1bc\nd\te") == "a\ufffdb\ufffdc\nd\te"  # controls not allowed in HTML; breaks kept
    assert html_text(3) == "3"


def test_is_blank():
    assert is_blank("") and is_blank(" \t\n")
    assert is_blank("\u200b\u202e\u200e\u00ad\ufe0f\U000e0041\x00\x01 \u2060")
    assert not is_blank("\u200ba") and not is_blank("\u05d0") and not is_blank("\U0001f600")


def test_use_color(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color(Tty()) and not use_color(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(Tty())
