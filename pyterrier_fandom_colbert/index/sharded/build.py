"""Building a :class:`~.artifact.ShardedColBERTIndex`, resumably, on one machine or on many.

A build has a plan (:class:`ShardPlan`: which documents each shard holds, the encoder, the storage format) and
a work folder beside the target (``.NAME.sharded-build``) that outlives a failed run:

1. The plan is written to ``plan.json`` in the work folder; a run that finds a plan there checks that it is
   the same build (same encoder, format, documents per shard and the first and last docno of every shard) and
   resumes it; another build of the same target is refused until the work folder is deleted (or
   ``overwrite=True`` given).
2. The residual codec (centroids, bucket cutoffs and weights) is trained once, on the token vectors of the first
   ``ceil(sample_docs / num_shards)`` documents of every shard (:func:`sample_positions`), and saved to
   ``codec/`` in the work folder; every shard is compressed with it, so that all shards' codes and scores are
   comparable. A resumed build reads it back rather than training again.
3. Each shard is an ordinary ColBERT index written by :class:`~..writer.IndexWriter` into ``shard-NNNNN/`` of the
   work folder, atomically: a shard whose writer died leaves only a hidden temporary folder, removed on the next
   run, which builds that shard again. Shards already complete are kept.
4. When every shard is complete (:meth:`ShardBuild.finish`), docnos are checked unique across shards, and the
   shards and the codec move into a fresh folder (:func:`~pyterrier_fandom_colbert.storage.atomic_folder`) whose
   ``pt_meta.json`` (written last) lists them with the checksum of each shard's own ``pt_meta.json`` (which in
   turn lists the checksums of that shard's files); it then replaces the target.

Who encodes and writes the shards differs: :class:`LocalShardedIndexer` (here) does it in this process, one shard
after the other; ``distributed.ShardedIndexer`` does it on a Ray cluster.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from ...checks import positive_int
from ...frames import check_record
from ...lazy import forget_cached
from ...model.config import ColBERTConfig
from ...storage import (
    DamagedFileError,
    JsonConfig,
    artifact_path,
    atomic_folder,
    build_manifest,
    is_artifact_folder,
    move_into,
    parse_manifest,
    read_artifact_meta,
    read_json,
    write_artifact_meta,
    write_json,
)
from ..layout import (
    ARTIFACT_TYPE,
    CENTROIDS_FILE,
    CODEC_FILE,
    CUTOFFS_FILE,
    META_FILE,
    PACKAGE_HINT,
    WEIGHTS_FILE,
)
from ..residual.compress import CompressionSpec, as_spec

if TYPE_CHECKING:  # pragma: no cover
    from ...model.colbert import ColBERT
    from ..residual.codec import ResidualCodec
    from .artifact import ShardedColBERTIndex

SHARDED_FORMAT = "sharded"
PLAN_FILE = "plan.json"
CODEC_DIR = "codec"
#: codec files kept in ``codec/`` of a sharded index (the same bytes as in every shard)
CODEC_FILES = (CODEC_FILE, CENTROIDS_FILE, CUTOFFS_FILE, WEIGHTS_FILE)
#: documents whose vectors train the shared codec (spread over the shards)
SAMPLE_DOCS = 4096
#: marks a shard being written: "host pid" of its writer
RUNNING_SUFFIX = ".running"


@dataclass(frozen=True)
class ShardedMeta(JsonConfig):
    """``pt_meta.json`` of a sharded index: sizes, encoder, the shards in order and the manifest."""

    num_docs: int
    num_tokens: int
    dim: int
    fingerprint: str
    #: the storage format of every shard (``fp16`` or ``residual1|2|4``)
    shard_format: str
    #: ``[{"name", "num_docs", "num_tokens"}]`` in order
    shards: List[Dict[str, Any]]
    type: str = ARTIFACT_TYPE
    format: str = SHARDED_FORMAT
    package_hint: str = PACKAGE_HINT
    files: Dict[str, Dict[str, Any]] = field(default_factory=dict, hash=False)

    def save(self, folder: Union[str, Path]) -> Path:
        return write_artifact_meta(Path(folder) / META_FILE, self.to_dict())

    def required_files(self) -> List[str]:
        """The files its manifest must list: every shard's ``pt_meta.json``, and the shared codec's files (residual
        formats)."""
        codec = [] if self.shard_format == "fp16" else [f"{CODEC_DIR}/{n}" for n in CODEC_FILES]
        return codec + [f"{s.get('name')}/{META_FILE}" for s in self.shards if isinstance(s, dict)]

    @classmethod
    def load(cls, folder: Union[str, Path]) -> "ShardedMeta":
        source = Path(folder) / META_FILE
        meta = cls.from_dict(read_artifact_meta(folder, ARTIFACT_TYPE, SHARDED_FORMAT), source=source)
        parse_manifest(meta.files, source)
        if not meta.shards or not all(isinstance(s, dict) for s in meta.shards):
            raise DamagedFileError(source, f"{source} is damaged: its shards are {meta.shards!r}")
        return meta


def is_sharded_folder(folder: Union[str, Path]) -> bool:
    """Whether ``folder`` holds a sharded ColBERT index (what ``overwrite=True`` may replace)."""
    return is_artifact_folder(folder, ARTIFACT_TYPE, SHARDED_FORMAT)


def shard_name(i: int) -> str:
    """``shard-00003``: the folder of shard ``i``."""
    return f"shard-{i:05d}"


def work_folder(target: Path) -> Path:
    """The work folder of a build of ``target`` (hidden, beside it)."""
    return target.with_name(f".{target.name}.sharded-build")


def shard_bounds(num_docs: int, num_shards: Optional[int] = None, shard_size: Optional[int] = None) -> List[int]:
    """Document boundaries ``[0, …, num_docs]`` of consecutive shards: ``num_shards`` shards of sizes differing by
    at most one, or shards of ``shard_size`` documents (the last one shorter).

    >>> shard_bounds(10, num_shards=3), shard_bounds(10, shard_size=4)
    ([0, 4, 7, 10], [0, 4, 8, 10])
    >>> shard_bounds(2, num_shards=3)
    Traceback (most recent call last):
    ...
    ValueError: num_shards=3 but there are only 2 documents; every shard needs at least one
    """
    positive_int("num_docs", num_docs, what="documents to index")
    if (num_shards is None) == (shard_size is None):
        raise ValueError("give exactly one of num_shards and shard_size")
    if shard_size is not None:
        positive_int("shard_size", shard_size, what="documents per shard")
        return [*range(0, num_docs, shard_size), num_docs]
    positive_int("num_shards", num_shards, what="shards")
    assert num_shards is not None
    if num_shards > num_docs:
        raise ValueError(f"num_shards={num_shards} but there are only {num_docs} documents; every shard needs at "
                         "least one")
    base, extra = divmod(num_docs, num_shards)
    return [0, *np.cumsum([base + (i < extra) for i in range(num_shards)]).tolist()]


def sample_positions(bounds: Sequence[int], sample_docs: int) -> List[Tuple[int, int]]:
    """``(first, end)`` document ranges whose vectors train the shared codec: the first
    ``ceil(sample_docs / num_shards)`` documents of each shard (fewer in a shorter shard).

    >>> sample_positions([0, 4, 7, 10], 4)
    [(0, 2), (4, 6), (7, 9)]
    """
    per_shard = math.ceil(sample_docs / (len(bounds) - 1))
    return [(a, min(b, a + per_shard)) for a, b in itertools.pairwise(bounds)]


def batch_ranges(ranges: Iterable[Tuple[int, int]], batch_size: int) -> List[Tuple[int, int]]:
    """Each ``(first, end)`` range cut into model batches of ``batch_size`` documents from its start: the batches
    of the indexer, which both the local and the Ray build encode (a vector depends, in its last bits, on the other
    documents of its batch, so the two builds batch alike to store the same vectors).

    >>> batch_ranges([(0, 3), (3, 5)], 2)
    [(0, 2), (2, 3), (3, 5)]
    """
    return [(s, min(s + batch_size, end)) for first, end in ranges for s in range(first, end, batch_size)]


@dataclass(frozen=True)
class ShardPlan(JsonConfig):
    """What a sharded build makes (``plan.json``): shard ``i`` holds documents ``bounds[i]:bounds[i + 1]`` of the
    input, in input order."""

    fingerprint: str
    bounds: List[int]
    first_docnos: List[str]
    last_docnos: List[str]
    compression: Dict[str, Any]
    long_docs: str
    stride: Optional[int]
    sample_docs: int
    config: Dict[str, Any] = field(default_factory=dict)

    @property
    def num_shards(self) -> int:
        return len(self.bounds) - 1

    @property
    def spec(self) -> CompressionSpec:
        return CompressionSpec.from_dict(self.compression)


class ShardBuild:
    """The work folder of one sharded build (see the module docstring)."""

    def __init__(self, target: Union[str, Path], plan: ShardPlan, *, overwrite: bool = False):
        from ...storage import check_target

        self.target = Path(target)
        check_target(self.target, overwrite=overwrite, replaceable=is_sharded_folder, what="sharded ColBERT index")
        self.overwrite = overwrite
        self.plan = plan
        self.work = work_folder(self.target)
        existing = self.work / PLAN_FILE
        if existing.is_file():
            found = read_json(existing, "sharded build plan")
            if found != json.loads(json.dumps(plan.to_dict())):  # as JSON: tuples read back as lists
                if not overwrite:
                    raise ValueError(f"{self.work} holds an unfinished build of another plan (different encoder, "
                                     "documents or format); delete it, or pass overwrite=True to start afresh")
                shutil.rmtree(self.work)
        self.work.mkdir(parents=True, exist_ok=True)
        for stale in self.work.glob(".shard-*"):  # writers that died: their temporary folders
            shutil.rmtree(stale, ignore_errors=True)
        for marker in self.work.glob(f"*{RUNNING_SUFFIX}"):
            marker.unlink()
        if not existing.is_file():
            write_json(existing, plan.to_dict())

    def shard_path(self, i: int) -> Path:
        return self.work / shard_name(i)

    def done(self, i: int) -> bool:
        return (self.shard_path(i) / META_FILE).is_file()

    def pending(self) -> List[int]:
        """Shards not yet written (by this run or an earlier one)."""
        return [i for i in range(self.plan.num_shards) if not self.done(i)]

    def mark_running(self, i: int) -> Path:
        """A marker naming this host and process as the writer of shard ``i`` (removed when it is complete)."""
        marker = self.work / f"{shard_name(i)}{RUNNING_SUFFIX}"
        marker.write_text(f"{socket.gethostname()} {os.getpid()}\n")
        return marker

    # -- the shared codec ------------------------------------------------------------------------------------
    @property
    def codec_folder(self) -> Path:
        return self.work / CODEC_DIR

    def codec(self) -> Optional["ResidualCodec"]:
        """The codec trained by this build so far (None: not yet trained, or an fp16 build)."""
        from ..residual.compress import load_codec

        info_file = self.codec_folder / CODEC_FILE
        if not info_file.is_file():
            return None
        return load_codec(self.codec_folder, read_json(info_file, "shared codec description"),
                          int(self.plan.config["dim"]))

    def save_codec(self, codec: "ResidualCodec", sample_tokens: int) -> None:
        with atomic_folder(self.codec_folder, overwrite=True, what="shared codec") as tmp:
            codec.centroids.astype(np.float16).tofile(tmp / CENTROIDS_FILE)
            codec.cutoffs.tofile(tmp / CUTOFFS_FILE)
            codec.weights.tofile(tmp / WEIGHTS_FILE)
            exact = {} if codec.exact_above is None else {"exact_above": codec.exact_above}
            write_json(tmp / CODEC_FILE, {"nbits": codec.nbits, "num_centroids": codec.num_centroids,
                                          "sample": sample_tokens, "spec": self.plan.compression, **exact})

    # -- finishing -------------------------------------------------------------------------------------------
    def finish(self) -> Path:
        """Check the shards and move them into place as one sharded index (see the module docstring); returns its
        folder."""
        from ..artifact import ColBERTIndex

        missing = self.pending()
        if missing:
            raise RuntimeError(f"shards {missing} of {self.target} are not written yet")
        shards = [ColBERTIndex(self.shard_path(i)) for i in range(self.plan.num_shards)]
        check_shards(shards, self.plan)
        with atomic_folder(self.target, overwrite=self.overwrite, what="sharded ColBERT index",
                           replaceable=is_sharded_folder) as tmp:
            names: List[str] = []
            if self.codec_folder.is_dir():
                move_into(self.codec_folder, tmp / CODEC_DIR)
                names += [f"{CODEC_DIR}/{n}" for n in CODEC_FILES]
            entries: List[Dict[str, Any]] = []
            for i, shard in enumerate(shards):
                move_into(self.shard_path(i), tmp / shard_name(i))
                entries.append({"name": shard_name(i), "num_docs": shard.meta.num_docs,
                                "num_tokens": shard.meta.num_tokens})
                names.append(f"{shard_name(i)}/{META_FILE}")
            first = shards[0].meta
            ShardedMeta(num_docs=sum(e["num_docs"] for e in entries),
                        num_tokens=sum(e["num_tokens"] for e in entries), dim=first.dim,
                        fingerprint=self.plan.fingerprint, shard_format=first.format, shards=entries,
                        files=build_manifest(tmp, names)).save(tmp)
        shutil.rmtree(self.work, ignore_errors=True)
        return self.target


def check_shards(shards: Sequence[Any], plan: ShardPlan) -> None:
    """Every shard holds its planned documents (count, first and last docno), by the planned encoder, and no
    docno is in two shards."""
    for i, shard in enumerate(shards):
        want = plan.bounds[i + 1] - plan.bounds[i]
        if shard.meta.num_docs != want or shard.fingerprint != plan.fingerprint:
            raise ValueError(f"{shard.path} holds {shard.meta.num_docs} documents by encoder {shard.fingerprint}; "
                             f"the plan gives it {want} by {plan.fingerprint}: delete it and build again")
        ends = shard.docnos_of(np.array([0, want - 1])).tolist()
        if ends != [plan.first_docnos[i], plan.last_docnos[i]]:
            raise ValueError(f"{shard.path} holds documents {ends[0]!r}..{ends[1]!r}; the plan gives it "
                             f"{plan.first_docnos[i]!r}..{plan.last_docnos[i]!r}: delete it and build again")
    duplicate_docnos(shards)


def duplicate_docnos(shards: Sequence[Any], chunk: int = 100_000) -> None:
    """Refuse a docno held by two shards (each shard's writer already refused duplicates within it)."""
    for i, shard in enumerate(shards):
        for start in range(0, len(shard), chunk):
            docnos = shard.docnos_of(np.arange(start, min(start + chunk, len(shard)))).astype(str)
            for other in shards[i + 1:]:
                found = np.asarray(other.docnos.inv[docnos]) >= 0
                if found.any():
                    raise ValueError(f"docno {docnos[found][0]!r} is in two shards ({shard.path.name} and "
                                     f"{other.path.name}): every document needs a unique docno")


def train_shared_codec(vectors: Sequence[np.ndarray], spec: CompressionSpec, num_docs: int,
                       sampled_docs: int) -> Tuple["ResidualCodec", int]:
    """The codec of all shards from the token vectors of the sampled documents (``vectors``: one ``[n, d]`` array
    per document), and the number of vectors it was trained on. The number of centroids follows
    ``spec.resolve`` for the corpus's estimated size (the sample's mean tokens per document times
    ``num_docs``); k-means runs on ``spec``'s sample size of the sampled vectors (all of them when fewer),
    drawn with ``spec.seed``; with ``spec.exact_share``, the codec's ``exact_above`` comes from the same
    sample."""
    stacked = np.concatenate([np.asarray(v, dtype=np.float16) for v in vectors])
    estimated = max(len(stacked), round(len(stacked) / max(sampled_docs, 1) * num_docs))
    num_centroids, sample = spec.resolve(estimated)
    if num_centroids > len(stacked):
        raise ValueError(f"the codec needs {num_centroids} centroids but the {sampled_docs} sampled documents have "
                         f"only {len(stacked)} token vectors; sample more documents (sample_docs) or give fewer "
                         "centroids (CompressionSpec(num_centroids=...))")
    if sample < len(stacked):
        rows = np.sort(np.random.default_rng(spec.seed).choice(len(stacked), size=sample, replace=False))
        stacked = stacked[rows]
    return spec.train_codec(stacked, num_centroids), len(stacked)


def records_of(inp: Union[Iterable[Dict[str, Any]], pd.DataFrame], text_field: str) -> List[Tuple[str, str]]:
    """(docno, text) of every record (a local build needs their number before it starts)."""
    if isinstance(inp, pd.DataFrame):
        inp = inp.to_dict("records")
    return [check_record(record, i, text_field) for i, record in enumerate(inp)]


def make_plan(docnos: Sequence[str], colbert_fingerprint: str, config: ColBERTConfig, spec: CompressionSpec, *,
              num_shards: Optional[int], shard_size: Optional[int], long_docs: str, stride: Optional[int],
              sample_docs: int) -> ShardPlan:
    """The plan of a build over documents ``docnos`` (in input order)."""
    bounds = shard_bounds(len(docnos), num_shards, shard_size)
    return ShardPlan(fingerprint=colbert_fingerprint, bounds=bounds,
                     first_docnos=[str(docnos[a]) for a in bounds[:-1]],
                     last_docnos=[str(docnos[b - 1]) for b in bounds[1:]], compression=spec.to_dict(),
                     long_docs=long_docs, stride=stride, sample_docs=sample_docs, config=config.to_dict())


class LocalShardedIndexer:
    """Builds a sharded index in this process (no Ray): the shared codec from a sample, then each shard in turn
    with the ordinary indexer. ``ShardedColBERTIndex(path).indexer(colbert, num_shards=...)`` makes one."""

    def __init__(self, index: "ShardedColBERTIndex", colbert: "ColBERT", *, num_shards: Optional[int] = None,
                 shard_size: Optional[int] = None, compression: Union[str, CompressionSpec] = "residual2",
                 text_field: str = "text", batch_size: int = 1024, long_docs: str = "windows",
                 stride: Optional[int] = None, sample_docs: int = SAMPLE_DOCS, overwrite: bool = False,
                 verbose: bool = False):
        from ...model.tokenization import check_long_docs

        self.index_ref, self.colbert = index, colbert
        self.num_shards, self.shard_size = num_shards, shard_size
        self.compression = as_spec(compression)
        self.text_field, self.batch_size = text_field, positive_int("batch_size", batch_size)
        self.long_docs = long_docs
        self.stride = check_long_docs(long_docs, stride, colbert.tokenizer.max_doc_pieces, colbert.config.doc_maxlen)
        self.sample_docs = positive_int("sample_docs", sample_docs, what="documents sampled to train the codec")
        self.overwrite, self.verbose = overwrite, verbose

    def index(self, inp: Union[Iterable[Dict[str, Any]], pd.DataFrame]) -> "ShardedColBERTIndex":
        from ..artifact import ColBERTIndex

        records = records_of(inp, self.text_field)
        plan = make_plan([d for d, _ in records], self.colbert.fingerprint(), self.colbert.config,
                         self.compression, num_shards=self.num_shards, shard_size=self.shard_size,
                         long_docs=self.long_docs, stride=self.stride, sample_docs=self.sample_docs)
        build = ShardBuild(artifact_path(self.index_ref), plan, overwrite=self.overwrite)
        codec = build.codec()
        if self.compression.compressed and codec is None:
            vectors = []
            for start, end in batch_ranges(sample_positions(plan.bounds, plan.sample_docs), self.batch_size):
                pieces = self.colbert.tokenizer.document_pieces([t for _, t in records[start:end]])
                vectors += [v for v, _, _ in self.colbert.encode_pieces(pieces, self.stride)]
            codec, used = train_shared_codec(vectors, self.compression, len(records), len(vectors))
            build.save_codec(codec, used)
        for i in build.pending():
            marker = build.mark_running(i)
            lo, hi = plan.bounds[i], plan.bounds[i + 1]
            try:
                ColBERTIndex(build.shard_path(i)).indexer(
                    self.colbert, text_field="text", batch_size=self.batch_size, long_docs=self.long_docs,
                    stride=self.stride, ann=None if self.compression.compressed else "default",
                    compression=self.compression, codec=codec, verbose=self.verbose,
                ).index([{"docno": d, "text": t} for d, t in records[lo:hi]])
            finally:
                marker.unlink(missing_ok=True)
        build.finish()
        forget_cached(self.index_ref)  # the folder is new: nothing read before it counts
        return self.index_ref
