"""Keeping hostile wikitext from stalling the cleaner: a linear-time pre-pass, and a regex fallback cleaner.

mwparserfromhell's tokenizer backtracks over every construct it cannot close: a run of unterminated templates
(``"{{a|b=" * 10000``), unclosed tags (``<ref>``, ``<p>``, ``<span>``), tags with an unclosed attribute quote
(``<ref name="``), unclosed links (``[[a|[[b]]``) or bracketed URLs each cost a scan to the end of the text, so
the parse takes time quadratic in the page's length (minutes for 60 KB). :func:`neutralise` finds, in time linear
in the length of the text, which constructs close, and

* removes every matched template, parser function and template argument (``{{...}}``, ``{{{...}}}``), every
  dropped tag with its contents (``<ref>...</ref>``, ``<gallery>``, ``<math>``, ...: :data:`DROP_TAGS`), and
  an unclosed ``<!--`` with the rest of the page (as MediaWiki does): the renderer drops all of these anyway,
  and then the parser never sees the nesting inside them;
* turns every opener that never closes (``{{``, ``[[``, ``[https://...`` without ``]`` on its line, ``<div>``,
  ``<ref>``, ``<nowiki>``, ...) and every stray ``}}`` into a mark (:data:`GONE_MARKUP`) that the renderer
  drops like any other removed markup, and a ``<name`` that does not form a complete tag into ``&lt;name``
  (plain text);
* leaves everything else byte for byte alone (``<nowiki>``/``<pre>`` contents and comments are not scanned).

What the parser then gets has no unclosed construct (by the pre-pass's reckoning), so it does not backtrack
over the rest of the page. The pre-pass is also a fallback's first step: :func:`fallback_render` cleans already
neutralised wikitext with regular expressions only, for pages the caller will not hand to the parser at all
(see ``wikidump.clean_page``).
"""
from __future__ import annotations

import html
import re
from typing import List, Optional, Sequence

__all__ = [
    "DROP_TAGS",
    "GONE_MARKUP",
    "RAW_TAGS",
    "VOID_TAGS",
    "fallback_render",
    "neutralise",
    "neutralise_lines",
    "neutralise_piece",
]

#: tags dropped with their contents
DROP_TAGS = frozenset({
    "categorytree", "ce", "chem", "dpl", "dynamicpagelist", "gallery", "graph", "imagemap", "includeonly", "infobox",
    "inputbox", "languages", "mapframe", "maplink", "math", "noinclude", "ref", "references", "score", "script",
    "source", "style", "syntaxhighlight", "table", "templatedata", "timeline",
})
#: tags whose contents are not wikitext: not scanned for markup (``nowiki`` and ``pre`` keep their text)
RAW_TAGS = frozenset({
    "categorytree", "ce", "chem", "dpl", "dynamicpagelist", "gallery", "graph", "imagemap", "inputbox", "mapframe",
    "maplink", "math", "nowiki", "pre", "score", "script", "source", "style", "syntaxhighlight", "templatedata",
    "timeline",
})
#: tags that never have a closing tag
VOID_TAGS = frozenset({"br", "wbr", "hr", "meta", "link", "img"})
#: what removed or neutralised markup becomes: a Unicode noncharacter (never in interchanged text; removed from the
#: input first) that the parser keeps as text, and the renderer treats as removed markup
GONE_MARKUP = "\ufdd0"

MAX_TAG_CHARS = 2000  # a tag longer than this (attributes included) is taken as text
MAX_LINK_CHARS = 2000  # pieces may be cut inside a link open for longer than this
_ATTRS = r"""(?:\s+[^\s"'<>/=]+(?:\s*=\s*(?:"[^"<>]*"|'[^'<>]*'|[^\s"'<>]+))?)*"""
_OPEN_TAG_RE = re.compile(rf"<([A-Za-z][A-Za-z0-9]*){_ATTRS}\s*(/?)>")
_CLOSE_TAG_RE = re.compile(r"</([A-Za-z][A-Za-z0-9]*)\s*>")
_PASS1_RE = re.compile(r"<!--|<[A-Za-z]|\{{2,}|\}{2,}")
_PASS2_RE = re.compile(r"<!--|</?[A-Za-z]|\[\[|\]\]|\[(?=(?i:https?:|ftp:|mailto:|irc:|ircs:|news:|//))|\]|\n")


