"""Wikitables as text a reader recognises: one line per row, ``header: cell; header: cell.``

:func:`tables_to_text` replaces every line-start ``{| ... |}`` table of a page (nesting counted) by its rows:

* a row of header cells only (``! A !! B``) sets the column headers (again, if a later row does so); a header
  cell at the start of a row of data cells (``! Row || 1 || 2``) labels that row: ``Row — A: 1; B: 2.``;
* data cells are paired with the header of their column: ``Year: 2012; Title: Emberfall.``; a cell without a
  header, or whose header is empty, stands alone;
* ``colspan`` repeats a cell over the columns it covers (shown once), ``rowspan`` carries it into the rows
  below (both capped at :data:`MAX_SPAN`; columns past :data:`MAX_COLUMNS` are left out); empty cells are
  left out;
* the caption (``|+``) is a line of its own; cell attributes (``style="..." |``) are dropped; a table nested in
  a cell is flattened into that cell (its rows joined by ``; ``); a header whose cell turns out empty once
  cleaned (a cell holding only an image) is removed with the cell (``drop_empty_cells``, after cleaning).

The rows are lines of a paragraph of their own (a blank line before and after), so the passage splitter cuts a
long table between rows, as it cuts prose between sentences. Cell text is still wikitext (links, bold), cleaned
afterwards with the rest of the page. Linear time: each line is looked at once and each cell split once; an
unclosed table runs to the end of the page.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable, List, Optional, Tuple, cast

from .template_calls import pipes_outside_links

__all__ = ["MAX_COLUMNS", "MAX_SPAN", "drop_empty_cells", "table_rows", "tables_to_text"]

#: the most columns a colspan covers and rows a rowspan reaches (hostile tables: colspan=1000000)
MAX_SPAN = 50
#: columns of a row that are read (the rest is left out): bounds the work per row of a hostile table
MAX_COLUMNS = 100
_SPAN_RE = re.compile(r"""\b(row|col)span\s*=\s*["']?\s*(\d+)""", re.I)
_END_RE = re.compile(r"[.!?:;]$")
#: the start of a cell up to its first pipe outside links, when all before it is text and links without brackets
#: inside (``[[File:a.png|20px]] [[b]]``); anything else (nested or unclosed links) stops it short of a pipe
_SIMPLE_PREFIX_RE = re.compile(r"(?:[^\[\]|]+|\[\[[^\[\]]*\]\]|\[(?!\[)|\](?!\]))*")

Cell = Tuple[bool, str, int, int]  # (header, text, rowspan, colspan)


def _split_cells(line: str, header: bool) -> List[str]:
    """A row line's cells (``||``, and ``!!`` on header lines), not splitting inside links."""
    if "||" not in line and not (header and "!!" in line):
        return [line]
    pieces = line.split("||")
    if header:
        pieces = [c for piece in pieces for c in piece.split("!!")]
    if "[[" not in line:
        return pieces
    cells, depth, open_cell = [], 0, None  # pieces split inside a link are joined again
    for piece in pieces:
        open_cell = piece if open_cell is None else f"{open_cell}||{piece}"
        depth += piece.count("[[") - piece.count("]]")
        if depth <= 0:
            cells.append(open_cell)
            open_cell, depth = None, 0
    if open_cell is not None:
        cells.append(open_cell)
    return cells


def _cell(raw: str, header: bool) -> Cell:
    """``style="x" | text`` -> the text and its spans: as in MediaWiki, what precedes the first single pipe outside
    links is the cell's attributes. A stray ``!`` opening a cell's text (``|| ! x``) is dropped."""
    if "|" not in raw:  # no attributes
        return header, raw.strip().lstrip("!").strip(), 1, 1
    link, pipe = raw.find("[["), raw.find("|")
    if link < 0 or pipe < link:  # the first pipe is outside links
        attrs, text = raw[:pipe], raw[pipe + 1:]
    else:
        end = cast(re.Match, _SIMPLE_PREFIX_RE.match(raw)).end()  # (matches always: it may match nothing)
        if end == len(raw):  # (text and simple links: the common cell, without a loop)
            attrs, text = "", raw
        elif raw[end] == "|":
            attrs, text = raw[:end], raw[end + 1:]
        else:
            attrs, text = _split_attrs(raw, link)
    if "span" not in attrs[:500].lower():  # (the common cell: no spans to read)
        return header, text.strip().lstrip("!|").strip(), 1, 1
    spans = {k.lower(): min(max(int(v), 1), MAX_SPAN) for k, v in _SPAN_RE.findall(attrs[:500])}
    return header, text.strip().lstrip("!|").strip(), spans.get("row", 1), spans.get("col", 1)


