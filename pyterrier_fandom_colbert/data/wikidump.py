"""Reading MediaWiki XML exports (Fandom ``<dbname>_pages_current.xml.7z`` and friends) and cleaning wikitext.

Two concerns, kept apart from passage splitting (``passages.py``):

* :func:`iter_pages` (in ``exports``, re-exported here) streams ``<page>`` records out of an export (schema
  0.10/0.11) in plain ``.xml``, ``.bz2``, ``.gz`` or ``.7z`` form, in memory that does not grow with the dump:
  the file is decompressed chunk by chunk (1 MiB, ``dumpbytes.xml_chunks``) into an XMLPullParser, and each
  ``<page>`` element is dropped once read. For ``.7z``, py7zr decompresses in a background thread that hands
  1 MiB pieces over through a bounded queue; nothing is extracted to disk. py7zr itself works in blocks of 1 MiB
  of *compressed* data, so the peak is about one block's worth of XML (10-20 MB for wiki dumps) plus the queue.
* :func:`clean_wikitext` / :func:`read_page` turn wikitext into plain prose with mwparserfromhell (rules in their
  docstrings), keeping section headings as ``== Heading ==`` lines so that the passage splitter can see them,
  after fact templates are rendered (``templates``), tables made into rows (``wikitables``) and infoboxes taken
  out as facts (``infobox``).

Malformed XML and truncated archives raise :class:`DumpError`, naming the file and the position.
"""
from __future__ import annotations

import html
import re
import time
from typing import NamedTuple, Optional

from ..cli_errors import require_extra
from .dumpbytes import DumpError, xml_chunks
from .exports import LANGUAGE_CODE_RE, LANGUAGE_CODES, SiteInfo, WikiPage, is_translation, iter_pages, skip_reason
from .infobox import infobox_fields, is_infobox, keep_value, portable_infobox_fields
from .templates import Call, all_positional, render_templates
from .wikiguard import DROP_TAGS as _DROP_TAGS
from .wikiguard import GONE_MARKUP, fallback_render, neutralise, neutralise_lines, neutralise_piece
from .wikitables import drop_empty_cells, tables_to_text

__all__ = [
    "DEFAULT_MAX_PAGE_CHARS",
    "DEFAULT_TIME_BUDGET",
    "DISAMBIGUATION_TEMPLATES",
    "CleanPage",
    "DumpError",
    "PageText",
    "SiteInfo",
    "WikiPage",
    "clean_page",
    "clean_wikitext",
    "is_translation",
    "iter_pages",
    "read_page",
    "skip_reason",
    "xml_chunks",
]

_FILE_NS = frozenset({"file", "image"})
_BLOCK_TAGS = frozenset({"p", "div", "li", "ul", "ol", "dl", "dt", "dd", "blockquote", "tr"})
_HEADING_TAGS = {f"h{i}": i for i in range(1, 7)}
_GONE = "\x00"  # stands for removed markup while rendering; lines holding only this vanish
_MAGIC_RE = re.compile(r"__[A-Z]+__")
_QUOTES_RE = re.compile(r"''+")  # (two or more: a literal first, which sre searches for)
_TABLE_LINE_RE = re.compile(r"\s*(?:\{\||\||!)")
_HTML_RE = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")
_LIST_RE = re.compile(r"^[*#:;]+\s*")
_SPACE_RE = re.compile(r"[ \t\u00a0\u2009\u200b]+")
_SPACE_RUN = "  "
_ODD_SPACES_RE = re.compile("[\t\u00a0\u2009\u200b]")  # with _SPACE_RUN: where _SPACE_RE changes a line
_LIST_MARKS = frozenset("*#:;")
_BLANK_LINES_RE = re.compile(r"\n{3,}")


# ----------------------------------------------------------------------------------------------- wikitext

#: pages longer than this (after tables and templates are cut out) skip the parser and get the fallback cleaner
DEFAULT_MAX_PAGE_CHARS = 1_000_000
#: seconds of parsing per page, after which the fallback cleaner makes the rest of the page
DEFAULT_TIME_BUDGET = 1.0
#: the parser gets runs of whole lines of about this many characters (the time budget is checked between runs)
RUN_CHARS = 8_000
#: a longer run (a single line, or lines inside one link) goes to the fallback cleaner
MAX_RUN_CHARS = 64_000