class _Closers:
    """Finds the closing ``-->`` / ``</name>`` after a position in linear total time: a search that found
    nothing is remembered, so later openers of the same kind fail at once."""

    def __init__(self, text: str):
        self.text = text
        self._none_after: dict = {}
        self._patterns: dict = {}

    def find(self, key: str, start: int) -> Optional[re.Match]:
        if start >= self._none_after.get(key, len(self.text) + 1):
            return None
        pattern = self._patterns.get(key)
        if pattern is None:
            pattern = self._patterns[key] = re.compile("-->" if key == "--" else rf"</{key}\s*>", re.IGNORECASE)
        m = pattern.search(self.text, start)
        if m is None:
            self._none_after[key] = start
        return m


def _apply(text: str, edits: list, cuts: Sequence[int] = ()) -> list:
    """Apply non-overlapping ``(start, end, replacement)`` edits (an edit inside an earlier-starting one is
    skipped) and cut the result at the given positions of ``text`` (none inside an edit): the pieces."""
    pieces, out, pos = [], [], 0
    marks = sorted([(start, 0, end, replacement) for start, end, replacement in edits] +
                   [(cut, 1, cut, "") for cut in cuts], key=lambda e: (e[0], e[1], -e[2]))
    for start, is_cut, end, replacement in marks:
        if start < pos:
            continue
        out.append(text[pos:start])
        if is_cut:
            pieces.append("".join(out))
            out = []
        else:
            out.append(replacement)
        pos = end
    out.append(text[pos:])
    pieces.append("".join(out))
    return pieces


def _pass_templates(text: str) -> str:
    """Pass 1: comments and raw/dropped tags located; templates matched brace-run against brace-run (three braces
    close an argument, two a template) and removed; unclosed comments, unmatched brace runs removed."""
    edits: list = []
    braces: list = []
    regions: list = []
    closers = _Closers(text)
    pos = 0
    while True:
        m = _PASS1_RE.search(text, pos)
        if m is None:
            break
        token, start = m.group(), m.start()
        if token == "<!--":
            close = closers.find("--", start + 4)
            if close is None:  # an unclosed comment hides the rest of the page
                edits.append((start, len(text), GONE_MARKUP))
                break
            pos = close.end()
        elif token[0] == "<":
            pos = _pass1_tag(text, start, closers, edits)
        elif token[0] == "{":
            braces.append([start, len(token)])
            pos = m.end()
        else:  # a run of closing braces
            _close_braces(start, m.end(), braces, regions, edits)
            pos = m.end()
    edits.extend((start, start + count, GONE_MARKUP) for start, count in braces)  # openers that never closed
    edits.extend((start, end, GONE_MARKUP) for start, end in _outermost(regions))
    return _apply(text, edits)[0]


def _pass1_tag(text: str, start: int, closers: _Closers, edits: list) -> int:
    """Pass 1 at a tag opener: a dropped tag (with its contents, or alone when unclosed) becomes an edit; a raw
    tag's contents are skipped. Returns where the scan goes on."""
    tag = _OPEN_TAG_RE.match(text, start, min(len(text), start + MAX_TAG_CHARS))
    name = tag.group(1).lower() if tag else ""
    if tag is None or not (name in RAW_TAGS or name in DROP_TAGS):
        return start + 1
    if tag.group(2) or name in VOID_TAGS:  # <ref name="x"/>
        if name in DROP_TAGS:
            edits.append((start, tag.end(), GONE_MARKUP))
        return tag.end()
    close = closers.find(name, tag.end())
    if close is None:
        edits.append((start, tag.end(), GONE_MARKUP))
        return tag.end()
    if name in DROP_TAGS:
        edits.append((start, close.end(), GONE_MARKUP))
    return close.end()


def _close_braces(start: int, end: int, braces: list, regions: list, edits: list) -> None:
    """Pass 1 at a run of closing braces ``text[start:end]``: matched against the open runs on ``braces`` (three
    close an argument, two a template; matched regions go to ``regions``), the rest is debris."""
    left, at = end - start, start
    while left >= 2 and braces:
        top = braces[-1]
        n = 3 if top[1] >= 3 and left >= 3 else 2
        top[1] -= n
        left -= n
        regions.append((top[0] + top[1], at + n))
        at += n
        if top[1] < 2:
            braces.pop()
            if top[1]:  # the odd brace of "{{{{a}}}}" or "{{{a}}": debris
                edits.append((top[0], top[0] + 1, GONE_MARKUP))
    if left >= 2 or (left and at > start):  # stray "}}" (or the odd brace of a run that closed
        edits.append((at, end, GONE_MARKUP))  # something): debris of a template opened elsewhere


