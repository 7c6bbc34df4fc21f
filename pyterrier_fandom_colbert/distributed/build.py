"""Building a sharded ColBERT index on a Ray cluster: :class:`ShardedIndexer`.

The build follows :mod:`~pyterrier_fandom_colbert.index.shard_build` (plan, shared codec, one ordinary index per
shard, resumable from the work folder) and differs in who does the work:

* The passages become a Ray Dataset of blocks of ``batch_size`` passages, cut at the same places as the local
  indexer's batches (from the start of each shard), so that every model batch holds the same passages as on one
  machine and the vectors are the same bit for bit (length bucketing makes a vector depend, in its last bits, on
  the other passages of its batch).
* Encoding is ``map_batches`` over :class:`ShardEncoder`, a Ray actor class that loads the encoder once per actor
  (``num_gpus=1`` actors when the cluster has GPUs, one-CPU actors otherwise): one pool of ``workers`` actors for
  the whole build (and one, before it, for the codec's sample).
* The codec is trained once, in the driver, on the encoded sample, and saved to the work folder.
* Each shard is written by a :class:`ShardWriter` actor: the driver hands it references to its shard's encoded
  blocks, in order (Ray resolves them on the writer's node: the vectors never pass through the driver), and the
  writer streams them into the one-pass writer
  (:class:`~pyterrier_fandom_colbert.index.writer.IndexWriter`, with the shared codec). A writer that dies (its
  worker killed, its machine gone) loses only its shard: the others complete, the build then fails naming the
  lost shards, and running it again builds only those.

The target folder must be on storage every node of the cluster can write (one machine, or a shared file system).
"""
from __future__ import annotations

import os
import resource
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
import pandas as pd

from ..checks import positive_int
from ..index.compressed import CompressionSpec, as_spec
from ..index.shard_build import (
    RUNNING_SUFFIX,
    SAMPLE_DOCS,
    ShardBuild,
    batch_ranges,
    make_plan,
    records_of,
    sample_positions,
    shard_name,
    train_shared_codec,
)
from ..model.config import ColBERTConfig
from .cluster import cluster_gpus, connect

if TYPE_CHECKING:  # pragma: no cover
    from ..index.sharded import ShardedColBERTIndex


