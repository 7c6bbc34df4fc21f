"""A search folder: everything ``pfc search`` and ``pfc serve`` need for one wiki, built by ``pfc index``.

Layout::

    manifest.json       what was indexed, by which encoder, counts, sizes, build time, the search settings, and
                        ``files``: size, checksum and block checksums of passages.jsonl, passages.offsets.npy and
                        the two indexes' pt_meta.json (which hold their own manifests)
    passages.jsonl      one line per passage, in index order: docno, title, url, section, page_id
    passages.offsets.npy   [passages + 1] int64 byte offsets into passages.jsonl (a passage's line is read alone)
    pages.jsonl         (built from a dump) one line per page of the dump, in dump order: page id, revision id, a
                        hash of what its passages are made from, why it was left out (or null), its passages
    tfidf/              TfidfIndex with the passage text stored (store_text=True)
    colbert/            ColBERTIndex of the same passages in the same order, by the manifest's encoder: residual
                        codes (``residual2`` by default: a centroid id and 2 bits per dimension per token, searched
                        by its centroids, no neighbour index) or fp16 vectors with an IVF neighbour index

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

:func:`update_folder` (``pfc index --update DUMP FOLDER``) makes the folder of a newer dump of the same wiki:
pages whose id, revision and hash are unchanged keep their passages, text and ColBERT codes (copied, not parsed
or encoded again); new and changed pages are parsed and encoded; pages gone from the dump are dropped. The
residual codec is the folder's own, so the result is exactly what :func:`build_folder` makes of the new dump
with ``codec_from=`` the old folder (what the tests compare), not a fresh build that trains a new codec. It is
written and swapped in like a build: a crash leaves the old folder as it was.
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
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

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
PAGES = "pages.jsonl"
_ENCODED = "encoded.colbert"  # inside a temporary build folder: the passages encoded by this build, in fp16
TFIDF_DIR = "tfidf"
COLBERT_DIR = "colbert"
FORMAT = "pfc-search-folder"
#: 3: the manifest records ``files`` (sizes, checksums, block checksums), the ColBERT index is residual-compressed
#: by default, and folders built from a dump record their pages (for updates) and their passage settings; older
#: folders are refused (rebuild)
VERSION = 3
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
#: an update's summary advises a full rebuild once the passages encoded since the codec was trained exceed this
#: share of the folder's passages
ADVISE_REBUILD = 0.25


#: the share of tokens a residual folder built by ``pfc index`` also stores exactly (``--exact-share``): the 1% the
#: codec reconstructs worst, which gives the PokéClicker fact questions back what 2-bit codes lose (docs/app.md)
DEFAULT_EXACT_SHARE = 0.01


@dataclass(frozen=True)
class SearchSettings(JsonConfig):
    """How the folder is searched: results per system before fusion, the ColBERT neighbour search, explanations."""

    # a folder without exact outliers records its settings as before they existed
    OMITTED_AT_DEFAULT = ("exact_share",)

    fusion: FusionSettings = field(default_factory=FusionSettings)
    #: how the ColBERT index stores token vectors: ``residual2`` (a centroid id and 2 bits per dimension, searched
    #: by its centroids; about a sixth of the fp16 folder on disk at the same search quality, docs/app.md),
    #: ``residual1``, ``residual4`` or ``fp16`` (exact vectors and a FAISS neighbour index)
    compression: str = "residual2"
    #: residual formats only: the share of tokens (those the codec reconstructs worst) also stored exactly
    #: (``CompressionSpec.exact_share``; 0: none, and what a folder built before the option reads as; ``pfc index``
    #: builds residual folders with :data:`DEFAULT_EXACT_SHARE`)
    exact_share: float = 0.0
    #: fp16 only: token neighbours per query vector in ColBERT end-to-end retrieval (None: the retriever's default)
    k_hat: Optional[int] = 64
    #: fp16 only: ``flat`` (exact, every token vector read per query) or a FAISS kind (docs/index.md); IVF halves
    #: the hybrid's latency on a 1,000-page wiki with the same top 10 (docs/app.md)
    faiss: str = "ivf"
    refine: int = 1
    #: compressed only: centroid search's documents kept after the pruned centroid interaction and documents scored
    #: exactly (None: the retriever's defaults for the depth asked, docs/index.md)
    ndocs: Optional[int] = None
    nscore: Optional[int] = None
    #: explanation settings (Explainer): matches per query vector
    k_tilde: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.fusion, dict):
            check_fusion_shape(self.fusion)
            object.__setattr__(self, "fusion", FusionSettings.from_dict(self.fusion))
        positive_int("k_hat", self.k_hat, none=True, what="token neighbours")
        positive_int("ndocs", self.ndocs, none=True, what="documents kept by centroid pruning")
        positive_int("nscore", self.nscore, none=True, what="documents scored exactly")
        from ..index.layout import FORMATS

        if self.compression not in FORMATS:
            raise ValueError(f"compression={self.compression!r}; expected one of {FORMATS}")
        from ..index.codec import check_exact_share_of

        check_exact_share_of(self.compression, self.exact_share)

    def compression_spec(self):
        """The ColBERT index's :class:`~..index.compressed.CompressionSpec`: its format and exact share."""
        from ..index.compressed import CompressionSpec

        return CompressionSpec(self.compression, exact_share=self.exact_share)

    def dense_options(self) -> Dict[str, Any]:
        """The options of the ColBERT index's retriever that the settings fix (the fp16 neighbour search; a
        compressed index's centroid search takes its defaults for the depth asked)."""
        if self.compression == "fp16":
            return {"k_hat": self.k_hat, "faiss": self.faiss, "refine": self.refine}
        return {name: value for name, value in (("ndocs", self.ndocs), ("nscore", self.nscore)) if value is not None}



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
    #: the ``data.passages.PassageConfig`` a dump was read with (None: not built from a dump)
    passage_config: Optional[Dict[str, Any]] = None
    #: the residual codec: ``trained_on`` passages (the build that trained it), ``encoded_since``: passages encoded
    #: by updates since (None: fp16)
    codec: Optional[Dict[str, Any]] = None
    #: what the last ``pfc index --update`` did (pages reused / parsed / removed, passages reused / encoded)
    update: Optional[Dict[str, int]] = None

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
                         f"{VERSION} (every file's checksums, a compressed ColBERT index, the pages an update needs): "
                         f"rebuild it with "
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
                verbose: bool = False, passage_config=None, pages: Optional[List[Dict[str, Any]]] = None,
                previous: Optional["_Previous"] = None) -> Tuple[Iterator[Dict[str, Any]], Optional[int], str]:
    """(passage records, their number when known beforehand, a description) of a dump file, an ir_datasets id
    (``irds:`` prefix optional) or an iterable of dicts (``docno``, ``text``, optional ``title``/``url``/
    ``section``/``page_id``). ``passage_config``: how a dump becomes passages (``data.passages.PassageConfig``;
    None: the default). A dump's pages are appended to ``pages`` (what ``pages.jsonl`` holds) as they are read;
    ``previous``: the folder an update starts from, whose unchanged pages are copied, not parsed (their records
    carry ``_old``, the passage's position there)."""
    if isinstance(source, (str, Path)) and _is_dump(source):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"dump not found: {path}")
        return (_dump_records(path, stats, verbose, passage_config, pages if pages is not None else [], previous),
                None, str(path.resolve()))
    if isinstance(source, (str, Path)):
        return _irds_records(str(source), stats)
    stats.name = stats.name or "passages"
    return _counted(iter(source), stats), None, "records"


