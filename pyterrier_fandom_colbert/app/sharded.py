"""A search folder whose ColBERT part is a sharded index: built on a Ray cluster (``pfc index --ray``) and searched
through Ray shard actors (``pfc serve --ray``) or, without Ray, by merging the shards here.

The sharded ColBERT index is residual-compressed (``residual2``, one codec for all shards) and retrieves by
centroid search with its defaults, so the folder's retriever options do not apply to it; its
explanations re-encode each result's text (the shards' vectors are compressed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional, Union

from ..checks import positive_int
from ..cli_errors import UserError
from ..distributed.cluster import SHARD_TIMEOUT_S
from ..storage import read_json

if TYPE_CHECKING:  # pragma: no cover
    import pyterrier as pt

    from ..index.artifact import ColBERTIndex
    from ..index.sharded.artifact import ShardedColBERTIndex
    from .folder import SearchSettings

#: documents per shard when the number of shards is not given
SHARD_SIZE = 250_000


@dataclass(frozen=True)
class RayBuild:
    """How ``pfc index --ray`` builds the ColBERT part: the cluster (``address``; None: ``RAY_ADDRESS``, or a
    cluster started here), ``shards`` (None: one per :data:`SHARD_SIZE` passages) and ``workers`` (shards built
    at once; None: the cluster's GPUs, or its CPUs)."""

    address: Optional[str] = None
    shards: Optional[int] = None
    workers: Optional[int] = None

    def __post_init__(self) -> None:
        positive_int("shards", self.shards, none=True, what="shards of the ColBERT index")
        positive_int("workers", self.workers, none=True, what="shards built at once")

    @staticmethod
    def check_compression(compression: str, remedy: str = "give settings with a residual compression (e.g. "
                                                          "residual2), or ray=None for an fp16 folder") -> None:
        """Refuse a format a Ray build cannot write: it writes a sharded index of residual codes (searched by
        centroids in every shard), never fp16 (the one home of this rule: ``build_folder`` and ``pfc index``
        both ask it; ``remedy``: what the caller's user can do, in the caller's words).

        >>> RayBuild.check_compression("fp16")
        Traceback (most recent call last):
        ...
        ValueError: a Ray build writes a sharded index of residual codes; give settings with a residual ...
        """
        if compression == "fp16":
            raise ValueError(f"a Ray build writes a sharded index of residual codes; {remedy}")


@dataclass(frozen=True)
class RaySearch:
    """How ``pfc serve --ray`` searches a sharded ColBERT part: through shard actors on the cluster ``address``
    (None: ``RAY_ADDRESS``, or a cluster started here) that must answer a query within ``timeout_s`` seconds
    (else it fails, naming the late shards).

    >>> RaySearch().timeout_s
    30.0
    >>> RaySearch(timeout_s=0)
    Traceback (most recent call last):
    ...
    ValueError: timeout_s=0; expected a positive number of seconds
    """

    address: Optional[str] = None
    timeout_s: float = SHARD_TIMEOUT_S

    def __post_init__(self) -> None:
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or \
                not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(f"timeout_s={self.timeout_s!r}; expected a positive number of seconds")


def build_sharded_colbert(path: Path, passages: Iterable[dict], ray: RayBuild, *, checkpoint: Optional[str],
                          batch_size: int, verbose: bool, compression: Any = "residual2") -> "ShardedColBERTIndex":
    """Build the folder's ColBERT part at ``path`` as a sharded index on the Ray cluster ``ray`` (``compression``:
    the folder's format name or CompressionSpec)."""
    from ..distributed.build import LostShardsError, ShardedIndexer

    indexer = ShardedIndexer(path, checkpoint, num_shards=ray.shards,
                             shard_size=None if ray.shards else SHARD_SIZE, workers=ray.workers,
                             batch_size=batch_size, address=ray.address, verbose=verbose, compression=compression)
    try:
        return indexer.index(list(passages))
    except LostShardsError as err:  # its work folder is inside the build's temporary folder, deleted with it
        raise ShardsLostError(f"the Ray build lost shards {sorted(err.lost)} of the ColBERT index ({err.lost}): "
                              "their writer died; nothing was written to the search folder and the shards written "
                              "are deleted with the build, so the same `pfc index` again builds every shard "
                              "afresh") from err


class ShardsLostError(UserError):
    """``pfc index --ray`` lost shards: the search folder is not written (nothing of the build is kept)."""


def open_colbert(path: Path) -> Union["ColBERTIndex", "ShardedColBERTIndex"]:
    """The folder's ColBERT part: a ColBERT index, or a sharded one (as its ``pt_meta.json`` says)."""
    from ..index.artifact import ColBERTIndex
    from ..index.sharded.artifact import SHARDED_FORMAT, ShardedColBERTIndex

    meta = path / "pt_meta.json"
    values = read_json(meta, "ColBERT index metadata") if meta.is_file() else {}
    if isinstance(values, dict) and values.get("format") == SHARDED_FORMAT:
        return ShardedColBERTIndex(path)
    return ColBERTIndex(path)


def dense_retriever(index: Any, settings: "SearchSettings", num_results: int,
                    ray: Union[str, RaySearch, None] = None, timeout_s: float = SHARD_TIMEOUT_S) -> "pt.Transformer":
    """The folder's ColBERT retriever: its FAISS settings for a ColBERT index; for a sharded index the shards'
    centroid search, merged here or by Ray shard actors (``ray``: a :class:`RaySearch`, or the cluster's address,
    ``""`` for ``RAY_ADDRESS`` or a local one, whose actors must answer within ``timeout_s``; else the query
    fails)."""
    from ..index.sharded.artifact import ShardedColBERTIndex

    if not isinstance(index, ShardedColBERTIndex):
        if ray is not None:
            raise ValueError(f"--ray serves a sharded ColBERT index, but {index.path} is a single index; build the "
                             "folder with `pfc index --ray`")
        return index.retriever(num_results=num_results, **settings.retriever.to_retriever_kwargs())
    if ray is None:
        return index.retriever(num_results=num_results)
    from ..distributed.search import RayShardedRetriever

    search = ray if isinstance(ray, RaySearch) else RaySearch(address=ray or None, timeout_s=timeout_s)
    return RayShardedRetriever(index, address=search.address, timeout_s=search.timeout_s, num_results=num_results)
