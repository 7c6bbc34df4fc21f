"""Why did a passage match? Relevance of passage tokens under late interaction, as pure numpy functions.

For one query and one passage, ``sim [N_q, L]`` holds the similarity of each scoring query vector to each
passage token (rows: the query vectors that take part in the score; columns: the passage layout
``[CLS] [D] d1 … dn [SEP]``). Each query vector *matches* its top-k̃ most similar passage tokens:

* ``R_abs(l)``: how many query vectors have token ``l`` among their top-k̃ (a count; sums to k̃·N_q);
* ``R_acc(l)``: the sum of those similarities instead of the count;
* KDE: the k̃·N_q matched positions, minus those on ``[CLS]``/``[D]``/``[SEP]``, are a 1-D sample over token
  positions; a Gaussian kernel density over it marks the region most likely to hold the answer, and the
  contiguous run of tokens around its peak (density ≥ ``span_threshold`` × peak, widened to whole words) is the
  answer span.

Word pieces are merged back into words of the original text with the tokenizer's character offsets, so every
token-level score also has a word-level version and every span has character offsets a UI can highlight.
:mod:`pyterrier_fandom_colbert.explain.transformer` applies this to PyTerrier frames.
"""
from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

from ..checks import positive_int, real_in_range
from ..storage import JsonConfig

#: bandwidth rules (as in ``scipy.stats.gaussian_kde``: Scott n^(-1/5)·σ, Silverman (3n/4)^(-1/5)·σ, σ with ddof=1)
BANDWIDTH_RULES = ("scott", "silverman")
#: rule-of-thumb bandwidths are never narrower than this many tokens (a sample on one position has σ = 0)
MIN_BANDWIDTH = 0.5
#: number of special positions at the start ([CLS] [D]) and end ([SEP]) of every passage layout
_LEADING_SPECIALS, _TRAILING_SPECIALS = 2, 1


@dataclass(frozen=True)
class ExplainOptions(JsonConfig):
    """How passages are explained.

    >>> ExplainOptions(bandwidth=3).bandwidth
    3.0
    >>> ExplainOptions(bandwidth="wide")
    Traceback (most recent call last):
    ...
    ValueError: bandwidth='wide' is not supported; expected 'scott', 'silverman' or a positive number of tokens
    """

    #: each query vector matches its k̃ most similar passage tokens
    k_tilde: int = 2
    #: KDE bandwidth: "scott", "silverman" or a number of tokens
    bandwidth: Union[str, float] = "scott"
    #: the answer span is the run around the density peak where density ≥ span_threshold × peak
    span_threshold: float = 0.5
    #: at most this many word pieces (then widened to whole words): the densest part of that run, so a long
    #: passage whose density is flat gets a span, not the whole passage (None: no limit)
    max_span: Optional[int] = 64

    def __post_init__(self) -> None:
        positive_int("k_tilde", self.k_tilde, what="the study uses 2")
        bw = self.bandwidth
        if isinstance(bw, str):
            if bw not in BANDWIDTH_RULES:
                raise ValueError(f"bandwidth={bw!r} is not supported; expected 'scott', 'silverman' or a positive "
                                 "number of tokens")
        else:
            object.__setattr__(self, "bandwidth", real_in_range(
                "bandwidth", bw, 0.0, above=True, what="'scott', 'silverman' or a number of tokens"))
        real_in_range("span_threshold", self.span_threshold, 0.0, 1.0, above=True, what="a fraction of the peak "
                      "density")
        positive_int("max_span", self.max_span, none=True, what="word pieces in the answer span")