def _outermost(regions: list) -> list:
    """Matched template regions without those inside others (inner ones close first, so sort and merge)."""
    merged: list = []
    for start, end in sorted(regions):
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _pass_links_and_tags(text: str, cut_every: Optional[int] = None, drop_comments: bool = False) -> list:
    """Pass 2, on text without templates: links, bracketed URLs (closed on their line) and paired tags matched;
    unmatched openers removed; incomplete tags made text. Returns the result in pieces, cut (with ``cut_every``)
    before the first line break at least ``cut_every`` characters after the previous cut that is outside
    comments, ``<nowiki>``/``<pre>`` and links opened less than ``MAX_LINK_CHARS`` before (where a parser may
    start afresh), or, after ``2 * cut_every`` characters without such a line break, outside comments and
    ``<nowiki>``/``<pre>`` only (a hostile page where links never close). ``drop_comments``: comments become
    GONE_MARKUP (the cuts do not move: they are positions of ``text``)."""
    edits: list = []
    links: List[int] = []
    urls: List[int] = []
    cuts: List[int] = []
    last_cut = 0
    tags: dict = {}
    closers = _Closers(text)
    pos = 0
    while True:
        m = _PASS2_RE.search(text, pos)
        if m is None:
            break
        token, start = m.group(), m.start()
        pos = m.end()
        if token == "<!--":
            pos = _pass2_comment(text, start, closers, drop_comments, edits)
        elif token == "\n":
            if urls:
                edits.extend((s, s + 1, GONE_MARKUP) for s in urls)
                urls.clear()
            if cut_every is not None and start - last_cut >= cut_every and (
                    not links or start - links[-1] > MAX_LINK_CHARS or start - last_cut >= 2 * cut_every):
                cuts.append(start)
                last_cut = start
        elif token == "[[":
            links.append(start)
        elif token == "]]":
            if links:
                links.pop()
            elif urls:
                urls.pop()
                pos = start + 1  # "]" closes the URL; look at the second "]" again
        elif token == "]":
            if urls:
                urls.pop()
        elif token[0] == "[":
            urls.append(start)
        elif token[1] == "/":
            pos = _pass2_close_tag(text, start, pos, tags, edits)
        else:
            pos = _pass2_open_tag(text, start, pos, closers, tags, edits)
    edits.extend((s, s + 1, GONE_MARKUP) for s in urls)
    edits.extend((s, s + 2, GONE_MARKUP) for s in links)
    edits.extend((s, e, GONE_MARKUP) for stack in tags.values() for s, e in stack)
    return _apply(text, edits, cuts)


def _pass2_comment(text: str, start: int, closers: _Closers, drop_comments: bool, edits: list) -> int:
    """Pass 2 at ``<!--``: skipped to its end (pass 1 removed unclosed ones), made GONE_MARKUP with
    ``drop_comments``. Returns where the scan goes on."""
    close = closers.find("--", start + 4)
    end = close.end() if close else len(text)
    if drop_comments and close is not None:
        edits.append((start, end, GONE_MARKUP))
    return end


def _pass2_close_tag(text: str, start: int, pos: int, tags: dict, edits: list) -> int:
    """Pass 2 at ``</``: a closing tag closes the last open tag of its name; an incomplete one is made text.
    Returns where the scan goes on (``pos``: just after the token)."""
    tag = _CLOSE_TAG_RE.match(text, start, min(len(text), start + MAX_TAG_CHARS))
    if tag is None:
        edits.append((start, start + 1, "&lt;"))
        return pos
    stack = tags.get(tag.group(1).lower())
    if stack:
        stack.pop()
    return tag.end()


