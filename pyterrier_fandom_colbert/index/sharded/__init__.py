"""Sharded ColBERT indexes, in one place: one corpus as several ordinary ColBERT indexes (shards) searched as one.

* :mod:`.artifact`  :class:`~.artifact.ShardedColBERTIndex` (format ``colbert.sharded``): opening, checking,
  searching the shards and merging their results
* :mod:`.build`     resumable builds with one shared codec (plan, work folder); the local builder

The Ray builder and searcher are in :mod:`pyterrier_fandom_colbert.distributed`.
"""
# the `colbert.sharded` artifact entry point (pyproject.toml, and the metadata of every install) names this package
from .artifact import ShardedColBERTIndex

__all__ = ["ShardedColBERTIndex"]