def peak_rss_mb() -> float:
    """Peak resident memory of this process (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class ShardEncoder:
    """Ray Data actor: encodes batches of ``docno``/``text`` into each passage's fp16 vectors, token ids and
    window lengths (as bytes), with the encoder loaded once, when the actor starts."""

    def __init__(self, checkpoint: Optional[str], config: Optional[Dict[str, Any]], model_options: Dict[str, Any],
                 fingerprint: str, stride: Optional[int], device: str):
        from ..model.colbert import ColBERT

        self.colbert = ColBERT.from_pretrained(checkpoint, config=ColBERTConfig.from_dict(config) if config else None,
                                               device=device, **model_options)
        if self.colbert.fingerprint() != fingerprint:
            raise ValueError(f"the encoder loaded on {socket.gethostname()} from {checkpoint} has fingerprint "
                             f"{self.colbert.fingerprint()}, not the driver's {fingerprint}: every node needs the same "
                             "checkpoint")
        self.stride = stride

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        texts = [str(t) for t in batch["text"]]
        pieces = self.colbert.tokenizer.document_pieces(texts)
        encoded = self.colbert.encode_pieces(pieces, self.stride)
        limit = self.colbert.tokenizer.max_doc_pieces
        return {"docno": np.asarray([str(d) for d in batch["docno"]], dtype=object),
                "shard": batch["shard"], "chunk": batch["chunk"],
                "vectors": np.array([v.astype(np.float16).tobytes() for v, _, _ in encoded], dtype=object),
                "token_ids": np.array([np.asarray(i, np.int32).tobytes() for _, i, _ in encoded], dtype=object),
                "parts": np.array([np.asarray(p, np.int64).tobytes() for _, _, p in encoded], dtype=object),
                "long": np.array([len(p) > limit for p in pieces], dtype=bool),
                "rss_mb": np.full(len(texts), peak_rss_mb())}


def decode_rows(batch: Dict[str, np.ndarray], dim: int):
    """``(docno, vectors [n, dim] fp16, token ids, window lengths)`` of each row of an encoded batch."""
    for docno, vectors, ids, parts in zip(batch["docno"], batch["vectors"], batch["token_ids"], batch["parts"]):
        yield (str(docno), np.frombuffer(vectors, np.float16).reshape(-1, dim), np.frombuffer(ids, np.int32),
               np.frombuffer(parts, np.int64).tolist())


class ShardWriter:
    """Ray actor writing one shard: the encoded blocks of its passages arrive in order (:meth:`add`, each a block
    reference resolved by Ray on this worker, so the vectors never pass through the driver) and are streamed into
    the one-pass writer (:class:`~pyterrier_fandom_colbert.index.writer.IndexWriter`) with the shared codec;
    :meth:`close` finishes the shard. ``marker`` names this worker while it writes."""

    def __init__(self, shard: int, path: str, marker: str, config: Dict[str, Any], fingerprint: str,
                 compression: Dict[str, Any], codec_folder: Optional[str], long_docs: str, stride: Optional[int]):
        from ..index.compressed import load_codec
        from ..index.writer import IndexWriter
        from ..storage import read_json

        self.started = time.perf_counter()
        self.shard, self.marker, self.long_docs = shard, Path(marker), long_docs
        self.marker.write_text(f"{socket.gethostname()} {os.getpid()}\n")
        self.config = ColBERTConfig.from_dict(config)
        codec = None
        if codec_folder is not None:
            codec = load_codec(Path(codec_folder), read_json(Path(codec_folder) / "codec.json"), self.config.dim)
        self.writer = IndexWriter(path, self.config, fingerprint, long_docs=long_docs, stride=stride,
                                  compression=CompressionSpec.from_dict(compression), codec=codec)
        self.chunks = self.long = 0
        self.encoder_rss = 0.0

    def add(self, block: Any) -> int:
        """Append one encoded block (its chunk number checked: blocks arrive in order or not at all)."""
        from ray.data.block import BlockAccessor

        batch = BlockAccessor.for_block(block).to_batch_format("numpy")
        got = (set(batch["shard"].tolist()), set(batch["chunk"].tolist()))
        if got != ({self.shard}, {self.chunks}):
            self.writer.abort()
            raise RuntimeError(f"shard {self.shard} expected its block {self.chunks}, got shard(s) {got[0]} block(s) "
                               f"{got[1]}: the encoded blocks arrived out of order")
        try:
            for docno, vectors, ids, parts in decode_rows(batch, self.config.dim):
                self.writer.add(docno, vectors, ids, parts if self.long_docs == "windows" else None)
        except BaseException:
            self.writer.abort()
            raise
        self.chunks += 1
        self.long += int(batch["long"].sum())
        self.encoder_rss = max(self.encoder_rss, float(batch["rss_mb"].max()))
        return len(batch["docno"])

    def close(self) -> Dict[str, Any]:
        self.writer.truncated_docs = self.long if self.long_docs == "truncate" else 0
        self.writer.windowed_docs = self.long if self.long_docs == "windows" else 0
        self.writer.close()
        self.marker.unlink(missing_ok=True)
        return {"docs": self.writer.num_docs, "seconds": round(time.perf_counter() - self.started, 3),
                "writer_rss_mb": round(peak_rss_mb(), 1), "encoder_rss_mb": round(self.encoder_rss, 1)}


def block_refs(dataset: Any) -> Iterator[Any]:
    """References to the blocks of ``dataset``, in order, executing it as they are taken (nothing is fetched)."""
    for bundle in dataset.iter_internal_ref_bundles():
        for entry in bundle.blocks:
            yield entry.ref if hasattr(entry, "ref") else entry[0]


def aligned_blocks(frame: pd.DataFrame, shards: Dict[int, Tuple[int, int]], batch_size: int) -> List[pd.DataFrame]:
    """``frame``'s rows of each shard's ``(first, end)`` range, cut into blocks of ``batch_size`` rows from the
    range's start (:func:`~pyterrier_fandom_colbert.index.shard_build.batch_ranges`: the local indexer's batches),
    each block with its ``shard`` and its ``chunk`` number within the shard.

    >>> frame = pd.DataFrame({"docno": list("abcde")})
    >>> [b.values.tolist() for b in aligned_blocks(frame, {0: (0, 3), 1: (3, 5)}, 2)]
    [[['a', 0, 0], ['b', 0, 0]], [['c', 0, 1]], [['d', 1, 0], ['e', 1, 0]]]
    """
    blocks = []
    for shard, rng in shards.items():
        for chunk, (a, b) in enumerate(batch_ranges([rng], batch_size)):
            blocks.append(frame.iloc[a:b].reset_index(drop=True).assign(shard=shard, chunk=chunk))
    return blocks


class ShardedIndexer:
    """Builds a :class:`~pyterrier_fandom_colbert.index.sharded.ShardedColBERTIndex` at ``path`` on a Ray cluster
    (see the module docstring).

    ``checkpoint`` (a folder every node can read; None: the package's default checkpoint), ``config`` and
    ``model_options`` (e.g. ``batch_size``) load the encoder, once in the driver (its fingerprint and tokenizer)
    and once per actor. ``num_shards`` or ``shard_size``: how the documents are split (in input order).
    ``workers``: encoder actors (default: the cluster's GPUs, or its CPUs); each shard also has a writer actor
    (no CPU reserved: it mostly waits for blocks).
    ``batch_size``: passages per model call and per Ray block. ``address``: the cluster (see
    :func:`~.cluster.connect`; None starts one on this machine).
    """

    def __init__(self, path: Union[str, Path], checkpoint: Optional[str] = None, *,
                 config: Optional[ColBERTConfig] = None, model_options: Optional[Dict[str, Any]] = None,
                 num_shards: Optional[int] = None, shard_size: Optional[int] = None,
                 compression: Union[str, CompressionSpec] = "residual2", workers: Optional[int] = None,
                 batch_size: int = 256, long_docs: str = "windows", stride: Optional[int] = None,
                 sample_docs: int = SAMPLE_DOCS, address: Optional[str] = None, overwrite: bool = False,
                 text_field: str = "text", verbose: bool = False):
        from ..model.colbert import ColBERT
        from ..model.tokenization import check_long_docs

        self.path = Path(path)
        self.checkpoint = None if checkpoint is None else str(Path(checkpoint).resolve())
        self.model_options = dict(model_options or {})
        self.colbert = ColBERT.from_pretrained(self.checkpoint, config=config, device="cpu", **self.model_options)
        self.config = None if config is None else config.to_dict()
        self.num_shards, self.shard_size = num_shards, shard_size
        self.compression = as_spec(compression)
        self.workers = positive_int("workers", workers, none=True, what="shards built at once")
        self.batch_size = positive_int("batch_size", batch_size, what="passages per model call")
        self.long_docs = long_docs
        self.stride = check_long_docs(long_docs, stride, self.colbert.tokenizer.max_doc_pieces,
                                      self.colbert.config.doc_maxlen)
        self.sample_docs = positive_int("sample_docs", sample_docs, what="documents sampled to train the codec")
        self.address, self.overwrite, self.text_field, self.verbose = address, overwrite, text_field, verbose
        #: per shard written by the last :meth:`index`: its timings and peak memory (writer and encoder actor)
        self.reports: List[Dict[str, Any]] = []

    def index(self, passages: Any) -> "ShardedColBERTIndex":
        """Build from ``passages``: a Ray Dataset with ``docno`` and text columns, a DataFrame or an iterable
        of dicts. Resumes an interrupted build of the same plan; raises a RuntimeError naming the shards that
        were lost (after the others are written) so that running it again finishes the build."""
        ray = connect(self.address, quiet=not self.verbose)
        ray.data.DataContext.get_current().execution_options.preserve_order = True
        ray.data.DataContext.get_current().enable_progress_bars = self.verbose
        frame = self._frame(passages)
        plan = make_plan(frame["docno"].tolist(), self.colbert.fingerprint(), self.colbert.config, self.compression,
                         num_shards=self.num_shards, shard_size=self.shard_size, long_docs=self.long_docs,
                         stride=self.stride, sample_docs=self.sample_docs)
        build = ShardBuild(self.path, plan, overwrite=self.overwrite)
        gpus = cluster_gpus()
        workers = self.workers or (gpus or max(1, int(ray.cluster_resources().get("CPU", 1))))
        if self.compression.compressed and build.codec() is None:
            self._train_codec(frame, build, workers, gpus)
        self.reports = self._write_shards(frame, build, workers, gpus)
        from ..index.sharded import ShardedColBERTIndex

        return ShardedColBERTIndex(build.finish())

    def _frame(self, passages: Any) -> pd.DataFrame:
        if hasattr(passages, "to_pandas") and hasattr(passages, "map_batches"):  # a Ray Dataset
            passages = passages.select_columns(["docno", self.text_field]).to_pandas()
        return pd.DataFrame(records_of(passages, self.text_field), columns=["docno", "text"])

    def _encoded(self, blocks: List[pd.DataFrame], workers: int, gpus: int) -> Any:
        import ray.data

        return ray.data.from_pandas(blocks).map_batches(
            ShardEncoder, batch_size=None, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=workers),
            fn_constructor_kwargs={"checkpoint": self.checkpoint, "config": self.config,
                                   "model_options": self.model_options, "fingerprint": self.colbert.fingerprint(),
                                   "stride": self.stride, "device": "cuda" if gpus else "cpu"},
            num_gpus=1 if gpus else None, num_cpus=None if gpus else 1)

    def _train_codec(self, frame: pd.DataFrame, build: ShardBuild, workers: int, gpus: int) -> None:
        ranges = dict(enumerate(sample_positions(build.plan.bounds, build.plan.sample_docs)))
        vectors = []
        sampled = sum(b - a for a, b in ranges.values())
        for batch in self._encoded(aligned_blocks(frame, ranges, self.batch_size), min(workers, len(ranges)),
                                   gpus).iter_batches(batch_size=None, batch_format="numpy"):
            vectors += [v for _, v, _, _ in decode_rows(batch, self.colbert.config.dim)]
        codec, used = train_shared_codec(vectors, self.compression, len(frame), sampled)
        build.save_codec(codec, used)

    def _write_shards(self, frame: pd.DataFrame, build: ShardBuild, workers: int, gpus: int) -> List[Dict[str, Any]]:
        """Encode the pending shards' passages with one actor pool and send each encoded block, by reference, to
        its shard's writer actor; returns each written shard's report, or raises naming the lost shards."""
        import ray

        plan, pending = build.plan, build.pending()
        if not pending:
            return []
        ranges = {i: (plan.bounds[i], plan.bounds[i + 1]) for i in pending}
        blocks = aligned_blocks(frame, ranges, self.batch_size)
        owner = [int(b["shard"].iloc[0]) for b in blocks]
        last = {i: n for n, i in enumerate(owner)}  # the position of each shard's last block
        codec_folder = str(build.codec_folder) if self.compression.compressed else None
        writers: Dict[int, Any] = {}
        closing: Dict[Any, int] = {}
        try:
            self._send(blocks, owner, last, writers, closing, workers, gpus, build, codec_folder)
        except BaseException:
            for actor in writers.values():
                ray.kill(actor)
            raise
        reports, lost = [], {}
        for ref, i in closing.items():
            try:
                report: Dict[str, Any] = ray.get(ref)
                reports.append({"shard": i, "path": str(build.shard_path(i)), **report})
            except Exception as err:  # a lost worker or a failed write: this shard only
                lines = [line for line in str(err).splitlines() if line.strip()]
                lost[i] = f"{type(err).__name__}: {lines[-1] if lines else ''}"  # the cause, not Ray's header
            ray.kill(writers[i])
        if lost:
            raise RuntimeError(f"shards {sorted(lost)} of {self.path} were not written ({lost}); the other "
                               f"{plan.num_shards - len(lost)} are kept in {build.work}: run the same build again "
                               "to write only the missing ones")
        return reports

    def _send(self, blocks: List[pd.DataFrame], owner: List[int], last: Dict[int, int], writers: Dict[int, Any],
              closing: Dict[Any, int], workers: int, gpus: int, build: ShardBuild, codec_folder: Optional[str]) -> None:
        """Run the encoding and hand each block to its shard's writer (started at the shard's first block)."""
        import ray

        plan = build.plan
        writer = ray.remote(ShardWriter).options(num_cpus=0, max_restarts=0)
        for n, ref in enumerate(block_refs(self._encoded(blocks, workers, gpus))):
            i = owner[n]
            if i not in writers:
                writers[i] = writer.remote(i, str(build.shard_path(i)),
                                           str(build.work / f"{shard_name(i)}{RUNNING_SUFFIX}"),
                                           self.colbert.config.to_dict(), plan.fingerprint, plan.compression,
                                           codec_folder, plan.long_docs, plan.stride)
            writers[i].add.remote(ref)
            if n == last[i]:
                closing[writers[i].close.remote()] = i

    def __repr__(self) -> str:
        return f"ShardedIndexer({str(self.path)!r}, {self.checkpoint!r}, compression={self.compression.format!r})"
