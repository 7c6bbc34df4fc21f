"""Fact-bearing inline templates rendered to the text a reader sees, before the rest of the wikitext is cleaned.

``{{convert|6|ft|4|in|m}}`` becomes ``6 ft 4 in (1.93 m)``, ``{{birth date|1809|2|12}}`` ``February 12, 1809``,
``{{nihongo|Pikachu|ピカチュウ|Pikachu}}`` ``Pikachu (ピカチュウ, Pikachu)``. One table, :data:`RENDERERS`, maps a
template's name to the function that renders it; docs/wikitext.md lists them. Names are matched as MediaWiki
matches them, only more loosely: case-insensitive (MediaWiki: the first letter only), underscores and runs of
spaces are one space, a ``Template:``/``subst:`` prefix is ignored.

:func:`render_templates` rewrites the template calls of a page innermost first, in at most :data:`MAX_DEPTH`
rounds of one regular-expression pass each (linear time per round: a call is matched only when it holds no
other braces, so nested calls are rendered from the inside out, and deeper nesting is left to the guard of
``wikiguard``, which removes it). A call that no renderer knows becomes the removed-markup mark
(``wikiguard.GONE_MARKUP``), as the guard would have made of it; an infobox call (``infobox.is_infobox``) is
handed to a callback and removed from the text.
"""
from __future__ import annotations

import math
import re
from typing import Callable, Dict, List, Optional, cast

from .template_calls import Call, parse_call, template_name
from .wikiguard import GONE_MARKUP

__all__ = [
    "MAX_DEPTH",
    "RENDERERS",
    "Call",
    "all_positional",
    "convert",
    "first_positional",
    "parse_call",
    "render_templates",
    "template_name",
]

#: the key under which ``render_templates`` counts the calls its ``fallback`` rendered
FALLBACK_COUNT = "(unknown, by the fallback)"
#: rounds of innermost-first rendering (MediaWiki's own expansion limit is 40; fact templates nest 1-3 deep)
MAX_DEPTH = 8
# a call not preceded by a brace: "{{" first, then the lookbehind, so that sre searches for the literal "{{"
# (a pattern opening with the lookbehind is tried at every position, about six times slower)
_CALL_RE = re.compile(r"\{\{(?<!\{\{\{)(?!\{)([^{}]*)\}\}")


# ----------------------------------------------------------------------------------------------- numbers, units

def _number(text: str) -> Optional[float]:
    try:
        return float(text.strip().replace(",", "").replace("\u2212", "-"))
    except ValueError:
        return None


def _decimals(text: str) -> int:
    text = text.strip().replace(",", "")
    return len(text.split(".", 1)[1]) if "." in text else 0


def _format(x: float, decimals: int) -> str:
    """``x`` rounded to ``decimals`` places (negative: to tens, hundreds), with thousands separators."""
    decimals = max(min(decimals, 6), -9)
    if decimals <= 0:
        return f"{int(round(x, decimals)):,}"
    return f"{x:,.{decimals}f}"


#: unit -> (dimension, factor to the dimension's base unit, how it is shown); temperatures are affine (below)
UNITS: Dict[str, tuple] = {}


def _units(dimension: str, rows: str) -> None:
    for row in rows.strip().split(";"):
        names, factor, shown = row.rsplit(" ", 2) if row.count(" ") >= 2 else (row, "1", row)
        for name in names.split(","):
            UNITS[name.strip()] = (dimension, float(factor), shown.replace("_", " "))


_units("length", "m,metre,meter,metres,meters 1 m; cm,centimetre,centimetres 0.01 cm; mm,millimetre 0.001 mm;"
                 "km,kilometre,kilometres,kilometer,kilometers 1000 km; ft,foot,feet 0.3048 ft; in,inch,inches "
                 "0.0254 in; yd,yard,yards 0.9144 yd; mi,mile,miles 1609.344 mi; nmi 1852 nmi")
_units("area", "m2,sqm 1 m²; cm2 0.0001 cm²; km2,sqkm 1000000 km²; ha,hectare,hectares 10000 ha;"
               "sqft,ft2 0.09290304 sq_ft; sqmi,mi2 2589988.110336 sq_mi; acre,acres 4046.8564224 acres")
_units("volume", "m3 1 m³; km3 1000000000 km³; L,l,litre,liter,litres 0.001 L; ml,mL 0.000001 mL;"
                 "USgal,gal 0.003785411784 US_gal; impgal 0.00454609 imp_gal; cuft,ft3 0.028316846592 cu_ft")