def _skip_link(prefix: str) -> bool:
    """Links to files, categories and other languages are not prose."""
    return prefix in _FILE_NS or prefix == "category" or bool(
        LANGUAGE_CODE_RE.fullmatch(prefix) and prefix.split("-")[0] in LANGUAGE_CODES)


def _link(node) -> str:
    title = str(node.title).strip()
    visible = title.startswith(":")  # [[:Category:X]] is an inline link, not a categorisation
    title = title.lstrip(":").strip()
    prefix = title.split(":", 1)[0].strip().lower() if ":" in title else ""
    if not visible and _skip_link(prefix):
        return _GONE
    if node.text is not None:
        label = _render(node.text.nodes)
        if label.strip():
            return label
        # pipe trick: [[Namespace:Foo (bar)|]] shows "Foo"
        return html.unescape(re.sub(r"\s*\(.*\)$", "", title.split(":")[-1]).replace(GONE_MARKUP, "").strip())
    shown = _render(node.title.nodes).strip().lstrip(":").strip()  # entities decoded, comments dropped
    return shown[1:] if shown.startswith("#") else shown


def _tag(node) -> str:
    markup = node.wiki_markup
    name = str(node.tag).strip().lower()
    if markup == "{|":
        return "\n\n"  # a table is a block: dropped, and it ends the paragraph
    if name in _DROP_TAGS:
        return _GONE
    if markup in ("*", "#", ";"):
        return ""
    if name in ("br", "hr"):
        return "\n"
    contents = _render(node.contents.nodes) if node.contents is not None else ""
    if name in ("nowiki", "pre"):
        contents = html.unescape(contents)  # MediaWiki decodes entities inside nowiki too
    if name in _HEADING_TAGS:
        level = "=" * _HEADING_TAGS[name]
        title = _SPACE_RE.sub(" ", contents.replace(_GONE, "")).strip()
        return f"\n{level} {title} {level}\n" if title else _GONE
    if node.self_closing and not contents:
        return _GONE  # e.g. <languages/>
    if name in _BLOCK_TAGS:
        return f"\n{contents}\n"
    return contents  # formatting (b, i, u, small, span, center, sup, nowiki, translate, tabs, ...): keep the text


_NODES: list = []  # mwparserfromhell's node classes, imported on first use (not at import time)


def _node_module():
    require_extra("mwparserfromhell", "wiki", "reading wikitext")
    from mwparserfromhell import nodes

    _NODES.append(nodes)
    return nodes


def _render(nodes) -> str:
    n = _NODES[0] if _NODES else _node_module()
    out = []
    for node in nodes:
        if isinstance(node, n.Text):
            value = _MAGIC_RE.sub("", node.value) if "__" in node.value else node.value
            out.append(value.replace(GONE_MARKUP, _GONE))
        elif isinstance(node, n.Wikilink):
            out.append(_link(node))
        elif isinstance(node, n.ExternalLink):
            out.append(_render(node.title.nodes) if node.brackets and node.title else _GONE)
        elif isinstance(node, n.Tag) and node.wiki_markup == ":":
            # indentation at a line start; inside a line it ends a ";" term: "; Fate : text" -> "Fate: text"
            before = "".join(out[-2:]).replace(_GONE, "").rstrip(" ")
            if before and not before.endswith("\n") and out:
                out[-1] = out[-1].rstrip(" ")
                out.append(": ")
        elif isinstance(node, n.Tag):
            out.append(_tag(node))
        elif isinstance(node, n.HTMLEntity):
            out.append(node.normalize())
        elif isinstance(node, n.Heading):
            title = _SPACE_RE.sub(" ", _render(node.title.nodes).replace(_GONE, "").replace("\n", " ")).strip()
            level = "=" * node.level
            out.append(f"{level} {title} {level}" if title else _GONE)
        else:  # Template, Argument, Comment: dropped
            out.append(_GONE)
    return "".join(out)


