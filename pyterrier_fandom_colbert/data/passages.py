"""From cleaned wiki pages to passages of about 120 words (docs/method.md §7.1).

Rules, applied per page to the text :func:`~pyterrier_fandom_colbert.data.wikidump.clean_wikitext` returns:

1. **Sections.** ``== Heading ==`` lines (any level) open a section; the text before the first heading is the lead
   (section ``""``). A passage's ``section`` field is the heading it sits under (the innermost one).
2. **Paragraphs** are blocks of lines separated by blank lines; each line (a sentence run or a list item) ends a
   sentence.
3. **Short heading lines.** A one-line paragraph of at most ``heading_max_words`` words that does not end with
   ``.``, ``!`` or ``?`` (e.g. ``Rewards:`` or a bold pseudo-heading) is prefixed to the next paragraph of its
   section: ``"Rewards: Ten coins are given ..."`` / ``"Release history. The game ..."``.
4. **Cutting.** A paragraph of W words becomes ``n = max(round(W / target_words), ceil(W / max_words), 1)``
   passages cut at sentence boundaries near the ideal equal split, never over ``max_words`` (a longer single
   sentence is cut at word boundaries).
5. **Merging.** A passage under ``min_words`` words is appended to the previous passage of its section, else
   prepended to the next one of its section, else (across sections) appended to the previous or prepended to the
   next passage of the page, whichever first keeps the result within ``max_words``; otherwise it stays alone.
6. **Heading prefix.** With ``heading_prefix`` every passage starts with its section heading: ``"Trivia. <text>"``;
   a part merged in from another section carries its own heading inside the text. Word limits count every word
   but the passage's leading heading.

7. **Boilerplate sections** (``skip_sections``: References, External links, See also, Gallery, ...) are left out,
   with their subsections.
8. **Facts passage.** With ``infobox_passage``, a page's infobox fields (``wikidump.read_page``) make one passage
   before the others, ``"Title — born: 19 BBY; species: Human"`` (section ``""``), cut at fields into
   several passages only when longer than ``max_words``. With ``facts_in_lead`` (the default), a facts passage
   that fits in ``max_words`` together with the page's lead passage (the first passage, when it sits before any
   heading) opens that passage instead, ended by a full stop: ``"Title — born: 19 BBY; species: Human. Luke is
   a ..."``; a page's facts and its introduction are read together, and names shared by both do not make a
   second passage that matches a question without answering it.

9. **Size limits.** The reader cuts a page's wikitext to ``max_page_bytes`` as the dump streams past, and every
   passage is cut to ``max_passage_chars`` characters (at a space near the end); both are counted in
   :class:`DumpStats` with the first titles (defaults far above real pages: docs/results.md).

A page is kept when it is an article (not a redirect, in ``namespaces``, not a translation subpage ``Title/de``,
not a disambiguation page) with at least ``min_page_words`` words of prose and facts. Passage ids are
``f"{wiki}-{page_id}-{n}"`` (n from 0 in page order), stable for a given dump, configuration and
:data:`READER_VERSION`.
"""
# no `from __future__ import annotations`: PyTerrier reads the doc class field types (str) at run time

import json
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple, Optional

from ..storage import JsonConfig
from .dumpbytes import DEFAULT_MAX_PAGE_BYTES
from .infobox import facts_text
from .templates import all_positional, first_positional
from .wikidump import (
    DEFAULT_MAX_PAGE_CHARS,
    DEFAULT_TIME_BUDGET,
    SiteInfo,
    WikiPage,
    iter_pages,
    read_page,
    skip_reason,
)

__all__ = [
    "DEFAULT_MAX_PASSAGE_CHARS",
    "DEFAULT_SKIP_SECTIONS",
    "READER_VERSION",
    "DumpStats",
    "EmptyDumpError",
    "Passage",
    "PassageConfig",
    "drop_sections",
    "dump_passages",
    "facts_passages",
    "page_passages",
    "read_article",
    "section_paragraphs",
    "split_sentences",
    "text_passages",
]