def _pass2_open_tag(text: str, start: int, pos: int, closers: _Closers, tags: dict, edits: list) -> int:
    """Pass 2 at ``<name``: an incomplete tag is made text, a raw tag's contents are skipped (removed when it
    never closes), another tag is pushed on ``tags``. Returns where the scan goes on."""
    tag = _OPEN_TAG_RE.match(text, start, min(len(text), start + MAX_TAG_CHARS))
    if tag is None:
        edits.append((start, start + 1, "&lt;"))
        return pos
    name = tag.group(1).lower()
    if tag.group(2) or name in VOID_TAGS:
        return tag.end()
    if name in RAW_TAGS:  # nowiki / pre (pass 1 removed the others): contents are text
        close = closers.find(name, tag.end())
        if close is None:
            edits.append((start, tag.end(), GONE_MARKUP))
            return tag.end()
        return close.end()
    tags.setdefault(name, []).append((start, tag.end()))
    return tag.end()


def neutralise_lines(wikitext: str, size: int, keep_marks: bool = False, drop_comments: bool = False) -> list:
    """:func:`neutralise`, cut into pieces of about ``size`` characters (or more) before line breaks where a
    parser can start afresh (outside links, comments and ``<nowiki>``/``<pre>``): ``"".join`` of the pieces is
    ``neutralise(wikitext)``. A tag may be open across a cut: :func:`neutralise_piece` closes that gap for a
    piece parsed on its own. ``keep_marks``: the text's GONE_MARKUP characters are marks made by an earlier
    pass (the template renderer), kept as removed markup rather than removed as foreign input. ``drop_comments``:
    comments become GONE_MARKUP too (for a renderer that drops them anyway: the parser has fewer nodes to build).

    >>> neutralise_lines("one two three\\nfour five [[x\\ny]] six\\nseven", 10)
    ['one two three', '\\nfour five [[x\\ny]] six', '\\nseven']
    """
    return _pass_links_and_tags(_pass_templates(wikitext if keep_marks else wikitext.replace(GONE_MARKUP, "")),
                                size, drop_comments)


def neutralise_piece(text: str, drop_comments: bool = False) -> str:
    """Neutralise again a piece from :func:`neutralise_lines` that is parsed on its own: tags opened in an
    earlier piece or closed in a later one are unclosed here. ``drop_comments`` as for :func:`neutralise_lines`."""
    return _pass_links_and_tags(text, None, drop_comments)[0]


def neutralise(wikitext: str, drop_comments: bool = False) -> str:
    """Wikitext with every unclosed construct neutralised and templates/dropped tags removed (module docstring),
    in time linear in its length. ``drop_comments``: comments become GONE_MARKUP too.

    >>> neutralise("A {{b|c={{d}}}} e {{f|g= h").replace(GONE_MARKUP, "@")
    'A @ e @f|g= h'
    >>> neutralise("x<ref name=a>y</ref> [[b|c [[d]] <span>e <ref name=\\"f").replace(GONE_MARKUP, "@")
    'x@ @b|c [[d]] @e &lt;ref name="f'
    """
    return _pass_links_and_tags(_pass_templates(wikitext.replace(GONE_MARKUP, "")), None, drop_comments)[0]


_LINK_RE = re.compile(r"\[\[([^\[\]]*)\]\]")
_FILE_LINK_RE = re.compile(r"\[\[[ \t]*(?i:file|image)[ \t]*:[^\[\]]*\]\]")
_PLAIN_LINK_RE = re.compile(r"\[\[([^\[\]|:#\s][^\[\]|:#]*)\]\]")
_LABEL_LINK_RE = re.compile(r"\[\[[^\[\]|:#\s][^\[\]|:#]*\|([^\[\]|\s][^\[\]|]*)\]\]")
_URL_LINK_RE = re.compile(r"\[(?:https?:|ftp:|mailto:|irc:|ircs:|news:|//)[^\s\]]*[ \t]*([^\]\n]*)\]", re.I)
_BARE_URL_RE = re.compile(r"(?:https?|ftp)://[^\s<>\[\]]+", re.I)
_COMMENT_RE = re.compile(r"<!--.*?-->", re.S)
_RAW_RE = re.compile(r"<(nowiki|pre)(?:\s[^<>]*)?>(.*?)</\1\s*>", re.S | re.I)
_HEADING_LINE_RE = r"^(={{1,6}})[ \t]*(.+?)[ \t]*\1[\s{gone}]*$"  # {gone}: comments after a heading are fine
_RULE_RE = re.compile(r"^-{4,}", re.M)  # a horizontal rule
_TERM_RE = re.compile(r"^;[ \t]*([^:\n]*?)[ \t]+:[ \t]*", re.M)  # "; Term : text" -> "Term: text"
_BLOCK_TAG_RE = re.compile(r"</?(?:br|hr|p|div|li|ul|ol|dl|dt|dd|blockquote|tr|h[1-6])(?:\s[^<>]*)?/?>", re.I)
_ANY_TAG_RE = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")
_MAGIC_RE = re.compile(r"__[A-Z]+__")