def _strip_tables(wikitext: str) -> str:
    """Drop line-start ``{| ... |}`` tables (nesting counted) before parsing: they are most of the parse time.

    >>> _strip_tables("a\\n{| x\\n| 1\\n{|\\n|2\\n|}\\n|}\\nb")
    'a\\n\\nb'
    """
    if "{|" not in wikitext:
        return wikitext
    out, depth = [], 0
    for line in wikitext.split("\n"):
        head = line.lstrip()
        if head.startswith("{|"):
            if depth == 0:
                out.append("")  # a table ends the paragraph
            depth += 1
        elif depth and head.startswith("|}"):
            depth -= 1
        elif not depth:
            out.append(line)
    return "\n".join(out)


# Debris of removed markup (marked _GONE while rendering), tidied before the marks go. Each pattern can only start
# where a run of debris starts (the lookbehinds), so that a long run is scanned once, not once per character.
_DEBRIS = r"[\s;,:/\u2013\u2014-]"
_NOT_DEBRIS = rf"[^\s;,:/\u2013\u2014\-(.{_GONE}]"
# "( ; , )" that held only removed markup and separators (pronunciation and language templates), with its space
_EMPTY_PARENS_RE = re.compile(rf"(?<![ \t])[ \t]*\((?:[\s;,:/.\u2013\u2014-]*{_GONE})+[\s;,:/.\u2013\u2014-]*\)")
_PARENS_HEAD_RE = re.compile(rf"\((?:{_DEBRIS}*{_GONE})+{_DEBRIS}*(?=[^\W_])")  # "(<gone>; born" -> "(born"
_PARENS_TAIL_RE = re.compile(rf"(?<={_NOT_DEBRIS})(?:{_DEBRIS}*{_GONE})+{_DEBRIS}*\)")  # "1990; <gone>)" -> "1990)"
_DOUBLE_SEP_RE = re.compile(rf"(?<=[,;])(?:[ \t]*{_GONE})+[ \t]*[,;](?=\s)")  # "A, <gone>, B" -> "A, B"
_SPACE_GONE_RE = re.compile(rf"(?<=[^\s{_GONE}])[ \t]*(?:{_GONE}[ \t]*)+(?=[.,;:!?])")  # "Points <gone>." -> "Points."


def _tidy(line: str) -> str:
    """Remove the empty parentheses, doubled separators and spaces before punctuation that removed markup left.

    >>> _tidy("Paris (\\x00; \\x00) is (\\x00; born 1990\\x00) A, \\x00, B \\x00.").replace("\\x00", "")
    'Paris is (born 1990) A, B.'
    """
    if _GONE not in line:
        return line
    if "(" in line:  # (each pattern only where the characters it needs are)
        line = _PARENS_HEAD_RE.sub("(", _EMPTY_PARENS_RE.sub("", line))
    if ")" in line:
        line = _PARENS_TAIL_RE.sub(")", line)
    if "," in line or ";" in line:
        line = _DOUBLE_SEP_RE.sub("", line)
    return _SPACE_GONE_RE.sub("", line)


def _finish(raw: str) -> str:
    """Lines of rendered text (removed markup marked _GONE) to the final clean text."""
    lines = []
    for line in raw.split("\n"):
        if not line or line.isalnum():
            lines.append(line)
            continue
        if _GONE in line and not line.replace(_GONE, "").strip():
            continue  # the line held only removed markup: drop it with its line break
        if _TABLE_LINE_RE.match(line):
            continue  # rows of a table whose start a template supplied
        # (each substitution only where its markup can be: most lines have none of it)
        line = _tidy(line).replace(_GONE, "")
        if "''" in line:
            line = _QUOTES_RE.sub("", line)
        if "<" in line:
            line = _HTML_RE.sub("", line)  # unbalanced tags stay as text
        if _SPACE_RUN in line or _ODD_SPACES_RE.search(line):
            line = _SPACE_RE.sub(" ", line)
        line = line.strip()
        if line[:1] in _LIST_MARKS:
            line = _LIST_RE.sub("", line)
        lines.append(line)
    text = "\n".join(lines)
    return (_BLANK_LINES_RE.sub("\n\n", text) if "\n\n\n" in text else text).strip()


#: markup in a table's rows that needs the guard before the regular-expression cleaner: comments, dropped tags
_NEEDS_GUARD_RE = re.compile("<!--|<(?:" + "|".join(sorted(_DROP_TAGS)) + r")\b|<(?:nowiki|pre)\b", re.I)


