"""Training the extractive reader (:mod:`..reader`) on SQuAD-format questions, resumable from its run folder.

Each question gives one positive window (its paragraph, or for a paragraph longer than a window, a window that
holds the answer at a random place) and, with probability ``negative_rate``, one negative: a window of another
paragraph of the same article that does not contain the answer text, whose target is ``[CLS]`` ("no answer
here"). Batches are drawn by a seeded generator per epoch (similar lengths batched together), so a resumed run
replays the same batches from where it stopped.

Only the reader's upper layers and head are trained; the base's embeddings and lower layers run without
gradients. Training runs on ``device`` (default: CUDA when available, else the CPU), with bf16 autocast on
either; the device is not a setting of the run. The run folder holds ``state.pt`` (weights, optimiser, position;
replaced atomically every ``checkpoint_every`` steps), ``train_config.json`` and ``log.jsonl``; the finished
reader is written to ``<run>/reader`` (:func:`..reader.network.save_reader`).
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F

from ..progress import progress
from ..reader.config import ReaderConfig
from ..reader.network import ReaderModel, base_digest, load_base, save_reader
from ..reader.spans import token_span
from ..reader.squad import SquadQuestion, read_squad_questions
from ..storage import JsonConfig, atomic_path, write_json
from .fact_lines import fact_line_questions
from .trainer import lr_factor

STATE_FILE = "state.pt"
CONFIG_FILE = "train_config.json"
LOG_FILE = "log.jsonl"


@dataclass(frozen=True)
class ReaderTrainConfig(JsonConfig):
    """How a reader is trained (saved in the run folder; a resumed run must use the same settings)."""

    epochs: float = 1.0
    batch_size: int = 32
    lr: float = 1e-4
    head_lr: float = 1e-3
    warmup: float = 0.06
    weight_decay: float = 0.01
    dropout: float = 0.1
    negative_rate: float = 0.3
    max_grad_norm: float = 1.0
    checkpoint_every: int = 100
    seed: int = 0
    fact_lines: int = 0
    amp_dtype: Optional[str] = "bfloat16"


@dataclass
class Tokenized:
    """Questions and their paragraphs as token ids, with the answer's token span in its paragraph."""

    question_ids: List[List[int]]
    context_ids: List[List[int]]
    context_of: List[int]                 # per question: its paragraph's row in context_ids
    answer_tokens: List[Tuple[int, int]]  # per question: inclusive token span of its first answer
    answer_text: List[str]
    contexts: List[str]
    article_contexts: List[List[int]]     # per question: the other paragraphs of its article


def tokenize_questions(questions: Sequence[SquadQuestion], tokenizer: Any, config: ReaderConfig) -> Tokenized:
    keys: Dict[Tuple[str, int], int] = {}
    contexts: List[str] = []
    for q in questions:
        if (q.title, q.paragraph) not in keys:
            keys[(q.title, q.paragraph)] = len(contexts)
            contexts.append(q.context)
    enc = tokenizer(contexts, add_special_tokens=False, return_offsets_mapping=True)
    q_enc = tokenizer([q.question for q in questions], add_special_tokens=False, truncation=True,
                      max_length=config.question_maxlen)
    by_article: Dict[str, List[int]] = {}
    for (title, _), row in keys.items():
        by_article.setdefault(title, []).append(row)
    context_of, spans, texts, kept_q, others = [], [], [], [], []
    for i, q in enumerate(questions):
        row = keys[(q.title, q.paragraph)]
        text, start = q.answers[0]
        span = token_span(np.asarray(enc["offset_mapping"][row]).reshape(-1, 2), start, start + len(text))
        if span is None:
            continue
        context_of.append(row)
        spans.append(span)
        texts.append(text)
        kept_q.append(q_enc["input_ids"][i])
        others.append([r for r in by_article[q.title] if r != row])
    return Tokenized(kept_q, enc["input_ids"], context_of, spans, texts, contexts, others)