_units("mass", "kg,kilogram,kilograms 1 kg; g,gram,grams 0.001 g; mg 0.000001 mg; t,tonne,tonnes 1000 t;"
               "lb,pound,pounds 0.45359237 lb; oz,ounce,ounces 0.028349523125 oz; st,stone 6.35029318 st;"
               "ST,shortton 907.18474 short_tons; LT,longton 1016.0469088 long_tons")
_units("speed", "m/s 1 m/s; km/h,kph 0.2777777777777778 km/h; mph 0.44704 mph; kn,knot,knots 0.5144444444444445 kn;"
                "ft/s 0.3048 ft/s")
_units("power", "W 1 W; kW 1000 kW; MW 1000000 MW; hp 745.69987158227022 hp; PS 735.49875 PS")
_TEMPERATURES = {"C": ("°C", 1.0, 273.15), "°C": ("°C", 1.0, 273.15), "F": ("°F", 5 / 9, 255.3722222222222),
                 "°F": ("°F", 5 / 9, 255.3722222222222), "K": ("K", 1.0, 0.0)}  # kelvin = x * scale + offset
#: the unit a value is converted to when the call names none
DEFAULT_TARGET = {"m": "ft", "cm": "in", "mm": "in", "km": "mi", "ft": "m", "in": "cm", "yd": "m", "mi": "km",
                  "nmi": "km", "m²": "sq ft", "cm²": "sq ft", "km²": "sq mi", "sq mi": "km²", "sq ft": "m²",
                  "ha": "acres", "acres": "ha", "m³": "cu ft", "km³": "cu ft", "L": "US gal", "mL": "US gal",
                  "US gal": "L", "imp gal": "L", "cu ft": "m³", "kg": "lb", "g": "oz", "mg": "oz", "t": "short tons",
                  "lb": "kg", "oz": "g", "st": "kg", "short tons": "t", "long tons": "t", "km/h": "mph",
                  "mph": "km/h", "m/s": "ft/s", "ft/s": "m/s", "kn": "km/h", "W": "hp", "kW": "hp", "MW": "hp",
                  "hp": "kW", "PS": "kW", "°C": "°F", "°F": "°C", "K": "°C"}
_SHOWN_TO_UNIT = {shown: name for name, (_, _, shown) in reversed(list(UNITS.items()))}
_RANGE_WORDS = {"-": "\u2013", "\u2013": "\u2013", "to": " to ", "and": " and ", "or": " or ", "x": " \u00d7 ",
                "by": " by ", "+/-": " ± ", "to(-)": " to ", "and(-)": " and "}


def _unit(name: str):
    """``(dimension, factor, shown)`` of a unit name, temperatures as ``("temperature", scale, shown, offset)``."""
    name = name.strip()
    if name in _TEMPERATURES:
        shown, scale, offset = _TEMPERATURES[name]
        return ("temperature", scale, shown, offset)
    if name in UNITS:
        return UNITS[name]
    if name.lower() in UNITS:
        return UNITS[name.lower()]
    return None


def _to_base(x: float, unit) -> float:
    return x * unit[1] + (unit[3] if unit[0] == "temperature" else 0.0)


def _from_base(x: float, unit) -> float:
    return (x - (unit[3] if unit[0] == "temperature" else 0.0)) / unit[1]


def _converted(values: List[float], uncertainty: float, unit, target: str, precision: Optional[int]) -> Optional[str]:
    """Base-unit ``values`` shown in ``target`` (``ftin``: feet and inches), rounded to the input's precision."""
    if target == "ftin" and unit[0] == "length":
        shown = []
        for x in values:
            inches = round(x / 0.0254)
            shown.append(f"{inches // 12} ft {inches % 12} in")
        return "\u2013".join(shown)
    out = _unit(_SHOWN_TO_UNIT.get(target, target))
    if out is None or out[0] != unit[0]:
        return None
    xs = [_from_base(x, out) for x in values]
    if precision is None:
        step = uncertainty / out[1]
        precision = round(-math.log10(step)) if step > 0 else 0
        biggest = max((abs(x) for x in xs), default=0.0)
        if biggest > 0:  # at least two significant figures
            precision = max(precision, 1 - math.floor(math.log10(biggest)))
    return "\u2013".join(_format(x, precision) for x in xs) + " " + out[2]


