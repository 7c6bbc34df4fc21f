"""The ANN kind interface and its registry, the user-facing :class:`FaissSpec`, and the helpers every kind
shares (search vectors, chunked adding, exact refinement of candidates).

A kind (:class:`AnnKind`, one instance registered per kind) owns everything that differs between ways of finding
the stored tokens nearest to a query vector: its FAISS factory string, its cache file name (or none), training,
search parameters, the options it accepts, whether it runs on GPU and whether its neighbours are exact.
Everything else (the spec, the cache, the retriever) asks the kind. A new kind is one module defining a subclass
and calling :func:`register_kind`, imported by ``index/ann/__init__.py``.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Dict, FrozenSet, Iterator, Optional, Tuple, Union

import numpy as np

from ...checks import positive_int
from ...model.similarity import Similarity, get_similarity
from ...progress import progress
from ...storage import JsonConfig

if TYPE_CHECKING:  # pragma: no cover
    import faiss
    import torch

#: spec fields a kind may accept (``None`` = not given)
SPEC_OPTIONS = ("nlist", "pq_m", "pq_bits", "train_size")
#: retriever options a kind may accept
SEARCH_OPTIONS = ("nprobe", "refine")
#: vectors converted to float32 at once while training/adding (bounds memory to ~32 MB at d = 128)
ADD_CHUNK = 65536


class AnnKind:
    """One way of finding nearest stored tokens. Subclasses set the class attributes and override methods."""

    #: the name users pass (``faiss="ivf"``)
    name: ClassVar[str]
    #: other names accepted for it
    aliases: ClassVar[Tuple[str, ...]] = ()
    #: neighbours are the exact nearest tokens (refining them changes nothing)
    exact: ClassVar[bool] = False
    #: which of :data:`SPEC_OPTIONS` and :data:`SEARCH_OPTIONS` the kind accepts
    options: ClassVar[FrozenSet[str]] = frozenset()
    #: copied to a GPU when FAISS has GPU support and sees one
    gpu: ClassVar[bool] = False
    #: lists visited when the user gives no ``nprobe`` (kinds accepting ``nprobe``)
    default_nprobe: ClassVar[Optional[int]] = None

    # -- the spec ------------------------------------------------------------------------------------------
    def check(self, spec: "FaissSpec") -> None:
        """Refuse spec values the kind cannot use beyond the options it does not accept at all (none here)."""

    def resolve(self, spec: "FaissSpec", num_tokens: int, dim: int) -> "FaissSpec":
        """``spec`` with every ``None`` this kind uses filled in for ``num_tokens`` vectors of ``dim``."""
        return spec

    def factory_string(self, spec: "FaissSpec") -> str:
        """The ``faiss.index_factory`` description of a resolved spec."""
        raise NotImplementedError

    def file_stem(self, spec: "FaissSpec") -> Optional[str]:
        """Cache file name (without suffix) of a resolved spec; ``None``: built on use and never cached."""
        return None

    # -- building and storing --------------------------------------------------------------------------------
    def build(self, vectors: np.ndarray, spec: "FaissSpec", similarity: Union[str, Similarity],
              verbose: bool = False) -> Any:
        """A FAISS index over ``vectors [T, d]`` (any float dtype, e.g. a fp16 memmap) for a resolved ``spec``.

        Row ``i`` of ``vectors`` gets id ``i``. Only one chunk of vectors is converted to float32 at a time (plus
        the training sample of trained kinds).
        """
        import faiss

        similarity = get_similarity(similarity)
        normalise = similarity.normalise_for_search
        index = faiss.index_factory(vectors.shape[1], self.factory_string(spec), similarity.faiss_metric())
        self.train(index, vectors, spec, normalise, verbose)
        for block in search_vector_chunks(vectors, normalise, verbose,
                                          f"adding tokens to FAISS {self.factory_string(spec)}"):
            index.add(block)
        return index

    def train(self, index: "faiss.Index", vectors: np.ndarray, spec: "FaissSpec", normalise: bool,
              verbose: bool) -> None:
        """Train ``index`` before vectors are added (nothing to do for untrained kinds)."""

    def read(self, path: Path) -> Any:
        import faiss

        return faiss.read_index(str(path))

    def write(self, index: Any, path: Path) -> None:
        """Write ``index`` to ``path``; a failed write (FAISS reports it as a RuntimeError with the C error text
        at the end) is an ``OSError`` naming the file, ``ENOSPC`` when the disk is full."""
        import faiss

        try:
            faiss.write_index(index, str(path))
        except RuntimeError as err:
            text = str(err)
            code = next((number for number, name in ((errno.ENOSPC, "No space left on device"),
                                                     (errno.EDQUOT, "Disk quota exceeded"),
                                                     (errno.EACCES, "Permission denied"),
                                                     (errno.EROFS, "Read-only file system")) if name in text),
                        errno.EIO)
            raise OSError(code, f"FAISS could not write the neighbour index ({os.strerror(code)})", str(path)) \
                from err

    def to_gpu_if_available(self, index: Any) -> Any:
        """A copy of ``index`` on GPU 0 when the kind runs on GPU and FAISS was built with GPU support and sees a
        GPU; else ``index`` itself."""
        if not self.gpu:
            return index
        import faiss

        if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
            return index
        resources = faiss.StandardGpuResources()
        gpu_index = faiss.index_cpu_to_gpu(resources, 0, index)
        # keep the resources alive as long as the index (faiss's SWIG objects take new attributes; its stubs do
        # not declare this one)
        gpu_index.referenced_resources = resources  # type: ignore[attr-defined]
        return gpu_index

    # -- searching -----------------------------------------------------------------------------------------
    def search_options(self, nprobe: Optional[int], refine: int) -> Tuple[Optional[int], int]:
        """The retriever's ``(nprobe, refine)`` for this kind: refused with a message naming the kind when it does
        not accept them, ``nprobe`` defaulted."""
        if nprobe is not None:
            if "nprobe" not in self.options:
                raise ValueError(f"nprobe={nprobe} applies only to faiss in {kinds_accepting('nprobe')}, "
                                 f"not faiss={self.name!r}")
            positive_int("nprobe", nprobe, what=f"inverted lists to visit; faiss={self.name!r}")
        positive_int("refine", refine, what=f"faiss={self.name!r}")
        if refine > 1 and "refine" not in self.options:
            why = "neighbours are exact" if self.exact else "does not accept refine"
            raise ValueError(f"refine={refine}; above 1 applies only to faiss in {kinds_accepting('refine')}: "
                             f"faiss={self.name!r} {why}")
        return (self.default_nprobe if nprobe is None else int(nprobe)), int(refine)

    def search(self, index: Any, queries: np.ndarray, k: int, nprobe: Optional[int] = None) -> np.ndarray:
        """Row ids ``[n, k]`` (int64; -1 where fewer than ``k`` exist) of each query vector's ``k`` nearest."""
        if nprobe is not None:
            raise ValueError(f"nprobe={nprobe} does not apply to faiss={self.name!r}")
        _, ids = index.search(queries, k)
        return ids

    def __repr__(self) -> str:
        return f"<ANN kind {self.name!r}>"


