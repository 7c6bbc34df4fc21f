"""A search folder: everything ``pfc search`` and ``pfc serve`` need for one wiki, built by ``pfc index``.

Layout::

    manifest.json       what was indexed, by which encoder, counts, sizes, build time, the search settings, and
                        ``files``: size, checksum and block checksums of passages.jsonl, passages.offsets.npy and
                        the two indexes' pt_meta.json (which hold their own manifests)
    passages.jsonl      one line per passage, in index order: docno, title, url, section, page_id
    passages.offsets.npy   [passages + 1] int64 byte offsets into passages.jsonl (a passage's line is read alone)
    tfidf/              TfidfIndex with the passage text stored (store_text=True)
    colbert/            ColBERTIndex of the same passages in the same order, by the manifest's encoder

Opening a folder (:func:`open_integrity`, done by :class:`PassageTable`) checks every file's size and the
checksums of the offsets and of both indexes' ``pt_meta.json`` (so an index folder swapped in from another
search folder is refused, naming it); each block of ``passages.jsonl`` is verified the first time the process
reads it; :func:`verify_folder` checks every checksum and line.

:func:`build_folder` streams the source once into the TF-IDF index and the passage table (pages are parsed,
split and indexed as they are read), then encodes the passages read back from the TF-IDF text store into the
ColBERT index. Everything is written into a hidden temporary folder beside the target and renamed into place
when complete (:func:`~pyterrier_fandom_colbert.storage.atomic_folder`): an interrupted build (an error, Ctrl-C,
``kill``) leaves nothing behind, and a build killed outright (``kill -9``) leaves a temporary folder that the
next build of the same target removes. A build restarts from the beginning.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple, Union

import numpy as np

from ..checks import positive_int
from ..progress import progress
from ..storage import (
    ArtifactIntegrity,
    DamagedFileError,
    JsonConfig,
    atomic_folder,
    build_manifest,
    parse_manifest,
    raise_damaged,
    read_json,
    write_json,
)
from .hybrid import FormerFusionSettings, FusionSettings, check_fusion_shape

MANIFEST = "manifest.json"
PASSAGES = "passages.jsonl"
OFFSETS = "passages.offsets.npy"
TFIDF_DIR = "tfidf"
COLBERT_DIR = "colbert"
FORMAT = "pfc-search-folder"
#: 2: the manifest records ``files`` (sizes, checksums, block checksums); version 1 folders are refused (rebuild)
VERSION = 2
#: the files of a search folder's own manifest: the passage table and the two indexes' metadata (each of which
#: holds its index's manifest); all but the passages are checked whole on open
TFIDF_META = f"{TFIDF_DIR}/pt_meta.json"
COLBERT_META = f"{COLBERT_DIR}/pt_meta.json"
FOLDER_FILES = (PASSAGES, OFFSETS, TFIDF_META, COLBERT_META)
CHECKED_ON_OPEN = (OFFSETS, TFIDF_META, COLBERT_META)
_OWNER = "build.owner"  # inside a temporary build folder: "host pid" of the process building it
DUMP_SUFFIXES = (".xml", ".bz2", ".gz", ".7z")
#: ColBERT indexes with more token vectors than this get a compact IVF-PQ fast-scan index instead of IVF
ANN_MIN_TOKENS = 4_000_000


@dataclass(frozen=True)
class SearchSettings(JsonConfig):
    """How the folder is searched: results per system before fusion, the ColBERT neighbour search, explanations."""

    fusion: FusionSettings = field(default_factory=FusionSettings)
    #: token neighbours per query vector in ColBERT end-to-end retrieval (None: the retriever's default)
    k_hat: Optional[int] = 64
    #: ``flat`` (exact, every token vector read per query) or a FAISS kind (docs/index.md); IVF halves the
    #: hybrid's latency on a 1,000-page wiki with the same top 10 (docs/app.md)
    faiss: str = "ivf"
    refine: int = 1
    #: explanation settings (Explainer): matches per query vector
    k_tilde: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.fusion, dict):
            check_fusion_shape(self.fusion)
            object.__setattr__(self, "fusion", FusionSettings.from_dict(self.fusion))
        positive_int("k_hat", self.k_hat, none=True, what="token neighbours")



@dataclass(frozen=True)
class Manifest(JsonConfig):
    """``manifest.json`` of a search folder."""

    source: str
    name: str                      # the wiki's name (its sitename) or the dataset id
    checkpoint: Optional[str]      # None: the package's default checkpoint
    fingerprint: str
    pages: int
    articles: int
    passages: int
    tokens: int
    seconds: Dict[str, float]
    bytes: int
    settings: SearchSettings = SearchSettings()
    skipped: Dict[str, int] = field(default_factory=dict)
    format: str = FORMAT
    version: int = VERSION
    #: ``data.passages.READER_VERSION`` of the dump reader that made the passages (None: not built from a dump)
    reader: Optional[int] = None
    #: {file name: {"size", "xxh3_128", "blocks"}} of :data:`FOLDER_FILES` (None: refused when opened)
    files: Optional[Dict[str, Dict[str, Any]]] = None
    #: the arithmetic the passages were encoded in: the CPU precision (``ColBERT.cpu_precision``), or on a GPU
    #: e.g. ``"cuda bfloat16"`` (autocast); re-encoding passages of this folder should use the same
    precision: str = "float32"

    def __post_init__(self) -> None:
        if isinstance(self.settings, dict):
            object.__setattr__(self, "settings", SearchSettings.from_dict(self.settings))

    def to_dict(self) -> Dict[str, Any]:
        values = dataclasses.asdict(self)
        values["settings"] = self.settings.to_dict()
        return values


def is_search_folder(path: Union[str, Path]) -> bool:
    """True when ``path`` holds a search folder's manifest (so ``--overwrite`` may replace it)."""
    try:
        return read_json(Path(path) / MANIFEST).get("format") == FORMAT
    except (FileNotFoundError, ValueError, AttributeError, NotADirectoryError):
        return False


