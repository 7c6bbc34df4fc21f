"""``ShardedColBERTIndex``: one corpus as several ordinary ColBERT indexes (shards) over disjoint sets of its
documents, searched together; a PyTerrier artifact of type ``colbert``, format ``sharded``.

A sharded index folder holds::

    pt_meta.json         type "colbert", format "sharded": the shards (name, documents, tokens), the encoder
                         fingerprint, the shards' storage format and the manifest of the files below (ShardedMeta)
    codec/               residual formats: the codec all shards share (codec.json, centroids.f16,
                         bucket_cutoffs.f32, bucket_weights.f32), trained once on a sample of every shard
    shard-00000/ …       each an ordinary ColBERT index (its own pt_meta.json lists its files' checksums)

The manifest records the size and checksum of the codec files and of every shard's ``pt_meta.json``; each of
those lists the checksums of its shard's files, so :meth:`ShardedColBERTIndex.verify` checks every byte. Opening
checks the manifest's small files (all of them).

Search: ``index.retriever(**options)`` runs each shard's own retriever (the options are the shards' format's) on
the same encoded queries and keeps, per query, the best ``num_results`` of all shards' hits, by score then docno
(each shard answers as arrays, :meth:`hits`, and one frame is laid out for all of them; :func:`merge_ranked`
merges result frames the same way). Each shard's top k holds every one of its documents that is in the overall top k,
so the merge is exact: with the same codec and a retriever that scores all its candidates (``ndocs=None`` for
the residual formats), the results are those of one index over all the documents. With pruning (the default),
each shard prunes its own candidates, so a sharded search scores at least as many documents as one index.
``index.scorer()`` sends each document to the shard that holds it.

Building: :mod:`.build` (``index.indexer(colbert, num_shards=...)`` here; on a Ray cluster,
``distributed.ShardedIndexer``). No Ray is needed to open or search a sharded index.
"""
from __future__ import annotations

import time
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union, cast

import numpy as np
import pandas as pd
import pyterrier as pt

from ...frames import EqualByKey, artifact_key, empty_output, hits_output, require_columns
from ...params import Parameters
from ...ranking import Hits, HitsSource, rank_by_score
from ...storage import ArtifactIntegrity, DamagedFileError, artifact_path, raise_damaged
from ..layout import ARTIFACT_TYPE, META_FILE, PACKAGE_HINT
from ..scorer import IndexScorer
from .build import SHARDED_FORMAT, ShardedMeta, is_sharded_folder

if TYPE_CHECKING:  # pragma: no cover
    from ...model.colbert import ColBERT
    from ...model.config import ColBERTConfig
    from ..artifact import ColBERTIndex
    from ..residual.codec import ResidualCodec
    from ..residual.compress import CompressionSpec
    from .build import LocalShardedIndexer

WHAT = "sharded ColBERT index"
REMEDY = "rebuild the shard or the index (a sharded build resumes from the shards left intact)"
__all__ = ["SHARDED_FORMAT", "ShardedColBERTIndex", "ShardedMeta", "is_sharded_folder", "merge_ranked"]


def _integrity(folder: Path, meta: ShardedMeta) -> ArtifactIntegrity:
    """The checks of the sharded index's own files (the codec and the shards' metadata; the shards check
    their own files)."""
    return ArtifactIntegrity(folder, meta.files, what=WHAT, remedy=REMEDY, source=folder / META_FILE,
                             required=meta.required_files())


