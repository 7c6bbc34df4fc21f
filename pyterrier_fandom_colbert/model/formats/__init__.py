"""Checkpoint formats: this package's own folder (:mod:`.native`), colbert-ai folders (ColBERTv2, PLAID;
:mod:`.colbert_ai`) and PyLate (sentence-transformers) ColBERT folders (:mod:`.pylate`).

Each format is one module registering a :class:`~.base.CheckpointFormat` (how to recognise, read and write it) in
:data:`~.base.CHECKPOINT_FORMATS`; a new format is one module defining and registering one, added to the import
line below. :func:`detect` names a folder's format; :func:`load` and :func:`save` hand it to the format's reader
or writer. Each format's settings map onto :class:`ColBERTConfig` exactly, and a setting that one side cannot
represent is an error naming it, never a silent difference. The layouts and the mapping are described in
docs/formats.md and in each format's module.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Tuple

from . import colbert_ai, native, pylate  # noqa: F401  (importing a format's module registers it)
from .base import CHECKPOINT_FORMATS, CheckpointFormat, PathLike, detect, get_format, register_format
from .colbert_ai import (
    COLBERT_AI_ARCHITECTURE,
    COLBERT_AI_DEFAULTS,
    COLBERT_AI_METADATA,
    colbert_ai_metadata,
    colbert_ai_punctuation,
    config_from_colbert_ai,
    read_colbert_ai,
    write_colbert_ai,
)
from .pylate import (
    DENSE_DIR,
    IDENTITY,
    PYLATE_DEFAULTS,
    ST_CONFIG,
    ST_MODULES,
    ST_TRANSFORMER_CONFIG,
    config_from_pylate,
    pylate_settings,
    read_pylate,
    write_pylate,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..colbert import ColBERT
    from ..network import ColBERTModel
    from ..tokenization import ColBERTTokenizer

#: the names of the registered formats: ``("pfc", "colbert-ai", "pylate")``
FORMATS = tuple(CHECKPOINT_FORMATS)
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")

__all__ = [
    "CHECKPOINT_FORMATS", "COLBERT_AI_ARCHITECTURE", "COLBERT_AI_DEFAULTS", "COLBERT_AI_METADATA", "DENSE_DIR",
    "FORMATS", "IDENTITY", "PYLATE_DEFAULTS", "ST_CONFIG", "ST_MODULES", "ST_TRANSFORMER_CONFIG", "CheckpointFormat",
    "PathLike", "colbert_ai_metadata", "colbert_ai_punctuation", "config_from_colbert_ai", "config_from_pylate",
    "detect", "get_format", "load", "pylate_settings", "read_colbert_ai", "read_pylate", "register_format",
    "resolve", "save", "with_settings", "write_colbert_ai", "write_pylate",
]


def resolve(path: PathLike) -> PathLike:
    """A local folder for a hub id whose repository is a ColBERT checkpoint (downloaded where the network
    allows); anything else is returned as given, for the backbone loader to handle (and report)."""
    if Path(path).exists() or not _HUB_ID.fullmatch(str(path)):
        return path
    try:
        from huggingface_hub import snapshot_download

        markers = list(dict.fromkeys(name for fmt in CHECKPOINT_FORMATS.values() for name in fmt.marker_files))
        probe = snapshot_download(str(path), allow_patterns=markers)
        if detect(probe) is None:
            return path
        return snapshot_download(str(path), ignore_patterns=["*.onnx", "onnx/*", "*.h5", "*.msgpack", "*.ot",
                                                             "openvino/*", "*.gguf"])
    except Exception:  # offline, unknown repository: the backbone loader reports the missing model itself
        return path


def load(folder: PathLike, fmt: Optional[str] = None) -> Tuple["ColBERTModel", "ColBERTTokenizer"]:
    """Load a checkpoint folder of any format (offline, fp32)."""
    folder = Path(folder)
    if folder.is_file() and folder.suffix == ".dnn":
        raise ValueError(f"{folder} is a colbert-ai .dnn file, its deprecated format; load it with colbert-ai and "
                         "save it as a folder (Checkpoint(...).save(folder)) first")
    fmt = fmt or detect(folder)
    if fmt in CHECKPOINT_FORMATS:
        return CHECKPOINT_FORMATS[fmt].read(folder)
    expects = [f.expects for f in CHECKPOINT_FORMATS.values()]
    raise ValueError(f"{folder} is not a ColBERT checkpoint folder: expected {', '.join(expects[:-1])}, or "
                     f"{expects[-1]}")


def save(model: "ColBERTModel", tokenizer: "ColBERTTokenizer", folder: PathLike, fmt: str = "pfc",
         dtype: Optional["torch.dtype"] = None) -> Path:
    """Write ``folder`` in format ``fmt`` (one of :data:`FORMATS`); ``dtype`` casts the stored weights."""
    return get_format(fmt).write(model, tokenizer, folder, dtype=dtype)


def with_settings(colbert: "ColBERT", **changes: Any) -> "ColBERT":
    """The same weights under changed settings (scoring, markers, skiplist; not ``dim``), e.g. to export a model
    as the other libraries score it: ``with_settings(colbert, score_query_masks=True, reduction="sum")``.
    Its rankings here change accordingly; the original ``colbert`` is left as it was."""
    import torch

    from ..network import ColBERTModel
    from ..tokenization import ColBERTTokenizer

    if "dim" in changes and changes["dim"] != colbert.config.dim:
        raise ValueError(f"dim={changes['dim']}: the projection has {colbert.config.dim} rows; with_settings keeps the "
                         "weights, so it cannot change dim")
    config = colbert.config.replace(**changes)
    model = ColBERTModel(colbert.model.backbone, config)
    with torch.no_grad():
        model.projection.weight.copy_(colbert.model.projection.weight)
    amp = str(colbert.amp_dtype).replace("torch.", "") if colbert.amp_dtype is not None else None
    return type(colbert)(model, ColBERTTokenizer(colbert.tokenizer.hf, config), device=str(colbert.device),
                   batch_size=colbert.batch_size, verbose=colbert.verbose, amp_dtype=amp)