# -- the registry ------------------------------------------------------------------------------------------
#: registered kinds by name, in registration order
KINDS: Dict[str, AnnKind] = {}
#: other accepted names -> kind name
ALIASES: Dict[str, str] = {}


def register_kind(kind: AnnKind) -> AnnKind:
    """Make ``kind`` available as ``faiss=kind.name`` (and its aliases)."""
    for name in (kind.name, *kind.aliases):
        taken = KINDS.get(name) or KINDS.get(ALIASES.get(name, ""))
        if taken is not None and taken is not kind:
            raise ValueError(f"ANN kind name {name!r} is already registered as {taken!r}")
    KINDS[kind.name] = kind
    ALIASES.update({alias: kind.name for alias in kind.aliases})
    return kind


def get_kind(name: Union[str, AnnKind]) -> AnnKind:
    """The registered kind called ``name`` (or one of its aliases)."""
    if isinstance(name, AnnKind):
        return name
    kind = KINDS.get(ALIASES.get(name, name)) if isinstance(name, str) else None
    if kind is None:
        aliases = "".join(f", or {alias!r} for {target!r}" for alias, target in ALIASES.items())
        raise ValueError(f"faiss={name!r} is not supported; expected one of {tuple(KINDS)}{aliases}")
    return kind


def kinds_accepting(option: str) -> Tuple[str, ...]:
    """Names of the registered kinds that accept ``option``."""
    return tuple(name for name, kind in KINDS.items() if option in kind.options)