class ShardedColBERTIndex(pt.Artifact):
    """Several ColBERT indexes (shards) searched as one (see the module docstring).

    ``ShardedColBERTIndex(path).indexer(colbert, num_shards=4).index(corpus)`` builds one on this machine;
    ``pt.Artifact.load(path)`` opens it.
    """

    ARTIFACT_TYPE = ARTIFACT_TYPE
    ARTIFACT_FORMAT = SHARDED_FORMAT
    ARTIFACT_PACKAGE_HINT = PACKAGE_HINT

    def __init__(self, path: Union[str, Path], *, verbose: bool = False):
        super().__init__(path)
        self.verbose = verbose

    # -- contents ------------------------------------------------------------------------------------------
    def built(self) -> bool:
        return (artifact_path(self) / META_FILE).exists()

    @cached_property
    def meta(self) -> ShardedMeta:
        if not self.built():
            raise FileNotFoundError(f"no sharded ColBERT index at {self.path} ({META_FILE} not found); build one "
                                    f"with ShardedColBERTIndex({str(self.path)!r}).indexer(colbert, "
                                    "num_shards=...).index(corpus)")
        return ShardedMeta.load(artifact_path(self))

    @cached_property
    def shards(self) -> List["ColBERTIndex"]:
        """The shards, in order, after the cheap checks: every file of the manifest present with its size and
        checksum (the codec and the shards' ``pt_meta.json``: all small), and each shard's sizes and encoder as
        the manifest says."""
        from ..artifact import ColBERTIndex

        folder, meta = artifact_path(self), self.meta
        _integrity(folder, meta).check_open(whole=meta.files)
        shards = [ColBERTIndex(folder / s["name"], verbose=self.verbose) for s in meta.shards]
        raise_damaged(folder, _shard_problems(meta, shards), what=WHAT, remedy=REMEDY)
        return shards

    def check(self) -> None:
        """The cheap checks of the sharded index and of every shard (:meth:`ColBERTIndex.check`)."""
        for shard in self.shards:
            shard.check()

    def verify(self) -> Dict[str, Any]:
        """Full content check: the manifest's files, then every shard's :meth:`ColBERTIndex.verify`, and that
        every shard's codec files are the shared codec's. Raises
        :class:`~pyterrier_fandom_colbert.storage.DamagedFileError` naming each damaged file; returns
        ``{"files", "bytes", "seconds", "shards"}`` (files relative to this folder)."""
        from ..artifact import ColBERTIndex

        started = time.perf_counter()
        folder = artifact_path(self)
        meta = ShardedMeta.load(folder)  # afresh
        problems = _integrity(folder, meta).problems()
        files, size = list(meta.files), sum(e["size"] for e in meta.files.values())
        shards = []
        for entry in meta.shards:
            shard = ColBERTIndex(folder / entry["name"])
            shards.append(shard)
            try:
                checked = shard.verify()
            except (DamagedFileError, ValueError, FileNotFoundError) as err:
                problems.append((entry["name"], str(err)))
                continue
            files += [f"{entry['name']}/{n}" for n in checked["files"]]
            size += checked["bytes"]
        if not problems:
            problems += _shard_problems(meta, shards)
        raise_damaged(folder, problems, what=WHAT, remedy=REMEDY)
        return {"files": sorted(files), "bytes": size, "shards": len(shards),
                "seconds": round(time.perf_counter() - started, 3)}

    def __len__(self) -> int:
        return self.meta.num_docs

    @property
    def fingerprint(self) -> str:
        return self.meta.fingerprint

    @property
    def compression(self) -> str:
        return self.meta.shard_format

    @property
    def config(self) -> "ColBERTConfig":
        return self.shards[0].config

    @property
    def codec(self) -> "ResidualCodec":
        """The residual codec every shard shares."""
        return self.shards[0].codec

    def check_encoder(self, colbert: "ColBERT") -> None:
        self.shards[0].check_encoder(colbert)

    @cached_property
    def shard_starts(self) -> np.ndarray:
        """``[num_shards + 1]``: shard ``i`` holds documents ``shard_starts[i]:shard_starts[i + 1]`` of the
        sharded index's order (the input order of the build)."""
        return np.concatenate([[0], np.cumsum([s["num_docs"] for s in self.meta.shards])]).astype(np.int64)

    def locate(self, docnos: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
        """(shard, document id within it) of each docno; a ValueError lists docnos no shard holds."""
        wanted = np.asarray(list(docnos), dtype=str)
        shard_of = np.full(len(wanted), -1, dtype=np.int64)
        local = np.full(len(wanted), -1, dtype=np.int64)
        for i, shard in enumerate(self.shards):
            if not len(wanted):
                break
            ids = np.asarray(shard.docnos.inv[wanted], dtype=np.int64)
            hit = (ids >= 0) & (shard_of < 0)
            shard_of[hit], local[hit] = i, ids[hit]
        missing = wanted[shard_of < 0]
        if len(missing):
            shown = list(dict.fromkeys(missing.tolist()))
            raise ValueError(f"{len(missing)} docno(s) are not in the sharded index at {self.path}, e.g. "
                             f"{shown[:5]}; re-rank only candidates from the indexed corpus")
        return shard_of, local

    def doc_vectors(self, doc: Union[str, int]) -> Tuple[np.ndarray, np.ndarray]:
        """(vectors, token ids) of one document, by docno or by its position in the sharded index."""
        if isinstance(doc, str):
            shard, local = (int(a[0]) for a in self.locate([doc]))
        else:
            if not 0 <= int(doc) < len(self):
                raise IndexError(f"document id {doc} is out of range: the index holds {len(self)} documents")
            shard = int(np.searchsorted(self.shard_starts, int(doc), side="right")) - 1
            local = int(doc) - int(self.shard_starts[shard])
        return self.shards[shard].doc_vectors(local)

    # -- factories -----------------------------------------------------------------------------------------
    def indexer(self, colbert: "ColBERT", *, num_shards: Optional[int] = None, shard_size: Optional[int] = None,
                compression: Union[str, "CompressionSpec"] = "residual2", **options: Any) -> "LocalShardedIndexer":
        """Builds the sharded index on this machine (no Ray): ``num_shards`` shards of equal size (or shards of
        ``shard_size`` documents), each compressed with one codec trained on a sample of all of them. Other
        ``options``: ``text_field``, ``batch_size``, ``long_docs``, ``stride``, ``sample_docs``, ``overwrite``,
        ``verbose`` (see :class:`~.build.LocalShardedIndexer`). An interrupted build resumes: the shards
        already written are kept."""
        from .build import LocalShardedIndexer

        return LocalShardedIndexer(self, colbert, num_shards=num_shards, shard_size=shard_size,
                                   compression=compression, **options)

    def retriever(self, colbert: Optional["ColBERT"] = None, **options: Any) -> pt.Transformer:
        """End-to-end retrieval over every shard, merged to the exact top ``num_results`` (see the module
        docstring); ``options`` are the shards' retriever's (``ColBERTIndex.retriever``)."""
        stage = ShardedRetriever(self, **options)
        return self._with_encoder(colbert, stage, bool(options.get("strict", False)))

    def scorer(self, colbert: Optional["ColBERT"] = None, *, strict: bool = False,
               verbose: bool = False) -> pt.Transformer:
        """Re-ranker from the stored vectors: each document scored by the shard that holds it."""
        return self._with_encoder(colbert, ShardedScorer(self, strict=strict, verbose=verbose), strict)

    def _with_encoder(self, colbert: Optional["ColBERT"], stage: pt.Transformer, strict: bool) -> pt.Transformer:
        if colbert is None:
            return stage
        self.check_encoder(colbert)
        return colbert.query_encoder(strict=strict) >> stage

    def __repr__(self) -> str:
        return f"ShardedColBERTIndex({str(self.path)!r})"


def _shard_problems(meta: ShardedMeta, shards: Sequence["ColBERTIndex"]) -> List[Tuple[str, str]]:
    """Shards whose sizes, encoder or format are not what ``meta`` records, or whose codec is not the shared one."""
    problems = []
    for entry, shard in zip(meta.shards, shards):
        m = shard.meta
        got = (m.num_docs, m.num_tokens, m.fingerprint, m.format)
        want = (entry["num_docs"], entry["num_tokens"], meta.fingerprint, meta.shard_format)
        if got != want:
            problems.append((f"{entry['name']}/{META_FILE}", f"{shard.path} holds (documents, tokens, encoder, "
                                                             f"format) {got}; the sharded index records {want}"))
        for name, shared in meta.files.items():
            if name.startswith("codec/") and name != "codec/codec.json":
                own = (m.files or {}).get(name.split("/", 1)[1])
                if own != shared:
                    problems.append((f"{entry['name']}/{name.split('/', 1)[1]}",
                                     f"{artifact_path(shard) / name.split('/', 1)[1]} is not the shared codec's "
                                     f"{name}"))
    return problems


def merge_ranked(results: Sequence[pd.DataFrame], num_results: Optional[int]) -> pd.DataFrame:
    """The shards' result frames as one: per qid (in order of first appearance) the best ``num_results`` rows
    (all when None) by score descending, docno breaking ties, ranked from 0.

    >>> a = pd.DataFrame({"qid": ["q"], "docno": ["d1"], "score": [0.5], "rank": [0]})
    >>> b = pd.DataFrame({"qid": ["q", "q"], "docno": ["d3", "d2"], "score": [0.9, 0.5], "rank": [0, 1]})
    >>> merge_ranked([a, b], 2)
      qid docno  score  rank
    0   q    d3    0.9     0
    1   q    d1    0.5     1
    """
    frames = [r for r in results if len(r)]
    if not frames:
        return results[0].iloc[:0] if results else pd.DataFrame(columns=["qid", "docno", "score", "rank"])
    merged = rank_by_score(pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0])
    if num_results is not None:
        merged = merged[merged["rank"] < num_results].reset_index(drop=True)
    return merged


