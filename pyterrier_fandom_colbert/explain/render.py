"""Show explanations to people: one self-contained HTML page, a matplotlib heatmap, or plain terminal text.

All three read the columns the :class:`~pyterrier_fandom_colbert.explain.transformer.Explainer` adds. Highlights are per
word (word pieces merged), shaded by the word's score relative to the highest in its passage; the KDE answer
span is outlined. Passage and query text is always made safe by :mod:`pyterrier_fandom_colbert.display`: escaped
(HTML) or stripped of control and invisible characters (terminal), and bidi controls in it cannot reverse the
rest of the page: HTML puts every passage, query and docno in a ``<bdi>`` (an isolate: embeddings and overrides
left open inside it end with it), the terminal gets none of them.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from ..cli_errors import require_extra
from ..display import ANSI_RESET, ANSI_UNDERLINE, ansi_shade, html_text, terminal_text, use_color
from ..storage import write_text

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Method:
    label: str
    word_column: str
    rgb: Tuple[int, int, int]
    description: str


#: the views a page can show, by the name of their token-level column
METHODS = {
    "r_abs": Method("R_abs", "word_r_abs", (31, 119, 180),
                    "how many query vectors have the word among their top-k̃ most similar passage tokens"),
    "r_acc": Method("R_acc", "word_r_acc", (44, 160, 44), "the sum of those similarities"),
    "kde": Method("KDE", "word_kde", (255, 127, 14),
                  "kernel density of the matched positions; the outlined region is the most likely answer"),
    "token_sim": Method("query token", "word_token_sim", (148, 103, 189),
                        "similarity of each word to the chosen query token"),
}
_REQUIRED = ["query", "word_spans"]


def word_levels(values: np.ndarray) -> np.ndarray:
    """Shading in [0, 1]: each word's score over the passage's highest (negative scores and NaN shade nothing).

    >>> word_levels(np.array([2.0, 0.5, -1.0, np.nan])).tolist()
    [1.0, 0.25, 0.0, 0.0]
    """
    values = np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0).clip(min=0.0)
    top = values.max() if len(values) else 0.0
    return values / top if top > 0 else np.zeros_like(values)


def _check(frame: pd.DataFrame, methods: Sequence[str], text_field: str) -> None:
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; expected some of {list(METHODS)}")
    needed = _REQUIRED + [text_field] + [METHODS[m].word_column for m in methods]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        hint = " (add query_token= to the Explainer for 'token_sim')" if "word_token_sim" in missing else ""
        raise ValueError(f"the frame lacks column(s) {missing}; render the output of "
                         f"pfc.Explainer(colbert) (columns {list(frame.columns)}){hint}")


# -- HTML ----------------------------------------------------------------------------------------------------------
_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h2 { font-size: 1.1em; margin-top: 2em; }
table { border-collapse: collapse; width: 100%; table-layout: fixed; }
th, td { border: 1px solid #ccc; padding: .5em; vertical-align: top; text-align: left; line-height: 1.7; }
td.meta { width: 9em; font-size: .85em; color: #555; word-break: break-all; }
.w { border-radius: 3px; padding: 0 1px; }
.answer { outline: 2px solid #c0392b; outline-offset: 1px; border-radius: 3px; }
.rest { color: #999; }
.qtoks, .legend { font-size: .85em; color: #555; }
code { background: #f4f4f4; padding: 0 3px; }
"""


def _highlight_html(text: str, spans: np.ndarray, values: np.ndarray, method: Method,
                    answer: Optional[Tuple[int, int]] = None) -> str:
    """The passage with each word shaded by its score; the answer span (if any) outlined."""
    levels = word_levels(values)
    r, g, b = method.rgb
    out: List[str] = []
    pos = 0
    for w, (start, end) in enumerate(np.asarray(spans).reshape(-1, 2).tolist()):
        out.append(html_text(text[pos:start]))
        if answer is not None and start == answer[0]:
            out.append('<span class="answer" title="KDE answer span">')
        word = html_text(text[start:end])
        if levels[w] > 0:
            out.append(f'<span class="w" style="background: rgba({r},{g},{b},{0.85 * levels[w]:.3f})" '
                       f'title="{html.escape(method.label)} = {float(values[w]):.4g}">{word}</span>')
        else:
            out.append(word)
        if answer is not None and end == answer[1]:
            out.append("</span>")
        pos = end
    rest = text[pos:]
    if rest.strip():
        out.append(f'<span class="rest" title="beyond doc_maxlen: not encoded">{html_text(rest)}</span>')
    else:
        out.append(html_text(rest))
    return "".join(out)


