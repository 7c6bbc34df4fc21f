"""Exact match and token F1 of short answers, with the official SQuAD v1.1 normalisation (lower case, no
punctuation, no articles ``a``/``an``/``the``, whitespace collapsed), implemented once for the whole package."""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable, List

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """The official script's ``normalize_answer``.

    >>> normalize_answer("The  Denver Broncos!")
    'denver broncos'
    >>> normalize_answer("an Apple, a day")
    'apple day'
    """
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised strings are equal.

    >>> exact_match("the Broncos", "Broncos."), exact_match("Broncos", "Denver Broncos")
    (1.0, 0.0)
    """
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    """Token F1 of the normalised strings (0 when either is empty and they differ), as the official script.

    >>> round(f1_score("Denver Broncos", "the Broncos"), 4)
    0.6667
    >>> f1_score("", ""), f1_score("x", "")
    (1.0, 0.0)
    """
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = Counter(pred) & Counter(ref)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def best_over(metric, prediction: str, golds: Iterable[str]) -> float:
    """The best value of ``metric(prediction, gold)`` over the gold answers (the official script's max).

    >>> best_over(exact_match, "Broncos", ["Denver Broncos", "the Broncos"])
    1.0
    """
    values: List[float] = [metric(prediction, g) for g in golds]
    if not values:
        raise ValueError("best_over: no gold answers given")
    return max(values)