# -- the spec ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FaissSpec(JsonConfig):
    """How to build the token-vector nearest-neighbour index. ``None`` fields are filled from the index size by
    :meth:`resolve`; fields a kind does not accept are refused.

    >>> FaissSpec("ivf").resolve(num_tokens=1_000_000, dim=128)
    FaissSpec(kind='ivf', nlist=1024, pq_m=None, pq_bits=None, train_size=65536, niter=10, seed=0)
    >>> FaissSpec("ivfpq").resolve(num_tokens=2_000, dim=16).factory_string()
    'IVF32,PQ4x5'
    >>> FaissSpec("ivfpq-fs").resolve(num_tokens=2_000, dim=16).factory_string()
    'IVF32,PQ4x4fs'
    >>> FaissSpec("flat")  # the earlier name of exact search
    FaissSpec(kind='exact', nlist=None, pq_m=None, pq_bits=None, train_size=None, niter=10, seed=0)
    >>> FaissSpec("hnsw")
    Traceback (most recent call last):
    ...
    ValueError: faiss='hnsw' is not supported; expected one of ('exact', 'ivf', 'ivfpq', 'ivfpq-fs')...
    >>> FaissSpec("ivf", pq_m=8)
    Traceback (most recent call last):
    ...
    ValueError: pq_m=8 does not apply to faiss='ivf'; it applies to faiss in ('ivfpq', 'ivfpq-fs')
    """

    #: a registered kind's name (see :data:`KINDS`); aliases are stored as the kind's name
    kind: str = "exact"
    #: number of inverted lists (None: the power of two nearest sqrt(tokens), at most tokens / 39)
    nlist: Optional[int] = None
    #: product-quantiser sub-vectors for ``ivfpq`` / ``ivfpq-fs`` (None: dim / 4); must divide dim
    pq_m: Optional[int] = None
    #: bits per sub-vector code for ``ivfpq`` (None: 8, fewer when there are too few tokens to train 256 centroids)
    pq_bits: Optional[int] = None
    #: token vectors sampled to train the quantisers (None: 64 per list, at most all tokens)
    train_size: Optional[int] = None
    #: k-means iterations
    niter: int = 10
    #: seed of the training sample and k-means
    seed: int = 0

    def __post_init__(self) -> None:
        kind = get_kind(self.kind)
        object.__setattr__(self, "kind", kind.name)
        for name in SPEC_OPTIONS:
            value = getattr(self, name)
            if value is None:
                continue
            positive_int(name, value)
            if name not in kind.options:
                raise ValueError(f"{name}={value} does not apply to faiss={kind.name!r}; it applies to faiss in "
                                 f"{kinds_accepting(name)}")
        kind.check(self)

    @property
    def ann_kind(self) -> AnnKind:
        """The registered kind this spec builds."""
        return get_kind(self.kind)

    def resolve(self, num_tokens: int, dim: int) -> "FaissSpec":
        """This spec with every ``None`` its kind uses filled in for an index of ``num_tokens`` vectors of ``dim``."""
        return self.ann_kind.resolve(self, num_tokens, dim)

    def factory_string(self) -> str:
        """The ``faiss.index_factory`` description of a resolved spec."""
        return self.ann_kind.factory_string(self)

    def file_stem(self) -> Optional[str]:
        """Cache file name of a resolved spec (every build parameter is in it, so specs never share a file);
        ``None`` for kinds that are not cached."""
        return self.ann_kind.file_stem(self)



@dataclass(frozen=True, eq=False)
class AnnIndex:
    """A neighbour index ready to search (a FAISS index, or :class:`~.exact.ExactSearch`) and the resolved spec
    that made it; its kind sets the search parameters."""

    spec: FaissSpec
    index: Any

    @property
    def kind(self) -> AnnKind:
        return self.spec.ann_kind

    @property
    def ntotal(self) -> int:
        return int(self.index.ntotal)

    def neighbours(self, queries: np.ndarray, k: int, nprobe: Optional[int] = None) -> np.ndarray:
        """Row ids ``[n, k]`` (int64; -1 where fewer than ``k`` exist) of each query vector's ``k`` nearest tokens.

        ``queries`` must already be prepared with :func:`as_search_vectors`.
        """
        return self.kind.search(self.index, queries, k, nprobe)

    def __repr__(self) -> str:
        return f"AnnIndex({self.spec!r}, ntotal={self.ntotal})"