def _split_attrs(raw: str, link: int) -> Tuple[str, str]:
    """(attributes, text) of a cell whose first pipe is inside a link: split at the first pipe outside links."""
    m = next(pipes_outside_links(raw, link), None)
    return (raw[:m.start()], raw[m.end():]) if m is not None else ("", raw)


def _row_text(cells: List[Cell], headers: List[str], carried: dict) -> Tuple[Optional[str], Optional[List[str]]]:
    """One row's line, or the new headers when the row holds header cells only."""
    spans = False
    all_headers = True
    for header_cell, _, rowspan, colspan in cells:
        if rowspan != 1 or colspan != 1:
            spans = True
        if not header_cell:
            all_headers = False
    if cells and all_headers and not carried:  # (rowspans from above: a data row)
        new = []
        for _, text, _, colspan in cells:
            new.extend([text] + [""] * (colspan - 1))
        return None, new
    label = cells[0][1] if len(cells) > 1 and cells[0][0] and not any(c[0] for c in cells[1:]) else ""
    if not carried and not spans:  # the common row: cells are columns
        parts = _parts(enumerate([cell[1] for cell in cells[:MAX_COLUMNS]]), headers, label)
    else:
        parts = _parts(_place(cells, carried), headers, label)
    if not parts and not label:
        return None, None
    line = (f"{label} \u2014 " if label and parts else label) + "; ".join(parts)
    return (line if line[-1:] in ".!?:;" else line + "."), None


def _parts(shown: Iterable[Tuple[int, str]], headers: List[str], label: str) -> List[str]:
    """``header: text`` of a row's ``(column, text)`` pairs (empty ones and the label left out)."""
    parts = []
    n = len(headers)
    for column, text in shown:
        if not text or (label and column == 0 and text == label):
            continue
        header = headers[column] if column < n else ""
        parts.append(f"{header}: {text}" if header and header != text else text)
    return parts


def _place(cells: List[Cell], carried: dict) -> List[Tuple[int, str]]:
    """(column, text) of a row's cells and of the cells of rows above that reach into it (``carried``: column ->
    (text, rows left), updated for the rows below)."""
    shown, column = [], 0
    previous = dict(carried)
    carried.clear()
    limit = max(previous, default=-1)
    i = 0
    while (i < len(cells) or column <= limit) and column < MAX_COLUMNS:
        if column in previous:
            text, left = previous[column]
            shown.append((column, text))
            if left > 1:
                carried[column] = (text, left - 1)
            column += 1
            continue
        if i >= len(cells):
            column += 1
            continue
        _, text, rowspan, colspan = cells[i]
        i += 1
        shown.append((column, text))
        if rowspan > 1:
            for k in range(colspan):
                carried[column + k] = (text, rowspan - 1)
        column += colspan
    return shown


def _line_cells(body: str, header: bool) -> List[Cell]:
    """The cells of a row line after its ``|`` (``header``: ``!``)."""
    if header:
        return [(True, c.strip(), 1, 1) if "|" not in c else _cell(c, True) for c in _split_cells(body, True)]
    if "||" not in body:  # (one cell)
        return [(False, body.strip().lstrip("!").strip(), 1, 1) if "|" not in body else _cell(body, False)]
    return [(False, c.strip().lstrip("!").strip(), 1, 1) if "|" not in c else _cell(c, False)
            for c in _split_cells(body, False)]