def concat_hits(parts: Sequence[Hits]) -> Hits:
    """The hits of every shard's retriever over the same input as one (their frames are the same rows: each
    retriever leaves out the same unusable queries).

    >>> frame = pd.DataFrame({"qid": ["q"]})
    >>> a = Hits(frame, np.array([0]), np.array(["d1"], dtype=object), np.array([0.5]))
    >>> b = Hits(frame, np.array([0, 0]), np.array(["d3", "d2"], dtype=object), np.array([0.9, 0.4]))
    >>> concat_hits([a, b]).docnos.tolist()
    ['d1', 'd3', 'd2']
    """
    return Hits(parts[0].frame, *(np.concatenate([getattr(p, name) for p in parts])
                                  for name in ("rows", "docnos", "scores")))


class ShardedRetriever(EqualByKey, Parameters, pt.Transformer):
    """Every shard's retriever on the same encoded queries, merged (:func:`merge_ranked`): qid, query_embs →
    + docno, score, rank (other input columns kept)."""

    def __init__(self, index: ShardedColBERTIndex, **options: Any):
        self.index = index
        self.options = dict(options)
        self.num_results = int(options.get("num_results", 1000))
        # made now: each shard refuses options of another format, naming them, before any query
        self.stages = [cast(HitsSource, shard.retriever(**options)) for shard in index.shards]

    def _key(self) -> Tuple[Any, ...]:
        return (artifact_key(self.index), tuple(sorted((k, repr(v)) for k, v in self.options.items())))

    def _constructor_args(self) -> Dict[str, Any]:
        return {"index": self.index, **self.options}

    def fuse_rank_cutoff(self, k: int) -> Optional["ShardedRetriever"]:
        """``% k``: each shard's retriever cut as one index's is (its search depth kept, so the top ``k`` is the
        top ``k`` of the uncut list)."""
        if k >= self.num_results:
            return self
        cut = getattr(self.stages[0], "fuse_rank_cutoff", lambda k: None)(k) if self.stages else None
        args: Dict[str, Any] = getattr(cut, "_constructor_args", dict)()
        depth = {name: args[name] for name in _DEPTH_OPTIONS if name in args}
        return ShardedRetriever(self.index, **{**self.options, **depth, "num_results": k})

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, ["qid", "query_embs"], self)
        return [*input_columns, "docno", "score", "rank"]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid", "query_embs"], self)
        if len(inp) == 0:
            return empty_output(inp, ["docno", "score", "rank"])
        return hits_output(concat_hits([stage.hits(inp) for stage in self.stages]), self.num_results)

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{self.index!r}.retriever({options})"


