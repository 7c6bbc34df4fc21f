"""PyLate (sentence-transformers) ColBERT folders::

    modules.json         a sentence-transformers Transformer (at the root) and one Dense module
    config.json, model.safetensors, tokenizer files, sentence_bert_config.json     the Transformer module
    1_Dense/config.json, 1_Dense/model.safetensors     the bias-free projection ``linear.weight [dim, hidden]``
    config_sentence_transformers.json    query_prefix, document_prefix, query_length, document_length, ...
    README.md            (written here) the oldest PyLate release that reads the folder as this package does

What is written is read the same by PyLate 1.2 to 1.6 (checked with ``benchmarks/check_formats.py``; see
docs/formats.md) with two exceptions, each stated in the folder's README.md and warned about when saving:
PyLate before 1.3 has no ``do_query_expansion`` (it always scores the [MASK] expansion vectors), and PyLate before
1.5 reads an empty ``skiplist_words`` as "skip punctuation". The second is avoided where the vocabulary allows: a
skip set that is empty is written as one *inert* token, a vocabulary entry that no text tokenises to (BERT's
``[unused2]``, say), which every release reads as a skiplist that never matches; reading such a folder drops it
again. The Dense module's ``use_residual`` key, which PyLate before 1.3.4 refuses, is left out (its default, off,
is what this package writes).
"""
from __future__ import annotations

import json
import string
import unicodedata
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Dict, Optional, Tuple

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
    _save_backbone,
    _settled,
    _tokenizer,
    _tokens_of,
    _writable,
    register_format,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..network import ColBERTModel
    from ..tokenization import ColBERTTokenizer

ST_MODULES = "modules.json"
ST_CONFIG = "config_sentence_transformers.json"
ST_TRANSFORMER_CONFIG = "sentence_bert_config.json"
DENSE_DIR = "1_Dense"
IDENTITY = "torch.nn.modules.linear.Identity"

#: PyLate's defaults (``pylate.models.ColBERT``) for keys a ``config_sentence_transformers.json`` leaves out
PYLATE_DEFAULTS: Dict[str, Any] = {
    "query_prefix": "[Q] ", "document_prefix": "[D] ", "query_length": 32, "document_length": 180,
    "attend_to_expansion_tokens": False, "skiplist_words": list(string.punctuation), "do_query_expansion": True,
    "similarity_fn_name": "MaxSim",
}
#: the oldest PyLate release checked against this package's exports (docs/formats.md)
PYLATE_OLDEST_CHECKED = (1, 2)
# a PyLate config is recognised by any of these keys (a plain sentence-transformers model has none of them)
_PYLATE_KEYS = ("query_prefix", "document_prefix", "query_length", "document_length", "attend_to_expansion_tokens",
                "skiplist_words", "do_query_expansion")


def _claims(path: Path) -> bool:
    """A folder with ``modules.json`` whose modules or settings are PyLate's."""
    return path.is_dir() and (path / ST_MODULES).exists() and _is_pylate(path)


def _is_pylate(folder: Path) -> bool:
    modules = read_json(folder / ST_MODULES, "sentence-transformers module list")
    if any(str(m.get("type", "")).startswith("pylate.") for m in modules if isinstance(m, dict)):
        return True
    if (folder / ST_CONFIG).exists():
        config = read_json(folder / ST_CONFIG, "sentence-transformers config")
        return isinstance(config, dict) and (config.get("model_type") == "ColBERT"
                                             or any(k in config for k in _PYLATE_KEYS))
    return False


