"""A search folder's ``manifest.json``: its file names and format version, the :class:`SearchSettings` it is
searched with, the :class:`Manifest` itself, and opening a folder (:func:`load_manifest`, which refuses an older
or foreign folder saying how to rebuild it, and :func:`open_integrity`, the open checks of its files)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple, Union

from ...checks import positive_int
from ...storage import ArtifactIntegrity, JsonConfig, parse_manifest, read_json, unsealed
from ..fusion_settings import FormerFusionSettings, FusionSettings, check_fusion_shape

if TYPE_CHECKING:  # pragma: no cover
    from ...index.residual.compress import CompressionSpec

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


#: the share of tokens a residual folder also stores exactly unless told otherwise (``SearchSettings.exact_share``,
#: ``pfc index --exact-share``): the 1% the codec reconstructs worst, which gives the PokéClicker fact questions back
#: what 2-bit codes lose (docs/app.md)
DEFAULT_EXACT_SHARE = 0.01


@dataclass(frozen=True)
class SearchSettings(JsonConfig):
    """How the folder is searched: results per system before fusion, the ColBERT neighbour search, explanations.

    ``exact_share`` has one default wherever a folder is built (``build_folder()`` and ``pfc index``): None, the
    format's (:data:`DEFAULT_EXACT_SHARE` for a residual format, 0 for fp16); a manifest written without the
    field (0, or a folder from before it existed) reads as 0, and 0 is left out of the JSON, so manifests keep
    their bytes. It is checked by the rule ``CompressionSpec`` applies (``index.residual.codec.check_exact_share_of``).

    >>> SearchSettings().exact_share, SearchSettings(compression="fp16").exact_share
    (0.01, 0.0)
    >>> SearchSettings.from_dict({"compression": "residual2"}).exact_share  # a manifest without it
    0.0
    >>> "exact_share" in SearchSettings(exact_share=0.0).to_dict(), SearchSettings().to_dict()["exact_share"]
    (False, 0.01)
    """

    fusion: FusionSettings = field(default_factory=FusionSettings)
    #: how the ColBERT index stores token vectors: ``residual2`` (a centroid id and 2 bits per dimension, searched
    #: by its centroids; about a sixth of the fp16 folder on disk at the same search quality, docs/app.md),
    #: ``residual1``, ``residual4`` or ``fp16`` (exact vectors and a FAISS neighbour index)
    compression: str = "residual2"
    #: residual formats only: the share of tokens (those the codec reconstructs worst) also stored exactly
    #: (``CompressionSpec.exact_share``; None: the format's default, above; 0: none)
    exact_share: Optional[float] = None
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
        if self.exact_share is None:
            object.__setattr__(self, "exact_share", 0.0 if self.compression == "fp16" else DEFAULT_EXACT_SHARE)
        # the rules CompressionSpec checks, from its light modules (the CLI refuses bad input before pandas loads)
        from ...index.layout import FORMATS
        from ...index.residual.codec import check_exact_share_of

        if self.compression not in FORMATS:
            raise ValueError(f"compression={self.compression!r}; expected one of {FORMATS}")
        check_exact_share_of(self.compression, self.exact_share)

    @classmethod
    def from_dict(cls, values: Dict[str, Any], source=None) -> "SearchSettings":
        """Settings read from a manifest: a missing ``exact_share`` is 0 (not the default of a new build)."""
        if isinstance(values, dict) and "exact_share" not in values:
            values = {**values, "exact_share": 0.0}
        return super().from_dict(values, source=source)

    def to_dict(self) -> Dict[str, Any]:
        values = super().to_dict()
        if not values["exact_share"]:  # as written before the option existed
            del values["exact_share"]
        return values

    def compression_spec(self) -> "CompressionSpec":
        """The ColBERT index's :class:`~pyterrier_fandom_colbert.index.residual.compress.CompressionSpec`: its format
        and exact share."""
        from ...index.residual.compress import CompressionSpec

        return CompressionSpec(self.compression, exact_share=float(self.exact_share or 0.0))

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