def search(ann: AnnIndex, queries: np.ndarray, k: int, nprobe: Optional[int] = None) -> np.ndarray:
    """``ann.neighbours(queries, k, nprobe)``: row ids ``[n, k]`` of each prepared query vector's ``k`` nearest."""
    return ann.neighbours(queries, k, nprobe)


def to_gpu_if_available(ann: AnnIndex) -> AnnIndex:
    """``ann`` on GPU 0 when its kind runs on GPU and FAISS has GPU support and sees one; else ``ann`` itself."""
    index = ann.kind.to_gpu_if_available(ann.index)
    return ann if index is ann.index else AnnIndex(ann.spec, index)


# -- vectors -----------------------------------------------------------------------------------------------
def metric_for(similarity: Union[str, Similarity]) -> Tuple[int, bool]:
    """(FAISS metric, whether vectors are unit-normalised first) giving the same neighbours as ``similarity``:
    read from the similarity registry."""
    similarity = get_similarity(similarity)
    return similarity.faiss_metric(), similarity.normalise_for_search


def as_search_vectors(x: np.ndarray, normalise: bool) -> np.ndarray:
    """Contiguous float32 rows, unit-normalised if asked (zero rows stay zero).

    >>> as_search_vectors(np.array([[3., 4.], [0., 0.]], dtype=np.float16), True).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    out = np.array(x, dtype=np.float32, order="C", copy=True)
    if normalise:
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
    return out


def search_vector_chunks(vectors: np.ndarray, normalise: bool, verbose: bool, desc: str) -> Iterator[np.ndarray]:
    """:func:`as_search_vectors` of ``vectors``, :data:`ADD_CHUNK` rows at a time (with a progress bar)."""
    bar = progress(total=len(vectors), desc=desc, unit="tok", enabled=verbose)
    try:
        for start in range(0, len(vectors), ADD_CHUNK):
            block = as_search_vectors(vectors[start:start + ADD_CHUNK], normalise)
            yield block
            bar.update(len(block))
    finally:
        bar.close()


def refine(vectors: "torch.Tensor", queries: np.ndarray, ids: np.ndarray, k: int,
           similarity: Union[str, Similarity]) -> np.ndarray:
    """Of each query vector's candidate rows ``ids [n, K]`` (-1: none), the ``k`` most similar by the exact
    ``similarity`` to the stored ``vectors`` (e.g. the fp16 memory map as a tensor): ``[n, min(k, K)]``, -1 where
    fewer than ``k`` candidates exist, in no particular order. FAISS's compressed distances then only need to
    put the true neighbours somewhere in a longer list.

    >>> import torch
    >>> stored = torch.tensor([[1., 0.], [0.6, 0.8], [0., 1.]], dtype=torch.float16)
    >>> query = np.array([[0., 1.]], dtype=np.float32)
    >>> sorted(refine(stored, query, np.array([[0, 2, -1, 1]]), 2, "cosine")[0].tolist())
    [1, 2]
    >>> refine(stored, np.array([[1., 0.]], dtype=np.float32), np.array([[2, -1, -1]]), 2, "cosine").tolist()
    [[2, -1]]
    """
    import torch

    similarity = get_similarity(similarity)
    candidates = torch.as_tensor(ids, dtype=torch.long)
    k = min(k, candidates.shape[1])
    if k == candidates.shape[1]:
        return candidates.numpy()
    rows = vectors.index_select(0, candidates.clamp_min(0).reshape(-1)).view(*candidates.shape, -1).float()  # [n,K,d]
    sims = similarity.matrix(torch.as_tensor(queries).unsqueeze(1), rows).squeeze(1)  # [n, K]
    sims.masked_fill_(candidates < 0, float("-inf"))
    best, where = sims.topk(k, dim=1)
    return candidates.gather(1, where).masked_fill_(best == float("-inf"), -1).numpy()
