"""Building a search folder (:func:`build_folder`, ``pfc index``), in steps: the source is streamed once into
the passage table and the TF-IDF index (:func:`read_passages`), the passages read back from the TF-IDF text store
are encoded into the ColBERT index (:func:`encode_passages`: trained codec, a given codec, or sharded on Ray), and
the manifest is written last (:func:`write_manifest`); all inside a hidden temporary folder that is renamed into
place when complete. The passages encoded are kept chunk by chunk beside the target (:mod:`.resume`) until the
build completes, so an interrupted build resumes. :func:`build` is the part :func:`build_folder` and
``update_folder`` share."""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import numpy as np

from ...checks import positive_int
from ...index.fp16.options import Fp16Options
from ...progress import progress
from ...storage import (
    OWNER_FILE,
    AtomicFolder,
    atomic_folder,
    build_manifest,
    interruptible,
    mark_owner,
    move_into,
    new_hasher,
    release_owner,
    remove_stale_builds,
    write_artifact_meta,
)
from .assemble import assemble, docnos_of, stored_passages
from .manifest import (
    COLBERT_DIR,
    COLBERT_META,
    FOLDER_FILES,
    MANIFEST,
    OFFSETS,
    PAGES,
    PASSAGES,
    TFIDF_DIR,
    Manifest,
    SearchSettings,
    is_pending_folder,
    is_search_folder,
    load_manifest,
)
from .resume import EncodedChunks, encode_into, encoding_key, keeping_encoded
from .sources import SourceStats, is_dump, open_source

if TYPE_CHECKING:  # pragma: no cover
    from .update import PreviousFolder

#: ColBERT indexes with more token vectors than this get a compact IVF-PQ fast-scan index instead of IVF
ANN_MIN_TOKENS = 4_000_000
#: an update's summary advises a full rebuild once the passages encoded since the codec was trained exceed this
#: share of the folder's passages
ADVISE_REBUILD = 0.25


@dataclass
class BuildReport:
    """What :func:`build_folder` did (also in the folder's manifest)."""

    folder: Path
    manifest: Manifest

    def summary(self) -> str:
        """One paragraph for people."""
        m = self.manifest
        skipped = ", ".join(f"{n:,} {why}" for why, n in sorted(m.skipped.items()) if n)
        pages = (f"{m.pages:,} pages read, {m.articles:,} articles kept" + (f" (skipped: {skipped})" if skipped else "")
                 if m.pages != m.articles else f"{m.pages:,} pages")
        t = m.seconds
        cut = ""
        if m.cut:
            shown = ", ".join(f"{title!r} ({size:,} {unit})" for title, size, unit in m.cut["first"][:3])
            cut = (f" Cut to the size limits: {m.cut['pages']:,} pages, {m.cut['passages']:,} passages "
                   f"(e.g. {shown}).")
        if m.update is not None:
            u = m.update
            text = (f"Updated {self.folder} from {m.source}: {u['pages_parsed']:,} pages new or changed (parsed), "
                    f"{u['pages_reused']:,} unchanged, {u['pages_removed']:,} removed; {u['passages_encoded']:,} "
                    f"passages encoded, {u['passages_reused']:,} kept, {u['passages_removed']:,} dropped; now "
                    f"{m.passages:,} passages, {_size(m.bytes)} on disk; {_duration(t['total'])}.")
            if m.codec and m.codec.get("trained_on") and m.codec["encoded_since"] > ADVISE_REBUILD * m.passages:
                text += (f" {m.codec['encoded_since']:,} passages were encoded since the ColBERT codec was trained "
                         f"(on {m.codec['trained_on']:,}): rebuild with `pfc index {m.source} {self.folder} "
                         "--overwrite` to train one on the current text.")
            return text + cut
        return (f"Indexed {m.name} from {m.source}: {pages}; {m.passages:,} passages, {m.tokens:,} ColBERT "
                f"tokens; {_size(m.bytes)} on disk in {self.folder}; {_duration(t['total'])} (reading and TF-IDF "
                f"{_duration(t['read_tfidf'])}, ColBERT {_duration(t['colbert'])}). Ask it questions with "
                f"`pfc search {self.folder} \"your question\"` or `pfc serve {self.folder}`.{cut}")