#: the options that set a shard retriever's search depth, pinned by ``% k`` (fp16: k̂; compressed: PLAID's)
_DEPTH_OPTIONS = ("lam", "k_hat", "ncells", "threshold", "ndocs", "nscore")


class ShardedScorer(IndexScorer):
    """Re-ranker: each (query, document) row scored by the shard holding the document, then ranked per qid (the
    settings, equality and outputs of a single index's :class:`~..scorer.IndexScorer`; ``index`` is a
    :class:`ShardedColBERTIndex`)."""

    index: Any

    def __init__(self, index: "ShardedColBERTIndex", *, strict: bool = False, verbose: bool = False):
        # (IndexScorer's own scoring, which needs a single index's vectors, is replaced by transform below)
        super().__init__(index, strict=strict, verbose=verbose)  # type: ignore[arg-type]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, ["qid", "docno", "query_embs"], self)
        if len(inp) == 0:
            return empty_output(inp, ["score", "rank"])
        shard_of, _ = self.index.locate(inp["docno"].astype(str).tolist())
        parts = []
        for i in np.unique(shard_of):
            scorer = self.index.shards[int(i)].scorer(strict=self.strict, verbose=self.verbose)
            parts.append(scorer(inp[shard_of == i].reset_index(drop=True)))
        return merge_ranked(parts, None)

    def __repr__(self) -> str:
        return f"{self.index!r}.scorer()"