def config_from_pylate(settings: Dict[str, Any], hf_tok, source: PathLike = ST_CONFIG) -> ColBERTConfig:
    """The :class:`ColBERTConfig` of a PyLate ``config_sentence_transformers.json`` (missing keys take PyLate's
    defaults); ``dim`` comes from the Dense module and is set by :func:`read_pylate`."""
    source = Path(source)
    if not isinstance(settings, dict):
        raise ValueError(f"{source}: expected a JSON object of PyLate settings")
    s = {k: (settings[k] if settings.get(k) is not None else d) for k, d in PYLATE_DEFAULTS.items()}
    problems = []
    if s["similarity_fn_name"] != "MaxSim":
        problems.append(f"similarity_fn_name={s['similarity_fn_name']!r} (expected 'MaxSim')")
    for key in ("query_prefix", "document_prefix"):
        if s[key] == "":
            problems.append(f"{key}='' (this package always inserts a marker token)")
    default_prompt = settings.get("default_prompt_name")
    prompt = (settings.get("prompts") or {}).get(default_prompt) if default_prompt else None
    if prompt:
        problems.append(f"default_prompt_name={default_prompt!r} prepends {prompt!r} to every text")
    if problems:
        raise ValueError(f"{source}: cannot represent PyLate settings " + "; ".join(problems))
    expansion = bool(s["do_query_expansion"])
    try:
        config = ColBERTConfig(
            backbone=str(source.parent), query_maxlen=int(s["query_length"]), doc_maxlen=int(s["document_length"]),
            similarity="cosine", normalise=True, reduction="sum", score_query_masks=expansion,
            attend_to_query_masks=expansion and bool(s["attend_to_expansion_tokens"]))
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None
    if not isinstance(s["skiplist_words"], list) or not all(isinstance(w, str) for w in s["skiplist_words"]):
        raise ValueError(f"{source}: skiplist_words should be a list of strings")
    # PyLate maps each word with convert_tokens_to_ids: a word outside the vocabulary becomes the unknown token;
    # a token that no text tokenises to never matches, so skipping it changes nothing (see inert_token)
    markers = (s["query_prefix"], s["document_prefix"])
    inert = _inert_rule(hf_tok, markers)
    skipped = [t for t in _tokens_of(hf_tok, hf_tok.convert_tokens_to_ids(s["skiplist_words"]))
               if inert is None or not inert(t)]
    return _settled(config, hf_tok, markers, skipped, source)


def _bert_punctuation(char: str) -> bool:
    """BERT's pre-tokenizer rule: ASCII symbols and Unicode punctuation each become a word of their own."""
    code = ord(char)
    return 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126 \
        or unicodedata.category(char).startswith("P")


