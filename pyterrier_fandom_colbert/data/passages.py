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

A page is kept when it is an article (not a redirect, in ``namespaces``, not a translation subpage ``Title/de``)
with at least ``min_page_words`` words of prose. Passage ids are ``f"{wiki}-{page_id}-{n}"`` (n from 0 in page
order), stable for a given dump and configuration.
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
from .wikidump import (
    DEFAULT_MAX_PAGE_CHARS,
    DEFAULT_TIME_BUDGET,
    SiteInfo,
    WikiPage,
    clean_page,
    iter_pages,
    skip_reason,
)

__all__ = ["PassageConfig", "Passage", "DumpStats", "split_sentences", "section_paragraphs", "text_passages",
           "page_passages", "dump_passages"]

logger = logging.getLogger(__name__)

_HEADING_RE = re.compile(r"^(={1,6}) (.*) \1$")
_END_RE = re.compile(r"[.!?][\"'\u201d\u2019)\]]*$")
_BOUNDARY_RE = re.compile(r"(?<![.!?])[.!?]+[\"'\u201d\u2019)\]]*\s+")  # from a run's start: linear time
_ABBREVIATIONS = frozenset("mr mrs ms dr st jr sr vs etc e.g i.e no nos vol lt col gen sgt capt prof mt ft approx ca "
                           "fig inc ltd co cf al ed pp".split())


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
        object.__setattr__(self, "namespaces", tuple(int(n) for n in self.namespaces))

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


@dataclass
class DumpStats:
    """Counts filled in while a dump is converted. ``guarded``: articles that the fallback cleaner made in part or
    whole, by reason (``size``, ``time``; see ``wikidump.clean_page``), with the first titles in
    ``guarded_titles``."""
    pages: int = 0
    articles: int = 0
    passages: int = 0
    bytes_read: int = 0
    skipped: Counter = field(default_factory=Counter)
    guarded: Counter = field(default_factory=Counter)
    guarded_titles: list = field(default_factory=list)

    #: how many titles ``guarded_titles`` keeps
    MAX_TITLES = 20

    def summary(self) -> str:
        """One line: pages, articles, passages, skipped pages by reason, pages the fallback cleaner made."""
        line = (f"{self.pages:,} pages, {self.articles:,} articles, {self.passages:,} passages; skipped "
                f"{dict(self.skipped)}")
        if self.guarded:
            more = " …" if sum(self.guarded.values()) > len(self.guarded_titles) else ""
            line += (f"; cleaned by the fallback cleaner (page over the size or time limit): {dict(self.guarded)}, "
                     f"e.g. {self.guarded_titles[:5]}{more}")
        return line


def _words(text: str) -> int:
    return len(text.split())


def split_sentences(line: str) -> list[str]:
    """Split one line of prose at sentence ends (``.``, ``!``, ``?`` then a capital or digit), sparing common
    abbreviations and initials.

    >>> split_sentences("Dr. Orrin forged it in 1024. J. K. Smith wrote it down! Was it 3 p.m. when? Yes.")
    ['Dr. Orrin forged it in 1024.', 'J. K. Smith wrote it down!', 'Was it 3 p.m. when?', 'Yes.']
    """
    out, start = [], 0
    for m in _BOUNDARY_RE.finditer(line):
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
        m = _HEADING_RE.match(line)
        if m:
            end_paragraph()
            sections.append((m.group(2).strip(), []))
        elif line.strip():
            current.append(line.strip())
        else:
            end_paragraph()
    end_paragraph()
    return [(h, ps) for h, ps in sections if ps]


def _join_heading(heading: str, text: str) -> str:
    """``"Trivia" + "X."`` -> ``"Trivia. X."``; a heading ending in punctuation keeps it (``"Rewards: X."``)."""
    if not heading:
        return text
    return f"{heading} {text}" if heading[-1] in ".!?:;,-\u2014" else f"{heading}. {text}"


def _cut(sentences: list[str], config: PassageConfig) -> list[list[str]]:
    """Group sentences into ``n`` chunks of near-equal word counts, none over ``max_words``."""
    units: list[str] = []
    for s in sentences:  # a sentence over max_words is cut at word boundaries first
        words = s.split()
        if len(words) > config.max_words:
            k = math.ceil(len(words) / config.target_words)
            step = math.ceil(len(words) / k)
            units.extend(" ".join(words[i:i + step]) for i in range(0, len(words), step))
        else:
            units.append(s)
    counts = [_words(u) for u in units]
    total = sum(counts)
    n = max(1, round(total / config.target_words), math.ceil(total / config.max_words))
    chunks, current, size, done, j = [], [], 0, 0, 1
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


def page_passages(site: SiteInfo, page: WikiPage, config: PassageConfig = PassageConfig(),
                  clean_text: Optional[str] = None) -> list[Passage]:
    """The passages of one article page (no filtering here; see :func:`dump_passages`)."""
    if clean_text is None:
        clean_text = clean_page(page.text, config.max_page_chars, config.page_time_budget).text
    text = clean_text
    url = site.page_url(page.title)
    return [Passage(f"{site.dbname}-{page.page_id}-{n}", body, page.title, site.dbname, url, section,
                    page.page_id, page.revid)
            for n, (section, body) in enumerate(text_passages(text, config))]


def _prose_words(clean_text: str) -> int:
    return sum(_words(line) for line in clean_text.split("\n") if not _HEADING_RE.match(line))


def dump_passages(path, config: PassageConfig = PassageConfig(), stats: Optional[DumpStats] = None,
                  verbose: bool = False) -> Iterator[Passage]:
    """Stream the passages of every article of a MediaWiki export (``.xml``, ``.bz2``, ``.gz`` or ``.7z``).

    ``stats`` (optional) is filled in as pages are read: pages, articles kept, passages, skipped pages by reason
    (``redirect``, ``namespace``, ``translation``, ``stub``), articles the fallback cleaner made (``guarded``:
    pages over ``config.max_page_chars`` or ``config.page_time_budget``) and uncompressed bytes read. At the end,
    guarded pages are reported in a warning (logger ``pyterrier_fandom_colbert.data.passages``).
    """
    stats = stats if stats is not None else DumpStats()
    pages = iter_pages(path)
    iterator = iter(pages)
    if verbose:
        from tqdm.auto import tqdm
        iterator = tqdm(iterator, desc=f"pages of {pages.path.name}", unit="page")
    for site, page in iterator:
        stats.pages += 1
        stats.bytes_read = pages.bytes_read
        reason = skip_reason(page, config.namespaces, config.skip_translations)
        clean, fallback = "", None
        if reason is None:
            clean, fallback = clean_page(page.text, config.max_page_chars, config.page_time_budget)
            if _prose_words(clean) < max(config.min_page_words, 1):
                reason = "stub"
        if reason is not None:
            stats.skipped[reason] += 1
            continue
        stats.articles += 1
        if fallback is not None:
            stats.guarded[fallback] += 1
            if len(stats.guarded_titles) < stats.MAX_TITLES:
                stats.guarded_titles.append(page.title)
        for passage in page_passages(site, page, config, clean):
            stats.passages += 1
            yield passage
    stats.bytes_read = pages.bytes_read
    if stats.guarded:
        logger.warning("%s: %s", pages.path.name, stats.summary())
