"""The reader's network: a BERT backbone's frozen lower layers, its own upper layers and a start/end head.

``[CLS] question [SEP] passage [SEP]`` (token type 0 for the question part, 1 for the passage) goes through the
base backbone's embeddings and lower ``frozen_layers`` layers, unchanged from the base, then through the reader's
own copies of the upper layers, trained for reading; a linear head gives each token a start and an end logit.
"No answer here" is the ``[CLS]`` position (start = end = 0), as in SQuAD 2.0 readers.

A reader folder holds ``reader_config.json``, ``reader.safetensors`` (the upper layers and the head) and
``manifest.json`` (checksums); the base is named by the config and checked against its recorded digest, so a
shipped reader adds only its upper layers to the package (four MiniLM layers: 28 MB).
"""
from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..model import fast_bert
from ..storage import (
    ArtifactIntegrity,
    DamagedFileError,
    MissingFileError,
    atomic_folder,
    build_manifest,
    file_checksum,
    folder_files,
    read_json,
    write_json,
)
from .config import CONFIG_FILE, DEFAULT_BASE, ReaderConfig

WEIGHTS_FILE = "reader.safetensors"
MANIFEST_FILE = "manifest.json"
#: the confidence map fitted for the reader (:class:`.calibration.ReaderCalibration`), when there is one
CALIBRATION_FILE = "calibration.json"
#: the files every reader folder must have (the manifest must list each)
REQUIRED_FILES = (CONFIG_FILE, WEIGHTS_FILE)
_WHAT = "reader folder"
_REMEDY = "reinstall the package or retrain the reader (pfc-train reader)"


def base_folder(base: str) -> Path:
    """The backbone folder a config's ``base`` names."""
    if base == DEFAULT_BASE:
        from ..model.colbert import DEFAULT_CHECKPOINT

        return DEFAULT_CHECKPOINT / "backbone"
    return Path(base)


def load_tokenizer(base: str) -> Any:
    """The base backbone's fast tokenizer (what a loaded reader needs besides its model)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(base_folder(base), use_fast=True, local_files_only=True)


def load_base(base: str) -> Tuple[nn.Module, Any]:
    """The base backbone (evaluation mode, fp32, no gradients) and its fast tokenizer."""
    from ..model import light_bert

    folder = base_folder(base)
    if not (folder / "config.json").is_file():
        raise MissingFileError(folder / "config.json", f"the reader's base backbone {base!r} is not a backbone "
                                                       f"folder: {folder / 'config.json'} not found")
    backbone = light_bert.load(folder)
    if backbone is None:
        from transformers import AutoModel

        backbone = AutoModel.from_pretrained(folder, local_files_only=True, add_pooling_layer=False).float().eval()
    if not fast_bert.supports(backbone):
        raise ValueError(f"the reader's base {folder} is not a BERT backbone with absolute positions and GELU; "
                         "the reader runs its layers through fast_bert")
    backbone.requires_grad_(False)
    return backbone, load_tokenizer(base)


def base_digest(base: str) -> str:
    """The checksum of the base backbone's weights file (what ``ReaderConfig.base_digest`` records)."""
    return file_checksum(base_folder(base) / "model.safetensors")


