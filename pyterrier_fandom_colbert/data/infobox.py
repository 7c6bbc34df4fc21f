"""Infoboxes: which template calls hold a page's key facts, and those facts as ``key: value`` pairs.

An infobox is

* a template whose name says so: it contains ``infobox`` / ``info box`` (Wikipedia's ``{{Infobox person}}``,
  Fandom's ``{{Character Infobox}}``, ``{{Infobox dungeon}}``), or ends in ``box`` and is none of the message,
  navigation and quotation boxes (``{{Taxobox}}``, ``{{Chembox}}``);
* a template call at the top of a page (only markup before it) with at least :data:`MIN_NAMED` named
  parameters and at least twice as many named as positional ones: the way most Fandom wikis call their
  infobox templates (``{{Character|name=...|species=...|affiliation=...}}``);
* ``<infobox>`` markup on the page itself (Fandom's portable infoboxes): each ``<data>`` with a ``<label>``
  (else its ``source``) and a ``<default>`` value.

Kept: the named parameters with a value, keys humanised (``birth_place`` -> ``birth place``). Dropped: images,
captions, sizes, coordinates, maps, signatures, colours and styles (by key, :data:`DROP_KEY_RE`), values that
are file names, pixel sizes or colour codes, and a ``name``/``title`` equal to the page title. Nothing here is
tuned to one wiki: the rules look at parameter names and shapes only.
"""
from __future__ import annotations

import re
from typing import List, Tuple

from .templates import Call

__all__ = [
    "DROP_KEY_RE",
    "MIN_NAMED",
    "facts_text",
    "humanise",
    "infobox_fields",
    "is_infobox",
    "keep_value",
    "portable_infobox_fields",
]

#: named parameters a call at the top of a page needs to be taken for an infobox
MIN_NAMED = 3
_NAME_RE = re.compile(r"info\s*box|box$")
_NOT_BOX_RE = re.compile(r"(?:^|\s)(?:nav|user|quote|side|message|search|talk|succession|s-|[a-z]?m|am|tm|om|im|cm|fm|"
                         r"dm|portal|sister|wikt|commons|spoiler|notice|warning|text|color|colour|sandbox|toc|"
                         r"hidden|collapsible|scroll|gallery|sound)\s?box$")
_NOT_TOP_RE = re.compile(r"^(?:#|cite|citation|quote|cquote|blockquote|quotation|sfn|efn|main|see also|about|for|"
                         r"redirect|hatnote|coord|short description|dablink|distinguish|other uses|use |"
                         r"good article|featured|stub|cleanup|portal|commons|navbox|sidebar|tabs?\b|tabber|"
                         r"gallery|audio|listen|image|file|video|music)")
#: parameters that are not facts: pictures, layout, maps, signatures, colours
DROP_KEY_RE = re.compile(r"image|img|logo|photo|picture|icon|sprite|caption|^alt\b|\balt$|signature|coord|"
                         r"latitude|longitude|^lat|^long(?:itude)?_|pushpin|^map|map_|colou?r|background|^bg|"
                         r"style|class$|^width$|^height_px|upright|size$|^float$|^align|^embed|^child$|^module|"
                         r"^onlysource|italic.?title|^qid$|^wikidata|^footnotes?$|^nocat|^noicon|^theme$",
                         re.I)
_FILE_VALUE_RE = re.compile(r"(?i)^(?:\[\[\s*)?(?:file|image)\s*:[^\[\]]*(?:\]\])?$|\.(?:png|jpe?g|gif|svg|webp|bmp|"
                            r"tiff?|ogg|mp3|mp4|webm)\s*(?:\|[^\[\]\n]*)?(?:\]\])?$|^\d+\s*(?:x\d+)?\s*px$|^#[0-9a-f]{3}(?:[0-9a-f]{3})?$"
                            r"|^(?:yes|no|none|n/a|-|\u2014|\?)$")
_KEY_SPLIT_RE = re.compile(r"(?<=[a-z])(?=[A-Z])|[_\s-]+")


