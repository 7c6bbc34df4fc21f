"""Search responses as terminal text (``pfc search``): the answer line, one block per result, the passage with
its answer region marked (``«…»``, or ANSI colours: :mod:`~pyterrier_fandom_colbert.display`)."""
from __future__ import annotations

import itertools
from typing import Any, Dict

from ..display import ANSI_ANSWER as _ANSWER
from ..display import ANSI_BOLD as _BOLD
from ..display import ANSI_DIM as _DIM
from ..display import ANSI_RESET as _RESET
from ..display import ANSI_SHORT_ANSWER as _SHORT
from ..display import ANSI_UNDERLINE as _UNDERLINE
from ..display import terminal_text
from .search import NOTHING_RELEVANT

__all__ = ["format_passage", "format_results"]


def format_passage(result: Dict[str, Any], color: bool) -> str:
    """The passage with the likely answer region highlighted (``«…»`` without colour; with colour a yellow
    background, the short answer in bold on it) and, with colour, the matched words underlined."""
    text = result["text"]
    answer, short = result.get("answer"), result.get("short_answer") if color else None
    bounds = {0, len(text)}
    for span in (answer, short):
        if span:
            bounds.update(span)
    matched = [(start, end) for start, end, *_, by in result.get("words", []) if by] if color else []
    for start, end in matched:
        bounds.update((start, end))
    out = []
    cuts = sorted(b for b in bounds if 0 <= b <= len(text))
    for start, end in itertools.pairwise(cuts):
        piece = terminal_text(text[start:end])
        in_answer = answer is not None and answer[0] <= start and end <= answer[1]
        in_short = short is not None and short[0] <= start and end <= short[1]
        if not color:
            if answer and start == answer[0]:
                out.append("«")
            out.append(piece)
            if answer and end == answer[1]:
                out.append("»")
            continue
        is_match = any(s <= start and end <= e for s, e in matched)
        style = _SHORT if in_short else _ANSWER if in_answer else _UNDERLINE if is_match else ""
        out.append(f"{style}{piece}{_RESET}" if style else piece)
    return "".join(out)


def format_results(response: Dict[str, Any], color: bool = False) -> str:
    """A search response as terminal text: a line saying so when nothing seems to answer the question, then one
    block per result with its short answer and confidence."""
    bold = (lambda s: f"{_BOLD}{s}{_RESET}") if color else (lambda s: s)
    dim = (lambda s: f"{_DIM}{s}{_RESET}") if color else (lambda s: s)
    n = len(response["results"])
    lines = [dim(f"{n} result{'' if n == 1 else 's'} for {terminal_text(response['query'])!r} "
                 f"({response['system']}, {response['took_ms']:.0f} ms)"), ""]
    if response.get("notice"):
        lines[1:1] = [dim(response["notice"])]
    answer = response.get("answer")
    if response.get("nothing_relevant"):
        lines += [bold(NOTHING_RELEVANT) + (" The closest passages:" if n else ""), ""]
    elif answer:
        lines += [f"answer: {bold(terminal_text(answer['text']))}  "
                  + dim(f"{answer['confidence']:.0%} sure · result {answer['rank']}, {terminal_text(answer['title'])}"),
                  ""]
    for r in response["results"]:
        section = f" › {terminal_text(r['section'])}" if r["section"] else ""
        score = dim(f"score {r['score']:.3f}")
        lines.append(f"{r['rank']:>2}. {bold(terminal_text(r['title']))}{section}  {score}")
        if r["url"]:
            lines.append(f"    {dim(terminal_text(r['url']))}")
        if r.get("short_answer") and r.get("confidence") is not None:
            start, end = r["short_answer"]
            confidence = dim(f"confidence {r['confidence']:.0%}")
            lines.append(f"    answer: {bold(terminal_text(r['text'][start:end]))}  {confidence}")
        lines.append(f"    {format_passage(r, color)}")
        lines.append("")
    if not response["results"]:
        lines.append("No passage matched.")
    return "\n".join(lines).rstrip() + "\n"