class ReaderModel(nn.Module):
    """Start and end logits ``[B, L]`` for ``[CLS] question [SEP] passage [SEP]`` batches."""

    def __init__(self, base: nn.Module, config: ReaderConfig):
        super().__init__()
        layers: Any = base.encoder.layer  # type: ignore[union-attr]
        if not 0 <= config.frozen_layers < len(layers):
            raise ValueError(f"ReaderConfig.frozen_layers={config.frozen_layers}; the base has {len(layers)} "
                             f"layers (expected 0 to {len(layers) - 1}: the reader needs one layer of its own)")
        self.config = config
        self.base = base  # frozen: not part of the reader's state (see state_dict below)
        self.upper = nn.ModuleList(copy.deepcopy(layer) for layer in layers[config.frozen_layers:])
        self.upper.requires_grad_(True)
        base_config: Any = base.config
        hidden = int(base_config.hidden_size)
        self.qa = nn.Linear(hidden, 2)
        nn.init.normal_(self.qa.weight, std=0.02)
        nn.init.zeros_(self.qa.bias)
        # what fast_bert.layers reads of a backbone (its config and encoder layers), over the reader's own layers
        self._upper_view: Any = SimpleNamespace(config=base_config, encoder=SimpleNamespace(layer=self.upper))

    def own_state(self) -> Dict[str, torch.Tensor]:
        """The reader's own weights (upper layers and head), without the base's."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("base.")}

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        e: Any = self.base.embeddings
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = e.word_embeddings(input_ids) + e.position_embeddings(positions).unsqueeze(0) \
            + e.token_type_embeddings(token_type_ids)
        return F.layer_norm(x, e.LayerNorm.normalized_shape, e.LayerNorm.weight, e.LayerNorm.bias, e.LayerNorm.eps)

    def lower(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              token_type_ids: torch.Tensor) -> torch.Tensor:
        """Hidden states after the frozen layers (no gradient)."""
        with torch.no_grad():
            x = self.embed(input_ids, token_type_ids)
            return fast_bert.layers(self.base, x, attention_mask, 0, self.config.frozen_layers)

    def upper_logits(self, hidden: torch.Tensor, attention_mask: torch.Tensor,
                     dropout: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
        x = fast_bert.layers(self._upper_view, hidden, attention_mask, 0, None, dropout)
        logits = self.qa(x).float()
        return logits[..., 0], logits[..., 1]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor,
                dropout: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.upper_logits(self.lower(input_ids, attention_mask, token_type_ids), attention_mask, dropout)


def save_reader(model: ReaderModel, folder: Union[str, Path], extra: Optional[Dict[str, Any]] = None) -> Path:
    """Write a reader folder atomically: config, own weights, ``extra`` JSON files (name → value), manifest."""
    from safetensors.torch import save_file

    folder = Path(folder)
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.own_state().items()}
    bad = [k for k, v in state.items() if not torch.isfinite(v).all()]
    if bad:
        raise ValueError(f"the reader's weights {bad[:3]} hold NaN or inf values: nothing was written to {folder}")
    with atomic_folder(folder, overwrite=True, replaceable=is_reader, what=_WHAT) as tmp:
        save_file(state, str(tmp / WEIGHTS_FILE))
        model.config.save_json(tmp / CONFIG_FILE)
        for name, value in (extra or {}).items():
            write_json(tmp / name, value)
        write_json(tmp / MANIFEST_FILE, {"files": build_manifest(tmp, folder_files(tmp, exclude=[MANIFEST_FILE]))})
    return folder


def extra_files(folder: Union[str, Path]) -> Dict[str, Any]:
    """The JSON files of a reader folder besides its config and manifest (training record, calibration)."""
    folder = Path(folder)
    return {p.name: read_json(p, "reader file") for p in sorted(folder.glob("*.json"))
            if p.name not in (CONFIG_FILE, MANIFEST_FILE)}


def set_calibration(folder: Union[str, Path], calibration: Any) -> Path:
    """Rewrite a reader folder (atomically, manifest included) with ``calibration.json`` from ``calibration``
    (a :class:`.calibration.ReaderCalibration`)."""
    model = load_reader(folder)
    extra = extra_files(folder)
    extra[CALIBRATION_FILE] = calibration.to_dict()
    return save_reader(model, folder, extra=extra)


def is_reader(folder: Union[str, Path]) -> bool:
    return (Path(folder) / CONFIG_FILE).is_file()


def reader_integrity(folder: Union[str, Path]) -> ArtifactIntegrity:
    """The folder's manifest, refused when it is missing or lacks a required file."""
    folder = Path(folder)
    if not is_reader(folder):
        raise MissingFileError(folder / CONFIG_FILE, f"{folder} is not a reader folder: {CONFIG_FILE} not found")
    manifest = folder / MANIFEST_FILE
    if not manifest.is_file():
        raise DamagedFileError(manifest, f"{manifest} is missing: the reader's files cannot be checked; {_REMEDY}")
    files = read_json(manifest, "reader manifest")
    listed = files.get("files") if isinstance(files, dict) else None
    if not isinstance(listed, dict):
        raise DamagedFileError(manifest, f"{manifest} has no 'files' table; {_REMEDY}")
    missing = [name for name in REQUIRED_FILES if name not in listed]
    if missing:
        raise DamagedFileError(manifest, f"{manifest} does not list {missing}: the reader's files cannot be "
                                         f"checked; {_REMEDY}")
    from ..storage.manifests import parse_manifest

    integrity = ArtifactIntegrity(folder, parse_manifest(listed, manifest), what=_WHAT, remedy=_REMEDY,
                                  source=manifest)
    integrity.check_open(whole=list(listed))
    return integrity


def load_reader(folder: Union[str, Path]) -> ReaderModel:
    """A reader folder, checked against its manifest, over its base (refused when the base's digest differs)."""
    from safetensors.torch import load_file

    folder = Path(folder)
    reader_integrity(folder)
    config = ReaderConfig.load_json(folder / CONFIG_FILE)
    digest = base_digest(config.base)
    if config.base_digest and digest != config.base_digest:
        raise ValueError(f"{folder / CONFIG_FILE}: the reader was trained over a base backbone with weights "
                         f"{config.base_digest}, but {base_folder(config.base)} holds {digest}; retrain the reader "
                         "for this base")
    base, _ = load_base(config.base)
    model = ReaderModel(base, config)
    state = load_file(str(folder / WEIGHTS_FILE))
    expected = model.own_state()
    if set(state) != set(expected) or any(state[k].shape != expected[k].shape for k in expected):
        raise DamagedFileError(folder / WEIGHTS_FILE, f"{folder / WEIGHTS_FILE} does not hold the weights "
                                                      f"{CONFIG_FILE} describes; {_REMEDY}")
    model.load_state_dict(state, strict=False)
    return model.eval()