def _wordpiece_prefix(hf_tok) -> Optional[str]:
    """The continuation prefix (``##``) of a WordPiece vocabulary behind BERT's pre-tokenizer; None otherwise."""
    backend = getattr(hf_tok, "backend_tokenizer", None)
    if backend is None:
        return None
    spec = json.loads(backend.to_str())
    model = spec.get("model") or {}
    if model.get("type") != "WordPiece" or (spec.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer":
        return None
    return str(model.get("continuing_subword_prefix", "##"))


def _inert_rule(hf_tok, markers: Collection[str]) -> Optional[Callable[[str], bool]]:
    """Whether no text tokenises to a token in this package or in PyLate, so that skipping it changes nothing
    (None when that cannot be proved for this vocabulary). Proved for WordPiece vocabularies behind BERT's
    pre-tokenizer, which makes every punctuation character a word of its own: a piece is then one punctuation
    character, or (after the ``##`` prefix) has none. So an entry of two or more characters with punctuation
    (``[unused2]``) is never produced, unless it is an added or special token (matched in text as a whole) or a
    marker (PyLate adds its prefixes to the vocabulary)."""
    prefix = _wordpiece_prefix(hf_tok)
    if prefix is None:
        return None
    excluded = set(markers) | set(hf_tok.get_added_vocab()) | set(hf_tok.all_special_tokens)

    def inert(token: str) -> bool:
        rest = token[len(prefix):] if prefix and token.startswith(prefix) else token
        return token not in excluded and len(token) > 1 and any(_bert_punctuation(c) for c in rest)

    return inert


def inert_token(hf_tok, markers: Collection[str]) -> Optional[str]:
    """The vocabulary entry with the lowest id that no text tokenises to (see :func:`_inert_rule`), or None when
    the vocabulary has none that can be proved so (byte-level BPE vocabularies, for instance)."""
    inert = _inert_rule(hf_tok, markers)
    if inert is None:
        return None
    return next((t for t, _ in sorted(hf_tok.get_vocab().items(), key=lambda item: item[1]) if inert(t)), None)


def oldest_pylate(settings: Dict[str, Any]) -> Tuple[Tuple[int, int], str]:
    """The oldest PyLate release (of those checked) that reads the settings as written, and why."""
    if not settings["skiplist_words"]:
        return (1, 5), ("PyLate before 1.5 reads an empty skiplist_words as the punctuation list (this vocabulary has "
                        "no inert token to write in its place)")
    if not settings["do_query_expansion"]:
        return (1, 3), ("PyLate before 1.3 has no do_query_expansion: it would score the [MASK] expansion vectors "
                        "this model leaves out")
    return PYLATE_OLDEST_CHECKED, ""


def pylate_settings(config: ColBERTConfig, tokenizer: "ColBERTTokenizer") -> Dict[str, Any]:
    """The PyLate keys of ``config_sentence_transformers.json`` that make PyLate encode and score as ``config``
    does (or an error naming each setting it cannot represent). An empty skip set is written as an inert token
    where the vocabulary has one, so that PyLate before 1.5 does not read it as the punctuation list."""
    problems = _export_problems(config, "PyLate")
    if config.similarity != "cosine":
        problems.append(f"similarity={config.similarity!r} (PyLate's MaxSim is the dot product of unit vectors)")
    if not config.score_query_masks and config.attend_to_query_masks:
        problems.append("score_query_masks=False with attend_to_query_masks=True (PyLate either scores the [MASK] "
                        "expansion vectors, or with do_query_expansion=false neither scores nor attends to them)")
    _refuse(problems, "PyLate")
    q, d = _marker_tokens(tokenizer)
    skipped = _tokens_of(tokenizer.hf, tokenizer.skipped_ids().tolist())
    if not skipped:
        skipped = [t for t in (inert_token(tokenizer.hf, (q, d)),) if t is not None]
    return {
        "query_prefix": q, "document_prefix": d, "query_length": config.query_maxlen,
        "document_length": config.doc_maxlen, "do_query_expansion": config.score_query_masks,
        "attend_to_expansion_tokens": config.score_query_masks and config.attend_to_query_masks,
        "skiplist_words": skipped, "similarity_fn_name": "MaxSim", "prompts": {}, "default_prompt_name": None,
        "model_type": "ColBERT",
    }


def _module_kind(entry: Dict[str, Any]) -> str:
    return str(entry.get("type", "")).rsplit(".", 1)[-1]


def read_pylate(folder: PathLike):
    """A PyLate (sentence-transformers) ColBERT folder."""
    folder = Path(folder)
    modules = read_json(folder / ST_MODULES, "sentence-transformers module list")
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ValueError(f"{folder / ST_MODULES}: expected a list of module entries")
    # PyLate keeps the Transformer and Dense modules and drops any other (pooling, normalisation)
    kinds = [(_module_kind(m), m) for m in modules]
    transformers_ = [m for k, m in kinds if k == "Transformer"]
    dense = [m for k, m in kinds if k == "Dense"]
    if len(transformers_) != 1 or kinds[0][0] != "Transformer":
        raise ValueError(f"{folder / ST_MODULES}: expected a Transformer module first, found "
                         f"{[m.get('type') for m in modules]}")
    if len(dense) != 1:
        raise ValueError(f"{folder / ST_MODULES}: this package's ColBERT has one bias-free projection, but the "
                         f"folder has {len(dense)} Dense modules"
                         + (" (PyLate would add an untrained one)" if not dense else ""))
    backbone_dir = folder / transformers_[0].get("path", "")
    dense_dir = folder / dense[0].get("path", DENSE_DIR)
    st_path = backbone_dir / ST_TRANSFORMER_CONFIG
    if st_path.exists() and read_json(st_path, "sentence-transformers Transformer config").get("do_lower_case"):
        raise ValueError(f"{st_path}: do_lower_case=true (the Transformer module lowercases text itself); this "
                         "package tokenises text as the tokenizer does")
    dense_config = read_json(dense_dir / "config.json", "Dense module config")
    problems = []
    if dense_config.get("bias", True):
        problems.append("bias=true (the projection is bias-free)")
    if dense_config.get("activation_function", IDENTITY) != IDENTITY:
        problems.append(f"activation_function={dense_config.get('activation_function')!r} (expected {IDENTITY})")
    if dense_config.get("use_residual", False):
        problems.append("use_residual=true")
    if problems:
        raise ValueError(f"{dense_dir / 'config.json'}: cannot represent the Dense module's " + "; ".join(problems))
    st_config_path = folder / ST_CONFIG
    settings = read_json(st_config_path, "sentence-transformers config") if st_config_path.exists() else {}
    hf_tok = _tokenizer(backbone_dir)
    weight = _read_tensor(dense_dir, "linear.weight", "a Dense module stores its matrix as linear.weight")
    config = config_from_pylate(settings, hf_tok, st_config_path)
    try:
        config = config.replace(dim=int(weight.shape[0]), backbone=str(folder))
    except ValueError as err:
        raise ValueError(f"{dense_dir}: {err}") from None
    if dense_config.get("out_features", weight.shape[0]) != weight.shape[0]:
        raise ValueError(f"{dense_dir / 'config.json'} says out_features={dense_config.get('out_features')} but "
                         f"linear.weight has {weight.shape[0]} rows")
    return _assemble(backbone_dir, weight, config, hf_tok, folder)


def write_pylate(model: "ColBERTModel", tokenizer: "ColBERTTokenizer", folder: PathLike, dtype=None) -> Path:
    """Write a folder that ``pylate.models.ColBERT(folder)`` loads."""
    from safetensors.torch import save_file

    config = model.config
    settings = pylate_settings(config, tokenizer)
    oldest, why = oldest_pylate(settings)
    release = ".".join(map(str, oldest))
    if oldest > PYLATE_OLDEST_CHECKED:
        warnings.warn(f"this export needs PyLate {release} or later: {why}", stacklevel=3)
    weight = model.projection.weight
    with _writable(folder) as tmp:
        _save_backbone(model.backbone, tmp, dtype)
        tokenizer.hf.save_pretrained(tmp)
        write_json(tmp / ST_TRANSFORMER_CONFIG, {"max_seq_length": config.doc_maxlen - 1, "do_lower_case": False})
        write_json(tmp / ST_MODULES, [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": DENSE_DIR, "type": "pylate.models.Dense.Dense"},
        ])
        (tmp / DENSE_DIR).mkdir()
        # no use_residual key: PyLate before 1.3.4 refuses it, later releases default it to off
        write_json(tmp / DENSE_DIR / "config.json", {
            "in_features": int(weight.shape[1]), "out_features": int(weight.shape[0]), "bias": False,
            "activation_function": IDENTITY})
        save_file({"linear.weight": weight.detach().to("cpu", dtype or weight.dtype).contiguous()},
                  str(tmp / DENSE_DIR / "model.safetensors"), metadata={"format": "pt"})
        write_json(tmp / ST_CONFIG, settings)
        (tmp / "README.md").write_text(
            "# A ColBERT model for PyLate\n\nWritten by pyterrier-fandom-colbert. Load it with "
            "`pylate.models.ColBERT(model_name_or_path=...)`, PyLate " + release + " or later"
            + (f" ({why})" if why else "") + ".\n", encoding="utf-8")
    return Path(folder)


register_format(CheckpointFormat(
    name="pylate", claims=_claims, read=read_pylate, write=write_pylate, marker_files=(ST_MODULES, ST_CONFIG),
    expects=f"{ST_MODULES} with a PyLate {ST_CONFIG} (PyLate)", rank=2, detect_rank=1))