_INVISIBLE_RE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_ROW_PARENS_RE = re.compile(r"\([ \t;,]*\)")
_ROW_END_RE = re.compile(r"(?: |,)\.(?=\s|$)")
_BR_RE = re.compile(r"<br\s*/?\s*>", re.I)


def _finish_rows(raw: str) -> str:
    """:func:`_finish` for the row lines of a table, done on the whole block at once (they are many)."""
    text = _QUOTES_RE.sub("", raw) if "''" in raw else raw
    text = _HTML_RE.sub("", text) if "<" in text else text
    if _GONE in text:  # removed markup in cells (pictures, templates): its parentheses go too
        text = text.replace(_GONE, "")
        text = _ROW_PARENS_RE.sub("", text) if "(" in text else text
    text = _INVISIBLE_RE.sub("", text)
    text = "\n".join(" ".join(line.split()) for line in text.split("\n") if not line.isspace() and line)
    for before, after in ((" ;", ";"), (" ,", ","), (" :", ":"), (",;", ";"), (", ;", ";")):
        if before in text:
            text = text.replace(before, after)
    return _ROW_END_RE.sub(".", text) if " ." in text or ",." in text else text


class CleanPage(NamedTuple):
    """What :func:`clean_page` returns: the clean text, and why the fallback cleaner made some or all of it
    (``"size"`` or ``"time"``; None: the parser made all of it)."""
    text: str
    fallback: Optional[str]


def _parse_render(text: str) -> str:
    mwparserfromhell = require_extra("mwparserfromhell", "wiki", "reading wikitext")

    # skip_style_tags: '' and ''' stay text (removed at the end) instead of being parsed as tags, which breaks
    # templates and links that hold unbalanced quotes (a known mwparserfromhell limitation)
    return _render(mwparserfromhell.parse(text, skip_style_tags=True).nodes)


#: templates that mark a disambiguation page (lookup names, see ``templates.template_name``)
DISAMBIGUATION_TEMPLATES = frozenset({"disambiguation", "disambig", "dab", "disamb", "dis", "hndis", "geodis",
                                      "disambiguation page", "set index article", "surname", "given name"})


_TABLE_MARK = "\ue020"  # (private use) stands for a table's rows, cleaned apart: "<mark>3<mark>" is the fourth
_TABLE_MARK_RE = re.compile(f"{_TABLE_MARK}(\\d+){_TABLE_MARK}")


class PageText(NamedTuple):
    """What :func:`read_page` returns: the clean text, why the fallback cleaner made some of it (see
    :class:`CleanPage`), the page's infobox facts as ``(key, clean value)`` pairs, and whether the page is a
    disambiguation page (a disambiguation template or ``__DISAMBIG__``)."""
    text: str
    fallback: Optional[str]
    facts: tuple
    disambiguation: bool


_MARKUP_CHARS_RE = re.compile(r"[\[\]{}<>&'\n_|=*#:;" + _GONE + GONE_MARKUP + "]")


def _one_line(text: str) -> str:
    """Clean lines as one: line breaks become commas (a line opening with a parenthesis follows a space)."""
    lines = [line.strip(" ,;") for line in text.split("\n") if line.strip(" ,;")]
    return "".join((" " if k and line.startswith("(") else ", " if k else "") + line for k, line in enumerate(lines))


def _clean_value(value: str) -> str:
    """An infobox value's wikitext as one line of text (line breaks become commas)."""
    if not _MARKUP_CHARS_RE.search(value):
        return _SPACE_RE.sub(" ", value).strip(" ,;")
    text = neutralise(value, drop_comments=True)
    return _one_line(_finish(fallback_render(text, _skip_link, _GONE) if len(text) > MAX_RUN_CHARS
                             else _parse_render(text)))


_VALUE_SEP = "\ue021"  # (private use) between infobox values cleaned in one parse