def load_manifest(path: Union[str, Path]) -> Manifest:
    """The folder's manifest; a missing or foreign folder raises an error saying how to build one."""
    path = Path(path)
    if not (path / MANIFEST).is_file():
        raise FileNotFoundError(f"{path} is not a search folder (no {MANIFEST}); build one with "
                                f"`pfc index DUMP {path}`")
    values = read_json(path / MANIFEST, "search folder manifest")
    if not isinstance(values, dict) or values.get("format") != FORMAT:
        raise ValueError(f"{path / MANIFEST} is not a search folder manifest (format {FORMAT!r} expected)")
    if values.get("version") != VERSION:
        source = values.get("source") if values.get("source") not in (None, "", "records") else "SOURCE"
        raise ValueError(f"{path} is a version {values.get('version')} search folder; this package reads version "
                         f"{VERSION} (which records every file's checksums): rebuild it with "
                         f"`pfc index {source} {path} --overwrite`")
    source = str(values.get("source", ""))
    if source and not source.startswith("irds:") and source != "records":  # built from a dump file
        from ..data.passages import READER_VERSION

        if values.get("reader", 1) != READER_VERSION:
            raise ValueError(f"{path} was built by an older dump reader (version {values.get('reader', 1)}; this "
                             f"package's is {READER_VERSION}, which also reads infoboxes, fact templates and "
                             f"tables): rebuild it with `pfc index {source} {path} --overwrite`")
    settings = values.get("settings")
    try:
        check_fusion_shape(settings.get("fusion") if isinstance(settings, dict) else None)
    except FormerFusionSettings as err:
        rebuild = f"pfc index {source} {path} --overwrite" if source and source != "records" else \
            f"pfc index SOURCE {path} --overwrite"
        default = FusionSettings()
        raise ValueError(f"{path} records {err}, which pfc no longer has: its hybrid is now pfc.Hybrid (z-scores, "
                         f"TF-IDF weight {default.weight:g}, {default.depth:,} results per system); rebuild the "
                         f"folder with `{rebuild}`") from None
    if values.get("files") is not None:
        parse_manifest(values["files"], path / MANIFEST)
    return Manifest.from_dict(values, source=path / MANIFEST)


def _remedy(path: Path, manifest: Optional[Manifest] = None) -> str:
    source = manifest.source if manifest is not None and manifest.source not in ("", "records") else "SOURCE"
    return f"rebuild it with `pfc index {source} {path} --overwrite`"


def open_integrity(folder: Union[str, Path], manifest: Optional[Manifest] = None) -> ArtifactIntegrity:
    """The folder's integrity base, after the open checks: every file of its manifest present with its size, the
    offsets' and both indexes' ``pt_meta.json`` checksums (a swapped index folder is refused here, naming its
    ``pt_meta.json``). A manifest without ``files`` is refused."""
    folder = Path(folder)
    manifest = manifest or load_manifest(folder)
    integrity = ArtifactIntegrity(folder, manifest.files, what="search folder", remedy=_remedy(folder, manifest),
                                  source=folder / MANIFEST)
    integrity.check_open(CHECKED_ON_OPEN)
    return integrity


