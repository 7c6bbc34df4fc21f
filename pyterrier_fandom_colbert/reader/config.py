"""``ReaderConfig``: the settings of an extractive reader, saved beside its weights."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..storage import JsonConfig

#: the file that holds a reader folder's settings
CONFIG_FILE = "reader_config.json"
#: where the reader's frozen lower layers come from: the package's default ColBERT checkpoint's backbone
DEFAULT_BASE = "colbert-default"


@dataclass(frozen=True)
class ReaderConfig(JsonConfig):
    """An extractive reader over ``[CLS] question [SEP] passage [SEP]``.

    * ``base``: the BERT backbone whose embeddings and lower ``frozen_layers`` layers the reader runs unchanged
      (``"colbert-default"``: the package's default ColBERT checkpoint; or a backbone folder). Only the upper
      layers and the span head are the reader's own weights, so a shipped reader stays small.
    * ``base_digest``: the XXH3-128 of the base's weights file the reader was trained over; another base is
      refused on load (its lower layers would feed the upper ones something they never saw).
    * ``max_length``: tokens per window (question, passage and the three special tokens); longer passages are
      read in windows ``stride`` passage tokens apart.
    * ``question_maxlen``: question tokens kept; ``max_answer_tokens``: the longest span considered.
    """

    base: str = DEFAULT_BASE
    base_digest: str = ""
    frozen_layers: int = 4
    max_length: int = 256
    question_maxlen: int = 40
    stride: int = 128
    max_answer_tokens: int = 30

    def __post_init__(self) -> None:
        for name in ("max_length", "question_maxlen", "stride", "max_answer_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ReaderConfig.{name}={value!r}; expected a positive integer")
        if isinstance(self.frozen_layers, bool) or not isinstance(self.frozen_layers, int) or self.frozen_layers < 0:
            raise ValueError(f"ReaderConfig.frozen_layers={self.frozen_layers!r}; expected an integer >= 0")
        if self.question_maxlen + 3 >= self.max_length:
            raise ValueError(f"ReaderConfig.question_maxlen={self.question_maxlen} leaves no room for the passage "
                             f"in max_length={self.max_length} tokens")
        if self.stride > self.max_length - self.question_maxlen - 3:
            raise ValueError(f"ReaderConfig.stride={self.stride} is longer than a window's passage part "
                             f"({self.max_length - self.question_maxlen - 3} tokens): text would be skipped")

    def replace(self, **changes: Any) -> "ReaderConfig":
        return replace(self, **changes)
