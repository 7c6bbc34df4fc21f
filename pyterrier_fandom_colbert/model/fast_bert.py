"""An inference forward pass for BERT backbones without transformers' per-module overhead.

transformers' ``BertModel.forward`` wraps every one of its ~110 submodule calls per pass in hooks, output capturing
and mask preparation; for one 32-token query on a 2-core CPU that Python work is about a sixth of the encoder's
time. :func:`forward` computes the same arithmetic (embeddings, then per layer: self-attention through
``scaled_dot_product_attention``, output projection and layer norm, GELU feed-forward and layer norm) straight from
the module's weights, with the same results (``tests/test_colbert.py`` compares them).

It is used only where that is exactly BertModel's evaluation arithmetic: a ``BertModel`` whose configuration has
absolute position embeddings, exact GELU and no decoder, outside training (no dropout). Every other backbone
(RoBERTa, other position embeddings, training) goes through transformers as before; :func:`supports` says which.
Queries and documents both take this path (``ColBERTModel.forward`` outside training), as does the int8 copy of
the backbone (``cpu_precision="int8"``), whose Linear layers are torch's dynamically quantized ones.

:class:`PackedBert` is the same pass for the bfloat16 inference copy (``cpu_precision="bfloat16"``) with each
layer's weights laid out once, ahead of time, in oneDNN's blocked format, and the query, key and value projections
joined into one product. ``F.linear`` on plain bf16 weights reorders them on every call, which for a 32-token query
costs more than the product itself: the packed pass takes about half the backbone's time for a query, with the same
vectors bit for bit on this project's CPUs (``tests/test_colbert.py`` compares them). It uses the oneDNN operators
torch's own compiler emits (``torch.ops.mkldnn``); :func:`packing_available` checks they exist and agree with
``F.linear`` before any model is packed, and where they do not the copy keeps the plain pass.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

_LAYER_PARTS = ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm")


def supports(backbone: nn.Module) -> bool:
    """Whether :func:`forward` computes exactly what ``backbone`` computes in evaluation mode."""
    from .light_bert import LightBert

    if type(backbone) is LightBert:  # built for this forward pass (checked before transformers' BertModel loads)
        return True
    try:
        from transformers import BertModel
    except ImportError:  # pragma: no cover - transformers is a dependency
        return False
    if type(backbone) is not BertModel:
        return False
    config = backbone.config
    if getattr(config, "position_embedding_type", "absolute") not in (None, "absolute") \
            or getattr(config, "hidden_act", None) != "gelu" or getattr(config, "is_decoder", False):
        return False
    embeddings = backbone.embeddings
    if not all(hasattr(embeddings, name) for name in ("word_embeddings", "position_embeddings",
                                                       "token_type_embeddings", "LayerNorm")):
        return False
    return all(_has(layer, part) for layer in backbone.encoder.layer for part in _LAYER_PARTS)


def _has(module: nn.Module, dotted: str) -> bool:
    part: Any = module
    for name in dotted.split("."):
        part = getattr(part, name, None)
        if part is None:
            return False
    return True


def _layer_norm(x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def _linear(x: torch.Tensor, layer: nn.Module) -> torch.Tensor:
    if type(layer) is nn.Linear:
        return F.linear(x, layer.weight, layer.bias)
    return layer(x)  # a replacement of the same shape (torch's dynamically quantized int8 Linear)


def forward(backbone: nn.Module, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor],
            on_layer: Optional[Callable[[], None]] = None) -> torch.Tensor:
    """The last hidden states ``[B, L, hidden]`` of a :func:`supports`-ed BERT backbone (token type 0, positions
    from 0; ``attention_mask`` 1 for tokens attended to, None or all ones for no masking). ``on_layer()`` is
    called after each encoder layer (for progress bars that move within a batch)."""
    return layers(backbone, embed(backbone, input_ids), attention_mask, on_layer=on_layer)


def embed(backbone: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """The embedding layer's output ``[B, L, hidden]`` (word + position + token type 0, layer norm)."""
    # a BertModel's submodules, whose structure supports() checked: nn.Module attribute access is untyped
    e: Any = backbone.embeddings
    positions = torch.arange(input_ids.shape[1], device=input_ids.device)
    x = e.word_embeddings(input_ids) + e.position_embeddings(positions).unsqueeze(0) \
        + e.token_type_embeddings.weight[0]
    return _layer_norm(x, e.LayerNorm)


