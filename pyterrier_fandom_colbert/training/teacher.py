"""The distillation teacher: scores that the KL loss (:func:`.losses.kl_distillation`) pulls ColBERT towards."""
from __future__ import annotations

from typing import List

import torch


class BiEncoderTeacher:
    """The backbone as a frozen sentence encoder (mean-pooled, normalised; all-MiniLM-L6-v2's own use): its
    cosine scores are the distillation targets."""

    def __init__(self, colbert):
        import copy

        self.net = copy.deepcopy(colbert.model.backbone).eval().requires_grad_(False)
        self.hf, self.device = colbert.tokenizer.hf, colbert.device

    @torch.no_grad()
    def _embed(self, texts: List[str], max_length: int) -> torch.Tensor:
        enc = self.hf(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        enc = {n: t.to(self.device) for n, t in enc.items() if n in ("input_ids", "attention_mask")}
        hidden = self.net(**enc).last_hidden_state.float()
        mask = enc["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp_min(1), dim=-1)

    def __call__(self, queries: List[str], docs: List[str]) -> torch.Tensor:
        return self._embed(queries, 64) @ self._embed(docs, 256).T
