"""Building a sharded ColBERT index on a Ray cluster: :class:`ShardedIndexer`.

The build follows :mod:`~pyterrier_fandom_colbert.index.sharded.build` (plan, shared codec, one ordinary index per
shard, resumable from the work folder) and differs in who does the work:

* The passages become a Ray Dataset of blocks of ``block_batches`` model batches of ``batch_size`` passages,
  the batches cut at the same places as the local indexer's (from the start of each shard), so that every model
  call holds the same passages as on one machine and the vectors are the same bit for bit (length bucketing makes
  a vector depend, in its last bits, on the other passages of its batch).
* Encoding is one ``map_batches`` over :class:`ShardEncoder`, a Ray actor class that loads the encoder once per
  actor (``num_gpus=1`` actors when the cluster has GPUs, one-CPU actors otherwise), its kernel caches bounded
  as ``pfc`` bounds its own (:func:`~pyterrier_fandom_colbert.heap.kernel_cache_env`, through the actors'
  ``runtime_env``; the shard reports say what they ran with): one pool of ``workers`` actors encodes the codec's
  sample first, then the shards. An encoded block is one row of numeric arrays
  (tensor columns: no per-passage pickling).
* The codec is trained once, in the driver, from the sample's encoded blocks (while the pool goes on encoding
  the shards), and saved to the work folder.
* ``workers`` :class:`ShardWriter` actors write the shards, one shard per writer at a time: the driver hands a
  writer references to its shard's encoded blocks, in order (Ray resolves them on the writer's node: the vectors
  never pass through the driver), and the writer streams them into the one-pass writer
  (:class:`~pyterrier_fandom_colbert.index.writer.IndexWriter`, with the shared codec). A writer that dies (its
  worker killed, its machine gone) loses its shard in flight and those queued behind it on that actor: the others
  complete, the build then fails naming the lost shards, and running it again builds only those. A shard is lost
  when its files are not whole: one written whole whose writer died before its report reached the driver is kept
  (its report holds only ``report_lost``, the cause).

The target folder must be on storage every node of the cluster can write (one machine, or a shared file system).
"""
from __future__ import annotations

import itertools
import json
import os
import resource
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np
import pandas as pd