def _fallback_link(m: re.Match, skip_prefixes, gone: str) -> str:
    target, pipe, label = m.group(1).partition("|")
    target = target.strip()
    visible = target.startswith(":")
    target = target.lstrip(":").strip()
    prefix = target.split(":", 1)[0].strip().lower() if ":" in target else ""
    if not visible and skip_prefixes(prefix):
        return gone
    if label.strip():
        return label
    if pipe:  # pipe trick: [[Namespace:Foo (bar)|]] shows "Foo"
        return re.sub(r"\s*\(.*\)$", "", target.split(":")[-1]).strip()
    return target[1:] if target.startswith("#") else target


def _fallback_links(text: str, skip_prefixes, gone: str) -> str:
    """:func:`fallback_render`'s links: their labels or targets, ``gone`` for those of skipped namespaces."""
    # the common links first, without a Python call each: [[Page]] and [[Page|label]] (no namespace, anchor)
    text = _LABEL_LINK_RE.sub(r"\1", _PLAIN_LINK_RE.sub(r"\1", text))
    if skip_prefixes("file") and skip_prefixes("image"):
        text = _FILE_LINK_RE.sub(gone, text)
    for _ in range(8):  # innermost links first: "[[File:a|b [[c]]]]" needs two rounds
        text, n = _LINK_RE.subn(lambda m: _fallback_link(m, skip_prefixes, gone), text)
        if not n:
            break
    return text


def fallback_render(wikitext: str, skip_prefixes, gone: str = "\x00") -> str:
    """Plain text from *neutralised* wikitext with regular expressions only (linear time, no parser): comments,
    links (``skip_prefixes(prefix)`` says which namespaces' links are dropped), bracketed and bare URLs,
    headings (normalised to ``== Title ==``), tags (block tags become line breaks), entities and magic words.
    Removed markup is marked with ``gone``, as the parser-based renderer does.

    >>> fallback_render("== Hi ==\\nA [[b|c]] [[File:x.png|y]] [https://e.org site]<br>x &amp; y", "file".__eq__)
    '== Hi ==\\nA c \\x00 site\\nx & y'
    """
    text = wikitext.replace(GONE_MARKUP, gone)
    tags = "<" in text  # (each pass runs only when its markup can be there: this cleaner also does table rows)
    if tags:
        text = _COMMENT_RE.sub(gone, text)
    raw: list = []

    def keep_raw(m: re.Match) -> str:  # nowiki/pre text is not markup (but has entities): set it aside
        raw.append(html.unescape(m.group(2)))
        return f"\ue000{len(raw) - 1}\ue001"

    if tags:
        text = _RAW_RE.sub(keep_raw, text)
    if "[[" in text:
        text = _fallback_links(text, skip_prefixes, gone)
    if "[" in text:
        text = _URL_LINK_RE.sub(lambda m: m.group(1) if m.group(1).strip() else gone, text)
    if "://" in text:
        text = _BARE_URL_RE.sub(gone, text)
    # (the patterns anchored at line starts run only where such a line is: sre scans them position by position)
    if text[:1] == "=" or "\n=" in text:
        heading = re.compile(_HEADING_LINE_RE.format(gone=re.escape(gone)), re.M)
        text = heading.sub(lambda m: f"{m.group(1)} {m.group(2).replace(gone, '').strip()} {m.group(1)}", text)
    if text[:1] == ";" or "\n;" in text:
        text = _TERM_RE.sub(lambda m: f"{m.group(1)}: ", text)
    if text[:4] == "----" or "\n----" in text:
        text = _RULE_RE.sub(gone, text)
    if tags:
        text = _ANY_TAG_RE.sub("", _BLOCK_TAG_RE.sub("\n", text))
    if "&" in text:
        text = html.unescape(text)
    if "__" in text:
        text = _MAGIC_RE.sub("", text)
    if not raw:
        return text
    return re.sub("\ue000(\\d+)\ue001", lambda m: raw[int(m.group(1))], text)
