"""Helpers shared by exact search over fp16 vectors (:mod:`.fp16.search`) and over compressed codes
(:mod:`.residual.search`): grouping documents into (padded) blocks, and refusing non-finite query vectors."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Sequence, Tuple

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    import torch


def padded_blocks(lengths: np.ndarray, max_tokens: int) -> List[Tuple[int, int]]:
    """Consecutive ``(start, end)`` ranges of documents with *ascending* ``lengths`` such that each range padded
    to its longest document, ``(end - start) · lengths[end - 1]``, holds at most ``max_tokens`` rows (a longer
    document gets a range of its own).

    >>> padded_blocks(np.array([1, 2, 2, 5]), 6)
    [(0, 3), (3, 4)]
    >>> padded_blocks(np.array([9, 9]), 4)
    [(0, 1), (1, 2)]
    """
    blocks, start, n = [], 0, len(lengths)
    while start < n:
        padded = (np.arange(start + 1, n + 1) - start) * lengths[start:]
        end = start + max(1, int(np.searchsorted(padded, max_tokens, side="right")))
        blocks.append((start, end))
        start = end
    return blocks


def token_blocks(lengths: np.ndarray, max_tokens: int) -> List[Tuple[int, int]]:
    """Consecutive ``(start, end)`` ranges of documents (in the given order, unpadded) holding at most
    ``max_tokens`` token rows together (a longer document gets a range of its own).

    >>> token_blocks(np.array([3, 2, 4, 9, 1]), 5)
    [(0, 2), (2, 3), (3, 4), (4, 5)]
    """
    ends = np.cumsum(lengths)
    blocks, start, n = [], 0, len(lengths)
    while start < n:
        done = int(ends[start - 1]) if start else 0
        end = max(start + 1, int(np.searchsorted(ends, done + max_tokens, side="right")))
        blocks.append((start, end))
        start = end
    return blocks


def doc_spans(offsets: np.ndarray, doc_ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(starts, lengths)`` int64: each of ``doc_ids``' first token row and token count, from ``offsets``.

    >>> starts, lengths = doc_spans(np.array([0, 4, 5, 7]), np.array([2, 0]))
    >>> starts.tolist(), lengths.tolist()
    ([5, 0], [2, 4])
    """
    starts = np.asarray(offsets[doc_ids], dtype=np.int64)
    return starts, np.asarray(offsets[doc_ids + 1], dtype=np.int64) - starts


def length_sorted_blocks(offsets: np.ndarray, doc_ids: np.ndarray, max_tokens: int
                         ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, List[Tuple[int, int]]]:
    """``(starts, lengths, order, blocks)`` for scoring ``doc_ids`` shortest first: each document's first row and
    length from ``offsets``, the stable order by length, and :func:`padded_blocks` of that order.

    >>> starts, lengths, order, blocks = length_sorted_blocks(np.array([0, 4, 5, 7]), np.array([0, 1, 2]), 4)
    >>> starts.tolist(), lengths.tolist(), order.tolist(), blocks
    ([0, 4, 5], [4, 1, 2], [1, 2, 0], [(0, 2), (2, 3)])
    """
    starts, lengths = doc_spans(offsets, doc_ids)
    order = np.argsort(lengths, kind="stable")
    return starts, lengths, order, padded_blocks(lengths[order], max_tokens)


def refuse_non_finite_queries(frame: pd.DataFrame, codes: np.ndarray, queries: Sequence["torch.Tensor"],
                              context: Any) -> None:
    """Refuse query vectors with NaN or inf values, naming the qid (before they could score anything)."""
    import torch

    for j, q in enumerate(queries):
        if not bool(torch.isfinite(q).all()):
            qid = frame["qid"].iloc[int(np.argmax(codes == j))]
            raise ValueError(f"{context}: query_embs of qid {qid!r} hold NaN or inf values; check the query encoder")