class _TableState:
    """What :func:`table_rows` keeps while it reads a table's lines."""
    __slots__ = ("carried", "cells", "depth", "headers", "more", "nest", "nested", "rows")

    def __init__(self, depth: int):
        self.rows: List[str] = []
        self.headers: List[str] = []
        self.carried: dict = {}
        self.cells: List[Cell] = []
        self.more: List[str] = []  # lines continuing the last cell's text (joined once: linear time)
        self.nested: List[str] = []
        self.nest = 0
        self.depth = depth

    def flush(self) -> None:
        """Join the continuation lines to the last cell."""
        if self.more and self.cells:
            h, text, rs, cs = self.cells[-1]
            self.cells[-1] = (h, " ".join([text, *self.more]).strip(), rs, cs)
        self.more.clear()

    def end_row(self) -> None:
        """The row read so far becomes a line (or the new headers)."""
        self.flush()
        if self.cells:
            line, new = _row_text(self.cells, self.headers, self.carried)
            if new is not None:
                self.headers = new
            elif line:
                self.rows.append(line)
            self.cells.clear()

    def nested_line(self, line: str, head: str) -> None:
        """A line of a table nested in a cell: kept until that table closes, then flattened into the cell."""
        self.nested.append(line)
        if head.startswith("{|"):
            self.nest += 1
        elif head.startswith("|}"):
            self.nest -= 1
            if not self.nest:
                if self.depth < 3 and self.cells:
                    self.more.append("; ".join(r.rstrip(".") for r in table_rows(self.nested, self.depth + 1)))
                self.nested = []


def table_rows(lines: List[str], depth: int = 0) -> List[str]:
    """The row lines of one table given as its lines from ``{|`` to ``|}`` (nested tables included)."""
    table = _TableState(depth)
    caption: Optional[str] = None
    for line in lines[1:]:
        head = line.lstrip()
        if table.nest:
            table.nested_line(line, head)
            continue
        first = head[:1]
        if first == "|":
            second = head[1:2]
            if second == "}":
                break
            if second == "-":
                if table.cells or table.more:
                    table.end_row()
            elif second == "+":
                caption = _cell(head[2:], False)[1]
            else:
                if table.more:
                    table.flush()
                table.cells.extend(_line_cells(head[1:], False))
        elif first == "!":
            if table.more:
                table.flush()
            table.cells.extend(_line_cells(head[1:], True))
        elif head.startswith("{|"):
            table.nest, table.nested = 1, [line]
        elif table.cells and head:  # a cell's text continues on this line
            table.more.append(head.lstrip("*#:").strip())
    table.end_row()
    if caption:
        table.rows.insert(0, caption if _END_RE.search(caption) else caption + ".")
    return table.rows


def tables_to_text(wikitext: str, render: Optional[Callable[[str], str]] = None) -> str:
    """Every line-start table replaced by its row lines, as a paragraph of its own (module docstring).
    ``render``: what replaces each table's row lines, given them joined by line breaks (None: the lines).

    >>> tables_to_text("a\\n{| class=x\\n! Year !! Event\\n|-\\n| 300 || Born\\n|}\\nb")
    'a\\n\\nYear: 300; Event: Born.\\n\\nb'
    """
    first = wikitext.find("{|")
    if first < 0:
        return wikitext
    start = wikitext.rfind("\n", 0, first) + 1  # the lines before the first "{|" stay as they are
    out: List[str] = [wikitext[:start - 1]] if start else []
    table: List[str] = []
    depth = 0

    def emit():
        rows = "\n".join(table_rows(table))
        out.extend(["", render(rows) if render is not None else rows, ""])

    for line in wikitext[start:].split("\n"):
        if "{|" not in line and (not depth or "|}" not in line):  # (most lines: neither opens nor closes one)
            (table if depth else out).append(line)
            continue
        head = line.lstrip()
        if depth:
            table.append(line)
            if head.startswith("{|"):
                depth += 1
            elif head.startswith("|}"):
                depth -= 1
                if not depth:
                    emit()
                    table = []
        elif head.startswith("{|"):
            depth, table = 1, [line]
        else:
            out.append(line)
    if table:  # unclosed: its rows run to the end of the page
        emit()
    return "\n".join(out)


_EMPTY_CELL_RE = re.compile(r"(?:^|(?<=; ))[^;:\n]{1,80}:[ \t]*; |; [^;:\n]{1,80}:[ \t]*(?=\.$)", re.M)


def drop_empty_cells(clean_text: str) -> str:
    """Remove ``header:`` pairs left empty by cleaning from row lines (``Type: Fire; Icon:; Cost: 5.``).

    >>> drop_empty_cells("Type: Fire; Icon:; Cost: 5.\\nName: A; Icon:.\\nIcon:; B: 1.")
    'Type: Fire; Cost: 5.\\nName: A.\\nB: 1.'
    """
    if ":;" not in clean_text and ":." not in clean_text and ": ;" not in clean_text:
        return clean_text
    return _EMPTY_CELL_RE.sub("", clean_text)
