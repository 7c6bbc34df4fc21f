"""The ColBERT index folder: its file names and :class:`IndexMeta` (``pt_meta.json``), shared by the reader
(:mod:`.artifact`) and the writer (:mod:`.writer`). See docs/index.md for the format.

An index folder holds::

    pt_meta.json           type "colbert", format "fp16" (or a compressed format, below), sizes, the encoder
                           fingerprint and the manifest ("files": size and checksum of every other file) (IndexMeta)
    colbert_config.json    the encoder's ColBERTConfig
    vectors.f16            [num_tokens, dim] float16: all documents' vectors back to back (memory-mapped)
    token_ids.i32          [num_tokens] int32: the wordpiece id of each vector (for explanations)
    offsets.i64            [num_docs + 1] int64: document i owns rows offsets[i] .. offsets[i+1]
    docnos.npids           docno <-> document id lookup (npids)
    parts.i64              long_docs="windows" only: [num_parts + 1] int64 row boundaries of the windows
                           (parts), each document's parts back to back within its own rows
    faiss/                 FAISS indexes over the token vectors (index.build_ann, or built on first use), each tied
                           to the checksum of vectors.f16 it was built from (see ann/cache.py)

The residual-compressed formats (``format`` ``residual1``, ``residual2`` or ``residual4``; residual/compress.py) keep
``colbert_config.json``, ``offsets.i64``, ``docnos.npids`` (and ``parts.i64``) and store, instead of the vectors::

    codec.json             the CompressionSpec, nbits, num_centroids, dtypes, num_pairs, build timings
    centroids.f16          [C, dim] k-means centroids
    bucket_cutoffs.f32     [dim, 2^nbits - 1] per-dimension residual bucket cutoffs
    bucket_weights.f32     [dim, 2^nbits] per-dimension reconstruction weights
    codes.u16 | codes.i32  [num_tokens] centroid id of every token (uint16 up to 65,536 centroids)
    residuals.u8           [num_tokens, dim * nbits / 8] packed residual bucket ids
    ivf_offsets.i64        [C + 1]: the inverted list of centroid c is ivf_docs[ivf_offsets[c]:ivf_offsets[c + 1]]
    ivf_docs.i32           the documents (ascending within a list) holding a token coded by each centroid
    token_ids.u16 | .i32   the wordpiece id of every token (uint16 when every id is below 65,536)

and, when the CompressionSpec's ``exact_share`` is above 0 (codec.json's ``exact_above``: the reconstruction error
beyond which a token is an "exact outlier"; ``exact_rows`` in codec.json and in pt_meta.json: how many)::

    exact_rows.u32 | .i64  [n] ascending: the token rows whose codes reconstruct them worse than exact_above
    exact_vectors.f16      [n, dim] their vectors, stored exactly (fp16) beside their codes; read instead of the
                           decompressed codes wherever vectors are (exact scoring, PRF, explanations)

and, when codec.json's ``token_norms`` is true (every index written now; older ones lack it)::

    token_norms.f32        [num_tokens] the L2 norm of every token's vector as scoring sees it (decompressed, or
                           the exact outlier's); exact scoring then takes dot products from tables of the centroids
                           and residual bytes and decompresses nothing (an index without it decompresses)

Opening checks the cheap things (:func:`check_offsets`, every file's size, the checksums of
:data:`CHECKED_ON_OPEN`); the other files' blocks are verified as they are first read (their block checksums in
the manifest); ``ColBERTIndex.verify()`` checks every checksum and that every vector is finite.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np

from ..checks import positive_int
from ..model.config import CONFIG_FILE
from ..model.tokenization import LONG_DOCS
from ..storage import (
    ARTIFACT_META_FILE,
    JsonConfig,
    is_artifact_folder,
    parse_manifest,
    read_artifact_meta,
    write_artifact_meta,
)

ARTIFACT_TYPE = "colbert"
ARTIFACT_FORMAT = "fp16"
#: every format of a ColBERT index: full-precision vectors, or residual codes at 1, 2 or 4 bits per dimension
FORMATS = (ARTIFACT_FORMAT, "residual1", "residual2", "residual4")
PACKAGE_HINT = "pyterrier-fandom-colbert"
#: how every error about a damaged index says to rebuild it
REMEDY = "rebuild the index (index.indexer(colbert, overwrite=True))"

META_FILE = ARTIFACT_META_FILE
VECTORS_FILE = "vectors.f16"
TOKEN_IDS_FILE = "token_ids.i32"
OFFSETS_FILE = "offsets.i64"
DOCNOS_FILE = "docnos.npids"
PARTS_FILE = "parts.i64"
#: files whose checksums are compared on every open (small: a few bytes per document); the others (vectors,
#: token ids) have their sizes checked then, each block verified the first time it is read, and their whole
#: checksums in ``verify()``
CHECKED_ON_OPEN = (CONFIG_FILE, OFFSETS_FILE, DOCNOS_FILE, PARTS_FILE)
CODEC_FILE = "codec.json"
CENTROIDS_FILE = "centroids.f16"
CUTOFFS_FILE = "bucket_cutoffs.f32"
WEIGHTS_FILE = "bucket_weights.f32"
RESIDUALS_FILE = "residuals.u8"
IVF_OFFSETS_FILE = "ivf_offsets.i64"
IVF_DOCS_FILE = "ivf_docs.i32"
EXACT_VECTORS_FILE = "exact_vectors.f16"
TOKEN_NORMS_FILE = "token_norms.f32"
#: a compressed index's small files, whose checksums are also compared on every open
CHECKED_ON_OPEN_COMPRESSED = (*CHECKED_ON_OPEN, CODEC_FILE, CENTROIDS_FILE, CUTOFFS_FILE, WEIGHTS_FILE,
                              IVF_OFFSETS_FILE)


@dataclass(frozen=True)
class IndexMeta(JsonConfig):
    """The sizes and encoder identity of an index, stored as ``pt_meta.json``.

    >>> IndexMeta.from_dict({"num_docs": 2, "num_tokens": 5, "dim": 8, "fingerprint": "f", "shards": 2})
    Traceback (most recent call last):
    ...
    ValueError: unknown IndexMeta field(s) ['shards']; known fields are [...]
    """

    # an index without exact outliers reads as before they existed
    OMITTED_AT_DEFAULT = ("exact_rows",)

    num_docs: int
    num_tokens: int
    dim: int
    fingerprint: str
    #: ``"truncate"``: a long text keeps its first ``doc_maxlen`` tokens; ``"windows"``: it is stored as overlapping
    #: windows (``parts.i64``), ``stride`` word pieces apart, all scored as one document
    long_docs: str = "truncate"
    stride: Optional[int] = None
    #: documents cut at ``doc_maxlen`` (truncate) and split into several windows (windows); None: not counted
    #: (vectors given to the writer directly, or an index built before the count existed)
    truncated_docs: Optional[int] = None
    windowed_docs: Optional[int] = None
    #: windows stored (windows mode; equals num_docs otherwise)
    num_parts: Optional[int] = None
    type: str = ARTIFACT_TYPE
    format: str = ARTIFACT_FORMAT
    package_hint: str = PACKAGE_HINT
    #: compressed formats with exact outliers only: how many token rows are also stored exactly (None: the index has
    #: no exact outliers; then absent from pt_meta.json, so that code which does not know them refuses the index)
    exact_rows: Optional[int] = None
    #: manifest: {file name: {"size": bytes, "xxh3_128": checksum, "blocks": {"bytes", "xxh3_64": [...]}}} of every
    #: other file (None: an index written before checksums were recorded, refused unless opened unchecked)
    files: Optional[Dict[str, Dict[str, Any]]] = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if self.long_docs not in LONG_DOCS:
            raise ValueError(f"long_docs={self.long_docs!r}; expected one of {LONG_DOCS}")

    def save(self, folder: Union[str, Path]) -> Path:
        return write_artifact_meta(Path(folder) / META_FILE, self.to_dict())

    @classmethod
    def load(cls, folder: Union[str, Path]) -> "IndexMeta":
        source = Path(folder) / META_FILE
        values = read_artifact_meta(folder, ARTIFACT_TYPE, _format_of(folder), REMEDY)
        meta = cls.from_dict(values, source=source)
        for name in ("num_docs", "num_tokens", "dim"):
            value = getattr(meta, name)
            positive_int(name, value, what=f"a size; {source} is damaged")
        if meta.files is not None:
            parse_manifest(meta.files, source)
        return meta


def required_files(meta: IndexMeta) -> Tuple[str, ...]:
    """The files the manifest of an index with ``meta`` must list, whatever its format (each format's arrays are
    added once its layout is known: ``store.layout(meta)``)."""
    return ((CONFIG_FILE, OFFSETS_FILE, DOCNOS_FILE) + ((PARTS_FILE,) if meta.long_docs == "windows" else ())
            + ((VECTORS_FILE, TOKEN_IDS_FILE) if meta.format == ARTIFACT_FORMAT else (CODEC_FILE,)))


def check_offsets(offsets: np.ndarray, num_tokens: int) -> Optional[str]:
    """Why ``offsets`` cannot be a document → token rows map over ``num_tokens`` rows (None when it can): it must
    start at 0, end at ``num_tokens`` and strictly increase (every document has at least one vector).

    >>> check_offsets(np.array([0, 2, 5]), 5) is None
    True
    >>> check_offsets(np.array([0, 3, 2, 5]), 5)
    'entries 1 and 2 are 3 and 2: offsets must strictly increase (document 1 would have 0 or fewer vectors)'
    >>> check_offsets(np.array([0, 2, 4]), 5)
    'the last entry is 4, but the index holds 5 token vectors'
    """
    if len(offsets) == 0 or offsets[0] != 0:
        return f"the first entry is {offsets[0] if len(offsets) else None}, not 0"
    if offsets[-1] != num_tokens:
        return f"the last entry is {offsets[-1]}, but the index holds {num_tokens} token vectors"
    steps = np.diff(offsets)
    bad = np.flatnonzero(steps <= 0)
    if len(bad):
        i = int(bad[0])
        return (f"entries {i} and {i + 1} are {offsets[i]} and {offsets[i + 1]}: offsets must strictly increase "
                f"(document {i} would have 0 or fewer vectors)")
    return None


def _format_of(folder: Union[str, Path]) -> str:
    """The folder's ColBERT format if it names one, else fp16 (so that a refusal names what was expected)."""
    return next((f for f in FORMATS if is_artifact_folder(folder, ARTIFACT_TYPE, f)), ARTIFACT_FORMAT)


def is_index_folder(folder: Union[str, Path]) -> bool:
    """Whether ``folder`` holds a ColBERT index of any format (what ``overwrite=True`` may replace)."""
    return any(is_artifact_folder(folder, ARTIFACT_TYPE, f) for f in FORMATS)


def non_finite_rows(block: np.ndarray) -> np.ndarray:
    """Indices of the rows of a float16 ``block`` holding a NaN or inf (exponent bits all ones: 2.5x faster than
    ``np.isfinite`` on float16, which numpy does not vectorise).

    >>> non_finite_rows(np.array([[1, 2], [np.nan, 0], [0, -np.inf], [65504, 0]], dtype=np.float16)).tolist()
    [1, 2]
    """
    bits = np.ascontiguousarray(block, dtype=np.float16).view(np.uint16)
    return np.flatnonzero(((bits & 0x7C00) == 0x7C00).any(axis=1))