def _clean_values(values: list) -> list:
    """:func:`_clean_value` of each value; the values with markup are parsed together, in one call."""
    out = [None if _MARKUP_CHARS_RE.search(v) else _SPACE_RE.sub(" ", v).strip(" ,;") for v in values]
    marked = [k for k, v in enumerate(out) if v is None]
    if len(marked) > 1:
        joined = f"\n\n{_VALUE_SEP}\n\n".join(values[k].replace(_VALUE_SEP, "") for k in marked)
        text = neutralise(joined, drop_comments=True)
        if len(text) <= MAX_RUN_CHARS:
            chunks = _finish(_parse_render(text)).split(_VALUE_SEP)
            if len(chunks) == len(marked):  # else (a construct across values) one by one below
                for k, chunk in zip(marked, chunks):
                    out[k] = _one_line(chunk)
    return [_clean_value(values[k]) if v is None else v for k, v in enumerate(out)]


def read_page(wikitext: str, title: str = "", max_chars: int = DEFAULT_MAX_PAGE_CHARS,
              time_budget: Optional[float] = DEFAULT_TIME_BUDGET, *, tables: bool = True,
              infoboxes: bool = True, unknown_template=None) -> PageText:
    """A page's clean text (:func:`clean_page`) and its infobox facts.

    Before the guard and the parser: fact-bearing templates are rendered (``templates.render_templates``:
    ``{{convert|6|ft|4|in|m}}`` -> ``6 ft 4 in (1.93 m)``); infobox calls (``infobox.is_infobox``) and
    ``<infobox>`` markup are taken out of the text and, with ``infoboxes``, their fields become ``facts``
    (values cleaned like the page; empty ones, file names, sizes and a ``name`` equal to ``title`` dropped);
    tables become one line per row (``wikitables.tables_to_text``; ``tables=False``: dropped). Other templates
    are removed, or rendered by ``unknown_template(call)`` when given (None from it: removed).
    """
    raw_facts = portable_infobox_fields(wikitext) if infoboxes else []
    disambiguation = "__DISAMBIG__" in wikitext

    def unknown(call: Call, at_top: bool) -> bool:
        nonlocal disambiguation
        if call.name in DISAMBIGUATION_TEMPLATES:
            disambiguation = True
            return True
        if infoboxes and is_infobox(call, at_top):
            raw_facts.extend(infobox_fields(call))
            return True
        return False

    text = render_templates(wikitext.replace("\x00", "").replace(_TABLE_MARK, ""), title, unknown, unknown_template)
    blocks: list = []

    def table_block(rows: str) -> str:  # cleaned now, without the parser, and put back after it
        if "<" in rows:  # a line break inside a cell: a comma, so that the row stays one line
            rows = _BR_RE.sub(", ", rows)
        if ("{{" in rows or "}}" in rows or rows.count("[[") != rows.count("]]") or
                ("<" in rows and _NEEDS_GUARD_RE.search(rows))):  # else nothing for the guard to do
            rows = "".join(neutralise_lines(rows, len(rows) + 1, keep_marks=True))
        blocks.append(drop_empty_cells(_finish_rows(fallback_render(rows, _skip_link, _GONE))))
        return f"{_TABLE_MARK}{len(blocks) - 1}{_TABLE_MARK}"

    text = tables_to_text(text, table_block) if tables else _strip_tables(text)
    clean, fallback = _clean_marked(text, max_chars, time_budget)
    if blocks:
        clean = _TABLE_MARK_RE.sub(lambda m: blocks[int(m.group(1))], clean)
    facts, seen = [], set()
    for (key, _), value in zip(raw_facts, _clean_values([v for _, v in raw_facts])):
        if not keep_value(value) or (key in ("name", "title") and value.casefold() == title.casefold()):
            continue
        if (key, value) not in seen:
            seen.add((key, value))
            facts.append((key, value))
    return PageText(clean, fallback, tuple(facts), disambiguation)


