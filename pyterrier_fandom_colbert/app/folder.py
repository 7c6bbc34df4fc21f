"""A search folder: everything ``pfc search`` and ``pfc serve`` need for one wiki, built by ``pfc index``.

Layout::

    manifest.json       what was indexed, by which encoder, counts, sizes, build time, and the search settings
    passages.jsonl      one line per passage, in index order: docno, title, url, section, page_id
    passages.offsets.npy   [passages + 1] int64 byte offsets into passages.jsonl (a passage's line is read alone)
    tfidf/              TfidfIndex with the passage text stored (store_text=True)
    colbert/            ColBERTIndex of the same passages in the same order, by the manifest's encoder

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
from ..storage import JsonConfig, atomic_folder, read_json, write_json
from .hybrid import FormerFusionSettings, FusionSettings, check_fusion_shape

MANIFEST = "manifest.json"
PASSAGES = "passages.jsonl"
OFFSETS = "passages.offsets.npy"
TFIDF_DIR = "tfidf"
COLBERT_DIR = "colbert"
FORMAT = "pfc-search-folder"
VERSION = 1
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
        raise ValueError(f"{path} is a version {values.get('version')} search folder; this package reads version "
                         f"{VERSION}: rebuild it with `pfc index`")
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
    return Manifest.from_dict(values, source=path / MANIFEST)


class PassageTable:
    """Random access to ``passages.jsonl`` by passage position (thread-safe: positional reads)."""

    def __init__(self, folder: Union[str, Path]):
        self.path = Path(folder) / PASSAGES
        self.offsets = np.load(Path(folder) / OFFSETS, mmap_mode="r")
        self._fd = os.open(self.path, os.O_RDONLY)
        self._closer = weakref.finalize(self, os.close, self._fd)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def get(self, position: int) -> Dict[str, Any]:
        if not 0 <= position < len(self):
            raise IndexError(f"passage {position} is out of range: {self.path} holds {len(self)}")
        start, end = int(self.offsets[position]), int(self.offsets[position + 1])
        return json.loads(os.pread(self._fd, end - start, start))

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
                 overwrite: bool = False, batch_size: int = 256, verbose: bool = False,
                 passage_config=None) -> BuildReport:
    """Build a search folder from a dump file, an ir_datasets id or an iterable of passage dicts.

    ``passage_config``: how a dump becomes passages (``data.passages.PassageConfig``, e.g. a lower
    ``min_page_words``); None: the default.

    ``checkpoint``: a ColBERT checkpoint (or backbone) folder, None for the package's default; ``colbert``: an
    already loaded encoder instead (its checkpoint is still recorded as ``checkpoint``).
    """
    from ..index.artifact import ColBERTIndex
    from ..lexical.tfidf import TfidfIndex
    from ..model.colbert import ColBERT

    folder = Path(folder)
    remove_stale_builds(folder)
    started = time.perf_counter()
    if colbert is None:
        colbert = ColBERT.from_pretrained(checkpoint)
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
        index.indexer(colbert, batch_size=batch_size, verbose=verbose).index(_stored_passages(tfidf, count),
                                                                            total=count)
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
            tokens=int(index.meta.num_tokens),
            seconds={"read_tfidf": round(read_seconds, 2), "colbert": round(colbert_seconds, 2),
                     "total": round(time.perf_counter() - started, 2)},
            bytes=0, settings=settings, skipped=dict(stats.skipped), reader=_reader_version(is_dump))
        manifest = dataclasses.replace(manifest, bytes=folder_bytes(tmp) + len(json.dumps(manifest.to_dict())))
        write_json(tmp / MANIFEST, manifest.to_dict())
    return BuildReport(folder, manifest)


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