#: version of what the dump reader makes of a page (cleaning, templates, tables, infoboxes, sections, splitting).
#: Recorded with every dump-built corpus and search folder; raised whenever the same dump would give different
#: passages, so that older builds are known to need rebuilding. 1: until templates, tables and infoboxes were
#: read (no version recorded); 2: they are; 3: templates used as table or list rows are rows, infobox values that
#: list pictures with names keep the names; 4: a facts passage that fits opens the page's lead passage.
READER_VERSION = 4
#: sections left out by default (compared case-insensitively): references, links and galleries, not content
DEFAULT_SKIP_SECTIONS = ("references", "notes", "notes and references", "footnotes", "citations", "works cited",
                         "sources", "bibliography", "further reading", "external links", "external link", "links",
                         "see also", "related pages", "gallery", "images", "image gallery", "screenshots", "videos",
                         "navigation", "site navigation")

#: a passage is cut to this many characters: three times the longest of the real wiki measured (1,267, at most
#: 150 words; docs/results.md), far beyond what the encoder reads (its document length in tokens), so that a page
#: of one endless "word" (``[[...]]`` without spaces) does not make one passage of hundreds of kilobytes
DEFAULT_MAX_PASSAGE_CHARS = 4_000

logger = logging.getLogger(__name__)

_HEADING_RE = re.compile(r"^(={1,6}) (.*) \1$")
_END_RE = re.compile(r"[.!?][\"'\u201d\u2019)\]]*$")
# from a run's start (linear time): the lookbehind after the first mark, so that sre searches for the marks only
_BOUNDARY_RE = re.compile(r"[.!?](?<![.!?][.!?])[.!?]*[\"'\u201d\u2019)\]]*\s+")
_ABBREVIATIONS = frozenset({
    "al", "approx", "ca", "capt", "cf", "co", "col", "dr", "e.g", "ed", "etc", "fig", "ft", "gen", "i.e", "inc", "jr",
    "lt", "ltd", "mr", "mrs", "ms", "mt", "no", "nos", "pp", "prof", "sgt", "sr", "st", "vol", "vs",
})


_UNKNOWN_RULES = {"positional": all_positional, "first": first_positional, "drop": None}


