"""The ColBERT index folder: its file names and :class:`IndexMeta` (``pt_meta.json``), shared by the reader
(:mod:`.artifact`) and the writer (:mod:`.writer`). See docs/index.md for the format.

An index folder holds::

    pt_meta.json           type "colbert", format "fp16", sizes and the encoder fingerprint (IndexMeta)
    colbert_config.json    the encoder's ColBERTConfig
    vectors.f16            [num_tokens, dim] float16: all documents' vectors back to back (memory-mapped)
    token_ids.i32          [num_tokens] int32: the wordpiece id of each vector (for explanations)
    offsets.i64            [num_docs + 1] int64: document i owns rows offsets[i] .. offsets[i+1]
    docnos.npids           docno <-> document id lookup (npids)
    faiss/                 FAISS indexes over the token vectors, built on first use (see ann.py)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Union

from ..storage import ARTIFACT_META_FILE, JsonConfig, is_artifact_folder, read_artifact_meta, write_json

ARTIFACT_TYPE = "colbert"
ARTIFACT_FORMAT = "fp16"
PACKAGE_HINT = "pyterrier-fandom-colbert"

META_FILE = ARTIFACT_META_FILE
VECTORS_FILE = "vectors.f16"
TOKEN_IDS_FILE = "token_ids.i32"
OFFSETS_FILE = "offsets.i64"
DOCNOS_FILE = "docnos.npids"


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
        values = read_artifact_meta(folder, ARTIFACT_TYPE, ARTIFACT_FORMAT)
        return cls.from_dict(values, source=Path(folder) / META_FILE)


def is_index_folder(folder: Union[str, Path]) -> bool:
    """Whether ``folder`` holds a ColBERT index (what ``overwrite=True`` may replace)."""
    return is_artifact_folder(folder, ARTIFACT_TYPE, ARTIFACT_FORMAT)
