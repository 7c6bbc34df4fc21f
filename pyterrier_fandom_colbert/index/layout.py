"""The ColBERT index folder: its file names and :class:`IndexMeta` (``pt_meta.json``), shared by the reader
(:mod:`.artifact`) and the writer (:mod:`.writer`). See docs/index.md for the format.

An index folder holds::

    pt_meta.json           type "colbert", format "fp16" (or a compressed format, below), sizes and the encoder
                           fingerprint (IndexMeta)
    colbert_config.json    the encoder's ColBERTConfig
    vectors.f16            [num_tokens, dim] float16: all documents' vectors back to back (memory-mapped)
    token_ids.i32          [num_tokens] int32: the wordpiece id of each vector (for explanations)
    offsets.i64            [num_docs + 1] int64: document i owns rows offsets[i] .. offsets[i+1]
    docnos.npids           docno <-> document id lookup (npids)
    faiss/                 FAISS indexes over the token vectors, built on first use (see ann.py)

The residual-compressed formats ``residual1``, ``residual2`` and ``residual4`` keep ``colbert_config.json``,
``offsets.i64`` and ``docnos.npids``, and replace the vectors by a codec and codes (compressed.py)::

    codec.json             the CompressionSpec, nbits, num_centroids, dtypes, num_pairs, build timings
    centroids.f16          [C, dim] k-means centroids
    bucket_cutoffs.f32     [dim, 2^nbits - 1] per-dimension residual bucket cutoffs
    bucket_weights.f32     [dim, 2^nbits] per-dimension reconstruction weights
    codes.u16 | codes.i32  [num_tokens] centroid id of every token (uint16 up to 65,536 centroids)
    residuals.u8           [num_tokens, dim * nbits / 8] packed residual bucket ids
    ivf_offsets.i64        [C + 1]: the inverted list of centroid c is ivf_docs[ivf_offsets[c]:ivf_offsets[c + 1]]
    ivf_docs.i32           the documents (ascending within a list) holding a token coded by each centroid
    token_ids.u16 | .i32   the wordpiece id of every token (uint16 when every id is below 65,536)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Union

from ..storage import ARTIFACT_META_FILE, JsonConfig, is_artifact_folder, read_artifact_meta, write_json

ARTIFACT_TYPE = "colbert"
ARTIFACT_FORMAT = "fp16"
#: every format of a ColBERT index: full-precision vectors, or residual codes at 1, 2 or 4 bits per dimension
FORMATS = (ARTIFACT_FORMAT, "residual1", "residual2", "residual4")
PACKAGE_HINT = "pyterrier-fandom-colbert"

META_FILE = ARTIFACT_META_FILE
VECTORS_FILE = "vectors.f16"
TOKEN_IDS_FILE = "token_ids.i32"
OFFSETS_FILE = "offsets.i64"
DOCNOS_FILE = "docnos.npids"
CODEC_FILE = "codec.json"
CENTROIDS_FILE = "centroids.f16"
CUTOFFS_FILE = "bucket_cutoffs.f32"
WEIGHTS_FILE = "bucket_weights.f32"
RESIDUALS_FILE = "residuals.u8"
IVF_OFFSETS_FILE = "ivf_offsets.i64"
IVF_DOCS_FILE = "ivf_docs.i32"


@dataclass(frozen=True)
class IndexMeta(JsonConfig):
    """The sizes and encoder identity of an index, stored as ``pt_meta.json``.

    >>> IndexMeta.from_dict({"num_docs": 2, "num_tokens": 5, "dim": 8, "fingerprint": "f", "shards": 2})
    Traceback (most recent call last):
    ...
    ValueError: unknown IndexMeta field(s) ['shards']; known fields are [...]
    """

    num_docs: int
    num_tokens: int
    dim: int
    fingerprint: str
    type: str = ARTIFACT_TYPE
    format: str = ARTIFACT_FORMAT
    package_hint: str = PACKAGE_HINT

    def save(self, folder: Union[str, Path]) -> Path:
        return write_json(Path(folder) / META_FILE, self.to_dict())

    @classmethod
    def load(cls, folder: Union[str, Path]) -> "IndexMeta":
        values = read_artifact_meta(folder, ARTIFACT_TYPE, _format_of(folder))
        return cls.from_dict(values, source=Path(folder) / META_FILE)


def _format_of(folder: Union[str, Path]) -> str:
    """The folder's ColBERT format if it names one, else fp16 (so that the refusal names what was expected)."""
    return next((f for f in FORMATS if is_artifact_folder(folder, ARTIFACT_TYPE, f)), ARTIFACT_FORMAT)


def is_index_folder(folder: Union[str, Path]) -> bool:
    """Whether ``folder`` holds a ColBERT index of any format (what ``overwrite=True`` may replace)."""
    return any(is_artifact_folder(folder, ARTIFACT_TYPE, f) for f in FORMATS)