def convert(call: Call) -> Optional[str]:
    """``{{convert|6|ft|4|in|m}}`` -> ``6 ft 4 in (1.93 m)``; ``{{convert|5|-|10|km}}`` ->
    ``5\u201310 km (3.1\u20136.2 mi)`` (en dashes).

    Forms: a value and unit; two values joined by a range word (``-``, ``to``, ``and``, ``or``, ``x``, ``by``,
    ``+/-``); a compound input (``6|ft|4|in``, ``11|st|2|lb``). Then an optional target unit (several separated
    by spaces; ``ftin`` for feet and inches; default per unit, :data:`DEFAULT_TARGET`) and an optional
    precision (decimal places). ``disp=or``, ``disp=output only``, ``disp=flip`` are followed. An unknown unit is
    shown as written, without a conversion.

    >>> convert(parse_call("convert|100|km|mi")), convert(parse_call("convert|1.93|m|ftin"))
    ('100 km (62 mi)', '1.93 m (6 ft 4 in)')
    """
    a = [x.strip() for x in call.args]
    if not a or _number(a[0]) is None:
        return " ".join(x for x in a if x) or None
    values, i, unit_name = [a[0]], 1, None
    if len(a) > 3 and a[1] in _RANGE_WORDS and _number(a[2]) is not None:
        values.append(a[2])
        unit_name, i = a[3], 4
        shown_in = f"{a[0]}{_RANGE_WORDS[a[1]]}{a[2]}"
    elif len(a) > 1:
        unit_name, i = a[1], 2
        shown_in = a[0]
    else:
        return a[0]
    unit = _unit(unit_name)
    if unit is None:
        return f"{shown_in} {unit_name}".strip()
    base = [_to_base(cast(float, _number(v)), unit) for v in values]  # (numbers: checked above)
    uncertainty = 10.0 ** -_decimals(values[-1]) * unit[1]
    shown_in = f"{shown_in} {unit[2]}"
    while len(values) == 1 and i + 1 < len(a) and _number(a[i]) is not None and _unit(a[i + 1]) is not None \
            and _unit(a[i + 1])[0] == unit[0] != "temperature":  # 6 ft 4 in
        part = _unit(a[i + 1])
        base[0] += _number(a[i]) * part[1]
        uncertainty = 10.0 ** -_decimals(a[i]) * part[1]
        shown_in += f" {a[i]} {part[2]}"
        i += 2
    targets = a[i].split() if i < len(a) and a[i] and _number(a[i]) is None else []
    i += bool(targets)
    precision = int(cast(float, _number(a[i]))) if i < len(a) and _number(a[i]) is not None else None
    targets = targets or [{"in": "cm", "ft": "m"}.get(unit[2], DEFAULT_TARGET.get(unit[2], ""))]
    outs = [o for o in (_converted(base, uncertainty, unit, t, precision) for t in targets) if o]
    if not outs:
        return shown_in
    disp = call.get("disp").lower()
    if disp in ("out", "output only"):
        return "; ".join(outs)
    if disp == "or":
        return f"{shown_in} or {' or '.join(outs)}"
    if disp == "flip":
        return f"{outs[0]} ({shown_in})"
    return f"{shown_in} ({'; '.join(outs)})"


def _height(call: Call) -> Optional[str]:
    """``{{height|ft=6|in=4}}`` -> ``6 ft 4 in (1.93 m)``; ``{{height|m=1.93}}`` -> ``1.93 m (6 ft 4 in)``."""
    metric = [(k, call.get(k)) for k in ("m", "cm") if _number(call.get(k)) is not None]
    imperial = [(k, call.get(k)) for k in ("ft", "in") if _number(call.get(k)) is not None]
    if metric:
        return convert(Call("convert", [metric[0][1], metric[0][0], "ftin"]))
    if imperial:
        args = [x for pair in imperial for x in pair[::-1]]
        return convert(Call("convert", [*args, "m" if imperial[0][0] == "ft" else "cm"]))
    return None


# ----------------------------------------------------------------------------------------------- dates

_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_MONTH_NUMBER = {m.lower(): i for i, m in enumerate(_MONTHS, 1)} | {m[:3].lower(): i for i, m in enumerate(_MONTHS, 1)}


def _month(text: str) -> Optional[int]:
    text = text.strip().lower().rstrip(".")
    if text.isdigit():
        return int(text) if 1 <= int(text) <= 12 else None
    return _MONTH_NUMBER.get(text)


