"""The training loop: AdamW, linear warm-up then linear decay, gradient accumulation, mixed precision on GPU,
periodic dev evaluation with best-checkpoint keeping, and exact resumption from a run folder.

A run folder holds::

    train_config.json         the TrainConfig
    trainer_state.pt          step, optimizer, AMP scaler, RNG states, history; names the latest checkpoint
    checkpoints/step-NNNNNNN/ the latest weights (a ColBERT checkpoint; written before the state that names it)
    best/                     the checkpoint with the best dev RR@10 so far (the start counts too)
    history.json              loss and dev metrics at every evaluation
    tfidf/                    the TF-IDF index of the training corpus (TF-IDF negatives only)

Every checkpoint is what :meth:`ColBERT.from_pretrained` loads. The examples of each epoch depend on
``(seed, epoch)`` only (see :mod:`.examples`), so a resumed run takes exactly the steps an uninterrupted one would.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import numpy as np
import torch

from ..storage import JsonConfig, atomic_path, write_json
from .evaluation import evaluate
from .examples import Batch, QAData, QPPSource, QQPSource, collate, tfidf_rankings
from .frozen import FrozenLower
from .losses import LOSSES, aligned_scores, cross_entropy, kl_distillation, mse_to_targets, pairwise_scores
from .teacher import HYBRID_META_FILE, BiEncoderTeacher, HybridTeacher

_log = logging.getLogger(__name__)

CONFIG_FILE = "train_config.json"
STATE_FILE = "trainer_state.pt"
HISTORY_FILE = "history.json"
METRIC = "RR@10"
COLBERT_NEGATIVES_FILE = "colbert_negatives.json"
NEGATIVE_SOURCES = ("tfidf", "colbert", "random")
TEACHERS = ("biencoder", "hybrid")


@dataclass(frozen=True)
class TrainConfig(JsonConfig):
    """Training settings; the defaults are the study's (docs/method.md §3.7). A fresh projection needs ``lr`` near
    1e-4 (``PRESETS["fresh"]``): the study's 3e-6 suits a model already trained as ColBERT."""

    form: str = "qpp"                     # "qpp" ⟨q, d+, d-…⟩ or "qqp" ⟨q+, q-, d+⟩
    loss: str = "ce"                      # "ce" (N_q-scaled cross-entropy) or "mse" (cosine MaxSim → 1 / 0)
    lr: float = 3e-6                      # projection (the head)
    backbone_lr: Optional[float] = None   # encoder incl. marker embeddings; None = lr
    weight_decay: float = 0.01            # not on biases and LayerNorm weights
    warmup: float = 0.25                  # fraction of all steps (the study: the first epoch of 4)
    epochs: int = 4
    max_steps: Optional[int] = None       # stop earlier than ``epochs`` (optimizer steps)
    batch_size: int = 32                  # examples per forward pass
    grad_accumulation: int = 1            # forward passes per optimizer step
    negatives: int = 9                    # QPP negatives per example
    negative_source: str = "tfidf"        # "tfidf" / "colbert" (top ``negative_depth`` minus positives) or "random"
    negative_depth: int = 10
    negative_checkpoint: Optional[str] = None  # "colbert" negatives: mined by this checkpoint (None: the start)
    in_batch: bool = False                # also score every other candidate of the batch
    distill_weight: float = 0.0           # + weight · KL(teacher ‖ student)
    distill_temperature: float = 0.05     # teacher score / T (bi-encoder cosines: 0.05; hybrid z-scores: ~1)
    teacher: str = "biencoder"            # "biencoder" (the backbone) or "hybrid" (TF-IDF and a ColBERT, fused)
    teacher_checkpoint: Optional[str] = None  # hybrid teacher's ColBERT (None: the model as it starts)
    teacher_weight: Optional[float] = None    # hybrid teacher's lexical share (None: pfc.Hybrid's default)
    teacher_depth: int = 1000             # hybrid teacher: results per query of each system before fusing
    seed: int = 0
    amp_dtype: Optional[str] = "bfloat16"  # autocast dtype on CUDA ("bfloat16", "float16", None); CPU is fp32
    dropout: float = 0.1                  # every dropout of the backbone
    max_grad_norm: Optional[float] = 1.0
    eval_every: int = 0                   # optimizer steps between dev evaluations (0: every epoch)
    eval_k: int = 10
    freeze_layers: int = 0                # embeddings + this many lower layers frozen, their outputs cached

    def __post_init__(self) -> None:
        checks = [(self.form in ("qpp", "qqp"), f"form={self.form!r}; expected 'qpp' or 'qqp'"),
                  (self.loss in LOSSES, f"loss={self.loss!r}; expected one of {LOSSES}"),
                  (self.negative_source in NEGATIVE_SOURCES,
                   f"negative_source={self.negative_source!r}; expected one of {NEGATIVE_SOURCES}"),
                  (self.negative_checkpoint is None or self.negative_source == "colbert",
                   "negative_checkpoint is only used with negative_source='colbert'"),
                  (self.teacher in TEACHERS, f"teacher={self.teacher!r}; expected one of {TEACHERS}"),
                  (self.teacher == "hybrid" or (self.teacher_checkpoint is None and self.teacher_weight is None),
                   "teacher_checkpoint and teacher_weight are only used with teacher='hybrid'"),
                  (self.teacher_weight is None or 0 <= self.teacher_weight <= 1,
                   f"teacher_weight={self.teacher_weight}; expected the lexical share, in [0, 1]"),
                  (self.teacher_depth >= 1, f"teacher_depth={self.teacher_depth}; expected 1 or more"),
                  (self.distill_temperature > 0, f"distill_temperature={self.distill_temperature}; expected > 0"),
                  (self.freeze_layers >= 0, f"freeze_layers={self.freeze_layers}; expected 0 or more"),
                  (self.amp_dtype in (None, "bfloat16", "float16"),
                   f"amp_dtype={self.amp_dtype!r}; expected 'bfloat16', 'float16' or None"),
                  (self.lr > 0 and (self.backbone_lr is None or self.backbone_lr >= 0), "lr must be > 0"),
                  (0 <= self.warmup < 1, f"warmup={self.warmup}; expected a fraction in [0, 1)"),
                  (self.epochs >= 1 and self.batch_size >= 1 and self.grad_accumulation >= 1,
                   "epochs, batch_size and grad_accumulation must be >= 1"),
                  (self.form == "qqp" or self.negatives >= 1 or self.in_batch,
                   "QPP needs negatives >= 1 or in_batch=True (else there is nothing to rank against)"),
                  (0 <= self.dropout < 1, f"dropout={self.dropout}; expected [0, 1)")]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    def replace(self, **changes: Any) -> "TrainConfig":
        return dataclasses.replace(self, **changes)

    def save(self, folder: Union[str, Path]) -> Path:
        """Write ``train_config.json`` into a run folder (atomically)."""
        return self.save_json(Path(folder) / CONFIG_FILE)

    @classmethod
    def load(cls, folder: Union[str, Path]) -> "TrainConfig":
        """Read ``train_config.json`` of a run folder; errors name the file."""
        return cls.load_json(Path(folder) / CONFIG_FILE)