def epoch_examples(data: Tokenized, config: ReaderConfig, train: ReaderTrainConfig, epoch: int
                   ) -> List[Tuple[int, int, int, int, int]]:
    """``(question, context row, window start, window end, positive)`` per example of an epoch, seeded."""
    rng = random.Random(f"{train.seed}:{epoch}")
    out = []
    for qi in range(len(data.question_ids)):
        budget = config.max_length - len(data.question_ids[qi]) - 3
        row = data.context_of[qi]
        n = len(data.context_ids[row])
        a, b = data.answer_tokens[qi]
        if n <= budget:
            w0 = 0
        else:
            lo, hi = max(0, b - budget + 1), min(a, n - budget)
            w0 = rng.randint(lo, hi) if lo <= hi else max(0, min(a, n - budget))
        out.append((qi, row, w0, min(n, w0 + budget), 1))
        if rng.random() < train.negative_rate and data.article_contexts[qi]:
            other = rng.choice(data.article_contexts[qi])
            if data.answer_text[qi].lower() in data.contexts[other].lower():
                continue
            m = len(data.context_ids[other])
            s = rng.randint(0, m - budget) if m > budget else 0
            out.append((qi, other, s, min(m, s + budget), 0))
    return out


def epoch_batches(examples: List[Tuple[int, int, int, int, int]], data: Tokenized, batch_size: int, seed: int,
                  epoch: int) -> List[List[int]]:
    """Indices of ``examples`` per batch: shuffled, then sorted by length within pools of 50 batches."""
    rng = random.Random(f"batches:{seed}:{epoch}")
    order = list(range(len(examples)))
    rng.shuffle(order)
    pool = batch_size * 50
    batches: List[List[int]] = []
    for p in range(0, len(order), pool):
        chunk = sorted(order[p:p + pool], key=lambda i: len(data.question_ids[examples[i][0]])
                       + examples[i][3] - examples[i][2])
        batches.extend(chunk[k:k + batch_size] for k in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


def collate(examples: Sequence[Tuple[int, int, int, int, int]], data: Tokenized, tokenizer: Any
            ) -> Dict[str, torch.Tensor]:
    """Padded ``[CLS] q [SEP] window [SEP]`` batches with start/end targets (0 for "no answer")."""
    cls, sep, pad = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id
    rows, types, starts, ends, valid = [], [], [], [], []
    for qi, row, w0, w1, positive in examples:
        q = data.question_ids[qi]
        ids = [cls, *q, sep, *data.context_ids[row][w0:w1], sep]
        offset = len(q) + 2
        rows.append(ids)
        types.append([0] * offset + [1] * (len(ids) - offset))
        v = [False] * len(ids)
        v[0] = True
        for k in range(offset, len(ids) - 1):
            v[k] = True
        valid.append(v)
        if positive:
            a, b = data.answer_tokens[qi]
            starts.append(a - w0 + offset)
            ends.append(b - w0 + offset)
        else:
            starts.append(0)
            ends.append(0)
    width = max(len(r) for r in rows)
    ids_t = torch.full((len(rows), width), pad, dtype=torch.long)
    type_t = torch.zeros((len(rows), width), dtype=torch.long)
    mask_t = torch.zeros((len(rows), width), dtype=torch.long)
    valid_t = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (r, t, v) in enumerate(zip(rows, types, valid)):
        ids_t[i, :len(r)] = torch.tensor(r)
        type_t[i, :len(r)] = torch.tensor(t)
        mask_t[i, :len(r)] = 1
        valid_t[i, :len(r)] = torch.tensor(v)
    return {"input_ids": ids_t, "token_type_ids": type_t, "attention_mask": mask_t, "valid": valid_t,
            "start": torch.tensor(starts), "end": torch.tensor(ends)}


def span_loss(start_logits: torch.Tensor, end_logits: torch.Tensor, valid: torch.Tensor, start: torch.Tensor,
              end: torch.Tensor) -> torch.Tensor:
    """Mean of the start and end cross-entropies over the valid positions (passage tokens and ``[CLS]``)."""
    s = start_logits.float().masked_fill(~valid, -1e4)
    e = end_logits.float().masked_fill(~valid, -1e4)
    return (F.cross_entropy(s, start) + F.cross_entropy(e, end)) / 2


def train_reader(train_file: Union[str, Path], run: Union[str, Path], config: Optional[ReaderConfig] = None,
                 train: Optional[ReaderTrainConfig] = None, *, max_questions: Optional[int] = None,
                 threads: Optional[int] = None, verbose: bool = False, stop_after: Optional[int] = None,
                 init: Union[str, Path, None] = None, device: Union[str, torch.device, None] = None
                 ) -> Optional[Path]:
    """Train (or resume) a reader in ``run``; returns the finished reader folder ``run/reader``. ``stop_after``:
    stop (checkpointed, returning None) once this many steps are done, as an interruption would. ``init``: a
    trained reader folder over the same base to start from (:func:`warm_start`). ``device``: where to train
    (``"cpu"``, ``"cuda"``, ``"cuda:1"``; default CUDA when available); not a setting of the run, so a run may
    resume on another device."""
    where = _training_device(device)
    run = Path(run)
    run.mkdir(parents=True, exist_ok=True)
    config = config or ReaderConfig()
    train = train or ReaderTrainConfig()
    _same_settings(run / CONFIG_FILE, {"reader": config.to_dict(), "train": train.to_dict(),
                                       "train_file": str(train_file), "max_questions": max_questions,
                                       **({"init": str(init)} if init is not None else {})})
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(train.seed)
    config = config.replace(base_digest=base_digest(config.base))
    base, tokenizer = load_base(config.base)
    model = ReaderModel(base, config)
    if init is not None:
        warm_start(model, init)
    model.to(where)
    questions = read_squad_questions(train_file)
    if max_questions is not None:
        questions = questions[:max_questions]
    if train.fact_lines:
        questions += fact_line_questions(questions, train.fact_lines, seed=train.seed)
    data = tokenize_questions(questions, tokenizer, config)
    per_epoch = len(epoch_batches(epoch_examples(data, config, train, 0), data, train.batch_size, train.seed, 0))
    total = max(1, math.ceil(per_epoch * train.epochs))
    optimiser = _optimiser(model, train)
    base_lrs = [g["lr"] for g in optimiser.param_groups]
    warmup_steps = max(1, int(total * train.warmup))
    step = 0
    state_path = run / STATE_FILE
    if state_path.is_file():
        step = _resume(state_path, model, optimiser, where)
        if verbose:
            print(f"resuming {run}: step {step:,} of {total:,}")
    amp = getattr(torch, train.amp_dtype) if train.amp_dtype else None
    bar = progress(total=total, desc="training reader", unit="step", enabled=verbose)
    bar.update(step)
    model.train()
    started, losses = time.perf_counter(), []
    epoch_cache: Dict[int, Tuple[list, list]] = {}
    while step < total:
        if stop_after is not None and step >= stop_after:
            _checkpoint(state_path, model, optimiser, step, where)
            bar.close()
            return None
        epoch, within = divmod(step, per_epoch)
        if epoch not in epoch_cache:
            epoch_cache.clear()
            examples = epoch_examples(data, config, train, epoch)
            epoch_cache[epoch] = (examples, epoch_batches(examples, data, train.batch_size, train.seed, epoch))
        examples, batches = epoch_cache[epoch]
        if within >= len(batches):
            step += 1
            continue
        batch = {k: v.to(where, non_blocking=True)
                 for k, v in collate([examples[i] for i in batches[within]], data, tokenizer).items()}
        for group, lr in zip(optimiser.param_groups, base_lrs):
            group["lr"] = lr * lr_factor(step, total, warmup_steps)
        with torch.autocast(where.type, dtype=amp, enabled=amp is not None):
            start_logits, end_logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                                             dropout=train.dropout)
        loss = span_loss(start_logits, end_logits, batch["valid"], batch["start"], batch["end"])
        if not torch.isfinite(loss):
            raise FloatingPointError(f"reader training diverged at step {step}: loss {loss.item()}")
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g in optimiser.param_groups for p in g["params"]], train.max_grad_norm)
        optimiser.step()
        step += 1
        losses.append(float(loss.detach()))
        bar.update(1)
        bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
        if step % train.checkpoint_every == 0 or step == total:
            _checkpoint(state_path, model, optimiser, step, where)
            with open(run / LOG_FILE, "a", encoding="utf-8") as log:
                log.write(json.dumps({"step": step, "loss": round(float(np.mean(losses[-train.checkpoint_every:])), 4),
                                      "seconds": round(time.perf_counter() - started, 1)}) + "\n")
    bar.close()
    model.eval()
    return save_reader(model, run / "reader", extra={"training.json": {
        "train_file": Path(train_file).name, "questions": len(data.question_ids), "steps": total,
        "train": train.to_dict()}})