def to_html(frame: pd.DataFrame, methods: Sequence[str] = ("r_abs", "r_acc", "kde"), *,
            title: str = "Why did these passages match?", text_field: str = "text") -> str:
    """One self-contained HTML page (inline CSS, no scripts, no external assets): per query, its passages in
    rows and one column per method, side by side."""
    _check(frame, methods, text_field)
    title = terminal_text(title)  # <title> cannot hold a <bdi>: no bidi (nor control) characters in it
    parts = [f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
             f"<style>{_CSS}</style></head><body>", f"<h1>{html.escape(title)}</h1>", '<p class="legend">']
    parts += [f"<b>{html.escape(METHODS[m].label)}</b>: {html.escape(METHODS[m].description)}.<br>" for m in methods]
    parts.append("</p>")
    if len(frame) == 0:
        parts.append("<p>No passages.</p>")
    groups = frame.groupby("qid", sort=False) if "qid" in frame.columns else [(None, frame)]
    for qid, rows in groups:
        first = rows.iloc[0]
        heading = f"Query {html_text(qid, isolate=True)}: " if qid is not None else "Query: "
        parts.append(f"<h2>{heading}{html_text(first['query'], isolate=True)}</h2>")
        if "expl_query_tokens" in rows.columns:
            toks = " ".join(f"<code>{html_text(t, isolate=True)}</code>" for t in first["expl_query_tokens"])
            parts.append(f'<p class="qtoks">query vectors: {toks}</p>')
        heads = "".join(f"<th>{html.escape(METHODS[m].label)}</th>" for m in methods)
        parts.append(f"<table><thead><tr><th style=\"width:9em\">passage</th>{heads}</tr></thead><tbody>")
        for _, row in rows.iterrows():
            cells = "".join(
                '<td dir="auto"><bdi>' + _highlight_html(row[text_field], row["word_spans"],
                                                         row[METHODS[m].word_column], METHODS[m],
                                                         _answer(row) if m == "kde" else None)
                + "</bdi></td>" for m in methods)
            parts.append(f'<tr><td class="meta">{_meta_html(row)}</td>{cells}</tr>')
        parts.append("</tbody></table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _answer(row: Mapping) -> Optional[Tuple[int, int]]:
    """The row's KDE answer span, or None (no span, or no such column)."""
    span = row.get("answer_span")
    return None if span is None or isinstance(span, float) else (int(span[0]), int(span[1]))


def _meta_html(row) -> str:
    bits = [f"<b>{html_text(row['docno'], isolate=True)}</b>" if "docno" in row else ""]
    for name in ("rank", "score"):
        if name in row and pd.notna(row[name]):
            value = row[name]
            bits.append(f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {html_text(value)}")
    answer = row.get("answer") if hasattr(row, "get") else None
    if isinstance(answer, str) and answer:  # a Reader ran before: its answer beside the study's KDE span
        confidence = row.get("answer_confidence")
        sure = f" ({float(confidence):.0%})" if confidence is not None and pd.notna(confidence) else ""
        bits.append(f'reader: <b class="reader">{html_text(answer, isolate=True)}</b>{sure}')
    return "<br>".join(b for b in bits if b)


def save_html(frame: pd.DataFrame, path: Union[str, Path], **kwargs) -> Path:
    """Write :func:`to_html` to ``path`` (via a temporary file renamed into place)."""
    return write_text(path, to_html(frame, **kwargs))


# -- heatmap -------------------------------------------------------------------------------------------------------
#: passage tokens a heatmap shows by default (about 24 inches wide; a longer passage is cut, with a note)
HEATMAP_MAX_COLUMNS = 80


def heatmap(row: Mapping, *, k_tilde: Optional[int] = 2, specials: bool = True,
            figsize: Optional[Tuple[float, float]] = None,
            max_columns: Optional[int] = HEATMAP_MAX_COLUMNS) -> "Figure":
    """Query tokens × passage tokens similarity heatmap of one explained row (a matplotlib Figure on the Agg
    canvas, so no display is needed: ``heatmap(row).savefig("row.png")``). Dots mark each query vector's top-k̃
    matches (``k_tilde=None``: no dots); ``specials=False`` hides the ``[CLS]``, ``[D]``, ``[SEP]`` columns. A
    passage of more than ``max_columns`` tokens is cut to the ``max_columns`` consecutive tokens that match the
    query best (the most similarity), and the title says which (None: every token, however wide)."""
    require_extra("matplotlib", "plot", "a heatmap")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .relevance import top_matches

    for column in ("expl_sim", "expl_query_tokens", "expl_tokens", "expl_words"):
        if column not in row:
            raise ValueError(f"the row lacks {column!r}; pass a row of pfc.Explainer(colbert)'s output")
    sim = np.asarray(row["expl_sim"], dtype=np.float64)
    tokens, q_tokens = list(row["expl_tokens"]), list(row["expl_query_tokens"])
    keep = np.ones(len(tokens), dtype=bool) if specials else np.asarray(row["expl_words"]) >= 0
    cols = np.flatnonzero(keep)
    note = ""
    if max_columns is not None and len(cols) > max_columns:
        best = np.nan_to_num(sim[:, cols], nan=0.0).max(axis=0) if len(q_tokens) else np.zeros(len(cols))
        windows = np.convolve(best, np.ones(max_columns), mode="valid")  # total of each run of max_columns
        first = int(np.argmax(windows))
        note = f" (tokens {first + 1}–{first + max_columns} of {len(cols)} shown)"
        cols = cols[first:first + max_columns]
    width, height = figsize or (max(6.0, 0.28 * len(cols) + 2), max(3.0, 0.28 * len(q_tokens) + 1.5))
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(sim[:, cols], aspect="auto", cmap="viridis", interpolation="nearest")
    fig.colorbar(image, ax=ax, label="similarity")
    if k_tilde and len(q_tokens) and len(cols):
        positions, _ = top_matches(np.nan_to_num(sim, nan=-np.inf), ~np.isnan(sim[0]), k_tilde)
        column_of = np.full(len(tokens), -1)
        column_of[cols] = np.arange(len(cols))
        qs, xs = np.repeat(np.arange(len(q_tokens)), positions.shape[1]), column_of[positions.ravel()]
        shown = xs >= 0
        ax.scatter(xs[shown], qs[shown], s=10, c="white", edgecolors="black", linewidths=0.5,
                   label=f"top-{k_tilde} matches")
        ax.legend(loc="upper right", fontsize="small")
    ax.set_xticks(np.arange(len(cols)), [tokens[c] for c in cols], rotation=90, fontsize=7)
    ax.set_yticks(np.arange(len(q_tokens)), q_tokens, fontsize=7)
    ax.set_xlabel("passage tokens")
    ax.set_ylabel("query tokens")
    if "docno" in row:
        ax.set_title(f"{row.get('query', '')}  ×  {row['docno']}{note}", fontsize=9)
    elif note:
        ax.set_title(note.strip(" ()"), fontsize=9)
    return fig


# -- terminal (colours: display.py) ---------------------------------------------------------------------------------


def to_terminal(row: Mapping, method: str = "kde", *, color: Optional[bool] = None, top: int = 5,
                text_field: str = "text") -> str:
    """One explained row as text. With colour (``color=None``: when stdout is a terminal and NO_COLOR is unset)
    words get a background shade by score and the answer span is underlined; without, words in the top half of
    the scale are ``[bracketed]`` and the answer span is ``«quoted»``. A last line lists the ``top`` words."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {list(METHODS)}")
    spec = METHODS[method]
    for column in ("word_spans", spec.word_column, text_field):
        if column not in row:
            raise ValueError(f"the row lacks {column!r}; pass a row of pfc.Explainer(colbert)'s output")
    if color is None:
        color = use_color()
    text, values = row[text_field], np.asarray(row[spec.word_column], dtype=np.float64)
    spans = np.asarray(row["word_spans"]).reshape(-1, 2).tolist()
    levels = word_levels(values)
    answer = _answer(row) if method == "kde" else None
    out, pos = [], 0
    for w, (start, end) in enumerate(spans):
        out.append(terminal_text(text[pos:start]))
        if answer is not None and start == answer[0]:
            out.append(ANSI_UNDERLINE if color else "«")
        word = terminal_text(text[start:end])
        if color and levels[w] > 0:
            out.append(ansi_shade(word, levels[w]))
        elif not color and levels[w] >= 0.5:
            out.append(f"[{word}]")
        else:
            out.append(word)
        if answer is not None and end == answer[1]:
            out.append(ANSI_RESET if color else "»")
        pos = end
    out.append(terminal_text(text[pos:]))
    header = f"{spec.label} — query: {terminal_text(str(row.get('query', '')))}"
    if "docno" in row:
        header += f" | docno: {terminal_text(str(row['docno']))}"
    order = [w for w in np.argsort(-np.nan_to_num(values, nan=-np.inf), kind="stable")[:top]]
    best = ", ".join(f"{terminal_text(text[spans[w][0]:spans[w][1]])} {values[w]:.3g}" for w in order)
    return f"{header}\n{''.join(out)}\ntop {spec.label}: {best}"
