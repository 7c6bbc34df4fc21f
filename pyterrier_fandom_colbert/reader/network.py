"""The reader's network: a BERT backbone's frozen lower layers, its own upper layers and a start/end head.

``[CLS] question [SEP] passage [SEP]`` (token type 0 for the question part, 1 for the passage) goes through the
base backbone's embeddings and lower ``frozen_layers`` layers, unchanged from the base, then through the reader's
own copies of the upper layers, trained for reading; a linear head gives each token a start and an end logit.
"No answer here" is the ``[CLS]`` position (start = end = 0), as in SQuAD 2.0 readers.

A reader folder holds ``reader_config.json``, ``reader.safetensors`` (the upper layers and the head) and
``manifest.json`` (checksums); the base is named by the config and checked against its recorded digest, so a
shipped reader adds only its upper layers to the package (four MiniLM layers: 28 MB).

A reader may run its lower layers on a backbone already loaded in the process (a ColBERT encoder's, when it is
the reader's base: ``load_reader(folder, shared_base=...)``), but only when :func:`shares_base` finds that
backbone's embeddings and lower layers bit-identical to the base's weights file; any other backbone is left alone
and the base is loaded from its folder, as without one.
"""
from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Dict, Optional, Tuple, Union

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
#: tensors a BERT weights file may hold that are buffers, not weights (no backbone needs them equal)
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")


def base_folder(base: str) -> Path:
    """The backbone folder a config's ``base`` names."""
    if base == DEFAULT_BASE:
        from ..model.colbert import DEFAULT_CHECKPOINT

        return DEFAULT_CHECKPOINT / "backbone"
    return Path(base)


def load_tokenizer(base: str, light: bool = False) -> Any:
    """The base backbone's fast tokenizer (what a loaded reader needs besides its model); ``light`` (inference):
    read with ``tokenizers`` alone where that gives transformers' ids (:mod:`..model.light_tokenizer`)."""
    from ..model.light_tokenizer import load_tokenizer as folder_tokenizer

    return folder_tokenizer(base_folder(base), light=light)


def load_base(base: str) -> Tuple[nn.Module, Any]:
    """The base backbone (evaluation mode, fp32, no gradients) and its fast tokenizer."""
    return load_backbone(base), load_tokenizer(base)


def load_backbone(base: str) -> nn.Module:
    """The base backbone alone (evaluation mode, fp32, no gradients)."""
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
    return backbone


def shares_base(backbone: Any, config: ReaderConfig) -> bool:
    """Whether ``backbone`` (a loaded encoder's, e.g. ``colbert.model.backbone``) can stand in for the reader's
    base: a BERT backbone :mod:`..model.fast_bert` runs, with the base's shape (layers, width, heads, layer-norm
    epsilon), whose embeddings and lower ``config.frozen_layers`` layers are float32 tensors on the CPU equal,
    bit for bit, to those of the base's weights file (the only weights of the base the reader runs). Anything
    else (another checkpoint, weights cast or quantized, trained further, on a GPU) is False."""
    import json

    from safetensors.torch import load_file

    from ..model import light_bert

    folder = base_folder(config.base)
    config_path, weights = folder / "config.json", folder / light_bert.WEIGHTS
    if not isinstance(backbone, nn.Module) or not config_path.is_file() or not weights.is_file():
        return False
    values = json.loads(config_path.read_text(encoding="utf-8"))
    theirs: Any = getattr(backbone, "config", None)
    shape = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act")
    if not isinstance(values, dict) or any(getattr(theirs, k, None) != values.get(k) for k in shape):
        return False
    if not fast_bert.supports(backbone):
        return False
    used = ("embeddings.", *(f"encoder.layer.{i}." for i in range(config.frozen_layers)))
    eps = values.get("layer_norm_eps", 1e-12)
    if any(m.eps != eps for n, m in backbone.named_modules() if n.startswith(used) and isinstance(m, nn.LayerNorm)):
        return False
    mine = {n: t for n, t in backbone.named_parameters() if n.startswith(used)}
    stored = load_file(str(weights))
    file_names = {n for n in stored if n.startswith(used) and not n.startswith(_BUFFERS)}
    if set(mine) != file_names:
        return False
    return all(t.dtype == torch.float32 and t.device.type == "cpu" and t.shape == stored[n].shape
               and torch.equal(t.detach(), stored[n].float()) for n, t in mine.items())