def _training_device(device: Union[str, torch.device, None]) -> torch.device:
    """The device asked for (default: CUDA when available, else the CPU); a ValueError names one this torch
    cannot use."""
    from ..model.colbert import check_device

    try:
        where = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError:
        raise ValueError(f"device={device!r} is not a torch device; expected cpu, cuda or cuda:N") from None
    check_device(where, None if device is None else str(device))
    return where


def _resume(state_path: Path, model: ReaderModel, optimiser: torch.optim.Optimizer, device: torch.device) -> int:
    """Load a run's checkpoint (weights, optimiser, random state) onto ``device``; returns its step."""
    state = torch.load(state_path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"], strict=False)
    optimiser.load_state_dict(state["optimiser"])
    if "rng" in state:  # checkpoints of runs started before the RNG was saved lack it
        torch.set_rng_state(state["rng"])
    if device.type == "cuda" and state.get("rng_cuda") is not None:
        torch.cuda.set_rng_state(state["rng_cuda"], device)
    return int(state["step"])


def _same_settings(saved: Path, settings: Dict[str, Any]) -> None:
    """Record a run's settings, or refuse to resume it with others."""
    if saved.is_file():
        before = json.loads(saved.read_text())
        if before != settings:
            raise ValueError(f"{saved} holds other settings than this run's ({before} vs {settings}); resume with "
                             "the same settings, or train into another run folder")
    else:
        write_json(saved, settings)


def _optimiser(model: ReaderModel, train: ReaderTrainConfig) -> torch.optim.Optimizer:
    """AdamW over the upper layers (weight decay on matrices only) and the head (its own learning rate)."""
    head = [p for n, p in model.named_parameters() if n.startswith("qa.")]
    decay = [p for n, p in model.named_parameters() if n.startswith("upper.") and p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if n.startswith("upper.") and p.ndim <= 1]
    return torch.optim.AdamW([{"params": decay, "lr": train.lr, "weight_decay": train.weight_decay},
                              {"params": no_decay, "lr": train.lr, "weight_decay": 0.0},
                              {"params": head, "lr": train.head_lr, "weight_decay": 0.0}])


def _checkpoint(path: Path, model: ReaderModel, optimiser: torch.optim.Optimizer, step: int,
                device: torch.device) -> None:
    with atomic_path(path) as tmp:  # a killed run keeps its previous checkpoint whole
        torch.save({"model": model.own_state(), "optimiser": optimiser.state_dict(), "step": step,
                    "rng": torch.get_rng_state(),
                    "rng_cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}, tmp)


def warm_start(model: ReaderModel, folder: Union[str, Path]) -> None:
    """Start ``model`` from a trained reader over the same base with as many or more frozen layers: its own
    upper layers become ``model``'s top ones (the layers below them start from the base, as usual) and its head
    is copied."""
    from ..reader.network import load_reader

    trained = load_reader(folder)
    if trained.config.base_digest != model.config.base_digest:
        raise ValueError(f"init={folder}: that reader was trained over another base backbone; start without init")
    extra = len(model.upper) - len(trained.upper)
    if extra < 0:
        raise ValueError(f"init={folder}: that reader has {len(trained.upper)} layers of its own, more than the "
                         f"{len(model.upper)} this one trains (frozen_layers={model.config.frozen_layers})")
    with torch.no_grad():
        for i, layer in enumerate(trained.upper):
            model.upper[extra + i].load_state_dict(layer.state_dict())
        model.qa.load_state_dict(trained.qa.state_dict())


def export_reader(run: Union[str, Path]) -> Path:
    """Write ``run/reader`` from the run's latest checkpoint (a run stopped before its last step)."""
    run = Path(run)
    saved, state_path = run / CONFIG_FILE, run / STATE_FILE
    if not saved.is_file() or not state_path.is_file():
        raise FileNotFoundError(f"{run} is not a reader training run with a checkpoint ({CONFIG_FILE} and "
                                f"{STATE_FILE} expected)")
    settings = json.loads(saved.read_text())
    config = ReaderConfig.from_dict(settings["reader"], source=saved)
    config = config.replace(base_digest=base_digest(config.base))
    base, _ = load_base(config.base)
    model = ReaderModel(base, config)
    state = torch.load(state_path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"], strict=False)
    return save_reader(model.eval(), run / "reader", extra={"training.json": {
        "train_file": Path(settings["train_file"]).name, "steps": int(state["step"]),
        "train": settings["train"], "exported_at_step": int(state["step"])}})