def checked_offsets(folder: Path, offsets: np.ndarray, size: int, remedy: str) -> np.ndarray:
    """The passage offsets if they can index a ``size``-byte table (from 0, increasing, ending at its size), else
    a DamagedFileError naming the file."""
    file = folder / OFFSETS
    if offsets.ndim != 1 or len(offsets) < 1 or offsets.dtype.kind not in "iu":
        raise DamagedFileError(file, f"{file} is damaged: it holds {offsets.dtype} {list(offsets.shape)}, not "
                                     f"passage offsets; {remedy}")
    if offsets[0] != 0 or (np.diff(offsets) <= 0).any() or offsets[-1] != size:
        raise DamagedFileError(file, f"{file} is damaged: its offsets do not run from 0 up to the size of "
                                     f"{PASSAGES} ({size} bytes); {remedy}")
    return offsets


class PassageTable:
    """Random access to ``passages.jsonl`` by passage position (thread-safe: positional reads).

    Opening it runs the folder's open checks (:func:`open_integrity`, unless ``integrity`` is given); each block
    of the table is verified the first time it is read, and a line that does not parse is a DamagedFileError
    naming the file and the passage."""

    def __init__(self, folder: Union[str, Path], integrity: Optional[ArtifactIntegrity] = None):
        folder = Path(folder)
        self.path = folder / PASSAGES
        self.integrity = integrity or open_integrity(folder)
        self._remedy = self.integrity.remedy
        try:
            offsets = np.load(folder / OFFSETS, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as err:
            raise DamagedFileError(folder / OFFSETS, f"{folder / OFFSETS} is damaged: not a readable .npy array "
                                                     f"({err}); {self._remedy}") from None
        self.offsets = checked_offsets(folder, offsets, self.path.stat().st_size, self._remedy)
        self._blocks = self.integrity.blocks(PASSAGES, self._held)
        self._fd = os.open(self.path, os.O_RDONLY)
        self._closer = weakref.finalize(self, os.close, self._fd)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _held(self, start: int, end: int) -> str:
        first = int(np.searchsorted(self.offsets, start, side="right")) - 1
        last = int(np.searchsorted(self.offsets, end - 1, side="right")) - 1
        return f"passages {first}-{min(last, len(self) - 1)}"

    def get(self, position: int) -> Dict[str, Any]:
        if not 0 <= position < len(self):
            raise IndexError(f"passage {position} is out of range: {self.path} holds {len(self)}")
        start, end = int(self.offsets[position]), int(self.offsets[position + 1])
        if self._blocks is not None:
            self._blocks.read(start, end)
        data = os.pread(self._fd, end - start, start)
        try:
            value = json.loads(data)
        except (ValueError, UnicodeDecodeError) as err:
            raise DamagedFileError(self.path, f"{self.path} is damaged: passage {position} (bytes {start}-{end - 1}) "
                                              f"is not a JSON line ({err}); {self._remedy}") from None
        if not isinstance(value, dict):
            raise DamagedFileError(self.path, f"{self.path} is damaged: passage {position} is not a JSON object; "
                                              f"{self._remedy}")
        return value

    def close(self) -> None:
        self._closer()


# -- sources ----------------------------------------------------------------------------------------------------

@dataclass
class SourceStats:
    """Filled in while a source is read."""

    name: str = ""
    pages: int = 0
    articles: int = 0
    passages: int = 0
    skipped: Dict[str, int] = field(default_factory=dict)


def _is_dump(source: Union[str, Path]) -> bool:
    path = Path(source)
    return path.is_file() or path.suffix.lower() in DUMP_SUFFIXES


def open_source(source: Union[str, Path, Iterable[Dict[str, Any]]], stats: SourceStats,
                verbose: bool = False, passage_config=None) -> Tuple[Iterator[Dict[str, Any]], Optional[int], str]:
    """(passage records, their number when known beforehand, a description) of a dump file, an ir_datasets id
    (``irds:`` prefix optional) or an iterable of dicts (``docno``, ``text``, optional ``title``/``url``/
    ``section``/``page_id``). ``passage_config``: how a dump becomes passages (``data.passages.PassageConfig``;
    None: the default)."""
    if isinstance(source, (str, Path)) and _is_dump(source):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"dump not found: {path}")
        return _dump_records(path, stats, verbose, passage_config), None, str(path.resolve())
    if isinstance(source, (str, Path)):
        return _irds_records(str(source), stats)
    stats.name = stats.name or "passages"
    return _counted(iter(source), stats), None, "records"