#: "study": the paper's settings; "fresh": what a new projection over a sentence encoder needs (the pilot's)
PRESETS = {
    "study": TrainConfig(),
    "fresh": TrainConfig(lr=1e-4, backbone_lr=3e-5, warmup=0.1, negatives=1, in_batch=True),
}


def lr_factor(step: int, total: int, warmup_steps: int) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` (0-based): linear warm-up, linear decay.

    >>> [round(lr_factor(s, 10, 4), 3) for s in range(10)]
    [0.25, 0.5, 0.75, 1.0, 1.0, 0.833, 0.667, 0.5, 0.333, 0.167]
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total - step) / max(1, total - warmup_steps))


@dataclass
class TrainResult:
    start: Optional[Dict[str, float]]
    best: Optional[Dict[str, float]]
    best_step: Optional[int]
    steps: int
    seconds: float
    examples_per_second: float
    history: List[Dict[str, Any]] = field(default_factory=list)


class Trainer:
    """Trains ``colbert`` (a :class:`~pyterrier_fandom_colbert.model.colbert.ColBERT`, changed in place) on ``train``,
    writing checkpoints to ``out``. ``source`` overrides the examples ``config`` would make (e.g. docpairs).
    An ``out`` folder holding a run is refused unless ``resume=True``, which continues it exactly."""

    def __init__(self, colbert, config: TrainConfig, train: QAData, out: Union[str, Path],
                 dev: Optional[QAData] = None, source=None, resume: bool = False, verbose: bool = False):
        self.colbert, self.config, self.data, self.dev = colbert, config, train, dev
        self.out, self.verbose, self.resume = Path(out), verbose, resume
        if (self.out / STATE_FILE).exists() and not resume:
            raise FileExistsError(f"{self.out} already holds a training run; pass resume=True (--resume) to "
                                  "continue it, or choose another folder")
        self.source = source or self._default_source()
        self.device = colbert.device
        self.model = colbert.model
        for module in self.model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = config.dropout
        self.teacher = self._teacher() if config.distill_weight > 0 else None
        self.frozen = FrozenLower(self.model, config.freeze_layers) if config.freeze_layers else None
        self.optimizer = self._optimizer()
        amp_dtype = config.amp_dtype if self.device.type == "cuda" else None
        self.amp = getattr(torch, amp_dtype) if amp_dtype is not None else None
        self.scaler = torch.amp.GradScaler("cuda") if self.amp == torch.float16 else None
        n_examples = len(self.source.epoch(0))
        batches = math.ceil(n_examples / config.batch_size)
        self.steps_per_epoch = math.ceil(batches / config.grad_accumulation)
        self.total_steps = config.epochs * self.steps_per_epoch
        if config.max_steps is not None:
            self.total_steps = min(self.total_steps, config.max_steps)
        self.warmup_steps = round(config.warmup * self.total_steps)
        self.step = 0
        self.history: List[Dict[str, Any]] = []
        #: ``{"step": …, "metrics": …}`` of the best checkpoint so far
        self.best: Optional[Dict[str, Any]] = None
        #: dev metrics before training
        self.start: Optional[Dict[str, float]] = None
        self.seconds, self.examples = 0.0, 0
        self._epoch_cache: Dict[int, List[List[Any]]] = {}

    # -- setup ---------------------------------------------------------------------------------------------
    def _default_source(self):
        c = self.config
        if c.form == "qqp":
            return QQPSource(self.data, seed=c.seed)
        rankings = None
        if c.negative_source == "tfidf" and c.negatives:
            self.out.mkdir(parents=True, exist_ok=True)
            rankings = tfidf_rankings(self.data, self.out / "tfidf", c.negative_depth, verbose=self.verbose)
        elif c.negative_source == "colbert" and c.negatives:
            rankings = self._colbert_rankings()
        return QPPSource(self.data, c.negatives, c.seed, rankings, c.negative_depth)

    def _teacher(self):
        """The distillation teacher: the backbone as a bi-encoder, or the hybrid of TF-IDF and a ColBERT (fused once
        over the training data and kept in the run folder; ``teacher_checkpoint=None``: the model as it starts,
        which a resumed run reads back from there)."""
        c = self.config
        if c.teacher == "biencoder":
            return BiEncoderTeacher(self.colbert)
        from ..fusion.hybrid import DEFAULT_WEIGHT

        if self.resume and (self.out / STATE_FILE).exists() and c.teacher_checkpoint is None and \
                not (self.out / HYBRID_META_FILE).exists():
            raise FileNotFoundError(f"{self.out / HYBRID_META_FILE} is missing: the hybrid teacher of this run used "
                                    "the model as it started, which a resumed run no longer has")
        scorer = self.colbert
        if c.teacher_checkpoint is not None:
            from ..model.colbert import ColBERT

            scorer = ColBERT.from_pretrained(c.teacher_checkpoint, device=self.colbert.device)
        weight = DEFAULT_WEIGHT if c.teacher_weight is None else c.teacher_weight
        return HybridTeacher.build(self.data, scorer, self.out, weight, c.teacher_depth, c.teacher_checkpoint,
                                   verbose=self.verbose)

    def _colbert_rankings(self) -> Dict[str, List[str]]:
        """The ColBERT-mined negative pools: read from the run folder if there (a resumed run, whose model has
        moved on), else mined now by ``negative_checkpoint`` (or the model as it starts) and written there."""
        from ..storage import read_json
        from .evaluation import colbert_rankings

        path = self.out / COLBERT_NEGATIVES_FILE
        if path.exists():
            saved = read_json(path)
            if saved.get("checkpoint") != self.config.negative_checkpoint or saved.get("depth") != \
                    self.config.negative_depth:
                raise ValueError(f"{path} was mined with checkpoint={saved.get('checkpoint')!r}, depth="
                                 f"{saved.get('depth')}; this run asks for {self.config.negative_checkpoint!r}, "
                                 f"{self.config.negative_depth}: use another --out")
            return saved["rankings"]
        if self.resume and (self.out / STATE_FILE).exists():
            raise FileNotFoundError(f"{path} is missing: the ColBERT negatives of this run were mined by the model as "
                                    "it started, which a resumed run no longer has")
        miner = self.colbert
        if self.config.negative_checkpoint is not None:
            from ..model.colbert import ColBERT

            miner = ColBERT.from_pretrained(self.config.negative_checkpoint, device=self.colbert.device)
        if self.verbose:
            _log.info("mining ColBERT negatives for %d questions over %d passages", len(self.data.qrels),
                      len(self.data.docnos))
        rankings = colbert_rankings(miner, self.data, self.config.negative_depth)
        self.out.mkdir(parents=True, exist_ok=True)
        write_json(path, {"checkpoint": self.config.negative_checkpoint, "depth": self.config.negative_depth,
                          "rankings": rankings})
        return rankings

    def _optimizer(self) -> torch.optim.Optimizer:
        c = self.config
        groups: Dict[tuple, List[torch.nn.Parameter]] = {}
        for name, p in self.model.named_parameters():
            if not p.requires_grad:
                continue
            head = name.startswith("projection.")
            decay = not (name.endswith(".bias") or "LayerNorm" in name or "layer_norm" in name)
            groups.setdefault((head, decay), []).append(p)
        params = [{"params": ps, "lr": c.lr if head else (c.backbone_lr if c.backbone_lr is not None else c.lr),
                   "weight_decay": c.weight_decay if decay else 0.0} for (head, decay), ps in sorted(groups.items())]
        for g in params:
            g["base_lr"] = g["lr"]
        return torch.optim.AdamW(params, lr=c.lr, weight_decay=c.weight_decay)

    def _batches(self, epoch: int) -> List[List[Any]]:
        if epoch not in self._epoch_cache:
            examples = self.source.epoch(epoch)
            order = np.random.default_rng([self.config.seed, epoch, 1]).permutation(len(examples))
            bs = self.config.batch_size
            self._epoch_cache = {epoch: [[examples[i] for i in order[a:a + bs]] for a in range(0, len(order), bs)]}
        return self._epoch_cache[epoch]

    # -- one step ------------------------------------------------------------------------------------------
    def _encode(self, tokenized):
        ids = torch.as_tensor(tokenized.input_ids, device=self.device)
        attn = torch.as_tensor(tokenized.attention_mask, device=self.device)
        with torch.autocast(self.device.type, dtype=self.amp or torch.float32, enabled=self.amp is not None):
            if self.frozen is not None and self.model.training:
                embs = self.frozen(ids, attn, self.config.dropout)
            else:
                embs = self.model(ids, attn)
        return embs.float(), torch.as_tensor(tokenized.score_mask, device=self.device)

    def loss(self, batch: Batch) -> torch.Tensor:
        """The configured loss of one batch (the model's current mode decides whether dropout applies)."""
        cfg = self.colbert.config
        q, qm = self._encode(self.colbert.tokenizer.queries(batch.queries))
        d, dm = self._encode(self.colbert.tokenizer.documents(batch.docs))
        sim, red = cfg.similarity, cfg.reduction
        if self.config.in_batch:
            scores = pairwise_scores(q, qm, d, dm, sim, red)           # [queries, docs]
            if batch.form == "qqp":
                scores = scores.T                                      # rows: documents ranking queries
        elif batch.form == "qpp":
            g = batch.group
            scores = aligned_scores(q, qm, d.view(len(q), g, *d.shape[1:]), dm.view(len(q), g, -1), sim, red)
        else:
            scores = _qqp_aligned(q, qm, d, dm, sim, red)             # [docs, (q+, q-)]
        labels = torch.as_tensor(batch.labels, device=self.device)
        valid = torch.as_tensor(batch.valid, device=self.device)
        scale = float(cfg.query_maxlen) if red == "mean" else 1.0
        if self.config.loss == "ce":
            total = cross_entropy(scores, labels, valid, scale)
        else:
            total = mse_to_targets(scores, labels, valid)
        if self.teacher is not None:
            teacher = self.teacher(batch.queries, batch.docs)
            teacher = _like_scores(teacher, batch, self.config.in_batch)
            total = total + self.config.distill_weight * kl_distillation(
                scores, teacher, valid, scale, self.config.distill_temperature)
        return total

    def optimizer_step(self, micro: List[List[Any]]) -> float:
        """One optimizer step over the given micro-batches of examples (gradients accumulated); the mean loss."""
        c = self.config
        for g in self.optimizer.param_groups:
            g["lr"] = g["base_lr"] * lr_factor(self.step, self.total_steps, self.warmup_steps)
        total = 0.0
        for examples in micro:
            loss = self.loss(collate(examples, self.source_data, c.in_batch)) / len(micro)
            (self.scaler.scale(loss) if self.scaler else loss).backward()
            total += float(loss.detach())
            self.examples += len(examples)
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        if c.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), c.max_grad_norm)
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return total

    @property
    def source_data(self) -> QAData:
        return getattr(self.source, "data", self.data)

    # -- run -----------------------------------------------------------------------------------------------
    def train(self) -> TrainResult:
        from ..progress import progress

        if self.resume and (self.out / STATE_FILE).exists():
            self._load_state()
        else:
            if self.resume:  # nothing to continue: say so rather than start afresh in silence
                warnings.warn(f"resume=True, but {self.out} holds no training run yet (no {STATE_FILE}); starting a "
                              "new one", stacklevel=2)
            self.out.mkdir(parents=True, exist_ok=True)
            self.config.save(self.out)
            torch.manual_seed(self.config.seed)
            if self.dev is not None:
                self._evaluate(loss=None)
        self.model.train()
        bar = progress(total=self.total_steps - self.step, desc="training", unit="step", enabled=self.verbose)
        losses: List[float] = []
        try:
            while self.step < self.total_steps:
                epoch, k = divmod(self.step, self.steps_per_epoch)
                acc = self.config.grad_accumulation
                micro = self._batches(epoch)[k * acc:(k + 1) * acc]
                started = time.perf_counter()
                losses.append(self.optimizer_step(micro))
                if self.device.type == "cuda":
                    torch.cuda.synchronize()
                self.seconds += time.perf_counter() - started
                bar.update(1)
                bar.set_postfix(loss=f"{losses[-1]:.4f}", epoch=epoch)
                every = self.config.eval_every or self.steps_per_epoch
                if self.step % every == 0 or self.step == self.total_steps:
                    self._evaluate(loss=float(np.mean(losses)))
                    losses = []
        finally:
            bar.close()
            self.model.eval()
            self.colbert.weights_changed()
        best = self.best or {}
        return TrainResult(self.start, best.get("metrics"), best.get("step"), self.step, self.seconds,
                           self.examples / self.seconds if self.seconds else 0.0, list(self.history))

    def _evaluate(self, loss: Optional[float]) -> None:
        """Dev metrics (if any), history, best checkpoint, latest checkpoint and state, in that order."""
        entry: Dict[str, Any] = {"step": self.step, "epoch": self.step / self.steps_per_epoch, "loss": loss,
                                 "train_seconds": round(self.seconds, 3), "examples": self.examples}
        if self.frozen is not None:
            f = self.frozen
            entry["frozen_cache"] = {"hits": f.hits, "misses": f.misses, "uncached": f.uncached,
                                     "megabytes": round(f.cache_bytes / 2**20, 1)}
            if f.uncached:
                _log.warning("frozen-layer cache full (%.0f MB): %d texts recomputed", f.cache_bytes / 2**20,
                             f.uncached)
        self.colbert.weights_changed()
        if self.dev is not None:
            metrics = evaluate(self.colbert, self.dev, self.config.eval_k)
            entry["dev"] = metrics
            if self.step == 0:
                self.start = metrics
            if self.best is None or metrics[METRIC] > self.best["metrics"][METRIC]:
                self.best = {"step": self.step, "metrics": metrics}
                self._save(self.out / "best")
        elif self.step == self.total_steps:
            self.best = {"step": self.step, "metrics": None}
            self._save(self.out / "best")
        self.history.append(entry)
        if self.step > 0:
            self._save_state()
        write_json(self.out / HISTORY_FILE, self.history)

    def _save(self, folder: Path) -> None:
        self.colbert.save_pretrained(folder)

    def _save_state(self) -> None:
        name = f"checkpoints/step-{self.step:07d}"
        self._save(self.out / name)
        state = {"step": self.step, "checkpoint": name, "optimizer": self.optimizer.state_dict(),
                 "scaler": self.scaler.state_dict() if self.scaler else None, "rng_cpu": torch.get_rng_state(),
                 "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
                 "history": json.dumps(self.history), "best": json.dumps(self.best), "start": json.dumps(self.start),
                 "seconds": self.seconds, "examples": self.examples}
        with atomic_path(self.out / STATE_FILE) as tmp:
            torch.save(state, tmp)
        for old in (self.out / "checkpoints").iterdir():
            if old.name != name.split("/")[1]:
                shutil.rmtree(old)

    def _load_state(self) -> None:
        from ..model import network as m

        saved = TrainConfig.load(self.out)
        if saved != self.config:
            diff = {k: (v, getattr(self.config, k)) for k, v in saved.to_dict().items() if getattr(self.config, k) != v}
            raise ValueError(f"{self.out}: cannot resume with different settings (saved, given): {diff}")
        state = torch.load(self.out / STATE_FILE, weights_only=True)
        net, _ = m.load(self.out / state["checkpoint"])
        self.model.load_state_dict(net.state_dict())
        self.optimizer.load_state_dict(state["optimizer"])
        for g in self.optimizer.param_groups:
            g.setdefault("base_lr", g["lr"])
        if self.scaler and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["rng_cpu"])
        if state["rng_cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng_cuda"])
        self.step, self.seconds, self.examples = state["step"], state["seconds"], state["examples"]
        self.history, self.best = json.loads(state["history"]), json.loads(state["best"])
        self.start = json.loads(state["start"])


def _qqp_aligned(q, qm, d, dm, sim, red) -> torch.Tensor:
    """``[B, 2]``: S(q+_i, d_i), S(q-_i, d_i) with queries interleaved ``[q+_1, q-_1, q+_2, …]``."""
    from ..model.scoring import maxsim

    n = len(d)
    return maxsim(q.view(n, 2, *q.shape[1:]), d[:, None], qm.view(n, 2, -1), dm[:, None], sim, red)


def _like_scores(full: torch.Tensor, batch: Batch, in_batch: bool) -> torch.Tensor:
    """The teacher's all-pairs ``[queries, docs]`` matrix cut to the student's score layout."""
    if batch.form == "qqp":
        full = full.T                                                    # [docs, queries]
        if in_batch:
            return full
        rows = torch.arange(full.shape[0], device=full.device)
        return torch.stack([full[rows, 2 * rows], full[rows, 2 * rows + 1]], dim=1)
    if in_batch:
        return full
    g = batch.group
    cols = torch.arange(full.shape[0], device=full.device)[:, None] * g + torch.arange(g, device=full.device)
    return full.gather(1, cols)