def page_hash(site, page) -> str:
    """What a page's passages are made from (the site's name and URLs, the page's title, namespace, redirect flag
    and wikitext), hashed: equal hashes give equal passages under one reader and passage configuration."""
    import xxhash

    return xxhash.xxh3_128_hexdigest(json.dumps([site.dbname, site.base_url, page.title, page.ns, page.redirect,
                                                 page.text], ensure_ascii=False).encode("utf-8"))


def _dump_records(path: Path, stats: SourceStats, verbose: bool, config, pages: List[Dict[str, Any]],
                  previous: Optional["_Previous"] = None) -> Iterator[Dict[str, Any]]:
    from ..data.passages import DumpStats, PassageConfig, read_article
    from ..data.wikidump import iter_pages

    config = config or PassageConfig()
    dump_stats = DumpStats(min_page_words=config.min_page_words)
    total = path.stat().st_size if path.suffix.lower() == ".xml" else None
    bar = progress(total=total, desc=f"reading {path.name}", unit="B", enabled=verbose)
    if verbose and hasattr(bar, "unit_scale"):
        bar.unit_scale, bar.unit_divisor = True, 1024
    seen = 0
    reader = iter_pages(path)
    try:
        for site, page in reader:
            dump_stats.pages += 1
            key = page_hash(site, page)
            old = previous.pages.get(page.page_id) if previous is not None else None
            if old is not None and old["hash"] == key and old["rev"] == page.revid:
                reason = old["skip"]
                if reason is None:
                    dump_stats.articles += 1
                else:
                    dump_stats.skipped[reason] += 1
                assert previous is not None
                records = previous.records(old)
            else:
                reason, passages = read_article(site, page, config, dump_stats)
                records = [{"docno": p.doc_id, "text": p.text, "title": p.title, "url": p.url,
                            "section": p.section, "page_id": p.page_id} for p in passages]
            pages.append({"id": page.page_id, "rev": page.revid, "hash": key, "skip": reason,
                          "passages": len(records)})
            if records and not stats.name:
                stats.name = site.dbname
            for record in records:
                dump_stats.passages += 1
                stats.pages, stats.articles = dump_stats.pages, dump_stats.articles
                stats.passages = dump_stats.passages
                yield record
            bar.update(reader.bytes_read - seen)
            seen = reader.bytes_read
            bar.set_postfix(pages=dump_stats.pages, passages=dump_stats.passages, refresh=False)
    finally:
        bar.close()
    stats.pages, stats.articles, stats.passages = dump_stats.pages, dump_stats.articles, dump_stats.passages
    stats.skipped = dict(dump_stats.skipped)
    if dump_stats.passages == 0:
        raise dump_stats.empty_error(path)
    if not stats.name:
        stats.name = path.name.split("_pages")[0]


