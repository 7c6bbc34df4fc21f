"""A search folder's ``manifest.json``: its file names and format version, the :class:`SearchSettings` it is
searched with, the :class:`Manifest` itself, and opening a folder (:func:`load_manifest`, which refuses an older
or foreign folder saying how to rebuild it, and :func:`open_integrity`, the open checks of its files)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Type, Union

from ...index.fp16.options import Fp16Options
from ...index.layout import FORMATS
from ...index.residual.compress import CompressionSpec
from ...index.residual.options import ResidualOptions
from ...storage import ArtifactIntegrity, JsonConfig, parse_manifest, read_json, unsealed
from ..fusion_settings import FormerFusionSettings, FusionSettings, check_fusion_shape

MANIFEST = "manifest.json"
PASSAGES = "passages.jsonl"
OFFSETS = "passages.offsets.npy"
PAGES = "pages.jsonl"
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


#: a search folder's ColBERT retriever options: those of its index's format family
RetrieverOptions = Union[Fp16Options, ResidualOptions]
#: the fields of the flat ``settings`` that manifests recorded before the compression and the retriever options
#: were each one object (read, never written: :meth:`SearchSettings.from_dict`)
FLAT_FIELDS = ("exact_share", "k_hat", "faiss", "refine", "ndocs", "nscore")


def retriever_options_of(fmt: str) -> Type[RetrieverOptions]:
    """The retriever options of an index of format ``fmt``: :class:`Fp16Options` (a FAISS neighbour search) or
    :class:`ResidualOptions` (centroid search)."""
    return Fp16Options if fmt == "fp16" else ResidualOptions


def _not_applicable(fmt: str, given: Dict[str, Any]) -> ValueError:
    """The error for retriever options ``given`` (name: value) that an index of format ``fmt`` does not take."""
    own = retriever_options_of(fmt)
    names = ", ".join(f"{name}={value!r}" for name, value in given.items())
    why = ("an fp16 index is searched by its FAISS neighbour index" if fmt == "fp16" else
           f"a {fmt} index is searched by its centroids, with no neighbour index")
    needs = "a residual compression" if fmt == "fp16" else "compression 'fp16'"
    return ValueError(f"{names} {'applies' if len(given) == 1 else 'apply'} only to {needs}: {why} (its retriever "
                      f"options: {', '.join(f.name for f in dataclasses.fields(own))})")


@dataclass(frozen=True)
class SearchSettings(JsonConfig):
    """How the folder is searched: how its ColBERT index stores vectors, that index's retriever options, results
    per system before fusion, explanations.

    ``compression`` is a :class:`CompressionSpec` (a format name reads as that format with its default exact
    share, ``CompressionSpec.of``: ``pfc index`` and ``build_folder()`` build the same folder); ``retriever`` the
    options of that format's retriever, checked by that format's own code (None: its defaults); the other
    format's options are refused, naming them.

    >>> SearchSettings().compression.exact_share, SearchSettings(compression="fp16").retriever
    (0.01, Fp16Options(k_hat=64, faiss='ivf', refine=1))
    >>> SearchSettings(retriever=Fp16Options(faiss="flat"))
    Traceback (most recent call last):
    ...
    ValueError: k_hat=64, faiss='flat', refine=1 apply only to compression 'fp16': a residual2 index is ...

    A manifest's flat ``settings`` (before these were objects; one without ``exact_share`` was built with none)
    reads as the settings it was built with:

    >>> SearchSettings.from_dict({"compression": "residual2", "k_hat": 64, "ndocs": 512}).compression.exact_share
    0.0
    """

    fusion: FusionSettings = field(default_factory=FusionSettings)
    #: how the ColBERT index stores token vectors: format ``residual2`` (a centroid id and 2 bits per dimension,
    #: searched by its centroids; about a sixth of the fp16 folder on disk at the same search quality, docs/app.md),
    #: ``residual1``, ``residual4`` or ``fp16`` (exact vectors and a FAISS neighbour index), and for the residual
    #: formats the share of tokens also stored exactly
    compression: CompressionSpec = field(default_factory=lambda: CompressionSpec.of("residual2"))
    #: the options of the format's retriever (:class:`Fp16Options` or :class:`ResidualOptions`; None: its defaults)
    retriever: RetrieverOptions = None  # type: ignore[assignment]  # (None is resolved on construction)
    #: explanation settings (Explainer): matches per query vector
    k_tilde: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.fusion, dict):
            check_fusion_shape(self.fusion)
            object.__setattr__(self, "fusion", FusionSettings.from_dict(self.fusion))
        compression: Any = self.compression
        if isinstance(compression, str):
            compression = CompressionSpec.of(compression)
        elif isinstance(compression, dict):
            compression = CompressionSpec.from_dict(compression)
        elif not isinstance(compression, CompressionSpec):
            raise ValueError(f"compression={compression!r}; expected a CompressionSpec or a format name {FORMATS}")
        object.__setattr__(self, "compression", compression)
        fmt, options, given = compression.format, retriever_options_of(compression.format), self.retriever
        if given is None:
            given = options()
        elif isinstance(given, dict):
            wrong = {name: value for name, value in given.items()
                     if name not in {f.name for f in dataclasses.fields(options)}}
            if any(name in {f.name for f in dataclasses.fields(other)} for other in (Fp16Options, ResidualOptions)
                   for name in wrong):
                raise _not_applicable(fmt, wrong)
            given = options.from_dict(given)
        elif isinstance(given, (Fp16Options, ResidualOptions)) and not isinstance(given, options):
            raise _not_applicable(fmt, dataclasses.asdict(given))
        elif not isinstance(given, options):
            raise ValueError(f"retriever={given!r}; expected {options.__name__} for compression {fmt!r}")
        object.__setattr__(self, "retriever", given)

    @classmethod
    def of(cls, compression: str = "residual2", *, exact_share: Optional[float] = None,
           fusion: Optional[FusionSettings] = None, k_tilde: int = 2, **retriever: Any) -> "SearchSettings":
        """The settings of an index of format ``compression`` storing ``exact_share`` of its tokens exactly (None:
        the format's default), whose retriever takes the options ``retriever`` (those of that format; another
        format's are refused, naming them): what ``pfc index``'s options make.

        >>> SearchSettings.of("fp16", faiss="flat").retriever
        Fp16Options(k_hat=64, faiss='flat', refine=1)
        >>> SearchSettings.of("residual4", faiss="flat")
        Traceback (most recent call last):
        ...
        ValueError: faiss='flat' applies only to compression 'fp16': a residual4 index is searched by its \
centroids, with no neighbour index (its retriever options: ndocs, nscore)
        """
        return cls(fusion=fusion or FusionSettings(), compression=CompressionSpec.of(compression, exact_share),
                   retriever=retriever or None, k_tilde=k_tilde)  # type: ignore[arg-type]  # (a dict: checked)

    @classmethod
    def from_dict(cls, values: Dict[str, Any], source=None) -> "SearchSettings":
        """Settings read from a manifest, of either shape: ``compression`` and ``retriever`` as objects, or the
        flat shape of folders built before (its ``compression`` a format name, :data:`FLAT_FIELDS` beside it;
        a missing ``exact_share`` is 0, and the options of the other format, which its search never read, are
        dropped)."""
        if isinstance(values, dict) and (isinstance(values.get("compression"), str)
                                         or any(name in values for name in FLAT_FIELDS)):
            flat = dict(values)
            fmt = flat.pop("compression", "residual2")
            share = flat.pop("exact_share", 0.0)
            options = {name: flat.pop(name) for name in FLAT_FIELDS[1:] if name in flat}
            own = {f.name for f in dataclasses.fields(retriever_options_of(fmt))}
            values = {**flat, "compression": {"format": fmt, "exact_share": share},
                      "retriever": {name: value for name, value in options.items() if name in own}}
        return super().from_dict(values, source=source)

    def to_dict(self) -> Dict[str, Any]:
        values = super().to_dict()
        values["compression"] = self.compression.to_dict()
        return values


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
    #: what the dump's size limits cut (``PassageConfig.max_page_bytes``, ``max_passage_chars``): ``pages``,
    #: ``passages``, and the ``first`` as ``[title, size, unit]`` (None: nothing)
    cut: Optional[Dict[str, Any]] = None
    #: True while the ColBERT part is being built: the folder was published with its passages and TF-IDF part
    #: (``files`` lists those), searched with TF-IDF only; the build replaces this manifest with the complete one
    #: (left out of the JSON when False, so complete manifests keep their bytes)
    colbert_pending: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.settings, dict):
            object.__setattr__(self, "settings", SearchSettings.from_dict(self.settings))

    def to_dict(self) -> Dict[str, Any]:
        values = dataclasses.asdict(self)
        values["settings"] = self.settings.to_dict()
        if not values["colbert_pending"]:
            del values["colbert_pending"]
        if values["cut"] is None:  # (a folder whose dump had nothing cut keeps the bytes of older manifests)
            del values["cut"]
        return values


def is_pending_folder(path: Union[str, Path]) -> bool:
    """True when ``path`` is a search folder whose ColBERT part is still being built (or whose build stopped)."""
    try:
        values = read_json(Path(path) / MANIFEST)
        return values.get("format") == FORMAT and values.get("colbert_pending") is True
    except (FileNotFoundError, ValueError, AttributeError, NotADirectoryError):
        return False


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
    version = values.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise ValueError(f"{path} is a version {version} search folder, newer than this package reads (version "
                         f"{VERSION}): upgrade pyterrier-fandom-colbert (pip install -U pyterrier-fandom-colbert) to "
                         "use it")
    if version != VERSION:
        source = values.get("source") if values.get("source") not in (None, "", "records") else "SOURCE"
        raise ValueError(f"{path} is a version {values.get('version')} search folder; this package reads version "
                         f"{VERSION} (every file's checksums, a compressed ColBERT index, the pages an update needs): "
                         f"rebuild it with "
                         f"`pfc index {source} {path} --overwrite`")
    source = str(values.get("source", ""))
    if source and not source.startswith("irds:") and source != "records":  # built from a dump file
        from ...data.passages import READER_VERSION

        reader = values.get("reader", 1)
        if isinstance(reader, int) and not isinstance(reader, bool) and reader > READER_VERSION:
            raise ValueError(f"{path} was built by a newer dump reader (version {reader}; this package's is "
                             f"{READER_VERSION}): upgrade pyterrier-fandom-colbert (pip install -U "
                             f"pyterrier-fandom-colbert) to use it, or rebuild it with this one: "
                             f"`pfc index {source} {path} --overwrite`")
        if reader != READER_VERSION:
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
    values = unsealed(values, path / MANIFEST, remedy_of(path, None, values.get("source")))
    if values.get("files") is not None:
        parse_manifest(values["files"], path / MANIFEST)
    return Manifest.from_dict(values, source=path / MANIFEST)


def required_files(manifest: Manifest) -> Tuple[str, ...]:
    """The files a folder's manifest must list: :data:`FOLDER_FILES`, and the page records of a folder built
    from a dump (which an update reads); not the ColBERT part's while it is pending."""
    own = tuple(name for name in FOLDER_FILES if not (manifest.colbert_pending and name == COLBERT_META))
    return own + ((PAGES,) if manifest.reader is not None else ())


def remedy_of(path: Path, manifest: Optional[Manifest] = None, recorded: Any = None) -> str:
    """How to rebuild the folder at ``path`` (``recorded``: the source a manifest not yet parsed names)."""
    recorded = manifest.source if manifest is not None else recorded
    source = recorded if isinstance(recorded, str) and recorded not in ("", "records") else "SOURCE"
    return f"rebuild it with `pfc index {source} {path} --overwrite`"


def open_integrity(folder: Union[str, Path], manifest: Optional[Manifest] = None) -> ArtifactIntegrity:
    """The folder's integrity base, after the open checks: every file of its manifest present with its size, the
    offsets' and both indexes' ``pt_meta.json`` checksums (a swapped index folder is refused here, naming its
    ``pt_meta.json``). A manifest without ``files`` is refused."""
    folder = Path(folder)
    manifest = manifest or load_manifest(folder)
    integrity = ArtifactIntegrity(folder, manifest.files, what="search folder", remedy=remedy_of(folder, manifest),
                                  source=folder / MANIFEST, required=required_files(manifest))
    integrity.check_open(CHECKED_ON_OPEN)
    return integrity