def _ymd(args: List[str]) -> Optional[tuple]:
    """(year, month or None, day or None) from the first arguments, None if the year is not a number."""
    y = args[0].strip() if args else ""
    if not re.fullmatch(r"-?\d{1,5}", y):
        return None
    m = _month(args[1]) if len(args) > 1 and args[1].strip() else None
    d = args[2].strip() if len(args) > 2 and m else ""
    return int(y), m, int(d) if d.isdigit() and 1 <= int(d) <= 31 else None


def _show_date(ymd: tuple, day_first: bool) -> str:
    y, m, d = ymd
    if m is None:
        return str(y)
    if d is None:
        return f"{_MONTHS[m - 1]} {y}"
    return f"{d} {_MONTHS[m - 1]} {y}" if day_first else f"{_MONTHS[m - 1]} {d}, {y}"


def _day_first(call: Call) -> bool:
    return call.get("df").lower() in ("y", "yes", "1", "true", "on")


def _date(call: Call) -> Optional[str]:
    """``{{birth date|1809|2|12}}`` -> ``February 12, 1809`` (``df=y``: ``12 February 1809``); a date written
    out (``{{dts|12 February 1809}}``) is kept as written."""
    ymd = _ymd(call.args)
    if ymd is None:
        return call.arg(0) or None
    return _show_date(ymd, _day_first(call))


def _years_between(born: tuple, died: tuple) -> int:
    return died[0] - born[0] - ((died[1] or 1, died[2] or 1) < (born[1] or 1, born[2] or 1))


def _death_date_and_age(call: Call) -> Optional[str]:
    """``{{death date and age|1865|4|15|1809|2|12}}`` -> ``April 15, 1865 (aged 56)``."""
    died, born = _ymd(call.args[:3]), _ymd(call.args[3:6])
    if died is None:
        return call.arg(0) or None
    shown = _show_date(died, _day_first(call))
    return f"{shown} (aged {_years_between(born, died)})" if born else shown


def _age(call: Call) -> Optional[str]:
    """``{{age|1809|2|12|1865|4|15}}`` -> ``56``; with one date (age today) nothing, so that a page's text does
    not depend on the day it is read."""
    born, until = _ymd(call.args[:3]), _ymd(call.args[3:6])
    return str(_years_between(born, until)) if born and until else None


# ----------------------------------------------------------------------------------------------- text templates

#: ``{{lang-xx|text}}`` -> ``Language: text`` for these codes; others give the text alone
LANGUAGES = {
    "ar": "Arabic", "de": "German", "el": "Greek", "es": "Spanish", "fi": "Finnish", "fr": "French", "ga": "Irish",
    "he": "Hebrew", "hi": "Hindi", "it": "Italian", "ja": "Japanese", "ko": "Korean", "la": "Latin", "nl": "Dutch",
    "no": "Norwegian", "pl": "Polish", "pt": "Portuguese", "ru": "Russian", "sv": "Swedish", "tr": "Turkish",
    "uk": "Ukrainian", "zh": "Chinese", "cy": "Welsh", "da": "Danish", "is": "Icelandic", "cs": "Czech",
    "hu": "Hungarian", "grc": "Ancient_Greek", "ang": "Old_English",
}


def _joined(*parts: str, sep: str = ", ") -> str:
    return sep.join(p for p in parts if p)


def _nihongo(call: Call) -> Optional[str]:
    """``{{nihongo|Pikachu|ピカチュウ|Pikachu}}`` -> ``Pikachu (ピカチュウ, Pikachu)``."""
    inside = _joined(call.arg(1), call.arg(2), call.arg(3))
    return (f"{call.arg(0)} ({inside})" if call.arg(0) else inside) if inside else call.arg(0) or None


def _frac(call: Call) -> Optional[str]:
    """``{{frac|1|2}}`` -> ``1/2``, ``{{frac|3|1|2}}`` -> ``3 1/2``, ``{{frac|4}}`` -> ``1/4``."""
    a = [x for x in (call.arg(0), call.arg(1), call.arg(2)) if x]
    if len(a) == 3:
        return f"{a[0]} {a[1]}/{a[2]}"
    return "/".join(a) if len(a) == 2 else f"1/{a[0]}" if a else None


