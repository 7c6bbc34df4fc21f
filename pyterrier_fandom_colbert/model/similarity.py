"""Token similarities as small registered objects.

A :class:`Similarity` compares query and document token vectors (:meth:`~Similarity.matrix`, and the transposed
:meth:`~Similarity.token_matrix` the re-ranker uses) and says how to find the most similar stored tokens with
FAISS (:attr:`~Similarity.faiss_metric_name`, and whether vectors are unit-normalised for that search).
``ColBERTConfig.similarity`` names one of :data:`SIMILARITIES`; the scoring functions take a name or an object.

Adding a similarity is one frozen subclass here, registered with :func:`register_similarity`:

>>> sorted(SIMILARITIES)
['cosine', 'dot', 'l2', 'l2_normalised']
>>> get_similarity("l2_normalised").normalise_for_search
True

Torch and FAISS are imported inside the methods: importing this module (and the configuration) stays cheap.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Union

if TYPE_CHECKING:  # pragma: no cover
    import torch


@dataclass(frozen=True)
class Similarity:
    """How token vectors are compared. Subclasses implement :meth:`matrix` and :meth:`token_matrix`."""

    #: the name ``ColBERTConfig.similarity`` and the scoring functions use
    name: str
    #: the ``faiss`` metric constant whose nearest neighbours are the most similar tokens
    faiss_metric_name: str
    #: unit-normalise stored and query vectors before a nearest-neighbour search with that metric
    normalise_for_search: bool

    def matrix(self, q: "torch.Tensor", d: "torch.Tensor") -> "torch.Tensor":
        """Pairwise similarities ``[..., Lq, Ld]`` between ``q [..., Lq, dim]`` and ``d [..., Ld, dim]``."""
        raise NotImplementedError

    def token_matrix(self, tokens: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
        """``matrix(q, tokens).T`` (``[T, Lq]``) for many document ``tokens [T, dim]`` against one query
        ``q [Lq, dim]``, computed as ``tokens @ qᵀ`` (~1.5x faster on CPU in that orientation)."""
        raise NotImplementedError

    def dot_query(self, q: "torch.Tensor") -> "torch.Tensor":
        """The query vectors that :meth:`from_dots` wants the document tokens' dot products with (``q`` itself;
        unit vectors for the similarities that normalise)."""
        return q

    def from_dots(self, dots: "torch.Tensor", norms: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
        """:meth:`token_matrix` (``[T, Lq]``) from ``dots = tokens @ dot_query(q).T`` and the tokens' L2
        ``norms [T]`` (``dots`` may be overwritten): how a compressed index scores tokens it never decompresses."""
        raise NotImplementedError

    def faiss_metric(self) -> int:
        """The FAISS metric (``faiss.METRIC_*``) giving the same neighbours as this similarity."""
        import faiss

        return getattr(faiss, self.faiss_metric_name)


def _unit(x: "torch.Tensor") -> "torch.Tensor":
    import torch

    return torch.nn.functional.normalize(x, p=2.0, dim=-1)


def _cosine_matrix(q: "torch.Tensor", d: "torch.Tensor") -> "torch.Tensor":
    import torch

    # divide the [Lq, Ld] products by the document norms rather than normalising the [Ld, dim] vectors:
    # the same cosines, with Lq instead of dim divisions per document token
    norms = torch.linalg.vector_norm(d, dim=-1).clamp_min(1e-12).unsqueeze(-2)
    return (_unit(q) @ d.transpose(-1, -2)) / norms


def _cosine_token_matrix(tokens: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
    import torch

    norms = torch.linalg.vector_norm(tokens, dim=-1, keepdim=True).clamp_min(1e-12)
    return (tokens @ _unit(q).T).div_(norms)


@dataclass(frozen=True)
class Cosine(Similarity):
    """Cosine of the angle. Nearest tokens: inner product of unit vectors.

    >>> import torch
    >>> Cosine().matrix(torch.tensor([[3., 4.]]), torch.tensor([[3., 4.], [0., 1.]]))
    tensor([[1.0000, 0.8000]])
    """

    name: str = "cosine"
    faiss_metric_name: str = "METRIC_INNER_PRODUCT"
    normalise_for_search: bool = True

    def matrix(self, q: "torch.Tensor", d: "torch.Tensor") -> "torch.Tensor":
        return _cosine_matrix(q, d)

    def token_matrix(self, tokens: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
        return _cosine_token_matrix(tokens, q)

    def dot_query(self, q: "torch.Tensor") -> "torch.Tensor":
        return _unit(q)

    def from_dots(self, dots: "torch.Tensor", norms: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
        return dots.div_(norms.clamp_min(1e-12).unsqueeze(-1))


@dataclass(frozen=True)
class L2(Similarity):
    """Negated squared L2 distance. Nearest tokens: L2 over the vectors as they are.

    >>> import torch
    >>> L2().matrix(torch.tensor([[3., 4.]]), torch.tensor([[3., 4.], [0., 1.]]))
    tensor([[ -0., -18.]])
    """

    name: str = "l2"
    faiss_metric_name: str = "METRIC_L2"
    normalise_for_search: bool = False

    def matrix(self, q: "torch.Tensor", d: "torch.Tensor") -> "torch.Tensor":
        dots = q @ d.transpose(-1, -2)
        qq = (q * q).sum(-1, keepdim=True)
        dd = (d * d).sum(-1).unsqueeze(-2)
        return -(qq - 2.0 * dots + dd).clamp_min(0.0)

    def token_matrix(self, tokens: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
        dots = tokens @ q.T
        tt = (tokens * tokens).sum(-1, keepdim=True)
        qq = (q * q).sum(-1)
        return -(tt - 2.0 * dots + qq).clamp_min(0.0)

    def from_dots(self, dots: "torch.Tensor", norms: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
        qq = (q * q).sum(-1)
        return dots.mul_(-2.0).add_((norms * norms).unsqueeze(-1)).add_(qq).clamp_min_(0.0).neg_()


@dataclass(frozen=True)
class L2Normalised(Similarity):
    """Negated squared L2 distance of the unit-normalised vectors (= 2·cosine − 2), so it ranks as cosine does.

    >>> import torch
    >>> L2Normalised().matrix(torch.tensor([[3., 4.]]), torch.tensor([[3., 4.], [0., 1.]]))
    tensor([[ 0.0000, -0.4000]])
    """

    name: str = "l2_normalised"
    faiss_metric_name: str = "METRIC_INNER_PRODUCT"
    normalise_for_search: bool = True

    def matrix(self, q: "torch.Tensor", d: "torch.Tensor") -> "torch.Tensor":
        return 2.0 * _cosine_matrix(q, d) - 2.0

    def token_matrix(self, tokens: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
        return _cosine_token_matrix(tokens, q).mul_(2.0).sub_(2.0)

    def dot_query(self, q: "torch.Tensor") -> "torch.Tensor":
        return _unit(q)

    def from_dots(self, dots: "torch.Tensor", norms: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
        return dots.div_(norms.clamp_min(1e-12).unsqueeze(-1)).mul_(2.0).sub_(2.0)


@dataclass(frozen=True)
class Dot(Similarity):
    """Plain inner product of the vectors as they are. Nearest tokens: inner product, no normalisation.

    >>> import torch
    >>> Dot().matrix(torch.tensor([[3., 4.]]), torch.tensor([[3., 4.], [0., 1.]]))
    tensor([[25.,  4.]])
    """

    name: str = "dot"
    faiss_metric_name: str = "METRIC_INNER_PRODUCT"
    normalise_for_search: bool = False

    def matrix(self, q: "torch.Tensor", d: "torch.Tensor") -> "torch.Tensor":
        return q @ d.transpose(-1, -2)

    def token_matrix(self, tokens: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
        return tokens @ q.T

    def from_dots(self, dots: "torch.Tensor", norms: "torch.Tensor", q: "torch.Tensor") -> "torch.Tensor":
        return dots


#: registered similarities by name, in registration order
SIMILARITIES: Dict[str, Similarity] = {}


def register_similarity(similarity: Similarity) -> Similarity:
    """Make ``similarity`` available by its name (to ``ColBERTConfig`` and the scoring functions)."""
    if not isinstance(similarity, Similarity):
        raise TypeError(f"{similarity!r} is not a Similarity")
    known = SIMILARITIES.get(similarity.name)
    if known is not None and known != similarity:
        raise ValueError(f"similarity name {similarity.name!r} is already registered as {known!r}")
    SIMILARITIES[similarity.name] = similarity
    return similarity


for _similarity in (Cosine(), L2(), L2Normalised(), Dot()):
    register_similarity(_similarity)


def get_similarity(similarity: Union[str, Similarity]) -> Similarity:
    """The :class:`Similarity` registered under a name (an object is returned as it is).

    >>> get_similarity("cosine") is SIMILARITIES["cosine"]
    True
    >>> get_similarity("manhattan")
    Traceback (most recent call last):
    ...
    ValueError: similarity='manhattan' is not supported; expected one of ('cosine', 'l2', 'l2_normalised', 'dot')
    """
    if isinstance(similarity, Similarity):
        return similarity
    found = SIMILARITIES.get(similarity) if isinstance(similarity, str) else None
    if found is None:
        raise ValueError(f"similarity={similarity!r} is not supported; expected one of {tuple(SIMILARITIES)}")
    return found
