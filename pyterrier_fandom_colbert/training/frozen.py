"""Training with the lower layers frozen, their outputs cached: the cheap way to train on a CPU.

With the embeddings and the lower ``n`` encoder layers frozen (``TrainConfig.freeze_layers = n``), a training
pass needs no backward through them, and their output for a given text never changes: it is computed once per
distinct text (in evaluation mode, no dropout, one text at a time so that it depends on the text alone) and kept.
Each step then runs only the upper layers (with dropout), the projection and the loss. A training corpus is
re-read every epoch (its passages are the positives and negatives of many questions), so after the first epoch
almost every lower-layer pass is a cache hit.

The upper layers run through :func:`..model.fast_bert.layers` (the same arithmetic as transformers' BertLayer,
differentiable, dropout included), so this needs a BERT backbone (:func:`..model.fast_bert.supports`); the marker
embeddings (``[Q]``/``[D]``) are part of the frozen embedding layer and stay as they start.

Memory: about ``4 · hidden`` bytes per token of each distinct text (MiniLM: 1.5 kB; a 180-token passage 276 kB).
``max_cache_bytes`` caps it; beyond it, texts are recomputed each time they come (still without a backward) and
the trainer logs how often that happened.
"""
from __future__ import annotations

from typing import Dict, Tuple

import torch

from ..model import fast_bert

#: default cap of the cache (4 GiB of fp32 hidden states)
MAX_CACHE_BYTES = 4 << 30


class FrozenLower:
    """Freezes ``model``'s embeddings and lower ``n_layers`` encoder layers (``requires_grad=False``) and computes
    training passes from their cached outputs: ``frozen(input_ids, attention_mask, dropout)`` returns what
    ``model(input_ids, attention_mask)`` returns (``[B, L, dim]``), with dropout only in the upper layers."""

    def __init__(self, model, n_layers: int, max_cache_bytes: int = MAX_CACHE_BYTES):
        backbone = model.backbone
        if not fast_bert.supports(backbone):
            raise ValueError(f"freeze_layers={n_layers} needs a BERT backbone (absolute positions, GELU); this model's "
                             f"backbone is a {type(backbone).__name__}: train it with freeze_layers=0")
        total = len(backbone.encoder.layer)
        if not 1 <= n_layers <= total:
            raise ValueError(f"freeze_layers={n_layers}; the backbone has {total} layers (expected 1 to {total}, "
                             "or 0 for no freezing)")
        self.model, self.n_layers = model, n_layers
        for module in [backbone.embeddings, *backbone.encoder.layer[:n_layers]]:
            module.requires_grad_(False)
        self.max_cache_bytes = max_cache_bytes
        self.cache: Dict[Tuple[int, ...], torch.Tensor] = {}
        self.cache_bytes = 0
        self.hits = self.misses = self.uncached = 0

    @torch.no_grad()
    def lower(self, ids: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[len, hidden]`` after the frozen layers for one unpadded text's token ids."""
        backbone = self.model.backbone
        x = fast_bert.embed(backbone, ids[None])
        return fast_bert.layers(backbone, x, None, 0, self.n_layers)[0]

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, dropout: float = 0.0) -> torch.Tensor:
        lengths = attention_mask.sum(1)
        positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
        if not torch.equal(attention_mask.bool(), positions[None] < lengths[:, None]):
            raise ValueError("FrozenLower expects right-padded batches (attention mask 1…1 0…0)")
        rows = []
        for row, n in zip(input_ids, lengths.tolist()):
            key = tuple(row[:n].tolist())
            states = self.cache.get(key)
            if states is None:
                self.misses += 1
                states = self.lower(row[:n])
                size = states.numel() * states.element_size()
                if self.cache_bytes + size <= self.max_cache_bytes:
                    self.cache[key] = states
                    self.cache_bytes += size
                else:
                    self.uncached += 1
            else:
                self.hits += 1
            rows.append(states)
        width = int(input_ids.shape[1])
        x = rows[0].new_zeros((len(rows), width, rows[0].shape[-1]))
        for i, states in enumerate(rows):
            x[i, :len(states)] = states
        hidden = fast_bert.layers(self.model.backbone, x, attention_mask, self.n_layers, None, dropout)
        return self.model.head(hidden)
