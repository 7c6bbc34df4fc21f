"""colbert-ai checkpoint folders (ColBERTv2, PLAID)::

    config.json          the backbone's transformers config with ``architectures: ["HF_ColBERT"]``
    model.safetensors    ``<base_model_prefix>.*`` backbone weights and ``linear.weight [dim, hidden]``
                         (older folders: pytorch_model.bin)
    tokenizer files
    artifact.metadata    colbert-ai's ColBERTConfig as JSON: query_maxlen, doc_maxlen, dim, marker tokens, ...

colbert-ai zeroes the query vectors of its tokenizer's padding token, and pads queries with [MASK]: a tokenizer
whose padding token is [MASK] (as PyLate saves it) leaves every [MASK] vector unscored. Such a folder is read as
``score_query_masks=False``, and exports are written with the backbone's own padding token.
"""
from __future__ import annotations

import json
import string
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List

from ...storage import read_json, write_json
from ..config import ColBERTConfig
from .base import (
    CheckpointFormat,
    PathLike,
    _assemble,
    _export_problems,
    _marker_tokens,
    _read_tensor,
    _refuse,
    _settled,
    _state,
    _tokenizer,
    _tokens_of,
    _writable,
    register_format,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..network import ColBERTModel
    from ..tokenization import ColBERTTokenizer

COLBERT_AI_METADATA = "artifact.metadata"
COLBERT_AI_ARCHITECTURE = "HF_ColBERT"

#: colbert-ai's defaults (its ``colbert/infra/config/settings.py``) for keys an ``artifact.metadata`` leaves out
COLBERT_AI_DEFAULTS: Dict[str, Any] = {
    "query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_token": "[Q]", "doc_token": "[D]",
    "query_maxlen": 32, "doc_maxlen": 220, "dim": 128, "mask_punctuation": True, "attend_to_mask_tokens": False,
    "similarity": "cosine", "interaction": "colbert",
}


def _claims(path: Path) -> bool:
    """A ``.dnn`` file (colbert-ai's deprecated format), a folder with ``artifact.metadata``, or one whose
    ``config.json`` names the ``HF_ColBERT`` architecture."""
    if path.is_file() and path.suffix == ".dnn":
        return True
    if not path.is_dir():
        return False
    if (path / COLBERT_AI_METADATA).exists():
        return True
    if (path / "config.json").exists():
        try:
            architectures = json.loads((path / "config.json").read_text(encoding="utf-8")).get("architectures")
        except (ValueError, UnicodeDecodeError, AttributeError):
            return False
        return bool(architectures) and COLBERT_AI_ARCHITECTURE in architectures
    return False


def colbert_ai_punctuation(hf_tok) -> List[str]:
    """The tokens colbert-ai skips in documents when ``mask_punctuation`` is on: for each character of
    ``string.punctuation``, the first token of its encoding."""
    ids = [hf_tok.encode(c, add_special_tokens=False) for c in string.punctuation]
    return list(dict.fromkeys(_tokens_of(hf_tok, [i[0] for i in ids if i])))


def config_from_colbert_ai(metadata: Dict[str, Any], hf_tok, source: PathLike = COLBERT_AI_METADATA
                           ) -> ColBERTConfig:
    """The :class:`ColBERTConfig` of a colbert-ai ``artifact.metadata`` (missing keys take colbert-ai's defaults)."""
    source = Path(source)
    if not isinstance(metadata, dict):
        raise ValueError(f"{source}: expected a JSON object of colbert-ai settings")
    if isinstance(metadata.get("config"), dict):  # colbert-ai accepts settings nested under "config" too
        metadata = metadata["config"]
    m = {k: (metadata[k] if metadata.get(k) is not None else d) for k, d in COLBERT_AI_DEFAULTS.items()}
    problems = []
    if m["interaction"] != "colbert":
        problems.append(f"interaction={m['interaction']!r} (only 'colbert' MaxSim is supported)")
    if m["similarity"] not in ("cosine", "l2"):
        problems.append(f"similarity={m['similarity']!r} (expected 'cosine' or 'l2')")
    if problems:
        raise ValueError(f"{source}: cannot represent colbert-ai settings " + "; ".join(problems))
    try:
        config = ColBERTConfig(
            backbone=str(source.parent), query_maxlen=int(m["query_maxlen"]), doc_maxlen=int(m["doc_maxlen"]),
            dim=int(m["dim"]), similarity=m["similarity"], normalise=True, reduction="sum",
            score_query_masks=True, attend_to_query_masks=bool(m["attend_to_mask_tokens"]),
            query_marker=str(m["query_token"]), doc_marker=str(m["doc_token"]))
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None
    if hf_tok.pad_token_id is not None and hf_tok.pad_token_id == hf_tok.mask_token_id:
        # colbert-ai zeroes the vectors of padding tokens: with [MASK] as padding, no [MASK] vector scores
        config = config.replace(score_query_masks=False)
    skipped = colbert_ai_punctuation(hf_tok) if m["mask_punctuation"] else []
    return _settled(config, hf_tok, (m["query_token_id"], m["doc_token_id"]), skipped, source)


def colbert_ai_metadata(config: ColBERTConfig, tokenizer: "ColBERTTokenizer") -> Dict[str, Any]:
    """The ``artifact.metadata`` that makes colbert-ai encode and score as ``config`` does (or an error naming
    each setting it cannot represent)."""
    problems = _export_problems(config, "colbert-ai")
    if config.similarity not in ("cosine", "l2", "l2_normalised"):
        problems.append(f"similarity={config.similarity!r} (colbert-ai knows 'cosine' and 'l2'; over the unit vectors "
                        "it scores, similarity='cosine' gives the same scores)")
    if not config.score_query_masks:
        problems.append("score_query_masks=False (colbert-ai scores every query position, [MASK]s included)")
    skipped = tokenizer.skipped_ids().tolist()
    vocab = tokenizer.hf.get_vocab()
    punct = sorted(vocab[t] for t in colbert_ai_punctuation(tokenizer.hf))
    if skipped and skipped != punct:
        problems.append(f"skip_punctuation={config.skip_punctuation}, skiplist={list(config.skiplist)} skip "
                        f"{len(skipped)} token(s), but colbert-ai's mask_punctuation skips exactly its {len(punct)} "
                        "punctuation tokens (or none)")
    _refuse(problems, "colbert-ai")
    q, d = _marker_tokens(tokenizer)
    return {
        "query_token_id": q, "doc_token_id": d, "query_token": config.query_marker, "doc_token": config.doc_marker,
        "query_maxlen": config.query_maxlen, "doc_maxlen": config.doc_maxlen, "dim": config.dim,
        "mask_punctuation": bool(skipped), "attend_to_mask_tokens": config.attend_to_query_masks,
        "similarity": "cosine" if config.similarity == "cosine" else "l2", "interaction": "colbert",
        "checkpoint": None, "model_name": None,
        "meta": {"written_by": "pyterrier-fandom-colbert"},
    }


def read_colbert_ai(folder: PathLike):
    """A colbert-ai checkpoint folder (``HF_ColBERT`` weights + ``artifact.metadata``)."""
    folder = Path(folder)
    meta_path = folder / COLBERT_AI_METADATA
    metadata = read_json(meta_path, "colbert-ai settings file") if meta_path.exists() else {}
    hf_tok = _tokenizer(folder)
    config = config_from_colbert_ai(metadata, hf_tok, meta_path)
    weight = _read_tensor(folder, "linear.weight", "a colbert-ai checkpoint stores its projection as linear.weight")
    if weight.shape[0] != config.dim:
        raise ValueError(f"{meta_path} says dim={config.dim} but linear.weight has {weight.shape[0]} rows")
    return _assemble(folder, weight, config, hf_tok, folder)


def _with_own_padding(hf_tok, backbone):
    """``hf_tok``, or a copy whose padding token is the backbone's own when it pads with [MASK] (PyLate saves its
    tokenizers so): colbert-ai zeroes the padding token's query vectors, which would be every [MASK]."""
    import copy

    if hf_tok.pad_token_id is not None and hf_tok.pad_token_id != hf_tok.mask_token_id:
        return hf_tok
    pad_id = getattr(backbone.config, "pad_token_id", None)
    if not isinstance(pad_id, int) or pad_id == hf_tok.mask_token_id or not 0 <= pad_id < len(hf_tok):
        raise ValueError(f"cannot save in the colbert-ai format: the tokenizer pads with {hf_tok.pad_token!r}, the "
                         f"mask token, and the backbone's config names no other padding token (pad_token_id="
                         f"{pad_id!r}); colbert-ai would zero every [MASK] query vector")
    own = copy.deepcopy(hf_tok)
    own.pad_token = _tokens_of(hf_tok, [pad_id])[0]
    return own


def write_colbert_ai(model: "ColBERTModel", tokenizer: "ColBERTTokenizer", folder: PathLike, dtype=None) -> Path:
    """Write a folder that colbert-ai's ``Checkpoint(folder)`` loads."""
    import copy

    from safetensors.torch import save_file

    metadata = colbert_ai_metadata(model.config, tokenizer)
    if not metadata["mask_punctuation"]:
        warnings.warn("saving with mask_punctuation=false: colbert-ai 0.2.x only defines its skiplist when "
                      "mask_punctuation is on, so its document encoder needs `checkpoint.skiplist = {}` after "
                      "loading (see docs/formats.md)", stacklevel=3)
    backbone = model.backbone
    hf_tok = _with_own_padding(tokenizer.hf, backbone)
    prefix = backbone.base_model_prefix
    with _writable(folder) as tmp:
        state = {f"{prefix}.{k}": v for k, v in _state(backbone, dtype).items()}
        state["linear.weight"] = model.projection.weight.detach().to("cpu", dtype or model.projection.weight.dtype
                                                                     ).contiguous().clone()
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        hf_config = copy.deepcopy(backbone.config)
        hf_config.architectures = [COLBERT_AI_ARCHITECTURE]
        hf_config.dtype = dtype or model.projection.weight.dtype
        hf_config.save_pretrained(tmp)
        hf_tok.save_pretrained(tmp)
        write_json(tmp / COLBERT_AI_METADATA, metadata)
    return Path(folder)


register_format(CheckpointFormat(
    name="colbert-ai", claims=_claims, read=read_colbert_ai, write=write_colbert_ai,
    marker_files=(COLBERT_AI_METADATA, "config.json"),
    expects=f"{COLBERT_AI_METADATA} or a {COLBERT_AI_ARCHITECTURE} config.json (colbert-ai)", rank=1, detect_rank=2))
