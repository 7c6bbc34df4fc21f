"""A template call as the renderers see it: :class:`Call` (name, positional and named arguments, where it sits)
and :func:`parse_call`, which reads one from the text between a call's braces; :func:`template_name`, the
lookup form of a template's name. ``templates`` renders calls, ``infobox`` reads infobox calls.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Dict, Iterator, List

__all__ = ["Call", "parse_call", "pipes_outside_links", "template_name"]

_SPLIT_RE = re.compile(r"\[\[|\]\]|\|")
_PREFIX_RE = re.compile(r"^(?:template|subst|safesubst|msgnw)\s*:\s*", re.I)
_NAME_SPACE_RE = re.compile(r"[\s_]+")


@dataclass
class Call:
    """One template call: its normalised name, positional arguments (``1=`` counts as the first) and named ones
    (keys stripped, values raw), whether it sits inside a line of text (``inline``), and whether it is a row
    call (``row``: alone on its line among calls of the same template or before a table's row separator or end,
    :func:`row_templates`)."""
    name: str
    args: List[str] = field(default_factory=list)
    named: Dict[str, str] = field(default_factory=dict)
    inline: bool = True
    row: bool = False

    def arg(self, i: int, default: str = "") -> str:
        """The i-th positional argument (from 0), stripped."""
        return self.args[i].strip() if i < len(self.args) else default

    def get(self, *keys: str, default: str = "") -> str:
        for key in keys:
            value = self.named.get(key, "").strip()
            if value:
                return value
        return default


@functools.lru_cache(maxsize=4096)
def template_name(raw: str) -> str:
    """The lookup form of a template name.

    >>> template_name(" Template:Birth_date  and age "), template_name("Convert")
    ('birth date and age', 'convert')
    """
    name = _PREFIX_RE.sub("", raw.strip().replace("\u200e", "").replace("\u200f", ""))
    return _NAME_SPACE_RE.sub(" ", name).strip().lower()


def pipes_outside_links(text: str, start: int = 0) -> Iterator["re.Match[str]"]:
    """The ``|`` of ``text`` from ``start`` on that are not inside ``[[links]]`` (template arguments and table
    cells are separated by these; a link's pipe separates its label).

    >>> [m.start() for m in pipes_outside_links("a|[[b|c]]|d")]
    [1, 9]
    """
    depth = 0
    for m in _SPLIT_RE.finditer(text, start):
        token = m.group()
        if token == "[[":
            depth += 1
        elif token == "]]":
            depth = max(depth - 1, 0)
        elif depth == 0:
            yield m


def _split(inner: str) -> List[str]:
    """Split at the pipes outside ``[[links]]`` (templates inside were rendered already)."""
    parts, start = [], 0
    for m in pipes_outside_links(inner):
        parts.append(inner[start:m.start()])
        start = m.end()
    parts.append(inner[start:])
    return parts


def parse_call(inner: str, inline: bool = True) -> Call:
    """A :class:`Call` from the text between ``{{`` and ``}}``.

    >>> c = parse_call("Infobox person| name = Ann |[[a|b]]|2=x")
    >>> c.name, c.args, c.named
    ('infobox person', ['[[a|b]]', 'x'], {'name': ' Ann '})
    """
    parts = _split(inner)
    head = parts[0]
    name, colon, rest = head.partition(":")
    if colon and (name.strip().startswith("#") or name.strip().isupper()):  # {{#if:...}}, {{DISPLAYTITLE:x}}
        return Call(template_name(name), [rest, *parts[1:]], {}, inline)
    call = Call(template_name(head), [], {}, inline)
    numbered: Dict[int, str] = {}
    for part in parts[1:]:
        key, eq, value = part.partition("=")
        if eq and "[[" not in key and "<" not in key:
            key = key.strip()
            if key.isdigit():
                numbered[int(key)] = value
            else:
                call.named[key] = value
        else:
            call.args.append(part)
    for k in sorted(numbered):  # "2=x" is the second positional argument
        while len(call.args) < k - 1:
            call.args.append("")
        if k - 1 < len(call.args):
            call.args[k - 1] = numbered[k]
        else:
            call.args.append(numbered[k])
    return call