# -- relevance of passage tokens ---------------------------------------------------------------------------------
def rows_to_layout(sim_rows: np.ndarray, positions: np.ndarray, length: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(sim [N_q, length], d_mask [length])`` of a passage layout from the similarities ``sim_rows [N_q, R]`` of
    its stored rows, row ``r`` being layout position ``positions[r]``.

    A text read as overlapping windows has several rows (vectors) for one position; a position takes its best
    row for each query vector, so each query vector's maximum over the layout is its maximum over all rows: the
    MaxSim the index scores. Positions without a row do not score (``d_mask`` False, similarity 0).

    >>> sim, mask = rows_to_layout(np.array([[.1, .5, .3, .9]]), np.array([0, 1, 1, 3]), 5)
    >>> sim.tolist(), mask.tolist()
    ([[0.1, 0.5, 0.0, 0.9, 0.0]], [True, True, False, True, False])
    """
    sim_rows = np.asarray(sim_rows, dtype=np.float64)
    positions = np.asarray(positions, dtype=np.int64)
    if sim_rows.ndim != 2 or sim_rows.shape[1] != len(positions):
        raise ValueError(f"sim_rows has shape {sim_rows.shape} but there are {len(positions)} row positions")
    if len(positions) and not (positions.min() >= 0 and positions.max() < length):
        raise ValueError(f"row positions must lie in [0, {length}); got {positions.min()} to {positions.max()}")
    d_mask = np.zeros(length, dtype=bool)
    d_mask[positions] = True
    sim = np.full((sim_rows.shape[0], length), -np.inf)
    if len(np.unique(positions)) == len(positions):
        sim[:, positions] = sim_rows
    else:
        np.maximum.at(sim.T, positions, sim_rows.T)
    sim[:, ~d_mask] = 0.0
    return sim, d_mask


def top_matches(sim: np.ndarray, d_mask: Optional[np.ndarray] = None, k: int = 2) -> Tuple[np.ndarray, np.ndarray]:
    """Positions ``[N_q, k']`` and similarities of each query vector's ``k`` most similar passage tokens.

    Only tokens where ``d_mask`` is True can match (padding and skipped punctuation cannot); ``k' = min(k,
    number of such tokens)``. Ties go to the earlier position.

    >>> sim = np.array([[0.1, 0.9, 0.5], [0.7, 0.2, 0.8]])
    >>> top_matches(sim, k=2)[0].tolist()
    [[1, 2], [2, 0]]
    >>> top_matches(sim, np.array([True, False, True]), k=5)[0].tolist()
    [[2, 0], [2, 0]]
    """
    sim = np.asarray(sim, dtype=np.float64)
    allowed = np.ones(sim.shape[1], dtype=bool) if d_mask is None else np.asarray(d_mask, dtype=bool)
    k = min(int(k), int(allowed.sum()))
    masked = np.where(allowed[None, :], sim, -np.inf)
    order = np.argsort(-masked, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(sim, order, axis=1)


def relevance_abs(positions: np.ndarray, length: int) -> np.ndarray:
    """``R_abs``: per passage token, how many query vectors matched it.

    >>> relevance_abs(np.array([[1, 2], [2, 0]]), 4).tolist()
    [1, 1, 2, 0]
    """
    return np.bincount(np.asarray(positions, dtype=np.int64).ravel(), minlength=length).astype(np.int64)


def relevance_acc(positions: np.ndarray, similarities: np.ndarray, length: int) -> np.ndarray:
    """``R_acc``: per passage token, the sum of the similarities of the matches it received.

    >>> relevance_acc(np.array([[1, 2], [2, 0]]), np.array([[0.9, 0.5], [0.8, 0.7]]), 4).round(6).tolist()
    [0.7, 0.9, 1.3, 0.0]
    """
    return np.bincount(np.asarray(positions, dtype=np.int64).ravel(),
                       weights=np.asarray(similarities, dtype=np.float64).ravel(), minlength=length)


# -- kernel density over matched positions -----------------------------------------------------------------------
def kde_bandwidth(samples: np.ndarray, bandwidth: Union[str, float] = "scott") -> float:
    """Kernel width in tokens: a number as given, or Scott's / Silverman's rule (scipy's definitions), never below
    :data:`MIN_BANDWIDTH`.

    >>> round(kde_bandwidth(np.array([1., 2, 2, 3, 10]), "scott"), 4)  # σ=3.6469 · 5^(-1/5)
    2.6432
    >>> kde_bandwidth(np.array([4., 4, 4]), "silverman")  # σ = 0: the floor
    0.5
    >>> kde_bandwidth(np.array([4., 4]), 3)
    3.0
    """
    if not isinstance(bandwidth, str):
        return float(bandwidth)
    samples = np.asarray(samples, dtype=np.float64)
    n = len(samples)
    sigma = float(np.std(samples, ddof=1)) if n > 1 else 0.0
    factor = n ** (-1 / 5) if bandwidth == "scott" else (n * 3 / 4) ** (-1 / 5)
    return max(sigma * factor, MIN_BANDWIDTH)


def kde_density(samples: np.ndarray, length: int, bandwidth: Union[str, float] = "scott") -> np.ndarray:
    """Gaussian kernel density of ``samples`` (token positions) evaluated at positions ``0 … length-1``.

    ``f(x) = 1/(n·h·√(2π)) · Σ_i exp(−(x − x_i)² / (2h²))``; all zeros for an empty sample.

    >>> d = kde_density(np.array([5., 5, 6, 20]), 25, bandwidth=1.0)
    >>> int(d.argmax()), bool(d[20] < d[5])
    (5, True)
    >>> kde_density(np.array([]), 3).tolist()
    [0.0, 0.0, 0.0]
    """
    samples = np.asarray(samples, dtype=np.float64)
    if len(samples) == 0:
        return np.zeros(length, dtype=np.float64)
    h = kde_bandwidth(samples, bandwidth)
    z = (np.arange(length, dtype=np.float64)[:, None] - samples[None, :]) / h
    return np.exp(-0.5 * z * z).sum(axis=1) / (len(samples) * h * math.sqrt(2 * math.pi))


def density_span(density: np.ndarray, content: np.ndarray, threshold: float = 0.5,
                 max_width: Optional[int] = None) -> Optional[Tuple[int, int]]:
    """Token span ``(start, end)`` (end exclusive) of the contiguous content run around the highest density where
    density ≥ ``threshold`` × peak, grown from the peak towards the denser side and at most ``max_width`` tokens
    wide; ``None`` when no content token has positive density.

    >>> density_span(np.array([0.9, 0.1, 0.3, 0.8, 0.5, 0.2]), np.array([False, True, True, True, True, True]))
    (3, 5)
    >>> density_span(np.array([0.0, 0.6, 0.7, 0.9, 0.8, 0.6]), np.ones(6, dtype=bool), max_width=3)
    (2, 5)
    """
    content = np.asarray(content, dtype=bool)
    masked = np.where(content, density, -np.inf)
    peak = int(np.argmax(masked)) if len(masked) else 0
    if not len(masked) or not content[peak] or masked[peak] <= 0:
        return None
    inside = content & (np.asarray(density) >= threshold * masked[peak])
    start, end = peak, peak + 1
    limit = len(inside) if max_width is None else max_width
    while end - start < limit:
        left = density[start - 1] if start > 0 and inside[start - 1] else None
        right = density[end] if end < len(inside) and inside[end] else None
        if left is None and right is None:
            break
        if right is None or (left is not None and left > right):
            start -= 1
        else:
            end += 1
    return start, end


# -- words of the original text ----------------------------------------------------------------------------------
def layout_content_mask(length: int) -> np.ndarray:
    """True for the word-piece positions of a ``[CLS] [D] d1 … dn [SEP]`` layout of ``length`` tokens.

    >>> layout_content_mask(5).tolist()
    [False, False, True, True, False]
    """
    mask = np.zeros(length, dtype=bool)
    mask[_LEADING_SPECIALS:max(_LEADING_SPECIALS, length - _TRAILING_SPECIALS)] = True
    return mask


def _word_class(ch: str) -> bool:
    """True for characters that belong inside words (letters, digits, combining marks)."""
    return ch.isalnum() or unicodedata.category(ch).startswith("M")


def merge_words(text: str, offsets: np.ndarray, content: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Group word pieces into words of ``text``: ``(word_of_token [L] (-1 off content), word_spans [W, 2])``.

    A piece joins the current word when it overlaps it (byte-level pieces of one character) or starts where it
    ends with a character of the same class on both sides (letters/digits/marks, or punctuation), so
    ``"Ørnvik—twice!"`` is the words ``Ørnvik``, ``—``, ``twice``, ``!``. Spans exclude surrounding whitespace;
    a piece with no visible characters joins the word that follows it. Tokens off ``content``, and pieces of a
    text without any visible character, get word -1.

    >>> text = "Zoë visited Ørnvik—twice!"
    >>> offs = np.array([[0, 3], [4, 11], [12, 13], [13, 15], [15, 18], [18, 19], [19, 24], [24, 25]])
    >>> words, spans = merge_words(text, offs, np.ones(8, dtype=bool))
    >>> words.tolist(), [text[s:e] for s, e in spans]
    ([0, 1, 2, 2, 2, 3, 4, 5], ['Zoë', 'visited', 'Ørnvik', '—', 'twice', '!'])
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    word_of = np.full(len(offsets), -1, dtype=np.int64)
    spans: List[Tuple[int, int]] = []
    empty: List[int] = []  # zero-width pieces (e.g. a lone byte-level space marker) belong to the word that follows
    for pos in np.flatnonzero(np.asarray(content, dtype=bool)).tolist():
        start, end = int(offsets[pos, 0]), int(offsets[pos, 1])
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end <= start:
            empty.append(pos)
            continue
        if spans and (start < spans[-1][1] or (start == spans[-1][1] and not empty and
                                               _word_class(text[start - 1]) == _word_class(text[start]))):
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
        word_of[[*empty, pos]] = len(spans) - 1
        empty = []
    if empty and spans:
        word_of[empty] = len(spans) - 1
    return word_of, np.array(spans, dtype=np.int64).reshape(-1, 2)


def word_scores(values: np.ndarray, word_of_token: np.ndarray, num_words: int, how: str = "sum") -> np.ndarray:
    """Token scores pooled per word (``sum``, ``mean`` or ``max`` over its pieces; NaN pieces ignored by ``max``).

    >>> word_scores(np.array([9., 1, 2, 4]), np.array([-1, 0, 0, 1]), 2, "mean").tolist()
    [1.5, 4.0]
    """
    values = np.asarray(values, dtype=np.float64)
    keep = np.asarray(word_of_token) >= 0
    words, vals = np.asarray(word_of_token)[keep], values[keep]
    if how == "max":
        out = np.full(num_words, -np.inf)
        np.fmax.at(out, words, vals)
        return np.where(np.isinf(out), np.nan, out)
    total = np.bincount(words, weights=vals, minlength=num_words)
    if how == "sum":
        return total
    if how == "mean":
        return total / np.maximum(np.bincount(words, minlength=num_words), 1)
    raise ValueError(f"how={how!r}; expected 'sum', 'mean' or 'max'")


def widen_to_words(span: Tuple[int, int], word_of_token: np.ndarray) -> Tuple[int, int]:
    """Widen a token span so it starts and ends on word boundaries.

    >>> widen_to_words((3, 4), np.array([-1, -1, 0, 1, 1, 1, 2, -1]))
    (3, 6)
    """
    words = np.asarray(word_of_token)
    start, end = span
    first, last = words[start], words[end - 1]
    while start > 0 and words[start - 1] == first:
        start -= 1
    while end < len(words) and words[end] == last:
        end += 1
    return int(start), int(end)


# -- single-token view -------------------------------------------------------------------------------------------
def _bare(token: str) -> str:
    return token.lstrip("#").replace("Ġ", "").replace("▁", "").lower()


def select_query_token(query_tokens: Sequence[str], which: Union[int, str]) -> int:
    """Row of the query token ``which``: a position in ``query_tokens``, or a token string (first occurrence;
    matched without case or word-piece prefixes ``##``/``Ġ``/``▁``).

    >>> select_query_token(["[CLS]", "[Q]", "when", "was", "it", "[SEP]"], "When")
    2
    >>> select_query_token(["[CLS]", "[Q]", "when"], "where")
    Traceback (most recent call last):
    ...
    ValueError: query token 'where' is not among the query tokens ['[CLS]', '[Q]', 'when']; give one of them ...
    """
    tokens = list(query_tokens)
    if isinstance(which, (int, np.integer)) and not isinstance(which, bool):
        if not 0 <= which < len(tokens):
            raise ValueError(f"query token position {which} is out of range; expected 0 … {len(tokens) - 1} "
                             f"for query tokens {tokens}")
        return int(which)
    if isinstance(which, str):
        for i, tok in enumerate(tokens):
            if tok == which or _bare(tok) == _bare(which):
                return i
        raise ValueError(f"query token {which!r} is not among the query tokens {tokens}; give one of them or a "
                         f"position 0 … {len(tokens) - 1}")
    raise ValueError(f"query token {which!r}; expected a position (int) or a token string")


def single_token_view(sim: np.ndarray, query_tokens: Sequence[str], which: Union[int, str]) -> np.ndarray:
    """Similarity of every passage token to one query token (a row of ``sim``).

    >>> single_token_view(np.array([[0.1, 0.2], [0.7, 0.3]]), ["[Q]", "when"], "when").tolist()
    [0.7, 0.3]
    """
    return np.asarray(sim)[select_query_token(query_tokens, which)]


# -- everything for one passage ----------------------------------------------------------------------------------
@dataclass
class PassageExplanation:
    """Token- and word-level relevance of one passage for one query (see the module docstring)."""

    r_abs: np.ndarray                       # [L] int64
    r_acc: np.ndarray                       # [L] float64
    kde: np.ndarray                         # [L] float64 density at each position
    matches: np.ndarray                     # [N_q, k'] matched positions per query vector
    word_of_token: np.ndarray               # [L] word index, -1 for [CLS]/[D]/[SEP]
    word_spans: np.ndarray                  # [W, 2] character spans of the words
    word_r_abs: np.ndarray                  # [W] sum over the word's pieces
    word_r_acc: np.ndarray                  # [W] sum over the word's pieces
    word_kde: np.ndarray                    # [W] mean over the word's pieces
    answer_tokens: Optional[Tuple[int, int]]  # token span (end exclusive), widened to whole words
    answer_span: Optional[Tuple[int, int]]    # its character span in the text


def explain_passage(sim: np.ndarray, d_mask: np.ndarray, text: str, offsets: np.ndarray,
                    options: ExplainOptions = ExplainOptions()) -> PassageExplanation:
    """Explain one passage from its similarity matrix ``sim [N_q, L]`` (rows: scoring query vectors).

    ``d_mask [L]``: tokens that can match (they have a scoring vector); ``offsets [L, 2]``: character spans of the
    layout's tokens in ``text``.

    >>> text = "the storm came in 1999"
    >>> offs = np.array([[0, 0], [0, 0], [0, 3], [4, 9], [10, 14], [15, 17], [18, 22], [0, 0]])
    >>> sim = np.array([[.1, .1, .0, .2, .9, .8, .1, .1], [.1, .1, .0, .1, .7, .9, .2, .1]])
    >>> e = explain_passage(sim, np.ones(8, bool), text, offs, ExplainOptions(bandwidth=1.0))
    >>> e.r_abs.tolist(), text[slice(*e.answer_span)]
    ([0, 0, 0, 0, 2, 2, 0, 0], 'came in')
    """
    sim = np.asarray(sim, dtype=np.float64)
    length = sim.shape[1]
    if len(d_mask) != length or len(offsets) != length:
        raise ValueError(f"sim has {length} passage tokens but d_mask has {len(d_mask)} and offsets "
                         f"{len(offsets)}; they must describe the same tokens")
    content = layout_content_mask(length)
    positions, similarities = top_matches(sim, d_mask, options.k_tilde)
    sample = positions.ravel()
    density = kde_density(sample[content[sample]], length, options.bandwidth)
    word_of, spans = merge_words(text, offsets, content)
    r_abs, r_acc = relevance_abs(positions, length), relevance_acc(positions, similarities, length)
    tokens = density_span(density, content, options.span_threshold, options.max_span)
    if tokens is not None and len(spans):
        tokens = widen_to_words(tokens, word_of)
        chars = (int(spans[word_of[tokens[0]], 0]), int(spans[word_of[tokens[1] - 1], 1]))
    else:
        tokens, chars = None, None
    return PassageExplanation(
        r_abs=r_abs, r_acc=r_acc, kde=density, matches=positions, word_of_token=word_of, word_spans=spans,
        word_r_abs=word_scores(r_abs, word_of, len(spans)).astype(np.int64),
        word_r_acc=word_scores(r_acc, word_of, len(spans)),
        word_kde=word_scores(density, word_of, len(spans), "mean"),
        answer_tokens=tokens, answer_span=chars)