def _dump_records(path: Path, stats: SourceStats, verbose: bool, config=None) -> Iterator[Dict[str, Any]]:
    from ..data.passages import DumpStats, PassageConfig, dump_passages

    dump_stats = DumpStats()
    total = path.stat().st_size if path.suffix.lower() == ".xml" else None
    bar = progress(total=total, desc=f"reading {path.name}", unit="B", enabled=verbose)
    if verbose and hasattr(bar, "unit_scale"):
        bar.unit_scale, bar.unit_divisor = True, 1024
    seen = 0
    try:
        for passage in dump_passages(path, config or PassageConfig(), stats=dump_stats):
            if not stats.name:
                stats.name = passage.wiki
            stats.pages, stats.articles, stats.passages = dump_stats.pages, dump_stats.articles, dump_stats.passages
            bar.update(dump_stats.bytes_read - seen)
            seen = dump_stats.bytes_read
            bar.set_postfix(pages=dump_stats.pages, passages=dump_stats.passages, refresh=False)
            yield {"docno": passage.doc_id, "text": passage.text, "title": passage.title, "url": passage.url,
                   "section": passage.section, "page_id": passage.page_id}
    finally:
        bar.close()
    stats.pages, stats.articles, stats.passages = dump_stats.pages, dump_stats.articles, dump_stats.passages
    stats.skipped = dict(dump_stats.skipped)
    if dump_stats.passages == 0:
        raise dump_stats.empty_error(path)
    if not stats.name:
        stats.name = path.name.split("_pages")[0]


def _irds_records(dataset_id: str, stats: SourceStats) -> Tuple[Iterator[Dict[str, Any]], Optional[int], str]:
    import ir_datasets

    import pyterrier_fandom_colbert  # noqa: F401  (registers the fandom-qa datasets)

    name = dataset_id.removeprefix("irds:")
    try:
        dataset = ir_datasets.load(name)
    except KeyError:
        raise ValueError(f"{dataset_id!r} is neither a dump file (.xml, .bz2, .gz, .7z) nor an ir_datasets id; "
                         "give the path of a MediaWiki export or a dataset id such as fandom-qa/sample") from None
    if not dataset.has_docs():
        raise ValueError(f"ir_datasets {name!r} has no documents to index")
    stats.name = name

    def records() -> Iterator[Dict[str, Any]]:
        for doc in dataset.docs_iter():
            text = doc.default_text() if hasattr(doc, "default_text") else getattr(doc, "text", "")
            yield {"docno": doc.doc_id, "text": text, "title": getattr(doc, "title", "") or "",
                   "url": getattr(doc, "url", "") or "", "section": getattr(doc, "section", "") or "",
                   "page_id": getattr(doc, "page_id", None)}

    try:
        total = dataset.docs_count()
    except (AttributeError, NotImplementedError, TypeError):
        total = None
    return _counted(records(), stats), total, f"irds:{name}"


def _counted(records: Iterator[Dict[str, Any]], stats: SourceStats) -> Iterator[Dict[str, Any]]:
    pages = set()
    for record in records:
        stats.passages += 1
        pages.add(record.get("page_id", record.get("title")))
        stats.pages = stats.articles = len(pages)
        yield record


