"""Reading passages with a reader model: each (question, passage) pair's best answer span and scores.

The torch part (batched forward passes over windows) is separate from the arithmetic (:mod:`.spans`) and from
any DataFrame plumbing (:mod:`.transformer`). A passage longer than one window is read in windows
``config.stride`` tokens apart; its answer is the best span over its windows, and its "no answer" score the
lowest ``[CLS]`` score over them (as SQuAD 2.0 readers do).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from .spans import best_span, windows


@dataclass
class ReadSpans:
    """Per (question, passage) pair: the answer's character span in the passage (``-1`` when the passage has no
    token), its score (start + end logit), the "no answer" score, and their difference ``margin``."""

    start: np.ndarray       # [N] int64 character offsets
    end: np.ndarray         # [N] int64, exclusive
    span_score: np.ndarray  # [N] float64
    null_score: np.ndarray  # [N] float64

    @property
    def margin(self) -> np.ndarray:
        return self.span_score - self.null_score


def read_pairs(model: Any, tokenizer: Any, questions: Sequence[str], passages: Sequence[str], *,
               batch_size: int = 16, amp_dtype: Optional[Any] = None,
               on_batch: Optional[Callable[[int], None]] = None) -> ReadSpans:
    """Answer spans of ``passages[i]`` for ``questions[i]`` (equal lengths). ``on_batch(pairs_done)`` after each
    forward pass (progress bars)."""
    import torch

    if len(questions) != len(passages):
        raise ValueError(f"read_pairs: {len(questions)} questions but {len(passages)} passages; expected one each")
    n = len(questions)
    out = ReadSpans(np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -np.inf),
                    np.full(n, np.inf))
    if n == 0:
        return out
    config = model.config
    unique_q = {q: i for i, q in enumerate(dict.fromkeys(questions))}
    q_ids = tokenizer(list(unique_q), add_special_tokens=False, truncation=True,
                      max_length=config.question_maxlen)["input_ids"]
    p_enc = tokenizer(list(passages), add_special_tokens=False, return_offsets_mapping=True)
    features: List[Tuple[int, int, int]] = []  # (pair, window start, window end)
    for pair, question in enumerate(questions):
        budget = config.max_length - len(q_ids[unique_q[question]]) - 3
        for w0, w1 in windows(len(p_enc["input_ids"][pair]), budget, min(config.stride, budget)):
            features.append((pair, w0, w1))
    order = sorted(range(len(features)), key=lambda f: features[f][2] - features[f][1])
    cls, sep, pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
    device = next(model.parameters()).device
    for b in range(0, len(order), batch_size):
        chunk = [features[f] for f in order[b:b + batch_size]]
        rows, offsets_in = [], []
        for pair, w0, w1 in chunk:
            q = q_ids[unique_q[questions[pair]]]
            rows.append([cls, *q, sep, *p_enc["input_ids"][pair][w0:w1], sep])
            offsets_in.append(len(q) + 2)
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        types = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, (r, off) in enumerate(zip(rows, offsets_in)):
            ids[i, :len(r)] = torch.tensor(r)
            types[i, off:len(r)] = 1
            mask[i, :len(r)] = 1
        with torch.inference_mode(), torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            start_logits, end_logits = model(ids.to(device), mask.to(device), types.to(device))
        start_np, end_np = start_logits.float().cpu().numpy(), end_logits.float().cpu().numpy()
        for i, ((pair, w0, _), off) in enumerate(zip(chunk, offsets_in)):
            length = len(rows[i])
            valid = np.zeros(length, bool)
            valid[off:length - 1] = True
            s, e, score = best_span(start_np[i, :length], end_np[i, :length], valid, config.max_answer_tokens)
            null = float(start_np[i, 0] + end_np[i, 0])
            out.null_score[pair] = min(out.null_score[pair], null)
            if s >= 0 and score > out.span_score[pair]:
                offsets = p_enc["offset_mapping"][pair]
                out.span_score[pair] = score
                out.start[pair] = offsets[w0 + s - off][0]
                out.end[pair] = offsets[w0 + e - off][1]
        if on_batch is not None:
            on_batch(len(chunk))
    return out
