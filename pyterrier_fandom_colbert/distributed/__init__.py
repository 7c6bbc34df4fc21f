"""Sharded ColBERT indexes built and searched on a Ray cluster (the ``[ray]`` extra).

* :class:`~.build.ShardedIndexer`: encodes passages with an actor pool (Ray Data ``map_batches``), trains one codec
  for all shards and has each shard written by a worker; resumable.
* :class:`~.search.RayShardedRetriever`: shard-holding actors that a query is fanned out to, their results merged
  to the exact top k; a shard that does not answer in time is an error, or, if asked for, a result flagged
  partial.
* :func:`~.cluster.connect`: joins a cluster (or starts one here) with Ray's dashboard and usage statistics off.

The sharded index itself (:class:`~pyterrier_fandom_colbert.index.sharded.ShardedColBERTIndex`) needs no Ray.
Ray is imported only when one of these runs.
"""