def is_infobox(call: Call, at_top: bool) -> bool:
    """Whether a template call (no renderer knew it) is an infobox (module docstring).

    >>> is_infobox(Call("infobox person", [], {"name": "x"}), False), is_infobox(Call("navbox"), False)
    (True, False)
    >>> is_infobox(Call("character", [], dict(name="a", born="b", species="c"), inline=False), True)
    True
    """
    name = call.name
    if _NAME_RE.search(name) and not _NOT_BOX_RE.search(name):
        return True
    named = sum(1 for v in call.named.values() if v.strip())
    return (at_top and not call.inline and named >= MIN_NAMED and len(call.named) >= 2 * len(call.args)
            and not _NOT_TOP_RE.match(name))


def humanise(key: str) -> str:
    """
    >>> humanise("birth_place"), humanise("releaseDate"), humanise(" Known-as ")
    ('birth place', 'release date', 'known as')
    """
    words = [w for w in _KEY_SPLIT_RE.split(key.strip()) if w]
    return " ".join(w if w.isupper() and len(w) > 1 else w.lower() for w in words)


def keep_value(value: str) -> bool:
    """False for file names and file links, pixel sizes, colour codes and empty or placeholder values. A value
    with text beside its pictures (``* [[File:a.png|30px]] Ann``, a list of icons and names) is kept: its
    cleaned text is checked again.

    >>> keep_value("[[File:a.png|200px]]"), keep_value("b.jpg"), keep_value("*[[File:a.png|30px]]Ann")
    (False, False, True)
    """
    value = value.strip()
    return bool(value) and not _FILE_VALUE_RE.search(value)


def infobox_fields(call: Call) -> List[Tuple[str, str]]:
    """``(humanised key, raw value)`` of an infobox call's named parameters that may hold facts."""
    return [(humanise(key), value) for key, value in call.named.items()
            if key.strip() and not DROP_KEY_RE.search(key.strip()) and keep_value(value)]


_INFOBOX_TAG_RE = re.compile(r"<infobox\b", re.I)
_LABEL_RE = re.compile(r"<label\b[^<>]*>(.*?)</label\s*>", re.I | re.S)
_DEFAULT_RE = re.compile(r"<default\b[^<>]*>(.*?)</default\s*>", re.I | re.S)
_SOURCE_RE = re.compile(r"""<data\b[^<>]*?\bsource\s*=\s*["']?([^"'<>\s]+)""", re.I)


def portable_infobox_fields(wikitext: str) -> List[Tuple[str, str]]:
    """``(key, raw value)`` of the ``<data>`` items of ``<infobox>`` markup written on the page (linear time:
    the text is cut at ``</data>`` and each piece read once).

    >>> portable_infobox_fields('<infobox><data source="born"><label>Born</label><default>19 BBY</default>'
    ...                         '</data><data source="x"><default>[[File:a.png]]</default></data></infobox>')
    [('born', '19 BBY')]
    """
    if not _INFOBOX_TAG_RE.search(wikitext):
        return []
    fields = []
    for box in re.split(r"(?i)</infobox\s*>", wikitext):
        start = _INFOBOX_TAG_RE.search(box)
        if start is None:
            continue
        for piece in re.split(r"(?i)</data\s*>", box[start.end():]):
            at = piece.lower().rfind("<data")
            if at < 0:
                continue
            piece = piece[at:]
            label, default, source = _LABEL_RE.search(piece), _DEFAULT_RE.search(piece), _SOURCE_RE.search(piece)
            key = label.group(1) if label else source.group(1) if source else ""
            if not default or not key.strip() or (source and DROP_KEY_RE.search(source.group(1))):
                continue
            if keep_value(default.group(1)):
                fields.append((humanise(key), default.group(1).strip()))
    return fields


def facts_text(title: str, facts: List[Tuple[str, str]]) -> str:
    """``"Title — born: 19 BBY; species: Human"``.

    >>> facts_text("Luke Skywalker", [("born", "19 BBY"), ("species", "Human")])
    'Luke Skywalker — born: 19 BBY; species: Human'
    """
    return f"{title} \u2014 " + "; ".join(f"{key}: {value}" for key, value in facts)