def base_digest(base: str) -> str:
    """The checksum of the base backbone's weights file (what ``ReaderConfig.base_digest`` records)."""
    return file_checksum(base_folder(base) / "model.safetensors")


class ReaderModel(nn.Module):
    """Start and end logits ``[B, L]`` for ``[CLS] question [SEP] passage [SEP]`` batches.

    ``shared=True``: ``base`` belongs to someone else (a ColBERT encoder's backbone, :func:`shares_base`); the
    reader only reads it (it is not one of the reader's submodules, so ``eval()``, ``to()`` and ``parameters()``
    of the reader leave it alone) and is for inference only."""

    def __init__(self, base: nn.Module, config: ReaderConfig, *, shared: bool = False, copy_upper: bool = True):
        super().__init__()
        layers: Any = base.encoder.layer  # type: ignore[union-attr]
        if not 0 <= config.frozen_layers < len(layers):
            raise ValueError(f"ReaderConfig.frozen_layers={config.frozen_layers}; the base has {len(layers)} "
                             f"layers (expected 0 to {len(layers) - 1}: the reader needs one layer of its own)")
        self.config = config
        self.shared = shared
        if shared:  # borrowed: kept out of the reader's modules (its owner decides its mode, device and grads)
            object.__setattr__(self, "base", base)
        else:
            self.base = base  # frozen: not part of the reader's state (see own_state below)
        base_config: Any = base.config
        hidden = int(base_config.hidden_size)
        if copy_upper:  # training starts from the base's upper layers
            self.upper = nn.ModuleList(copy.deepcopy(layer) for layer in layers[config.frozen_layers:])
        else:  # shapes only, on the meta device (no copy, no random init): load_reader assigns the saved weights
            from ..model.light_bert import _layer

            eps = layers[-1].output.LayerNorm.eps
            with torch.device("meta"):
                self.upper = nn.ModuleList(_layer(hidden, int(base_config.intermediate_size), eps)
                                           for _ in range(len(layers) - config.frozen_layers))
        self.upper.requires_grad_(True)
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


def load_reader(folder: Union[str, Path], shared_base: Optional[nn.Module] = None) -> ReaderModel:
    """A reader folder, checked against its manifest, over its base (refused when the base's digest differs).

    ``shared_base``: a backbone already loaded (a ColBERT encoder's) that the reader runs its lower layers on
    when :func:`shares_base` accepts it (``model.shared``), instead of loading the base again; otherwise it is
    ignored. The answers are the same either way."""
    from safetensors.torch import load_file

    folder = Path(folder)
    reader_integrity(folder)
    config = ReaderConfig.load_json(folder / CONFIG_FILE)
    return reader_from_state(config, lambda: load_file(str(folder / WEIGHTS_FILE)), folder / CONFIG_FILE,
                             folder / WEIGHTS_FILE, shared_base=shared_base)


def reader_from_state(config: ReaderConfig, state: Callable[[], Dict[str, torch.Tensor]], config_file: Path,
                      weights_file: Path, shared_base: Optional[nn.Module] = None) -> ReaderModel:
    """A reader (evaluation mode) from its config and its own weights (``state``, read once the base is known to
    be the config's): refused when the base's digest differs from the config's, and ``weights_file`` reported
    damaged when ``state`` does not hold the weights the config describes. ``shared_base`` as in
    :func:`load_reader`."""
    digest = base_digest(config.base)
    if config.base_digest and digest != config.base_digest:
        raise ValueError(f"{config_file}: the reader was trained over a base backbone with weights "
                         f"{config.base_digest}, but {base_folder(config.base)} holds {digest}; retrain the reader "
                         "for this base")
    if shared_base is not None and shares_base(shared_base, config):
        model = ReaderModel(shared_base, config, shared=True, copy_upper=False)
    else:
        model = ReaderModel(load_backbone(config.base), config, copy_upper=False)
    weights = state()
    expected = model.own_state()
    if set(weights) != set(expected) or any(weights[k].shape != expected[k].shape for k in expected):
        raise DamagedFileError(weights_file, f"{weights_file} does not hold the weights {config_file.name} "
                                             f"describes; {_REMEDY}")
    model.load_state_dict(weights, strict=False, assign=True)
    return model.eval()