def layers(backbone: nn.Module, x: torch.Tensor, attention_mask: Optional[torch.Tensor], start: int = 0,
           stop: Optional[int] = None, dropout: float = 0.0,
           on_layer: Optional[Callable[[], None]] = None) -> torch.Tensor:
    """Encoder layers ``start … stop - 1`` applied to hidden states ``x [B, L, hidden]``.

    ``dropout > 0`` applies BERT's training-time dropouts (attention probabilities, and each sub-layer's output
    before its residual connection) with that probability; it is differentiable either way, so a training pass
    can start from cached hidden states of the lower layers (:mod:`..training.frozen`). ``on_layer()``: called
    after each layer."""
    batch, length, _ = x.shape
    mask = None
    if attention_mask is not None and not bool(attention_mask.all()):
        mask = attention_mask.bool()[:, None, None, :]  # [B, 1, 1, L]: True where attended
    # a BertModel's configuration and layers, whose structure supports() checked: nn.Module attribute access is
    # untyped
    config: Any = backbone.config
    encoder: Any = backbone.encoder
    heads: int = config.num_attention_heads
    width = x.shape[-1] // heads
    for layer in encoder.layer[start:stop]:
        attention = layer.attention
        q, k, v = (_linear(x, part).view(batch, length, heads, width).transpose(1, 2)
                   for part in (attention.self.query, attention.self.key, attention.self.value))
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        context = context.transpose(1, 2).reshape(batch, length, -1)
        x = _layer_norm(_dropout(_linear(context, attention.output.dense), dropout) + x, attention.output.LayerNorm)
        hidden = F.gelu(_linear(x, layer.intermediate.dense))
        x = _layer_norm(_dropout(_linear(hidden, layer.output.dense), dropout) + x, layer.output.LayerNorm)
        if on_layer is not None:
            on_layer()
    return x


def _dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    return F.dropout(x, p) if p > 0 else x


# -- the bfloat16 pass with weights packed ahead of time ------------------------------------------------------------
@dataclass(frozen=True)
class _Packed:
    """One Linear layer's weight in oneDNN's blocked layout (an opaque tensor: not picklable) and its bias."""

    weight: torch.Tensor
    bias: Optional[torch.Tensor]

    @classmethod
    def of(cls, *parts: nn.Linear) -> "_Packed":
        """``parts`` joined along their outputs (query, key, value → one product) and packed."""
        weight = torch.cat([p.weight.detach() for p in parts]).to(torch.bfloat16)
        biases = [p.bias for p in parts]
        bias = None if any(b is None for b in biases) else torch.cat([b.detach() for b in biases]).to(torch.bfloat16)
        return cls(torch.ops.mkldnn._reorder_linear_weight(weight, None), bias)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), self.weight, self.bias, "none", [], "")


@dataclass(frozen=True)
class _PackedLayer:
    qkv: _Packed
    attention_out: _Packed
    attention_norm: nn.LayerNorm
    intermediate: _Packed
    output: _Packed
    output_norm: nn.LayerNorm


class PackedBert:
    """:func:`forward` in bfloat16 over weights packed once (see the module's docstring); made by :func:`pack`.

    It computes what ``forward`` computes under CPU bfloat16 autocast on the backbone's bf16 Linear weights: each
    product takes bf16 inputs and gives a bf16 output; residual sums and layer norms are float32. It holds opaque
    tensors, so it is derived state: never pickled or copied, made again from the backbone."""

    def __init__(self, backbone: nn.Module):
        config: Any = backbone.config
        encoder: Any = backbone.encoder
        self.backbone = backbone
        self.heads: int = config.num_attention_heads
        self.layers: Tuple[_PackedLayer, ...] = tuple(
            _PackedLayer(_Packed.of(layer.attention.self.query, layer.attention.self.key, layer.attention.self.value),
                         _Packed.of(layer.attention.output.dense), layer.attention.output.LayerNorm,
                         _Packed.of(layer.intermediate.dense), _Packed.of(layer.output.dense), layer.output.LayerNorm)
            for layer in encoder.layer)

    def __call__(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor],
                 on_layer: Optional[Callable[[], None]] = None) -> torch.Tensor:
        x = embed(self.backbone, input_ids)
        batch, length, hidden = x.shape
        mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            mask = attention_mask.bool()[:, None, None, :]
        for layer in self.layers:
            q, k, v = layer.qkv(x).view(batch, length, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4)
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(batch, length, -1)
            x = _layer_norm(layer.attention_out(context).float() + x, layer.attention_norm)
            x = _layer_norm(layer.output(F.gelu(layer.intermediate(x))).float() + x, layer.output_norm)
            if on_layer is not None:
                on_layer()
        return x

    def __reduce__(self):
        raise TypeError("PackedBert holds oneDNN's opaque tensors and is not picklable; pack the backbone again")


def pack(backbone: nn.Module) -> Optional[PackedBert]:
    """The :class:`PackedBert` pass over a :func:`supports`-ed backbone, or None where :func:`packing_available`
    says this torch build cannot run it (then :func:`forward` under autocast is the way)."""
    if not supports(backbone) or not packing_available():
        return None
    return PackedBert(backbone)


@functools.lru_cache(maxsize=1)
def packing_available() -> bool:
    """Whether this torch build has oneDNN's packed bf16 Linear and it computes what ``F.linear`` does on bf16
    weights (checked once, on a small random layer, to within bf16 rounding)."""
    ops = getattr(torch.ops, "mkldnn", None)
    if not torch.backends.mkldnn.is_available() or ops is None:
        return False
    try:
        gen = torch.Generator().manual_seed(0)
        layer = nn.Linear(64, 48)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(48, 64, generator=gen))
            layer.bias.copy_(torch.randn(48, generator=gen))
        x = torch.randn(2, 5, 64, generator=gen).to(torch.bfloat16)
        with torch.inference_mode():
            got = _Packed.of(layer)(x).float()
            want = F.linear(x, layer.weight.to(torch.bfloat16), layer.bias.to(torch.bfloat16)).float()
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
    return got.shape == want.shape and bool(torch.allclose(got, want, rtol=1e-2, atol=1e-2))