def _size(n: float) -> str:
    """
    >>> _size(1536), _size(3 * 1024 ** 3)
    ('1.5 KiB', '3.0 GiB')
    """
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _duration(seconds: float) -> str:
    """
    >>> _duration(4.26), _duration(3725)
    ('4.3 s', '1 h 2 min')
    """
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes = int(seconds // 60)
    return f"{minutes} min {int(seconds % 60)} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def folder_bytes(path: Path) -> int:
    """The bytes of the files under ``path`` (a build's owner record left out)."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file() and p.name != OWNER_FILE)



def build_folder(source: Union[str, Path, Iterable[Dict[str, Any]]], folder: Union[str, Path], *,
                 checkpoint: Optional[str] = None, colbert=None, settings: SearchSettings = SearchSettings(),
                 overwrite: bool = False, batch_size: int = 64, verbose: bool = False,
                 passage_config=None, ray=None, cpu_precision: str = "float32",
                 codec_from: Union[str, Path, None] = None, restart: bool = False) -> BuildReport:
    """Build a search folder from a dump file, an ir_datasets id or an iterable of passage dicts.

    ``passage_config``: how a dump becomes passages (``data.passages.PassageConfig``, e.g. a lower
    ``min_page_words``); None: the default.

    ``checkpoint``: a ColBERT checkpoint (or backbone) folder, None for the package's default; ``colbert``: an
    already loaded encoder instead (its checkpoint is still recorded as ``checkpoint``). ``batch_size`` (passages
    per forward pass) and ``cpu_precision`` (``ColBERT``'s: ``"bfloat16"`` measured about 2x faster on a CPU with
    native bf16, quality within 0.001, docs/app.md) apply to the encoder loaded here, not to a given one.

    ``ray``: an :class:`~.sharded.RayBuild` to build the ColBERT part as a sharded index on a Ray cluster.

    ``settings.compression`` chooses how the ColBERT index stores its vectors (default ``residual2``: its codec is
    trained on a sample of this corpus's vectors). ``codec_from``: another search folder whose residual codec is
    used instead of training one; what :func:`update_folder` keeps, and so what an updated folder equals.

    An interrupted build (Ctrl-C, ``kill``, ``kill -9``) keeps the passages it encoded beside ``folder``
    (``.NAME.encoded``, :mod:`.resume`); the same call continues from there, and makes the folder an
    uninterrupted build makes. ``restart``: discard them and encode everything again.
    """
    from ...model.colbert import ColBERT

    folder = Path(folder)
    positive_int("batch_size", batch_size, what="passages per forward pass")  # before the model loads
    if ray is not None:
        ray.check_compression(settings.compression.format)
    remove_stale_builds(folder)
    codec = None
    if codec_from is not None:
        codec = _codec_of(Path(codec_from), settings)
    if colbert is None:
        colbert = ColBERT.from_pretrained(checkpoint, batch_size=batch_size, cpu_precision=cpu_precision)
    return build(source, folder, checkpoint=str(Path(checkpoint).resolve()) if checkpoint else None,
                 colbert=colbert, settings=settings, overwrite=overwrite, verbose=verbose,
                 passage_config=passage_config, codec=codec, ray=ray, restart=restart)



def _codec_of(folder: Path, settings: SearchSettings):
    """The residual codec of search folder ``folder``'s ColBERT index, checked against ``settings``."""
    from ...index.artifact import ColBERTIndex

    load_manifest(folder)  # (refuses a folder that is not a search folder of this version)
    index = ColBERTIndex(folder / COLBERT_DIR)
    spec = settings.compression
    if not index.compressed or index.compression != spec.format:
        raise ValueError(f"codec_from={str(folder)!r}: its ColBERT index is {index.compression}, not "
                         f"{spec.format}; give a folder built with compression {spec.format!r}")
    if (index.codec.exact_above is not None) != (spec.exact_share > 0):
        has = "stores" if index.codec.exact_above is not None else "does not store"
        raise ValueError(f"codec_from={str(folder)!r}: its codec {has} exact outliers, but exact_share="
                         f"{spec.exact_share}; give the settings of that folder's manifest")
    return index.codec




@dataclass
class ReadPassages:
    """What :func:`read_passages` wrote: the TF-IDF index (with the passage text), the number of passages, each
    passage's position in the folder an update starts from (-1: read or parsed by this build), the source's
    description, whether it is a dump, and a digest of the docnos and text of the passages to encode (those
    with ``reuse`` -1), in order: what the encoded passages an interrupted build kept must match."""

    tfidf: Any
    count: int
    reuse: np.ndarray
    description: str
    is_dump: bool
    digest: str = ""


def build(source, folder: Path, *, checkpoint: Optional[str], colbert, settings: SearchSettings, overwrite: bool,
          verbose: bool, passage_config, codec=None, previous: Optional["PreviousFolder"] = None,
          before: Optional[Manifest] = None, ray=None, restart: bool = False) -> BuildReport:
    """What :func:`build_folder` and ``update_folder`` share (see them).

    A new folder (``folder`` absent, not an update) is searchable early: once its passages and TF-IDF part are
    written it is published with a manifest marking ColBERT pending (searched with TF-IDF only), the ColBERT part
    is built in a temporary folder beside it and renamed into it, and the complete manifest (what a build
    without this step writes) replaces the pending one. A folder being replaced (``overwrite``) keeps serving its
    old version until the new one is complete; so does a pending folder, which the same command replaces
    without ``overwrite`` (resuming the passages its build kept)."""
    started = time.perf_counter()
    stats = SourceStats()
    pages: List[Dict[str, Any]] = []
    early = previous is None and not (folder.exists() or folder.is_symlink())
    pending = previous is None and is_pending_folder(folder)
    say = _say(verbose)
    if pending:
        say(f"{folder}'s ColBERT part was not finished: building the folder again (it answers TF-IDF searches "
            "meanwhile)")

    def colbert_part(into: Path, read: ReadPassages) -> Manifest:
        colbert_started = time.perf_counter()
        tokens, built, compressed = encode_passages(into, read, colbert, settings, codec=codec, previous=previous,
                                                    ray=ray, checkpoint=checkpoint, verbose=verbose, target=folder,
                                                    restart=restart, kept=kept)
        return dataclasses.replace(
            _manifest(read, stats, pages, colbert, checkpoint, built, passage_config, read_seconds, started,
                      previous, codec, before, compressed),
            tokens=int(tokens), seconds={"read_tfidf": round(read_seconds, 2),
                                         "colbert": round(time.perf_counter() - colbert_started, 2),
                                         "total": round(time.perf_counter() - started, 2)})

    with interruptible(), keeping_encoded() as kept:
        with atomic_folder(folder, overwrite=overwrite or pending, replaceable=is_search_folder,
                           what="search folder") as tmp:
            mark_owner(tmp)
            read = read_passages(tmp, source, stats, pages, verbose=verbose, passage_config=passage_config,
                                 previous=previous)
            read_seconds = time.perf_counter() - started
            if early:
                manifest = _manifest(read, stats, pages, colbert, checkpoint, settings, passage_config,
                                     read_seconds, started, previous, codec, before, False)
                write_manifest(tmp, dataclasses.replace(manifest, colbert_pending=True), read.is_dump)
                release_owner(tmp)  # (last: a build killed while checksumming is still known as this process's)
            else:
                manifest = colbert_part(tmp, read)
                manifest = write_manifest(tmp, manifest, read.is_dump)
                release_owner(tmp)  # (last: a build killed while checksumming is still known as this process's)
        if early:
            say(f"{folder} answers TF-IDF searches now (`pfc search --system tfidf`); building its ColBERT part")
            manifest = _complete(folder, read, colbert_part)
    return BuildReport(folder, manifest)


def _say(verbose: bool):
    def say(line: str) -> None:
        if verbose:
            print(line, file=sys.stderr, flush=True)
    return say


def _complete(folder: Path, read: ReadPassages, colbert_part) -> Manifest:
    """Build the ColBERT part of the pending (published) ``folder`` in a temporary folder beside it, rename it
    in, then replace the pending manifest with the complete one (one atomic rename). An error deletes the
    pending folder (a build that fails leaves nothing); an interruption leaves it searchable with TF-IDF."""
    from ...lexical.tfidf import TfidfIndex

    read = dataclasses.replace(read, tfidf=TfidfIndex(folder / TFIDF_DIR))  # (the temporary folder was renamed)
    staging = AtomicFolder(folder, overwrite=True, replaceable=is_pending_folder, what="search folder")
    try:
        mark_owner(staging.path)
        manifest = colbert_part(staging.path, read)
        release_owner(staging.path)
        if (folder / COLBERT_DIR).exists():  # (not listed by the pending manifest: not searched)
            shutil.rmtree(folder / COLBERT_DIR)
        move_into(staging.path / COLBERT_DIR, folder / COLBERT_DIR)
        return write_manifest(folder, manifest, read.is_dump)
    except KeyboardInterrupt:
        raise
    except BaseException:
        if is_pending_folder(folder):
            shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        staging.discard()


def _manifest(read: ReadPassages, stats: SourceStats, pages: List[Dict[str, Any]], colbert,
              checkpoint: Optional[str], settings: SearchSettings, passage_config, read_seconds: float,
              started: float, previous: Optional["PreviousFolder"], codec, before: Optional[Manifest],
              compressed: bool) -> Manifest:
    """The manifest of a build that has read ``read`` (no tokens, files or size yet)."""
    encoded = int((read.reuse < 0).sum())
    return Manifest(
        source=read.description, name=stats.name, checkpoint=checkpoint,
        fingerprint=colbert.fingerprint(), pages=stats.pages, articles=stats.articles, passages=read.count,
        tokens=0, seconds={"read_tfidf": round(read_seconds, 2), "total": round(time.perf_counter() - started, 2)},
        bytes=0, settings=settings, skipped=dict(stats.skipped), reader=_reader_version(read.is_dump),
        precision=_precision(colbert),
        passage_config=_passage_config(passage_config) if read.is_dump else None,
        codec=_codec_record(compressed, read.count, encoded, previous, codec, before),
        update=_update_record(previous, pages, read.reuse), cut=stats.cut)


def read_passages(tmp: Path, source, stats: SourceStats, pages: List[Dict[str, Any]], *, verbose: bool,
                  passage_config, previous: Optional["PreviousFolder"]) -> ReadPassages:
    """Stream ``source`` once into the passage table (``passages.jsonl`` and its offsets) and the TF-IDF index
    with the passage text, in ``tmp``; a dump's pages go to ``pages.jsonl``."""
    from ...lexical.tfidf import TfidfIndex

    records, total, description = open_source(source, stats, verbose, passage_config, pages, previous)
    dump = isinstance(source, (str, Path)) and is_dump(source)  # (a dump shows its own progress bar)
    offsets = [0]
    sources: List[int] = []  # per passage: its position in the previous folder, or -1 (encoded by this build)
    digest = new_hasher()  # of the passages this build encodes (what kept encoded passages must match)
    with open(tmp / PASSAGES, "wb") as table:
        def indexed() -> Iterator[Dict[str, Any]]:
            for record in records:
                sources.append(int(record.pop("_old", -1)))
                if sources[-1] < 0:
                    digest.update(json.dumps([record.get("docno"), record.get("text")]).encode("utf-8") + b"\n")
                line = json.dumps({"docno": record.get("docno"), "title": record.get("title") or "",
                                   "url": record.get("url") or "", "section": record.get("section") or "",
                                   "page_id": record.get("page_id")}, ensure_ascii=False) + "\n"
                offsets.append(offsets[-1] + table.write(line.encode("utf-8")))
                yield record

        bar = progress(total=total, desc="reading passages", unit="passage", enabled=verbose and not dump)
        try:
            tfidf = TfidfIndex(tmp / TFIDF_DIR).indexer(store_text=True).index(_ticking(indexed(), bar))
        finally:
            bar.close()
    np.save(tmp / OFFSETS, np.asarray(offsets, dtype=np.int64))
    if dump:
        with open(tmp / PAGES, "w", encoding="utf-8") as out:
            out.writelines(json.dumps(page, ensure_ascii=False) + "\n" for page in pages)
    return ReadPassages(tfidf, len(offsets) - 1, np.asarray(sources, dtype=np.int64), description, dump,
                        digest.hexdigest())


def encode_passages(tmp: Path, read: ReadPassages, colbert, settings: SearchSettings, *, codec,
                    previous: Optional["PreviousFolder"], ray, checkpoint: Optional[str], verbose: bool,
                    target: Path, restart: bool = False, kept: Optional[List[EncodedChunks]] = None
                    ) -> Tuple[int, SearchSettings, bool]:
    """Write the ColBERT index of the passages in ``tmp``: sharded on a Ray cluster (``ray``; searched by
    centroids: no FAISS), or here. (tokens, the settings as built, whether a local residual index was written)

    Here, the passages to encode are encoded into chunks kept beside ``target`` (:mod:`.resume`: those an
    interrupted build of the same passages kept are used, unless ``restart``; the chunks are appended to
    ``kept``), and the index is written from them."""
    if ray is not None:
        from ..sharded import build_sharded_colbert

        sharded = build_sharded_colbert(tmp / COLBERT_DIR, stored_passages(read.tfidf, read.count), ray,
                                        checkpoint=checkpoint, batch_size=colbert.batch_size, verbose=verbose,
                                        compression=settings.compression)
        return sharded.meta.num_tokens, settings, False
    from ...index.artifact import ColBERTIndex
    from ...model.tokenization import check_long_docs

    index = ColBERTIndex(tmp / COLBERT_DIR)
    stride = check_long_docs("windows", None, colbert.tokenizer.max_doc_pieces, colbert.config.doc_maxlen)
    fresh = np.flatnonzero(read.reuse < 0)
    chunks = EncodedChunks(target, encoding_key(read.digest, colbert, _precision(colbert), stride), len(fresh),
                           restart=restart, verbose=verbose)
    if kept is not None:
        kept.append(chunks)
    encode_into(chunks, colbert, read.tfidf, fresh, stride, verbose)
    if codec is None and previous is None:  # a fresh build: everything encoded, the codec trained on it
        _write_index(index, colbert, docnos_of(read.tfidf, fresh), chunks, settings, stride, verbose)
    else:
        assemble(index, colbert, read.tfidf, read.reuse, settings, codec, previous, chunks.passages())
    if not index.compressed:
        settings = _neighbour_index(index, settings)
    return index.meta.num_tokens, settings, index.compressed


def _write_index(index, colbert, docnos, chunks: EncodedChunks, settings: SearchSettings, stride: Optional[int],
                 verbose: bool) -> None:
    """Write the ColBERT index of a fresh build from its encoded passages: the codec's k-means (seeded: the same
    passages give the same codec), then the codes and inverted lists (what the ColBERT indexer writes).

    A residual codec is trained first, on the rows the writer's fp16 spill would sample (a pass counting the
    tokens, a pass gathering the sample: :class:`~...index.residual.compress.TrainedCodec`), so the writer codes
    the passages as they come: the same index without a second full copy of the vectors on disk, and the sample
    in a memory-mapped file among the kept chunks. The kept chunks are read three times; reading them is cheap
    next to encoding them."""
    from ...index.residual.compress import TrainedCodec
    from ...index.writer import IndexWriter

    spec, codec = settings.compression, None
    if spec.compressed:
        num_tokens = sum(len(vectors) for vectors, _, _ in chunks.passages())
        if num_tokens:  # (no passages: the writer says so)
            codec = TrainedCodec.train((vectors for vectors, _, _ in chunks.passages()), num_tokens, spec,
                                       scratch=chunks.path)  # (a file there left by a kill is removed on resume)
    with IndexWriter(index.path, colbert.config, colbert.fingerprint(), long_docs="windows", stride=stride,
                     compression=spec, codec=codec, verbose=verbose) as writer:
        for docno, (vectors, ids, parts) in zip(docnos, chunks.passages()):
            writer.add(str(docno), vectors, ids, parts)
        writer.truncated_docs, writer.windowed_docs = 0, chunks.long
    index._forget()


def _neighbour_index(index, settings: SearchSettings) -> SearchSettings:
    """Build an fp16 index's FAISS neighbour index (IVF-PQ fast-scan above :data:`ANN_MIN_TOKENS`, where IVF
    would double the disk); the settings as built."""
    options = settings.retriever
    assert isinstance(options, Fp16Options)  # (the settings of an fp16 index hold its options)
    if index.meta.num_tokens > ANN_MIN_TOKENS and options.faiss in ("flat", "ivf"):
        options = dataclasses.replace(options, faiss="ivfpq-fs", refine=4)  # IVF would double the disk
        settings = dataclasses.replace(settings, retriever=options)
    if options.faiss != "flat":
        from ...index.ann import FaissSpec

        index.ann(FaissSpec(options.faiss))
    for lock in (Path(index.path) / "faiss").glob("*.lock"):
        lock.unlink()  # (only serialises concurrent builds of a neighbour index, which this one has done)
    return settings


def _codec_record(compressed: bool, count: int, encoded: int, previous: Optional["PreviousFolder"], codec,
                  before: Optional[Manifest]) -> Optional[Dict[str, Any]]:
    """The manifest's ``codec``: the passages the residual codec was trained on and those encoded since (None:
    fp16, or a sharded index)."""
    if not compressed:
        return None
    if previous is None and codec is None:
        return {"trained_on": count, "encoded_since": 0}
    if before is not None and before.codec is not None:
        return {"trained_on": before.codec["trained_on"],
                "encoded_since": int(before.codec["encoded_since"]) + encoded}
    return {"trained_on": None, "encoded_since": encoded}


def _update_record(previous: Optional["PreviousFolder"], pages: List[Dict[str, Any]],
                   reuse: np.ndarray) -> Optional[Dict[str, int]]:
    """The manifest's ``update``: what an update reused, parsed, encoded and removed (None: a build)."""
    if previous is None:
        return None
    kept = {int(p) for p in reuse[reuse >= 0]}
    reused_pages = sum(1 for p in pages if p["id"] in previous.pages and previous.pages[p["id"]]["hash"] ==
                       p["hash"] and previous.pages[p["id"]]["rev"] == p["rev"])
    return {"pages_reused": reused_pages, "pages_parsed": len(pages) - reused_pages,
            "pages_removed": len(set(previous.pages) - {p["id"] for p in pages}),
            "passages_reused": len(kept), "passages_encoded": int((reuse < 0).sum()),
            "passages_removed": len(previous.table) - len(kept)}


def write_manifest(tmp: Path, manifest: Manifest, dump: bool) -> Manifest:
    """Write ``manifest.json`` last, with the checksums of the folder's own files (but the ColBERT part's, when
    it is pending) and the folder's size (a manifest already there, the pending one, left out)."""
    own = tuple(name for name in FOLDER_FILES if not (manifest.colbert_pending and name == COLBERT_META)) + \
        ((PAGES,) if dump else ())
    manifest = dataclasses.replace(manifest, files=build_manifest(tmp, own))
    size = folder_bytes(tmp) - ((tmp / MANIFEST).stat().st_size if (tmp / MANIFEST).is_file() else 0)
    manifest = dataclasses.replace(manifest, bytes=size + len(json.dumps(manifest.to_dict())))
    write_artifact_meta(tmp / MANIFEST, manifest.to_dict())
    return manifest


def _precision(colbert) -> str:
    """The manifest's ``precision``: how ``colbert`` encodes on its device."""
    if colbert.device.type == "cpu":
        return colbert.cpu_precision
    amp = colbert.amp_dtype
    return f"{colbert.device.type} {str(amp).removeprefix('torch.') if amp is not None else 'float32'}"


def _passage_config(config) -> Dict[str, Any]:
    from ...data.passages import PassageConfig

    return json.loads((config or PassageConfig()).to_json())



def _reader_version(is_dump: bool) -> Optional[int]:
    from ...data.passages import READER_VERSION

    return READER_VERSION if is_dump else None


def _ticking(records: Iterator[Dict[str, Any]], bar) -> Iterator[Dict[str, Any]]:
    for record in records:
        yield record
        bar.update()