def _lang_x(call: Call) -> Optional[str]:
    code = call.name.split("-", 1)[1] if "-" in call.name else call.arg(0)
    text = call.arg(0) if "-" in call.name else call.arg(1)
    language = LANGUAGES.get(code.split("-")[0].lower(), "").replace("_", " ")
    return (f"{language}: {text}" if language else text) or None


def _marriage(call: Call) -> Optional[str]:
    """``{{marriage|Ann|1990|2000|end=div}}`` -> ``Ann (m. 1990; div. 2000)``."""
    start, end = call.arg(1), call.arg(2)
    how = call.get("end", "reason")
    years = f"m. {start}" + (f"; {how.rstrip('.')}. {end}" if how and end else f"\u2013{end}" if end else "")
    return f"{call.arg(0)} ({years})" if start else call.arg(0) or None


def _list(call: Call) -> Optional[str]:
    """``{{hlist|a|b}}`` / ``{{plainlist|* a\\n* b}}`` -> ``a, b``."""
    items = [re.sub(r"^[*#:]+\s*", "", line).strip() for arg in call.args for line in arg.split("\n")]
    return ", ".join(i for i in items if i) or None


def _val(call: Call) -> Optional[str]:
    """``{{val|1.23|u=m}}`` -> ``1.23 m``; ``{{val|6.02|e=23}}`` -> ``6.02\u00d710^23``."""
    value = call.arg(0) + (f"\u00d710^{call.get('e')}" if call.get("e") else "")
    return _joined(value, call.get("u", "ul"), sep=" ") or None


def _first(call: Call) -> Optional[str]:
    return call.arg(0) or None


def _second_or_first(call: Call) -> Optional[str]:
    return call.arg(1) or call.arg(0) or None


def _last(call: Call) -> Optional[str]:
    return next((a.strip() for a in reversed(call.args) if a.strip()), None)


def _constant(text: str) -> Callable[[Call], str]:
    return lambda call: text


def _title(call: Call) -> Optional[str]:
    return None  # replaced per page by render_templates (the page title)


Renderer = Callable[[Call], Optional[str]]
#: template name -> renderer (None from a renderer: the call is removed). The names are lookup forms
#: (:func:`template_name`); docs/wikitext.md lists the table with examples.
RENDERERS: Dict[str, Renderer] = {}


def _register(names: str, renderer: Renderer) -> None:
    for name in names.split(","):
        RENDERERS[template_name(name)] = renderer


_register("convert,cvt,convert/2,height/convert", convert)
_register("height", _height)
_register("birth date,birth-date,dob,bda,death date,start date,end date,start date and age,end date and age,"
          "dts,date,film date,release date,birth year,death year,start year,birth date and age,"
          "birth year and age,death year and age", _date)
_register("death date and age,dda", _death_date_and_age)
_register("age,age in years", _age)
_register("lang,transl,transliteration,script,iast,rtl-lang", _second_or_first)
_register("langx,lang-x", _lang_x)
for _code in LANGUAGES:
    _register(f"lang-{_code}", _lang_x)
_register("nowrap,nobr,no wrap,small,smaller,big,larger,midsize,resize,mono,code,tt,bold,italic,em,strong,"
          "underline,strikethrough,strike,sup,sub,nbsp text,huge,large,small caps,smallcaps,sc,allcaps,"
          "center,centre,quote text,spoiler,spoilers", _last)
_register("abbr,abbrlink,tooltip,hover,hover text,tip,ill,interlanguage link,interlanguage link multi,"
          "illm,ruby,flag,flagu,flagcountry,flag country,flagathlete,flag link,country,w,wp,wikipedia,"
          "nihongo2", _first)
_register("sort,sortname", lambda c: _joined(c.arg(0), c.arg(1), sep=" ") if c.name == "sortname"
          else c.arg(1) or c.arg(0) or None)
_register("color,colour,colored text,coloured text,font color,font colour,fc,text color", _last)
_register("nihongo,nihongo3,nihongo foot,nihongo krt,ruby-ja", _nihongo)
_register("frac,sfrac,fraction,fract", _frac)
_register("circa,c.", lambda c: f"c. {c.arg(0)}" if c.arg(0) else "c.")
_register("hlist,flatlist,plainlist,ubl,unbulleted list,bulleted list,ublist,plain list,flat list,enum", _list)
_register("marriage,married", _marriage)
_register("val,value", _val)
_register("flagicon,flag icon,flagdeco,flag deco,flagicon image,flagicon2,country flag", lambda call: None)  # icons
_register("!", _constant("|"))
_register("=", _constant("="))
RENDERERS["'"] = _constant("'")
_register("snd,spnd,sndash,spaced ndash,spaced en dash,spd", _constant(" \u2013 "))
_register("ndash,\u2013,en dash", _constant("\u2013"))
_register("mdash,—,em dash", _constant("—"))
_register("nbsp,space,sp", _constant(" "))
_register("·,dot,middot,dot separator", _constant(" · "))
_register("•,bull,bullet", _constant(" • "))
_register("pagename,fullpagename,basepagename,subpagename,pagenamee", _title)