from ..checks import positive_int
from ..heap import KERNEL_CACHES, HeapTrimmer, kernel_cache_env
from ..index.residual.compress import CompressionSpec, as_spec
from ..index.sharded.build import (
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
    from ..index.sharded.artifact import ShardedColBERTIndex


class LostShardsError(RuntimeError):
    """Shards whose writer died (``lost``: shard -> cause); the others are kept in the work folder ``work``, from
    which the same build resumes. A caller that deletes ``work`` (a build inside a temporary folder) says so."""

    def __init__(self, message: str, *, lost: Dict[int, str], work: Path):
        super().__init__(message)
        self.lost, self.work = lost, work


def threads() -> int:
    """torch's intra-op threads in this process."""
    import torch

    return int(torch.get_num_threads())


def peak_rss_mb() -> float:
    """Peak resident memory of this process (MB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class ShardEncoder:
    """Ray Data actor: encodes a block of ``docno``/``text`` rows into one row holding the whole block's fp16
    vectors (``[tokens, dim]``), token ids and per-passage sizes as plain numeric arrays (Ray stores them as tensor
    columns, copied once into the object store and read back without a copy: no per-passage pickling), with the
    encoder loaded once, when the actor starts."""

    def __init__(self, checkpoint: Optional[str], config: Optional[Dict[str, Any]], model_options: Dict[str, Any],
                 fingerprint: str, stride: Optional[int], device: str):
        from ..model.colbert import ColBERT

        started = time.perf_counter()
        self.colbert = ColBERT.from_pretrained(checkpoint, config=ColBERTConfig.from_dict(config) if config else None,
                                               device=device, **model_options)
        if self.colbert.fingerprint() != fingerprint:
            raise ValueError(f"the encoder loaded on {socket.gethostname()} from {checkpoint} has fingerprint "
                             f"{self.colbert.fingerprint()}, not the driver's {fingerprint}: every node needs the same "
                             "checkpoint")
        self.stride = stride
        self.trimmer = HeapTrimmer()  # the heap the encoder freed goes back to the OS between blocks
        self.load_s = time.perf_counter() - started

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        started, cpu = time.perf_counter(), time.process_time()
        texts = [str(t) for t in batch["text"]]
        pieces = self.colbert.tokenizer.document_pieces(texts)
        cuts = np.flatnonzero(np.diff(batch["batch"])) + 1  # the block's model batches, encoded one by one
        encoded = [e for a, b in itertools.pairwise([0, *cuts.tolist(), len(texts)])
                   for e in self.colbert.encode_pieces(pieces[a:b], self.stride, dtype=np.float16)]
        limit = self.colbert.tokenizer.max_doc_pieces
        self.trimmer.add(len(texts))
        parts = [np.asarray(p, np.int64) for _, _, p in encoded]
        return {"shard": batch["shard"][:1], "chunk": batch["chunk"][:1],
                "docnos": np.array([json.dumps([str(d) for d in batch["docno"]])], dtype=object),
                "vectors": np.concatenate([v for v, _, _ in encoded])[None],
                "token_ids": np.concatenate([np.asarray(i, np.int32) for _, i, _ in encoded])[None],
                "lengths": np.array([len(v) for v, _, _ in encoded], np.int64)[None],
                "parts": np.concatenate(parts)[None], "num_parts": np.array([len(p) for p in parts], np.int64)[None],
                "long": np.array([len(p) > limit for p in pieces], dtype=bool)[None],
                "rss_mb": np.array([peak_rss_mb()]), "encode_s": np.array([time.perf_counter() - started]),
                "encode_cpu_s": np.array([time.process_time() - cpu]),
                "load_s": np.array([self.load_s]), "threads": np.array([threads()]),
                "kernel_caches": np.array([json.dumps({k: os.environ.get(k) for k in KERNEL_CACHES})], dtype=object)}


def decode_block(batch: Dict[str, np.ndarray]) -> Iterator[Tuple[str, np.ndarray, np.ndarray, List[int]]]:
    """``(docno, vectors [n, dim] fp16, token ids, window lengths)`` of each passage of an encoded block (one
    row: :class:`ShardEncoder`'s output)."""
    docnos = json.loads(str(batch["docnos"][0]))
    vectors, ids, lengths = batch["vectors"][0], batch["token_ids"][0], batch["lengths"][0]
    parts, num_parts = batch["parts"][0], batch["num_parts"][0]
    ends, part_ends = np.cumsum(lengths), np.cumsum(num_parts)
    for n, docno in enumerate(docnos):
        a, b = ends[n] - lengths[n], ends[n]
        yield docno, vectors[a:b], ids[a:b], parts[part_ends[n] - num_parts[n]:part_ends[n]].tolist()


class ShardWriter:
    """Ray actor writing shards, one after another: :meth:`open` starts shard ``shard`` (``marker`` names this
    worker while it writes), the encoded blocks of its passages arrive in order (:meth:`add`, each a block
    reference resolved by Ray on this worker, so the vectors never pass through the driver) and are streamed into
    the one-pass writer (:class:`~pyterrier_fandom_colbert.index.writer.IndexWriter`) with the shared codec
    (read at the first :meth:`open`: the actors start, and import what they need, while the codec is trained);
    :meth:`close` finishes the shard."""

    def __init__(self, config: Dict[str, Any], fingerprint: str, compression: Dict[str, Any],
                 codec_folder: Optional[str], long_docs: str, stride: Optional[int]):
        from ..index.writer import IndexWriter

        self.config = ColBERTConfig.from_dict(config)
        self.fingerprint, self.compression = fingerprint, CompressionSpec.from_dict(compression)
        self.long_docs, self.stride, self.codec_folder = long_docs, stride, codec_folder
        self.codec: Any = None
        self.make_writer = IndexWriter
        self.writer: Any = None

    def ready(self) -> int:
        """This actor's process id, once it has started."""
        return os.getpid()

    def open(self, shard: int, path: str, marker: str) -> None:
        self.started = time.perf_counter()
        if self.codec is None and self.codec_folder is not None:
            from ..index.residual.compress import load_codec
            from ..storage import read_json

            folder = Path(self.codec_folder)
            self.codec = load_codec(folder, read_json(folder / "codec.json"), self.config.dim)
        self.shard, self.marker = shard, Path(marker)
        self.marker.write_text(f"{socket.gethostname()} {os.getpid()}\n")
        self.writer = self.make_writer(path, self.config, self.fingerprint, long_docs=self.long_docs,
                                       stride=self.stride, compression=self.compression, codec=self.codec)
        self.chunks = self.long = 0
        self.encoder: Dict[str, float] = {"encoder_rss_mb": 0.0, "encode_s": 0.0, "encode_cpu_s": 0.0,
                                          "encoder_load_s": 0.0, "encoder_threads": 0}
        self.busy = self.cpu = 0.0
        self.kernel_caches: Dict[str, Optional[str]] = {}

    def add(self, block: Any) -> int:
        """Append one encoded block (its chunk number checked: blocks arrive in order or not at all)."""
        from ray.data.block import BlockAccessor

        started, cpu = time.perf_counter(), time.process_time()
        batch = BlockAccessor.for_block(block).to_batch_format("numpy")
        got = (int(batch["shard"][0]), int(batch["chunk"][0]))
        if got != (self.shard, self.chunks):
            self.writer.abort()
            raise RuntimeError(f"shard {self.shard} expected its block {self.chunks}, got shard {got[0]} block "
                               f"{got[1]}: the encoded blocks arrived out of order")
        added = 0
        try:
            for docno, vectors, ids, parts in decode_block(batch):
                self.writer.add(docno, vectors, ids, parts if self.long_docs == "windows" else None)
                added += 1
        except BaseException:
            self.writer.abort()
            raise
        self.chunks += 1
        self.long += int(batch["long"][0].sum())
        seen = self.encoder
        seen["encoder_rss_mb"] = max(seen["encoder_rss_mb"], float(batch["rss_mb"][0]))
        seen["encoder_load_s"] = max(seen["encoder_load_s"], float(batch["load_s"][0]))
        seen["encoder_threads"] = max(seen["encoder_threads"], int(batch["threads"][0]))
        seen["encode_s"] += float(batch["encode_s"][0])
        seen["encode_cpu_s"] += float(batch["encode_cpu_s"][0])
        self.kernel_caches = json.loads(batch["kernel_caches"][0])
        self.busy += time.perf_counter() - started
        self.cpu += time.process_time() - cpu
        return added

    def close(self) -> Dict[str, Any]:
        self.writer.truncated_docs = self.long if self.long_docs == "truncate" else 0
        self.writer.windowed_docs = self.long if self.long_docs == "windows" else 0
        started, cpu = time.perf_counter(), time.process_time()
        self.writer.close()
        self.marker.unlink(missing_ok=True)
        return {"docs": self.writer.num_docs, "seconds": round(time.perf_counter() - self.started, 3),
                "writer_busy_s": round(self.busy + time.perf_counter() - started, 3),
                "writer_cpu_s": round(self.cpu + time.process_time() - cpu, 3), "writer_threads": threads(),
                "writer_rss_mb": round(peak_rss_mb(), 1), "writer_pid": os.getpid(),
                **{k: round(v, 3) for k, v in self.encoder.items()}, "encoder_kernel_caches": self.kernel_caches}


def block_refs(dataset: Any) -> Iterator[Any]:
    """References to the blocks of ``dataset``, in order, executing it as they are taken (nothing is fetched)."""
    for bundle in dataset.iter_internal_ref_bundles():
        for entry in bundle.blocks:
            yield entry.ref if hasattr(entry, "ref") else entry[0]


def aligned_blocks(frame: pd.DataFrame, shards: Dict[int, Tuple[int, int]], batch_size: int,
                   block_batches: int = 1) -> List[pd.DataFrame]:
    """``frame``'s rows of each shard's ``(first, end)`` range, cut into model batches of ``batch_size`` rows from
    the range's start (:func:`~pyterrier_fandom_colbert.index.sharded.build.batch_ranges`: the local indexer's
    batches), ``block_batches`` consecutive batches to a block; each row with its ``shard``, its block's ``chunk``
    number within the shard and its ``batch`` number within the block.

    >>> frame = pd.DataFrame({"docno": list("abcde")})
    >>> [b.values.tolist() for b in aligned_blocks(frame, {0: (0, 3), 1: (3, 5)}, 2)]
    [[['a', 0, 0, 0], ['b', 0, 0, 0]], [['c', 0, 1, 0]], [['d', 1, 0, 0], ['e', 1, 0, 0]]]
    >>> [b["batch"].tolist() for b in aligned_blocks(frame, {0: (0, 5)}, 2, block_batches=2)]
    [[0, 0, 1, 1], [0]]
    """
    blocks = []
    for shard, rng in shards.items():
        batches = batch_ranges([rng], batch_size)
        for chunk, first in enumerate(range(0, len(batches), block_batches)):
            group = batches[first:first + block_batches]
            rows = frame.iloc[group[0][0]:group[-1][1]].reset_index(drop=True)
            number = np.repeat(np.arange(len(group)), [end - start for start, end in group])
            blocks.append(rows.assign(shard=shard, chunk=chunk, batch=number))
    return blocks


def shard_blocks(frame: pd.DataFrame, shards: Dict[int, Tuple[int, int]], batch_size: int, block_batches: int,
                 slots: int) -> List[pd.DataFrame]:
    """:func:`aligned_blocks` of ``shards``, in the order they are encoded: the shards in waves of ``slots``
    (one per writer actor), the blocks of a wave's shards taken in turn, so that every writer has a shard to
    write while the encoders work, and each shard's blocks stay in order.

    >>> frame = pd.DataFrame({"docno": list("abcdef")})
    >>> [b["docno"].tolist() for b in shard_blocks(frame, {0: (0, 3), 1: (3, 5), 2: (5, 6)}, 2, 1, 2)]
    [['a', 'b'], ['d', 'e'], ['c'], ['f']]
    """
    by_shard = {i: aligned_blocks(frame, {i: rng}, batch_size, block_batches) for i, rng in shards.items()}
    ordered: List[pd.DataFrame] = []
    names = list(shards)
    for w in range(0, len(names), slots):
        wave = [by_shard[i] for i in names[w:w + slots]]
        for turn in range(max(len(x) for x in wave)):
            ordered += [x[turn] for x in wave if turn < len(x)]
    return ordered


class ShardedIndexer:
    """Builds a :class:`~pyterrier_fandom_colbert.index.sharded.ShardedColBERTIndex` at ``path`` on a Ray cluster
    (see the module docstring).

    ``checkpoint`` (a folder every node can read; None: the package's default checkpoint), ``config`` and
    ``model_options`` (e.g. ``batch_size``) load the encoder, once in the driver (its fingerprint and tokenizer)
    and once per actor. ``num_shards`` or ``shard_size``: how the documents are split (in input order).
    ``workers``: encoder actors (default: the cluster's GPUs, or its CPUs); each shard also has a writer actor
    (no CPU reserved: it mostly waits for blocks).
    ``batch_size``: passages per model call (the local indexer's batches); ``block_batches``: model batches per
    Ray block (fewer, larger blocks: less of Ray Data's work per passage). ``address``: the cluster (see
    :func:`~.cluster.connect`; None starts one on this machine). ``writer``: the actor class that writes the shards
    (:class:`ShardWriter` or a subclass of it).
    """

    def __init__(self, path: Union[str, Path], checkpoint: Optional[str] = None, *,
                 config: Optional[ColBERTConfig] = None, model_options: Optional[Dict[str, Any]] = None,
                 num_shards: Optional[int] = None, shard_size: Optional[int] = None,
                 compression: Union[str, CompressionSpec] = "residual2", workers: Optional[int] = None,
                 batch_size: int = 256, block_batches: int = 4, long_docs: str = "windows",
                 stride: Optional[int] = None, sample_docs: int = SAMPLE_DOCS, address: Optional[str] = None,
                 overwrite: bool = False, text_field: str = "text", writer: type = ShardWriter,
                 verbose: bool = False):
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
        self.block_batches = positive_int("block_batches", block_batches, what="model batches per Ray block")
        self.long_docs = long_docs
        self.stride = check_long_docs(long_docs, stride, self.colbert.tokenizer.max_doc_pieces,
                                      self.colbert.config.doc_maxlen)
        self.sample_docs = positive_int("sample_docs", sample_docs, what="documents sampled to train the codec")
        self.address, self.overwrite, self.text_field, self.verbose = address, overwrite, text_field, verbose
        if not (isinstance(writer, type) and issubclass(writer, ShardWriter)):
            raise TypeError(f"writer must be ShardWriter or a subclass of it, not {writer!r}")
        self.writer = writer
        #: per shard written by the last :meth:`index`: its timings and peak memory (writer and encoder actor)
        self.reports: List[Dict[str, Any]] = []
        #: seconds from the start of the last :meth:`index` to each of its steps (where the driver's time goes)
        self.timings: Dict[str, float] = {}

    def index(self, passages: Any) -> "ShardedColBERTIndex":
        """Build from ``passages``: a Ray Dataset with ``docno`` and text columns, a DataFrame or an iterable
        of dicts. Resumes an interrupted build of the same plan; raises a RuntimeError naming the shards that
        were lost (after the others are written) so that running it again finishes the build."""
        started = time.perf_counter()
        self.timings = {}
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
        self.timings["planned"] = time.perf_counter() - started
        self.reports = self._build(frame, build, workers, gpus, started)
        from ..index.sharded.artifact import ShardedColBERTIndex

        index = ShardedColBERTIndex(build.finish())
        self.timings["finished"] = time.perf_counter() - started
        self.timings = {k: round(v, 3) for k, v in self.timings.items()}
        return index

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
            num_gpus=1 if gpus else None, num_cpus=None if gpus else 1,
            # bounded before torch runs a kernel there, as pfc bounds its own (heap.bound_kernel_caches)
            runtime_env={"env_vars": kernel_cache_env()})

    def _build(self, frame: pd.DataFrame, build: ShardBuild, workers: int, gpus: int,
               started: float) -> List[Dict[str, Any]]:
        """Encode, with one actor pool, the codec's sample (when the codec is still to be trained) and then the
        pending shards' passages; train the codec in the driver from the sample's blocks, then send each shard's
        encoded blocks, by reference, to its writer actor. Returns each written shard's report, or raises naming
        the lost shards."""
        import ray

        plan, pending = build.plan, build.pending()
        if not pending:
            return []
        sample: List[pd.DataFrame] = []
        if self.compression.compressed and build.codec() is None:
            ranges = dict(enumerate(sample_positions(plan.bounds, plan.sample_docs)))
            sample = [b.assign(shard=-1, chunk=n) for n, b in
                      enumerate(aligned_blocks(frame, ranges, self.batch_size, self.block_batches))]
        slots = min(workers, len(pending))
        blocks = shard_blocks(frame, {i: (plan.bounds[i], plan.bounds[i + 1]) for i in pending}, self.batch_size,
                              self.block_batches, slots)
        owner = [int(b["shard"].iloc[0]) for b in blocks]
        slot = {i: n % slots for n, i in enumerate(pending)}  # the writer of each shard (its wave's position)
        first = {i: n for n, i in reversed(list(enumerate(owner)))}  # the position of each shard's first block
        last = {i: n for n, i in enumerate(owner)}  # and of its last
        codec_folder = str(build.codec_folder) if self.compression.compressed else None
        writer = ray.remote(self.writer).options(num_cpus=0, max_restarts=0)
        # started first: they start while the encoders start and the codec is trained
        writers: List[Any] = [writer.remote(self.colbert.config.to_dict(), plan.fingerprint, plan.compression,
                                            codec_folder, plan.long_docs, plan.stride) for _ in range(slots)]
        closing: Dict[Any, int] = {}
        try:
            refs = block_refs(self._encoded(sample + blocks, workers, gpus))
            if sample:  # the pipeline goes on encoding the shards while the codec is trained here
                got = [next(refs) for _ in sample]
                self.timings["sample_encoded"] = time.perf_counter() - started
                self._train_codec(got, len(frame), build)
                self.timings["codec_trained"] = time.perf_counter() - started
            for n, ref in enumerate(refs):
                i = owner[n]
                actor = writers[slot[i]]
                if n == first[i]:
                    actor.open.remote(i, str(build.shard_path(i)), str(build.work / f"{shard_name(i)}{RUNNING_SUFFIX}"))
                actor.add.remote(ref)
                if n == last[i]:
                    closing[actor.close.remote()] = i
            self.timings["encoded"] = time.perf_counter() - started
        except BaseException:
            for actor in writers:
                ray.kill(actor)
            raise
        reports, lost = [], {}
        for ref, i in closing.items():
            written = {"shard": i, "path": str(build.shard_path(i))}
            try:
                report: Dict[str, Any] = ray.get(ref)
                reports.append({**written, **report})
            except Exception as err:  # a lost worker or a failed write: this shard (and those queued behind it)
                lines = [line for line in str(err).splitlines() if line.strip()]
                cause = f"{type(err).__name__}: {lines[-1] if lines else ''}"  # the cause, not Ray's header
                if build.done(i):  # written whole, and its writer died before its report reached the driver
                    reports.append({**written, "report_lost": cause})
                else:
                    lost[i] = cause
        self.timings["written"] = time.perf_counter() - started
        for actor in writers:
            ray.kill(actor)
        if lost:
            raise LostShardsError(f"shards {sorted(lost)} of {self.path} were not written ({lost}); the other "
                                  f"{plan.num_shards - len(lost)} are kept in {build.work}: run the same build "
                                  "again to write only the missing ones", lost=lost, work=build.work)
        return reports

    def _train_codec(self, refs: List[Any], num_docs: int, build: ShardBuild) -> None:
        import ray
        from ray.data.block import BlockAccessor

        vectors = []
        for block in ray.get(refs):
            vectors += [v for _, v, _, _ in decode_block(BlockAccessor.for_block(block).to_batch_format("numpy"))]
        codec, used = train_shared_codec(vectors, self.compression, num_docs, len(vectors))
        build.save_codec(codec, used)

    def __repr__(self) -> str:
        return f"ShardedIndexer({str(self.path)!r}, {self.checkpoint!r}, compression={self.compression.format!r})"