class _Previous:
    """The folder an update starts from: its pages by id (with the position of their first passage), its passage
    table, text store and ColBERT index."""

    def __init__(self, folder: Path):
        from ..index.artifact import ColBERTIndex
        from ..lexical.tfidf import TfidfIndex

        self.folder = folder
        # everything an update copies from is checked whole first (its page records, passage table and ColBERT
        # codes are read directly, not through the block checks of a search): damage is refused, never copied
        verify_folder(folder)
        self.index = ColBERTIndex(folder / COLBERT_DIR)
        self.index.verify()
        self.pages: Dict[int, Dict[str, Any]] = {}
        position = 0
        with open(folder / PAGES, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                try:
                    page = json.loads(line)
                    entry = {"hash": str(page["hash"]), "rev": int(page["rev"]), "skip": page["skip"],
                             "start": position, "count": int(page["passages"])}
                    page_id = int(page["id"])
                except (ValueError, KeyError, TypeError) as err:
                    raise ValueError(f"{folder / PAGES} line {number} is not a page record ({err}); rebuild the "
                                     f"folder with `pfc index DUMP {folder} --overwrite`") from None
                self.pages.setdefault(page_id, entry)
                position += entry["count"]
        self.table = PassageTable(folder)
        self.tfidf = TfidfIndex(folder / TFIDF_DIR)
        if position != len(self.table) or len(self.index) != len(self.table):
            raise ValueError(f"{folder} is damaged: {PAGES} lists {position:,} passages, {PASSAGES} holds "
                             f"{len(self.table):,} and the ColBERT index {len(self.index):,}; rebuild it with "
                             f"`pfc index DUMP {folder} --overwrite`")

    def records(self, page: Dict[str, Any]) -> List[Dict[str, Any]]:
        positions = list(range(page["start"], page["start"] + page["count"]))
        texts = self.tfidf.texts(positions) if positions else []
        out = []
        for position, text in zip(positions, texts):
            meta = self.table.get(position)
            out.append({"docno": meta["docno"], "text": text, "title": meta.get("title") or "",
                        "url": meta.get("url") or "", "section": meta.get("section") or "",
                        "page_id": meta.get("page_id"), "_old": position})
        return out

    def close(self) -> None:
        self.table.close()


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
            return text
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
                 passage_config=None, ray=None, cpu_precision: str = "float32",
                 codec_from: Union[str, Path, None] = None) -> BuildReport:
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
    """
    from ..model.colbert import ColBERT

    folder = Path(folder)
    positive_int("batch_size", batch_size, what="passages per forward pass")  # before the model loads
    if ray is not None and settings.compression == "fp16":
        raise ValueError("a Ray build writes a sharded index of residual codes; give settings with a residual "
                         "compression (e.g. residual2), or ray=None for an fp16 folder")
    remove_stale_builds(folder)
    codec = None
    if codec_from is not None:
        codec = _codec_of(Path(codec_from), settings)
    if colbert is None:
        colbert = ColBERT.from_pretrained(checkpoint, batch_size=batch_size, cpu_precision=cpu_precision)
    return _build(source, folder, checkpoint=str(Path(checkpoint).resolve()) if checkpoint else None,
                  colbert=colbert, settings=settings, overwrite=overwrite, verbose=verbose,
                  passage_config=passage_config, codec=codec, ray=ray)


def update_folder(dump: Union[str, Path], folder: Union[str, Path], *, colbert=None, batch_size: int = 64,
                  verbose: bool = False) -> BuildReport:
    """Bring a search folder built from a dump up to date with a newer dump of the same wiki (``pfc index
    --update``): pages new or changed since (by page id, revision id and :func:`page_hash`) are parsed and
    encoded, unchanged pages keep their passages and ColBERT codes, pages gone are dropped. The folder's encoder,
    passage settings, search settings and residual codec are kept, so the result equals
    ``build_folder(dump, codec_from=<the folder before>)`` with the folder's settings. Written beside the folder
    and swapped in when complete, as a build is.

    The codec was trained on the corpus of the build that made it; after large changes (the manifest's
    ``codec.encoded_since`` near the number of passages) a full rebuild trains one that fits the new text.
    ``batch_size``: passages per forward pass of the encoder loaded here (in the folder's recorded precision)."""
    from ..data.passages import PassageConfig
    from ..model.colbert import ColBERT

    folder = Path(folder)
    if not (isinstance(dump, (str, Path)) and _is_dump(dump)):
        raise ValueError(f"{dump!r} is not a dump file (.xml, .bz2, .gz, .7z); an update reads a newer dump of the "
                         "folder's wiki")
    if not Path(dump).is_file():
        raise FileNotFoundError(f"dump not found: {dump}")
    manifest = load_manifest(folder)
    if manifest.reader is None or manifest.passage_config is None or not (folder / PAGES).is_file():
        raise ValueError(f"{folder} was not built from a dump file (source {manifest.source}); only such a folder "
                         "can be updated: build it again with `pfc index SOURCE FOLDER --overwrite`")
    remove_stale_builds(folder)
    if colbert is None:
        colbert = ColBERT.from_pretrained(manifest.checkpoint, batch_size=batch_size,
                                          cpu_precision=manifest.precision.removeprefix("cpu "))
    if colbert.fingerprint() != manifest.fingerprint:
        raise ValueError(f"the encoder (fingerprint {colbert.fingerprint()}) is not the one that built {folder} "
                         f"({manifest.fingerprint}); an update must encode with the folder's own encoder")
    previous = _Previous(folder)
    try:
        codec = previous.index.codec if previous.index.compressed else None
        return _build(dump, folder, checkpoint=manifest.checkpoint, colbert=colbert, settings=manifest.settings,
                      overwrite=True, verbose=verbose,
                      passage_config=PassageConfig.from_dict(manifest.passage_config), codec=codec,
                      previous=previous, before=manifest)
    finally:
        previous.close()


def _codec_of(folder: Path, settings: SearchSettings):
    """The residual codec of search folder ``folder``'s ColBERT index, checked against ``settings``."""
    from ..index.artifact import ColBERTIndex

    load_manifest(folder)  # (refuses a folder that is not a search folder of this version)
    index = ColBERTIndex(folder / COLBERT_DIR)
    if not index.compressed or index.compression != settings.compression:
        raise ValueError(f"codec_from={str(folder)!r}: its ColBERT index is {index.compression}, not "
                         f"{settings.compression}; give a folder built with compression {settings.compression!r}")
    if (index.codec.exact_above is not None) != (settings.exact_share > 0):
        has = "stores" if index.codec.exact_above is not None else "does not store"
        raise ValueError(f"codec_from={str(folder)!r}: its codec {has} exact outliers, but exact_share="
                         f"{settings.exact_share}; give the settings of that folder's manifest")
    return index.codec


def _build(source, folder: Path, *, checkpoint: Optional[str], colbert, settings: SearchSettings, overwrite: bool,
           verbose: bool, passage_config, codec=None, previous: Optional[_Previous] = None,
           before: Optional[Manifest] = None, ray=None) -> BuildReport:
    """What :func:`build_folder` and :func:`update_folder` share (see them)."""
    from ..index.artifact import ColBERTIndex
    from ..lexical.tfidf import TfidfIndex

    started = time.perf_counter()
    stats = SourceStats()
    pages: List[Dict[str, Any]] = []
    with _interruptible(), atomic_folder(folder, overwrite=overwrite, replaceable=is_search_folder,
                                         what="search folder") as tmp:
        (tmp / _OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n")
        records, total, description = open_source(source, stats, verbose, passage_config, pages, previous)
        is_dump = isinstance(source, (str, Path)) and _is_dump(source)  # (a dump shows its own progress bar)
        offsets = [0]
        sources: List[int] = []  # per passage: its position in the previous folder, or -1 (encoded by this build)
        with open(tmp / PASSAGES, "wb") as table:
            def indexed() -> Iterator[Dict[str, Any]]:
                for record in records:
                    sources.append(int(record.pop("_old", -1)))
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
        if is_dump:
            with open(tmp / PAGES, "w", encoding="utf-8") as out:
                out.writelines(json.dumps(page, ensure_ascii=False) + "\n" for page in pages)
        read_seconds = time.perf_counter() - started
        count = len(offsets) - 1
        reuse = np.asarray(sources, dtype=np.int64)

        index = ColBERTIndex(tmp / COLBERT_DIR)
        colbert_started = time.perf_counter()
        if ray is not None:  # sharded, on a Ray cluster (app/sharded.py); searched by centroids: no FAISS
            from .sharded import build_sharded_colbert

            sharded = build_sharded_colbert(tmp / COLBERT_DIR, _stored_passages(tfidf, count), ray,
                                            checkpoint=checkpoint, batch_size=colbert.batch_size, verbose=verbose,
                                            compression=settings.compression_spec())
            tokens = sharded.meta.num_tokens
        else:
            if codec is None and previous is None:  # a fresh build: encode everything, train the codec on it
                # the indexer's own read batch (1,024 passages, length-sorted together: little padding)
                index.indexer(colbert, verbose=verbose, ann=None,
                              compression=settings.compression_spec()).index(_stored_passages(tfidf, count),
                                                                             total=count)
            else:
                _assemble(index, colbert, tfidf, reuse, settings, codec, previous, tmp / _ENCODED, verbose)
            tokens = index.meta.num_tokens
            if not index.compressed:
                if index.meta.num_tokens > ANN_MIN_TOKENS and settings.faiss in ("flat", "ivf"):
                    settings = dataclasses.replace(settings, faiss="ivfpq-fs", refine=4)  # IVF would double the disk
                if settings.faiss != "flat":
                    from ..index.ann import FaissSpec

                    index.ann(FaissSpec(settings.faiss))
                for lock in (tmp / COLBERT_DIR / "faiss").glob("*.lock"):
                    lock.unlink()  # (only serialises concurrent builds of a neighbour index, which this one has done)
        colbert_seconds = time.perf_counter() - colbert_started
        (tmp / _OWNER).unlink()
        encoded = int((reuse < 0).sum())
        codec_info: Optional[Dict[str, Any]] = None
        if ray is None and index.compressed:
            if previous is None and codec is None:
                codec_info = {"trained_on": count, "encoded_since": 0}
            elif before is not None and before.codec is not None:
                codec_info = {"trained_on": before.codec["trained_on"],
                              "encoded_since": int(before.codec["encoded_since"]) + encoded}
            else:
                codec_info = {"trained_on": None, "encoded_since": encoded}
        update = None
        if previous is not None:
            kept = {int(p) for p in reuse[reuse >= 0]}
            reused_pages = sum(1 for p in pages if p["id"] in previous.pages and previous.pages[p["id"]]["hash"] ==
                               p["hash"] and previous.pages[p["id"]]["rev"] == p["rev"])
            update = {"pages_reused": reused_pages, "pages_parsed": len(pages) - reused_pages,
                      "pages_removed": len(set(previous.pages) - {p["id"] for p in pages}),
                      "passages_reused": len(kept), "passages_encoded": encoded,
                      "passages_removed": len(previous.table) - len(kept)}
        manifest = Manifest(
            source=description, name=stats.name, checkpoint=checkpoint,
            fingerprint=colbert.fingerprint(), pages=stats.pages, articles=stats.articles, passages=count,
            tokens=int(tokens),
            seconds={"read_tfidf": round(read_seconds, 2), "colbert": round(colbert_seconds, 2),
                     "total": round(time.perf_counter() - started, 2)},
            bytes=0, settings=settings, skipped=dict(stats.skipped), reader=_reader_version(is_dump),
            precision=_precision(colbert),
            passage_config=_passage_config(passage_config) if is_dump else None, codec=codec_info, update=update)
        own = FOLDER_FILES + ((PAGES,) if is_dump else ())
        manifest = dataclasses.replace(manifest, files=build_manifest(tmp, own))
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


def _passage_config(config) -> Dict[str, Any]:
    from ..data.passages import PassageConfig

    return json.loads((config or PassageConfig()).to_json())


def _assemble(index, colbert, tfidf, reuse: np.ndarray, settings: SearchSettings, codec,
              previous: Optional[_Previous], encoded_path: Path, verbose: bool) -> None:
    """Write the ColBERT index of a build that does not train its codec: the passages not found in ``previous``
    (``reuse`` -1) are encoded into a temporary fp16 index, then every passage, in order, goes to the index writer:
    copied from ``previous`` (its codes, or its fp16 vectors) or from the temporary index (compressed by
    ``codec``, one passage at a time, whatever the build: so a passage's codes never depend on which others were
    encoded with it). The temporary index is deleted."""
    import shutil

    from ..index.artifact import ColBERTIndex
    from ..index.stores import ResidualStore
    from ..index.writer import IndexWriter
    from ..model.tokenization import check_long_docs

    count = len(reuse)
    fresh = np.flatnonzero(reuse < 0)
    encoded = ColBERTIndex(encoded_path)
    if len(fresh):
        encoded.indexer(colbert, verbose=verbose, ann=None).index(
            _stored_passages(tfidf, count, fresh), total=len(fresh))
    stride = check_long_docs("windows", None, colbert.tokenizer.max_doc_pieces, colbert.config.doc_maxlen)
    old = previous.index if previous is not None else None
    if old is not None and (old.meta.long_docs, old.meta.stride) != ("windows", stride):
        raise ValueError(f"{old.path} stores long passages as {old.meta.long_docs} (stride {old.meta.stride}), not "
                         f"as this build would (windows, stride {stride}); rebuild the folder")
    docnos = tfidf.docnos.fwd[np.arange(count)] if count else []
    writer = IndexWriter(index.path, colbert.config, colbert.fingerprint(), long_docs="windows", stride=stride,
                         compression=settings.compression_spec(), codec=codec)
    with writer:
        windowed = 0
        sources = (old, encoded)
        next_fresh = 0
        for position, docno in enumerate(docnos):
            if reuse[position] >= 0:
                source, doc = old, int(reuse[position])
            else:
                source, doc = encoded, next_fresh
                next_fresh += 1
            assert source is not None and source in sources
            start, end = int(source.offsets[doc]), int(source.offsets[doc + 1])
            parts = _parts_of(source, doc)
            windowed += len(parts) > 1
            ids = np.asarray(source.token_ids[start:end])
            if source is old and codec is not None:
                store = old.store
                assert isinstance(store, ResidualStore)
                arrays = store.arrays
                writer.add_coded(str(docno), np.asarray(arrays.codes[start:end]),
                                 np.asarray(arrays.residuals[start:end]), ids, parts,
                                 exact=arrays.exact_between(start, end) if codec.exact_above is not None else None)
            else:
                writer.add(str(docno), np.asarray(source.vectors[start:end]), ids, parts)
        writer.truncated_docs, writer.windowed_docs = 0, windowed
    index._forget()
    encoded._forget()
    shutil.rmtree(encoded_path, ignore_errors=True)


def _parts_of(index, doc: int) -> List[int]:
    """Rows of each window of document ``doc`` of ``index``."""
    parts = index.part_offsets
    start, end = index.offsets[doc], index.offsets[doc + 1]
    first, last = np.searchsorted(parts, [start, end])
    return np.diff(np.asarray(parts[first:last + 1])).astype(int).tolist()


def _reader_version(is_dump: bool) -> Optional[int]:
    from ..data.passages import READER_VERSION

    return READER_VERSION if is_dump else None


def _ticking(records: Iterator[Dict[str, Any]], bar) -> Iterator[Dict[str, Any]]:
    for record in records:
        yield record
        bar.update()


def _stored_passages(tfidf, count: int, positions: Optional[np.ndarray] = None,
                     chunk: int = 1024) -> Iterator[Dict[str, str]]:
    """``docno``/``text`` records read back from the TF-IDF text store, in index order (the ColBERT indexer's
    bar, which moves every model batch, shows the progress); ``positions``: only those."""
    positions = np.arange(count) if positions is None else np.asarray(positions, dtype=np.int64)
    for start in range(0, len(positions), chunk):
        ids = positions[start:start + chunk]
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
