"""Training losses as pure tensor functions (no model, no data plumbing).

A training batch is scored as one matrix: ``scores[i, j] = S(query_i, doc_j)`` (MaxSim, docs/method.md §2.2). Every loss
takes such scores, the index of the right column per row (``labels``), and optionally ``valid``: False for columns
that must not count for that row (e.g. an in-batch document that also answers the row's query).

* :func:`cross_entropy`: softmax cross-entropy over the (valid) columns of ``scale · scores``. With
  ``scale = N_q`` and mean-reduced scores this is the cross-entropy of the summed MaxSim, which the study needed
  to converge (QPP: rows are queries, columns documents; QQP: rows are documents, columns queries).
* :func:`mse_to_targets`: squared error between the raw scores (cosine MaxSim) and 1 for answering pairs, 0 for
  the others (the study's MSE variant).
* :func:`kl_distillation`: KL divergence from a teacher's score distribution to the student's (optional).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ..model.scoring import maxsim

LOSSES = ("ce", "mse")


def pairwise_scores(q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor,
                    similarity: str = "cosine", reduction: str = "mean") -> torch.Tensor:
    """MaxSim of every query against every document: ``q [B, Lq, dim]``, ``d [M, Ld, dim]`` -> ``[B, M]``.

    >>> q = torch.tensor([[[1., 0.], [0., 1.]]])                 # one query, two vectors
    >>> d = torch.tensor([[[1., 0.], [0., 0.]], [[0., 1.], [0.6, 0.8]]])
    >>> pairwise_scores(q, torch.tensor([[True, True]]), d, torch.tensor([[True, False], [True, True]]))
    tensor([[0.5000, 0.8000]])
    """
    return maxsim(q[:, None], d[None], q_mask[:, None], d_mask[None], similarity, reduction)


def aligned_scores(q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor,
                   similarity: str = "cosine", reduction: str = "mean") -> torch.Tensor:
    """MaxSim of each query against its own group of documents: ``q [B, Lq, dim]``, ``d [B, G, Ld, dim]`` ->
    ``[B, G]`` (only ``B·G`` pairs are scored, not ``B·B·G``).

    >>> q = torch.tensor([[[1., 0.]], [[0., 1.]]])
    >>> d = torch.tensor([[[[1., 0.]], [[0., 1.]]], [[[1., 0.]], [[0.6, 0.8]]]])
    >>> aligned_scores(q, torch.ones(2, 1, dtype=torch.bool), d, torch.ones(2, 2, 1, dtype=torch.bool))
    tensor([[1.0000, 0.0000],
            [0.0000, 0.8000]])
    """
    return maxsim(q[:, None], d, q_mask[:, None], d_mask, similarity, reduction)


def _masked(logits: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
    return logits if valid is None else logits.masked_fill(~valid, float("-inf"))


def cross_entropy(scores: torch.Tensor, labels: torch.Tensor, valid: Optional[torch.Tensor] = None,
                  scale: float = 1.0) -> torch.Tensor:
    """Mean over rows of ``-log softmax(scale · scores)[label]``, invalid columns left out of the softmax.

    Two candidates with scores 0.5 and 0.25, scale 8: ``-log(e^4 / (e^4 + e^2)) = log(1 + e^-2) = 0.1269``.

    >>> cross_entropy(torch.tensor([[0.5, 0.25]]), torch.tensor([0]), scale=8.0)
    tensor(0.1269)

    A column marked invalid (a second answering passage) is ignored, as if absent:

    >>> cross_entropy(torch.tensor([[0.5, 0.25, 0.9]]), torch.tensor([0]),
    ...               torch.tensor([[True, True, False]]), scale=8.0)
    tensor(0.1269)
    """
    if valid is not None and not bool(valid.gather(1, labels[:, None]).all()):
        raise ValueError("cross_entropy: a row's label column is marked invalid; the right answer must count")
    return F.cross_entropy(_masked(scale * scores, valid), labels)


def qqp_cross_entropy(pos_scores: torch.Tensor, neg_scores: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """QQP without in-batch candidates: ``N_q·S(q+, d+)`` against ``N_q·S(q-, d+)``, i.e. mean softplus of the
    scaled difference.

    ``S(q+,d+) = 0.75, S(q-,d+) = 0.5``, scale 4: ``log(1 + e^-1) = 0.3133``.

    >>> qqp_cross_entropy(torch.tensor([0.75]), torch.tensor([0.5]), scale=4.0)
    tensor(0.3133)
    """
    return F.softplus(scale * (neg_scores - pos_scores)).mean()


def mse_to_targets(scores: torch.Tensor, labels: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean squared error of the (cosine) scores against 1 at each row's label and 0 elsewhere, over valid cells.

    ``[[0.9, 0.2]]`` with label 0: ``((0.9 - 1)² + (0.2 - 0)²) / 2 = (0.01 + 0.04) / 2 = 0.025``.

    >>> mse_to_targets(torch.tensor([[0.9, 0.2]]), torch.tensor([0]))
    tensor(0.0250)
    >>> mse_to_targets(torch.tensor([[0.9, 0.2, 0.7]]), torch.tensor([0]), torch.tensor([[True, True, False]]))
    tensor(0.0250)
    """
    target = F.one_hot(labels, scores.shape[1]).to(scores.dtype)
    err = (scores - target) ** 2
    if valid is None:
        return err.mean()
    return err[valid].mean()


def kl_distillation(student_scores: torch.Tensor, teacher_scores: torch.Tensor,
                    valid: Optional[torch.Tensor] = None, student_scale: float = 1.0,
                    teacher_temperature: float = 1.0) -> torch.Tensor:
    """``KL(softmax(teacher / T) ‖ softmax(scale · student))`` per row, averaged over rows (valid columns only).

    Identical distributions give 0; teacher ``[0, 0]`` (uniform) against student logits ``[log 3, 0]``
    (probabilities 3/4, 1/4): ``½·log(½ / ¾) + ½·log(½ / ¼) = ½·log(4/3) = 0.1438``.

    >>> import math
    >>> kl_distillation(torch.tensor([[math.log(3.0), 0.0]]), torch.tensor([[0.0, 0.0]]))
    tensor(0.1438)
    >>> kl_distillation(torch.tensor([[2.0, 1.0]]), torch.tensor([[2.0, 1.0]]))
    tensor(0.)
    """
    student = F.log_softmax(_masked(student_scale * student_scores, valid), dim=-1)
    teacher = F.log_softmax(_masked(teacher_scores / teacher_temperature, valid), dim=-1)
    p = teacher.exp()
    terms = torch.where(p > 0, p * (teacher - student), torch.zeros_like(p))
    return terms.sum(-1).mean()
