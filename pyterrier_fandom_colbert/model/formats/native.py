"""This package's own checkpoint folders (``colbert_config.json`` beside the backbone, the projection and the
tokenizer): read and written by :mod:`..network`."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional, Tuple

from ..config import CONFIG_FILE
from .base import CheckpointFormat, register_format

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..network import ColBERTModel
    from ..tokenization import ColBERTTokenizer


def _claims(path: Path) -> bool:
    return path.is_dir() and (path / CONFIG_FILE).exists()


def read_native(folder: Path) -> Tuple["ColBERTModel", "ColBERTTokenizer"]:
    from .. import network

    return network.load(folder)


def write_native(model: "ColBERTModel", tokenizer: "ColBERTTokenizer", folder: Path,
                 dtype: Optional["torch.dtype"] = None) -> Path:
    from .. import network

    return network.save(model, tokenizer, folder, dtype=dtype)


register_format(CheckpointFormat(
    name="pfc", claims=_claims, read=read_native, write=write_native, marker_files=(CONFIG_FILE,),
    expects=f"{CONFIG_FILE} (this package)", rank=0, detect_rank=0))