def clean_page(wikitext: str, max_chars: int = DEFAULT_MAX_PAGE_CHARS,
               time_budget: Optional[float] = DEFAULT_TIME_BUDGET) -> CleanPage:
    """:func:`clean_wikitext`, also saying whether the fallback cleaner made some of the text, and why.

    Templates are rendered and tables turned into rows first (:func:`read_page`; infoboxes are dropped here;
    unknown inline templates show their positional arguments, ``templates.all_positional``).
    The guard against hostile pages: NUL characters are removed (they end mwparserfromhell's input), and
    :func:`~pyterrier_fandom_colbert.data.wikiguard.neutralise` removes the templates left and neutralises
    every unclosed construct in linear time, so that the parser has nothing to backtrack over. The rest is parsed
    in runs of whole lines of about :data:`RUN_CHARS` characters. A regular-expression cleaner
    (:func:`~pyterrier_fandom_colbert.data.wikiguard.fallback_render`: linear time, rougher results) makes

    * the whole page when it is longer than ``max_chars`` after neutralising (``fallback="size"``), and any run
      of more than :data:`MAX_RUN_CHARS` that has no line break to cut at (a hostile single line);
    * the rest of the page once the parser has spent ``time_budget`` seconds on it (``fallback="time"``; None: no
      limit; checked between runs, so the first run is always parsed). The output then depends on the machine's
      speed: the budget bounds the damage one hostile page can do, and ordinary pages take a small fraction of it.
    """
    page = read_page(wikitext, "", max_chars, time_budget, infoboxes=False, unknown_template=all_positional)
    return CleanPage(page.text, page.fallback)


def _clean_marked(text: str, max_chars: int, time_budget: Optional[float]) -> CleanPage:
    """The guarded parse of wikitext whose GONE_MARKUP characters are marks of removed markup."""
    if max_chars < 0 or (time_budget is not None and time_budget < 0):
        raise ValueError(f"max_chars and time_budget must be >= 0, got {max_chars}, {time_budget}")
    runs = neutralise_lines(text, RUN_CHARS, keep_marks=True, drop_comments=True)
    if sum(map(len, runs)) > max_chars:
        return CleanPage(_finish(fallback_render("".join(runs), _skip_link, _GONE)), "size")
    if len(runs) == 1 and len(runs[0]) <= MAX_RUN_CHARS:
        return CleanPage(_finish(_parse_render(runs[0])), None)
    start, out, fallback = time.perf_counter(), [], None
    for k, run in enumerate(runs):
        if k and time_budget is not None and time.perf_counter() - start > time_budget:
            out.append(fallback_render("".join(runs[k:]), _skip_link, _GONE))
            fallback = "time"
            break
        if len(run) > MAX_RUN_CHARS:
            out.append(fallback_render(run, _skip_link, _GONE))
            fallback = fallback or "size"
        else:
            out.append(_parse_render(neutralise_piece(run)))
    return CleanPage(_finish("".join(out)), fallback)


def clean_wikitext(wikitext: str, max_chars: int = DEFAULT_MAX_PAGE_CHARS,
                   time_budget: Optional[float] = DEFAULT_TIME_BUDGET) -> str:
    """Plain prose from wikitext, headings kept as ``== Heading ==`` lines, paragraphs split by blank lines.

    Rendered: fact-bearing templates (``{{convert|6|ft|4|in|m}}`` -> ``6 ft 4 in (1.93 m)``, dates, names;
    ``templates.RENDERERS``), other inline templates by their positional arguments (``templates.all_positional``),
    tables as one line per row (``Year: 2012; Title: Emberfall.``, ``wikitables``). Dropped: infoboxes (see
    :func:`read_page` for their facts), block templates and parser functions (navboxes, ``{{#if:}}``),
    file/image links (with captions),
    category and interlanguage links, ``<ref>``, ``<gallery>``, ``<math>`` and similar tags, comments, magic words
    (``__NOTOC__``), bare and numbered external links, and what removed markup leaves behind (parentheses that
    held only removed templates and separators, a space before punctuation). Kept: the text of internal links
    (``[[a|b]]`` -> ``b``, ``[[a]]`` -> ``a``), the label of external links, the inner text of formatting tags
    (``<small>``, ``<span>``, bold, italics, ...). HTML entities are decoded; list markers removed (one item per
    line); a line that held only dropped markup disappears entirely; runs of spaces are collapsed. Unclosed
    markup (``{{a|``, ``[[b``, ``<ref>``, ``<span>``) is dropped and the text after it kept. Time is linear in
    the page's length (:func:`clean_page` describes the guard, ``max_chars`` and ``time_budget``).

    >>> clean_wikitext("{{Infobox|x=1}}\\n'''Ann''' met [[Bob Smith|Bob]].<ref>src</ref>\\n\\n== Later ==\\nShe left.")
    'Ann met Bob.\\n\\n== Later ==\\nShe left.'
    """
    return clean_page(wikitext, max_chars, time_budget).text