#: inline templates whose arguments are not visible text (references, pronunciation, maintenance tags, files):
#: the general rule for unknown templates leaves them out, as it does parser functions (``{{#expr:...}}``)
NOT_TEXT_TEMPLATES = frozenset({
    "about", "anchor", "audio", "better source", "by whom", "citation", "citation needed", "cite", "clarify", "cn",
    "coord", "distinguish", "dubious", "efn", "efn-lr", "efn-ua", "fact", "file", "for", "further", "harv", "harvnb",
    "harvp", "harvtxt", "hatnote", "icon", "image", "img", "ipa", "ipa-en", "ipac-en", "main", "nb", "note",
    "page needed", "pronunciation", "r", "redirect", "ref", "refn", "respell", "rp", "see also", "sfn", "sfnm",
    "sfnp", "short description", "sic", "sprite", "verify", "visible anchor", "when", "which", "who",
})
_NOT_TEXT_PREFIXES = ("#", "cite ", "ipa", "audio", "lang-", "infobox", "navbox", "citation")
_FILE_ARG_RE = re.compile(r"(?i)\.(?:png|jpe?g|gif|svg|webp|ogg|mp3|mp4|webm)\s*$|^\d+\s*px$")


def _text_args(call: Call) -> List[str]:
    if not (call.inline or call.row) or call.name in NOT_TEXT_TEMPLATES or call.name.startswith(_NOT_TEXT_PREFIXES):
        return []
    return [a.strip() for a in call.args if a.strip() and not _FILE_ARG_RE.search(a.strip())]


def first_positional(call: Call) -> Optional[str]:
    """A general rule for unknown templates (measured in docs/experiments/data.md): the first positional argument of an
    inline call (not a parser function, reference, pronunciation or file template; not a file name)."""
    args = _text_args(call)
    return args[0] if args else None


def all_positional(call: Call) -> Optional[str]:
    """The general rule for unknown templates that the reader uses (docs/experiments/data.md has the measurement): the
    positional arguments of an inline call joined by spaces, named ones dropped (exceptions as
    :func:`first_positional`). ``{{Bag2|Yellow Shard}}`` -> ``Yellow Shard``, ``{{VA|Ann Lee|en}}`` ->
    ``Ann Lee en``. A row call (a template used as a table or list row, :func:`row_templates`) shows them as a
    row: ``{{LootRow|Old Cave|Rare}}`` -> ``Old Cave; Rare.``"""
    args = _text_args(call)
    if call.row and args:
        # a line break in a cell: a comma, so the row stays one line; separators left by removed markup go
        row = "; ".join(c for c in (_BR_RE.sub(", ", a).strip(" ,;" + GONE_MARKUP) for a in args) if c)
        return (row if row[-1] in ".!?" else row + ".") if row else None
    return " ".join(args) or None


_BR_RE = re.compile(r"[ \t]*<br\s*/?\s*>[ \t]*", re.I)  # with the spaces around it
# a line's first call, to the line's end (the line must hold only spaces before it: checked after the match, so
# that sre searches for the literal "{{" rather than trying every position)
_LINE_CALL_RE = re.compile(r"\{\{([^{}|\n]*)(.*)$", re.M)
_ROW_END_RE = re.compile(r"[ \t]*\|[-}]")


