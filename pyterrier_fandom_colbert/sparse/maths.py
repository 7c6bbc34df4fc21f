"""SPLADE maths as pure functions: pooling masked-LM logits into term weights, sparse rows (top-k selection and
slice concatenation are :mod:`pyterrier_fandom_colbert.ranking`'s).

A BERT masked-LM gives, for every input token i and vocabulary entry j, a logit ``logit_ij``. SPLADE turns a
text into one vocabulary-sized vector

    w_j = max over the (unpadded) input tokens i of log(1 + ReLU(logit_ij))

which is non-negative and mostly zero. Since ``log(1 + ReLU(x))`` never decreases as x grows, the maximum can be
taken over the logits first and the activation applied once per vocabulary entry (same numbers, one activation
per entry instead of one per token and entry).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse as sp
    import torch


def splade_pool(logits: "torch.Tensor", attention_mask: "torch.Tensor", inplace: bool = False) -> "torch.Tensor":
    """``[batch, tokens, vocab]`` logits and a ``[batch, tokens]`` 0/1 mask → ``[batch, vocab]`` SPLADE weights.

    ``inplace=True`` overwrites the padding positions of ``logits`` instead of copying the (large) tensor.

    >>> import torch
    >>> logits = torch.tensor([[[1.0, -2.0, 0.0], [3.0, 0.5, -1.0], [9.0, 9.0, 9.0]]])
    >>> mask = torch.tensor([[1, 1, 0]])          # the third token is padding: its 9s are ignored
    >>> splade_pool(logits, mask)                 # log(1 + 3) = 1.3863, log(1 + 0.5) = 0.4055, log(1 + 0) = 0
    tensor([[1.3863, 0.4055, 0.0000]])
    >>> splade_pool(logits, torch.tensor([[0, 0, 0]]))   # no token at all: an all-zero vector
    tensor([[0., 0., 0.]])
    """
    import torch

    if logits.dim() != 3 or attention_mask.shape != logits.shape[:2]:
        raise ValueError(f"logits of shape {tuple(logits.shape)} and mask of shape {tuple(attention_mask.shape)}: "
                         "expected [batch, tokens, vocab] and [batch, tokens]")
    padding = ~attention_mask.bool().unsqueeze(-1)
    masked = logits.masked_fill_(padding, float("-inf")) if inplace else logits.masked_fill(padding, float("-inf"))
    return torch.log1p(torch.relu(masked.amax(dim=1)))


def sparse_rows(weights: np.ndarray, min_weight: float = 0.0) -> "sp.csr_matrix":
    """Dense ``[n, vocab]`` weights → CSR float32 keeping the entries strictly above ``min_weight``.

    >>> sparse_rows(np.array([[0.0, 0.5, 0.02], [0.0, 0.0, 0.0]]), min_weight=0.05).toarray().tolist()
    [[0.0, 0.5, 0.0], [0.0, 0.0, 0.0]]
    """
    import scipy.sparse as sp

    weights = np.asarray(weights, dtype=np.float32)
    return sp.csr_matrix(np.where(weights > min_weight, weights, np.float32(0.0)))


def row_dicts(matrix: "sp.csr_matrix", vocab: Sequence[str]) -> List[Dict[str, float]]:
    """Each CSR row as ``{term: weight}`` (PyTerrier's ``toks``/``query_toks`` convention), terms by id order.

    >>> import scipy.sparse as sp
    >>> row_dicts(sp.csr_matrix(np.array([[0, 1.5, 0], [2.0, 0, 0.25]], dtype=np.float32)), ["a", "b", "c"])
    [{'b': 1.5}, {'a': 2.0, 'c': 0.25}]
    """
    matrix = matrix.tocsr()
    matrix.sort_indices()
    out = []
    for r in range(matrix.shape[0]):
        lo, hi = matrix.indptr[r], matrix.indptr[r + 1]
        out.append({vocab[j]: float(w) for j, w in zip(matrix.indices[lo:hi], matrix.data[lo:hi])})
    return out