@dataclass(frozen=True)
class PassageConfig(JsonConfig):
    """How a dump becomes passages; saved as JSON beside every derived corpus."""
    target_words: int = 120
    max_words: int = 150
    min_words: int = 20
    heading_prefix: bool = True
    heading_max_words: int = 10
    min_page_words: int = 20
    namespaces: tuple = (0,)
    skip_translations: bool = True
    max_page_chars: int = DEFAULT_MAX_PAGE_CHARS  # longer pages: fallback cleaner (wikidump.clean_page)
    page_time_budget: Optional[float] = DEFAULT_TIME_BUDGET  # parser seconds per page, then fallback; None: no limit
    infobox_passage: bool = True  # a page's infobox fields make one facts passage (False: dropped)
    facts_in_lead: bool = True  # the facts open the lead passage when both fit in max_words (False: own passage)
    tables: bool = True  # table rows as "header: cell; header: cell." lines (False: tables dropped)
    skip_sections: tuple = DEFAULT_SKIP_SECTIONS  # headings whose sections (with subsections) are left out
    max_page_bytes: Optional[int] = DEFAULT_MAX_PAGE_BYTES  # a page's wikitext is cut to this (None: no limit)
    max_passage_chars: Optional[int] = DEFAULT_MAX_PASSAGE_CHARS  # a passage is cut to this (None: no limit)
    #: templates no renderer knows: "positional" (an inline call shows its positional arguments), "first" (its
    #: first one) or "drop" (docs/experiments/data.md measures the three)
    unknown_templates: str = "positional"

    def __post_init__(self):
        if not 0 < self.min_words <= self.target_words <= self.max_words:
            raise ValueError(f"need 0 < min_words <= target_words <= max_words, got min_words={self.min_words}, "
                             f"target_words={self.target_words}, max_words={self.max_words}")
        if self.heading_max_words < 0 or self.min_page_words < 0:
            raise ValueError(f"heading_max_words and min_page_words must be >= 0, got {self.heading_max_words}, "
                             f"{self.min_page_words}")
        if self.max_page_chars < 0 or (self.page_time_budget is not None and self.page_time_budget <= 0):
            raise ValueError(f"need max_page_chars >= 0 and page_time_budget > 0 (or None), got "
                             f"{self.max_page_chars}, {self.page_time_budget}")
        for name in ("max_page_bytes", "max_passage_chars"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive number (or None: no limit), got {value!r}")
        object.__setattr__(self, "namespaces", tuple(int(n) for n in self.namespaces))
        if self.unknown_templates not in _UNKNOWN_RULES:
            raise ValueError(f"unknown_templates must be one of {sorted(_UNKNOWN_RULES)}, got "
                             f"{self.unknown_templates!r}")
        if isinstance(self.skip_sections, str):
            raise ValueError(f"skip_sections must be a sequence of headings, got the string {self.skip_sections!r}")
        object.__setattr__(self, "skip_sections", tuple(str(h).strip().casefold() for h in self.skip_sections))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "PassageConfig":
        return cls.from_dict(json.loads(text))


class Passage(NamedTuple):
    """A passage; also the ir_datasets document class of the ``fandom-qa/<wiki>`` corpora (``doc_id`` = docno)."""
    doc_id: str
    text: str
    title: str
    wiki: str
    url: str
    section: str
    page_id: int
    revid: int

    def default_text(self) -> str:
        return self.text


class EmptyDumpError(ValueError):
    """A dump with nothing to index: no page gave a passage. The message counts the skipped pages by reason."""


@dataclass
class DumpStats:
    """Counts filled in while a dump is converted. ``skipped``: pages left out, by reason (``redirect``,
    ``namespace``, ``translation``, ``disambiguation``, ``empty``: no text at all, ``stub``: under
    ``min_page_words``). ``guarded``: articles that the fallback cleaner made in part or whole, by reason
    (``size``, ``time``; see ``wikidump.clean_page``), with the first titles in ``guarded_titles``.
    ``facts_passages``: passages made of infobox fields (``facts_in_lead`` of them open the page's lead passage,
    ``PassageConfig.facts_in_lead``); ``facts``: the fields. ``cut_pages``: pages whose wikitext the reader cut
    to ``max_page_bytes``, ``cut_passages``: passages cut to ``max_passage_chars``, the first of each in
    ``cut_titles`` as ``(title, size before the cut, "page bytes" or "passage chars")``."""
    pages: int = 0
    articles: int = 0
    passages: int = 0
    bytes_read: int = 0
    facts_passages: int = 0
    facts_in_lead: int = 0
    facts: int = 0
    min_page_words: int = 0
    skipped: Counter = field(default_factory=Counter)
    guarded: Counter = field(default_factory=Counter)
    guarded_titles: list = field(default_factory=list)
    cut_pages: int = 0
    cut_passages: int = 0
    cut_titles: list = field(default_factory=list)

    #: how many titles ``guarded_titles`` and ``cut_titles`` keep
    MAX_TITLES = 20

    def note_cut(self, title: str, size: int, unit: str) -> None:
        """Count a page (``unit`` ``"page bytes"``) or a passage (``"passage chars"``) cut to its limit."""
        if unit == "page bytes":
            self.cut_pages += 1
        else:
            self.cut_passages += 1
        if len(self.cut_titles) < self.MAX_TITLES:
            self.cut_titles.append((title, size, unit))

    def cut_summary(self) -> str:
        """What the size limits cut, for people ("" when nothing)."""
        if not (self.cut_pages or self.cut_passages):
            return ""
        shown = ", ".join(f"{title!r} ({size:,} {unit})" for title, size, unit in self.cut_titles[:5])
        more = " …" if self.cut_pages + self.cut_passages > 5 else ""
        return (f"cut to the size limits (PassageConfig max_page_bytes, max_passage_chars): {self.cut_pages:,} "
                f"pages, {self.cut_passages:,} passages, e.g. {shown}{more}")

    def summary(self) -> str:
        """One line: pages, articles, passages, skipped pages by reason, pages the fallback cleaner made."""
        line = (f"{self.pages:,} pages, {self.articles:,} articles, {self.passages:,} passages; skipped "
                f"{dict(self.skipped)}")
        if self.guarded:
            more = " …" if sum(self.guarded.values()) > len(self.guarded_titles) else ""
            line += (f"; cleaned by the fallback cleaner (page over the size or time limit): {dict(self.guarded)}, "
                     f"e.g. {self.guarded_titles[:5]}{more}")
        if self.cut_summary():
            line += f"; {self.cut_summary()}"
        return line

    def empty_error(self, path) -> EmptyDumpError:
        """The error for a dump that gave no passage, with the counts and the option that lowers the limit."""
        skipped = ", ".join(f"{n:,} {why}" for why, n in sorted(self.skipped.items())) or "none"
        return EmptyDumpError(
            f"{path}: nothing to index: {self.pages:,} pages read, no article passages (skipped: {skipped}). "
            f"Pages with fewer than {self.min_page_words} words of text are stubs; lower the limit with "
            f"`pfc index --min-words N` (PassageConfig(min_page_words=N)); other namespaces are read with "
            f"PassageConfig(namespaces=...)")


def _words(text: str) -> int:
    return len(text.split())


def split_sentences(line: str) -> list[str]:
    """Split one line of prose at sentence ends (``.``, ``!``, ``?`` then a capital or digit), sparing common
    abbreviations and initials.

    >>> split_sentences("Dr. Orrin forged it in 1024. J. K. Smith wrote it down! Was it 3 p.m. when? Yes.")
    ['Dr. Orrin forged it in 1024.', 'J. K. Smith wrote it down!', 'Was it 3 p.m. when?', 'Yes.']
    """
    first = _BOUNDARY_RE.search(line)
    if first is None:  # (one sentence: most lines of tables and lists)
        line = line.strip()
        return [line] if line else []
    out, start = [], 0
    for m in _BOUNDARY_RE.finditer(line, first.start()):
        nxt = line[m.end():m.end() + 2].lstrip("\"'\u201c\u2018([")
        if not nxt or not (nxt[0].isupper() or nxt[0].isdigit()):
            continue
        before = line[max(start, m.start() - 64):m.start()].rsplit(None, 1)  # the last word (bounded: linear time)
        last = before[-1] if before else ""
        if line[m.start()] == "." and (last.lower().rstrip(".") in _ABBREVIATIONS or
                                       (len(last) == 1 and last.isupper())):
            continue
        out.append(line[start:m.end()].strip())
        start = m.end()
    if line[start:].strip():
        out.append(line[start:].strip())
    return out


def section_paragraphs(clean_text: str) -> list[tuple[str, list[list[str]]]]:
    """``[(heading, paragraphs)]`` where a paragraph is its list of lines; the lead has heading ``""``.

    >>> section_paragraphs("Lead line.\\n\\n== Story ==\\nOne.\\nTwo.\\n\\nThree.")
    [('', [['Lead line.']]), ('Story', [['One.', 'Two.'], ['Three.']])]
    """
    sections: list[tuple[str, list[list[str]]]] = [("", [])]
    current: list[str] = []

    def end_paragraph():
        if current:
            sections[-1][1].append(list(current))
            current.clear()

    for line in clean_text.split("\n"):
        m = _HEADING_RE.match(line) if line[:1] == "=" else None  # (a heading line starts with "=")
        if m:
            end_paragraph()
            sections.append((m.group(2).strip(), []))
        elif line.strip():
            current.append(line.strip())
        else:
            end_paragraph()
    end_paragraph()
    return [(h, ps) for h, ps in sections if ps]


def drop_sections(clean_text: str, headings) -> str:
    """Clean text without the sections whose heading is in ``headings`` (casefolded), subsections included.

    >>> drop_sections("A.\\n== See also ==\\nB.\\n=== More ===\\nC.\\n== Story ==\\nD.", {"see also"})
    'A.\\n== Story ==\\nD.'
    """
    if not headings:
        return clean_text
    out, skipping = [], 0  # skipping: the level of the dropped heading, 0 when keeping
    for line in clean_text.split("\n"):
        m = _HEADING_RE.match(line) if line[:1] == "=" else None  # (a heading line starts with "=")
        if m:
            level = len(m.group(1))
            if skipping and level > skipping:
                continue
            skipping = level if m.group(2).strip().casefold() in headings else 0
        if not skipping:
            out.append(line)
    return "\n".join(out)


def _join_heading(heading: str, text: str) -> str:
    """``"Trivia" + "X."`` -> ``"Trivia. X."``; a heading ending in punctuation keeps it (``"Rewards: X."``)."""
    if not heading:
        return text
    return f"{heading} {text}" if heading[-1] in ".!?:;,-\u2014" else f"{heading}. {text}"


def _cut(sentences: list[str], config: PassageConfig) -> list[list[str]]:
    """Group sentences into ``n`` chunks of near-equal word counts, none over ``max_words``."""
    units: list[str] = []
    counts: list[int] = []  # words of each unit (split once)
    for s in sentences:  # a sentence over max_words is cut at word boundaries first
        words = s.split()
        if len(words) > config.max_words:
            k = math.ceil(len(words) / config.target_words)
            step = math.ceil(len(words) / k)
            for i in range(0, len(words), step):
                units.append(" ".join(words[i:i + step]))
                counts.append(len(words[i:i + step]))
        else:
            units.append(s)
            counts.append(len(words))
    total = sum(counts)
    n = max(1, round(total / config.target_words), math.ceil(total / config.max_words))
    chunks: list[list[str]] = []
    current: list[str] = []
    size, done, j = 0, 0, 1
    for unit, w in zip(units, counts):
        ideal = j * total / n
        if current and (size + w > config.max_words or (j < n and abs(done + w - ideal) > abs(done - ideal))):
            chunks.append(current)
            current, size, j = [], 0, j + 1
        current.append(unit)
        size += w
        done += w
    chunks.append(current)
    return chunks


def _render(parts: list[tuple[str, str]], config: PassageConfig) -> str:
    """A passage's text from its ``(section, body)`` parts: each section's heading before its first part."""
    pieces, previous = [], None
    for section, body in parts:
        pieces.append(_join_heading(section, body) if config.heading_prefix and section != previous else body)
        previous = section
    return " ".join(pieces)


def _size(parts: list[tuple[str, str]], config: PassageConfig) -> int:
    """Words of the rendered passage, not counting its leading heading."""
    return _words(_render(parts, config)) - (_words(parts[0][0]) if config.heading_prefix else 0)


def _merge(items: list[list], config: PassageConfig) -> list[list]:
    """Apply the short-fragment rule to passages given as lists of ``(section, body)`` parts, in place."""
    i = 0
    while i < len(items):
        parts = items[i]
        if len(items) == 1 or _size(parts, config) >= config.min_words:
            i += 1
            continue
        merged = {}  # neighbour index -> (merged parts, is the neighbour's adjoining part in the same section)
        if i > 0:
            merged[i - 1] = (items[i - 1] + parts, items[i - 1][-1][0] == parts[0][0])
        if i + 1 < len(items):
            merged[i + 1] = (parts + items[i + 1], items[i + 1][0][0] == parts[-1][0])
        fits = [k for k, (m, _) in merged.items() if _size(m, config) <= config.max_words]
        target = next((k for k in fits if merged[k][1]), fits[0] if fits else None)
        if target is None:
            i += 1
            continue
        items[target] = merged[target][0]
        del items[i]
        i = min(i, target)  # look at the grown passage again
    return items


def text_passages(clean_text: str, config: PassageConfig = PassageConfig()) -> list[tuple[str, str]]:
    """``[(section, passage text)]`` for one page's cleaned text (rules in the module docstring)."""
    items: list[list] = []
    for heading, paragraphs in section_paragraphs(clean_text):
        pending: list[str] = []  # short heading lines waiting for the paragraph below them
        for k, lines in enumerate(paragraphs):
            text = " ".join(lines)
            if (len(lines) == 1 and k + 1 < len(paragraphs) and _words(text) <= config.heading_max_words
                    and not _END_RE.search(text)):
                pending.append(text)  # joined once used: joining as they come is quadratic in their number
                continue
            sentences = [s for line in lines for s in split_sentences(line)]
            if pending:
                sentences[0] = _join_heading("".join(_join_heading(h, "") for h in pending[:-1]) + pending[-1],
                                             sentences[0])
                pending = []
            items.extend([[(heading, " ".join(chunk))] for chunk in _cut(sentences, config)])
    return [(parts[0][0], _render(parts, config)) for parts in _merge(items, config)]


def facts_passages(title: str, facts, config: PassageConfig = PassageConfig()) -> list[str]:
    """The facts passage of a page (``"Title — key: value; ..."``), cut between fields into several only when
    longer than ``max_words`` (a single field over it stays whole)."""
    out: list[list] = [[]]
    size = 0
    for key, value in facts:
        words = _words(key) + _words(value)
        if out[-1] and size + words > config.max_words:
            out.append([])
            size = 0
        out[-1].append((key, value))
        size += words
    return [facts_text(title, part) for part in out if part]


def _with_facts(facts: list[str], text: list[tuple[str, str]], config: PassageConfig) -> list[tuple[str, str]]:
    """A page's ``(section, text)`` passages from its facts passages and its text's: the facts first, or, with
    ``config.facts_in_lead``, one facts passage that fits in ``max_words`` with the lead passage opening it.

    >>> _with_facts(["Kael — born: 19 BBY"], [("", "Kael is a knight."), ("Story", "Story. He left.")],
    ...             PassageConfig())
    [('', 'Kael — born: 19 BBY. Kael is a knight.'), ('Story', 'Story. He left.')]
    """
    if (config.facts_in_lead and len(facts) == 1 and text and text[0][0] == ""
            and _words(facts[0]) + _words(text[0][1]) <= config.max_words):
        return [("", _join_heading(facts[0], text[0][1])), *text[1:]]
    return [("", body) for body in facts] + text


def _read(page: WikiPage, config: PassageConfig):
    """(clean text without skipped sections, facts, fallback reason, disambiguation) of a page."""
    text = read_page(page.text, page.title, config.max_page_chars, config.page_time_budget, tables=config.tables,
                     infoboxes=config.infobox_passage, unknown_template=_UNKNOWN_RULES[config.unknown_templates])
    return drop_sections(text.text, set(config.skip_sections)), text.facts, text.fallback, text.disambiguation


def _cap(text: str, limit: Optional[int]) -> str:
    """``text`` cut to at most ``limit`` characters, at the last space of its last quarter when there is one.

    >>> _cap("one two three", 9), _cap("onetwothree", 5), _cap("short", None)
    ('one two', 'onetw', 'short')
    """
    if limit is None or len(text) <= limit:
        return text
    space = text.rfind(" ", limit * 3 // 4, limit + 1)
    return text[:space if space > 0 else limit].rstrip()


def page_passages(site: SiteInfo, page: WikiPage, config: PassageConfig = PassageConfig(),
                  clean_text: Optional[str] = None, facts=None,
                  stats: Optional[DumpStats] = None) -> list[Passage]:
    """The passages of one article page (no filtering here; see :func:`dump_passages`): its facts passage (with
    ``config.infobox_passage``), then its text's, each cut to ``config.max_passage_chars`` (counted in
    ``stats``). ``clean_text``/``facts``: the page already read."""
    if clean_text is None:
        clean_text, facts, _, _ = _read(page, config)
    parts = _with_facts(facts_passages(page.title, facts or (), config) if config.infobox_passage else [],
                        text_passages(clean_text, config), config)
    limit = config.max_passage_chars
    if limit is not None and any(len(body) > limit for _, body in parts):
        for _, body in parts:
            if len(body) > limit and stats is not None:
                stats.note_cut(page.title, len(body), "passage chars")
        parts = [(section, _cap(body, limit)) for section, body in parts]
    url = site.page_url(page.title)
    return [Passage(f"{site.dbname}-{page.page_id}-{n}", body, page.title, site.dbname, url, section,
                    page.page_id, page.revid)
            for n, (section, body) in enumerate(parts)]


def _prose_words(clean_text: str) -> int:
    return sum(_words(line) for line in clean_text.split("\n") if not (line[:1] == "=" and _HEADING_RE.match(line)))


def read_article(site: SiteInfo, page: WikiPage, config: PassageConfig = PassageConfig(),
                 stats: Optional[DumpStats] = None) -> tuple[Optional[str], list[Passage]]:
    """One page of :func:`dump_passages`: (why it is left out, or None for an article; its passages, none when left
    out). ``stats``: its ``articles``, ``skipped``, ``guarded`` and facts counts are updated (not ``pages``,
    ``passages`` or ``bytes_read``, which the caller counts). A page's passages depend on the page, its site and
    ``config`` only, never on the other pages of the dump."""
    stats = stats if stats is not None else DumpStats()
    if page.cut_from:
        stats.note_cut(page.title, page.cut_from, "page bytes")
    reason = skip_reason(page, config.namespaces, config.skip_translations)
    clean, facts, fallback = "", (), None
    if reason is None:
        clean, facts, fallback, disambiguation = _read(page, config)
        words = _prose_words(clean) + sum(_words(k) + _words(v) for k, v in facts)
        reason = ("disambiguation" if disambiguation else "empty" if words == 0 else
                  "stub" if words < config.min_page_words else None)
    if reason is not None:
        stats.skipped[reason] += 1
        return reason, []
    stats.articles += 1
    if fallback is not None:
        stats.guarded[fallback] += 1
        if len(stats.guarded_titles) < stats.MAX_TITLES:
            stats.guarded_titles.append(page.title)
    passages = page_passages(site, page, config, clean, facts, stats)
    if config.infobox_passage and facts:
        made = facts_passages(page.title, facts, config)
        stats.facts += len(facts)
        stats.facts_passages += len(made)
        stats.facts_in_lead += len(made) == 1 and passages[0].text != made[0]
    return None, passages


def dump_passages(path, config: PassageConfig = PassageConfig(), stats: Optional[DumpStats] = None,
                  verbose: bool = False) -> Iterator[Passage]:
    """Stream the passages of every article of a MediaWiki export (``.xml``, ``.bz2``, ``.gz`` or ``.7z``).

    ``stats`` (optional) is filled in as pages are read: pages, articles kept, passages, skipped pages by reason
    (``redirect``, ``namespace``, ``translation``, ``disambiguation``, ``empty``, ``stub``: fewer than
    ``config.min_page_words`` words of text and facts), articles the fallback cleaner made (``guarded``:
    pages over ``config.max_page_chars`` or ``config.page_time_budget``) and uncompressed bytes read. At the end,
    guarded pages are reported in a warning (logger ``pyterrier_fandom_colbert.data.passages``).
    """
    stats = stats if stats is not None else DumpStats()
    stats.min_page_words = config.min_page_words
    pages = iter_pages(path, config.max_page_bytes)
    iterator = iter(pages)
    if verbose:
        from tqdm.auto import tqdm
        iterator = tqdm(iterator, desc=f"pages of {pages.path.name}", unit="page")
    for site, page in iterator:
        stats.pages += 1
        stats.bytes_read = pages.bytes_read
        for passage in read_article(site, page, config, stats)[1]:
            stats.passages += 1
            yield passage
    stats.bytes_read = pages.bytes_read
    if stats.guarded or stats.cut_pages or stats.cut_passages:
        logger.warning("%s: %s", pages.path.name, stats.summary())