def row_templates(wikitext: str) -> frozenset:
    """Names (lookup forms) of the templates a page uses as rows of a table or list: a call alone on its line
    (``{{Name|...}}``) next to a line that is a call of the same template alone on its line, or before a table's
    row separator or end (``|-``, ``|}``: a table whose start another template supplies). Such calls render as
    rows (:func:`all_positional`) although they are not inline.

    >>> sorted(row_templates("{{Head|x}}\\n{{Row|a|b}}\\n{{Row|c|{{d}}}}\\n|}\\n{{Note|e}}\\n{{Single|f}}\\n|}"))
    ['row', 'single']
    """
    if "\n" not in wikitext or "{{" not in wikitext:
        return frozenset()
    lines: Dict[int, str] = {}  # line start -> name of the call alone on that line
    ends: Dict[int, int] = {}  # line start -> the next line's start
    for m in _LINE_CALL_RE.finditer(wikitext):
        start = wikitext.rfind("\n", 0, m.start()) + 1
        if (start == m.start() or not wikitext[start:m.start()].strip(" \t")) and m.group(2).rstrip().endswith("}}"):
            lines[start] = template_name(m.group(1))
            ends[start] = m.end() + 1
    rows = set()
    for start, name in lines.items():
        after = ends[start]
        if name in rows or name in RENDERERS or name in NOT_TEXT_TEMPLATES or name.startswith(_NOT_TEXT_PREFIXES):
            continue
        if lines.get(after) == name or _ROW_END_RE.match(wikitext, after):
            rows.add(name)
    return frozenset(rows)


_LEAD_RE = re.compile(rf"(?:\s+|{GONE_MARKUP}|<!--.*?-->|__[A-Z]+__|\[\[(?i:file|image|category):[^\[\]]*\]\])*",
                      re.S)


def render_templates(wikitext: str, title: str = "", on_infobox: Optional[Callable[[Call, bool], bool]] = None,
                     fallback: Optional[Renderer] = None, max_depth: int = MAX_DEPTH,
                     counts: Optional[Dict[str, int]] = None) -> str:
    """The wikitext with template calls rendered innermost first (module docstring), GONE_MARKUP for removed
    ones. ``on_infobox(call, at_top)`` is asked about every call no renderer knows (``at_top``: only markup
    before it on the page) and returns True when it took the call as an infobox (then removed); ``fallback``
    renders the rest (None: removed). ``{{PAGENAME}}`` is ``title``. ``counts`` (a Counter), when given, counts
    the calls a renderer of the table turned into text, by name, and those ``fallback`` turned into text under
    :data:`FALLBACK_COUNT` (a call repeated on the page counts each time, although it is rendered once).
    Linear time in the text's length for a fixed ``max_depth``; the input's own GONE_MARKUP characters are
    removed first.
    """
    text = wikitext.replace(GONE_MARKUP, "")
    rows = row_templates(text)
    # the same call in the same place (inline or not, at the top or not) renders the same: rendered once a page
    # (value: the text and the name to count); an infobox's or disambiguation template's call is not kept, so
    # that ``on_infobox`` sees every one
    done: Dict[tuple, tuple] = {}
    for _ in range(max_depth):
        if "{{" not in text:
            break
        lead = _LEAD_RE.match(text)  # (matches everywhere: every part of it is optional)
        top = lead.end() if lead else 0

        def render(m: re.Match, text: str = text, top: int = top) -> str:
            inner, start, end = m.group(1), m.start(), m.end()
            inline = "\n" not in inner and ((start > 0 and text[start - 1] not in "\n") or
                                            (end < len(text) and text[end] not in "\n"))
            key = (inner, inline, start <= top)
            seen = done.get(key)
            if seen is not None:
                if seen[1] is not None and counts is not None:
                    counts[seen[1]] += 1
                return seen[0]
            out, counted = _render_call(inner, inline, start <= top)
            if out is not None:
                done[key] = (out, counted)
                if counted is not None and counts is not None:
                    counts[counted] += 1
                return out
            return GONE_MARKUP

        def _render_call(inner: str, inline: bool, at_top: bool) -> tuple:
            """(text, name to count) of a call; (None, None) for an infobox's (GONE_MARKUP, not kept)."""
            call = parse_call(inner, inline) if "|" in inner or ":" in inner else Call(template_name(inner), [], {},
                                                                                      inline)
            renderer = RENDERERS.get(call.name)
            if renderer is _title:
                return title or GONE_MARKUP, None
            if renderer is not None:
                out = renderer(call)
                if out is None or not out.strip():
                    return GONE_MARKUP, None
                return out, call.name
            if on_infobox is not None and on_infobox(call, at_top):
                return None, None
            if not inline and call.name in rows and "\n" not in inner:  # (not inline: alone on its line)
                call.row = True
            out = fallback(call) if fallback is not None else None
            return (GONE_MARKUP, None) if out is None or not out.strip() else (out, FALLBACK_COUNT)

        text, n = _CALL_RE.subn(render, text)
        if not n:
            break
    return text
