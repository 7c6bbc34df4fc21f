"""The ColBERT network (backbone + bias-free projection) and its checkpoint folder format.

A checkpoint folder holds::

    colbert_config.json        the ColBERTConfig
    projection.safetensors     {"weight": [dim, hidden]}
    backbone/                  the encoder and its tokenizer (transformers' save_pretrained; markers included)
"""
from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Optional, Tuple, Union

import torch
from torch import nn

from ..storage import atomic_folder
from .config import CONFIG_FILE, ColBERTConfig, default_backbone
from .tokenization import ColBERTTokenizer

PROJECTION_FILE = "projection.safetensors"
BACKBONE_DIR = "backbone"


class ColBERTModel(nn.Module):
    """Backbone hidden states → linear map (no bias) to ``dim`` → optional L2 normalisation."""

    def __init__(self, backbone: nn.Module, config: ColBERTConfig):
        super().__init__()
        self.config = config
        self.backbone = backbone
        self.projection = nn.Linear(backbone.config.hidden_size, config.dim, bias=False)

    def init_projection(self, seed: int = 0) -> None:
        """A fresh projection: orthonormal rows keep the backbone's angles (as far as ``dim`` allows)."""
        gen = torch.Generator().manual_seed(seed)
        hidden = self.projection.in_features
        if self.config.projection_init == "orthogonal":
            m = torch.randn(max(hidden, self.config.dim), max(hidden, self.config.dim), generator=gen)
            q, _ = torch.linalg.qr(m)
            w = q[: self.config.dim, :hidden]
        else:
            w = torch.randn(self.config.dim, hidden, generator=gen) / hidden ** 0.5
        with torch.no_grad():
            self.projection.weight.copy_(w.to(self.projection.weight.dtype))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        out = self.projection(hidden.to(self.projection.weight.dtype))
        if self.config.normalise:
            out = nn.functional.normalize(out, p=2.0, dim=-1)
        return out


def build(backbone: Optional[str], config: ColBERTConfig, seed: int = 0) -> Tuple[ColBERTModel, ColBERTTokenizer]:
    """A fresh (untrained) ColBERT over a BERT/RoBERTa backbone folder (or hub id, if online)."""
    from transformers import AutoTokenizer

    source = backbone or config.backbone or default_backbone()
    config = config.replace(backbone=str(source))
    hf_tok = AutoTokenizer.from_pretrained(source, use_fast=True)
    net = _load_backbone(source, local_files_only=False)
    added = ColBERTTokenizer.add_marker_tokens(hf_tok, config)
    if added:
        net.resize_token_embeddings(len(hf_tok))
    model = ColBERTModel(net.float(), config)
    model.init_projection(seed)
    return model, ColBERTTokenizer(hf_tok, config)


def _load_backbone(source, local_files_only: bool) -> nn.Module:
    """The bare encoder; BERT-family poolers are left out (unused, and randomly initialised when absent)."""
    from transformers import AutoConfig, AutoModel

    kind = AutoConfig.from_pretrained(source, local_files_only=local_files_only).model_type
    extra = {"add_pooling_layer": False} if kind in ("bert", "roberta", "xlm-roberta") else {}
    with _quiet_transformers():
        return AutoModel.from_pretrained(source, local_files_only=local_files_only, **extra)


@contextlib.contextmanager
def _quiet_transformers():
    """Silence transformers' load report and weight-loading bar for one call, restoring its settings after."""
    from transformers.utils import logging as hf_logging

    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def save(model: ColBERTModel, tokenizer: ColBERTTokenizer, folder: Union[str, Path],
         dtype: Optional[torch.dtype] = None) -> Path:
    """Write a checkpoint folder atomically (temp folder, then rename). ``dtype`` casts stored weights.

    An existing checkpoint at ``folder`` is replaced; anything else there (a file, a folder of other files) is
    refused before anything is written.
    """
    from safetensors.torch import save_file

    folder = Path(folder)
    with atomic_folder(folder, overwrite=True, replaceable=is_checkpoint, what="ColBERT checkpoint folder") as tmp:
        backbone = model.backbone
        if dtype is not None:
            backbone = _copy_as(backbone, dtype)
        with _quiet_transformers():  # no "Writing model shards" bar
            backbone.save_pretrained(tmp / BACKBONE_DIR, safe_serialization=True)
        tokenizer.hf.save_pretrained(tmp / BACKBONE_DIR)
        weight = model.projection.weight.detach().to("cpu", dtype or model.projection.weight.dtype).contiguous()
        save_file({"weight": weight}, str(tmp / PROJECTION_FILE))
        model.config.save(tmp)
    return folder


def _copy_as(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    import copy

    return copy.deepcopy(module).to(dtype)


def load(folder: Union[str, Path]) -> Tuple[ColBERTModel, ColBERTTokenizer]:
    """Load a checkpoint folder, offline only, in fp32. Config/weight mismatches are errors."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    folder = Path(folder)
    config = ColBERTConfig.load(folder)
    bb = folder / BACKBONE_DIR
    if not bb.is_dir():
        raise FileNotFoundError(f"{bb} not found: a checkpoint folder needs the backbone saved under {BACKBONE_DIR}/")
    hf_tok = AutoTokenizer.from_pretrained(bb, use_fast=True, local_files_only=True)
    net = _load_backbone(bb, local_files_only=True)
    if net.get_input_embeddings().num_embeddings < len(hf_tok):
        raise ValueError(f"{folder}: the tokenizer has {len(hf_tok)} tokens but the backbone's embeddings only "
                         f"{net.get_input_embeddings().num_embeddings}; the checkpoint is inconsistent")
    model = ColBERTModel(net.float(), config)
    state = load_file(str(folder / PROJECTION_FILE))
    if set(state) != {"weight"}:
        raise ValueError(f"{folder / PROJECTION_FILE}: expected a single tensor 'weight', found {sorted(state)}")
    want = tuple(model.projection.weight.shape)
    if tuple(state["weight"].shape) != want:
        raise ValueError(f"{folder}: {CONFIG_FILE} says dim={config.dim} over a {want[1]}-wide backbone, so the "
                         f"projection should be {list(want)}, but {PROJECTION_FILE} holds "
                         f"{list(state['weight'].shape)}; the config does not match the weights")
    with torch.no_grad():
        model.projection.weight.copy_(state["weight"].float())
    return model, ColBERTTokenizer(hf_tok, config)


def is_checkpoint(folder: Union[str, Path]) -> bool:
    """Whether ``folder`` is a checkpoint folder (holds ``colbert_config.json``)."""
    return Path(folder).is_dir() and (Path(folder) / CONFIG_FILE).is_file()


def fingerprint(model: ColBERTModel) -> str:
    """A short hash of the config and every weight: indexes record it, so mismatched encoders are refused."""
    settings = {k: v for k, v in model.config.to_dict().items() if k != "backbone"}  # a path: differs by machine
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().to("cpu", torch.float16).contiguous().numpy().tobytes())
    return h.hexdigest()[:16]