# -- building ---------------------------------------------------------------------------------------------------

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
        return (f"Indexed {m.name} from {m.source}: {pages}; {m.passages:,} passages, {m.tokens:,} ColBERT "
                f"tokens; {_size(m.bytes)} on disk in {self.folder}; {_duration(t['total'])} (reading and TF-IDF "
                f"{_duration(t['read_tfidf'])}, ColBERT {_duration(t['colbert'])}). Ask it questions with "
                f"`pfc search {self.folder} \"your question\"` or `pfc serve {self.folder}`.")


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
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def build_folder(source: Union[str, Path, Iterable[Dict[str, Any]]], folder: Union[str, Path], *,
                 checkpoint: Optional[str] = None, colbert=None, settings: SearchSettings = SearchSettings(),
                 overwrite: bool = False, batch_size: int = 64, verbose: bool = False,
                 passage_config=None, ray=None, cpu_precision: str = "float32") -> BuildReport:
    """Build a search folder from a dump file, an ir_datasets id or an iterable of passage dicts.

    ``passage_config``: how a dump becomes passages (``data.passages.PassageConfig``, e.g. a lower
    ``min_page_words``); None: the default.

    ``checkpoint``: a ColBERT checkpoint (or backbone) folder, None for the package's default; ``colbert``: an
    already loaded encoder instead (its checkpoint is still recorded as ``checkpoint``). ``batch_size`` (passages
    per forward pass) and ``cpu_precision`` (``ColBERT``'s: ``"bfloat16"`` measured about 2x faster on a CPU with
    native bf16, quality within 0.001, docs/app.md) apply to the encoder loaded here, not to a given one.

    ``ray``: an :class:`~.sharded.RayBuild` to build the ColBERT part as a sharded index on a Ray cluster.
    """
    from ..index.artifact import ColBERTIndex
    from ..lexical.tfidf import TfidfIndex
    from ..model.colbert import ColBERT

    folder = Path(folder)
    positive_int("batch_size", batch_size, what="passages per forward pass")  # before the model loads
    remove_stale_builds(folder)
    started = time.perf_counter()
    if colbert is None:
        colbert = ColBERT.from_pretrained(checkpoint, batch_size=batch_size, cpu_precision=cpu_precision)
    stats = SourceStats()
    with _interruptible(), atomic_folder(folder, overwrite=overwrite, replaceable=is_search_folder,
                                         what="search folder") as tmp:
        (tmp / _OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n")
        records, total, description = open_source(source, stats, verbose, passage_config)
        is_dump = isinstance(source, (str, Path)) and _is_dump(source)  # (a dump shows its own progress bar)
        offsets = [0]
        with open(tmp / PASSAGES, "wb") as table:
            def indexed() -> Iterator[Dict[str, Any]]:
                for record in records:
                    line = json.dumps({"docno": record.get("docno"), "title": record.get("title") or "",
                                       "url": record.get("url") or "", "section": record.get("section") or "",
                                       "page_id": record.get("page_id")}, ensure_ascii=False) + "\n"
                    offsets.append(offsets[-1] + table.write(line.encode("utf-8")))
                    yield record

            bar = progress(total=total, desc="reading passages", unit="passage", enabled=verbose and not is_dump)
            try:
                tfidf = TfidfIndex(tmp / TFIDF_DIR).indexer(store_text=True).index(_ticking(indexed(), bar))
            finally:
                bar.close()
        np.save(tmp / OFFSETS, np.asarray(offsets, dtype=np.int64))
        read_seconds = time.perf_counter() - started
        count = len(offsets) - 1

        index = ColBERTIndex(tmp / COLBERT_DIR)
        colbert_started = time.perf_counter()
        if ray is not None:  # sharded, on a Ray cluster (app/sharded.py); searched by centroids: no FAISS
            from .sharded import build_sharded_colbert

            sharded = build_sharded_colbert(tmp / COLBERT_DIR, _stored_passages(tfidf, count), ray,
                                            checkpoint=checkpoint, batch_size=batch_size, verbose=verbose)
            tokens = sharded.meta.num_tokens
        else:
            # the indexer's own read batch (1,024 passages, length-sorted together: little padding)
            index.indexer(colbert, verbose=verbose).index(_stored_passages(tfidf, count), total=count)
            tokens = index.meta.num_tokens
            if index.meta.num_tokens > ANN_MIN_TOKENS and settings.faiss in ("flat", "ivf"):
                settings = dataclasses.replace(settings, faiss="ivfpq-fs", refine=4)  # IVF would double the disk
            if settings.faiss != "flat":
                from ..index.ann import FaissSpec

                index.ann(FaissSpec(settings.faiss))
        colbert_seconds = time.perf_counter() - colbert_started
        (tmp / _OWNER).unlink()
        manifest = Manifest(
            source=description, name=stats.name, checkpoint=str(Path(checkpoint).resolve()) if checkpoint else None,
            fingerprint=colbert.fingerprint(), pages=stats.pages, articles=stats.articles, passages=count,
            tokens=int(tokens),
            seconds={"read_tfidf": round(read_seconds, 2), "colbert": round(colbert_seconds, 2),
                     "total": round(time.perf_counter() - started, 2)},
            bytes=0, settings=settings, skipped=dict(stats.skipped), reader=_reader_version(is_dump),
            precision=_precision(colbert))
        manifest = dataclasses.replace(manifest, files=build_manifest(tmp, FOLDER_FILES))
        manifest = dataclasses.replace(manifest, bytes=folder_bytes(tmp) + len(json.dumps(manifest.to_dict())))
        write_json(tmp / MANIFEST, manifest.to_dict())
    return BuildReport(folder, manifest)


def verify_folder(folder: Union[str, Path]) -> Dict[str, Any]:
    """Full check of a search folder's own files (the indexes are verified apart): every checksum of its
    manifest, the passage offsets, and every line of the passage table parsing as a JSON object. Raises
    DamagedFileError naming each damaged file; returns ``{"files", "bytes", "seconds"}``."""
    started = time.perf_counter()
    folder = Path(folder)
    manifest = load_manifest(folder)
    remedy = _remedy(folder, manifest)
    integrity = ArtifactIntegrity(folder, manifest.files, what="search folder", remedy=remedy,
                                  source=folder / MANIFEST)
    problems = integrity.problems()
    bad = {name for name, _ in problems}
    if not {PASSAGES, OFFSETS} & bad:
        try:
            offsets = checked_offsets(folder, np.load(folder / OFFSETS, allow_pickle=False),
                                      (folder / PASSAGES).stat().st_size, remedy)
            if len(offsets) - 1 != manifest.passages:
                problems.append((OFFSETS, f"{folder / OFFSETS} indexes {len(offsets) - 1} passages but "
                                          f"{MANIFEST} records {manifest.passages}"))
            with open(folder / PASSAGES, "rb") as table:
                for position, line in enumerate(table):
                    try:
                        if not isinstance(json.loads(line), dict):
                            raise ValueError("not a JSON object")
                    except ValueError as err:
                        problems.append((PASSAGES, f"{folder / PASSAGES}: passage {position} is not a JSON object "
                                                   f"({err})"))
                        break
        except (DamagedFileError, ValueError, OSError) as err:
            problems.append((OFFSETS, str(err)))
    raise_damaged(folder, problems, what="search folder", remedy=remedy)
    return integrity.summary(started)


def _precision(colbert) -> str:
    """The manifest's ``precision``: how ``colbert`` encodes on its device."""
    if colbert.device.type == "cpu":
        return colbert.cpu_precision
    amp = colbert.amp_dtype
    return f"{colbert.device.type} {str(amp).removeprefix('torch.') if amp is not None else 'float32'}"


def _reader_version(is_dump: bool) -> Optional[int]:
    from ..data.passages import READER_VERSION

    return READER_VERSION if is_dump else None


def _ticking(records: Iterator[Dict[str, Any]], bar) -> Iterator[Dict[str, Any]]:
    for record in records:
        yield record
        bar.update()


def _stored_passages(tfidf, count: int, chunk: int = 1024) -> Iterator[Dict[str, str]]:
    """``docno``/``text`` records read back from the TF-IDF text store, in index order (the ColBERT indexer's
    bar, which moves every model batch, shows the progress)."""
    for start in range(0, count, chunk):
        ids = np.arange(start, min(start + chunk, count))
        docnos = tfidf.docnos.fwd[ids]
        for docno, text in zip(docnos, tfidf.texts(ids)):
            yield {"docno": str(docno), "text": text}


def remove_stale_builds(folder: Path) -> None:
    """Delete temporary build folders of ``folder`` left by builds on this machine whose process is gone."""
    import shutil

    host = socket.gethostname()
    if not folder.parent.is_dir():
        return
    for candidate in folder.parent.glob(f".{folder.name}.building-*"):
        try:
            owner_host, pid = (candidate / _OWNER).read_text().split()
        except (OSError, ValueError):
            continue  # not ours (or just being created): leave it
        if owner_host == host and not _alive(int(pid)):
            shutil.rmtree(candidate, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _interruptible:
    """Within the block, SIGTERM raises KeyboardInterrupt (as Ctrl-C does) so that clean-up runs; main thread
    only (elsewhere it does nothing)."""

    def __enter__(self) -> "_interruptible":
        # what signal.signal returns: the handler before, a Handlers value (an int) or None
        self._previous: Union[Callable[[int, Optional[FrameType]], Any], int, None] = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._raise)
        return self

    @staticmethod
    def _raise(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
