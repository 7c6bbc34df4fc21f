"""MediaWiki XML exports: :func:`iter_pages` streams ``(SiteInfo, WikiPage)`` records out of an export (schema
0.10/0.11; ``.xml``, ``.bz2``, ``.gz`` or ``.7z``, decompressed by ``dumpbytes``), and :func:`skip_reason` says
which pages are not articles. ``wikidump`` cleans their wikitext (and re-exports these names).
"""
from __future__ import annotations

import re
import urllib.parse
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Generator, Iterator, Optional, cast

from .dumpbytes import DEFAULT_MAX_PAGE_BYTES, DumpError, TextCap, _Counter, check_dump_file, xml_chunks

__all__ = ["SiteInfo", "WikiPage", "is_translation", "iter_pages", "read_siteinfo", "skip_reason"]

# ISO 639-1 codes (plus a few 3-letter codes MediaWiki uses): "Title/de" translation subpages, "[[de:Titel]]" links
LANGUAGE_CODES = frozenset({
    "aa", "ab", "ae", "af", "ak", "am", "an", "ar", "as", "ast", "av", "ay", "az", "ba", "bcc", "be", "bg", "bh",
    "bi", "bm", "bn", "bo", "br", "bs", "ca", "ce", "ch", "ckb", "co", "cr", "cs", "cu", "cv", "cy", "da", "de",
    "dsb", "dv", "dz", "ee", "el", "en", "eo", "es", "et", "eu", "fa", "ff", "fi", "fj", "fo", "fr", "fy", "ga", "gd",
    "gl", "gn", "gu", "gv", "ha", "he", "hi", "ho", "hr", "hsb", "ht", "hu", "hy", "hz", "ia", "id", "ie", "ig", "ii",
    "ik", "io", "is", "it", "iu", "ja", "jv", "ka", "kg", "ki", "kj", "kk", "kl", "km", "kn", "ko", "kr", "ks", "ksh",
    "ku", "kv", "kw", "ky", "la", "lb", "lg", "li", "ln", "lo", "lt", "lu", "lv", "lzh", "mg", "mh", "mi", "mk", "ml",
    "mn", "mr", "ms", "mt", "my", "na", "nan", "nb", "nd", "nds", "ne", "ng", "nl", "nn", "no", "nr", "nv", "ny",
    "oc", "oj", "om", "or", "os", "pa", "pi", "pl", "ps", "pt", "qu", "rm", "rn", "ro", "ru", "rw", "sa", "sc", "sco",
    "sd", "se", "sg", "si", "sk", "sl", "sm", "sn", "so", "sq", "sr", "ss", "st", "su", "sv", "sw", "ta", "te", "tg",
    "th", "ti", "tk", "tl", "tn", "to", "tr", "ts", "tt", "tw", "ty", "ug", "uk", "ur", "uz", "ve", "vi", "vo", "wa",
    "wo", "xh", "yi", "yo", "yue", "za", "zh", "zu",
})
LANGUAGE_CODE_RE = re.compile(r"([a-z]{2,3})(?:-[a-z0-9]{2,8})*")


@dataclass(frozen=True)
class SiteInfo:
    """The ``<siteinfo>`` block: database name (``starwars``) and the URL prefix of its articles."""
    dbname: str
    sitename: str
    base_url: str  # e.g. https://starwars.fandom.com/wiki/

    def page_url(self, title: str) -> str:
        return self.base_url + urllib.parse.quote(title.replace(" ", "_"), safe=";@$!*(),/~:")


@dataclass(frozen=True)
class WikiPage:
    """One ``<page>`` with its current revision."""
    title: str
    ns: int
    page_id: int
    revid: int
    text: str
    redirect: bool
    #: the size in bytes of the page's wikitext in the export when the reader cut it to its limit (0: not cut)
    cut_from: int = 0


def _base_url(base: str) -> str:
    """Article URL prefix from the ``<base>`` (main page) URL.

    >>> _base_url("https://starwars.fandom.com/wiki/Main_Page")
    'https://starwars.fandom.com/wiki/'
    >>> _base_url("https://example.org/index.php/Home")
    'https://example.org/index.php/'
    """
    i = base.find("/wiki/")
    return base[: i + len("/wiki/")] if i >= 0 else base.rsplit("/", 1)[0] + "/"


# ----------------------------------------------------------------------------------------------- XML pages

def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _child_text(elem, name: str) -> Optional[str]:
    for child in elem:
        tag = child.tag
        if tag.endswith(name) and (len(tag) == len(name) or tag[-len(name) - 1] == "}"):  # (_local(tag) == name)
            return child.text or ""
    return None


#: set by the reader on a ``<text>`` element that :class:`~.dumpbytes.TextCap` cut: its size before the cut
_CUT_FROM = "{urn:pyterrier-fandom-colbert}cut-from"


def _page(elem) -> WikiPage:
    names = [_local(c.tag) for c in elem]
    rev = elem[names.index("revision")] if "revision" in names else None
    redirect = "redirect" in names
    text = (_child_text(rev, "text") if rev is not None else None) or ""
    revid = int(_child_text(rev, "id") or 0) if rev is not None else 0
    cut = next((int(c.get(_CUT_FROM, 0)) for c in rev if _local(c.tag) == "text"), 0) if rev is not None else 0
    return WikiPage(title=_child_text(elem, "title") or "", ns=int(_child_text(elem, "ns") or 0),
                    page_id=int(cast(str, _child_text(elem, "id"))), revid=revid, text=text,
                    redirect=redirect or text.lstrip()[:9].upper() == "#REDIRECT", cut_from=cut)


_PAGE_TAIL = frozenset({"page", "info"})  # the last letters of <page> and <siteinfo>


class _Pages:
    """Iterator over ``(SiteInfo, WikiPage)``; ``bytes_read`` counts uncompressed XML consumed so far."""

    def __init__(self, path, max_page_bytes: Optional[int] = DEFAULT_MAX_PAGE_BYTES):
        self.path = Path(path)
        self.max_page_bytes = max_page_bytes
        self._counter = _Counter()

    @property
    def bytes_read(self) -> int:
        return self._counter.bytes

    def __iter__(self) -> Iterator[tuple[SiteInfo, WikiPage]]:
        check_dump_file(self.path)
        site, root = None, None
        for event, elem in self._events():
            if root is None:
                root = elem
                if _local(elem.tag) != "mediawiki":
                    raise DumpError(self.path, f"root element is <{_local(elem.tag)}>, not <mediawiki>")
            if event != "end" or elem.tag[-4:] not in _PAGE_TAIL:  # (most elements: not a page, not siteinfo)
                continue
            name = _local(elem.tag)
            if name == "siteinfo":
                site = self._site(elem)
                root.clear()
            elif name == "page":
                if site is None:
                    raise DumpError(self.path, "<page> before <siteinfo>", offset=self.bytes_read)
                try:
                    page = _page(elem)
                except (TypeError, ValueError) as err:
                    raise DumpError(self.path, f"bad <page> record ({err})", offset=self.bytes_read) from err
                root.clear()  # forget the pages already handed out
                yield site, page

    def _site(self, elem) -> SiteInfo:
        dbname = _child_text(elem, "dbname") or self.path.name.split("_pages")[0]
        return SiteInfo(dbname=dbname, sitename=_child_text(elem, "sitename") or dbname,
                        base_url=_base_url(_child_text(elem, "base") or ""))

    def siteinfo(self) -> Optional[SiteInfo]:
        """The dump's ``<siteinfo>``, read without reading on to its pages (None: the first page comes first)."""
        check_dump_file(self.path)
        events = self._events()
        try:
            for event, elem in events:
                name = _local(elem.tag)
                if event == "end" and name == "siteinfo":
                    return self._site(elem)
                if name == "page":
                    return None
            return None
        finally:
            events.close()  # (stops the decompression)

    def _events(self) -> Generator[tuple, None, None]:
        """Parser events, chunk by chunk; the events before a syntax error come out before the error does."""
        parser: ET.XMLPullParser = ET.XMLPullParser(events=("start", "end"))
        chunks = xml_chunks(self.path, self._counter)
        cap = TextCap(self.max_page_bytes) if self.max_page_bytes is not None else None
        texts = 0  # <text> elements read (their numbers are those of cap.cuts)

        def events():
            nonlocal texts
            for event, elem in parser.read_events():
                if cap is not None and event == "end" and elem.tag[-4:] == "text" and _local(elem.tag) == "text":
                    if texts in cap.cuts:
                        elem.set(_CUT_FROM, str(cap.cuts.pop(texts)))
                    texts += 1
                yield event, elem

        try:
            for chunk in chunks:
                parser.feed(cap.feed(chunk) if cap is not None else chunk)
                yield from events()
            if cap is not None:
                parser.feed(cap.close())
            parser.close()
            yield from events()
        except ET.ParseError as err:
            raise self._error(err) from err
        finally:
            chunks.close()

    def _error(self, err: ET.ParseError) -> DumpError:
        line, column = err.position
        return DumpError(self.path, f"malformed XML ({str(err).split(':')[0]})",
                         line=line, column=column, offset=self.bytes_read)


def iter_pages(path, max_page_bytes: Optional[int] = DEFAULT_MAX_PAGE_BYTES) -> _Pages:
    """Stream ``(site, page)`` pairs from a MediaWiki export; the format is recognised from the file's first bytes.

    The returned object is iterable (once per ``for`` loop) and reports ``bytes_read`` (uncompressed XML).
    A page's wikitext longer than ``max_page_bytes`` bytes (as the export holds it, XML-escaped; None: no limit)
    is cut to that length as it streams past, never held whole (:class:`~.dumpbytes.TextCap`); the page's
    ``cut_from`` then gives its size before the cut.
    """
    return _Pages(path, max_page_bytes)


def read_siteinfo(path) -> Optional[SiteInfo]:
    """The ``<siteinfo>`` of a MediaWiki export (database name, site name, article URLs), read from its start only;
    None when it has none before its first page."""
    return _Pages(path).siteinfo()


# ----------------------------------------------------------------------------------------------- page filters

def is_translation(title: str) -> bool:
    """True for translation subpages such as ``Title/de`` or ``Title/pt-br``.

    >>> is_translation("Abundant Shrine/fr"), is_translation("AC/DC"), is_translation("Route 1/zh-hans")
    (True, False, True)
    """
    head, sep, tail = title.rpartition("/")
    if not sep or not head:
        return False
    m = LANGUAGE_CODE_RE.fullmatch(tail)
    return m is not None and m.group(1) in LANGUAGE_CODES


def skip_reason(page: WikiPage, namespaces=(0,), skip_translations: bool = True) -> Optional[str]:
    """Why a page is not an article (``"redirect"``, ``"namespace"``, ``"translation"``), or None."""
    if page.redirect:
        return "redirect"
    if page.ns not in namespaces:
        return "namespace"
    if skip_translations and is_translation(page.title):
        return "translation"
    return None
